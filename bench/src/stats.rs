//! The clock shared by every process of a run, and the few statistics the table needs.

use std::time::Duration;

/// CLOCK_MONOTONIC in nanoseconds.
///
/// `Instant` reads the same clock on Linux but cannot be sent to another process; every
/// process of one run (Rust children, Python children via `time.clock_gettime_ns`) reads
/// this clock, so a timestamp taken in one is comparable with one taken in another.
pub fn mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC always exists on Linux.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_MONOTONIC) failed");
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Nanoseconds of a duration, saturating.
pub fn ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Latency samples in nanoseconds, sorted on creation.
#[derive(Debug, Clone, Default)]
pub struct Samples {
    sorted: Vec<u64>,
}

impl Samples {
    pub fn new(mut v: Vec<u64>) -> Samples {
        v.sort_unstable();
        Samples { sorted: v }
    }

    pub fn len(&self) -> usize {
        self.sorted.len()
    }

    pub fn is_empty(&self) -> bool {
        self.sorted.is_empty()
    }

    /// The `q`-quantile (0..=1) by the nearest-rank method: a value that was observed.
    pub fn quantile(&self, q: f64) -> u64 {
        if self.sorted.is_empty() {
            return 0;
        }
        let n = self.sorted.len();
        let rank = (q * n as f64).ceil() as usize;
        self.sorted[rank.clamp(1, n) - 1]
    }

    pub fn median(&self) -> u64 {
        self.quantile(0.5)
    }

    pub fn p99(&self) -> u64 {
        self.quantile(0.99)
    }

    pub fn sorted(&self) -> &[u64] {
        &self.sorted
    }
}

/// `123 µs`, `1.23 ms`, `1.2 s`: three significant digits, for the table.
pub fn fmt_ns(ns: u64) -> String {
    let v = ns as f64;
    if v < 1e3 {
        format!("{ns} ns")
    } else if v < 1e6 {
        format!("{} µs", sig3(v / 1e3))
    } else if v < 1e9 {
        format!("{} ms", sig3(v / 1e6))
    } else {
        format!("{} s", sig3(v / 1e9))
    }
}

/// Three significant digits without a trailing exponent: 1.23, 12.3, 123.
pub fn sig3(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// A ratio for the table: `2.07×`.
pub fn fmt_ratio(r: f64) -> String {
    format!("{}×", sig3(r))
}

/// `12,345`.
pub fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// xorshift64*: the settle delays and the order of measures need spread, not secrecy.
pub struct Rng(u64);

impl Rng {
    /// Seeded from the clock: another sequence each run.
    pub fn new() -> Rng {
        Rng::seeded(mono_ns())
    }

    /// The same sequence in every run.
    pub fn seeded(seed: u64) -> Rng {
        Rng(seed | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Shuffles `items` (Fisher–Yates).
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            items.swap(i, (self.next() % (i as u64 + 1)) as usize);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_quantiles() {
        let s = Samples::new((1..=100).rev().collect());
        assert_eq!(s.median(), 50);
        assert_eq!(s.p99(), 99);
        assert_eq!(s.quantile(1.0), 100);
        assert_eq!(s.quantile(0.0), 1);
        assert_eq!(Samples::new(vec![]).median(), 0);
    }

    #[test]
    fn formatting() {
        assert_eq!(fmt_ns(950), "950 ns");
        assert_eq!(fmt_ns(45_300), "45.3 µs");
        assert_eq!(fmt_ns(1_234_000), "1.23 ms");
        assert_eq!(fmt_ratio(2.066), "2.07×");
        assert_eq!(thousands(1_234_567), "1,234,567");
        assert_eq!(thousands(999), "999");
    }

    #[test]
    fn the_clock_moves_forward() {
        let a = mono_ns();
        let b = mono_ns();
        assert!(b >= a && a > 0);
    }
}
