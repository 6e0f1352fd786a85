//! `Client::stats`: each figure moves when what it counts happens through the public API — a
//! grant, a refusal, a wait that runs out, an interrupted wait, a failure, a renewal, a
//! release, and a loss for each reason — and nothing else moves with it.

use std::time::Duration;

use redmutex::{Client, ClientStats, ErrorKind, HISTOGRAM_BOUNDS, MutexOptions, TryLockError};
use redmutex_tests::{ClosedPort, RedisServer, wait_until};

const LONG: Duration = Duration::from_secs(30);

fn short(ms: u64) -> MutexOptions {
    MutexOptions::default().with_ttl(Duration::from_millis(ms))
}

/// Waits (bounded) until the client's figures satisfy `pred`; the last snapshot.
fn stats_until(client: &Client, pred: impl Fn(&ClientStats) -> bool) -> ClientStats {
    wait_until(Duration::from_secs(10), || pred(&client.stats()));
    client.stats()
}

#[test]
fn grants_refusals_timeouts_interruptions_and_releases_are_counted() {
    let server = RedisServer::start();
    let client = Client::open(&server.url()).unwrap();
    let s = client.stats();
    assert_eq!((s.acquired, s.held_now, s.wait_seconds.count), (0, 0, 0));
    assert_eq!(s.wait_seconds.buckets.len(), HISTOGRAM_BOUNDS.len() + 1);
    let mutex = client.mutex("stats:counted").ttl(LONG);
    let guard = mutex.try_lock().unwrap();
    let s = client.stats();
    assert_eq!((s.acquired, s.held_now, s.wait_seconds.count), (1, 1, 1));

    assert!(matches!(mutex.try_lock(), Err(TryLockError::WouldBlock)));
    assert!(matches!(
        mutex.try_lock_for(Duration::from_millis(50)),
        Err(TryLockError::WouldBlock)
    ));
    let err = mutex
        .lock_interruptible(None, &mut || true)
        .map(drop)
        .unwrap_err();
    assert!(matches!(err, TryLockError::Error(ref e) if e.kind() == ErrorKind::Interrupted));
    let s = client.stats();
    assert_eq!(
        (
            s.refused,
            s.timed_out,
            s.interrupted,
            s.failed,
            s.waiting_now
        ),
        (1, 1, 1, 0, 0)
    );
    assert_eq!(s.acquired, 1, "no refusal counts as a grant");

    guard.unlock().unwrap();
    let s = client.stats();
    assert_eq!((s.held_now, s.lost), (0, 0));
    assert_eq!(s.held_seconds.count, 1);
    assert!(s.held_seconds.sum > 0.0);
    assert_eq!(s.held_seconds.buckets.iter().sum::<u64>(), 1);
}

#[test]
fn a_call_that_cannot_reach_redis_is_a_failure() {
    let closed = ClosedPort::new();
    let client = Client::builder()
        .nodes([closed.url()])
        .connect_timeout(Duration::from_millis(100))
        .build()
        .unwrap();
    assert!(client.mutex("stats:failed").try_lock().is_err());
    let s = client.stats();
    assert_eq!((s.failed, s.refused, s.acquired), (1, 0, 0));
}

#[test]
fn a_waiting_thread_is_counted_while_it_waits() {
    let server = RedisServer::start();
    let holder = Client::open(&server.url()).unwrap();
    let held = holder.mutex("stats:waiting").ttl(LONG).lock().unwrap();
    let client = Client::open(&server.url()).unwrap();
    let mutex = client.mutex("stats:waiting").ttl(LONG);
    let waiter = std::thread::spawn(move || mutex.try_lock_for(LONG).map(|g| g.unlock()));
    let s = stats_until(&client, |s| s.waiting_now == 1);
    assert_eq!(s.waiting_now, 1);
    held.unlock().unwrap();
    waiter.join().unwrap().unwrap().unwrap();
    let s = client.stats();
    assert_eq!((s.waiting_now, s.acquired, s.held_now), (0, 1, 0));
    assert!(s.wait_seconds.sum > 0.0);
    assert_eq!(s.handoffs, 1, "granted after waiting for the release");
    assert_eq!(holder.stats().handoffs, 0, "granted at once");
}

#[test]
fn each_kind_is_counted_apart_and_adds_up() {
    let server = RedisServer::start();
    let client = Client::open(&server.url()).unwrap();
    let m = client.mutex("stats:kind-m").ttl(LONG).try_lock().unwrap();
    assert!(client.mutex("stats:kind-m").try_lock().is_err());
    let w = client.rwlock("stats:kind-rw").ttl(LONG);
    let r = w.try_read().unwrap();
    assert!(w.try_write().is_err(), "read held: the writer is refused");
    let p = client
        .semaphore("stats:kind-s", 1)
        .ttl(LONG)
        .try_acquire()
        .unwrap();
    assert!(
        client
            .semaphore("stats:kind-s", 1)
            .try_acquire_for(Duration::from_millis(50))
            .is_err()
    );
    let s = client.stats();
    let k = &s.by_kind;
    assert_eq!(
        (k.mutex.acquired, k.mutex.refused),
        (1, 2),
        "a writer is a mutex: {k:?}"
    );
    assert_eq!((k.read.acquired, k.read.refused), (1, 0));
    assert_eq!((k.semaphore.acquired, k.semaphore.timed_out), (1, 1));
    let total = k.total();
    assert_eq!(
        (total.acquired, total.refused, total.timed_out),
        (s.acquired, s.refused, s.timed_out)
    );
    assert_eq!(s.acquired, 3);
    drop((m, r, p));
}

/// Every connection the client has open to the server is counted, the pooled ones and the
/// one blocked in a wait; the server counts the same.
#[test]
fn open_connections_are_counted_as_the_server_counts_them() {
    let server = RedisServer::start();
    let client = Client::open(&server.url()).unwrap();
    assert_eq!(
        client.stats().connections,
        [0],
        "no I/O before the first call"
    );
    let held = client.mutex("stats:conns").ttl(LONG).lock().unwrap();
    let waiter = client.clone();
    let wait = std::thread::spawn(move || {
        waiter
            .mutex("stats:conns")
            .try_lock_for(LONG)
            .map(|g| g.unlock())
    });
    stats_until(&client, |s| s.waiting_now == 1);
    let mut conn = server.conn();
    let same = wait_until(Duration::from_secs(10), || {
        let info: String = redis::cmd("INFO").arg("clients").query(&mut conn).unwrap();
        let on_server: u64 = info
            .lines()
            .find_map(|l| l.strip_prefix("connected_clients:"))
            .and_then(|n| n.trim().parse().ok())
            .unwrap();
        // The test's own connection is the server's one more.
        client.stats().connections == [on_server - 1]
    });
    assert!(same, "{:?}", client.stats().connections);
    assert!(
        client.stats().connections[0] >= 1,
        "the blocked one at least"
    );
    held.unlock().unwrap();
    wait.join().unwrap().unwrap().unwrap();
}

#[test]
fn renewals_are_counted() {
    let server = RedisServer::start();
    let client = Client::open(&server.url()).unwrap();
    // Renewed every 100 ms.
    let guard = client
        .mutex("stats:renewed")
        .options(short(300))
        .lock()
        .unwrap();
    let s = stats_until(&client, |s| s.renewals >= 2);
    assert!(s.renewals >= 2, "{s:?}");
    assert_eq!(s.renewal_failures, 0);
    guard.unlock().unwrap();
    // Each renewal sent is measured against its schedule.
    let s = client.stats();
    assert_eq!(s.renewal_lag_seconds.count, s.renewals + s.renewal_failures);
}

/// One loss for each reason, each counted under its own.
#[test]
fn each_loss_is_counted_by_its_reason() {
    let server = RedisServer::start();
    let client = Client::open(&server.url()).unwrap();
    let mut redis = server.conn();
    let lost = |guard: &redmutex::MutexGuard| assert!(guard.wait_lost(Duration::from_secs(10)));

    // Another owner's value in the key: the next renewal is refused with it.
    let g = client
        .mutex("stats:other")
        .options(short(300))
        .lock()
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg("stats:other")
        .arg("someone-else")
        .query(&mut redis)
        .unwrap();
    lost(&g);
    assert_eq!(client.stats().lost_by.another_owner, 1);

    // Deleted: gone at the next renewal.
    let g2 = client
        .mutex("stats:gone")
        .options(short(300))
        .lock()
        .unwrap();
    let _: () = redis::cmd("DEL")
        .arg("stats:gone")
        .query(&mut redis)
        .unwrap();
    lost(&g2);
    assert_eq!(client.stats().lost_by.gone, 1);

    // No renewal: the validity runs out.
    let g3 = client
        .mutex("stats:ran-out")
        .options(short(100).with_auto_renew(false))
        .lock()
        .unwrap();
    lost(&g3);
    assert_eq!(client.stats().lost_by.validity_ran_out, 1);

    // max_hold: renewal stops there.
    let g4 = client
        .mutex("stats:max-hold")
        .options(short(100).with_max_hold(Some(Duration::from_millis(250))))
        .lock()
        .unwrap();
    lost(&g4);
    assert_eq!(client.stats().lost_by.max_hold, 1);

    // Found lost by the release itself: the key was deleted, nothing renewed it meanwhile.
    let g5 = client
        .mutex("stats:at-release")
        .options(
            MutexOptions::default()
                .with_ttl(LONG)
                .with_auto_renew(false),
        )
        .lock()
        .unwrap();
    let _: () = redis::cmd("DEL")
        .arg("stats:at-release")
        .query(&mut redis)
        .unwrap();
    let err = g5.unlock().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Lost);

    let s = client.stats();
    assert_eq!(s.lost_by.gone, 2, "{s:?}");
    assert_eq!(s.lost, 5, "{s:?}");
    assert_eq!(s.lost_by.nodes_down, 0);
    assert_eq!(s.held_now, 0);
    // Each lease ended once, lost or released: a loss is not counted again at its release.
    drop((g, g2, g3, g4));
    let s = client.stats();
    assert_eq!((s.lost, s.held_seconds.count, s.acquired), (5, 5, 5));
}

/// A server that dies under a renewed lock: the loss is counted once, as nodes down or as a
/// validity that ran out with the renewals unanswered (which of the two the last round
/// sees first depends on when it was sent).
#[test]
fn a_dead_server_costs_one_loss() {
    let mut server = RedisServer::start();
    let client = Client::builder()
        .nodes([server.url()])
        .connect_timeout(Duration::from_millis(100))
        .build()
        .unwrap();
    let g = client
        .mutex("stats:dead")
        .options(short(300))
        .lock()
        .unwrap();
    server.kill();
    assert!(g.wait_lost(Duration::from_secs(10)));
    let s = stats_until(&client, |s| s.lost == 1);
    assert_eq!(s.lost, 1, "{s:?}");
    assert_eq!(
        s.lost_by.nodes_down + s.lost_by.validity_ran_out,
        1,
        "{s:?}"
    );
    assert!(s.renewal_failures >= 1, "{s:?}");
}

/// Three nodes: a closed port (it refuses connections) and two servers that grant a 1 s
/// lease. Right after a renewal one server is killed (refusing connections from then on) and
/// the other frozen (`SIGSTOP`). The next renewal round waits for the frozen node as long as
/// its node timeout, here the TTL, so it ends after the validity did, with two of three nodes
/// refusing connections: lost to nodes down. (Were the third node not frozen, the rounds
/// would end at once and the validity run out between two of them, as above.) The loss is
/// awaited on the figures: a `wait_lost` might itself end a lease whose validity it sees run
/// out, and count that instead.
#[test]
fn a_loss_to_nodes_down_is_counted_as_such() {
    let closed = ClosedPort::new();
    let mut killed = RedisServer::start();
    let frozen = RedisServer::start();
    let client = Client::builder()
        .nodes([closed.url(), killed.url(), frozen.url()])
        .node_timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    let g = client
        .mutex("stats:nodes-down")
        .options(short(1000))
        .lock()
        .unwrap();
    // A renewal just ended: the next one is about 330 ms away.
    let s = stats_until(&client, |s| s.renewals >= 1);
    assert!(s.renewals >= 1, "{s:?}");
    killed.kill();
    frozen.pause();
    let s = stats_until(&client, |s| s.lost >= 1);
    frozen.resume();
    assert_eq!(s.lost, 1, "{s:?}");
    assert_eq!(s.lost_by.nodes_down, 1, "{s:?}");
    assert!(s.renewal_failures >= 1 && s.held_now == 0, "{s:?}");
    assert!(g.wait_lost(Duration::ZERO));
    let err = g.check().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Lost, "{err}");
    assert!(err.to_string().contains("nodes are down"), "{err}");
}
