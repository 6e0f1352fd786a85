//! Redis Sentinel: a `redis+sentinel://` node finds the master, follows a failover when the
//! master is killed, never uses a replica, and keeps its passwords out of sight.
//!
//! Real processes: a master, its replica and three sentinels (quorum 2,
//! `down-after-milliseconds 500`, `failover-timeout 2000`).

use std::time::{Duration, Instant};

use redis::Commands;
use redmutex::{Client, ErrorKind};
use redmutex_tests::{RedisServer, Sentinel, wait_until};

const PASSWORD: &str = "s3cret";
const MASTER: &str = "mymaster";

fn info_replication(server: &RedisServer) -> String {
    redis::cmd("INFO")
        .arg("replication")
        .query(&mut server.conn())
        .unwrap_or_default()
}

fn sentinel_list_len(s: &Sentinel, what: &str) -> usize {
    redis::cmd("SENTINEL")
        .arg(what)
        .arg(MASTER)
        .query::<Vec<redis::Value>>(&mut s.conn())
        .map_or(0, |v| v.len())
}

/// The ids of the connections that redmutex opened to `server` (named `redmutex:…`).
fn redmutex_ids(server: &RedisServer) -> Vec<String> {
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query(&mut server.conn())
        .unwrap();
    list.lines()
        .filter(|l| l.contains(" name=redmutex:"))
        .filter_map(|l| l.split(' ').next().map(str::to_owned))
        .collect()
}

#[test]
fn locks_through_sentinel_and_follow_a_failover() {
    let auth = ["--requirepass", PASSWORD, "--masterauth", PASSWORD];
    let mut master = RedisServer::start_with(&auth);
    let master_port = master.port().to_string();
    let mut replica_args = auth.to_vec();
    replica_args.extend(["--replicaof", "127.0.0.1", &master_port]);
    let replica = RedisServer::start_with(&replica_args);
    assert!(
        wait_until(Duration::from_secs(10), || info_replication(&replica)
            .contains("master_link_status:up")),
        "the replica did not sync:\n{}",
        replica.log()
    );

    let auth_pass = format!("sentinel auth-pass {MASTER} {PASSWORD}");
    let sentinels: Vec<Sentinel> = (0..3)
        .map(|_| Sentinel::start(MASTER, master.port(), 2, &[&auth_pass]))
        .collect();
    // A failover needs sentinels that know each other (hello messages, every 2 s) and the
    // replica (from the master's INFO).
    let ready = wait_until(Duration::from_secs(10), || {
        sentinels.iter().all(|s| {
            sentinel_list_len(s, "sentinels") == 2 && sentinel_list_len(s, "replicas") == 1
        })
    });
    assert!(
        ready,
        "the sentinels did not discover each other:\n{}",
        sentinels[0].log()
    );

    let hosts: Vec<String> = sentinels.iter().map(Sentinel::addr).collect();
    let url = format!("redis+sentinel://:{PASSWORD}@{}/{MASTER}", hosts.join(","));
    // The connect timeout also bounds how long a lock call rides over an unreachable node:
    // make it cover the failover.
    let client = Client::builder()
        .node(&url)
        .connect_timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    assert_eq!(
        client.node_names(),
        vec![format!("redis+sentinel://{}/{MASTER}", hosts.join(","))]
    );
    assert!(!format!("{client:?}").contains(PASSWORD));

    // Lock and unlock on the master.
    let guard = client.mutex("sentinel:a").lock().unwrap();
    let held: Option<Vec<u8>> = master.conn().get("sentinel:a").unwrap();
    assert_eq!(held.as_deref(), Some(guard.token()));
    guard.unlock().unwrap();
    let held: Option<Vec<u8>> = master.conn().get("sentinel:a").unwrap();
    assert_eq!(held, None);

    // A master name the sentinels do not know fails, quickly, without the password.
    let unknown = Client::open(&format!(
        "redis+sentinel://:{PASSWORD}@{}/nosuchmaster",
        hosts[0]
    ))
    .unwrap();
    let started = Instant::now();
    let err = unknown.mutex("sentinel:x").try_lock().unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(5), "{err}");
    assert!(err.to_string().contains("nosuchmaster"), "{err}");
    assert!(!err.to_string().contains(PASSWORD), "{err}");

    // A replica answers READONLY: that connection is dropped, not pooled again. (The
    // release round that follows a failed attempt opens a new one: releasing reads first.)
    let direct = Client::open(&format!("redis://:{PASSWORD}@{}", replica.addr())).unwrap();
    let mut ids = Vec::new();
    for _ in 0..2 {
        let err = direct.mutex("sentinel:ro").try_lock().unwrap_err();
        assert!(err.to_string().to_lowercase().contains("readonly"), "{err}");
        ids.push(redmutex_ids(&replica));
    }
    assert_eq!(ids[0].len(), 1, "{ids:?}");
    assert_eq!(ids[1].len(), 1, "{ids:?}");
    assert_ne!(
        ids[0], ids[1],
        "the connection that answered READONLY was reused"
    );

    // Kill the master: the client follows the promoted replica.
    master.kill();
    let killed = Instant::now();
    let guard = client
        .mutex("sentinel:b")
        .try_lock_for(Duration::from_secs(10))
        .unwrap_or_else(|e| panic!("{e}\n{}", sentinels[0].log()));
    let took = killed.elapsed();
    eprintln!("lock acquired on the new master {took:?} after the master was killed");
    assert!(info_replication(&replica).contains("role:master"));
    let held: Option<Vec<u8>> = replica.conn().get("sentinel:b").unwrap();
    assert_eq!(held.as_deref(), Some(guard.token()));
    assert_eq!(
        sentinels[0].master_addr(MASTER),
        Some(("127.0.0.1".to_owned(), replica.port()))
    );
    guard.unlock().unwrap();
    let held: Option<Vec<u8>> = replica.conn().get("sentinel:b").unwrap();
    assert_eq!(held, None);
}

#[test]
fn malformed_sentinel_urls_are_invalid_arguments_without_the_password() {
    for url in [
        "redis+sentinel://:hunter2@s1:26379",
        "redis+sentinel://:hunter2@s1:26379/",
        "redis+sentinel://:hunter2@s1:26379,,s2/mymaster",
        "redis+sentinel://:hunter2@s1:port/mymaster",
        "redis+sentinel://:hunter2@s1/mymaster/zero",
        "redis+sentinel://:hunter2@s1/mymaster?sentinel_pass=hunter2",
        "rediss+sentinel://:hunter2@s1/mymaster",
    ] {
        let err = Client::open(url).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{url}: {err}");
        assert!(!err.to_string().contains("hunter2"), "{err}");
        assert!(!format!("{err:?}").contains("hunter2"), "{err:?}");
    }
}

#[test]
fn no_sentinel_answering_is_a_connection_error() {
    let port = redmutex_tests::free_port();
    let client = Client::open(&format!(
        "redis+sentinel://:hunter2@127.0.0.1:{port}/{MASTER}"
    ))
    .unwrap();
    let err = client.mutex("sentinel:none").try_lock().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Connection, "{err}");
    assert!(!err.to_string().contains("hunter2"), "{err}");
}
