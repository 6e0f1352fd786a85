//! Fences that never go back, and releases that never hide a loss, on real redis-servers.
//!
//! - A fence write-back counts only nodes that granted the round: a node held by a concurrent
//!   round may have run that round's `INCR` with the old counter.
//! - A fence stays above every earlier fence of the name when a node loses its counter
//!   (a restart without persistence, `FLUSHALL`, `DEL`), steps by one from a counter ahead of
//!   the server's clock, and a counter that holds no number fails the grant as `INCR` does.
//! - A key that vanished while held is reported as a loss by `unlock`, never as a release.

use std::time::Duration;

use redis::Commands;
use redmutex::{Client, ErrorKind, NodeOutcome, TryLockError};
use redmutex_tests::proxy::{FaultProxy, Mode};
use redmutex_tests::{RedisServer, RedisServers};

fn script(name: &str) -> &'static str {
    redmutex::sim_support::scripts()
        .into_iter()
        .find(|(n, _)| *n == name)
        .map(|(_, source)| source)
        .expect("the script")
}

/// The SHA1 by which the client sends the fence write-back (`EVALSHA <sha>`).
fn fence_max_sha() -> &'static [u8] {
    let sha = redis::Script::new(script("fence_max"))
        .get_hash()
        .as_bytes()
        .to_vec();
    Box::leak(sha.into_boxed_slice())
}

/// A client of `server` alone, named `owner`.
fn client_of(server: &RedisServer, owner: &str) -> Client {
    Client::builder()
        .nodes([server.url()])
        .owner(owner)
        .build()
        .unwrap()
}

/// Another client's round as it reaches one node: the acquire script with `token`, fenced.
/// Its fence.
fn acquire_as(conn: &mut redis::Connection, name: &str, token: &str) -> u64 {
    redis::cmd("EVAL")
        .arg(script("acquire"))
        .arg(3)
        .arg(name)
        .arg(format!("{{{name}}}:fence"))
        .arg(format!("{{{name}}}:readers"))
        .arg(token)
        .arg(10_000)
        .arg(1)
        .query(conn)
        .expect("a grant")
}

/// Defect replayed: three nodes; a concurrent round B holds n2 and its requests to n0 and n1
/// are still on their way. Our round is granted by n0 (with a much larger counter) and n1,
/// refused by n2. Our write-back to n1 does not arrive in time; the one to n2 would confirm.
/// Counting n2 returned our fence while only n0 held it, and B, granted by n1 and n2 after
/// our release, got a smaller fence. Whatever our round returns, no later grant may get a
/// fence at or below it.
#[test]
fn a_later_grant_never_gets_a_smaller_fence_when_a_write_back_is_lost() {
    let servers = RedisServers::start(3);
    let mut conns: Vec<_> = servers.iter().map(|s| s.conn()).collect();
    let name = "fence:refusing";
    let fence_key = format!("{{{name}}}:fence");
    // Counters that differ: n0 far ahead (the history of split rounds leaves such gaps).
    let _: () = conns[0].set(&fence_key, 1u64 << 52).unwrap();
    // B's round holds n2: it ran its INCR there, with the counter as it was.
    let b_on_n2 = acquire_as(&mut conns[2], name, "B-token");
    // Our write-back to n1 is held back far beyond the node timeout.
    let proxy = FaultProxy::start(&servers[1].addr());
    let node_timeout = Duration::from_millis(100);
    let ours = Client::builder()
        .nodes([servers[0].url(), proxy.url(), servers[2].url()])
        .node_timeout(node_timeout)
        .owner("A")
        .build()
        .unwrap();
    let lock = ours.mutex(name).ttl(Duration::from_secs(10));
    // Warm the connections (the scripts are loaded), then hold the write-back back.
    drop(lock.status());
    proxy.set_mode(Mode::DelayRequestsWith(
        fence_max_sha(),
        Duration::from_secs(3),
    ));
    let first = match lock.try_lock() {
        Ok(guard) => {
            let fence = guard.fence();
            guard.unlock().unwrap();
            Some(fence)
        }
        // Refused: too few granting nodes hold the fence.
        Err(TryLockError::WouldBlock) => None,
        Err(e) => panic!("{e}"),
    };
    // B's delayed request reaches n1 (free again after our release or undo): with n2, a
    // quorum granted B, whose fence is the larger of the two.
    let b_on_n1 = acquire_as(&mut conns[1], name, "B-token");
    let later = b_on_n1.max(b_on_n2);
    if let Some(first) = first {
        assert!(
            later > first,
            "a later grant got fence {later} after fence {first}"
        );
    }
}

/// One node without persistence: the fences handed out before a restart, a `FLUSHALL` or a
/// `DEL` of the counter stay below every fence after it.
#[test]
fn fences_stay_above_every_earlier_one_when_a_node_loses_its_counter() {
    let mut server = RedisServer::start();
    let client = client_of(&server, "fences");
    let lock = client.mutex("fence:lost").ttl(Duration::from_secs(10));
    let mut last = 0;
    let mut take = |what: &str| {
        for _ in 0..5 {
            let guard = lock.try_lock().unwrap();
            assert!(
                guard.fence() > last,
                "after {what}: fence {} after {last}",
                guard.fence()
            );
            last = guard.fence();
            guard.unlock().unwrap();
        }
    };
    take("the first grants");
    server.restart();
    take("a restart without persistence");
    let _: () = redis::cmd("FLUSHALL").query(&mut server.conn()).unwrap();
    take("FLUSHALL");
    let _: () = server.conn().del("{fence:lost}:fence").unwrap();
    take("a DEL of the counter");
    // A counter that a plain INCR left (small) jumps above every earlier fence.
    let _: () = server.conn().set("{fence:lost}:fence", 5).unwrap();
    take("a counter set back to 5");
}

/// A counter ahead of the server's clock (a failover to a node whose clock ran ahead, a counter
/// restored from such a node) is stepped by one per grant, never set back to the time.
#[test]
fn a_counter_ahead_of_the_servers_time_steps_by_one() {
    let server = RedisServer::start();
    let client = client_of(&server, "fences");
    let lock = client.mutex("fence:ahead").ttl(Duration::from_secs(10));
    let now = lock.try_lock().unwrap();
    let ahead = now.fence() + 1_000_000_000_000;
    now.unlock().unwrap();
    let _: () = server.conn().set("{fence:ahead}:fence", ahead).unwrap();
    for step in 1..=3 {
        let guard = lock.try_lock().unwrap();
        assert_eq!(guard.fence(), ahead + step);
        guard.unlock().unwrap();
    }
}

/// A counter that holds what `INCR` refuses, also what reads as a number in Lua (`1.5`, ` 7`,
/// `0x10`, `inf`): the grant fails with `INCR`'s error, takes no lock, and the counter keeps its
/// value. One beyond 2^53, where a Lua number is no longer exact, is stepped exactly.
#[test]
fn a_counter_that_holds_no_number_fails_the_grant_and_keeps_its_value() {
    let server = RedisServer::start();
    let client = client_of(&server, "fences");
    let lock = client.mutex("fence:garbage").ttl(Duration::from_secs(10));
    for garbage in ["not a number", "1.5", " 7", "0x10", "007", "-0", "", "inf"] {
        let _: () = server.conn().set("{fence:garbage}:fence", garbage).unwrap();
        let err = lock.try_lock().unwrap_err();
        let TryLockError::Error(err) = err else {
            panic!("{garbage:?}: {err}")
        };
        assert_eq!(err.kind(), ErrorKind::Server, "{garbage:?}: {err}");
        assert!(
            err.to_string().contains("not an integer"),
            "{garbage:?}: {err}"
        );
        let kept: String = server.conn().get("{fence:garbage}:fence").unwrap();
        assert_eq!(kept, garbage);
        let lock_key: Option<String> = server.conn().get("fence:garbage").unwrap();
        assert_eq!(lock_key, None, "{garbage:?}");
    }
    let beyond = "9007199254740993"; // 2^53 + 1
    let _: () = server.conn().set("{fence:garbage}:fence", beyond).unwrap();
    let guard = lock.try_lock().unwrap();
    assert_eq!(guard.fence(), 9_007_199_254_740_994);
    guard.unlock().unwrap();
}

/// A key deleted from outside while held: `unlock` reports a loss, with the node's report,
/// and touches nobody else's key.
#[test]
fn unlock_reports_a_key_that_vanished_while_held_as_lost() {
    let server = RedisServer::start();
    let client = client_of(&server, "vanished");
    let lock = client.mutex("fence:vanished").ttl(Duration::from_secs(10));
    let guard = lock.try_lock().unwrap();
    let _: () = server.conn().del("fence:vanished").unwrap();
    let err = guard.unlock().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Lost, "{err}");
    assert_eq!(err.nodes().len(), 1, "{err}");
    assert_eq!(err.nodes()[0].outcome, NodeOutcome::Missing, "{err}");
    // A clean hold still releases cleanly.
    let guard = lock.try_lock().unwrap();
    let released = guard.unlock().unwrap();
    assert_eq!(released.released, 1);
}

/// Redlock: the key vanished on two of three nodes while held, so too few nodes still had our
/// token: lost. On one of three, a quorum still had it: released.
#[test]
fn redlock_unlock_is_lost_when_too_few_nodes_kept_the_token() {
    let servers = RedisServers::start(3);
    let client = Client::builder()
        .nodes(servers.urls())
        .owner("vanished")
        .build()
        .unwrap();
    let lock = client.mutex("fence:vanished3").ttl(Duration::from_secs(10));
    let guard = lock.try_lock().unwrap();
    let _: () = servers[0].conn().del("fence:vanished3").unwrap();
    let released = guard.unlock().unwrap();
    assert_eq!((released.released, released.expired), (2, 1));
    let guard = lock.try_lock().unwrap();
    for s in servers.iter().take(2) {
        let _: () = s.conn().del("fence:vanished3").unwrap();
    }
    let err = guard.unlock().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Lost, "{err}");
}
