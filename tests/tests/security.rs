//! Least-privilege ACL users, credentials kept out of output, and hostile lock names.

use std::time::Duration;

use redis::Commands;
use redmutex::{Client, ErrorKind};
use redmutex_tests::RedisServer;

/// The ACL rule the README documents: only the commands redmutex sends or its scripts call.
const ACL_RULE: &str = "on >lock-pass resetkeys ~* resetchannels -@all +evalsha +eval +script|load \
                        +client|setname +client|id +client|unblock +blpop +set +get +del +incr +pttl \
                        +pexpire +pexpireat +rpush +exists +select +ping +wait +info \
                        +zadd +zrange +zrem +zremrangebyscore +zrangebyscore +zcard +zscore +llen +time";

#[test]
fn a_least_privilege_acl_user_can_do_everything_and_a_wrong_password_cannot() {
    let server = RedisServer::start();
    let mut admin = server.conn();
    let mut rule = redis::cmd("ACL");
    rule.arg("SETUSER").arg("redmutex");
    for part in ACL_RULE.split_whitespace() {
        rule.arg(part);
    }
    let _: () = rule.query(&mut admin).unwrap();

    let url = format!("redis://redmutex:lock-pass@{}", server.addr());
    let client = Client::open(&url).unwrap();
    let holder = client.mutex("acl:lock").ttl(Duration::from_millis(300));
    let guard = holder.lock().unwrap();
    guard.extend(Duration::from_secs(1)).unwrap();
    assert!(holder.is_locked().unwrap());
    // A second client waits (BLPOP) and gets the lock at the release.
    let waiter = Client::open(&url).unwrap().mutex("acl:lock");
    let t = std::thread::spawn(move || {
        waiter
            .try_lock_for(Duration::from_secs(5))
            .map(|g| g.fence())
    });
    assert!(redmutex_tests::wait_until(Duration::from_secs(2), || guard
        .renewals()
        >= 3));
    assert!(guard.is_held());
    let fence = guard.fence();
    guard.unlock().unwrap();
    assert!(t.join().unwrap().unwrap() > fence);
    // min_replicas sends WAIT: allowed, it only finds no replica here.
    let err = client
        .mutex("acl:replicas")
        .min_replicas(1, Duration::from_millis(10))
        .try_lock()
        .expect_err("no replica, no lock");
    assert!(
        matches!(&err, redmutex::TryLockError::Error(e)
            if e.nodes().iter().all(|n| matches!(n.outcome,
                redmutex::NodeOutcome::ReplicasShort { acked: 0, wanted: 1 }))),
        "{err:?}"
    );
    // The semaphore and both sides of the read-write lock, a wait that gives up (its
    // announcement is taken back) and the status scripts.
    let permits = client.semaphore("acl:sem", 1);
    let permit = permits.acquire().unwrap();
    permit.extend(Duration::from_secs(1)).unwrap();
    let gave_up = permits.try_acquire_for(Duration::from_millis(30));
    assert!(gave_up.is_err(), "one permit, held");
    assert_eq!(permits.status().unwrap().holders.len(), 1);
    permit.unlock().unwrap();
    let rw = client.rwlock("acl:rw");
    let read = rw.read().unwrap();
    read.extend(Duration::from_secs(1)).unwrap();
    assert!(rw.try_write_for(Duration::from_millis(30)).is_err());
    assert_eq!(rw.status().unwrap().readers.len(), 1);
    read.unlock().unwrap();
    rw.write().unwrap().unlock().unwrap();
    let denied: Vec<String> = redis::cmd("ACL")
        .arg("LOG")
        .query::<redis::Value>(&mut admin)
        .map(|v| format!("{v:?}"))
        .into_iter()
        .filter(|l| l.contains("redmutex") && !l.contains("setinfo"))
        .collect();
    assert!(
        denied.is_empty(),
        "commands denied to the ACL user: {denied:?}"
    );

    let wrong = Client::open(&format!("redis://redmutex:not-it@{}", server.addr())).unwrap();
    let err = wrong.mutex("acl:lock").lock().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Auth, "{err}");
    for text in [
        err.to_string(),
        format!("{err:?}"),
        format!("{wrong:?}"),
        format!("{client:?}"),
    ] {
        assert!(
            !text.contains("not-it") && !text.contains("lock-pass"),
            "{text}"
        );
    }
}

#[test]
fn hostile_names_are_only_ever_keys() {
    let server = RedisServer::start();
    let client = Client::open(&server.url()).unwrap();
    let mut conn = server.conn();
    let long = vec![b'n'; redmutex::MAX_NAME_LEN];
    let names: Vec<Vec<u8>> = vec![
        b"\x00\xff\xfe binary".to_vec(),
        b"{tenant}".to_vec(),
        b"}{".to_vec(),
        b"a{}b".to_vec(),
        b"'; return redis.call('FLUSHALL') --".to_vec(),
        b"]]..redis.call('DEL','x')..[[".to_vec(),
        b"\n\r*3\r\n$3\r\nDEL\r\n".to_vec(),
        long,
    ];
    let _: () = conn.set("canary", "alive").unwrap();
    for name in &names {
        let mutex = client.mutex(name);
        let guard = mutex.lock().unwrap();
        let value: Vec<u8> = conn.get(name.as_slice()).unwrap();
        assert_eq!(value, guard.token(), "the key is exactly the name");
        assert!(mutex.is_locked().unwrap());
        assert!(guard.fence() > 0);
        guard.unlock().unwrap();
        let exists: bool = conn.exists(name.as_slice()).unwrap();
        assert!(!exists);
    }
    let canary: String = conn.get("canary").unwrap();
    assert_eq!(canary, "alive");
}
