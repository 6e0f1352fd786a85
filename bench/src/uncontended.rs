//! In-process rows: the PING baseline and the uncontended lock/unlock rows, interleaved.
//!
//! The machines are shared and noisy, so the measurements take turns: each round runs a
//! small batch (10 samples) of every measurement, and the rounds repeat; every so many rounds
//! a chunk of every external row (Python, C) runs too. A burst of load from elsewhere then
//! lands on all rows alike instead of on whichever happened to run at that moment. Small
//! batches matter on virtual machines: there, a round trip costs several times more while the
//! scheduler keeps client and server on different (idle) CPUs than on one, and it switches
//! between the two for seconds at a time.

use std::time::{Duration, Instant};

use crate::lockers::{Locker, RedlockLocker, RedmutexLocker, Shared, TTL};
use crate::quorum::QuorumPing;
use crate::rslock::RslockChild;
use crate::stats::{Samples, ns};

/// One measurement: a name, how it samples, and how many samples per round.
struct Measure<'a> {
    name: &'static str,
    per_round: usize,
    sample: Sample<'a>,
    samples: Vec<u64>,
}

/// How a measurement takes its samples.
enum Sample<'a> {
    /// One sample per call, timed around the call.
    Timed(Box<dyn FnMut() -> Result<(), String> + 'a>),
    /// N samples per call, timed by the measurement itself (untimed work between samples, or
    /// timed in another process).
    Own(Box<dyn FnMut(usize) -> Result<Vec<u64>, String> + 'a>),
}

impl<'a> Measure<'a> {
    fn timed(
        name: &'static str,
        per_round: usize,
        f: impl FnMut() -> Result<(), String> + 'a,
    ) -> Measure<'a> {
        Measure {
            name,
            per_round,
            sample: Sample::Timed(Box::new(f)),
            samples: Vec::new(),
        }
    }

    fn own(
        name: &'static str,
        per_round: usize,
        f: impl FnMut(usize) -> Result<Vec<u64>, String> + 'a,
    ) -> Measure<'a> {
        Measure {
            name,
            per_round,
            sample: Sample::Own(Box::new(f)),
            samples: Vec::new(),
        }
    }

    /// `n` samples, kept only if `keep`.
    fn run(&mut self, n: usize, keep: bool) -> Result<(), String> {
        let r = match &mut self.sample {
            Sample::Timed(f) => (0..n).try_for_each(|_| {
                let t = Instant::now();
                f()?;
                if keep {
                    self.samples.push(ns(t.elapsed()));
                }
                Ok(())
            }),
            Sample::Own(f) => f(n).map(|mut v| {
                if keep {
                    self.samples.append(&mut v);
                }
            }),
        };
        r.map_err(|e| format!("{}: {e}", self.name))
    }
}

pub struct Uncontended {
    /// `PING` on one node with redis-rs (`query`), the unit of every ratio.
    pub ping: Samples,
    /// `PING` written to five nodes, then the five replies read: the floor of a 5-node round.
    pub ping5: Samples,
    /// `PING` written to five nodes, done when three replied: the floor of a quorum round.
    pub ping5q: Samples,
    /// `SET NX PX`, then a compare-and-delete script, with redis-rs alone: the least a lock
    /// whose release is safe costs on a Redis without a compare-and-delete command (7.x).
    pub floor1: Samples,
    /// The same with a fence: a script that does `SET NX PX` and, when it took the lock,
    /// `INCR` of a counter; then the compare-and-delete script. The least a fenced lock costs
    /// (the `INCR` only on success needs a script, as the release does).
    pub floor_fenced: Samples,
    /// A fenced acquire without a script: `MULTI`, `SET NX PX GET`, `PTTL`, `INCR`, `EXEC` in
    /// one write (the counter rises on every attempt, granted or not), then the
    /// compare-and-delete script: what a fenced lock would cost with no script on its way in.
    pub floor_multi: Samples,
    pub redmutex1: Samples,
    pub redmutex5: Samples,
    /// redmutex's other kinds on one node: a permit of a 3-permit semaphore, a read hold, the
    /// write side of a read-write lock.
    pub semaphore1: Samples,
    pub read1: Samples,
    pub write1: Samples,
    pub redlock1: Option<Samples>,
    pub redlock5: Option<Samples>,
    /// The `rslock` crate (async, in a child process), TTL 10 s.
    pub rslock1: Option<Samples>,
    pub rslock5: Option<Samples>,
}

pub struct Plan {
    pub rounds: usize,
    pub per_round: usize,
    /// Samples per round of the `redlock` rows (a new TCP connection per node and call).
    pub per_round_redlock: usize,
    /// Measure the peers' rows too (redlock, rslock).
    pub with_peers: bool,
    /// `between` runs after every this many rounds.
    pub between_every: usize,
}

fn conn(url: &str) -> Result<redis::Connection, String> {
    let c = redis::Client::open(url)
        .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(5)))
        .map_err(|e| format!("{url}: {e}"))?;
    c.set_read_timeout(Some(Duration::from_secs(5)))
        .map_err(|e| e.to_string())?;
    Ok(c)
}

/// Runs the rounds; `between` runs after each round (the external processes' chunks, so that
/// they take turns with the in-process rows too).
pub fn run(
    one: &str,
    five: &[String],
    plan: &Plan,
    between: &mut dyn FnMut() -> Result<(), String>,
) -> Result<Uncontended, String> {
    let mut ping_conn = conn(one)?;
    let mut five_conns = five
        .iter()
        .map(|u| conn(u))
        .collect::<Result<Vec<_>, _>>()?;
    let ping_packed = redis::cmd("PING").get_packed_command();
    let mut floor_conn = conn(one)?;
    let compare_and_delete = redis::Script::new(
        "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0",
    );
    let mut fenced = FencedFloor::open(one)?;
    let mut multi_conn = conn(one)?;
    let mut m1 = RedmutexLocker::open(&[one.to_owned()], "bench:uncontended")?;
    let mut m5 = RedmutexLocker::open(five, "bench:uncontended")?;
    let mut r1 = RedlockLocker::open(&[one.to_owned()], "bench:uncontended:redlock");
    let mut r5 = RedlockLocker::open(five, "bench:uncontended:redlock");
    let mut quorum = QuorumPing::open(five)?;
    let kinds = Shared::client(one)?;
    let mut sem1 = Shared::semaphore(&kinds, "bench:uncontended:semaphore", 3);
    let mut read1 = Shared::read(&kinds, "bench:uncontended:read");
    let mut write1 = Shared::write(&kinds, "bench:uncontended:write");

    let mut measures: Vec<Measure> = vec![
        Measure::timed("ping", plan.per_round, || {
            let pong: String = redis::cmd("PING")
                .query(&mut ping_conn)
                .map_err(|e| e.to_string())?;
            debug_assert_eq!(pong, "PONG");
            Ok(())
        }),
        Measure::timed("ping5", plan.per_round, || {
            for c in five_conns.iter_mut() {
                c.send_packed_command(&ping_packed)
                    .map_err(|e| e.to_string())?;
            }
            for c in five_conns.iter_mut() {
                c.recv_response().map_err(|e| e.to_string())?;
            }
            Ok(())
        }),
        Measure::own("ping5q", plan.per_round, move |n| quorum.samples(n)),
        Measure::timed("floor1", plan.per_round, || {
            let (key, token) = ("bench:uncontended:floor", "floor-token");
            let set: Option<String> = redis::cmd("SET")
                .arg(key)
                .arg(token)
                .arg("NX")
                .arg("PX")
                .arg(TTL.as_millis() as u64)
                .query(&mut floor_conn)
                .map_err(|e| e.to_string())?;
            let deleted: i64 = compare_and_delete
                .key(key)
                .arg(token)
                .invoke(&mut floor_conn)
                .map_err(|e| e.to_string())?;
            match (set, deleted) {
                (Some(_), 1) => Ok(()),
                _ => Err(format!("{key} was not free")),
            }
        }),
        Measure::timed("floor_fenced", plan.per_round, || fenced.cycle()),
        Measure::timed("floor_multi", plan.per_round, || {
            let (key, fence, token) = (
                "bench:uncontended:multi",
                "{bench:uncontended:multi}:fence",
                "floor-token",
            );
            let (holder, _pttl, fenced): (Option<String>, i64, i64) = redis::pipe()
                .atomic()
                .cmd("SET")
                .arg(key)
                .arg(token)
                .arg("NX")
                .arg("PX")
                .arg(TTL.as_millis() as u64)
                .arg("GET")
                .cmd("PTTL")
                .arg(key)
                .cmd("INCR")
                .arg(fence)
                .query(&mut multi_conn)
                .map_err(|e| e.to_string())?;
            let deleted: i64 = compare_and_delete
                .key(key)
                .arg(token)
                .invoke(&mut multi_conn)
                .map_err(|e| e.to_string())?;
            match (holder, fenced, deleted) {
                (None, f, 1) if f > 0 => Ok(()),
                _ => Err(format!("{key} was not free")),
            }
        }),
        Measure::timed("redmutex1", plan.per_round, || try_unlock(&mut m1)),
        Measure::timed("redmutex5", plan.per_round, || try_unlock(&mut m5)),
        Measure::timed("semaphore1", plan.per_round, || try_unlock(&mut sem1)),
        Measure::timed("read1", plan.per_round, || try_unlock(&mut read1)),
        Measure::timed("write1", plan.per_round, || try_unlock(&mut write1)),
    ];
    if plan.with_peers {
        measures.push(Measure::timed("redlock1", plan.per_round_redlock, || {
            try_unlock(&mut r1)
        }));
        measures.push(Measure::timed("redlock5", plan.per_round_redlock, || {
            try_unlock(&mut r5)
        }));
        let key = "bench:uncontended:rslock";
        let mut s1 = RslockChild::start(&[one.to_owned()], key)?;
        let mut s5 = RslockChild::start(five, key)?;
        measures.push(Measure::own("rslock1", plan.per_round, move |n| {
            s1.samples(n)
        }));
        measures.push(Measure::own("rslock5", plan.per_round, move |n| {
            s5.samples(n)
        }));
    }

    // Warm-up: connections, loaded scripts, the renew thread, caches.
    for m in measures.iter_mut() {
        m.run(m.per_round.min(50), false)?;
    }
    for round in 1..=plan.rounds {
        for m in measures.iter_mut() {
            m.run(m.per_round, true)?;
        }
        if round % plan.between_every.max(1) == 0 {
            between()?;
        }
    }
    let mut take = |name: &str| {
        measures
            .iter_mut()
            .find(|m| m.name == name)
            .map(|m| Samples::new(std::mem::take(&mut m.samples)))
    };
    Ok(Uncontended {
        ping: take("ping").unwrap_or_default(),
        ping5: take("ping5").unwrap_or_default(),
        ping5q: take("ping5q").unwrap_or_default(),
        floor1: take("floor1").unwrap_or_default(),
        floor_fenced: take("floor_fenced").unwrap_or_default(),
        floor_multi: take("floor_multi").unwrap_or_default(),
        redmutex1: take("redmutex1").unwrap_or_default(),
        redmutex5: take("redmutex5").unwrap_or_default(),
        semaphore1: take("semaphore1").unwrap_or_default(),
        read1: take("read1").unwrap_or_default(),
        write1: take("write1").unwrap_or_default(),
        redlock1: take("redlock1"),
        redlock5: take("redlock5"),
        rslock1: take("rslock1"),
        rslock5: take("rslock5"),
    })
}

/// The fenced floor: a script that does `SET NX PX` and, when it took the lock, `INCR` of a
/// counter; then the compare-and-delete script, with redis-rs alone.
pub struct FencedFloor {
    conn: redis::Connection,
    acquire: redis::Script,
    release: redis::Script,
}

impl FencedFloor {
    pub fn open(url: &str) -> Result<FencedFloor, String> {
        Ok(FencedFloor {
            conn: conn(url)?,
            acquire: redis::Script::new(
                "if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return redis.call('INCR', KEYS[2]) end return 0",
            ),
            release: redis::Script::new(
                "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0",
            ),
        })
    }

    /// One take and release.
    pub fn cycle(&mut self) -> Result<(), String> {
        let (key, fence, token) = (
            "bench:uncontended:fenced",
            "{bench:uncontended:fenced}:fence",
            "floor-token",
        );
        let fenced: i64 = self
            .acquire
            .key(key)
            .key(fence)
            .arg(token)
            .arg(TTL.as_millis() as u64)
            .invoke(&mut self.conn)
            .map_err(|e| e.to_string())?;
        let deleted: i64 = self
            .release
            .key(key)
            .arg(token)
            .invoke(&mut self.conn)
            .map_err(|e| e.to_string())?;
        match (fenced, deleted) {
            (f, 1) if f > 0 => Ok(()),
            _ => Err(format!("{key} was not free")),
        }
    }
}

/// One sample of an uncontended row: take the free lock, release it.
pub fn try_unlock(l: &mut dyn Locker) -> Result<(), String> {
    if !l.try_lock()? {
        return Err(format!(
            "the lock was not free (TTL {TTL:?}); another run on the same servers?"
        ));
    }
    l.unlock()
}

/// Server-side time per call, from `INFO commandstats`, for telling the client's share of a
/// row from Redis's own.
pub struct ServerTime {
    pub ping_us: f64,
    /// Average of redmutex's acquire and release scripts (EVALSHA).
    pub script_us: f64,
    /// EVALSHA calls per try_lock + unlock.
    pub scripts_per_op: f64,
}

pub fn server_time(url: &str, n: usize) -> Result<ServerTime, String> {
    let mut admin = conn(url)?;
    let mut ping_conn = conn(url)?;
    let mut m1 = RedmutexLocker::open(&[url.to_owned()], "bench:server-time")?;
    try_unlock(&mut m1)?;
    reset(&mut admin)?;
    for _ in 0..n {
        let _: String = redis::cmd("PING")
            .query(&mut ping_conn)
            .map_err(|e| e.to_string())?;
    }
    let (_, ping_us) = commandstat(&mut admin, "ping")?;
    reset(&mut admin)?;
    for _ in 0..n {
        try_unlock(&mut m1)?;
    }
    let (calls, script_us) = commandstat(&mut admin, "evalsha")?;
    Ok(ServerTime {
        ping_us,
        script_us,
        scripts_per_op: calls as f64 / n.max(1) as f64,
    })
}

/// The CPU time one `try_lock` + `unlock` takes, in the client's thread and in all the
/// servers it asks: on a machine with fewer CPUs than processes, a cycle can take no less than their sum
/// over the CPUs, however well the round runs in parallel.
pub struct CpuPerCycle {
    pub client_us: f64,
    pub servers_us: f64,
    /// The CPUs that share the work (`available_parallelism`).
    pub cpus: usize,
}

impl CpuPerCycle {
    /// The least a cycle can take here: all its CPU time spread over every CPU.
    pub fn floor_ns(&self) -> u64 {
        ((self.client_us + self.servers_us) * 1000.0 / self.cpus.max(1) as f64) as u64
    }
}

/// Measures [`CpuPerCycle`] over `n` cycles of `cycle` on `urls` (servers on this machine,
/// found by the `process_id` they report).
pub fn cpu_per_cycle(
    urls: &[String],
    n: usize,
    cycle: &mut dyn FnMut() -> Result<(), String>,
) -> Result<CpuPerCycle, String> {
    let mut pids = Vec::new();
    for url in urls {
        let info: String = redis::cmd("INFO")
            .arg("server")
            .query(&mut conn(url)?)
            .map_err(|e| e.to_string())?;
        let pid = info
            .lines()
            .find_map(|l| l.strip_prefix("process_id:"))
            .ok_or("no process_id in INFO server")?;
        pids.push(pid.trim().to_owned());
    }
    for _ in 0..50 {
        cycle()?;
    }
    let servers = |pids: &[String]| -> Result<u64, String> { pids.iter().map(|p| cpu_ns(p)).sum() };
    let (c0, s0) = (cpu_ns("thread-self")?, servers(&pids)?);
    for _ in 0..n {
        cycle()?;
    }
    let (c1, s1) = (cpu_ns("thread-self")?, servers(&pids)?);
    let per = |ns: u64| ns as f64 / 1000.0 / n.max(1) as f64;
    Ok(CpuPerCycle {
        client_us: per(c1 - c0),
        servers_us: per(s1 - s0),
        cpus: std::thread::available_parallelism().map_or(1, |c| c.get()),
    })
}

/// The CPU time a thread has run so far, in ns (`/proc/…/schedstat`): `thread-self` for the
/// calling thread (the one that runs the cycles), a server's pid for its main thread (where
/// Redis runs every command).
fn cpu_ns(task: &str) -> Result<u64, String> {
    let path = format!("/proc/{task}/schedstat");
    let stat = std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?;
    stat.split_whitespace()
        .next()
        .and_then(|ns| ns.parse().ok())
        .ok_or_else(|| format!("{path}: no run time"))
}

fn reset(c: &mut redis::Connection) -> Result<(), String> {
    redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query::<()>(c)
        .map_err(|e| e.to_string())
}

/// (calls, usec_per_call) of one command.
fn commandstat(c: &mut redis::Connection, cmd: &str) -> Result<(u64, f64), String> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(c)
        .map_err(|e| e.to_string())?;
    let line = info
        .lines()
        .find_map(|l| l.strip_prefix(&format!("cmdstat_{cmd}:")))
        .ok_or_else(|| format!("no cmdstat_{cmd} in INFO commandstats"))?;
    let field = |name: &str| {
        line.split(',')
            .find_map(|kv| kv.strip_prefix(&format!("{name}=")))
            .unwrap_or("0")
            .to_owned()
    };
    Ok((
        field("calls").parse().unwrap_or(0),
        field("usec_per_call").parse().unwrap_or(0.0),
    ))
}

/// The median of a short burst of PINGs: how the baseline drifts between phases.
pub fn ping_probe(url: &str, n: usize) -> Result<u64, String> {
    let mut c = conn(url)?;
    let mut v = Vec::with_capacity(n);
    for i in 0..n + 20 {
        let t = Instant::now();
        let _: String = redis::cmd("PING")
            .query(&mut c)
            .map_err(|e| e.to_string())?;
        if i >= 20 {
            v.push(ns(t.elapsed()));
        }
    }
    Ok(Samples::new(v).median())
}
