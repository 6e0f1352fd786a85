//! One client of a torture scenario (issue 8): takes a lock N times, holds it for a random
//! time doing a read-modify-write of a counter, and appends one JSON line per event to a
//! history file (see `redmutex_tests::history`).
//!
//! ```text
//! torture --urls A,B,C --key K --client NAME --n N --hold-ms MIN:MAX --ttl-ms T
//!         --history FILE --seed S --data-url URL
//!         [--fenced] [--mode normal|plain-del|ignore-validity] [--pause-after-acquire-ms X]
//!         [--no-renew] [--node-timeout-ms X] [--connect-timeout-ms X] [--wait-ms X]
//! ```
//!
//! - The counter `K:counter` lives on `--data-url` (a separate server). A section reads it,
//!   sleeps the hold time, and writes it back plus one; the guard is checked before each of
//!   the two accesses (`use` events). With `--fenced` both go through scripts that reject a
//!   fence lower than the highest seen (kept in `K:fence` next to the counter).
//! - `--mode plain-del` releases with a plain `DEL K` on every lock node (a negative control:
//!   a late release deletes someone else's lock). `--mode ignore-validity` does not check the
//!   guard before using (a negative control, with `--pause-after-acquire-ms` and `--no-renew`).
//! - `--mode exit-holding` calls `std::process::exit(0)` right after the first `use`, while
//!   it holds the lock (no destructor runs, so the guard is never released).
//! - `--first-hold-ms X` holds the first section X ms (later ones draw from `--hold-ms`).
//! - `--pause-after-acquire-ms X` sleeps X ms right after each acquire.
//! - `--connect-timeout-ms X` is the client's connect timeout, which also bounds how long a
//!   lock call rides over an outage (no quorum reachable) before it reports it.
//!
//! Ends with one line on stdout:
//! `done client=NAME sections=S waits=W lost=L rejected=R wall=UNIX_SECONDS`.
//! Exit code 2 on a usage or lock error.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redmutex::{Client, MutexGuard, TryLockError};
use redmutex_tests::history::{Event, Kind, mono_ns};

const READ: &str = "local h = tonumber(redis.call('GET', KEYS[2]) or '0') \
    local f = tonumber(ARGV[1]) \
    if f < h then return -1 end \
    redis.call('SET', KEYS[2], f) \
    return tonumber(redis.call('GET', KEYS[1]) or '0')";
const WRITE: &str = "local h = tonumber(redis.call('GET', KEYS[2]) or '0') \
    local f = tonumber(ARGV[1]) \
    if f < h then return -1 end \
    redis.call('SET', KEYS[2], f) \
    redis.call('SET', KEYS[1], ARGV[2]) \
    return 1";

#[derive(PartialEq, Eq, Clone, Copy)]
enum Mode {
    Normal,
    PlainDel,
    IgnoreValidity,
    ExitHolding,
}

struct Args {
    urls: Vec<String>,
    key: String,
    client: String,
    n: u64,
    hold_ms: (u64, u64),
    first_hold_ms: Option<u64>,
    ttl_ms: u64,
    history: String,
    seed: u64,
    data_url: String,
    fenced: bool,
    mode: Mode,
    pause_ms: u64,
    no_renew: bool,
    node_timeout_ms: Option<u64>,
    connect_timeout_ms: Option<u64>,
    wait_ms: u64,
}

fn usage(msg: &str) -> ! {
    eprintln!("torture: {msg}");
    std::process::exit(2)
}

fn parse_args() -> Args {
    let mut a = Args {
        urls: Vec::new(),
        key: String::new(),
        client: String::new(),
        n: 1,
        hold_ms: (0, 0),
        first_hold_ms: None,
        ttl_ms: 1000,
        history: String::new(),
        seed: 1,
        data_url: String::new(),
        fenced: false,
        mode: Mode::Normal,
        pause_ms: 0,
        no_renew: false,
        node_timeout_ms: None,
        connect_timeout_ms: None,
        wait_ms: 30_000,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut val = || {
            it.next()
                .unwrap_or_else(|| usage(&format!("{flag} needs a value")))
        };
        let num = |v: String| -> u64 {
            v.parse()
                .unwrap_or_else(|_| usage(&format!("bad number {v:?}")))
        };
        match flag.as_str() {
            "--urls" => a.urls = val().split(',').map(str::to_owned).collect(),
            "--key" => a.key = val(),
            "--client" => a.client = val(),
            "--n" => a.n = num(val()),
            "--hold-ms" => {
                let v = val();
                let (lo, hi) = v.split_once(':').unwrap_or((&v, &v));
                a.hold_ms = (num(lo.into()), num(hi.into()));
                if a.hold_ms.0 > a.hold_ms.1 {
                    usage("--hold-ms MIN:MAX with MIN <= MAX");
                }
            }
            "--first-hold-ms" => a.first_hold_ms = Some(num(val())),
            "--ttl-ms" => a.ttl_ms = num(val()),
            "--history" => a.history = val(),
            "--seed" => a.seed = num(val()),
            "--data-url" => a.data_url = val(),
            "--fenced" => a.fenced = true,
            "--no-renew" => a.no_renew = true,
            "--mode" => {
                a.mode = match val().as_str() {
                    "normal" => Mode::Normal,
                    "plain-del" => Mode::PlainDel,
                    "ignore-validity" => Mode::IgnoreValidity,
                    "exit-holding" => Mode::ExitHolding,
                    m => usage(&format!("unknown mode {m:?}")),
                }
            }
            "--pause-after-acquire-ms" => a.pause_ms = num(val()),
            "--node-timeout-ms" => a.node_timeout_ms = Some(num(val())),
            "--connect-timeout-ms" => a.connect_timeout_ms = Some(num(val())),
            "--wait-ms" => a.wait_ms = num(val()),
            f => usage(&format!("unknown flag {f:?}")),
        }
    }
    if a.urls.is_empty() || a.key.is_empty() || a.client.is_empty() || a.history.is_empty() {
        usage("--urls, --key, --client and --history are required");
    }
    if a.data_url.is_empty() {
        usage("--data-url is required");
    }
    a
}

/// splitmix64: a small deterministic generator for the hold times.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn between(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
}

/// Converts `Instant`s to `CLOCK_MONOTONIC` nanoseconds (offset measured once at start).
#[derive(Clone, Copy)]
struct Clock {
    base: Instant,
    base_ns: i64,
}

impl Clock {
    fn new() -> Clock {
        Clock {
            base: Instant::now(),
            base_ns: mono_ns(),
        }
    }
    fn ns(&self, i: Instant) -> i64 {
        match i.checked_duration_since(self.base) {
            Some(d) => self.base_ns + d.as_nanos() as i64,
            None => self.base_ns - (self.base - i).as_nanos() as i64,
        }
    }
}

/// The history file: one `write` per line on an `O_APPEND` file, so a SIGKILL loses nothing
/// already reported and lines of several writers never interleave.
#[derive(Clone)]
struct History(Arc<Mutex<File>>);

impl History {
    fn emit(&self, e: &Event) {
        let line = format!("{}\n", e.to_json());
        let mut f = self.0.lock().unwrap_or_else(|p| p.into_inner());
        f.write_all(line.as_bytes()).expect("write history");
    }
}

/// What the driver knows about the current grant.
struct Grant {
    event: Event,
    lost_reported: Arc<AtomicBool>,
    validity: Arc<AtomicI64>,
    renewals: u64,
}

impl Grant {
    fn emit(&self, h: &History, kind: Kind, t_ns: i64) {
        let mut e = self.event.clone();
        e.event = kind;
        e.t_ns = t_ns;
        e.validity_ns = self.validity.load(Ordering::SeqCst);
        h.emit(&e);
    }

    /// Emits `renew` if the library renewed since we last looked.
    fn poll(&mut self, h: &History, guard: &MutexGuard, clock: Clock) {
        let r = guard.renewals();
        if r != self.renewals {
            self.renewals = r;
            self.validity
                .store(clock.ns(guard.valid_until()), Ordering::SeqCst);
            self.emit(h, Kind::Renew, mono_ns());
        }
    }

    /// A `use`: timestamp first, then the check, so a passing check proves t < validity.
    /// Returns false (after reporting the loss) when the guard is no longer held.
    fn use_(&mut self, h: &History, guard: &MutexGuard, clock: Clock, checked: bool) -> bool {
        self.poll(h, guard, clock);
        let t = mono_ns();
        if checked && guard.check().is_err() {
            if !self.lost_reported.swap(true, Ordering::SeqCst) {
                self.emit(h, Kind::Lost, mono_ns());
            }
            return false;
        }
        self.emit(h, Kind::Use, t);
        true
    }
}

fn main() {
    let a = parse_args();
    let clock = Clock::new();
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&a.history)
        .unwrap_or_else(|e| usage(&format!("cannot open {}: {e}", a.history)));
    let history = History(Arc::new(Mutex::new(file)));
    let mut builder = Client::builder()
        .nodes(a.urls.iter().map(String::as_str))
        .owner(a.client.clone());
    if let Some(t) = a.node_timeout_ms {
        builder = builder.node_timeout(Duration::from_millis(t));
    }
    if let Some(t) = a.connect_timeout_ms {
        builder = builder.connect_timeout(Duration::from_millis(t));
    }
    let client = builder
        .build()
        .unwrap_or_else(|e| usage(&format!("client: {e}")));
    let mutex = client
        .mutex(&a.key)
        .ttl(Duration::from_millis(a.ttl_ms))
        .auto_renew(!a.no_renew);
    let mut data = redis::Client::open(a.data_url.as_str())
        .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(5)))
        .unwrap_or_else(|e| usage(&format!("data server: {e}")));
    let counter = format!("{}:counter", a.key);
    let fence_key = format!("{}:fence", a.key);
    let read = redis::Script::new(READ);
    let write = redis::Script::new(WRITE);
    let mut rng = Rng(a.seed);
    let (mut sections, mut waits, mut lost, mut rejected) = (0u64, 0u64, 0u64, 0u64);

    for section in 0..a.n {
        let guard = match mutex.try_lock() {
            Ok(g) => g,
            Err(TryLockError::WouldBlock) => {
                waits += 1;
                match mutex.try_lock_for(Duration::from_millis(a.wait_ms)) {
                    Ok(g) => g,
                    Err(e) => usage(&format!("lock: {e}")),
                }
            }
            Err(e) => usage(&format!("lock: {e}")),
        };
        let validity = Arc::new(AtomicI64::new(clock.ns(guard.valid_until())));
        let mut grant = Grant {
            event: Event {
                client: a.client.clone(),
                event: Kind::Acquire,
                t_ns: mono_ns(),
                key: a.key.clone(),
                token: String::from_utf8_lossy(guard.token()).into_owned(),
                fence: guard.fence(),
                validity_ns: validity.load(Ordering::SeqCst),
            },
            lost_reported: Arc::new(AtomicBool::new(false)),
            validity,
            renewals: guard.renewals(),
        };
        history.emit(&grant.event);
        {
            let (h, mut e) = (history.clone(), grant.event.clone());
            let (reported, validity) = (grant.lost_reported.clone(), grant.validity.clone());
            guard.on_lost(move || {
                if !reported.swap(true, Ordering::SeqCst) {
                    e.event = Kind::Lost;
                    e.t_ns = mono_ns();
                    e.validity_ns = validity.load(Ordering::SeqCst);
                    h.emit(&e);
                }
            });
        }
        if a.pause_ms > 0 {
            std::thread::sleep(Duration::from_millis(a.pause_ms));
        }
        let checked = a.mode != Mode::IgnoreValidity;
        let fence = guard.fence();
        let mut done = false;
        if grant.use_(&history, &guard, clock, checked) {
            if a.mode == Mode::ExitHolding {
                // No destructor runs: the guard is neither released nor forgotten.
                std::process::exit(0);
            }
            let v: i64 = if a.fenced {
                read.key(&counter)
                    .key(&fence_key)
                    .arg(fence)
                    .invoke(&mut data)
                    .expect("fenced read")
            } else {
                redis::cmd("GET")
                    .arg(&counter)
                    .query::<Option<i64>>(&mut data)
                    .expect("read")
                    .unwrap_or(0)
            };
            if v < 0 {
                rejected += 1;
            } else {
                // Hold for the drawn time, noticing renewals as they happen.
                let drawn = rng.between(a.hold_ms.0, a.hold_ms.1);
                let hold = match a.first_hold_ms {
                    Some(first) if section == 0 => first,
                    _ => drawn,
                };
                let end = Instant::now() + Duration::from_millis(hold);
                while let Some(left) = end.checked_duration_since(Instant::now()) {
                    std::thread::sleep(left.min(Duration::from_millis(10)));
                    grant.poll(&history, &guard, clock);
                }
                if grant.use_(&history, &guard, clock, checked) {
                    if a.fenced {
                        let ok: i64 = write
                            .key(&counter)
                            .key(&fence_key)
                            .arg(fence)
                            .arg(v + 1)
                            .invoke(&mut data)
                            .expect("fenced write");
                        if ok == 1 {
                            done = true;
                        } else {
                            rejected += 1;
                        }
                    } else {
                        redis::cmd("SET")
                            .arg(&counter)
                            .arg(v + 1)
                            .query::<()>(&mut data)
                            .expect("write");
                        done = true;
                    }
                }
            }
        }
        sections += u64::from(done);
        grant.poll(&history, &guard, clock);
        // The hold ends when we stop using: timestamp before the release is sent.
        grant.emit(&history, Kind::Release, mono_ns());
        if a.mode == Mode::PlainDel {
            for url in &a.urls {
                if let Ok(mut c) = redis::Client::open(url.as_str())
                    .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(1)))
                {
                    let _: redis::RedisResult<()> = redis::cmd("DEL").arg(&a.key).query(&mut c);
                }
            }
            // The guard's own compare-and-delete is harmless now: the key is gone or not ours.
            drop(guard);
            lost += u64::from(grant.lost_reported.load(Ordering::SeqCst));
        } else {
            let failed = guard.unlock().is_err();
            lost += u64::from(failed || grant.lost_reported.load(Ordering::SeqCst));
        }
    }
    // The wall clock at the end (seconds since the epoch): shows a faked clock took effect.
    let wall = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    println!(
        "done client={} sections={sections} waits={waits} lost={lost} rejected={rejected} \
         wall={wall}",
        a.client
    );
}
