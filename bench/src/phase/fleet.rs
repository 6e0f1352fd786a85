//! Waiting at fleet scale: 1,000 threads of one process (one client) waiting on one held
//! lock, and 1,000 threads waiting on 1,000 held locks. While nothing is released: Redis's
//! commands per waiting thread per second, the connections opened, and the connections
//! blocked in a wait (Redis's `INFO`); then everything is released, and every thread must get
//! its lock: on one lock, one after another, so the time per hand-off is set beside the
//! single waiter's hand-off row.

use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

use redmutex::Client;

use crate::info::Info;
use crate::phase::{Ctx, Phase, progress};
use crate::report::{Mark, Row};

/// How many threads wait.
const THREADS: usize = 1000;

/// Runs both cases; `single` is the single waiter's hand-off (median, ns) of this run.
pub fn run(ctx: &Ctx, single: u64) -> Result<Phase<()>, String> {
    let mut rows = Vec::new();
    for (label, locks) in [("on one held lock", 1), ("on 1,000 held locks", THREADS)] {
        progress(&format!("fleet: {THREADS} threads waiting {label}"));
        let m = measure(ctx, label, locks)?;
        rows.extend(m.rows(label, locks, single));
    }
    Ok(Phase { rows, data: () })
}

/// What one case measured.
struct Measured {
    commands_per_second: f64,
    opened: u64,
    blocked: u64,
    open: u64,
    window: Duration,
    /// From the release to the last thread's grant.
    all_in: Duration,
}

impl Measured {
    fn rows(&self, label: &str, locks: usize, single: u64) -> Vec<Row> {
        let name = |what: &str| format!("fleet: {THREADS} threads waiting {label}, {what}");
        let per_thread = self.commands_per_second / THREADS as f64;
        let mark = |ok: bool| if ok { Mark::Pass } else { Mark::Miss };
        let mut rows = vec![
            Row::value(
                name("Redis commands/s per waiting thread"),
                format!(
                    "{per_thread:.2}/s ({:.0}/s in all)",
                    self.commands_per_second
                ),
            )
            .target("≤ 5", mark(per_thread <= 5.0)),
            Row::value(
                name("connections opened per second"),
                format!(
                    "{:.2}/s ({} in {:.1} s)",
                    self.opened as f64 / self.window.as_secs_f64(),
                    self.opened,
                    self.window.as_secs_f64()
                ),
            )
            .target("= 0", mark(self.opened == 0)),
            Row::value(
                name("connections blocked in a wait"),
                format!("{} ({} open)", self.blocked, self.open),
            )
            .target("≤ 2", mark(self.blocked <= 2)),
        ];
        let all_in = self.all_in.as_nanos() as u64;
        if locks == 1 {
            let each = all_in / THREADS as u64;
            let ratio = each as f64 / single.max(1) as f64;
            rows.push(
                Row::value(
                    name("then each hand-off"),
                    format!(
                        "{} µs ({:.2}× the single waiter's hand-off; all in {:.0} ms)",
                        each / 1000,
                        ratio,
                        all_in as f64 / 1e6
                    ),
                )
                .target("≤ 2× the single waiter's", mark(ratio <= 2.0)),
            );
        } else {
            rows.push(Row::value(
                name("then all in"),
                format!("{:.0} ms after the releases", all_in as f64 / 1e6),
            ));
        }
        rows
    }
}

fn measure(ctx: &Ctx, label: &str, locks: usize) -> Result<Measured, String> {
    let url = ctx.url.as_str();
    let names: Vec<String> = (0..locks)
        .map(|i| format!("bench:fleet:{locks}:{i}"))
        .collect();
    let holder = Client::open(url).map_err(|e| e.to_string())?;
    let held = names
        .iter()
        .map(|n| holder.mutex(n.as_str()).ttl(Duration::from_secs(60)).lock())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("holding the fleet's locks: {e}"))?;
    let client = Client::open(url).map_err(|e| e.to_string())?;
    let started = Arc::new(Barrier::new(THREADS + 1));
    let granted = Arc::new(Mutex::new(Vec::with_capacity(THREADS)));
    let patience = ctx.counts.waiter_wait + Duration::from_secs(60);
    let threads = (0..THREADS)
        .map(|i| {
            let mutex = client.mutex(names[i % locks].as_str());
            let (started, granted) = (started.clone(), granted.clone());
            std::thread::Builder::new()
                .stack_size(256 * 1024)
                .spawn(move || {
                    started.wait();
                    let guard = mutex.try_lock_for(patience).map_err(|e| e.to_string())?;
                    granted.lock().unwrap().push(Instant::now());
                    guard.unlock().map(drop).map_err(|e| e.to_string())
                })
                .map_err(|e| e.to_string())
        })
        .collect::<Result<Vec<_>, _>>()?;
    started.wait();
    let mut info = redis::Client::open(url)
        .and_then(|c| c.get_connection())
        .map_err(|e| e.to_string())?;
    // Every thread has made its first round, and its waits have grown to the cap (250 +
    // 500 + 1,000 ms, then waits of 2 s): what a long wait costs.
    std::thread::sleep(redmutex::FIRST_WAIT * 16);
    let before = stats(&mut info)?;
    let begun = Instant::now();
    std::thread::sleep(ctx.counts.waiter_wait);
    let after = stats(&mut info)?;
    let window = begun.elapsed();
    let released = Instant::now();
    drop(held);
    for t in threads {
        t.join()
            .map_err(|_| format!("a fleet waiter {label} panicked"))?
            .map_err(|e| format!("a fleet waiter {label} did not get its lock: {e}"))?;
    }
    let last = granted.lock().unwrap().iter().max().copied();
    Ok(Measured {
        // Less the `INFO` that ends the window.
        commands_per_second: (after.commands - before.commands - 1) as f64 / window.as_secs_f64(),
        opened: after.received - before.received,
        blocked: after.blocked,
        open: after.connected,
        window,
        all_in: last.map_or(Duration::ZERO, |l| l.saturating_duration_since(released)),
    })
}

/// Redis's counters at one moment.
struct Stats {
    commands: u64,
    received: u64,
    blocked: u64,
    connected: u64,
}

fn stats(info: &mut redis::Connection) -> Result<Stats, String> {
    let info = Info::read(info, "default")?;
    Ok(Stats {
        commands: info.field("total_commands_processed")?,
        received: info.field("total_connections_received")?,
        blocked: info.field("blocked_clients")?,
        connected: info.field("connected_clients")?,
    })
}
