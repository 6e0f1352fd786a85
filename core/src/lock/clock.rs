//! The clock a lease's validity is counted on: one that keeps running while the machine is
//! suspended (`CLOCK_BOOTTIME` on Linux). `Instant` is `CLOCK_MONOTONIC`, which stops during a
//! suspend: a holder that wakes up after the key expired would still believe it holds the
//! lock. Deadlines for I/O and for the renew thread's schedule stay on `Instant`.

use std::time::{Duration, Instant};

/// A reading of a `Clock`: the time since some fixed point (boot).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Stamp(Duration);

impl Stamp {
    /// The reading `d` after the clock's origin (boot).
    pub fn at(d: Duration) -> Stamp {
        Stamp(d)
    }

    /// The reading `us` microseconds after the clock's origin.
    #[cfg(test)]
    pub(crate) fn from_micros(us: u64) -> Stamp {
        Stamp::at(Duration::from_micros(us))
    }

    /// The time from `earlier` to this reading (zero if `earlier` is later).
    pub fn since(self, earlier: Stamp) -> Duration {
        self.0.saturating_sub(earlier.0)
    }
}

impl std::ops::Add<Duration> for Stamp {
    type Output = Stamp;
    fn add(self, d: Duration) -> Stamp {
        Stamp(self.0.saturating_add(d))
    }
}

/// A reading of a [`Clock`] with the `Instant` read beside it: later readings of the clock
/// convert to `Instant`s without reading either clock again.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Reading {
    pub(crate) stamp: Stamp,
    pub(crate) instant: Instant,
}

impl Reading {
    /// The `Instant` at which the clock will read `at`, as far as could be told at this
    /// reading (the reading's instant, if the clock already read `at` then).
    pub(crate) fn instant_of(&self, at: Stamp) -> Instant {
        self.instant + at.since(self.stamp)
    }
}

/// Where lease time comes from; tests drive their own.
pub(crate) trait Clock: Send + Sync {
    fn now(&self) -> Stamp;

    /// This clock's reading now, with the `Instant` now.
    fn read(&self) -> Reading {
        Reading {
            stamp: self.now(),
            instant: Instant::now(),
        }
    }

    /// The `Instant` at which this clock will read `at`, as far as can be told now (now, if
    /// it already did).
    fn instant_of(&self, at: Stamp) -> Instant {
        self.read().instant_of(at)
    }
}

/// `CLOCK_BOOTTIME` on Linux: includes the time the machine was suspended. Elsewhere the
/// monotonic clock (which may not).
pub(crate) struct Boottime;

impl Clock for Boottime {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    fn now(&self) -> Stamp {
        let t = rustix::time::clock_gettime(rustix::time::ClockId::Boottime);
        Stamp::at(Duration::new(t.tv_sec as u64, t.tv_nsec as u32))
    }

    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    fn now(&self) -> Stamp {
        static START: std::sync::LazyLock<Instant> = std::sync::LazyLock::new(Instant::now);
        Stamp::at(START.elapsed())
    }
}

/// A clock that moves only when told to, for tests.
#[cfg(test)]
pub(crate) struct ManualClock(std::sync::Mutex<Duration>);

#[cfg(test)]
impl ManualClock {
    pub(crate) fn new() -> ManualClock {
        ManualClock(std::sync::Mutex::new(Duration::from_secs(1000)))
    }

    pub(crate) fn advance(&self, d: Duration) {
        *self.0.lock().unwrap() += d;
    }
}

#[cfg(test)]
impl Clock for ManualClock {
    fn now(&self) -> Stamp {
        Stamp::at(*self.0.lock().unwrap())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boottime_runs_forward_with_the_monotonic_clock() {
        let clock = Boottime;
        let (a, i) = (clock.now(), Instant::now());
        std::thread::sleep(Duration::from_millis(20));
        let (b, j) = (clock.now(), Instant::now());
        let boot = b.since(a);
        let mono = j.duration_since(i);
        assert!(boot >= Duration::from_millis(20), "{boot:?}");
        assert!(
            boot.abs_diff(mono) < Duration::from_millis(5),
            "{boot:?} vs {mono:?}"
        );
    }
}
