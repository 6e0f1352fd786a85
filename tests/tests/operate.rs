//! What an operator asks of the servers (`Client::list`, `Client::force_unlock`), against
//! one node, three Redlock nodes, a Redis Cluster and a master found through Sentinel: every
//! held or waited-for lock whose name matches is listed with its holders, fence and waiters,
//! and nothing else is; a lock whose holder was killed with a 1 h lease is broken, its waiter
//! gets it at once with a larger fence, and a holder that is still alive learns of the loss
//! at its next renewal.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use redmutex::{Client, ErrorKind, HoldKind, ListedLock, LossReason};
use redmutex_tests::cluster::RedisCluster;
use redmutex_tests::{RedisServer, RedisServers, Sentinel, wait_until};

const WORKER: &str = env!("CARGO_BIN_EXE_worker");
const HOUR_MS: &str = "3600000";

/// A worker process holding `name` with a 1 h lease, once it says so; and its fence.
fn stuck_holder(urls: &str, name: &str) -> (Child, u64) {
    let mut child = Command::new(WORKER)
        .args(["hold", urls, name, HOUR_MS])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let fence = line
        .strip_prefix("locked ")
        .and_then(|f| f.trim().parse().ok())
        .unwrap_or_else(|| panic!("worker said {line:?}"));
    (child, fence)
}

fn names(locks: &[ListedLock]) -> Vec<String> {
    locks
        .iter()
        .map(|l| String::from_utf8_lossy(&l.name).into_owned())
        .collect()
}

fn find<'a>(locks: &'a [ListedLock], name: &str) -> &'a ListedLock {
    locks
        .iter()
        .find(|l| l.name == name.as_bytes())
        .unwrap_or_else(|| panic!("{name} not listed in {:?}", names(locks)))
}

/// The acceptance path on any deployment: each kind is listed as held, a matching pattern
/// leaves other names out, a free lock and an application's key are not listed; a killed
/// holder's 1 h hold is removed, the waiter gets the lock at once with a larger fence, and
/// the listing then shows the waiter as the holder.
fn lists_and_breaks(client: &Client, urls: &str, semaphores: bool) {
    let nodes = client.node_count();
    let mutex = client.mutex("op:mutex").lock().unwrap();
    let rw = client.rwlock("op:rw");
    let read = rw.read().unwrap();
    let permit = semaphores.then(|| client.semaphore("op:sem", 2).acquire().unwrap());
    let other = client.mutex("elsewhere:x").lock().unwrap();
    client.mutex("op:free").lock().unwrap().unlock().unwrap();

    let locks = client.list("op:*").unwrap();
    let mut want = vec!["op:mutex", "op:rw"];
    if semaphores {
        want.push("op:sem");
    }
    assert_eq!(
        names(&locks),
        want,
        "sorted by name, free and other names left out"
    );
    let m = find(&locks, "op:mutex");
    assert_eq!(m.holds.len(), 1);
    assert_eq!(m.holds[0].kind, HoldKind::Exclusive);
    assert_eq!(m.holds[0].holder, mutex.token());
    assert_eq!(m.holds[0].nodes, nodes);
    assert!(m.holds[0].ttl.is_some_and(|t| t <= Duration::from_secs(30)));
    // The largest counter among the nodes: with several, a node whose grant the round did not
    // wait for may have counted on to its own clock's time (see `LockStatus::fence`).
    match nodes {
        1 => assert_eq!(m.fence, mutex.fence()),
        _ => assert!(m.fence >= mutex.fence(), "{} < {}", m.fence, mutex.fence()),
    }
    assert_eq!((m.waiters, m.nodes, m.disagree()), (0, nodes, false));
    let r = find(&locks, "op:rw");
    assert_eq!(r.holds.len(), 1);
    assert_eq!(
        (r.holds[0].kind, &r.holds[0].holder[..]),
        (HoldKind::Read, read.token())
    );
    if let Some(p) = &permit {
        let s = find(&locks, "op:sem");
        assert_eq!(
            (s.holds[0].kind, &s.holds[0].holder[..]),
            (HoldKind::Permit, p.token())
        );
    }
    assert!(names(&client.list("*").unwrap()).contains(&"elsewhere:x".to_owned()));
    assert!(client.list("nothing:*").unwrap().is_empty());

    // A holder killed with a 1 h lease, and a waiter behind it.
    let (mut holder, stuck_fence) = stuck_holder(urls, "op:stuck");
    let waiter_client = client.clone();
    let (got, granted) = mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let g = waiter_client
            .mutex("op:stuck")
            .try_lock_for(Duration::from_secs(60))
            .unwrap();
        got.send(Instant::now()).unwrap();
        g
    });
    assert!(
        wait_until(Duration::from_secs(10), || {
            client
                .list("op:stuck")
                .unwrap()
                .first()
                .is_some_and(|l| l.waiters > 0)
        }),
        "the waiter was never listed"
    );
    holder.kill().unwrap();
    holder.wait().unwrap();
    let listed = client.list("op:stuck").unwrap();
    let stuck = &listed[0].holds[0];
    assert!(stuck.ttl.unwrap() > Duration::from_secs(3000), "{stuck:?}");

    let broke = Instant::now();
    let removed = client.force_unlock("op:stuck").unwrap();
    assert_eq!(removed.len(), 1, "{removed:?}");
    assert_eq!(
        (removed[0].kind, removed[0].nodes),
        (HoldKind::Exclusive, nodes)
    );
    assert_eq!(removed[0].holder, stuck.holder);
    let at = granted
        .recv_timeout(Duration::from_secs(30))
        .expect("the waiter never got the lock");
    let guard = waiter.join().unwrap();
    // Woken by the forced release itself: a 1 h lease, and the waiter's waits had grown.
    let took = at.saturating_duration_since(broke);
    assert!(
        took < Duration::from_secs(2),
        "the waiter got it {took:?} after"
    );
    assert!(guard.fence() > stuck_fence, "fences keep growing");
    let listed = client.list("op:stuck").unwrap();
    assert_eq!(listed[0].holds[0].holder, guard.token());
    assert!(client.force_unlock("op:free").unwrap().is_empty());

    drop((mutex, read, permit, other, guard));
}

#[test]
fn one_node() {
    let server = RedisServer::start();
    redis::cmd("SET")
        .arg("op:plain")
        .arg("an application's value")
        .exec(&mut server.conn())
        .unwrap();
    redis::cmd("SET")
        .arg("op:x:fence")
        .arg("not a companion")
        .exec(&mut server.conn())
        .unwrap();
    let client = Client::open(&server.url()).unwrap();
    lists_and_breaks(&client, &server.url(), true);
    for bad in ["", &"*".repeat(redmutex::MAX_PATTERN_LEN + 1)] {
        let e = client.list(bad).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    }
    let e = client.force_unlock("").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
}

#[test]
fn three_redlock_nodes_and_their_disagreement() {
    let servers = RedisServers::start(3);
    let urls = servers.urls();
    let client = Client::builder().nodes(urls.iter()).build().unwrap();
    lists_and_breaks(&client, &urls.join(","), false);

    // One node lost the hold (restarted without persistence, say): listed on two of three.
    let guard = client.mutex("op:split").lock().unwrap();
    redis::cmd("DEL")
        .arg("op:split")
        .exec(&mut servers.0[0].conn())
        .unwrap();
    let listed = client.list("op:split").unwrap();
    assert_eq!(listed[0].holds[0].nodes, 2);
    assert!(listed[0].disagree());
    let removed = client.force_unlock("op:split").unwrap();
    assert_eq!((removed.len(), removed[0].nodes), (1, 2), "{removed:?}");
    assert!(client.list("op:split").unwrap().is_empty());
    drop(guard);
}

#[test]
fn a_cluster_lists_every_master() {
    let cluster = RedisCluster::start(3, 0);
    let client = Client::open(&cluster.url()).unwrap();
    // Names on every master.
    let spread: Vec<String> = (0..30).map(|i| format!("spread-{i}")).collect();
    let guards: Vec<_> = spread
        .iter()
        .map(|n| client.mutex(n).lock().unwrap())
        .collect();
    let masters: std::collections::BTreeSet<u16> = spread
        .iter()
        .map(|n| cluster.master_of_key(n.as_bytes()))
        .collect();
    assert_eq!(masters.len(), 3, "the names land on every master");
    assert_eq!(names(&client.list("spread-*").unwrap()).len(), 30);
    // One seed is enough for the worker (whose URL list is comma-separated).
    let seed = format!("redis+cluster://127.0.0.1:{}", cluster.masters()[0]);
    lists_and_breaks(&client, &seed, true);
    drop(guards);
}

/// Through Sentinel: the listing and the breaking go to the master the sentinel names.
#[test]
fn through_sentinel() {
    let master = RedisServer::start();
    let sentinel = Sentinel::start("op-master", master.port(), 1, &[]);
    let url = format!("redis+sentinel://{}/op-master", sentinel.addr());
    let client = Client::open(&url).unwrap();
    lists_and_breaks(&client, &url, true);
}

/// A holder that is alive when its lock is broken learns of it at its next renewal: lost,
/// as gone.
#[test]
fn a_live_holder_learns_at_its_next_renewal() {
    let server = RedisServer::start();
    let client = Client::open(&server.url()).unwrap();
    let guard = client
        .mutex("op:alive")
        .ttl(Duration::from_secs(1))
        .lock()
        .unwrap();
    let removed = client.force_unlock("op:alive").unwrap();
    assert_eq!(removed[0].holder, guard.token());
    assert!(guard.wait_lost(Duration::from_secs(10)), "never learned");
    assert_eq!(guard.check().unwrap_err().kind(), ErrorKind::Lost);
    assert_eq!(client.stats().lost_by.get(LossReason::Gone), 1);
}
