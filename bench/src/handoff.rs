//! The handoff row: two processes pass one lock back and forth.
//!
//! One sample: the waiter is told to `lock` and blocks in its implementation's own wait; after
//! a random settle delay (so the release lands at a random point of any poll cycle), the holder
//! is told to `unlock`. The sample is the waiter's CLOCK_MONOTONIC timestamp when `lock`
//! returned minus the holder's timestamp just before it called `unlock`; the holder reports
//! its timestamp only when asked afterwards, so the orchestrating process sleeps (and leaves
//! the CPUs to the two children and Redis) while the lock changes hands. Then the roles swap.
//! Rows compared with each other run in alternating blocks ([`run_alternating`]).

use std::process::Command;
use std::time::Duration;

use crate::proc::{Proc, num};
use crate::stats::{Rng, Samples};

pub struct Handoff {
    pub samples: Samples,
    /// Of the samples, how many found the waiter blocked in a Redis blocking command
    /// (`blocked_clients` ≥ 1 on the server) just before the release.
    pub blocked: usize,
}

/// Makes child `i` (0 or 1) of a hand-off row.
pub type MakeChild<'a> = &'a dyn Fn(usize) -> Result<Command, String>;

pub struct Plan {
    pub samples: usize,
    pub warmup: usize,
    pub settle_min: Duration,
    pub settle_max: Duration,
}

/// Runs the handoff with two children made by `make` (called with 0 and 1).
pub fn run(name: &str, server_url: &str, plan: &Plan, make: MakeChild) -> Result<Handoff, String> {
    Ok(run_alternating(&[(name, make)], server_url, plan, 1)?.remove(0))
}

/// Runs several handoffs in alternating blocks of samples, each pair of children started once:
/// one after the other, rows whose ratio the report gives moved with the machine's drift
/// (a floor measured at 174 µs in one run and 239 µs in the next), so the rows compared share
/// it. Returns one [`Handoff`] per row, in order. A pair's holder keeps its lock while the
/// others run their blocks (about 2 s each here), which is far within the rows' 30 s TTL, also
/// for the bare-requests row, which does not renew.
pub fn run_alternating(
    rows: &[(&str, MakeChild)],
    server_url: &str,
    plan: &Plan,
    blocks: usize,
) -> Result<Vec<Handoff>, String> {
    let mut pairs = Vec::with_capacity(rows.len());
    for (name, make) in rows {
        let mut pair = Pair::start(name, server_url, make)?;
        pair.sample(plan, plan.warmup, false)?;
        pairs.push(pair);
    }
    let per_block = plan.samples.div_ceil(blocks.max(1));
    for _ in 0..blocks.max(1) {
        for pair in &mut pairs {
            pair.sample(plan, per_block, true)?;
        }
    }
    pairs.into_iter().map(Pair::finish).collect()
}

/// Two children passing one lock back and forth, and what their hand-offs measured so far.
struct Pair {
    holder: Proc,
    waiter: Proc,
    info: redis::Connection,
    rng: Rng,
    samples: Vec<u64>,
    blocked: usize,
}

impl Pair {
    /// Starts the children; the first takes the lock.
    fn start(name: &str, server_url: &str, make: MakeChild) -> Result<Pair, String> {
        let mut a = Proc::spawn(&format!("{name} child 0"), make(0)?)?;
        let mut b = Proc::spawn(&format!("{name} child 1"), make(1)?)?;
        a.expect("ready")?;
        b.expect("ready")?;
        let info = redis::Client::open(server_url)
            .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(5)))
            .map_err(|e| e.to_string())?;
        info.set_read_timeout(Some(Duration::from_secs(5)))
            .map_err(|e| e.to_string())?;
        a.send("lock")?;
        a.expect("locked")?;
        Ok(Pair {
            holder: a,
            waiter: b,
            info,
            rng: Rng::new(),
            samples: Vec::new(),
            blocked: 0,
        })
    }

    /// `n` hand-offs, kept as samples when `keep` (otherwise a warm-up).
    fn sample(&mut self, plan: &Plan, n: usize, keep: bool) -> Result<(), String> {
        for _ in 0..n {
            self.waiter.send("lock")?;
            let span = plan.settle_max.saturating_sub(plan.settle_min);
            std::thread::sleep(plan.settle_min + span.mul_f64(self.rng.unit()));
            let was_blocked = blocked_clients(&mut self.info)? >= 1;
            self.holder.send("unlock")?;
            let t1 = num(&self.waiter.expect("locked")?)?;
            self.holder.send("when")?;
            let t0 = num(&self.holder.expect("unlocked")?)?;
            if keep {
                self.samples.push(t1.saturating_sub(t0));
                self.blocked += usize::from(was_blocked);
            }
            std::mem::swap(&mut self.holder, &mut self.waiter);
        }
        Ok(())
    }

    /// Releases the lock and ends the children.
    fn finish(mut self) -> Result<Handoff, String> {
        self.holder.send("unlock")?;
        self.holder.send("when")?;
        self.holder.expect("unlocked")?;
        self.holder.finish()?;
        self.waiter.finish()?;
        Ok(Handoff {
            samples: Samples::new(self.samples),
            blocked: self.blocked,
        })
    }
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
