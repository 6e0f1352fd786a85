//! Redis Sentinel: a `redis+sentinel://` node finds the master, follows a failover when the
//! master is killed, never uses a replica, and keeps its passwords out of sight; with
//! `min_replicas(1, …)` a lock taken before a failover survives it on the promoted replica.
//!
//! Real processes: a master, its replica and three sentinels (quorum 2,
//! `down-after-milliseconds 500`, `failover-timeout 2000`).

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use redis::Commands;
use redmutex::{Client, ErrorKind, SentinelMaster, TryLockError};
use redmutex_tests::{RedisServer, Sentinel, wait_until};

const PASSWORD: &str = "s3cret";
const MASTER: &str = "mymaster";

/// `INFO replication` of `server`, or "" if it cannot be asked: a sentinel that promotes a
/// replica also kills its clients (`CLIENT KILL TYPE normal`), which may hit this very
/// connection.
fn info_replication(server: &RedisServer) -> String {
    let timeout = Duration::from_secs(5);
    let url = format!("redis://:{PASSWORD}@{}", server.addr());
    let info = || -> redis::RedisResult<String> {
        let mut conn = redis::Client::open(url.as_str())?.get_connection_with_timeout(timeout)?;
        conn.set_read_timeout(Some(timeout))?;
        conn.set_write_timeout(Some(timeout))?;
        redis::cmd("INFO").arg("replication").query(&mut conn)
    };
    info().unwrap_or_default()
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

/// A password-protected master, its replica (in sync) and three sentinels that know each
/// other and the replica, so that killing the master is followed by a failover.
struct Group {
    master: RedisServer,
    replica: RedisServer,
    sentinels: Vec<Sentinel>,
    /// `127.0.0.1:PORT` of each sentinel.
    hosts: Vec<String>,
}

impl Group {
    fn start() -> Group {
        // No diskless-sync delay (5 s by default): a replica that (re)joins syncs at once.
        let args = [
            "--requirepass",
            PASSWORD,
            "--masterauth",
            PASSWORD,
            "--repl-diskless-sync-delay",
            "0",
        ];
        let master = RedisServer::start_with(&args);
        let master_port = master.port().to_string();
        let mut replica_args = args.to_vec();
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
        let hosts = sentinels.iter().map(Sentinel::addr).collect();
        Group {
            master,
            replica,
            sentinels,
            hosts,
        }
    }

    /// The `redis+sentinel://` URL of the group, with the master's password.
    fn url(&self) -> String {
        format!(
            "redis+sentinel://:{PASSWORD}@{}/{MASTER}",
            self.hosts.join(",")
        )
    }

    /// A client of the group. The connect timeout also bounds how long a lock call rides
    /// over an unreachable node: it covers a failover.
    fn client(&self) -> Client {
        Client::builder()
            .node(self.url())
            .connect_timeout(Duration::from_secs(10))
            .build()
            .unwrap()
    }

    /// Whether the replica has been promoted: every sentinel names it, and it says it is a
    /// master.
    fn replica_promoted(&self) -> bool {
        let me = Some(("127.0.0.1".to_owned(), self.replica.port()));
        self.sentinels.iter().all(|s| s.master_addr(MASTER) == me)
            && info_replication(&self.replica).contains("role:master")
    }
}

#[test]
fn locks_through_sentinel_and_follow_a_failover() {
    let group = Group::start();
    let client = group.client();
    let Group {
        mut master,
        replica,
        sentinels,
        hosts,
    } = group;
    assert_eq!(
        client.node_names(),
        vec![format!("redis+sentinel://{}/{MASTER}", hosts.join(","))]
    );
    assert!(!format!("{client:?}").contains(PASSWORD));

    // Lock and unlock on the master.
    let guard = client.mutex("sentinel:a").lock().unwrap();
    let held: Option<Vec<u8>> = master.conn().get("sentinel:a").unwrap();
    assert_eq!(held.as_deref(), Some(guard.token()));

    // The builder form reaches the same master; without the master's password it may not.
    let sentinel_urls = || hosts.iter().map(|h| format!("redis://{h}"));
    let built = Client::builder()
        .sentinel(
            sentinel_urls(),
            SentinelMaster::new(MASTER).password(PASSWORD),
        )
        .build()
        .unwrap();
    assert_eq!(built.node_names(), client.node_names());
    assert!(matches!(
        built.mutex("sentinel:a").try_lock(),
        Err(TryLockError::WouldBlock)
    ));
    let no_password = Client::builder()
        .sentinel(sentinel_urls(), MASTER)
        .build()
        .unwrap();
    let err = no_password.mutex("sentinel:a").try_lock().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Auth, "{err}");

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

fn value(server: &RedisServer, key: &str) -> Option<Vec<u8>> {
    server.conn().get(key).unwrap()
}

/// The acceptance test of Sentinel with replication safety: a lock taken with
/// `min_replicas(1, …)` is on the replica when `lock` returns, so when the master is killed
/// the promoted replica still has it. The client follows the new master within the failover
/// time: another client finds the lock taken, and the original guard keeps renewing it
/// there, then releases it; after that the name can be locked again on the new master.
#[test]
fn a_lock_with_min_replicas_survives_a_failover() {
    const NAME: &str = "sentinel:failover";
    // Renewals every 1.33 s: at least one falls while the failover (about 1.8 s with these
    // sentinel settings) is under way. The lease must outlast the failover plus the old master's return as a
    // replica (see below), or no renewal could be confirmed in time.
    const TTL: Duration = Duration::from_secs(4);
    // Short, so that renewals that find no replica yet are retried often.
    const REPLICA_WAIT: Duration = Duration::from_millis(200);

    let mut group = Group::start();
    let client = group.client();
    // The per-node timeout (default 80 ms for this TTL) must cover a first connection through
    // the sentinels (two connects, script loads) besides the request: before the old master
    // rejoins, every `WAIT` takes its whole timeout, so it leaves nothing over.
    let mutex = |c: &Client| {
        c.mutex(NAME)
            .ttl(TTL)
            .node_timeout(Duration::from_millis(250))
            .min_replicas(1, REPLICA_WAIT)
    };

    let guard = mutex(&client).lock().unwrap();
    assert_eq!(value(&group.master, NAME).as_deref(), Some(guard.token()));
    // WAIT already saw the replica acknowledge the write: it is there now, not eventually.
    assert_eq!(
        value(&group.replica, NAME).as_deref(),
        Some(guard.token()),
        "lock() returned before the replica had the lock"
    );
    let lost_at = Arc::new(OnceLock::new());
    guard.on_lost({
        let lost_at = Arc::clone(&lost_at);
        move || {
            let _ = lost_at.set(Instant::now());
        }
    });

    // Kill the master right after a renewal, so that the failover has the whole lease.
    let renewals = guard.renewals();
    assert!(
        wait_until(TTL, || guard.renewals() > renewals),
        "no renewal before the failover"
    );
    group.master.kill();
    let killed = Instant::now();

    assert!(
        wait_until(Duration::from_secs(20), || group.replica_promoted()),
        "the sentinels did not promote the replica:\n{}",
        group.sentinels[0].log()
    );
    let failover = killed.elapsed();
    eprintln!("replica promoted {failover:?} after the master was killed");
    let lost_after = || lost_at.get().map(|t| t.duration_since(killed));
    assert!(
        guard.is_held(),
        "the guard was reported lost {:?} after the master was killed, during a {failover:?} \
         failover, with {} renewals",
        lost_after(),
        guard.renewals()
    );

    // The promoted replica has the lock, with our token and a lease.
    assert_eq!(
        value(&group.replica, NAME).as_deref(),
        Some(guard.token()),
        "the lock is not on the promoted replica"
    );
    let pttl: i64 = group.replica.conn().pttl(NAME).unwrap();
    assert!(pttl > 0, "PTTL {pttl} on the promoted replica");

    // Another client, through the same sentinels, finds the lock taken on the new master.
    let other = group.client();
    match mutex(&other).try_lock() {
        Err(TryLockError::WouldBlock) => {}
        Err(e) => panic!("another client's try_lock failed instead of finding the lock: {e}"),
        Ok(g) => panic!(
            "another client took the lock after the failover (token {:?})",
            String::from_utf8_lossy(g.token())
        ),
    }
    let status = mutex(&other).status().unwrap();
    assert_eq!(status.holder.as_deref(), Some(guard.token()));

    // A renewal with min_replicas(1) counts only once a replica has it, and the new master
    // has none: bring the old master back as its replica (what the sentinels would also do,
    // but only some seconds after it reappears).
    group.master.restart();
    let _: () = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(group.replica.port())
        .query(&mut group.master.conn())
        .unwrap();
    assert!(
        wait_until(Duration::from_secs(10), || info_replication(&group.master)
            .contains("master_link_status:up")),
        "the old master did not sync from the new one:\n{}",
        group.master.log()
    );

    // The guard keeps renewing on the new master: two confirmed renewals, a renewal period
    // apart, while it is held at every look.
    let renewals = guard.renewals();
    let renewed = wait_until(2 * TTL, || {
        assert!(
            guard.is_held(),
            "the guard was lost after the failover (reported lost {:?} after the kill)",
            lost_after()
        );
        guard.renewals() >= renewals + 2
    });
    assert!(
        renewed,
        "the guard was not renewed on the new master ({} renewals since the failover)",
        guard.renewals() - renewals
    );
    // Each of those renewals reached the replica (WAIT 1): it has our lock too.
    assert_eq!(value(&group.master, NAME).as_deref(), Some(guard.token()));

    // Unlock on the new master; the name is free there and can be locked again.
    let released = guard.unlock().unwrap();
    assert_eq!(released.released, 1, "{released:?}");
    assert_eq!(value(&group.replica, NAME), None);
    let next = mutex(&other)
        .try_lock_for(Duration::from_secs(5))
        .unwrap_or_else(|e| panic!("the name could not be locked again: {e}"));
    assert_eq!(value(&group.replica, NAME).as_deref(), Some(next.token()));
    assert_eq!(value(&group.master, NAME).as_deref(), Some(next.token()));
    next.unlock().unwrap();
    assert_eq!(value(&group.replica, NAME), None);
    eprintln!(
        "failover test done {:?} after the master was killed",
        killed.elapsed()
    );
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
        "rediss+sentinel://:hunter2@s1/mymaster#verify",
    ] {
        let err = Client::open(url).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{url}: {err}");
        assert!(!err.to_string().contains("hunter2"), "{err}");
        assert!(!format!("{err:?}").contains("hunter2"), "{err:?}");
    }
}

#[test]
fn no_sentinel_answering_is_a_connection_error() {
    let closed = redmutex_tests::ClosedPort::new();
    let port = closed.port();
    let client = Client::open(&format!(
        "redis+sentinel://:hunter2@127.0.0.1:{port}/{MASTER}"
    ))
    .unwrap();
    let err = client.mutex("sentinel:none").try_lock().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Connection, "{err}");
    assert!(!err.to_string().contains("hunter2"), "{err}");
}
