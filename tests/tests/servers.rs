//! The servers users run: what a client says the server is, a server too old for the scripts
//! refused at first use, and a managed service's restricted ACL user that still serves every
//! kind of lock. `scripts/test-servers.sh` runs this suite against each server of the matrix.

use std::time::{Duration, Instant};

use redis::Commands;
use redmutex::{Client, ErrorKind, NodeOutcome, TryLockError};
use redmutex_tests::{RedisServer, server_binary, server_version, tool_server, wait_until};

/// What the server under test says it is: `Redis 7.0.15`, `Valkey 8.1.8` (from `--version`).
fn expected_server() -> String {
    let out = std::process::Command::new(server_binary())
        .arg("--version")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let name = text.split_whitespace().next().unwrap().to_owned();
    let version = text
        .split_whitespace()
        .find_map(|w| w.strip_prefix("v="))
        .unwrap()
        .to_owned();
    format!("{name} {version}")
}

#[test]
fn a_client_reports_the_server_and_version_each_node_runs() {
    let server = RedisServer::start();
    let client = Client::open(&server.url()).unwrap();
    assert_eq!(
        client.servers(),
        vec![None],
        "nothing is known before first use"
    );
    client
        .mutex("servers:report")
        .lock()
        .unwrap()
        .unlock()
        .unwrap();
    assert_eq!(client.servers(), vec![Some(expected_server())]);
}

/// Redis 6.0 lacks commands the scripts use (`ZADD GT`): it is refused at the first
/// connection, with one sentence naming its version and the one needed, before any script
/// runs; in a Redlock, each such node is named in the report.
#[test]
fn a_server_older_than_6_2_is_refused_at_first_use_naming_its_version() {
    let old = RedisServer::start_bin(&tool_server("redis-6.0"), &[]);
    let client = Client::builder()
        .node(old.url())
        .connect_timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let started = Instant::now();
    let err = client.mutex("servers:old").lock().unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(2), "at once: {err}");
    assert_eq!(err.kind(), ErrorKind::Server, "{err}");
    let said = format!(
        "{} runs Redis 6.0.9; redmutex needs Redis 6.2 or later",
        old.url()
    );
    assert!(err.to_string().contains(&said), "{err}");
    assert!(!err.to_string().contains("script"), "{err}");
    let mut conn = old.conn();
    let keys: Vec<String> = conn.keys("*").unwrap();
    assert!(keys.is_empty(), "nothing was written: {keys:?}");
    // Every kind of lock, and a look at one, says the same.
    let err = client.semaphore("servers:old", 2).acquire().unwrap_err();
    assert!(err.to_string().contains(&said), "{err}");
    let err = client.rwlock("servers:old").read().unwrap_err();
    assert!(err.to_string().contains(&said), "{err}");
    let err = client.mutex("servers:old").status().unwrap_err();
    assert!(err.to_string().contains(&said), "{err}");

    // Two old nodes of three: no quorum, each old node named with its version.
    let older = RedisServer::start_bin(&tool_server("redis-6.0"), &[]);
    let good = RedisServer::start();
    let redlock = Client::builder()
        .nodes([old.url(), older.url(), good.url()])
        .build()
        .unwrap();
    let err = redlock.mutex("servers:old").lock().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NoQuorum, "{err}");
    for node in [&old, &older] {
        let report = err
            .nodes()
            .iter()
            .find(|n| n.node == node.url())
            .unwrap_or_else(|| panic!("{} is not in the report: {err:?}", node.url()));
        assert!(
            matches!(&report.outcome, NodeOutcome::Error(why)
                if why.contains(&format!("{} runs Redis 6.0.9", node.url()))),
            "{report:?}"
        );
    }
    // One old node of three: the other two are a quorum, and the old one still has nothing.
    let another = RedisServer::start();
    let enough = Client::builder()
        .nodes([old.url(), good.url(), another.url()])
        .build()
        .unwrap();
    let guard = enough.mutex("servers:quorum").lock().unwrap();
    let servers = enough.servers();
    assert_eq!(servers[0], None);
    assert_eq!(servers[1], Some(expected_server()));
    guard.unlock().unwrap();
    let keys: Vec<String> = conn.keys("*").unwrap();
    assert!(keys.is_empty(), "nothing was written: {keys:?}");
}

/// The ACL rule of the managed-service profile: everything but what managed Redis services
/// typically forbid — `CONFIG`, `CLIENT` (so no connection names, no `CLIENT ID`, no `CLIENT
/// UNBLOCK`), `INFO` and `DEBUG`.
const MANAGED_RULE: &str = "on >managed-pass ~* +@all -config -client -info -debug";

#[test]
fn a_managed_service_profile_still_serves_every_kind_of_lock() {
    let server = RedisServer::start();
    let mut admin = server.conn();
    let mut rule = redis::cmd("ACL");
    rule.arg("SETUSER").arg("managed");
    for part in MANAGED_RULE.split_whitespace() {
        rule.arg(part);
    }
    let _: () = rule.query(&mut admin).unwrap();
    let url = format!("redis://managed:managed-pass@{}", server.addr());
    let client = Client::open(&url).unwrap();

    // A lock, its renewal and a waiter that gets it at the release.
    let holder = client.mutex("managed:lock").ttl(Duration::from_millis(300));
    let guard = holder.lock().unwrap();
    guard.extend(Duration::from_secs(1)).unwrap();
    let waiter = Client::open(&url).unwrap().mutex("managed:lock");
    let t = std::thread::spawn(move || {
        let got = waiter.try_lock_for(Duration::from_secs(5));
        got.map(|g| g.fence())
    });
    assert!(wait_until(Duration::from_secs(2), || guard.renewals() >= 3));
    assert!(guard.is_held());
    let first = guard.fence();
    guard.unlock().unwrap();
    assert!(
        t.join().unwrap().unwrap() > first,
        "the waiter's fence comes after"
    );

    // Waits that run out end on time without `CLIENT UNBLOCK`, again and again.
    let guard = holder.lock().unwrap();
    let other = Client::open(&url).unwrap().mutex("managed:lock");
    for _ in 0..3 {
        let started = Instant::now();
        let gave_up = other.try_lock_for(Duration::from_millis(150));
        let took = started.elapsed();
        assert!(
            matches!(gave_up, Err(TryLockError::WouldBlock)),
            "{gave_up:?}"
        );
        assert!(took < Duration::from_millis(1000), "{took:?}");
    }
    assert!(holder.is_locked().unwrap());
    assert!(holder.status().unwrap().holder.is_some());
    guard.unlock().unwrap();

    // A semaphore and both sides of a read-write lock.
    let permits = client.semaphore("managed:sem", 1);
    let permit = permits.acquire().unwrap();
    permit.extend(Duration::from_secs(1)).unwrap();
    assert!(permits.try_acquire_for(Duration::from_millis(30)).is_err());
    assert_eq!(permits.status().unwrap().holders.len(), 1);
    permit.unlock().unwrap();
    let rw = client.rwlock("managed:rw");
    let read = rw.read().unwrap();
    assert!(rw.try_write_for(Duration::from_millis(30)).is_err());
    read.unlock().unwrap();
    rw.write().unwrap().unlock().unwrap();

    // The server would not say what it is.
    assert_eq!(client.servers(), vec![None]);
    // Only the conveniences were denied; nothing the locks need.
    let log: redis::Value = redis::cmd("ACL").arg("LOG").query(&mut admin).unwrap();
    let denied = format!("{log:?}").to_lowercase();
    for needed in ["evalsha", "blpop", "script", "\"eval\""] {
        assert!(!denied.contains(needed), "{needed} was denied: {denied}");
    }
}

/// The suite runs against the server it was given (for the matrix, see the module docs).
#[test]
fn the_suite_runs_against_a_server_of_6_2_or_later() {
    assert!(server_version() >= (6, 2), "{:?}", server_version());
}
