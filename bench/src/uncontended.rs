//! In-process rows: the PING baseline and the uncontended lock/unlock rows, interleaved.
//!
//! The machines are shared and noisy, so the measurements take turns: each round runs a
//! small batch (10 samples) of every measurement, and the rounds repeat; every so many rounds
//! a chunk of every external row (Python, C) runs too. A burst of load from elsewhere then
//! lands on all rows alike instead of on whichever happened to run at that moment. (The
//! servers and the clients run on CPUs of their own, see `pin.rs`: on a virtual machine a
//! round trip served on the client's own CPU costs several times less.)

use std::time::{Duration, Instant};

use crate::bare::BareRequests;
use crate::lockers::{Locker, RedlockLocker, RedmutexLocker, Shared, TTL};
use crate::quorum::{Order, QuorumFloor, QuorumPing};
use crate::rslock::RslockChild;
use crate::stats::{Rng, Samples, ns};

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
    /// The fenced floor's two scripts on five nodes, each round done when three replied
    /// (`crate::quorum::QuorumFloor`): the floor of a 5-node lock cycle.
    pub floor5q: Samples,
    /// The same with each round's replies read node by node, a blocking read each.
    pub floor5n: Samples,
    /// `SET NX PX`, then a compare-and-delete script, with redis-rs alone: the least a lock
    /// whose release is safe costs on a Redis without a compare-and-delete command (7.x).
    pub floor1: Samples,
    /// The same with a fence: a script that does `SET NX PX` and, when it took the lock,
    /// `INCR` of a counter; then the compare-and-delete script. The least a fenced lock costs
    /// (the `INCR` only on success needs a script, as the release does).
    pub floor_fenced: Samples,
    /// A fenced acquire without a script: `SET NX PX` and `INCR` in one write (the counter
    /// rises on every attempt, granted or not), then the compare-and-delete script: the
    /// least a fenced lock costs with no script on its way in.
    pub floor_plain: Samples,
    /// redmutex's own requests from a bare redis-rs connection (see `crate::bare`).
    pub bare1: Samples,
    /// The same requests with the floor's compare-and-delete in place of redmutex's release
    /// script: redmutex's acquire, the floor's release.
    pub bare_floor1: Samples,
    /// redmutex's `try_lock` + `unlock` of a fenced lock (the default) on 1 and on 5 nodes.
    pub redmutex1: Samples,
    pub redmutex5: Samples,
    /// The same with fencing off on 1 node: its `try_lock` sends plain commands, no script.
    pub unfenced1: Samples,
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

pub fn conn(url: &str) -> Result<redis::Connection, String> {
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
    let compare_and_delete = compare_and_delete();
    let mut fenced = FencedFloor::open(one)?;
    let mut plain = PlainFloor::open(one)?;
    let mut bare1 = BareRequests::open(one, "bench:uncontended:bare")?;
    let mut bare_floor1 =
        BareRequests::with_floor_release(one, "bench:uncontended:bare-floor", &fenced.release)?;
    let mut m1 = RedmutexLocker::open(&[one.to_owned()], "bench:uncontended")?;
    let mut m5 = RedmutexLocker::open(five, "bench:uncontended")?;
    let mut u1 = RedmutexLocker::unfenced(&[one.to_owned()], "bench:uncontended:unfenced")?;
    let mut r1 = RedlockLocker::open(&[one.to_owned()], "bench:uncontended:redlock");
    let mut r5 = RedlockLocker::open(five, "bench:uncontended:redlock");
    let mut quorum = QuorumPing::open(five)?;
    let mut floor5 = QuorumFloor::open(five, "bench:uncontended:fenced5", Order::Arrival)?;
    let mut floor5n = QuorumFloor::open(five, "bench:uncontended:fenced5n", Order::Nodes)?;
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
        Measure::own("floor5q", plan.per_round, move |n| floor5.samples(n)),
        Measure::own("floor5n", plan.per_round, move |n| floor5n.samples(n)),
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
            let deleted = release(&compare_and_delete, &mut floor_conn, key, token)?;
            match (set, deleted) {
                (Some(_), true) => Ok(()),
                _ => Err(format!("{key} was not free")),
            }
        }),
        Measure::timed("floor_fenced", plan.per_round, || fenced.cycle()),
        Measure::timed("floor_plain", plan.per_round, || plain.cycle()),
        Measure::timed("bare1", plan.per_round, || try_unlock(&mut bare1)),
        Measure::timed("bare_floor1", plan.per_round, || {
            try_unlock(&mut bare_floor1)
        }),
        Measure::timed("redmutex1", plan.per_round, || try_unlock(&mut m1)),
        Measure::timed("redmutex5", plan.per_round, || try_unlock(&mut m5)),
        Measure::timed("unfenced1", plan.per_round, || try_unlock(&mut u1)),
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
    // Each round runs the measures in a new order: a row measured right after another ran
    // faster or slower for it (a CPU kept busy by the row before wakes sooner), by up to a
    // third in full runs, and a fixed order gave each row the same neighbour every round.
    let mut order: Vec<usize> = (0..measures.len()).collect();
    let mut rng = Rng::seeded(0x9e37_79b9_7f4a_7c15);
    for round in 1..=plan.rounds {
        rng.shuffle(&mut order);
        for &i in &order {
            let m = &mut measures[i];
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
        floor5q: take("floor5q").unwrap_or_default(),
        floor5n: take("floor5n").unwrap_or_default(),
        floor1: take("floor1").unwrap_or_default(),
        floor_fenced: take("floor_fenced").unwrap_or_default(),
        floor_plain: take("floor_plain").unwrap_or_default(),
        bare1: take("bare1").unwrap_or_default(),
        bare_floor1: take("bare_floor1").unwrap_or_default(),
        redmutex1: take("redmutex1").unwrap_or_default(),
        redmutex5: take("redmutex5").unwrap_or_default(),
        unfenced1: take("unfenced1").unwrap_or_default(),
        semaphore1: take("semaphore1").unwrap_or_default(),
        read1: take("read1").unwrap_or_default(),
        write1: take("write1").unwrap_or_default(),
        redlock1: take("redlock1"),
        redlock5: take("redlock5"),
        rslock1: take("rslock1"),
        rslock5: take("rslock5"),
    })
}

/// The floors' release: delete `KEYS[1]` only while it holds `ARGV[1]`.
pub fn compare_and_delete() -> redis::Script {
    redis::Script::new(
        "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0",
    )
}

/// Runs the floors' release of `key` for `token`: whether it deleted the key.
fn release(
    script: &redis::Script,
    conn: &mut redis::Connection,
    key: &str,
    token: &str,
) -> Result<bool, String> {
    let deleted: i64 = script
        .key(key)
        .arg(token)
        .invoke(conn)
        .map_err(|e| e.to_string())?;
    Ok(deleted == 1)
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
        let (acquire, release) = FencedFloor::scripts();
        Ok(FencedFloor {
            conn: conn(url)?,
            acquire,
            release,
        })
    }

    /// The acquire script (`KEYS`: the lock, its fence; `ARGV`: the token, the TTL in ms;
    /// returns the fence, 0 when refused) and the release script.
    pub fn scripts() -> (redis::Script, redis::Script) {
        (
            redis::Script::new(
                "if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return redis.call('INCR', KEYS[2]) end return 0",
            ),
            compare_and_delete(),
        )
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
        let deleted = release(&self.release, &mut self.conn, key, token)?;
        match (fenced, deleted) {
            (f, true) if f > 0 => Ok(()),
            _ => Err(format!("{key} was not free")),
        }
    }
}

/// The scriptless fenced floor: `SET NX PX` and `INCR` in one write (the counter rises on
/// every attempt), then the compare-and-delete script, with redis-rs alone.
pub struct PlainFloor {
    conn: redis::Connection,
    release: redis::Script,
}

impl PlainFloor {
    pub fn open(url: &str) -> Result<PlainFloor, String> {
        Ok(PlainFloor {
            conn: conn(url)?,
            release: compare_and_delete(),
        })
    }

    /// One take and release.
    pub fn cycle(&mut self) -> Result<(), String> {
        let (key, fence, token) = (
            "bench:uncontended:plain",
            "{bench:uncontended:plain}:fence",
            "floor-token",
        );
        let (set, fenced): (Option<String>, i64) = redis::pipe()
            .cmd("SET")
            .arg(key)
            .arg(token)
            .arg("NX")
            .arg("PX")
            .arg(TTL.as_millis() as u64)
            .cmd("INCR")
            .arg(fence)
            .query(&mut self.conn)
            .map_err(|e| e.to_string())?;
        let deleted = release(&self.release, &mut self.conn, key, token)?;
        match (set, fenced, deleted) {
            (Some(_), f, true) if f > 0 => Ok(()),
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
