//! One client of a torture scenario: takes a lock N times, holds it for a random
//! time doing a read-modify-write of a counter, and appends one JSON line per event to a
//! history file (see `redmutex_tests::history`).
//!
//! ```text
//! torture --urls A,B,C --key K --client NAME --n N --hold-ms MIN:MAX --ttl-ms T
//!         --history FILE --seed S --data-url URL
//!         [--fenced] [--mode normal|plain-del|ignore-validity] [--pause-after-acquire-ms X]
//!         [--no-renew] [--node-timeout-ms X] [--connect-timeout-ms X] [--wait-ms X]
//!         [--extend-ms MIN:MAX] [--release unlock|drop|mix] [--keep-going] [--for-ms X]
//!         [--hook-only]
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
//! - `--hook-only`: renewals reach the history through the `on_renewed` hook alone (the
//!   driver does not read `renewals()` every 10 ms while it holds), so a test can see what
//!   the hook wrote.
//! - `--first-hold-ms X` holds the first section X ms (later ones draw from `--hold-ms`).
//! - `--pause-after-acquire-ms X` sleeps X ms right after each acquire.
//! - `--connect-timeout-ms X` is the client's connect timeout, which also bounds how long a
//!   lock call rides over an outage (no quorum reachable) before it reports it.
//! - `--extend-ms MIN:MAX` extends the lease once in the middle of each hold, to a TTL drawn
//!   from MIN..=MAX (a `renew` event with the new validity when it succeeds).
//! - `--release drop` ends each section by dropping the guard instead of `unlock()`; `mix`
//!   draws one of the two per section.
//! - `--for-ms X` starts no section after X ms (with a large `--n`: a client for a duration).
//! - `--keep-going`: a lock call that fails or times out (no quorum, a node down) is counted
//!   (`errors=`) and the next section begins 20 ms later, instead of exiting with code 2.
//!
//! Renewals are recorded as they happen: the guard's `on_renewed` hook writes a `renew` event
//! with the validity the renewal set, on the thread that renewed, before anything else can
//! happen to the process. `MutexGuard::renewals` is still read when the driver looks at the
//! guard (and when the loss is learnt) as a safety net; a `lost` event carries the validity
//! the guard had when the loss was learnt, written after any renewal not yet reported.
//!
//! Ends with one line on stdout:
//! `done client=NAME sections=S waits=W lost=L rejected=R errors=E wall=UNIX_SECONDS`.
//! Exit code 2 on a usage or lock error.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redmutex::{Client, MutexGuard, TryLockError};
use redmutex_tests::history::{Event, Kind, mono_ns};
use redmutex_tests::schedule::Rng;

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
    hook_only: bool,
    node_timeout_ms: Option<u64>,
    connect_timeout_ms: Option<u64>,
    wait_ms: u64,
    extend_ms: Option<(u64, u64)>,
    release: Release,
    keep_going: bool,
    for_ms: Option<u64>,
}

/// How a section ends.
#[derive(PartialEq, Eq, Clone, Copy)]
enum Release {
    Unlock,
    Drop,
    Mix,
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
        hook_only: false,
        node_timeout_ms: None,
        connect_timeout_ms: None,
        wait_ms: 30_000,
        extend_ms: None,
        release: Release::Unlock,
        keep_going: false,
        for_ms: None,
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
            "--hold-ms" => a.hold_ms = range(&flag, &val()),
            "--extend-ms" => a.extend_ms = Some(range(&flag, &val())),
            "--release" => {
                a.release = match val().as_str() {
                    "unlock" => Release::Unlock,
                    "drop" => Release::Drop,
                    "mix" => Release::Mix,
                    r => usage(&format!("unknown release {r:?}")),
                }
            }
            "--keep-going" => a.keep_going = true,
            "--for-ms" => a.for_ms = Some(num(val())),
            "--first-hold-ms" => a.first_hold_ms = Some(num(val())),
            "--ttl-ms" => a.ttl_ms = num(val()),
            "--history" => a.history = val(),
            "--seed" => a.seed = num(val()),
            "--data-url" => a.data_url = val(),
            "--fenced" => a.fenced = true,
            "--no-renew" => a.no_renew = true,
            "--hook-only" => a.hook_only = true,
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

/// `MIN:MAX` (or one number for both), MIN <= MAX.
fn range(flag: &str, v: &str) -> (u64, u64) {
    let (lo, hi) = v.split_once(':').unwrap_or((v, v));
    let num = |v: &str| -> u64 {
        v.parse()
            .unwrap_or_else(|_| usage(&format!("bad number {v:?}")))
    };
    let r = (num(lo), num(hi));
    if r.0 > r.1 {
        usage(&format!("{flag} MIN:MAX with MIN <= MAX"));
    }
    r
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

/// What the driver reported about the current grant; shared with its on-lost callback.
struct Grant {
    history: History,
    clock: Clock,
    /// The acquire event: the template of every later event of this grant.
    event: Event,
    seen: Mutex<Seen>,
}

struct Seen {
    /// `renewals()` when last reported.
    renewals: u64,
    /// The validity last reported.
    validity_ns: i64,
    lost: bool,
}

impl Grant {
    fn new(history: &History, clock: Clock, client: &str, key: &str, guard: &MutexGuard) -> Grant {
        let validity_ns = clock.ns(guard.valid_until());
        Grant {
            history: history.clone(),
            clock,
            event: Event {
                client: client.to_owned(),
                event: Kind::Acquire,
                t_ns: mono_ns(),
                key: key.to_owned(),
                token: String::from_utf8_lossy(guard.token()).into_owned(),
                fence: guard.fence(),
                validity_ns,
            },
            seen: Mutex::new(Seen {
                renewals: guard.renewals(),
                validity_ns,
                lost: false,
            }),
        }
    }

    fn seen(&self) -> std::sync::MutexGuard<'_, Seen> {
        self.seen.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn emit(&self, kind: Kind, t_ns: i64, validity_ns: i64) {
        let mut e = self.event.clone();
        e.event = kind;
        e.t_ns = t_ns;
        e.validity_ns = validity_ns;
        self.history.emit(&e);
    }

    /// A renewal, told by the library as it happened: `renew` with the validity it set.
    fn renewed(&self, valid_until: std::time::Instant) {
        let mut seen = self.seen();
        let validity_ns = self.clock.ns(valid_until);
        if !seen.lost && validity_ns != seen.validity_ns {
            seen.renewals += 1;
            seen.validity_ns = validity_ns;
            self.emit(Kind::Renew, mono_ns(), validity_ns);
        }
    }

    /// Emits `renew` if the library renewed since we last looked (not after the loss).
    fn poll(&self, guard: &MutexGuard) {
        let mut seen = self.seen();
        self.report_renewal(&mut seen, guard);
    }

    fn report_renewal(&self, seen: &mut Seen, guard: &MutexGuard) {
        let r = guard.renewals();
        if r != seen.renewals && !seen.lost {
            seen.renewals = r;
            seen.validity_ns = self.clock.ns(guard.valid_until());
            self.emit(Kind::Renew, mono_ns(), seen.validity_ns);
        }
    }

    /// Emits `lost` once, with the validity the guard had when the loss was learnt, after a
    /// `renew` for any renewal not reported yet. Without the guard (it is being dropped), the
    /// validity last reported.
    fn lost(&self, guard: Option<&MutexGuard>) {
        let mut seen = self.seen();
        if seen.lost {
            return;
        }
        if let Some(g) = guard {
            self.report_renewal(&mut seen, g);
            seen.validity_ns = self.clock.ns(g.valid_until());
        }
        seen.lost = true;
        self.emit(Kind::Lost, mono_ns(), seen.validity_ns);
    }

    fn is_lost(&self) -> bool {
        self.seen().lost
    }

    /// A `use`: timestamp first, then the check, so a passing check proves t < validity;
    /// then any renewal the check relied on is reported (after t: the checker counts every
    /// validity promised before the hold ended). Returns false (after reporting the loss)
    /// when the guard is no longer held.
    fn use_(&self, guard: &MutexGuard, checked: bool) -> bool {
        let t = mono_ns();
        if checked && guard.check().is_err() {
            self.lost(Some(guard));
            return false;
        }
        self.poll(guard);
        let validity = self.seen().validity_ns;
        self.emit(Kind::Use, t, validity);
        true
    }

    /// Extends the lease to `ttl`; a success is reported as a renewal.
    fn extend(&self, guard: &MutexGuard, ttl: Duration) {
        if guard.extend(ttl).is_ok() {
            self.poll(guard);
        }
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
    let mut rng = Rng::new(a.seed);
    let (mut sections, mut waits, mut lost, mut rejected, mut errors) =
        (0u64, 0u64, 0u64, 0u64, 0u64);

    let started = Instant::now();
    for section in 0..a.n {
        if a.for_ms
            .is_some_and(|ms| started.elapsed() >= Duration::from_millis(ms))
        {
            break;
        }
        let locked = match mutex.try_lock() {
            Err(TryLockError::WouldBlock) => {
                waits += 1;
                mutex.try_lock_for(Duration::from_millis(a.wait_ms))
            }
            other => other,
        };
        let guard = match locked {
            Ok(g) => Arc::new(g),
            Err(_) if a.keep_going => {
                errors += 1;
                // A node that refuses at once (restarting) would otherwise spin this loop.
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
            Err(e) => usage(&format!("lock: {e}")),
        };
        let grant = Arc::new(Grant::new(&history, clock, &a.client, &a.key, &guard));
        history.emit(&grant.event);
        {
            let g = Arc::clone(&grant);
            guard.on_renewed(move |valid_until| g.renewed(valid_until));
        }
        {
            // Weak: the callback lives in the guard, and must not keep it alive.
            let (g, weak) = (Arc::clone(&grant), Arc::downgrade(&guard));
            guard.on_lost(move || g.lost(weak.upgrade().as_deref()));
        }
        if a.pause_ms > 0 {
            std::thread::sleep(Duration::from_millis(a.pause_ms));
        }
        let checked = a.mode != Mode::IgnoreValidity;
        let fence = guard.fence();
        let mut done = false;
        if grant.use_(&guard, checked) {
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
                let mut extend = a.extend_ms.map(|(lo, hi)| {
                    (
                        Instant::now() + Duration::from_millis(hold / 2),
                        rng.between(lo, hi),
                    )
                });
                let end = Instant::now() + Duration::from_millis(hold);
                while let Some(left) = end.checked_duration_since(Instant::now()) {
                    std::thread::sleep(left.min(Duration::from_millis(10)));
                    if !a.hook_only {
                        grant.poll(&guard);
                    }
                    if let Some((at, ttl)) = extend
                        && Instant::now() >= at
                    {
                        grant.extend(&guard, Duration::from_millis(ttl));
                        extend = None;
                    }
                }
                if grant.use_(&guard, checked) {
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
        grant.poll(&guard);
        // The hold ends when we stop using: timestamp before the release is sent.
        grant.emit(Kind::Release, mono_ns(), grant.seen().validity_ns);
        let drop_it = match a.release {
            Release::Unlock => false,
            Release::Drop => true,
            Release::Mix => rng.chance(50),
        };
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
            lost += u64::from(grant.is_lost());
        } else if drop_it {
            drop(guard);
            lost += u64::from(grant.is_lost());
        } else {
            let failed = guard.release().is_err();
            lost += u64::from(failed || grant.is_lost());
        }
    }
    // The wall clock at the end (seconds since the epoch): shows a faked clock took effect.
    let wall = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    println!(
        "done client={} sections={sections} waits={waits} lost={lost} rejected={rejected} \
         errors={errors} wall={wall}",
        a.client
    );
}
