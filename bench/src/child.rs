//! The hidden subcommands that child processes run (this binary, re-executed).
//!
//! ```text
//! __lock-child    IMPL URLS KEY                 line protocol: lock / unlock / quit
//! __contend-child URLS KEY COUNTER N            N read-modify-write critical sections
//! __renew-child   URL LOCKS HOLD_MS TTL_MS      hold LOCKS auto-renewed locks for HOLD_MS
//! __churn-child   URL N                         N try_lock + unlock cycles; memory kept
//! __rslock-child  URLS KEY                      the rslock rows (see `crate::rslock`)
//! ```
//! URLS is comma-separated. Every child prints `ready` once set up and `error MESSAGE` on
//! failure; timestamps are CLOCK_MONOTONIC nanoseconds.

use std::io::{BufRead, Write};
use std::time::{Duration, Instant};

use redmutex::{Client, MutexGuard};

use crate::lockers::{Impl, RedmutexLocker, TTL};
use crate::stats::{mono_ns, ns};

pub const LOCK_CHILD: &str = "__lock-child";
pub const CONTEND_CHILD: &str = "__contend-child";
pub const RENEW_CHILD: &str = "__renew-child";
pub const CHURN_CHILD: &str = "__churn-child";
pub const UNCONTENDED_CHILD: &str = "__uncontended-child";
/// The uncontended child's third argument: one lock handle for every call.
pub const ONE_LOCK: &str = "one-lock";

/// Runs the subcommand if `args` names one; `None` when it is not a child's command line.
pub fn dispatch(args: &[String]) -> Option<i32> {
    let (cmd, rest) = args.split_first()?;
    let result = match cmd.as_str() {
        LOCK_CHILD => lock_child(rest),
        CONTEND_CHILD => contend_child(rest),
        RENEW_CHILD => renew_child(rest),
        CHURN_CHILD => churn_child(rest),
        UNCONTENDED_CHILD => uncontended_child(rest),
        crate::rslock::CHILD => crate::rslock::child(rest),
        _ => return None,
    };
    Some(match result {
        Ok(()) => 0,
        Err(e) => {
            say(&format!("error {}", e.replace('\n', " ")));
            1
        }
    })
}

pub fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

pub fn arg<'a>(args: &'a [String], i: usize, what: &str) -> Result<&'a str, String> {
    args.get(i)
        .map(String::as_str)
        .ok_or_else(|| format!("missing argument {what}"))
}

pub fn urls(s: &str) -> Vec<String> {
    s.split(',').map(str::to_owned).collect()
}

/// `lock` → blocks in the implementation's lock, then `locked T` (T taken as it returned);
/// `unlock` → unlocks silently, remembering T taken just before the unlock call; `when` →
/// `unlocked T`; `quit` or EOF → exit. The release stays silent so that nothing wakes the
/// orchestrator (and takes a CPU) while the waiter is being handed the lock.
fn lock_child(args: &[String]) -> Result<(), String> {
    let imp = Impl::parse(arg(args, 0, "IMPL")?)?;
    let urls = urls(arg(args, 1, "URLS")?);
    let key = arg(args, 2, "KEY")?;
    let mut locker = imp.open(&urls, key)?;
    // Warm up the connection pool on another name, so the first sample pays no connect.
    let mut warm = imp.open(&urls, &format!("{key}:warm-up"))?;
    if warm.try_lock()? {
        warm.unlock()?;
    }
    say("ready");
    let mut unlocked_at = 0;
    for line in std::io::stdin().lock().lines() {
        let line = line.map_err(|e| e.to_string())?;
        match line.trim() {
            "lock" => {
                locker.lock()?;
                let t = mono_ns();
                say(&format!("locked {t}"));
            }
            "unlock" => {
                unlocked_at = mono_ns();
                locker.unlock()?;
            }
            "when" => say(&format!("unlocked {unlocked_at}")),
            "quit" => break,
            other => return Err(format!("unknown command {other:?}")),
        }
    }
    Ok(())
}

/// The C binding's uncontended loop (bench/c/uncontended.c) from Rust, in a process of its
/// own: `URL N` → 50 warm-up cycles, then N timed `try_lock` + `unlock` of a free lock (TTL
/// 30 s), each through a handle made for the call as the C call makes one; prints
/// `{"samples_ns":[...]}`. The C row is set against this one: both measured alike.
fn uncontended_child(args: &[String]) -> Result<(), String> {
    let url = arg(args, 0, "URL")?;
    let n: usize = arg(args, 1, "N")?.parse().map_err(|e| format!("N: {e}"))?;
    // `one-lock`: one lock handle for every call, as the Python loop holds one lock object;
    // otherwise a handle per call, as the C program makes.
    let one = args.get(2).is_some_and(|a| a == ONE_LOCK);
    let client = Client::open(url).map_err(|e| e.to_string())?;
    let name = "bench:uncontended:rust-process";
    let kept = client.mutex(name).ttl(TTL);
    let once = || -> Result<(), String> {
        let made;
        let mutex = match one {
            true => &kept,
            false => {
                made = client.mutex(name).ttl(TTL);
                &made
            }
        };
        let guard = mutex.try_lock().map_err(|e| e.to_string())?;
        guard.unlock().map(drop).map_err(|e| e.to_string())
    };
    for _ in 0..50 {
        once()?;
    }
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let t = mono_ns();
        once()?;
        samples.push(mono_ns() - t);
    }
    let list: Vec<String> = samples.iter().map(u64::to_string).collect();
    say(&format!("{{\"samples_ns\":[{}]}}", list.join(",")));
    Ok(())
}

/// Waits for `go`, then runs N critical sections: lock, GET the counter, SET it to one more,
/// unlock. Prints one `s VALUE WAIT_NS START_NS END_NS` line per section, then `done`.
fn contend_child(args: &[String]) -> Result<(), String> {
    let urls = urls(arg(args, 0, "URLS")?);
    let key = arg(args, 1, "KEY")?;
    let counter = arg(args, 2, "COUNTER")?;
    let n: usize = arg(args, 3, "N")?.parse().map_err(|_| "bad N")?;
    let client = Client::builder()
        .nodes(urls.iter().cloned())
        .build()
        .map_err(|e| e.to_string())?;
    let mut locker = RedmutexLocker::new(client.mutex(key).ttl(TTL));
    let mut data = redis::Client::open(urls[0].as_str())
        .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(5)))
        .map_err(|e| e.to_string())?;
    data.set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    {
        use crate::lockers::Locker;
        let mut warm = RedmutexLocker::new(client.mutex(format!("{key}:warm-up")).ttl(TTL));
        if warm.try_lock()? {
            warm.unlock()?;
        }
    }
    let _: String = redis::cmd("PING")
        .query(&mut data)
        .map_err(|e| e.to_string())?;
    say("ready");
    let mut line = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut line)
        .map_err(|e| e.to_string())?;
    if line.trim() != "go" {
        return Err(format!("expected go, got {line:?}"));
    }
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        use crate::lockers::Locker;
        let start = mono_ns();
        locker.lock()?;
        let locked = mono_ns();
        let v: Option<u64> = redis::cmd("GET")
            .arg(counter)
            .query(&mut data)
            .map_err(|e| e.to_string())?;
        let v = v.unwrap_or(0);
        let _: () = redis::cmd("SET")
            .arg(counter)
            .arg(v + 1)
            .query(&mut data)
            .map_err(|e| e.to_string())?;
        locker.unlock()?;
        let end = mono_ns();
        out.push((v, locked - start, start, end));
    }
    let mut stdout = std::io::stdout().lock();
    for (v, wait, start, end) in out {
        writeln!(stdout, "s {v} {wait} {start} {end}").map_err(|e| e.to_string())?;
    }
    writeln!(stdout, "done").map_err(|e| e.to_string())?;
    stdout.flush().map_err(|e| e.to_string())
}

/// Resident memory of this process, from /proc/self/status (kB → bytes).
pub fn vm_rss() -> u64 {
    proc_status_kb("VmRSS:") * 1024
}

fn proc_status_kb(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// Threads of this process whose name is `name`, with their CPU time (user + system).
fn threads_named(name: &str) -> (usize, Duration) {
    let tick = match unsafe_clk_tck() {
        0 => 100,
        t => t,
    };
    let mut count = 0;
    let mut cpu = Duration::ZERO;
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return (0, cpu);
    };
    for task in dir.flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if comm.trim_end() != name {
            continue;
        }
        count += 1;
        let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
        // Fields after the parenthesized name: state is field 3, utime 14, stime 15.
        if let Some((_, after)) = stat.rsplit_once(')') {
            let f: Vec<&str> = after.split_whitespace().collect();
            let ticks: u64 = [11, 12]
                .iter()
                .filter_map(|&i| f.get(i).and_then(|v| v.parse::<u64>().ok()))
                .sum();
            cpu += Duration::from_secs_f64(ticks as f64 / tick as f64);
        }
    }
    (count, cpu)
}

pub fn unsafe_clk_tck() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    u64::try_from(t).unwrap_or(0)
}

/// Takes LOCKS auto-renewed locks (TTL_MS) on one node, holds them for HOLD_MS while
/// sampling memory, then checks every lock locally and in Redis, and releases them.
/// Prints `result key=value ...`.
fn renew_child(args: &[String]) -> Result<(), String> {
    let url = arg(args, 0, "URL")?;
    let locks: usize = arg(args, 1, "LOCKS")?.parse().map_err(|_| "bad LOCKS")?;
    let hold = Duration::from_millis(arg(args, 2, "HOLD_MS")?.parse().map_err(|_| "bad HOLD")?);
    let ttl = Duration::from_millis(arg(args, 3, "TTL_MS")?.parse().map_err(|_| "bad TTL")?);
    let client = Client::open(url).map_err(|e| e.to_string())?;
    // Warm up: a connection in the pool and the renew thread started, before the baseline.
    drop(
        client
            .mutex("bench:renew:warm-up")
            .ttl(ttl)
            .try_lock()
            .map_err(|e| e.to_string())?,
    );
    let rss_before = vm_rss();
    say("ready");

    let t_acquire = Instant::now();
    let mut guards: Vec<MutexGuard> = Vec::with_capacity(locks);
    for i in 0..locks {
        let g = client
            .mutex(format!("bench:renew:{i}"))
            .ttl(ttl)
            .try_lock()
            .map_err(|e| format!("lock {i}: {e}"))?;
        guards.push(g);
    }
    let acquire_time = t_acquire.elapsed();
    let rss_acquired = vm_rss();

    let t_hold = Instant::now();
    let mut rss_max = rss_acquired;
    let mut lost_seen = 0;
    while t_hold.elapsed() < hold {
        std::thread::sleep(Duration::from_millis(250).min(hold.saturating_sub(t_hold.elapsed())));
        rss_max = rss_max.max(vm_rss());
        lost_seen = lost_seen.max(guards.iter().filter(|g| !g.is_held()).count());
    }
    let (renew_threads, renew_cpu) = threads_named("redmutex-renew");
    let lost_local = guards.iter().filter(|g| !g.is_held()).count();
    let renewals: Vec<u64> = guards.iter().map(MutexGuard::renewals).collect();

    // In Redis: every key must still hold its guard's token, with time left.
    let mut conn = redis::Client::open(url)
        .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(5)))
        .map_err(|e| e.to_string())?;
    conn.set_read_timeout(Some(Duration::from_secs(30)))
        .map_err(|e| e.to_string())?;
    let mut lost_redis = 0;
    let mut min_pttl = i64::MAX;
    for chunk in guards.chunks(1000) {
        let mut pipe = redis::pipe();
        for g in chunk {
            pipe.cmd("GET").arg(g.name()).cmd("PTTL").arg(g.name());
        }
        let values: Vec<redis::Value> = pipe.query(&mut conn).map_err(|e| e.to_string())?;
        for (g, pair) in chunk.iter().zip(values.chunks(2)) {
            let holds =
                matches!(&pair[0], redis::Value::BulkString(v) if v.as_slice() == g.token());
            if !holds {
                lost_redis += 1;
            }
            if let redis::Value::Int(p) = pair[1] {
                min_pttl = min_pttl.min(p);
            }
        }
    }
    let t_release = Instant::now();
    let mut unlock_errors = 0;
    for g in guards {
        if g.unlock().is_err() {
            unlock_errors += 1;
        }
    }
    let release_time = t_release.elapsed();
    let rss_after = vm_rss();
    let mut sorted = renewals.clone();
    sorted.sort_unstable();
    let min_renewals = sorted.first().copied().unwrap_or(0);
    let median_renewals = sorted.get(sorted.len() / 2).copied().unwrap_or(0);
    say(&format!(
        "result locks={locks} hold_ns={} ttl_ns={} lost_local={lost_local} lost_seen={lost_seen} \
         lost_redis={lost_redis} renew_threads={renew_threads} renew_cpu_ns={} \
         rss_before={rss_before} rss_acquired={rss_acquired} rss_max={rss_max} \
         rss_after={rss_after} acquire_ns={} release_ns={} min_renewals={min_renewals} \
         median_renewals={median_renewals} min_pttl_ms={min_pttl} unlock_errors={unlock_errors}",
        ns(hold),
        ns(ttl),
        ns(renew_cpu),
        ns(acquire_time),
        ns(release_time),
    ));
    Ok(())
}

/// N cycles of `try_lock` + `unlock` on one name with default options, as fast as they go;
/// prints `result cycles=N ns=... rss_before=... rss_after=...`. A released guard should
/// leave nothing behind (it leaves the renew heap at once), so memory stays flat.
fn churn_child(args: &[String]) -> Result<(), String> {
    let url = arg(args, 0, "URL")?;
    let n: usize = arg(args, 1, "N")?.parse().map_err(|_| "bad N")?;
    let client = Client::open(url).map_err(|e| e.to_string())?;
    let mut locker = RedmutexLocker::new(client.mutex("bench:churn").ttl(TTL));
    use crate::lockers::Locker;
    for _ in 0..100 {
        if !locker.try_lock()? {
            return Err("bench:churn is not free".into());
        }
        locker.unlock()?;
    }
    let rss_before = vm_rss();
    let t = Instant::now();
    for _ in 0..n {
        if !locker.try_lock()? {
            return Err("bench:churn is not free".into());
        }
        locker.unlock()?;
    }
    let elapsed = t.elapsed();
    let rss_after = vm_rss();
    say(&format!(
        "result cycles={n} ns={} rss_before={rss_before} rss_after={rss_after}",
        ns(elapsed)
    ));
    Ok(())
}
