//! The interleavings of the hardening review, one test each, named after the defect: a
//! request that arrives after its sender gave up, a retry of something that already ran, a
//! server that refuses connections for a moment while its data survives.
//!
//! Where a defect lives in what the server runs, the test runs the library's own scripts
//! (`redmutex::sim_support::scripts`) with the arguments the library sends, as Redis would run
//! a request that arrives late or twice.

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::Commands;
use redmutex::sim_support::{AcquireCall, Grant, Keys, Refused, Spec, Verdict};
use redmutex::{Client, MutexOptions};
use redmutex_sim::translate::{Argv, Reply, answer, argv, seats, stamp};
use redmutex_tests::{FaultProxy, Mode, RedisServer, wait_until};

/// The library's script `name`, as it sends it.
fn script(name: &str) -> &'static str {
    redmutex::sim_support::scripts()
        .into_iter()
        .find(|(n, _)| *n == name)
        .unwrap_or_else(|| panic!("no script {name}"))
        .1
}

fn pttl(conn: &mut redis::Connection, key: &str) -> i64 {
    redis::cmd("PTTL").arg(key).query(conn).unwrap()
}

/// `extend(10 s)` is delayed past the node timeout; `extend(60 s)` is confirmed meanwhile;
/// then the late request lands. Redis must not be told a shorter expiry than one it may
/// already have confirmed: the key keeps its 60 s.
#[test]
fn a_late_extend_never_shortens_the_keys_expiry() {
    let server = RedisServer::start();
    let client = Client::open(&server.url()).unwrap();
    let guard = client
        .mutex("hardening:late-extend")
        .ttl(Duration::from_secs(2))
        .lock()
        .unwrap();
    guard.extend(Duration::from_secs(60)).unwrap();
    let mut conn = server.conn();
    assert!(pttl(&mut conn, "hardening:late-extend") > 55_000);
    // The late `extend(10 s)`: the extend script with the guard's token, as the library sent it.
    let extended: i64 = redis::cmd("EVAL")
        .arg(script("extend"))
        .arg(1)
        .arg("hardening:late-extend")
        .arg(guard.token())
        .arg(10_000)
        .query(&mut conn)
        .unwrap();
    assert_eq!(extended, 1, "the token still holds the lock");
    let left = pttl(&mut conn, "hardening:late-extend");
    assert!(
        left > 55_000,
        "a late extend shortened the key's expiry to {left} ms while the guard is valid until +60 s"
    );
    guard.unlock().unwrap();
}

/// After k extends there is still one renewal loop per guard, not k + 1.
#[test]
fn every_extend_keeps_one_renewal_entry_per_guard() {
    let server = RedisServer::start();
    let client = Client::open(&server.url()).unwrap();
    let guards: Vec<_> = (0..3)
        .map(|i| {
            client
                .mutex(format!("hardening:extend-loops:{i}"))
                .ttl(Duration::from_secs(30))
                .lock()
                .unwrap()
        })
        .collect();
    for _ in 0..5 {
        for guard in &guards {
            guard.extend(Duration::from_secs(20)).unwrap();
        }
    }
    assert_eq!(client.renew_queue_len(), guards.len());
    // The one entry renews: a short lease still lives past its TTL.
    let short = client
        .mutex("hardening:extend-loops:short")
        .ttl(Duration::from_secs(30))
        .lock()
        .unwrap();
    short.extend(Duration::from_millis(300)).unwrap();
    assert_eq!(client.renew_queue_len(), guards.len() + 1);
    std::thread::sleep(Duration::from_millis(700));
    short.check().unwrap();
    assert!(short.renewals() >= 3, "renewals: {}", short.renewals());
}

/// An acquire whose reply was lost is sent again on a fresh connection; the first one ran.
/// The second finds the lock held by the round's own token: that is this round's grant (with
/// its fence), not another owner.
#[test]
fn a_retried_acquire_that_finds_its_own_token_has_granted() {
    let server = RedisServer::start();
    let mut conn = server.conn();
    let acquire = |conn: &mut redis::Connection| -> redis::Value {
        redis::cmd("EVAL")
            .arg(script("acquire"))
            .arg(3)
            .arg(&["hardening:retry", "{hardening:retry}:fence"][..])
            .arg("{hardening:retry}:readers")
            .arg(&["host:1:00ff", "30000", "1"][..])
            .query(conn)
            .unwrap()
    };
    let first = acquire(&mut conn);
    let again = acquire(&mut conn);
    // A grant answers its fence (never below the server's time in µs).
    assert!(matches!(first, redis::Value::Int(f) if f > 1_000_000_000_000_000));
    assert_eq!(
        again, first,
        "the same round's acquire, run twice, must grant twice with the same fence"
    );
}

/// A restart with the data on disk refuses connections for a moment; the key and its TTL
/// survive, so the held guard rides over the refusals within its validity instead of being
/// declared lost at the first one.
#[test]
fn a_refused_connection_does_not_lose_a_held_guard() {
    let mut server = RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let client = Client::builder()
        .node(server.url())
        .connect_timeout(Duration::from_millis(200))
        .build()
        .unwrap();
    let guard = client
        .mutex("hardening:refused")
        .ttl(Duration::from_millis(1500))
        .lock()
        .unwrap();
    let before = guard.renewals();
    server.kill();
    // At least one renewal (every 500 ms) meets the refusal.
    std::thread::sleep(Duration::from_millis(600));
    server.restart();
    let renewed = wait_until(Duration::from_secs(3), || {
        std::thread::sleep(Duration::from_millis(10));
        guard.renewals() > before + 1 || !guard.is_held()
    });
    assert!(renewed, "no renewal after the restart");
    guard.check().unwrap();
    let started = Instant::now();
    guard.unlock().unwrap();
    assert!(started.elapsed() < Duration::from_secs(1));
}

/// Replies come 150 ms late (the node timeout is 50 ms): every renewal runs on the server but
/// is never confirmed, so the guard is lost when its validity runs out, while the last
/// renewals keep the key for another TTL. A guard that learns it is lost removes its own key:
/// the name is free soon after the loss, not a TTL later.
#[test]
fn a_lost_guard_removes_its_own_key() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(&server.addr());
    let client = Client::builder()
        .node(proxy.url())
        .node_timeout(Duration::from_millis(50))
        .build()
        .unwrap();
    let ttl = Duration::from_millis(1200);
    let guard = client.mutex("hardening:lost-key").ttl(ttl).lock().unwrap();
    proxy.set_mode(Mode::Delay(Duration::from_millis(150)));
    assert!(guard.wait_lost(ttl * 2), "the guard was not lost");
    let lost_at = Instant::now();
    let mut conn = server.conn();
    let exists = |conn: &mut redis::Connection| -> bool {
        redis::cmd("EXISTS")
            .arg("hardening:lost-key")
            .query::<i64>(conn)
            .unwrap()
            == 1
    };
    assert!(
        wait_until(ttl / 2, || {
            std::thread::sleep(Duration::from_millis(5));
            !exists(&mut conn)
        }),
        "the lost guard's key was still there {:?} after the loss (PTTL {})",
        lost_at.elapsed(),
        pttl(&mut conn, "hardening:lost-key")
    );
    proxy.set_mode(Mode::Pass);
    drop(guard);
}

/// A waiter's grant ends its announcement: when it releases and nobody waits any more, the
/// lock is free for anyone at once, not held back for a hand-off window nobody can use.
#[test]
fn the_handoff_window_opens_only_when_someone_waits() {
    let server = RedisServer::start();
    let client = Client::open(&server.url()).unwrap();
    let mutex = client
        .mutex("hardening:handoff")
        .ttl(Duration::from_secs(10));
    for _ in 0..5 {
        let first = mutex.lock().unwrap();
        let waiter = {
            let mutex = mutex.clone();
            std::thread::spawn(move || mutex.try_lock_for(Duration::from_secs(5)))
        };
        // The waiter announces itself before it blocks.
        assert!(wait_until(Duration::from_secs(5), || {
            std::thread::sleep(Duration::from_millis(5));
            server
                .conn()
                .keys::<_, Vec<String>>("{hardening:handoff}:wait*")
                .is_ok_and(|k| !k.is_empty())
        }));
        first.unlock().unwrap();
        let second = waiter.join().unwrap().expect("the waiter gets the lock");
        second.unlock().unwrap();
        // Nobody waits now.
        match mutex.try_lock() {
            Ok(guard) => guard.unlock().unwrap(),
            Err(e) => panic!("a free lock nobody waits for must be granted at once: {e}"),
        };
    }
}

/// A waiter with a long wait cap announced itself; one with a short cap came, waited briefly
/// and left. The long waiter's announcement must outlive the short one's, so the release
/// wakes it at once instead of leaving it asleep until its cap.
#[test]
fn announcement_and_signal_lifetimes_only_grow() {
    let server = RedisServer::start();
    let client = Client::open(&server.url()).unwrap();
    let mutex = |cap: u64| {
        client
            .mutex("hardening:lifetimes")
            .ttl(Duration::from_secs(30))
            .options(
                redmutex::MutexOptions::default()
                    .with_ttl(Duration::from_secs(30))
                    .with_wait_cap(Duration::from_millis(cap)),
            )
    };
    let holder = mutex(250).lock().unwrap();
    let long = {
        let m = mutex(4000);
        std::thread::spawn(move || {
            let got = m.try_lock_for(Duration::from_secs(20));
            (got.map(|g| g.unlock()).is_ok(), Instant::now())
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    // The short waiter comes and goes.
    assert!(mutex(50).try_lock_for(Duration::from_millis(200)).is_err());
    std::thread::sleep(Duration::from_millis(400));
    let released = Instant::now();
    holder.unlock().unwrap();
    let (got, at) = long.join().unwrap();
    assert!(got, "the long waiter did not get the lock");
    let woke = at.duration_since(released);
    assert!(
        woke < Duration::from_secs(2),
        "the long waiter slept {woke:?} after the release (its cap is 4 s)"
    );
}

/// The server's count of connections it has accepted so far.
fn connections_received(server: &RedisServer) -> u64 {
    let count = server.info("stats", "total_connections_received");
    count.and_then(|v| v.parse().ok()).unwrap()
}

/// Redis ends a short `BLPOP` on its 100 ms tick, after the waiter's own deadline. A waiter
/// whose waits are short (a 50 ms wait cap, as the Python binding uses to check for Ctrl-C)
/// must not drop its connection at every wait and open another: on a healthy server it keeps
/// using the ones it has.
#[test]
fn short_waits_keep_their_connection() {
    let server = RedisServer::start();
    let holder_client = Client::open(&server.url()).unwrap();
    let holder = holder_client
        .mutex("hardening:short-waits")
        .ttl(Duration::from_secs(10))
        .lock()
        .unwrap();
    let waiter = Client::open(&server.url()).unwrap();
    let mutex = waiter.mutex("hardening:short-waits").options(
        redmutex::MutexOptions::default()
            .with_ttl(Duration::from_secs(10))
            .with_wait_cap(Duration::from_millis(50)),
    );
    let before = connections_received(&server);
    let started = Instant::now();
    assert!(mutex.try_lock_for(Duration::from_millis(1500)).is_err());
    let waited = started.elapsed();
    // This test's own INFO connection, the waiter's first, and one to end a pending block.
    let opened = connections_received(&server) - before;
    assert!(
        opened <= 3,
        "a waiter opened {opened} connections in {waited:?} of 50 ms waits"
    );
    drop(holder);
}

/// A release whose reply was lost is asked again by `unlock`'s own retry: the first one ran
/// and deleted the key (its connection was cut before the reply, and the node then went out
/// of reach for a moment). Within the guard's validity, "missing" on a node that the earlier
/// try may have reached is our own release, not a lost lock. (A first answer "missing" is a
/// loss: see `fences.rs`.)
#[test]
fn a_retried_release_that_finds_its_key_gone_has_released() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(&server.addr());
    let client = Client::builder()
        .node(proxy.url())
        .node_timeout(Duration::from_millis(100))
        .build()
        .unwrap();
    let name = "hardening:release-twice";
    let guard = client
        .mutex(name)
        .ttl(Duration::from_secs(10))
        .lock()
        .unwrap();
    proxy.set_mode(Mode::CutThenBlackhole);
    std::thread::scope(|s| {
        let unlocking = s.spawn(|| guard.release());
        // The first try ran; then every try meets a node out of reach, until it answers again.
        assert!(wait_until(Duration::from_secs(2), || !server
            .conn()
            .exists::<_, bool>(name)
            .unwrap()));
        proxy.set_mode(Mode::Pass);
        let report = unlocking
            .join()
            .unwrap()
            .expect("the same release run twice is a release, not a lost lock");
        assert_eq!(report.released, 1, "{report:?}");
    });
}

/// Under an evicting `maxmemory-policy`, memory pressure can evict a held lock or roll a
/// fence back. A client says so once per server, or refuses such a server when asked to.
#[test]
fn eviction_policies_are_warned_of_or_refused() {
    use std::sync::{Arc, Mutex};
    let evicting = RedisServer::start_with(&["--maxmemory-policy", "allkeys-lru"]);
    let said = Arc::new(Mutex::new(Vec::<String>::new()));
    let s = Arc::clone(&said);
    let warned = Client::builder()
        .node(evicting.url())
        .on_warning(move |w| s.lock().unwrap().push(w.to_owned()))
        .build()
        .unwrap();
    for _ in 0..3 {
        let guard = warned.mutex("hardening:evict").lock().unwrap();
        guard.unlock().unwrap();
    }
    let said = said.lock().unwrap().clone();
    assert_eq!(said.len(), 1, "once per server: {said:?}");
    assert!(said[0].contains("maxmemory-policy allkeys-lru"), "{said:?}");

    let strict = Client::builder()
        .node(evicting.url())
        .require_noeviction(true)
        .connect_timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let started = Instant::now();
    let err = strict.mutex("hardening:evict").lock().unwrap_err();
    assert_eq!(err.kind(), redmutex::ErrorKind::Server, "{err}");
    assert!(
        err.to_string().contains("maxmemory-policy allkeys-lru"),
        "{err}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "refused at once: {err}"
    );

    let safe = RedisServer::start();
    let strict = Client::builder()
        .node(safe.url())
        .require_noeviction(true)
        .build()
        .unwrap();
    strict
        .mutex("hardening:evict")
        .lock()
        .unwrap()
        .unlock()
        .unwrap();
}

/// The fault campaign's orphan: an acquire runs on the server, and its connection is reset
/// before the reply (and before the undo queued behind it) gets through; the link heals at
/// once. No key whose token no client holds may outlive the heal by more than a node timeout
/// and a round trip (and the pause before a clean-up's second try, should its first have met
/// the reset): before, it lived a whole TTL.
#[test]
fn an_acquire_cut_off_by_a_reset_leaves_no_orphan() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(&server.addr());
    let node_timeout = Duration::from_millis(50);
    let client = Client::builder()
        .node(proxy.url())
        .node_timeout(node_timeout)
        .build()
        .unwrap();
    let mutex = client.mutex("hardening:reset").ttl(Duration::from_secs(10));
    mutex.status().unwrap();
    let mut conn = server.conn();
    let mut orphans = 0;
    for round in 0..6 {
        let cuts = proxy.cut();
        proxy.set_mode(Mode::CutAfterRequest);
        // The reset and the heal come together: the first cut heals the link.
        let healed = std::thread::scope(|s| {
            let watcher = s.spawn(|| {
                assert!(wait_until(Duration::from_secs(5), || proxy.cut() > cuts));
                proxy.set_mode(Mode::Pass);
                Instant::now()
            });
            let attempt = mutex.try_lock();
            let healed = watcher.join().unwrap();
            (attempt, healed)
        });
        let (attempt, healed) = healed;
        let held: Option<Vec<u8>> = attempt.as_ref().ok().map(|g| g.token().to_vec());
        let holder = |conn: &mut redis::Connection| -> Option<Vec<u8>> {
            redis::cmd("GET")
                .arg("hardening:reset")
                .query(conn)
                .unwrap()
        };
        // A key there is either the guard's, or it must go soon.
        let gone = wait_until(Duration::from_millis(400), || {
            std::thread::sleep(Duration::from_millis(2));
            let v = holder(&mut conn);
            v.is_none() || v == held
        });
        let after = healed.elapsed();
        assert!(
            gone,
            "round {round}: a key nobody holds outlived the heal by {after:?} (PTTL {})",
            pttl(&mut conn, "hardening:reset")
        );
        if held.is_none() && after > Duration::from_millis(5) {
            orphans += 1;
            assert!(
                after < node_timeout * 2 + Duration::from_millis(200),
                "round {round}: the orphan lived {after:?} after the heal"
            );
        }
        drop(attempt);
        let _: () = redis::cmd("DEL")
            .arg("hardening:reset")
            .query(&mut conn)
            .unwrap();
    }
    eprintln!("{orphans} of 6 rounds left an orphan for a moment");
}

/// The attempt pipelined behind a wait grants as the holder releases; the caller's interrupt
/// check (Ctrl-C in a binding) then says stop. The call ends `Interrupted` and must not keep
/// the lock it just took: nobody would hold it, and it would stay for a whole TTL.
#[test]
fn an_interrupted_wait_keeps_no_lock() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let server = RedisServer::start();
    let client = Client::open(&server.url()).unwrap();
    let mutex = client
        .mutex("hardening:interrupted")
        .ttl(Duration::from_secs(10));
    for round in 0..3 {
        let holder = mutex.lock().unwrap();
        let released = Arc::new(AtomicBool::new(false));
        let waiter = {
            let (mutex, released) = (mutex.clone(), Arc::clone(&released));
            std::thread::spawn(move || {
                let mut interrupted = || released.load(Ordering::SeqCst);
                mutex.lock_interruptible(None, &mut interrupted)
            })
        };
        std::thread::sleep(Duration::from_millis(100));
        // Said just before the release: the check right after the wake-up says stop.
        released.store(true, Ordering::SeqCst);
        holder.unlock().unwrap();
        match waiter.join().unwrap() {
            Err(e) => assert_eq!(e.kind(), redmutex::ErrorKind::Interrupted, "{e}"),
            Ok(guard) => drop(guard),
        }
        let held: Option<String> = redis::cmd("GET")
            .arg("hardening:interrupted")
            .query(&mut server.conn())
            .unwrap();
        // Free, or in the release's hand-off window (the empty value, nobody's token, for
        // 20 ms): the waiter may have given up just before the release, announced still.
        assert!(
            held.as_deref().is_none_or(str::is_empty),
            "round {round}: an interrupted wait kept the lock: {held:?}"
        );
    }
}

/// A caller that waited and gave up leaves no announcement behind: a release right after it
/// neither keeps the lock for a waiter that is gone (a 20 ms hand-off window for the mutex) nor
/// keeps a permit for it (a semaphore keeps one per announced waiter, for as long as the
/// announcement lasts), so a newcomer's `try_lock`/`try_acquire` gets what is free.
#[test]
fn a_waiter_that_gave_up_leaves_no_place_behind() {
    let server = RedisServer::start();
    let client = Client::open(&server.url()).unwrap();
    let mutex = client.mutex("hardening:gave-up");
    let held = mutex.lock().unwrap();
    let gave_up = mutex.try_lock_for(Duration::from_millis(60)).unwrap_err();
    assert_eq!(gave_up.kind(), redmutex::ErrorKind::WouldBlock);
    held.unlock().unwrap();
    mutex
        .try_lock()
        .expect("the mutex is free: nobody waits for it any more")
        .unlock()
        .unwrap();

    let semaphore = client.semaphore("hardening:gave-up:sem", 1);
    let held = semaphore.acquire().unwrap();
    let gave_up = semaphore
        .try_acquire_for(Duration::from_millis(60))
        .unwrap_err();
    assert_eq!(gave_up.kind(), redmutex::ErrorKind::WouldBlock);
    held.unlock().unwrap();
    semaphore
        .try_acquire()
        .expect("the permit is free: nobody waits for it any more")
        .unlock()
        .unwrap();
}

/// The mutex's keys for `name`, as the scripts take them, and its acquire and release run
/// by hand (`EVAL`), for the tests that set up the keys around them.
struct RawLock {
    lock: String,
    fence: String,
    waiters: String,
    readers: String,
    wake: String,
}

impl RawLock {
    fn new(name: &str) -> RawLock {
        let companion = |suffix: &str| format!("{{{name}}}:{suffix}");
        RawLock {
            lock: name.to_owned(),
            fence: companion("fence"),
            waiters: companion("waiters"),
            readers: companion("readers"),
            wake: companion("wake"),
        }
    }

    /// The acquire of `token` (TTL 30 s, fenced, has not waited), announcing `id` as a waiter
    /// for `announce_ms` when refused.
    fn acquire(
        &self,
        conn: &mut redis::Connection,
        token: &str,
        announce_ms: &str,
        id: &str,
    ) -> redis::Value {
        redis::cmd("EVAL")
            .arg(script("acquire"))
            .arg(4)
            .arg(&[&self.lock, &self.fence, &self.readers, &self.waiters][..])
            .arg(&[token, "30000", "1", "0", announce_ms, id][..])
            .query(conn)
            .unwrap()
    }

    /// The release of `token` with a hand-off window of `window_ms`.
    fn release(&self, conn: &mut redis::Connection, token: &str, window_ms: &str) -> i64 {
        redis::cmd("EVAL")
            .arg(script("release"))
            .arg(3)
            .arg(&[&self.lock, &self.wake, &self.waiters][..])
            .arg(&[token, window_ms][..])
            .query(conn)
            .unwrap()
    }
}

/// The release looks only at the announcement that ends last (a release with waiters is on
/// the hand-off's path and drops nothing itself). A waiter that announced itself for long and
/// left (its withdrawal removes its member, not the set's expiry) leaves behind a set that
/// still exists while every announcement in it has ended: the release must see that nobody
/// waits, delete the lock and leave no wake-up and no hand-off window.
#[test]
fn a_release_after_every_announcement_ended_keeps_no_window() {
    let server = RedisServer::start();
    let mut conn = server.conn();
    let raw = RawLock::new("hardening:ended");
    let (lock, waiters, wake) = (&raw.lock, &raw.waiters, &raw.wake);
    let acquire = |conn: &mut redis::Connection, token: &str, announce_ms: &str, id: &str| {
        raw.acquire(conn, token, announce_ms, id)
    };
    // A grant answers its fence; a refusal `{0, pttl, holder}`.
    let refused = |reply: redis::Value| matches!(&reply, redis::Value::Array(items) if items.first() == Some(&redis::Value::Int(0)));
    assert!(matches!(
        acquire(&mut conn, "host:1:aa", "0", ""),
        redis::Value::Int(f) if f > 0
    ));
    assert!(refused(acquire(&mut conn, "host:2:bb", "5000", "long")));
    assert!(refused(acquire(&mut conn, "host:3:cc", "100", "short")));
    // The long waiter gives up and withdraws; the short one's announcement runs out.
    let _: i64 = conn.zrem(waiters, "long").unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        conn.exists::<_, bool>(waiters).unwrap(),
        "the set outlives its announcements"
    );
    let released = raw.release(&mut conn, "host:1:aa", "5000");
    assert_eq!(released, 1);
    assert!(
        !conn.exists::<_, bool>(lock).unwrap(),
        "nobody waits: the lock is deleted, not kept as a hand-off window"
    );
    assert!(
        !conn.exists::<_, bool>(wake).unwrap(),
        "no wake-up for nobody"
    );
}

/// A release with a live waiter leaves exactly one wake-up signal (one waiter wakes per
/// release), with the waiter's announcement as its expiry, whatever the wake-up key held
/// before: nothing, signals that no waiter consumed (a waiter that gave up), or a value of
/// another type written by someone else.
#[test]
fn a_release_with_a_waiter_leaves_one_wake_up_signal_whatever_the_key_held() {
    let server = RedisServer::start();
    let mut conn = server.conn();
    let raw = RawLock::new("hardening:signal");
    let (lock, wake) = (raw.lock.as_str(), raw.wake.as_str());
    let acquire = |conn: &mut redis::Connection, token: &str, announce_ms: &str, id: &str| {
        raw.acquire(conn, token, announce_ms, id)
    };
    let before: [(&str, &[&str]); 3] = [
        ("nothing", &[]),
        ("two unconsumed signals", &["RPUSH", wake, "1", "1"]),
        ("a string", &["SET", wake, "junk"]),
    ];
    for (what, setup) in before {
        let _: i64 = conn
            .del(&[lock, &raw.fence, &raw.waiters, wake][..])
            .unwrap();
        assert!(matches!(
            acquire(&mut conn, "host:1:aa", "0", ""),
            redis::Value::Int(_)
        ));
        assert!(matches!(
            acquire(&mut conn, "host:2:bb", "5000", "waiter"),
            redis::Value::Array(_)
        ));
        if let Some((cmd, args)) = setup.split_first() {
            redis::cmd(cmd).arg(args).exec(&mut conn).unwrap();
        }
        let released = raw.release(&mut conn, "host:1:aa", "20");
        assert_eq!(released, 1, "{what}");
        let signals: Vec<String> = conn.lrange(wake, 0, -1).unwrap();
        assert_eq!(signals, ["1"], "{what}: one signal, for one waiter");
        let pttl: i64 = conn.pttl(wake).unwrap();
        assert!(
            (4_000..=5_000).contains(&pttl),
            "{what}: the signal lasts as long as the announcement, got {pttl} ms"
        );
        let window: String = conn.get(lock).unwrap();
        assert_eq!(window, "", "{what}: the lock is kept for the waiter");
    }
}

/// An unfenced `try_lock`'s round on one node, as the library makes and judges it (the
/// core's own call machine), on the lock `name` with a 10 s TTL: the call with the round in
/// flight, the round's requests, and its undo.
struct TryRound {
    call: AcquireCall,
    requests: Vec<Argv>,
    undo: Argv,
}

fn try_round(name: &str, token: &[u8]) -> TryRound {
    let opts = MutexOptions::default()
        .with_ttl(Duration::from_secs(10))
        .with_wait_cap(Duration::from_secs(1))
        .with_retry_delay(Duration::from_millis(10))
        .with_handoff_window(Duration::from_millis(5))
        .with_fencing(false);
    let keys = Arc::new(Keys::new(name.as_bytes()));
    let spec = Spec::new(keys, opts, Duration::from_millis(250), 1).unwrap();
    let mut call = AcquireCall::new(&spec, Some(Duration::ZERO), Duration::from_secs(1));
    let t0 = stamp(0);
    let sent = call.begin(&spec, token.to_vec(), t0, Duration::ZERO, None, Some(b""));
    TryRound {
        call,
        requests: sent.calls.iter().map(argv).collect(),
        undo: argv(sent.undo.call()),
    }
}

impl TryRound {
    /// The call's verdict on the node's `replies`, a microsecond after the round began.
    fn judge(&mut self, replies: Vec<Reply>) -> Result<Grant, Box<Refused>> {
        let seat = &seats(1)[0];
        self.call.round().answer(0, seat, &answer(Some(replies)));
        match self.call.finish(stamp(1)) {
            Verdict::Held { grant, .. } => Ok(grant),
            Verdict::Refused { refused, .. } => Err(refused),
        }
    }
}

/// Runs one of the library's requests as it sends it; an error reply as its text.
fn run(conn: &mut redis::Connection, argv: &[Vec<u8>]) -> Result<redis::Value, String> {
    let mut cmd = redis::Cmd::new();
    for word in argv {
        cmd.arg(word);
    }
    match cmd.query(conn) {
        Ok(redis::Value::ServerError(e)) => Err(format!("{e:?}")),
        Ok(v) => Ok(v),
        Err(e) => Err(e.to_string()),
    }
}

/// An unfenced `try_lock` asks with plain commands, one after another, and other clients' commands can
/// run between them. A reader's acquire is run before each of them, and after the last: the
/// reader and the writer never both hold, one of them does, and a refused writer's undo
/// leaves no lock key behind.
#[test]
fn a_reader_between_a_try_locks_commands_never_overlaps_it() {
    let server = RedisServer::start();
    let client = Client::open(&server.url()).unwrap();
    let mut conn = server.conn();
    let commands = try_round("hardening:between", b"probe").requests.len();
    assert!(commands >= 3, "a try_lock asks with {commands} requests");
    for at in 0..=commands {
        let name = format!("hardening:between:{at}");
        let mut round = try_round(&name, b"writer:1:00ff");
        let requests = round.requests.clone();
        assert_ne!(requests[0][0], b"EVALSHA", "a try_lock sends no script");
        let reader = client.rwlock(name.as_str()).auto_renew(false);
        let mut read = None;
        let mut replies = Vec::new();
        for (i, request) in requests.iter().enumerate() {
            if i == at {
                read = reader.try_read().ok();
            }
            replies.push(run(&mut conn, request));
        }
        if at == commands {
            read = reader.try_read().ok();
        }
        let written = match round.judge(replies) {
            Ok(grant) => Some(grant.token),
            Err(refused) => {
                for _ in &refused.undo_on {
                    run(&mut conn, &round.undo).unwrap();
                }
                None
            }
        };
        assert!(
            written.is_some() != read.is_some(),
            "reader before command {at}: written {written:?}, read {}",
            read.is_some()
        );
        let key: Option<Vec<u8>> = conn.get(&name).unwrap();
        assert_eq!(key, written, "reader before command {at}");
    }
}

/// An unfenced `try_lock`'s commands whose replies were lost run again (the transport sends
/// them again on a fresh connection when a pooled one turns out dead after the write): the
/// `SET` fails on the round's own token, which is its grant.
#[test]
fn a_try_lock_run_twice_has_granted() {
    let server = RedisServer::start();
    let mut conn = server.conn();
    let mut round = try_round("hardening:twice", b"host:1:00ff");
    let first: Vec<_> = round.requests.iter().map(|r| run(&mut conn, r)).collect();
    let again: Vec<_> = round.requests.iter().map(|r| run(&mut conn, r)).collect();
    assert_eq!(first[0], Ok(redis::Value::Okay));
    assert_eq!(
        again[0],
        Ok(redis::Value::Nil),
        "the second SET meets the first"
    );
    let Ok(grant) = round.judge(again) else {
        panic!("the round's own token is its grant");
    };
    assert_eq!(grant.token, b"host:1:00ff");
    assert_eq!(grant.fence, 0);
}

/// A `lock` announces its caller as a waiter wherever a round is refused. When a quorum
/// grants while a minority still refuses (here a node holding a foreign value), the granted
/// call is no waiter any more: it takes its announcement back there, in the background (the
/// refusal may come after the quorum). Left, it would live on for the longest wait, and every
/// release on that node until then would keep the lock for nobody through a hand-off window
/// and push a wake-up signal for nobody.
#[test]
fn a_call_granted_by_a_quorum_takes_back_its_announcement_where_refused() {
    let servers = redmutex_tests::RedisServers::start(3);
    let mut conns: Vec<_> = servers.iter().map(|s| s.conn()).collect();
    let name = "hardening:announced";
    let _: () = conns[2].set(name, "foreign").unwrap();
    let client = Client::builder().nodes(servers.urls()).build().unwrap();
    // Announcements that would live 5 s: long after the wait below.
    let opts = redmutex::MutexOptions::default().with_wait_cap(Duration::from_secs(5));
    let guard = client.mutex(name).options(opts).lock().unwrap();
    let announced = |c: &mut redis::Connection| -> u64 {
        redis::cmd("ZCARD")
            .arg(format!("{{{name}}}:waitq"))
            .query(c)
            .unwrap()
    };
    let withdrawn = wait_until(Duration::from_secs(1), || {
        conns.iter_mut().all(|c| announced(c) == 0)
    });
    let left: Vec<u64> = conns.iter_mut().map(announced).collect();
    assert!(
        withdrawn,
        "announcements left 1 s after the grant, by node: {left:?}"
    );
    guard.unlock().unwrap();
}

/// A pipe for `wake_on_checked`, with a thread that writes to it after `after` and hands
/// its end back (a closed write end would leave the pipe readable for good).
fn poke_after(
    after: Duration,
) -> (
    std::io::PipeReader,
    std::thread::JoinHandle<std::io::PipeWriter>,
) {
    use std::io::Write;
    let (reader, mut writer) = std::io::pipe().unwrap();
    let poke = std::thread::spawn(move || {
        std::thread::sleep(after);
        writer.write_all(b"!").unwrap();
        writer
    });
    (reader, poke)
}

/// A round in flight to a frozen server, on a thread that watches every wait
/// (`wake_on_checked`): the wake-up's check says stop, and the round ends at once rather than
/// at its node timeout, as one whose time ran out: what its request stores when the server
/// wakes is undone by the undo written behind it, so no key is left for a TTL.
#[test]
fn a_round_to_a_frozen_server_ends_at_once_when_the_wake_up_check_says_stop() {
    use std::os::fd::AsFd;
    let server = RedisServer::start();
    let client = Client::open(&server.url()).unwrap();
    let name = "hardening:stopped-round";
    let mutex = client
        .mutex(name)
        .ttl(Duration::from_secs(30))
        .node_timeout(Duration::from_secs(5));
    // A pooled connection: the round is written on it at once.
    mutex.try_lock().unwrap().unlock().unwrap();
    server.pause();
    let (reader, poke) = poke_after(Duration::from_millis(100));
    let pipe = reader.try_clone().unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let said = stop.clone();
    let go_on = move || {
        let mut buf = [0u8; 8];
        let _ = std::io::Read::read(&mut &pipe, &mut buf);
        said.store(true, std::sync::atomic::Ordering::SeqCst);
        false
    };
    let mut interrupted = || stop.load(std::sync::atomic::Ordering::SeqCst);
    let started = Instant::now();
    // One attempt, with the interrupt check the stop sets.
    let taken = redmutex::wake_on_checked(reader.as_fd(), go_on, || {
        mutex.lock_interruptible(Some(Instant::now()), &mut interrupted)
    })
    .unwrap();
    let took = started.elapsed();
    let _writer = poke.join().unwrap();
    server.resume();
    match taken {
        Err(redmutex::TryLockError::Error(e)) => {
            assert_eq!(e.kind(), redmutex::ErrorKind::Interrupted, "{e}")
        }
        other => panic!("expected Interrupted, got {other:?}"),
    }
    assert!(
        took < Duration::from_secs(2),
        "the round ran {took:?}, toward its 5 s node timeout"
    );
    // The request ran when the server woke, and its undo right behind it.
    assert!(
        wait_until(Duration::from_secs(3), || {
            let held: Option<String> = server.conn().get(name).unwrap();
            held.is_none()
        }),
        "the stopped round's grant was left on the server"
    );
}

/// The wake-up's check says go on (it drained the descriptor: a signal whose handler did not
/// raise): the round waits on, and takes the lock once the frozen server wakes. The
/// descriptor is shared (`Arc<OwnedFd>`, as the Python binding passes its signal pipe): it
/// is watched as a borrowed one is, and the scope lets go of it, open, at its end.
#[test]
fn a_round_goes_on_when_the_wake_up_check_says_so() {
    use std::os::fd::OwnedFd;
    let server = RedisServer::start();
    let client = Client::open(&server.url()).unwrap();
    let mutex = client
        .mutex("hardening:go-on")
        .node_timeout(Duration::from_secs(5));
    mutex.try_lock().unwrap().unlock().unwrap();
    server.pause();
    let (reader, poke) = poke_after(Duration::from_millis(100));
    let resumed = {
        let pid = server.pid();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(400));
            unsafe { libc::kill(pid as i32, libc::SIGCONT) };
        })
    };
    let asked = std::rc::Rc::new(std::cell::Cell::new(0));
    let (pipe, counted) = (reader.try_clone().unwrap(), asked.clone());
    let go_on = move || {
        let mut buf = [0u8; 8];
        let _ = std::io::Read::read(&mut &pipe, &mut buf);
        counted.set(counted.get() + 1);
        true
    };
    let shared = std::sync::Arc::new(OwnedFd::from(reader));
    let taken = redmutex::wake_on_checked(shared.clone(), go_on, || mutex.try_lock()).unwrap();
    let _writer = poke.join().unwrap();
    resumed.join().unwrap();
    server.resume();
    assert_eq!(
        asked.get(),
        1,
        "the check was asked once, for the one wake-up"
    );
    let shared = std::sync::Arc::try_unwrap(shared).expect("the scope let go of the descriptor");
    std::fs::File::from(shared)
        .metadata()
        .expect("the shared descriptor is still open");
    taken
        .expect("the round went on and took the free lock")
        .unlock()
        .unwrap();
}

/// A wake-up's check, as `counted_arming` gives it.
type Check = Box<dyn FnMut() -> bool>;

/// How often something ran.
type Count = Arc<std::sync::atomic::AtomicUsize>;

/// An arming that counts its runs, for `wake_on_checked_after`: it gives `reader` and a
/// check that drains it and says, given the bytes it read, go on (`true`) or stop; the
/// check's runs are counted too.
fn counted_arming(
    reader: std::io::PipeReader,
    go_on: fn(usize) -> bool,
) -> (
    impl FnOnce() -> Option<(Arc<std::os::fd::OwnedFd>, Check)> + 'static,
    Count,
    Count,
) {
    use std::os::fd::AsRawFd;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let (armed, asked) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (a, k) = (armed.clone(), asked.clone());
    let pipe = reader.try_clone().unwrap();
    // Drained without blocking, as a signal pipe is: the check also runs when it is empty.
    // SAFETY: sets a flag of a descriptor this function owns.
    assert_eq!(
        unsafe { libc::fcntl(pipe.as_raw_fd(), libc::F_SETFL, libc::O_NONBLOCK) },
        0
    );
    let arm = move || {
        a.fetch_add(1, Ordering::SeqCst);
        let check: Check = Box::new(move || {
            let mut buf = [0u8; 8];
            let read = std::io::Read::read(&mut &pipe, &mut buf).unwrap_or(0);
            k.fetch_add(1, Ordering::SeqCst);
            go_on(read)
        });
        Some((Arc::new(std::os::fd::OwnedFd::from(reader)), check))
    };
    (arm, armed, asked)
}

/// A call that ends within its grace never sets its descriptor up: on a healthy server an
/// uncontended `try_lock` and its `unlock` run without the arming (what a binding's
/// `signal.set_wakeup_fd` would cost), though the pipe was written to before the call.
#[test]
fn a_call_that_ends_within_its_grace_never_arms() {
    use std::io::Write;
    use std::sync::atomic::Ordering;
    let server = RedisServer::start();
    let client = Client::open(&server.url()).unwrap();
    let mutex = client.mutex("hardening:unarmed");
    mutex.try_lock().unwrap().unlock().unwrap();
    let (reader, mut writer) = std::io::pipe().unwrap();
    writer.write_all(b"!").unwrap();
    let (arm, armed, asked) = counted_arming(reader, |_| false);
    let taken = redmutex::wake_on_checked_after(Duration::from_secs(30), arm, || {
        mutex
            .try_lock()
            .and_then(|g| g.unlock().map(drop).map_err(Into::into))
    });
    taken.expect("the call ran unwatched to its end");
    assert_eq!(armed.load(Ordering::SeqCst), 0, "the call was armed");
    assert_eq!(asked.load(Ordering::SeqCst), 0, "the check was asked");
}

/// A round to a frozen server arms once its grace has passed, and the check runs at once
/// then, whether or not the descriptor is readable: a signal that came before the
/// descriptor was set up, so that its byte never reached the pipe (here: an empty pipe and a
/// check that says stop), ends the call then, as one whose time ran out, not at its 5 s node
/// timeout.
#[test]
fn a_round_to_a_frozen_server_arms_after_its_grace_and_asks_the_check_at_once() {
    use std::sync::atomic::Ordering;
    let server = RedisServer::start();
    let client = Client::open(&server.url()).unwrap();
    let mutex = client
        .mutex("hardening:armed-late")
        .node_timeout(Duration::from_secs(5));
    mutex.try_lock().unwrap().unlock().unwrap();
    // Nothing in the pipe: the signal came before it was Python's wake-up descriptor.
    let (reader, _writer) = std::io::pipe().unwrap();
    let (arm, armed, asked) = counted_arming(reader, |_| false);
    server.pause();
    let started = Instant::now();
    let taken =
        redmutex::wake_on_checked_after(Duration::from_millis(50), arm, || mutex.try_lock());
    let took = started.elapsed();
    server.resume();
    assert!(
        matches!(&taken, Err(redmutex::TryLockError::Error(e))
            if e.kind() == redmutex::ErrorKind::Connection),
        "expected the round's timeout, got {taken:?}"
    );
    assert_eq!(armed.load(Ordering::SeqCst), 1, "armed once");
    assert_eq!(
        asked.load(Ordering::SeqCst),
        1,
        "the check was asked once, at the arming"
    );
    assert!(
        took < Duration::from_secs(2),
        "the round ran {took:?}, toward its 5 s node timeout"
    );
}

/// A server, and a mutex on it whose lock another owner holds for a minute.
fn held_by_another(name: &str) -> (RedisServer, redmutex::Mutex) {
    let server = RedisServer::start();
    let client = Client::open(&server.url()).unwrap();
    let _: () = server.conn().set_ex(name, "foreign", 60).unwrap();
    (server, client.mutex(name))
}

/// A waiting `lock_interruptible` of `mutex` (deadline 20 s) under `wake_on_checked_after`
/// with `arm` and a grace of a minute, its interrupt check true once the check was `asked`:
/// it must end Interrupted. Returns how long it ran.
fn wait_interrupted(
    mutex: &redmutex::Mutex,
    arm: impl FnOnce() -> Option<(Arc<std::os::fd::OwnedFd>, Check)> + 'static,
    asked: &Count,
) -> Duration {
    use std::sync::atomic::Ordering;
    let mut interrupted = || asked.load(Ordering::SeqCst) > 0;
    let started = Instant::now();
    let taken = redmutex::wake_on_checked_after(Duration::from_secs(60), arm, || {
        mutex.lock_interruptible(
            Some(Instant::now() + Duration::from_secs(20)),
            &mut interrupted,
        )
    });
    let took = started.elapsed();
    match taken {
        Err(redmutex::TryLockError::Error(e)) => {
            assert_eq!(e.kind(), redmutex::ErrorKind::Interrupted, "{e}")
        }
        other => panic!("expected Interrupted, got {other:?}"),
    }
    took
}

/// A wait for a release arms at once, whatever the grace: a waiting `lock_interruptible`
/// whose grace is a minute still ends, Interrupted, when its descriptor is written to
/// 100 ms into the wait and the check, which goes on while the pipe is empty, then says stop.
#[test]
fn a_wait_for_a_release_arms_at_once() {
    use std::sync::atomic::Ordering;
    let (_server, mutex) = held_by_another("hardening:armed-wait");
    let (reader, mut writer) = std::io::pipe().unwrap();
    let (arm, armed, asked) = counted_arming(reader, |read| read == 0);
    // 100 ms into the wait: how often it was armed by then, and the byte a signal writes.
    let poke = {
        let armed = armed.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            let by_then = armed.load(Ordering::SeqCst);
            // The call may have ended already (then its assertions say why).
            let _ = std::io::Write::write_all(&mut writer, b"!");
            (by_then, writer)
        })
    };
    let took = wait_interrupted(&mutex, arm, &asked);
    let (armed_by_then, _writer) = poke.join().unwrap();
    assert_eq!(armed_by_then, 1, "not armed as the wait began");
    assert_eq!(armed.load(Ordering::SeqCst), 1, "armed once");
    assert!(
        took < Duration::from_secs(10),
        "the wait ran {took:?}, toward its 20 s deadline"
    );
}

/// A wait for a release that begins once the check said stop (at the arming the wait itself
/// caused: a signal that came before the descriptor was set up, so the pipe stays empty)
/// ends at once, Interrupted, within the 100 ms in which Ctrl-C must end a Python call:
/// not when its `BLPOP` returns (about 200 ms here; a first wait lasts up to 250 ms).
#[test]
fn a_wait_that_arms_a_stopping_check_ends_at_once() {
    use std::sync::atomic::Ordering;
    let (_server, mutex) = held_by_another("hardening:armed-stop");
    let (reader, _writer) = std::io::pipe().unwrap();
    let (arm, armed, asked) = counted_arming(reader, |_| false);
    let took = wait_interrupted(&mutex, arm, &asked);
    assert_eq!(armed.load(Ordering::SeqCst), 1, "armed once");
    assert!(
        took < Duration::from_millis(100),
        "the wait ran {took:?}, toward the end of its first block"
    );
}
