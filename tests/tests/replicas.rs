//! `min_replicas(n, timeout)`: a grant (and a renewal) counts on a node only once `WAIT`
//! reports that `n` of its replicas have the write.
//!
//! Real processes: a master and one replica (`--replicaof`).

use std::time::{Duration, Instant};

use redis::Commands;
use redmutex::{Client, ErrorKind, NodeOutcome, TryLockError};
use redmutex_tests::{RedisServer, wait_until};

fn info_replication(server: &RedisServer) -> String {
    redis::cmd("INFO")
        .arg("replication")
        .query(&mut server.conn())
        .unwrap_or_default()
}

/// A master and its replica, in sync.
fn master_and_replica() -> (RedisServer, RedisServer) {
    let master = RedisServer::start();
    let master_port = master.port().to_string();
    let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &master_port]);
    assert!(
        wait_until(Duration::from_secs(10), || info_replication(&replica)
            .contains("master_link_status:up")),
        "the replica did not sync:\n{}",
        replica.log()
    );
    (master, replica)
}

fn client(master: &RedisServer) -> Client {
    Client::builder()
        .node(master.url())
        .connect_timeout(Duration::from_millis(500))
        .build()
        .unwrap()
}

fn value(server: &RedisServer, key: &str) -> Option<Vec<u8>> {
    server.conn().get(key).unwrap()
}

#[test]
fn a_lock_is_on_the_replica_when_lock_returns() {
    let (master, replica) = master_and_replica();
    let client = client(&master);
    let mutex = client
        .mutex("rep-1")
        .ttl(Duration::from_secs(10))
        .min_replicas(1, Duration::from_millis(500));
    for round in 0..20 {
        let guard = mutex.lock().unwrap();
        // Checked at once: WAIT already saw the replica acknowledge the write.
        assert_eq!(
            value(&replica, "rep-1").as_deref(),
            Some(guard.token()),
            "round {round}: the replica lacks the lock"
        );
        // A renewal is waited for too.
        guard.extend(Duration::from_secs(20)).unwrap();
        let pttl: i64 = replica.conn().pttl("rep-1").unwrap();
        assert!(pttl > 10_000, "round {round}: the replica's PTTL is {pttl}");
        guard.unlock().unwrap();
    }

    // A server that lost its scripts gets them again, and the WAIT still follows the write.
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query(&mut master.conn())
        .unwrap();
    let guard = mutex.lock().unwrap();
    assert_eq!(value(&replica, "rep-1").as_deref(), Some(guard.token()));
    guard.unlock().unwrap();
}

fn assert_replicas_short(err: &redmutex::Error, acked: u32, wanted: u32) {
    assert_eq!(err.kind(), ErrorKind::NoQuorum, "{err}");
    assert_eq!(err.nodes().len(), 1, "{err}");
    assert_eq!(
        err.nodes()[0].outcome,
        NodeOutcome::ReplicasShort { acked, wanted },
        "{err}"
    );
    assert!(err.to_string().contains("replicas short"), "{err}");
}

#[test]
fn too_few_replicas_fail_the_acquisition_and_leave_no_key() {
    let (master, _replica) = master_and_replica();
    let client = client(&master);
    let mutex = client
        .mutex("rep-2")
        .ttl(Duration::from_secs(10))
        // Long enough for the one replica to acknowledge on a loaded machine (`WAIT` asks it
        // with `REPLCONF GETACK`): the shortfall is then exactly one of two.
        .min_replicas(2, Duration::from_millis(400));

    // A short WAIT is a failed grant, like an unreachable node: lock() rides over it for the
    // connect timeout, then reports NoQuorum with the node's shortfall.
    let started = Instant::now();
    let err = mutex.lock().unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(3));
    assert_replicas_short(&err, 1, 2);
    assert_eq!(
        value(&master, "rep-2"),
        None,
        "the failed grant was not undone"
    );

    match mutex.try_lock() {
        Err(TryLockError::Error(e)) => assert_replicas_short(&e, 1, 2),
        Err(e) => panic!("expected an error, got {e:?}"),
        Ok(_) => panic!("acquired with too few replicas"),
    }
    assert_eq!(value(&master, "rep-2"), None);

    // Enough replicas: the same lock is free.
    let guard = client
        .mutex("rep-2")
        .min_replicas(1, Duration::from_millis(500))
        .try_lock()
        .unwrap();
    guard.unlock().unwrap();
}

#[test]
fn a_renewal_that_does_not_reach_the_replica_is_not_confirmed() {
    let (master, replica) = master_and_replica();
    let client = client(&master);
    let guard = client
        .mutex("rep-3")
        .ttl(Duration::from_secs(10))
        .auto_renew(false)
        .min_replicas(1, Duration::from_millis(200))
        .lock()
        .unwrap();
    let valid_until = guard.valid_until();

    replica.pause();
    let err = guard.extend(Duration::from_secs(10)).unwrap_err();
    replica.resume();
    assert_replicas_short(&err, 0, 1);
    assert_eq!(
        guard.valid_until(),
        valid_until,
        "a short renewal moved the validity"
    );
    assert!(guard.is_held());

    // Once the replica is back, renewals count again.
    assert!(wait_until(Duration::from_secs(5), || guard
        .extend(Duration::from_secs(10))
        .is_ok()));
    guard.unlock().unwrap();
    assert_eq!(value(&master, "rep-3"), None);
}

#[test]
fn automatic_renewals_wait_for_the_replica_too() {
    let (master, replica) = master_and_replica();
    let client = client(&master);
    let guard = client
        .mutex("rep-4")
        .ttl(Duration::from_millis(600))
        .min_replicas(1, Duration::from_millis(100))
        .lock()
        .unwrap();
    assert!(wait_until(Duration::from_secs(3), || guard.renewals() >= 3));
    assert!(guard.is_held());
    assert_eq!(value(&replica, "rep-4").as_deref(), Some(guard.token()));

    // Without the replica, no renewal counts: the lock is lost by its validity deadline.
    replica.pause();
    let lost = guard.wait_lost(Duration::from_secs(3));
    replica.resume();
    assert!(lost, "renewals counted without the replica");
}

#[test]
fn min_replicas_is_validated() {
    let client = Client::open("redis://127.0.0.1:1").unwrap();
    let bad = [
        (0, Duration::from_millis(100)),
        (1, Duration::ZERO),
        (1, Duration::from_millis(5001)),
    ];
    for (n, timeout) in bad {
        let err = client
            .mutex("x")
            .ttl(Duration::from_secs(10))
            .min_replicas(n, timeout)
            .try_lock()
            .unwrap_err();
        match err {
            TryLockError::Error(e) => {
                assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
                assert!(e.to_string().contains("min_replicas"), "{e}");
            }
            e => panic!("{n} {timeout:?}: {e:?}"),
        }
    }
}
