//! Clocks that drift (a rate near 1) and, for a client's monotonic clock, stop while its
//! machine is suspended. True time is the world's; every clock is a function of it (µs).

/// A clock that reads `offset + rate · t`, minus the time it spent stopped.
#[derive(Clone, Debug)]
pub struct Clock {
    offset: f64,
    rate: f64,
    /// Total true time spent stopped before `stopped_at`.
    stopped_total: u64,
    stopped_at: Option<u64>,
}

impl Clock {
    /// A running clock.
    pub fn new(offset: u64, rate: f64) -> Clock {
        Clock {
            offset: offset as f64,
            rate,
            stopped_total: 0,
            stopped_at: None,
        }
    }

    /// The reading at true time `t` (µs).
    pub fn at(&self, t: u64) -> u64 {
        let stopped = self.stopped_total + self.stopped_at.map_or(0, |s| t.saturating_sub(s));
        (self.offset + self.rate * t.saturating_sub(stopped) as f64) as u64
    }

    /// The first true time, from `now` on, at which the clock reads at least `reading`,
    /// assuming it keeps running (a stopped clock is asked again once it runs).
    pub fn when(&self, reading: u64, now: u64) -> u64 {
        let current = self.at(now);
        if reading <= current {
            return now;
        }
        now + ((reading - current) as f64 / self.rate).ceil() as u64
    }

    /// Stops the clock at `t` (a suspend).
    pub fn stop(&mut self, t: u64) {
        if self.stopped_at.is_none() {
            self.stopped_at = Some(t);
        }
    }

    /// Starts it again at `t`.
    pub fn start(&mut self, t: u64) {
        if let Some(s) = self.stopped_at.take() {
            self.stopped_total += t.saturating_sub(s);
        }
    }

    /// Whether it is stopped.
    pub fn is_stopped(&self) -> bool {
        self.stopped_at.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stopped_clock_resumes_where_it_stopped() {
        let mut c = Clock::new(1000, 1.0);
        assert_eq!(c.at(10), 1010);
        c.stop(10);
        assert_eq!(c.at(50), 1010);
        c.start(50);
        assert_eq!(c.at(60), 1020);
        assert_eq!(c.when(1030, 60), 70);
    }
}
