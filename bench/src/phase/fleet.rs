//! Waiting at fleet scale: 1,000 threads of one process (one client) waiting on one held
//! lock, and 1,000 threads waiting on 1,000 held locks. While nothing is released: Redis's
//! commands per waiting thread per second, the connections opened, and the connections
//! blocked in a wait (Redis's `INFO`); then everything is released, and every thread must get
//! its lock: on one lock, one after another, so the time per hand-off is set beside the
//! single waiter's hand-off row. Then the same for 50 `redmutex run --wait` processes, each
//! a client of its own, waiting on one held lock.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

use redmutex::Client;
use redmutex_tests::history::mono_ns;

use crate::external::{CProgram, Python};
use crate::info::Info;
use crate::phase::{Ctx, Notes, Phase, progress};
use crate::report::{Mark, Row};

/// How many threads wait.
const THREADS: usize = 1000;

/// How many `redmutex run` processes wait.
const PROCESSES: usize = 50;

/// Runs every case; `single` is the single waiter's hand-off (median, ns) of this run (the
/// Rust one; Python's threads are held to it too).
pub fn run(
    ctx: &Ctx,
    single: u64,
    python: Option<&Python>,
    c: Option<&CProgram>,
    notes: &mut Notes,
) -> Result<Phase<()>, String> {
    let mut rows = Vec::new();
    for (label, locks) in [("on one held lock", 1), ("on 1,000 held locks", THREADS)] {
        progress(&format!("fleet: {THREADS} threads waiting {label}"));
        let m = measure(ctx, label, locks)?;
        rows.extend(m.rows("fleet", label, locks, single));
        if let Some(py) = python {
            progress(&format!("fleet: {THREADS} Python threads waiting {label}"));
            match python_case(ctx, py, locks) {
                Ok(m) => rows.extend(m.rows("fleet, Python", label, locks, single)),
                Err(e) => notes.skip(
                    &format!("fleet, Python: {THREADS} threads waiting {label}"),
                    &e,
                ),
            }
        }
        if let Some(c) = c {
            progress(&format!("fleet: {THREADS} C threads waiting {label}"));
            match c_case(ctx, c, locks) {
                Ok(m) => rows.extend(m.rows("fleet, C", label, locks, single)),
                Err(e) => notes.skip(&format!("fleet, C: {THREADS} threads waiting {label}"), &e),
            }
        }
    }
    let what =
        format!("fleet: {PROCESSES} `redmutex run --wait` processes waiting on one held lock");
    match cli() {
        Some(cli) => {
            progress(&what);
            rows.extend(processes(ctx, &cli)?.process_rows(&what));
        }
        None => notes.skip(
            &what,
            "no `redmutex` binary beside the bench's (make bench builds it)",
        ),
    }
    Ok(Phase { rows, data: () })
}

/// The command line's binary, built beside this one.
fn cli() -> Option<PathBuf> {
    let path = std::env::current_exe().ok()?.with_file_name("redmutex");
    path.is_file().then_some(path)
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
    fn rows(&self, who: &str, label: &str, locks: usize, single: u64) -> Vec<Row> {
        let name = |what: &str| format!("{who}: {THREADS} threads waiting {label}, {what}");
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

impl Measured {
    /// The rows of the processes' case: each process is a client of its own, so each holds
    /// one blocked connection; the cost per process is held to the per-thread target.
    fn process_rows(&self, what: &str) -> Vec<Row> {
        let name = |m: &str| format!("{what}, {m}");
        let per_process = self.commands_per_second / PROCESSES as f64;
        let mark = |ok: bool| if ok { Mark::Pass } else { Mark::Miss };
        vec![
            Row::value(
                name("Redis commands/s per waiting process"),
                format!(
                    "{per_process:.2}/s ({:.0}/s in all)",
                    self.commands_per_second
                ),
            )
            .target("≤ 5", mark(per_process <= 5.0)),
            Row::value(
                name("connections opened per second"),
                format!("{} in {:.1} s", self.opened, self.window.as_secs_f64()),
            )
            .target("= 0", mark(self.opened == 0)),
            Row::value(
                name("connections blocked in a wait"),
                format!("{} ({} open)", self.blocked, self.open),
            )
            .target("≤ 1 per process", mark(self.blocked <= PROCESSES as u64)),
            Row::value(
                name("then all in"),
                format!(
                    "{:.0} ms after the release ({:.1} ms per hand-off, a process start each)",
                    self.all_in.as_secs_f64() * 1e3,
                    self.all_in.as_secs_f64() * 1e3 / PROCESSES as f64
                ),
            ),
        ]
    }
}

/// The Python case: the same threads and locks in a Python process (`locks.py fleet`).
fn python_case(ctx: &Ctx, py: &Python, locks: usize) -> Result<Measured, String> {
    let settle = redmutex::FIRST_WAIT * 16;
    let v = py.fleet(&ctx.url, THREADS, locks, settle, ctx.counts.waiter_wait)?;
    let field = |k: &str| {
        v[k].as_u64()
            .ok_or_else(|| format!("locks.py fleet: no {k}"))
    };
    if field("failed")? > 0 {
        return Err(format!(
            "{} Python waiters did not get their lock",
            field("failed")?
        ));
    }
    let window = Duration::from_secs_f64(v["window_s"].as_f64().unwrap_or(1.0).max(1e-3));
    Ok(Measured {
        commands_per_second: field("commands")? as f64 / window.as_secs_f64(),
        opened: field("opened")?,
        blocked: field("blocked")?,
        open: field("open")?,
        window,
        all_in: Duration::from_nanos(field("all_in_ns")?),
    })
}

/// The C case: the same threads and locks in the C program's fleet mode; the locks are held
/// and Redis's counters read here, as for the Rust threads.
fn c_case(ctx: &Ctx, prog: &CProgram, locks: usize) -> Result<Measured, String> {
    let url = ctx.url.as_str();
    let names: Vec<String> = (0..locks)
        .map(|i| format!("bench:fleet:c:{locks}:{i}"))
        .collect();
    let held = hold(url, &names)?;
    let patience = ctx.counts.waiter_wait + Duration::from_secs(60);
    let mut child = prog
        .fleet(url, THREADS, locks, patience)
        .spawn()
        .map_err(|e| format!("cannot run the C program: {e}"))?;
    let mut out = BufReader::new(child.stdout.take().ok_or("no stdout")?);
    let mut line = String::new();
    out.read_line(&mut line).map_err(|e| e.to_string())?;
    if line.trim() != "ready" {
        let _ = child.kill();
        let _ = child.wait();
        return Err(format!("the C program said {line:?}, not ready"));
    }
    let watched = watch(ctx)?;
    let released = mono_ns();
    drop(held);
    line.clear();
    // Every thread waits at most `patience`, so this line comes.
    out.read_line(&mut line).map_err(|e| e.to_string())?;
    let _ = child.wait();
    let v: serde_json::Value = serde_json::from_str(&line)
        .map_err(|e| format!("the C program's fleet line {line:?}: {e}"))?;
    if v["failed"].as_u64() != Some(0) {
        return Err(format!("C waiters did not get their lock: {line}"));
    }
    let released = u64::try_from(released).unwrap_or(0);
    let last = v["last_ns"].as_u64().unwrap_or(released);
    Ok(watched.measured(Duration::from_nanos(last.saturating_sub(released))))
}

/// `PROCESSES` runs of `redmutex run --wait … -- true` wait on a held lock; measured like the
/// threads, then the lock is released and every run must take it and exit 0.
fn processes(ctx: &Ctx, cli: &PathBuf) -> Result<Measured, String> {
    let url = ctx.url.as_str();
    let name = "bench:fleet:run";
    let held = hold(url, &[name.to_owned()])?;
    let patience = ctx.counts.waiter_wait + Duration::from_secs(60);
    let patience = format!("{}ms", patience.as_millis());
    let mut runs: Vec<Child> = Vec::with_capacity(PROCESSES);
    for _ in 0..PROCESSES {
        let run = Command::new(cli)
            .args([
                "run", "--url", url, "--key", name, "--wait", &patience, "--", "true",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn();
        match run {
            Ok(c) => runs.push(c),
            Err(e) => {
                for mut c in runs {
                    let _ = c.kill();
                    let _ = c.wait();
                }
                return Err(format!("cannot start `redmutex run`: {e}"));
            }
        }
    }
    let watched = watch(ctx)?;
    let released = Instant::now();
    drop(held);
    let mut failed = 0;
    for mut c in runs {
        // Each run waits at most `patience`, so this ends.
        if !c.wait().is_ok_and(|s| s.success()) {
            failed += 1;
        }
    }
    let all_in = released.elapsed();
    if failed > 0 {
        return Err(format!(
            "{failed} of {PROCESSES} `redmutex run` waiters did not run their command"
        ));
    }
    Ok(watched.measured(all_in))
}

fn measure(ctx: &Ctx, label: &str, locks: usize) -> Result<Measured, String> {
    let url = ctx.url.as_str();
    let names: Vec<String> = (0..locks)
        .map(|i| format!("bench:fleet:{locks}:{i}"))
        .collect();
    let held = hold(url, &names)?;
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
    let watched = watch(ctx)?;
    let released = Instant::now();
    drop(held);
    for t in threads {
        t.join()
            .map_err(|_| format!("a fleet waiter {label} panicked"))?
            .map_err(|e| format!("a fleet waiter {label} did not get its lock: {e}"))?;
    }
    let last = granted.lock().unwrap().iter().max().copied();
    Ok(watched.measured(last.map_or(Duration::ZERO, |l| l.saturating_duration_since(released))))
}

/// Holds `names` for a minute each, through a client of their own.
fn hold(url: &str, names: &[String]) -> Result<Vec<redmutex::MutexGuard>, String> {
    let holder = Client::open(url).map_err(|e| e.to_string())?;
    names
        .iter()
        .map(|n| holder.mutex(n.as_str()).ttl(Duration::from_secs(60)).lock())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("holding the fleet's locks: {e}"))
}

/// Redis's counters over one window of waiting, with the waits grown.
struct Watched {
    before: Stats,
    after: Stats,
    window: Duration,
}

/// Once every waiter has made its first round and its waits have grown to the cap (250 +
/// 500 + 1,000 ms, then waits of 2 s): Redis's counters over `ctx.counts.waiter_wait`, what a
/// long wait costs.
fn watch(ctx: &Ctx) -> Result<Watched, String> {
    let mut info = redis::Client::open(ctx.url.as_str())
        .and_then(|c| c.get_connection())
        .map_err(|e| e.to_string())?;
    std::thread::sleep(redmutex::FIRST_WAIT * 16);
    let before = stats(&mut info)?;
    let begun = Instant::now();
    std::thread::sleep(ctx.counts.waiter_wait);
    let after = stats(&mut info)?;
    Ok(Watched {
        before,
        after,
        window: begun.elapsed(),
    })
}

impl Watched {
    /// What the case measured, with `all_in` from the release to the last grant.
    fn measured(self, all_in: Duration) -> Measured {
        let (before, after) = (self.before, self.after);
        Measured {
            // Less the `INFO` that ends the window.
            commands_per_second: (after.commands - before.commands - 1) as f64
                / self.window.as_secs_f64(),
            opened: after.received - before.received,
            blocked: after.blocked,
            open: after.connected,
            window: self.window,
            all_in,
        }
    }
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
