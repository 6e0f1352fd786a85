//! Whole-world runs: clients driven by the core's own protocol machines on 1, 3 and 5
//! simulated nodes with faults, every property checked after every step.
//!
//! A failing run prints its seed; `SIM_SEED=<seed> cargo test --release -p redmutex-sim`
//! replays exactly that run, with its trace (`SIM_SEED=<a>..<b>` runs a range, without).
//! `SIM_RUNS=<n>` changes how many seeds run.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::Instant;

use redmutex_sim::client::model::Controls;
use redmutex_sim::client::{Client, Input, Now, Output};
use redmutex_sim::redis::Reply;
use redmutex_sim::rng::Rng;
use redmutex_sim::world::{Config, Outcome, Shape, World, run};

const RUNS: u64 = 600;
const BASE_SEED: u64 = 0xA11_0000;

fn seeds() -> Vec<u64> {
    match std::env::var("SIM_SEED") {
        Ok(s) => match s.split_once("..") {
            Some((a, b)) => (a.parse().expect("a seed")..b.parse().expect("a seed")).collect(),
            None => vec![s.parse().expect("SIM_SEED is a number")],
        },
        Err(_) => {
            let n = std::env::var("SIM_RUNS").map_or(RUNS, |n| n.parse().expect("a count"));
            (0..n).map(|i| BASE_SEED + i).collect()
        }
    }
}

/// Runs one seed; on a violation, runs it again keeping the trace, and prints its tail.
fn run_seed(seed: u64, controls: Controls) -> Outcome {
    let out = run(Config::from_seed(seed, controls));
    if out.violation.is_some() && std::env::var("SIM_SEED").is_ok_and(|s| !s.contains("..")) {
        let mut cfg = Config::from_seed(seed, controls);
        cfg.keep_trace = true;
        let again = run(cfg);
        eprintln!("trace of seed {seed}:\n{}", again.trace.join("\n"));
    }
    out
}

#[test]
fn the_core_protocol_keeps_every_property_under_faults() {
    let started = Instant::now();
    let seeds = seeds();
    // Two threads: runs are independent, and each is deterministic on its own.
    let results: Vec<(u64, Outcome)> = std::thread::scope(|scope| {
        let handles: Vec<_> = seeds
            .chunks(seeds.len().div_ceil(2))
            .map(|chunk| {
                scope.spawn(move || {
                    chunk
                        .iter()
                        .map(|&s| (s, run_seed(s, Controls::default())))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("a run panicked"))
            .collect()
    });
    let (mut ops, mut grants, mut sim_us, mut events) = (0, 0, 0, 0);
    for (seed, out) in &results {
        if let Some(v) = &out.violation {
            let cfg = Config::from_seed(*seed, Controls::default());
            panic!(
                "seed {seed} ({:?}, {} nodes): at {} µs: {}\nreplay: SIM_SEED={seed} cargo test --release -p redmutex-sim",
                cfg.shape, cfg.nodes, v.at, v.what
            );
        }
        ops += out.lock_ops;
        grants += out.grants;
        sim_us += out.sim_time;
        events += out.events;
    }
    let secs = started.elapsed().as_secs_f64();
    eprintln!(
        "world: {} runs, {:.0} simulated s, {events} events, {grants} grants, {ops} lock operations in {secs:.1} s: {:.0} lock ops/s",
        seeds.len(),
        sim_us as f64 / 1e6,
        ops as f64 / secs
    );
    assert!(
        grants > 0,
        "the clients never got the lock: the run tests nothing"
    );
}

/// The worlds of `family` keep every property on `seeds` seeds, and the lock was granted.
fn family_keeps_every_property(name: &str, family: fn(u64) -> Config, seeds: u64) {
    let mut grants = 0;
    for seed in BASE_SEED..BASE_SEED + seeds {
        let out = run(family(seed));
        if let Some(v) = &out.violation {
            panic!("{name} seed {seed}: at {} µs: {}", v.at, v.what);
        }
        grants += out.grants;
    }
    assert!(
        grants > 0,
        "{name}: the clients never got the lock: the run tests nothing"
    );
}

/// The worlds made for overlapping rounds ([`Config::overlapping`]): the core keeps every
/// property there too (its negative control, the old fence write-back rule, fails in them).
#[test]
fn the_core_protocol_keeps_every_property_when_rounds_overlap() {
    family_keeps_every_property("overlapping", Config::overlapping, 150);
}

/// The worlds where connections are cut right after writes and no message is lost
/// ([`Config::cutting`]): a refused attempt's late grant is undone within a few node timeouts,
/// also where its undo could not be written behind its request (its negative control, an
/// undo whose failed write is dropped, fails in them).
#[test]
fn the_core_protocol_keeps_every_property_when_connections_are_cut() {
    family_keeps_every_property("cutting", Config::cutting, 150);
}

/// The worlds where someone outside the lock empties a node's keyspace
/// ([`Config::vanishing`]): a holder whose key vanished from too many nodes learns it (its
/// negative control, a release that reads every "missing" as released, fails in them), and
/// fences stay increasing on one node.
#[test]
fn the_core_protocol_keeps_every_property_when_keys_vanish() {
    family_keeps_every_property("vanishing", Config::vanishing, 150);
}

/// Found by a campaign of 130,000 seeds: on five nodes, a waiting writer's rounds were split
/// (granted where no reader held the lock, refused where readers did). Each grant removed the
/// writer's announcement on its node and the undo did not put it back, so readers kept
/// taking read holds on those nodes, a quorum of them, for three seconds.
#[test]
fn a_writer_whose_split_grants_are_undone_stays_announced() {
    let out = run_seed(7_033_889, Controls::default());
    if let Some(v) = out.violation {
        panic!("at {} µs: {}", v.at, v.what);
    }
}

#[test]
fn one_seed_replays_the_identical_trace() {
    let seed = seeds()[0];
    let traces: Vec<Outcome> = (0..2)
        .map(|_| {
            let mut cfg = Config::from_seed(seed, Controls::default());
            cfg.keep_trace = true;
            run(cfg)
        })
        .collect();
    assert!(traces[0].trace.len() > 1000, "a run makes many events");
    assert_eq!(traces[0].trace, traces[1].trace, "seed {seed} ran two ways");
    assert_eq!(traces[0].trace_hash, traces[1].trace_hash);
}

/// The worlds share every shape of lock, and each shape is exercised: a semaphore's two
/// permits held at once, a read-write lock's readers together and its writers, a mutex's
/// holders one by one. A shape whose worlds never reached those states would check nothing
/// of them.
#[test]
fn the_worlds_run_every_shape_of_lock() {
    let mut seen: Vec<(Shape, Outcome)> = Vec::new();
    for seed in seeds().into_iter().take(40) {
        let cfg = Config::from_seed(seed, Controls::default());
        let shape = cfg.shape;
        seen.push((shape, run(cfg)));
    }
    let of = |want: fn(Shape) -> bool| -> Vec<&Outcome> {
        seen.iter()
            .filter(|(s, _)| want(*s))
            .map(|(_, o)| o)
            .collect()
    };
    let (mutex, semaphore, rwlock) = (
        of(|s| s == Shape::Mutex),
        of(|s| matches!(s, Shape::Semaphore(_))),
        of(|s| s == Shape::RwLock),
    );
    assert!(
        !mutex.is_empty() && !semaphore.is_empty() && !rwlock.is_empty(),
        "worlds by shape: {} mutex, {} semaphore, {} read-write",
        mutex.len(),
        semaphore.len(),
        rwlock.len()
    );
    assert!(
        mutex
            .iter()
            .all(|o| o.shared_grants == 0 && o.most_holders == 1)
    );
    assert!(
        semaphore.iter().all(|o| o.shared_grants == o.grants)
            && semaphore.iter().any(|o| o.most_holders == 2),
        "a semaphore's permits are shared, and two were held at once"
    );
    let reads: u64 = rwlock.iter().map(|o| o.shared_grants).sum();
    let writes: u64 = rwlock.iter().map(|o| o.grants - o.shared_grants).sum();
    assert!(
        reads > 0 && writes > 0 && rwlock.iter().any(|o| o.most_holders >= 2),
        "read-write worlds: {reads} read holds, {writes} writes, readers together: {}",
        rwlock.iter().any(|o| o.most_holders >= 2)
    );
}

/// The worlds run both forms of the acquire: a `lock` (and a fenced lock's `try_lock`) asks
/// with the script, an unfenced lock's `try_lock` with plain commands (`SET NX PX`, `GET`,
/// `EXISTS`), and each form both takes the lock and is refused. A world that never ran one
/// form would check nothing of it.
#[test]
fn the_worlds_run_both_forms_of_the_acquire() {
    let (mut plain, mut script) = ([0u32; 2], [0u32; 2]);
    for seed in seeds().into_iter().take(8) {
        let mut cfg = Config::from_seed(seed, Controls::default());
        cfg.keep_trace = true;
        for line in run(cfg).trace {
            let Some((command, reply)) = line.split_once(" ran c").and_then(|(_, r)| {
                let (_, rest) = r.split_once(' ')?;
                rest.rsplit_once(" -> ")
            }) else {
                continue;
            };
            if command.starts_with("SET lock ") && command.ends_with(" NX PX 1000") {
                plain[usize::from(reply != "+OK")] += 1;
            } else if command.starts_with("EVAL") && command.contains(" lock {lock}:fence ") {
                script[usize::from(reply.starts_with('['))] += 1;
            }
        }
    }
    assert!(
        plain.iter().chain(&script).all(|n| *n > 0),
        "plain SETs won and lost: {plain:?}; acquire scripts granted and refused: {script:?}"
    );
}

/// The worlds end waits whose time is up from another connection (`CLIENT UNBLOCK`), as the
/// library does, and some of those ends find the wait already over (a release or the
/// server's own timeout came first). A world where none did would check nothing of it.
#[test]
fn the_worlds_end_waits_early_with_client_unblock() {
    let mut ended = [0u32; 2];
    for seed in seeds().into_iter().take(8) {
        let mut cfg = Config::from_seed(seed, Controls::default());
        cfg.keep_trace = true;
        for line in run(cfg).trace {
            if let Some((_, reply)) = line
                .split_once(" CLIENT UNBLOCK ")
                .and_then(|(_, r)| r.rsplit_once(" -> "))
            {
                ended[usize::from(reply != ":1")] += 1;
            }
        }
    }
    assert!(
        ended.iter().all(|n| *n > 0),
        "waits ended early, and unblocks that came too late: {ended:?}"
    );
}

/// A scripted client: sends its commands at fixed times on its monotonic clock and records
/// each reply with how long after its sending it arrived. `RECONNECT` closes its connection;
/// `UNBLOCK` ends its BLPOP from another connection.
struct Scripted {
    plan: Vec<(u64, Vec<&'static str>)>,
    sent: BTreeMap<u64, u64>,
    replies: Rc<RefCell<Vec<(u64, u64, Reply)>>>,
}

impl Client for Scripted {
    fn handle(&mut self, input: Input, now: Now, _: &mut Rng, out: &mut Vec<Output>) {
        match input {
            Input::Start => {
                for (i, (at, _)) in self.plan.iter().enumerate() {
                    out.push(Output::WakeAt {
                        mono: now.mono + at,
                        token: i as u64,
                    });
                }
            }
            Input::Wake { token } => {
                let words = &self.plan[token as usize].1;
                if words[..] == ["RECONNECT"] {
                    out.push(Output::Reconnect { node: 0 });
                    return;
                }
                if words[..] == ["UNBLOCK"] {
                    out.push(Output::Unblock { node: 0 });
                    return;
                }
                let argv = words.iter().map(|w| w.as_bytes().to_vec()).collect();
                self.sent.insert(token, now.mono);
                out.push(Output::Send {
                    node: 0,
                    id: token,
                    argv,
                    after: None,
                });
            }
            Input::Reply { id, reply, .. } => {
                self.replies
                    .borrow_mut()
                    .push((id, now.mono - self.sent[&id], reply))
            }
            Input::Failed { .. } | Input::Unwritten { .. } => panic!("no faults in this run"),
        }
    }
}

/// What a scripted client received: the request, how long after it was sent (µs), the reply.
type Log = Vec<(u64, u64, Reply)>;

/// Runs two scripted clients with these plans on one node, without faults: what each got.
fn two_scripted(plans: [Vec<(u64, Vec<&'static str>)>; 2]) -> [Log; 2] {
    let mut cfg = Config::from_seed(7, Controls::default());
    (cfg.nodes, cfg.clients, cfg.faults, cfg.fault_phase) = (1, 2, 0, 0);
    cfg.endless = false;
    let logs = [
        Rc::new(RefCell::new(Vec::new())),
        Rc::new(RefCell::new(Vec::new())),
    ];
    let mut plans = plans.map(Some);
    let world = World::with_clients(cfg, |i| -> Box<dyn Client> {
        Box::new(Scripted {
            plan: plans[i].take().expect("one plan per client"),
            sent: BTreeMap::new(),
            replies: logs[i].clone(),
        })
    });
    assert_eq!(world.run().violation, None);
    logs.map(|log| log.take())
}

#[test]
fn a_blpop_in_the_world_waits_for_a_push_or_its_timeout_on_the_cron_tick() {
    let mut cfg = Config::from_seed(7, Controls::default());
    (cfg.nodes, cfg.clients, cfg.faults, cfg.fault_phase) = (1, 2, 0, 0);
    cfg.endless = false;
    let replies = Rc::new(RefCell::new(Vec::new()));
    let log = replies.clone();
    let world = World::with_clients(cfg, move |i| -> Box<dyn Client> {
        let plan = if i == 0 {
            vec![
                (0, vec!["BLPOP", "q", "5"]),
                (1_000_000, vec!["BLPOP", "q", "0.25"]),
            ]
        } else {
            vec![(100_000, vec!["RPUSH", "q", "x"])]
        };
        Box::new(Scripted {
            plan,
            sent: BTreeMap::new(),
            replies: log.clone(),
        })
    });
    let out = world.run();
    assert_eq!(out.violation, None);
    let replies = replies.borrow();
    let served = Reply::Array(vec![Reply::bulk("q"), Reply::bulk("x")]);
    let first = replies
        .iter()
        .find(|r| r.0 == 0)
        .expect("the first BLPOP was answered");
    assert_eq!(first.2, served);
    assert!(
        (100_000..120_000).contains(&first.1),
        "served when the push came: {} µs",
        first.1
    );
    let second = replies
        .iter()
        .find(|r| r.0 == 1)
        .expect("the second BLPOP timed out");
    assert_eq!(second.2, Reply::NilArray);
    // Redis notices a timeout on its 100 ms cron tick after the deadline, not at it.
    assert!(
        (250_000..400_000).contains(&second.1),
        "timed out after {} µs",
        second.1
    );
}

/// Redis runs a client's commands in order: what was written behind a waiting BLPOP runs
/// when the BLPOP is answered (the library's one-node wait pipelines its next attempt so),
/// and never when the connection closes first (Redis frees the client with its unread
/// commands); the closed client's BLPOP takes no element either.
#[test]
fn what_waits_behind_a_blpop_runs_after_it_or_never() {
    let [waiter, other] = two_scripted([
        vec![
            (0, vec!["BLPOP", "q", "5"]),
            (1_000, vec!["SET", "behind", "ran"]),
            (500_000, vec!["BLPOP", "q", "5"]),
            (501_000, vec!["SET", "closed", "ran"]),
            (550_000, vec!["RECONNECT"]),
        ],
        vec![
            (100_000, vec!["RPUSH", "q", "x"]),
            (600_000, vec!["RPUSH", "q", "y"]),
            (700_000, vec!["GET", "behind"]),
            (700_001, vec!["GET", "closed"]),
            (700_002, vec!["LRANGE", "q", "0", "-1"]),
        ],
    ]);
    let reply = |log: &[(u64, u64, Reply)], id: u64| {
        log.iter()
            .find(|r| r.0 == id)
            .unwrap_or_else(|| panic!("no reply to request {id}: {log:?}"))
            .clone()
    };
    let set = reply(&waiter, 1);
    assert_eq!(set.2, Reply::Status("OK".into()));
    assert!(
        set.1 >= 99_000,
        "the SET behind the BLPOP ran after the push served it, not at once: {} µs",
        set.1
    );
    assert_eq!(
        waiter.len(),
        2,
        "nothing answered on the closed connection: {waiter:?}"
    );
    assert_eq!(reply(&other, 2).2, Reply::bulk("ran"));
    assert_eq!(
        reply(&other, 3).2,
        Reply::Nil,
        "the SET behind the BLPOP of the closed connection never ran"
    );
    assert_eq!(
        reply(&other, 4).2,
        Reply::Array(vec![Reply::bulk("y")]),
        "the freed client's BLPOP took nothing"
    );
}

/// A wait ended from another connection (`CLIENT UNBLOCK … ERROR`, as the library ends a wait
/// whose time is up) answers the `UNBLOCKED` error, and what waited behind it on its
/// connection runs then, in order, on the same connection.
#[test]
fn client_unblock_ends_a_wait_and_runs_what_waits_behind_it() {
    let [waiter, other] = two_scripted([
        vec![
            (0, vec!["BLPOP", "q", "5"]),
            (1_000, vec!["SET", "behind", "ran"]),
            (100_000, vec!["UNBLOCK"]),
        ],
        vec![(300_000, vec!["GET", "behind"])],
    ]);
    assert_eq!(waiter.len(), 2, "{waiter:?}");
    let (blpop, set) = (&waiter[0], &waiter[1]);
    let unblocked = Reply::err("UNBLOCKED client unblocked via CLIENT UNBLOCK");
    assert_eq!((blpop.0, &blpop.2), (0, &unblocked), "{waiter:?}");
    assert!(
        (100_000..150_000).contains(&blpop.1),
        "ended by the unblock, not at its 5 s: {} µs",
        blpop.1
    );
    assert_eq!(
        (set.0, &set.2),
        (1, &Reply::Status("OK".into())),
        "the SET behind it ran, after it: {waiter:?}"
    );
    assert_eq!(other[0].2, Reply::bulk("ran"));
}

/// With one node, a waiter's next round goes right behind its wait, as the library sends it:
/// when a release serves the wait, the round runs at once on the same connection, and such
/// rounds take the lock. A world where none did would not run the library's one-node wait.
#[test]
fn one_node_rounds_run_right_behind_the_wait_that_a_release_served() {
    let (mut behind, mut granted) = (0u32, 0u32);
    for seed in seeds().into_iter().take(60) {
        let mut cfg = Config::from_seed(seed, Controls::default());
        if cfg.nodes != 1 {
            continue;
        }
        cfg.keep_trace = true;
        let trace = run(cfg).trace;
        for pair in trace.windows(2) {
            // "<t> n0 answers c<k>#<id> -> [..]" then "<t> n0 ran c<k>#<id+1> EVAL… -> <reply>"
            let Some((t, served)) = pair[0].split_once(" n0 answers c") else {
                continue;
            };
            let (Some((who, reply)), Some(next)) = (
                served.split_once(" -> "),
                pair[1].strip_prefix(&format!("{t} n0 ran c")),
            ) else {
                continue;
            };
            let (client, id) = who.split_once('#').expect("c<k>#<id>");
            let id: u64 = id.parse().expect("a request id");
            if !reply.starts_with('[') || !next.starts_with(&format!("{client}#{} EVAL", id + 1)) {
                continue;
            }
            behind += 1;
            granted += u32::from(
                next.rsplit_once(" -> ")
                    .is_some_and(|(_, r)| r.starts_with(':')),
            );
        }
    }
    assert!(
        behind > 0 && granted > 0,
        "rounds run behind a served wait: {behind}, of which granted: {granted}"
    );
}
