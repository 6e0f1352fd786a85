//! The background clean-up of a grant nobody reported: how soon it reaches a node that comes
//! back.

use std::time::{Duration, Instant};

use redis::Commands;
use redmutex::{Client, MutexOptions, TryLockError};
use redmutex_tests::proxy::{FaultProxy, Mode};
use redmutex_tests::{RedisServers, wait_until};

/// A round refused by two of three nodes ran on the third, whose reply was cut off with its
/// connection, and the retry on a new connection met a node gone out of reach: that grant is
/// nobody's, and the clean-up must remove it (before, the retry's undo, queued on the new
/// connection, was taken for one, and the grant stayed for a whole TTL). The node then stays
/// out of reach for 1.5 s (every try times out), long enough for a pause that grows with
/// every failed try to reach a second. Once the node answers again, the grant is gone within
/// one node timeout and one round trip (with room for a busy machine), not one grown pause.
#[test]
fn a_healed_node_is_cleaned_up_within_a_node_timeout() {
    const NODE_TIMEOUT: Duration = Duration::from_millis(50);
    const SLACK: Duration = Duration::from_millis(150);
    let servers = RedisServers::start(3);
    let name = "cleanup:healed";
    for s in &servers[..2] {
        let _: () = s.conn().set(name, "foreign").unwrap();
    }
    // The two nodes that refuse answer 20 ms late: the third node's cut is read before the
    // round is decided (otherwise the undo queued behind its request could undo it at once).
    let slow: Vec<_> = servers[..2]
        .iter()
        .map(|s| FaultProxy::start(&s.addr()))
        .collect();
    let proxy = FaultProxy::start(&servers[2].addr());
    let client = Client::builder()
        .nodes([slow[0].url(), slow[1].url(), proxy.url()])
        .node_timeout(NODE_TIMEOUT)
        .build()
        .unwrap();
    let lock = client.mutex(name).ttl(Duration::from_secs(10));
    drop(lock.status()); // connections and scripts in place
    slow.iter()
        .for_each(|p| p.set_mode(Mode::Delay(Duration::from_millis(20))));
    proxy.set_mode(Mode::CutThenBlackhole);
    assert!(matches!(lock.try_lock(), Err(TryLockError::WouldBlock)));
    let mut n2 = servers[2].conn();
    let ours = |n2: &mut redis::Connection| {
        n2.get::<_, Option<String>>(name)
            .unwrap()
            .is_some_and(|v| v != "foreign")
    };
    assert!(ours(&mut n2), "the cut-off request did not run");
    std::thread::sleep(Duration::from_millis(1500));
    assert!(ours(&mut n2), "cleaned up while out of reach");
    proxy.set_mode(Mode::Pass);
    let healed = Instant::now();
    assert!(
        wait_until(Duration::from_secs(5), || !ours(&mut n2)),
        "never cleaned up"
    );
    let took = healed.elapsed();
    assert!(
        took <= NODE_TIMEOUT + SLACK,
        "the grant stayed {took:?} after the node answered again"
    );
}

/// A round that could not reach a quorum announced the call as a waiter on the node that
/// said "taken"; the lock was then free at once, and the call's next round took it without
/// having waited (such a grant does not take the announcement back). The announcement is
/// withdrawn there all the same: left behind, it would make the release keep the lock for a
/// waiter that is gone (a hand-off window for nobody).
#[test]
fn a_grant_after_an_outage_takes_the_calls_announcement_back() {
    let servers = RedisServers::start(3);
    let name = "cleanup:announced";
    let proxies: Vec<_> = servers[1..]
        .iter()
        .map(|s| FaultProxy::start(&s.addr()))
        .collect();
    let client = Client::builder()
        .nodes([servers[0].url(), proxies[0].url(), proxies[1].url()])
        .node_timeout(Duration::from_millis(50))
        .connect_timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let lock = client.mutex(name).options(
        MutexOptions::default()
            .with_ttl(Duration::from_secs(10))
            .with_wait_cap(Duration::from_secs(3))
            .with_retry_delay(Duration::from_millis(20)),
    );
    drop(lock.status()); // connections and scripts in place
    let mut n0 = servers[0].conn();
    let _: () = redis::cmd("SET")
        .arg(name)
        .arg("foreign")
        .arg("PX")
        .arg(150)
        .query(&mut n0)
        .unwrap();
    proxies.iter().for_each(|p| p.set_mode(Mode::Blackhole));
    let waitq = format!("{{{name}}}:waitq");
    std::thread::scope(|s| {
        let taking = s.spawn(|| lock.try_lock_for(Duration::from_secs(5)));
        // Announced on n0 by the first round, which n1 and n2 did not answer.
        assert!(wait_until(Duration::from_secs(2), || n0
            .zcard::<_, usize>(&waitq)
            .unwrap()
            == 1));
        // n0 is free (its holder's key expired) before n1 and n2 answer again.
        assert!(wait_until(Duration::from_secs(2), || !n0
            .exists::<_, bool>(name)
            .unwrap()));
        std::thread::sleep(Duration::from_millis(100));
        proxies.iter().for_each(|p| p.set_mode(Mode::Pass));
        let guard = taking.join().unwrap().unwrap();
        assert!(
            wait_until(Duration::from_secs(1), || n0
                .zcard::<_, usize>(&waitq)
                .unwrap()
                == 0),
            "the call's announcement stayed behind on n0"
        );
        guard.unlock().unwrap();
        // No hand-off window for a waiter that is gone: the key is deleted at once.
        assert_eq!(n0.get::<_, Option<String>>(name).unwrap(), None);
    });
}

/// A round refused by two of three nodes sent its request to the third, whose connection
/// closed at once while the request, already on its way, ran 180 ms later (the node's
/// timeout is 200 ms). Meanwhile another owner held the lock there until 130 ms. The
/// clean-up's early tries found that owner: its lock is "another owner's", which says nothing
/// of what our late request stores once that owner is gone. The clean-up goes on until a try
/// sent a node timeout after it began, so the late grant, which is nobody's, is removed within
/// about that (with room for a busy machine), not left for its 10 s TTL (before, the first
/// "another owner's" ended the clean-up).
#[test]
fn a_late_grant_after_another_owner_left_is_cleaned_up() {
    const NODE_TIMEOUT: Duration = Duration::from_millis(200);
    let servers = RedisServers::start(3);
    let name = "cleanup:other-owner";
    for s in &servers[..2] {
        let _: () = s.conn().set(name, "foreign").unwrap();
    }
    let _: () = servers[2].conn().pset_ex(name, "passing", 130).unwrap();
    // The two nodes that refuse answer 30 ms late: the third node's closed connection is read
    // before the round is decided (otherwise the undo queued behind its request would follow
    // it there).
    let slow: Vec<_> = servers[..2]
        .iter()
        .map(|s| FaultProxy::start(&s.addr()))
        .collect();
    let proxy = FaultProxy::start(&servers[2].addr());
    let client = Client::builder()
        .nodes([slow[0].url(), slow[1].url(), proxy.url()])
        .node_timeout(NODE_TIMEOUT)
        .build()
        .unwrap();
    let lock = client.mutex(name).ttl(Duration::from_secs(10));
    drop(lock.status()); // connections and scripts in place
    slow.iter()
        .for_each(|p| p.set_mode(Mode::Delay(Duration::from_millis(30))));
    proxy.set_mode(Mode::CutThenDelayRequests(Duration::from_millis(180)));
    let asked = Instant::now();
    assert!(matches!(lock.try_lock(), Err(TryLockError::WouldBlock)));
    proxy.set_mode(Mode::Pass);
    let fence = format!("{{{name}}}:fence");
    let mut n2 = servers[2].conn();
    // The late request ran (its grant moved the fence counter), and its key goes.
    assert!(
        wait_until(Duration::from_secs(2), || n2.exists(&fence).unwrap()),
        "the late request never ran"
    );
    let gone = wait_until(Duration::from_secs(3), || {
        n2.get::<_, Option<String>>(name).unwrap().is_none()
    });
    let left: Option<String> = n2.get(name).unwrap();
    assert!(
        gone,
        "the late grant was never cleaned up ({left:?} {:?} after the round)",
        asked.elapsed()
    );
}

/// A round granted by one node of three and refused by the other two sends its undo to the
/// granting node; here that node stopped answering right after its grant (its proxy takes
/// the undo in and forwards nothing). The undo's failure hands the node to the clean-up: once
/// the node answers again, the grant is gone within about a node timeout, not left for its 10
/// s TTL (before, the failed undo was forgotten).
#[test]
fn a_grant_whose_undo_failed_is_cleaned_up() {
    const NODE_TIMEOUT: Duration = Duration::from_millis(100);
    let servers = RedisServers::start(3);
    let name = "cleanup:undo-failed";
    for s in &servers[..2] {
        let _: () = s.conn().set(name, "foreign").unwrap();
    }
    // The two nodes that refuse answer 60 ms late: the undo goes out after the grant's node
    // stopped answering.
    let slow: Vec<_> = servers[..2]
        .iter()
        .map(|s| FaultProxy::start(&s.addr()))
        .collect();
    let proxy = FaultProxy::start(&servers[2].addr());
    let client = Client::builder()
        .nodes([slow[0].url(), slow[1].url(), proxy.url()])
        .node_timeout(NODE_TIMEOUT)
        .build()
        .unwrap();
    let lock = client.mutex(name).ttl(Duration::from_secs(10));
    drop(lock.status()); // connections and scripts in place
    slow.iter()
        .for_each(|p| p.set_mode(Mode::Delay(Duration::from_millis(60))));
    let asked = Instant::now();
    let round =
        std::thread::spawn(move || matches!(lock.try_lock(), Err(TryLockError::WouldBlock)));
    assert!(
        wait_until(Duration::from_secs(2), || proxy
            .first_request_since(asked)
            .is_some()),
        "the round never reached the third node"
    );
    proxy.set_mode(Mode::Blackhole);
    assert!(round.join().unwrap(), "the round was not refused");
    let mut n2 = servers[2].conn();
    let ours = |n2: &mut redis::Connection| n2.get::<_, Option<String>>(name).unwrap().is_some();
    assert!(
        ours(&mut n2),
        "the third node did not grant, or its undo got through"
    );
    std::thread::sleep(NODE_TIMEOUT * 2);
    proxy.set_mode(Mode::Pass);
    let healed = Instant::now();
    assert!(
        wait_until(Duration::from_secs(3), || !ours(&mut n2)),
        "the grant whose undo failed was never cleaned up ({:?} after the node healed)",
        healed.elapsed()
    );
}
