//! The core lock on one real redis-server: exclusion, expiry, renewal, loss, fencing, input.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::{Duration, Instant};

use redis::Commands;
use redmutex::{Client, ErrorKind, TryLockError};
use redmutex_tests::{RedisServer, wait_until};

const WORKER: &str = env!("CARGO_BIN_EXE_worker");

fn get(server: &RedisServer, key: &str) -> Option<String> {
    server.conn().get(key).unwrap()
}

fn pttl(server: &RedisServer, key: &str) -> i64 {
    redis::cmd("PTTL")
        .arg(key)
        .query(&mut server.conn())
        .unwrap()
}

#[test]
fn threads_and_processes_never_overlap() {
    let server = RedisServer::start();
    let url = server.url();
    let procs: Vec<_> = (0..4)
        .map(|_| {
            Command::new(WORKER)
                .args(["rmw", &url, "excl:lock", "excl:counter", "100"])
                .stdout(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let client = Client::open(&url).unwrap();
    let waits = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let client = client.clone();
            let url = url.clone();
            let waits = Arc::clone(&waits);
            std::thread::spawn(move || {
                let mut data = redis::Client::open(url).unwrap().get_connection().unwrap();
                let mutex = client.mutex("excl:lock").ttl(Duration::from_secs(5));
                for _ in 0..100 {
                    let guard = match mutex.try_lock() {
                        Ok(g) => g,
                        Err(TryLockError::WouldBlock) => {
                            waits.fetch_add(1, Ordering::Relaxed);
                            mutex.lock().unwrap()
                        }
                        Err(e) => panic!("{e}"),
                    };
                    let v: u64 = data
                        .get::<_, Option<u64>>("excl:counter")
                        .unwrap()
                        .unwrap_or(0);
                    std::thread::yield_now();
                    let _: () = data.set("excl:counter", v + 1).unwrap();
                    guard.unlock().unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let mut proc_waits = 0;
    for p in procs {
        let out = p.wait_with_output().unwrap();
        assert!(out.status.success());
        let line = String::from_utf8(out.stdout).unwrap();
        proc_waits += line
            .split("waits=")
            .nth(1)
            .unwrap()
            .trim()
            .parse::<u64>()
            .unwrap();
    }
    assert_eq!(get(&server, "excl:counter").as_deref(), Some("1200"));
    assert!(
        waits.load(Ordering::Relaxed) + proc_waits > 0,
        "no acquire ever had to wait"
    );
    assert_eq!(get(&server, "excl:lock"), None);
}

#[test]
fn a_killed_holder_frees_the_lock_within_its_ttl() {
    let server = RedisServer::start();
    let mut holder = Command::new(WORKER)
        .args(["hold", &server.url(), "crash:lock", "1000"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(holder.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.starts_with("locked"), "{line}");
    let client = Client::open(&server.url()).unwrap();
    let mutex = client.mutex("crash:lock").ttl(Duration::from_secs(1));
    assert!(matches!(mutex.try_lock(), Err(TryLockError::WouldBlock)));
    // Let the holder renew at least once, so the kill lands mid-lease.
    std::thread::sleep(Duration::from_millis(500));
    holder.kill().unwrap();
    let killed = Instant::now();
    holder.wait().unwrap();
    let guard = mutex.try_lock_for(Duration::from_secs(5)).unwrap();
    let took = killed.elapsed();
    assert!(took <= Duration::from_millis(1100), "took {took:?}");
    assert!(guard.is_held());
}

#[test]
fn renewal_keeps_a_short_lease_alive_and_stops_at_unlock() {
    let server = RedisServer::start();
    let client = Client::open(&server.url()).unwrap();
    let guard = client
        .mutex("renew:lock")
        .ttl(Duration::from_millis(500))
        .lock()
        .unwrap();
    let end = Instant::now() + Duration::from_secs(5);
    let mut conn = server.conn();
    let mut min_pttl = i64::MAX;
    while Instant::now() < end {
        let p: i64 = redis::cmd("PTTL")
            .arg("renew:lock")
            .query(&mut conn)
            .unwrap();
        min_pttl = min_pttl.min(p);
        assert!(p > 0, "the lease ran out (PTTL {p})");
        assert!(guard.is_held());
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(guard.renewals() >= 10, "only {} renewals", guard.renewals());
    let token = String::from_utf8(guard.token().to_vec()).unwrap();

    let mut monitor = server.conn();
    monitor
        .send_packed_command(&redis::cmd("MONITOR").get_packed_command())
        .unwrap();
    assert_eq!(monitor.recv_response().unwrap(), redis::Value::Okay);
    guard.unlock().unwrap();
    assert_eq!(get(&server, "renew:lock"), None);
    // Three renewal periods: a renewal scheduled for this token would show up here.
    monitor
        .set_read_timeout(Some(Duration::from_millis(50)))
        .unwrap();
    let watch_until = Instant::now() + Duration::from_millis(600);
    let mut lines = Vec::new();
    while Instant::now() < watch_until {
        if let Ok(v) = monitor.recv_response() {
            lines.push(format!("{v:?}"));
        }
    }
    let after_release: Vec<_> = lines
        .iter()
        // The release is the call with the wake-up key; a renewal may come before it.
        .skip_while(|l| !l.contains("{renew:lock}:wake"))
        .skip(1)
        .filter(|l| l.contains(&token))
        .collect();
    assert!(
        after_release.is_empty(),
        "sent after unlock: {after_release:?}"
    );
}

#[test]
fn an_overwritten_lock_is_reported_lost() {
    let server = RedisServer::start();
    let client = Client::open(&server.url()).unwrap();
    let ttl = Duration::from_millis(900);
    let guard = client.mutex("lost:lock").ttl(ttl).lock().unwrap();
    let fired = Arc::new(StdMutex::new(None));
    let f = Arc::clone(&fired);
    guard.on_lost(move || *f.lock().unwrap() = Some(Instant::now()));
    let _: () = server.conn().set("lost:lock", "intruder").unwrap();
    let overwritten = Instant::now();
    let bound = ttl / 3 + redmutex::default_node_timeout(ttl) + Duration::from_millis(50);
    assert!(wait_until(bound * 2, || !guard.is_held()));
    // The renew thread marks the guard lost, then runs its callbacks (outside its locks):
    // the callback may come a moment after `is_held` turned false.
    assert!(wait_until(Duration::from_secs(1), || fired
        .lock()
        .unwrap()
        .is_some()));
    let at = fired.lock().unwrap().expect("callback did not fire");
    assert!(
        at - overwritten <= bound,
        "lost after {:?}",
        at - overwritten
    );
    assert!(guard.wait_lost(Duration::ZERO));
    // The guard says why, with what the node answered to the renewal.
    let why = guard.check().unwrap_err();
    assert_eq!(why.kind(), ErrorKind::Lost);
    assert_eq!(
        why.to_string(),
        format!(
            "lost: another owner has it (a renewal was refused) [{}: held by another owner]",
            server.url()
        )
    );
    let err = guard.unlock().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Lost);
    assert!(
        err.to_string()
            .starts_with("lost: the lock was lost before it was released: another owner has it"),
        "{err}"
    );
    assert_eq!(get(&server, "lost:lock").as_deref(), Some("intruder"));
}

#[test]
fn a_frozen_redis_costs_the_lock_by_its_validity_and_nothing_hangs() {
    let server = RedisServer::start();
    let client = Client::open(&server.url()).unwrap();
    let ttl = Duration::from_millis(600);
    let guard = client.mutex("frozen:lock").ttl(ttl).lock().unwrap();
    let lost_flag = Arc::new(AtomicBool::new(false));
    let f = Arc::clone(&lost_flag);
    guard.on_lost(move || f.store(true, Ordering::SeqCst));
    server.pause();
    let frozen = Instant::now();
    assert!(guard.wait_lost(Duration::from_secs(3)));
    let noticed = Instant::now();
    // The deadline the library promised, and no later.
    assert!(noticed >= guard.valid_until());
    assert!(noticed - guard.valid_until() < Duration::from_millis(100));
    assert!(noticed - frozen <= ttl + Duration::from_millis(100));
    assert!(wait_until(Duration::from_millis(500), || lost_flag
        .load(Ordering::SeqCst)));
    let why = guard.check().unwrap_err();
    assert!(
        why.to_string().starts_with(&format!(
            "lost: its validity ran out before a quorum confirmed a renewal [{}: unreachable",
            server.url()
        )),
        "{why}"
    );
    // A new attempt against the frozen node gives up after its timeouts.
    let started = Instant::now();
    let err = client
        .mutex("frozen:other")
        .ttl(ttl)
        .try_lock_for(Duration::from_millis(200))
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Connection, "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    let started = Instant::now();
    assert_eq!(guard.unlock().unwrap_err().kind(), ErrorKind::Lost);
    assert!(started.elapsed() < Duration::from_secs(1));
    server.resume();
    // The client reconnects afterwards.
    let g = client
        .mutex("frozen:other")
        .try_lock_for(Duration::from_secs(5))
        .unwrap();
    g.unlock().unwrap();
}

#[test]
fn fences_strictly_increase_across_clients() {
    let server = RedisServer::start();
    let a = Client::open(&server.url()).unwrap();
    let b = Client::open(&server.url()).unwrap();
    let mut last = 0;
    for i in 0..1000 {
        let client = if i % 3 == 0 { &b } else { &a };
        let guard = client.mutex("fence:lock").lock().unwrap();
        assert!(guard.fence() > last, "fence {} after {last}", guard.fence());
        last = guard.fence();
        guard.unlock().unwrap();
    }
    let status = a.mutex("fence:lock").status().unwrap();
    assert_eq!(status.fence, last);
    assert_eq!(status.holder, None);
}

#[test]
fn try_lock_for_waits_its_time_and_no_more() {
    let server = RedisServer::start();
    let client = Client::open(&server.url()).unwrap();
    let mutex = client.mutex("wait:lock");
    let _held = mutex.lock().unwrap();
    let other = Client::open(&server.url()).unwrap().mutex("wait:lock");
    let opts = other.current_options().clone();
    for wait in [Duration::from_millis(100), Duration::from_millis(700)] {
        let started = Instant::now();
        assert!(matches!(
            other.try_lock_for(wait),
            Err(TryLockError::WouldBlock)
        ));
        let took = started.elapsed();
        let bound = wait + opts.retry_delay * 3 / 2 + redmutex::default_node_timeout(opts.ttl);
        assert!(took >= wait && took <= bound, "{took:?} for {wait:?}");
    }
}

#[test]
fn interoperates_with_plain_set_nx() {
    let server = RedisServer::start();
    let client = Client::open(&server.url()).unwrap();
    let mut conn = server.conn();
    let guard = client.mutex("report:lock").lock().unwrap();
    let r: Option<String> = redis::cmd("SET")
        .arg("report:lock")
        .arg("x")
        .arg("NX")
        .arg("PX")
        .arg(1000)
        .query(&mut conn)
        .unwrap();
    assert_eq!(r, None);
    let holder = get(&server, "report:lock").unwrap();
    assert!(
        holder.contains(&format!(":{}:", std::process::id())),
        "{holder}"
    );
    guard.unlock().unwrap();

    let r: Option<String> = redis::cmd("SET")
        .arg("report:lock")
        .arg("cli")
        .arg("NX")
        .arg("PX")
        .arg(400)
        .query(&mut conn)
        .unwrap();
    assert_eq!(r.as_deref(), Some("OK"));
    let mutex = client.mutex("report:lock");
    assert!(matches!(mutex.try_lock(), Err(TryLockError::WouldBlock)));
    let status = mutex.status().unwrap();
    assert_eq!(status.holder.as_deref(), Some(&b"cli"[..]));
    assert!(mutex.is_locked().unwrap());
    let started = Instant::now();
    let guard = mutex.lock().unwrap();
    assert!(started.elapsed() >= Duration::from_millis(250));
    assert!(guard.is_held());
}

#[test]
fn tokens_name_their_owner_and_connections_are_named() {
    let server = RedisServer::start();
    let client = Client::builder()
        .node(server.url())
        .owner("billing-7")
        .build()
        .unwrap();
    let guard = client.mutex("owner:lock").lock().unwrap();
    let value = get(&server, "owner:lock").unwrap();
    assert!(value.starts_with("billing-7:"), "{value}");
    assert_eq!(value.len(), "billing-7:".len() + 32);
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query(&mut server.conn())
        .unwrap();
    assert!(list.contains("name=redmutex:billing-7"), "{list}");
    drop(guard);
    assert_eq!(get(&server, "owner:lock"), None, "drop releases");
}

#[test]
fn extend_sets_a_new_lease_and_never_recreates() {
    let server = RedisServer::start();
    let client = Client::open(&server.url()).unwrap();
    let guard = client
        .mutex("extend:lock")
        .ttl(Duration::from_secs(2))
        .auto_renew(false)
        .lock()
        .unwrap();
    let before = guard.valid_until();
    // A wait too long to represent means no deadline, not a panic.
    assert!(!guard.wait_lost(Duration::from_millis(1)));
    let other = client
        .mutex("extend:other")
        .try_lock_for(Duration::MAX)
        .unwrap();
    other.unlock().unwrap();
    guard.extend(Duration::from_secs(60)).unwrap();
    assert!(pttl(&server, "extend:lock") > 50_000);
    assert!(guard.valid_until() > before + Duration::from_secs(50));
    let _: () = server.conn().del("extend:lock").unwrap();
    assert_eq!(
        guard.extend(Duration::from_secs(5)).unwrap_err().kind(),
        ErrorKind::Lost
    );
    assert_eq!(get(&server, "extend:lock"), None);
    assert!(!guard.is_held());
}

#[test]
fn guards_without_renewal_expire_and_say_so() {
    let server = RedisServer::start();
    let client = Client::open(&server.url()).unwrap();
    let guard = client
        .mutex("expire:lock")
        .ttl(Duration::from_millis(300))
        .auto_renew(false)
        .lock()
        .unwrap();
    let fired = Arc::new(AtomicBool::new(false));
    let f = Arc::clone(&fired);
    guard.on_lost(move || f.store(true, Ordering::SeqCst));
    assert!(wait_until(Duration::from_secs(2), || fired.load(Ordering::SeqCst)));
    assert!(!guard.is_held());
    assert_eq!(
        guard.check().unwrap_err().to_string(),
        "lost: its TTL ran out (auto-renew is off)"
    );
    assert_eq!(guard.unlock().unwrap_err().kind(), ErrorKind::Lost);
}

#[test]
fn max_hold_ends_renewal() {
    let server = RedisServer::start();
    let client = Client::open(&server.url()).unwrap();
    let guard = client
        .mutex("maxhold:lock")
        .ttl(Duration::from_millis(300))
        .max_hold(Duration::from_millis(700))
        .lock()
        .unwrap();
    let taken = Instant::now();
    assert!(guard.wait_lost(Duration::from_secs(3)));
    let held = taken.elapsed();
    assert_eq!(
        guard.check().unwrap_err().to_string(),
        "lost: its max_hold of 700 ms ran out"
    );
    assert!(
        held >= Duration::from_millis(600) && held < Duration::from_millis(1100),
        "{held:?}"
    );
    assert!(wait_until(Duration::from_secs(1), || get(
        &server,
        "maxhold:lock"
    )
    .is_none()));
}

#[test]
fn the_client_reconnects_after_a_restart() {
    let mut server = RedisServer::start();
    let client = Client::open(&server.url()).unwrap();
    let before = client.mutex("restart:lock").lock().unwrap();
    let fence = before.fence();
    before.unlock().unwrap();
    server.restart();
    let guard = client.mutex("restart:lock").lock().unwrap();
    assert!(
        guard.fence() > fence,
        "a restarted server without persistence lost its counter, and fences still go up"
    );
    guard.unlock().unwrap();
}

#[test]
fn bad_input_is_refused_before_anything_is_sent() {
    // A port nobody listens on: an invalid argument must be reported as such, not as a
    // connection failure, proving that nothing was attempted.
    let closed = redmutex_tests::ClosedPort::new();
    let client = Client::open(&closed.url()).unwrap();
    let long = vec![b'x'; redmutex::MAX_NAME_LEN + 1];
    let cases = [
        client.mutex(""),
        client.mutex(&long),
        client.mutex("ok").ttl(Duration::ZERO),
        client.mutex("ok").ttl(Duration::from_millis(9)),
        client.mutex("ok").ttl(Duration::from_secs(25 * 3600)),
        client.mutex("ok").node_timeout(Duration::ZERO),
        client.mutex("ok").max_hold(Duration::ZERO),
    ];
    for m in cases {
        assert_eq!(
            m.lock().unwrap_err().kind(),
            ErrorKind::InvalidArgument,
            "{m:?}"
        );
        assert_eq!(m.try_lock().unwrap_err().kind(), ErrorKind::InvalidArgument);
        assert_eq!(m.status().unwrap_err().kind(), ErrorKind::InvalidArgument);
    }
    assert!(client.mutex(vec![b'x'; 512]).try_lock().unwrap_err().kind() == ErrorKind::Connection);
    // The shortest TTL is valid with every other option at its default.
    let shortest = client.mutex("ok").ttl(redmutex::MIN_TTL);
    assert_eq!(
        shortest.try_lock().unwrap_err().kind(),
        ErrorKind::Connection
    );
    for url in [
        "",
        "localhost:6379",
        "redis://",
        "http://127.0.0.1:1",
        "redis://h:notaport",
    ] {
        let err = Client::open(url).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{url}: {err}");
    }
    assert!(Client::builder().build().is_err());
    assert!(
        Client::builder()
            .node("redis://h")
            .owner("has space")
            .build()
            .is_err()
    );
    assert!(
        Client::builder()
            .node("redis://h")
            .connect_timeout(Duration::ZERO)
            .build()
            .is_err()
    );
}

#[test]
fn an_unreachable_server_is_reported_within_the_connect_timeout() {
    let closed = redmutex_tests::ClosedPort::new();
    let client = Client::builder()
        .node(closed.url())
        .connect_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let started = Instant::now();
    let err = client.mutex("down:lock").lock().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Connection, "{err}");
    assert!(
        started.elapsed() <= Duration::from_millis(400),
        "{:?}",
        started.elapsed()
    );
    assert!(
        err.to_string().contains(&closed.port().to_string()),
        "{err}"
    );
}

#[test]
fn a_wrong_or_missing_password_is_an_auth_error_and_never_printed() {
    let server = RedisServer::start_with(&["--requirepass", "right-one"]);
    let url = format!("redis://:wrong-one@{}", server.addr());
    let client = Client::open(&url).unwrap();
    let err = client.mutex("auth:lock").lock().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Auth, "{err}");
    for text in [err.to_string(), format!("{err:?}"), format!("{client:?}")] {
        assert!(!text.contains("wrong-one"), "{text}");
    }
    // No password at all: the server answers NOAUTH, reported as such at once.
    let none = Client::open(&server.url()).unwrap();
    let started = Instant::now();
    let err = none.mutex("auth:lock").lock().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Auth, "{err}");
    assert!(err.to_string().contains("NOAUTH"), "{err}");
    assert!(started.elapsed() < Duration::from_millis(500), "{err}");
    let ok = Client::open(&format!("redis://:right-one@{}", server.addr())).unwrap();
    ok.mutex("auth:lock").lock().unwrap().unlock().unwrap();
}

#[test]
fn a_script_error_is_a_server_error_and_leaves_nothing_behind() {
    let server = RedisServer::start();
    let client = Client::open(&server.url()).unwrap();
    // The fence counter holds something INCR refuses: the script fails after its SET NX.
    let _: () = server
        .conn()
        .set("{broken:lock}:fence", "not a number")
        .unwrap();
    let err = client.mutex("broken:lock").try_lock().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Server, "{err}");
    assert_eq!(get(&server, "broken:lock"), None);
}

/// `unlock()` rides over an outage like a lock call: for up to the connect timeout, the
/// release is asked again, so a lock whose server restarts (here with its data on disk, as a
/// failover keeps it on a replica) is released at once instead of blocking others for its TTL.
#[test]
fn unlock_rides_over_a_restart_within_the_connect_timeout() {
    let mut server = RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let client = Client::builder()
        .node(server.url())
        .connect_timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let guard = client
        .mutex("ride:lock")
        .ttl(Duration::from_secs(20))
        .lock()
        .unwrap();
    server.kill();
    let started = Instant::now();
    let restarted = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300)); // the outage
        server.restart();
        server
    });
    let released = guard.unlock();
    let took = started.elapsed();
    let server = restarted.join().unwrap();
    let released = released.unwrap();
    assert_eq!(released.released, 1, "{released:?}");
    assert!(took < Duration::from_secs(5), "{took:?}");
    let value: Option<String> = server.conn().get("ride:lock").unwrap();
    assert_eq!(value, None);
}
