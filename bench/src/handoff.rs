//! The handoff row: two processes pass one lock back and forth.
//!
//! One sample: the waiter is told to `lock` and blocks in its implementation's own wait; after
//! a random settle delay (so the release lands at a random point of any poll cycle), the holder
//! is told to `unlock`. The sample is the waiter's CLOCK_MONOTONIC timestamp when `lock`
//! returned minus the holder's timestamp just before it called `unlock`; the holder reports
//! its timestamp only when asked afterwards, so the orchestrating process sleeps (and leaves
//! the CPUs to the two children and Redis) while the lock changes hands. Then the roles swap.

use std::process::Command;
use std::time::Duration;

use crate::proc::{Proc, num};
use crate::stats::Samples;

pub struct Handoff {
    pub samples: Samples,
    /// Of the samples, how many found the waiter blocked in a Redis blocking command
    /// (`blocked_clients` ≥ 1 on the server) just before the release.
    pub blocked: usize,
}

pub struct Plan {
    pub samples: usize,
    pub warmup: usize,
    pub settle_min: Duration,
    pub settle_max: Duration,
}

/// Runs the handoff with two children made by `make` (called with 0 and 1).
pub fn run(
    name: &str,
    server_url: &str,
    plan: &Plan,
    make: &dyn Fn(usize) -> Result<Command, String>,
) -> Result<Handoff, String> {
    let mut a = Proc::spawn(&format!("{name} child 0"), make(0)?)?;
    let mut b = Proc::spawn(&format!("{name} child 1"), make(1)?)?;
    a.expect("ready")?;
    b.expect("ready")?;
    let mut info = redis::Client::open(server_url)
        .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(5)))
        .map_err(|e| e.to_string())?;
    info.set_read_timeout(Some(Duration::from_secs(5)))
        .map_err(|e| e.to_string())?;

    a.send("lock")?;
    a.expect("locked")?;
    let (mut holder, mut waiter) = (a, b);
    let mut rng = Rng::new();
    let mut samples = Vec::with_capacity(plan.samples);
    let mut blocked = 0;
    for i in 0..plan.warmup + plan.samples {
        waiter.send("lock")?;
        let span = plan.settle_max.saturating_sub(plan.settle_min);
        std::thread::sleep(plan.settle_min + span.mul_f64(rng.unit()));
        let was_blocked = blocked_clients(&mut info)? >= 1;
        holder.send("unlock")?;
        let t1 = num(&waiter.expect("locked")?)?;
        holder.send("when")?;
        let t0 = num(&holder.expect("unlocked")?)?;
        if i >= plan.warmup {
            samples.push(t1.saturating_sub(t0));
            blocked += usize::from(was_blocked);
        }
        std::mem::swap(&mut holder, &mut waiter);
    }
    holder.send("unlock")?;
    holder.send("when")?;
    holder.expect("unlocked")?;
    holder.finish()?;
    waiter.finish()?;
    Ok(Handoff {
        samples: Samples::new(samples),
        blocked,
    })
}

fn blocked_clients(conn: &mut redis::Connection) -> Result<u64, String> {
    let info: String = redis::cmd("INFO")
        .arg("clients")
        .query(conn)
        .map_err(|e| e.to_string())?;
    Ok(info
        .lines()
        .find_map(|l| l.strip_prefix("blocked_clients:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0))
}

/// xorshift64*, seeded from the clock: the settle delays need spread, not secrecy.
pub struct Rng(u64);

impl Rng {
    pub fn new() -> Rng {
        Rng(crate::stats::mono_ns() | 1)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let v = self.0.wrapping_mul(0x2545_f491_4f6c_dd1d);
        (v >> 11) as f64 / (1u64 << 53) as f64
    }
}
