//! Blocked waiters: how many connections a waiter opens per second while it waits for a lock
//! that stays held, on a healthy server (Rust with the default wait cap and with a 50 ms cap,
//! C, Python). Redis ends short `BLPOP`s on its 100 ms tick, after the waiter's deadline; a
//! waiter that dropped its connection then would reconnect all the time.

use std::time::{Duration, Instant};

use redmutex::{Client, MutexOptions};

use crate::info::Info;
use crate::phase::peers::Peers;
use crate::phase::{Ctx, Notes, Phase, progress};
use crate::proc::Proc;
use crate::report::{Mark, Row};

/// The lock every waiter waits for.
const NAME: &str = "bench:waiters";

/// Holds `bench:waiters` and measures each waiter's new connections while it is blocked.
pub fn run(ctx: &Ctx, peers: &Peers, notes: &mut Notes) -> Result<Phase<()>, String> {
    let url = ctx.url.as_str();
    let wait = ctx.counts.waiter_wait;
    let holder = Client::open(url).map_err(|e| e.to_string())?;
    let guard = holder
        .mutex(NAME)
        .ttl(Duration::from_secs(30))
        .lock()
        .map_err(|e| format!("holding {NAME}: {e}"))?;
    let mut info = redis::Client::open(url)
        .and_then(|c| c.get_connection())
        .map_err(|e| e.to_string())?;
    let mut rows = Vec::new();
    for (label, cap) in [("Rust", None), ("Rust, 50 ms wait cap", Some(50))] {
        progress(&format!("blocked waiter: {label}"));
        let opened = rust_waiter(url, cap, wait, &mut info)?;
        rows.push(row(label, opened, wait));
    }
    if ctx.compare {
        if let Some(Ok(c)) = &peers.c {
            progress("blocked waiter: C");
            match external_waiter(
                "C waiter",
                c.waiter(url, wait.as_millis() as u64),
                &mut info,
            ) {
                Ok((opened, took)) => rows.push(row("C", opened, took)),
                Err(e) => notes.skip("C blocked-waiter row", &e),
            }
        }
        if let Some(py) = &peers.python {
            progress("blocked waiter: Python");
            let cmd = py.waiter(url, wait.as_millis() as u64);
            match external_waiter("Python waiter", cmd, &mut info) {
                Ok((opened, took)) => rows.push(row("Python", opened, took)),
                Err(e) => notes.skip("Python blocked-waiter row", &e),
            }
        }
    }
    drop(guard);
    Ok(Phase { rows, data: () })
}

fn row(label: &str, opened: u64, took: Duration) -> Row {
    let per_second = opened as f64 / took.as_secs_f64();
    let mark = if opened == 0 { Mark::Pass } else { Mark::Miss };
    Row::value(
        format!("blocked waiter, {label}: connections opened per second"),
        format!(
            "{per_second:.2}/s ({opened} in {:.1} s of waiting)",
            took.as_secs_f64()
        ),
    )
    .target("= 0 on a healthy server", mark)
}

/// The server's count of connections accepted so far.
fn accepted(info: &mut redis::Connection) -> Result<u64, String> {
    Info::read(info, "stats")?.field("total_connections_received")
}

/// A waiter in this process: its first connections are made by two short waits, then the
/// connections it opens during `wait` are counted. The second wait (50 ms) is shorter than
/// Redis's tick, so its `BLPOP` is still blocked at the waiter's deadline and is ended by
/// `CLIENT UNBLOCK` from a second connection, which the waiter keeps pooled after: the first
/// wait alone (300 ms) ends so only when its timing has its last block short, and then the
/// measured wait would open that connection.
fn rust_waiter(
    url: &str,
    cap_ms: Option<u64>,
    wait: Duration,
    info: &mut redis::Connection,
) -> Result<u64, String> {
    let client = Client::open(url).map_err(|e| e.to_string())?;
    let mut opts = MutexOptions::default().with_ttl(Duration::from_secs(30));
    if let Some(ms) = cap_ms {
        opts = opts.with_wait_cap(Duration::from_millis(ms));
    }
    let mutex = client.mutex(NAME).options(opts);
    for warm_up in [300, 50] {
        if mutex.try_lock_for(Duration::from_millis(warm_up)).is_ok() {
            return Err(format!("the waiter got {NAME}, which should be held"));
        }
    }
    let before = accepted(info)?;
    if mutex.try_lock_for(wait).is_ok() {
        return Err(format!("the waiter got {NAME}, which should be held"));
    }
    Ok(accepted(info)? - before)
}

/// A waiter in another process (`cmd` speaks "ready" / a line / "done"): the connections it
/// opened between the line and "done", and how long that took.
fn external_waiter(
    name: &str,
    cmd: std::process::Command,
    info: &mut redis::Connection,
) -> Result<(u64, Duration), String> {
    let mut waiter = Proc::spawn(name, cmd)?;
    waiter.expect("ready")?;
    let before = accepted(info)?;
    let started = Instant::now();
    waiter.send("go")?;
    waiter.expect("done")?;
    let took = started.elapsed();
    let opened = accepted(info)? - before;
    waiter.finish()?;
    Ok((opened, took))
}
