//! A lock client in its own process, for multi-process tests.
//!
//! ```text
//! worker rmw   URLS KEY COUNTER N [TTL_MS]   N critical sections of GET/SET on COUNTER
//! worker hold  URLS KEY TTL_MS               take the lock, print "locked FENCE", sleep
//! worker loop  URLS KEY COUNTER SECS         critical sections until SECS have passed
//! worker permit URLS KEY PERMITS TTL_MS      take a semaphore permit, print "locked FENCE", sleep
//! worker read  URLS KEY TTL_MS               take a read hold, print "locked FENCE", sleep
//! worker permits URLS KEY PERMITS TTL_MS     permits held and released again until killed,
//!                                            printing each grant, renewal and release
//! worker rw    URLS KEY TTL_MS               the same with read holds and (one in four) write
//!                                            holds, each line naming the kind after SEQ
//! worker sections key=value…                  sections on several names, writing a history
//! ```
//! URLS is comma-separated; the counter lives on the first of them, or on `DATA_URL` when that
//! environment variable is set (for tests that restart lock nodes). Each mode ends with one
//! summary line on stdout. `sections` (the cluster suite's clients) is described, and started,
//! by `redmutex_tests::workers`; it writes its history and summary to files instead.

use std::io::Write;
use std::time::{Duration, Instant};

use redis::Commands;
use redmutex::{Client, TryLockError};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("sections") {
        redmutex_tests::workers::run_sections(&args[2..]);
        return;
    }
    let urls: Vec<&str> = args[2].split(',').collect();
    let key = args[3].as_str();
    let mut builder = Client::builder().nodes(urls.iter().copied());
    // Fault tests on a loaded machine may ask for a per-node timeout above the TTL-derived one.
    if let Some(ms) = std::env::var("NODE_TIMEOUT_MS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        builder = builder.node_timeout(Duration::from_millis(ms));
    }
    let client = builder.build().unwrap();
    match args[1].as_str() {
        "rmw" => {
            let n: u64 = args[5].parse().unwrap();
            let ttl = args.get(6).map_or(5000, |t| t.parse().unwrap());
            let mut waits = 0;
            let mut data = data_conn(&urls);
            let mutex = client.mutex(key).ttl(Duration::from_millis(ttl));
            for _ in 0..n {
                let guard = match mutex.try_lock() {
                    Ok(g) => g,
                    Err(TryLockError::WouldBlock) => {
                        waits += 1;
                        mutex.lock().unwrap()
                    }
                    Err(e) => panic!("{e}"),
                };
                rmw(&mut data, &args[4]);
                release(guard);
            }
            println!("done sections={n} waits={waits}");
        }
        "loop" => {
            let secs: f64 = args[5].parse().unwrap();
            let mut data = data_conn(&urls);
            let mutex = client.mutex(key).ttl(Duration::from_secs(5));
            let end = Instant::now() + Duration::from_secs_f64(secs);
            let mut n = 0;
            while Instant::now() < end {
                let guard = mutex.lock().unwrap();
                rmw(&mut data, &args[4]);
                guard.unlock().unwrap();
                n += 1;
            }
            println!("done sections={n}");
        }
        "hold" => {
            let ttl: u64 = args[4].parse().unwrap();
            let guard = client
                .mutex(key)
                .ttl(Duration::from_millis(ttl))
                .lock()
                .unwrap();
            println!("locked {}", guard.fence());
            std::io::stdout().flush().unwrap();
            std::thread::sleep(Duration::from_secs(3600));
        }
        "permit" => {
            let permits: u32 = args[4].parse().unwrap();
            let ttl: u64 = args[5].parse().unwrap();
            let permit = client
                .semaphore(key, permits)
                .ttl(Duration::from_millis(ttl))
                .acquire()
                .unwrap();
            println!("locked {}", permit.fence());
            std::io::stdout().flush().unwrap();
            std::thread::sleep(Duration::from_secs(3600));
        }
        "read" => {
            let ttl: u64 = args[4].parse().unwrap();
            let read = client
                .rwlock(key)
                .ttl(Duration::from_millis(ttl))
                .read()
                .unwrap();
            println!("locked {}", read.fence());
            std::io::stdout().flush().unwrap();
            std::thread::sleep(Duration::from_secs(3600));
        }
        "permits" => permit_history(&client, key, &args[4], &args[5]),
        "rw" => rw_history(&client, key, &args[4]),
        other => panic!("unknown mode {other}"),
    }
}

/// A deliberately non-atomic read-modify-write: only the lock keeps it exact.
fn rmw(conn: &mut redis::Connection, counter: &str) {
    let v: Option<u64> = conn.get(counter).unwrap();
    std::thread::yield_now();
    let _: () = conn.set(counter, v.unwrap_or(0) + 1).unwrap();
}

fn data_conn(urls: &[&str]) -> redis::Connection {
    let url = std::env::var("DATA_URL").unwrap_or_else(|_| urls[0].to_owned());
    redis::Client::open(url).unwrap().get_connection().unwrap()
}

/// Releases; a release that a majority did not confirm (nodes failing under the test's faults)
/// is fine, since the lock then expires by its TTL. A lost lock is reported: the section it
/// guarded was not exclusive, which the test's counter check will show.
fn release(guard: redmutex::MutexGuard) {
    if let Err(e) = guard.unlock() {
        eprintln!("worker: release: {e}");
    }
}

/// Takes permits one after another, holding each a few milliseconds, until killed. Prints,
/// one `write` per line: `acquire SEQ T_NS FENCE VALIDITY_NS`, `renew SEQ T_NS VALIDITY_NS`
/// (from the renew thread, as renewals are confirmed) and `release SEQ T_NS` (before the
/// release is sent), on `CLOCK_MONOTONIC`.
fn permit_history(client: &Client, key: &str, permits: &str, ttl_ms: &str) {
    use redmutex_tests::history::mono_ns;
    use std::sync::Arc;
    let base = (Instant::now(), mono_ns());
    let ns = move |i: Instant| match i.checked_duration_since(base.0) {
        Some(d) => base.1 + d.as_nanos() as i64,
        None => base.1 - (base.0 - i).as_nanos() as i64,
    };
    let out = Arc::new(std::sync::Mutex::new(std::io::stdout()));
    let say = {
        let out = Arc::clone(&out);
        move |line: String| {
            let mut o = out.lock().unwrap();
            o.write_all(line.as_bytes()).unwrap();
            o.flush().unwrap();
        }
    };
    let sem = client
        .semaphore(key, permits.parse().unwrap())
        .ttl(Duration::from_millis(ttl_ms.parse().unwrap()));
    let spread = u64::from(std::process::id());
    for seq in 0u64.. {
        let permit = sem.acquire().unwrap();
        say(format!(
            "acquire {seq} {} {} {}\n",
            mono_ns(),
            permit.fence(),
            ns(permit.valid_until())
        ));
        let renewed = say.clone();
        permit
            .on_renewed(move |until| renewed(format!("renew {seq} {} {}\n", mono_ns(), ns(until))));
        std::thread::sleep(Duration::from_millis(5 + (seq * 7 + spread) % 30));
        say(format!("release {seq} {}\n", mono_ns()));
        let _ = permit.unlock();
    }
}

/// One hold of `rw_history`: a read or a write guard.
enum Held {
    Read(redmutex::ReadGuard),
    Write(redmutex::WriteGuard),
}

macro_rules! held {
    ($h:expr, $g:ident => $e:expr) => {
        match $h {
            Held::Read($g) => $e,
            Held::Write($g) => $e,
        }
    };
}

/// Like `permit_history`, on a read-write lock: lines are `acquire SEQ KIND T_NS FENCE
/// VALIDITY_NS`, `renew SEQ KIND T_NS VALIDITY_NS` and `release SEQ KIND T_NS`, KIND being
/// `r` or `w`.
fn rw_history(client: &Client, key: &str, ttl_ms: &str) {
    use redmutex_tests::history::mono_ns;
    use std::sync::Arc;
    let base = (Instant::now(), mono_ns());
    let ns = move |i: Instant| match i.checked_duration_since(base.0) {
        Some(d) => base.1 + d.as_nanos() as i64,
        None => base.1 - (base.0 - i).as_nanos() as i64,
    };
    let out = Arc::new(std::sync::Mutex::new(std::io::stdout()));
    let say = move |line: String| {
        let mut o = out.lock().unwrap();
        o.write_all(line.as_bytes()).unwrap();
        o.flush().unwrap();
    };
    let lock = client
        .rwlock(key)
        .ttl(Duration::from_millis(ttl_ms.parse().unwrap()));
    let spread = u64::from(std::process::id());
    for seq in 0u64.. {
        let write = (seq + spread) % 4 == 0;
        let (kind, held) = if write {
            ("w", Held::Write(lock.write().unwrap()))
        } else {
            ("r", Held::Read(lock.read().unwrap()))
        };
        let (fence, until) = held!(&held, g => (g.fence(), g.valid_until()));
        say(format!(
            "acquire {seq} {kind} {} {fence} {}\n",
            mono_ns(),
            ns(until)
        ));
        let renewed = say.clone();
        let on_renewed =
            move |until| renewed(format!("renew {seq} {kind} {} {}\n", mono_ns(), ns(until)));
        held!(&held, g => g.on_renewed(on_renewed));
        std::thread::sleep(Duration::from_millis(5 + (seq * 7 + spread) % 20));
        say(format!("release {seq} {kind} {}\n", mono_ns()));
        let _ = held!(held, g => g.unlock());
    }
}
