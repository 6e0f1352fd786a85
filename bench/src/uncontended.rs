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

use crate::lockers::{Locker, RedlockLocker, RedmutexLocker, TTL};
use crate::stats::{Samples, ns};

/// One measurement: a name, a sample function, and how many samples per round.
struct Measure<'a> {
    name: &'static str,
    per_round: usize,
    sample: Box<dyn FnMut() -> Result<(), String> + 'a>,
    samples: Vec<u64>,
}

pub struct Uncontended {
    /// `PING` on one node with redis-rs (`query`), the unit of every ratio.
    pub ping: Samples,
    /// `PING` written to five nodes, then the five replies read: the floor of a 5-node round.
    pub ping5: Samples,
    /// `SET NX PX`, then a compare-and-delete script, with redis-rs alone: the least a lock
    /// whose release is safe costs on a Redis without a compare-and-delete command (7.x).
    pub floor1: Samples,
    pub redmutex1: Samples,
    pub redmutex5: Samples,
    pub redlock1: Option<Samples>,
    pub redlock5: Option<Samples>,
}

pub struct Plan {
    pub rounds: usize,
    pub per_round: usize,
    /// Samples per round of the `redlock` rows (a new TCP connection per node and call).
    pub per_round_redlock: usize,
    pub with_redlock: bool,
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
    let mut m1 = RedmutexLocker::open(&[one.to_owned()], "bench:uncontended")?;
    let mut m5 = RedmutexLocker::open(five, "bench:uncontended")?;
    let mut r1 = RedlockLocker::open(&[one.to_owned()], "bench:uncontended:redlock");
    let mut r5 = RedlockLocker::open(five, "bench:uncontended:redlock");

    let mut measures: Vec<Measure> = vec![
        Measure {
            name: "ping",
            per_round: plan.per_round,
            sample: Box::new(|| {
                let pong: String = redis::cmd("PING")
                    .query(&mut ping_conn)
                    .map_err(|e| e.to_string())?;
                debug_assert_eq!(pong, "PONG");
                Ok(())
            }),
            samples: Vec::new(),
        },
        Measure {
            name: "ping5",
            per_round: plan.per_round,
            sample: Box::new(|| {
                for c in five_conns.iter_mut() {
                    c.send_packed_command(&ping_packed)
                        .map_err(|e| e.to_string())?;
                }
                for c in five_conns.iter_mut() {
                    c.recv_response().map_err(|e| e.to_string())?;
                }
                Ok(())
            }),
            samples: Vec::new(),
        },
        Measure {
            name: "floor1",
            per_round: plan.per_round,
            sample: Box::new(|| {
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
            samples: Vec::new(),
        },
        Measure {
            name: "redmutex1",
            per_round: plan.per_round,
            sample: Box::new(|| try_unlock(&mut m1)),
            samples: Vec::new(),
        },
        Measure {
            name: "redmutex5",
            per_round: plan.per_round,
            sample: Box::new(|| try_unlock(&mut m5)),
            samples: Vec::new(),
        },
    ];
    if plan.with_redlock {
        measures.push(Measure {
            name: "redlock1",
            per_round: plan.per_round_redlock,
            sample: Box::new(|| try_unlock(&mut r1)),
            samples: Vec::new(),
        });
        measures.push(Measure {
            name: "redlock5",
            per_round: plan.per_round_redlock,
            sample: Box::new(|| try_unlock(&mut r5)),
            samples: Vec::new(),
        });
    }

    // Warm-up: connections, loaded scripts, the renew thread, caches.
    for m in measures.iter_mut() {
        for _ in 0..m.per_round.min(50) {
            (m.sample)().map_err(|e| format!("{}: {e}", m.name))?;
        }
    }
    for round in 1..=plan.rounds {
        for m in measures.iter_mut() {
            for _ in 0..m.per_round {
                let t = Instant::now();
                (m.sample)().map_err(|e| format!("{}: {e}", m.name))?;
                m.samples.push(ns(t.elapsed()));
            }
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
        floor1: take("floor1").unwrap_or_default(),
        redmutex1: take("redmutex1").unwrap_or_default(),
        redmutex5: take("redmutex5").unwrap_or_default(),
        redlock1: take("redlock1"),
        redlock5: take("redlock5"),
    })
}

/// One sample of an uncontended row: take the free lock, release it.
fn try_unlock(l: &mut dyn Locker) -> Result<(), String> {
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
