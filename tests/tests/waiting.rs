//! Waiting at scale: many threads of one client waiting on one lock cost Redis what one
//! waiter costs, and each of them still gets the lock, once, in turn.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use redmutex::{Client, FIRST_WAIT, MutexOptions};
use redmutex_tests::{Counters as Stats, RedisServer, wait_until};

/// Threads that wait on a held lock: each takes it once (waiting at most a minute), checks
/// that nobody else holds it meanwhile, and counts itself.
fn waiters(
    client: &Client,
    name: &str,
    n: usize,
    inside: &Arc<AtomicBool>,
    taken: &Arc<AtomicUsize>,
    started: &Arc<Barrier>,
) -> Vec<std::thread::JoinHandle<()>> {
    (0..n)
        .map(|_| {
            let mutex = client.mutex(name);
            let (inside, taken, started) = (inside.clone(), taken.clone(), started.clone());
            std::thread::spawn(move || {
                started.wait();
                let guard = mutex.try_lock_for(Duration::from_secs(60)).unwrap();
                assert!(!inside.swap(true, Ordering::SeqCst), "two holders at once");
                taken.fetch_add(1, Ordering::SeqCst);
                inside.store(false, Ordering::SeqCst);
                guard.unlock().unwrap();
            })
        })
        .collect()
}

/// 300 threads of one client wait on one held lock. While nothing is released they cost
/// Redis no more than a few single waiters (measured in the same test: one waiter costs its
/// rounds and blocks per wait cap) and open no connection; after the release every one of
/// them gets the lock exactly once, never two at a time.
#[test]
fn many_waiting_threads_of_one_client_cost_what_one_waiter_costs() {
    let server = RedisServer::start();
    let mut stats = Stats(server.conn());
    let name = "waiting:many";
    let client = Client::open(&server.url()).unwrap();
    let holder = Client::open(&server.url()).unwrap();
    let guard = holder.mutex(name).lock().unwrap();
    let inside = Arc::new(AtomicBool::new(false));
    let taken = Arc::new(AtomicUsize::new(0));

    // One waiter, alone: what a waiting thread costs.
    let first = Arc::new(Barrier::new(2));
    let mut threads = waiters(&client, name, 1, &inside, &taken, &first);
    first.wait();
    std::thread::sleep(FIRST_WAIT * 2);
    let (one, _) = stats.over(Duration::from_secs(1));

    // 299 more.
    let n = 300;
    let more = Arc::new(Barrier::new(n));
    threads.extend(waiters(&client, name, n - 1, &inside, &taken, &more));
    more.wait();
    // Every first round is answered within a few waits: the rounds of threads still making
    // their first one would only add to the count below.
    std::thread::sleep(FIRST_WAIT * 4);
    let (many, connections) = stats.over(Duration::from_secs(1));
    let (_, _, open) = stats.read();
    eprintln!(
        "1 waiter: {one} commands/s; {n} waiters: {many} commands/s, {connections} new \
         connections, {open} open"
    );
    assert!(
        many <= 3 * one + 20,
        "{n} waiting threads cost Redis {many} commands in a second, one alone {one}"
    );
    assert_eq!(connections, 0, "connections opened while {n} threads wait");

    guard.unlock().unwrap();
    let all_done = Instant::now() + Duration::from_secs(60);
    for t in threads {
        assert!(
            wait_until(all_done.saturating_duration_since(Instant::now()), || t
                .is_finished()),
            "a waiter never got the lock"
        );
        t.join().unwrap();
    }
    assert_eq!(taken.load(Ordering::SeqCst), n);
}

/// A thread parked behind another waiting thread of its client still gives up at its own
/// deadline, with the error a `try_lock_for` that ran out gives.
#[test]
fn a_parked_waiter_still_gives_up_at_its_deadline() {
    let server = RedisServer::start();
    let name = "waiting:deadline";
    let holder = Client::open(&server.url()).unwrap();
    let _guard = holder.mutex(name).lock().unwrap();
    let client = Client::open(&server.url()).unwrap();
    let long = client.mutex(name);
    let first = std::thread::spawn(move || long.try_lock_for(Duration::from_secs(3)).map(drop));
    let short = client.mutex(name);
    let begun = Instant::now();
    let err = short
        .try_lock_for(Duration::from_millis(600))
        .map(drop)
        .unwrap_err();
    let took = begun.elapsed();
    assert!(matches!(err, redmutex::TryLockError::WouldBlock), "{err:?}");
    assert!(took < Duration::from_secs(2), "gave up after {took:?}");
    let err = first.join().unwrap().unwrap_err();
    assert!(matches!(err, redmutex::TryLockError::WouldBlock), "{err:?}");
}

/// A writer and 16 readers of one client wait behind a read hold: one connection at a time is
/// blocked in a wait (a waiting writer keeps new readers out anyway), and after the release
/// the writer and then every reader gets in.
#[test]
fn a_clients_waiting_writer_and_readers_block_one_connection() {
    let server = RedisServer::start();
    let name = "waiting:rw";
    let holder = Client::open(&server.url()).unwrap();
    let held = holder.rwlock(name).read().unwrap();
    let client = Client::open(&server.url()).unwrap();
    let writer = {
        let lock = client.rwlock(name);
        std::thread::spawn(move || lock.try_write_for(Duration::from_secs(60)).map(drop))
    };
    assert!(wait_until(Duration::from_secs(10), || server
        .info("clients", "blocked_clients")
        .as_deref()
        == Some("1")));
    let readers: Vec<_> = (0..16)
        .map(|_| {
            let lock = client.rwlock(name);
            std::thread::spawn(move || lock.try_read_for(Duration::from_secs(60)).map(drop))
        })
        .collect();
    let until = Instant::now() + FIRST_WAIT * 8;
    let mut most = 0;
    while Instant::now() < until {
        let blocked: u32 = server
            .info("clients", "blocked_clients")
            .unwrap()
            .parse()
            .unwrap();
        most = most.max(blocked);
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(most, 1, "connections blocked at once while 17 threads wait");
    drop(held);
    writer.join().unwrap().unwrap();
    for r in readers {
        r.join().unwrap().unwrap();
    }
}

/// A waiter behind a lock held for long: its waits that run out grow to the wait cap, so once
/// they have, it costs Redis a round and a wait every 2 s, and only one round in three renews
/// its announcement (a few commands a second, not the 45 of a round every 250 ms, nor the 4.5
/// of a round that renews it every time); it still gets the lock at once when the holder
/// releases.
#[test]
fn a_long_wait_costs_redis_a_handful_of_commands_a_second() {
    let server = RedisServer::start();
    let mut stats = Stats(server.conn());
    let name = "waiting:long";
    let holder = Client::open(&server.url()).unwrap();
    let guard = holder.mutex(name).lock().unwrap();
    let client = Client::open(&server.url()).unwrap();
    let mutex = client.mutex(name);
    let waiter = std::thread::spawn(move || {
        let guard = mutex.try_lock_for(Duration::from_secs(60)).unwrap();
        let at = Instant::now();
        guard.unlock().unwrap();
        at
    });
    // 250 + 500 + 1000 ms of waits, then waits of the cap.
    let cap = MutexOptions::default().wait_cap;
    std::thread::sleep(FIRST_WAIT * 7);
    // Three rounds and waits, one of them renewing the announcement; perhaps a renewal of
    // the holder's.
    let window = cap * 3;
    let (commands, _) = stats.over(window);
    let per_second = commands as f64 / window.as_secs_f64();
    eprintln!("a long wait: {per_second:.1} commands/s");
    assert!(per_second <= 4.0, "{commands} commands in {window:?}");
    let released = Instant::now();
    guard.unlock().unwrap();
    let at = waiter.join().unwrap();
    assert!(at > released, "the waiter got the lock before its release");
    eprintln!("taken {:?} after the release", at - released);
}

/// A thread parked behind its client's waiter still ends at once when its wake-up descriptor
/// becomes readable (its interrupt check then stops it), and the client's waiter waits on.
#[test]
fn a_parked_waiter_ends_when_its_wake_up_descriptor_becomes_readable() {
    use std::io::Write;
    use std::os::fd::AsFd;
    let server = RedisServer::start();
    let name = "waiting:wake";
    let holder = Client::open(&server.url()).unwrap();
    let guard = holder.mutex(name).lock().unwrap();
    let client = Client::open(&server.url()).unwrap();
    let seated = {
        let mutex = client.mutex(name);
        std::thread::spawn(move || mutex.try_lock_for(Duration::from_secs(30)).map(drop))
    };
    assert!(wait_until(Duration::from_secs(5), || server
        .info("clients", "blocked_clients")
        .as_deref()
        == Some("1")));
    let (reader, mut writer) = std::io::pipe().unwrap();
    let poked = Arc::new(AtomicBool::new(false));
    let flag = poked.clone();
    let poke = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        flag.store(true, Ordering::SeqCst);
        writer.write_all(b"!").unwrap();
        writer
    });
    let parked = client.mutex(name);
    let started = Instant::now();
    let mut interrupted = || poked.load(Ordering::SeqCst);
    let taken = redmutex::wake_on(reader.as_fd(), || {
        parked.lock_interruptible(None, &mut interrupted)
    })
    .unwrap();
    let took = started.elapsed();
    let _writer = poke.join().unwrap();
    match taken {
        Err(redmutex::TryLockError::Error(e)) => {
            assert_eq!(e.kind(), redmutex::ErrorKind::Interrupted, "{e}")
        }
        other => panic!("expected Interrupted, got {other:?}"),
    }
    assert!(took < Duration::from_secs(5), "parked for {took:?}");
    // Only one connection waited on Redis meanwhile, and the seated waiter still gets in.
    assert_eq!(
        server.info("clients", "blocked_clients").as_deref(),
        Some("1")
    );
    guard.unlock().unwrap();
    seated.join().unwrap().unwrap();
}

/// Waits until `n` connections are blocked on the server.
fn blocked(stats: &mut Stats, n: u64) {
    assert!(
        wait_until(Duration::from_secs(10), || stats.blocked() == n),
        "never {n} connections blocked (now {})",
        stats.blocked()
    );
}

/// A lock the holder keeps, and a wait of `client`'s for it that takes the client's
/// connection of its own for waits (the lane): the client's next wait on the server blocks
/// on the shared one (see `net/hub.rs`). One more connection blocked.
struct Lane {
    guard: redmutex::MutexGuard,
    waiter: std::thread::JoinHandle<()>,
}

impl Lane {
    fn take(holder: &Client, client: &Client, stats: &mut Stats) -> Lane {
        let name = "waiting:lane";
        let guard = holder.mutex(name).lock().unwrap();
        let before = stats.blocked();
        let mutex = client.mutex(name);
        let waiter = std::thread::spawn(move || {
            drop(mutex.try_lock_for(Duration::from_secs(30)).unwrap());
        });
        blocked(stats, before + 1);
        Lane { guard, waiter }
    }

    /// Releases the lock; the client's wait gets it.
    fn release(self) {
        self.guard.unlock().unwrap();
        self.waiter.join().unwrap();
    }
}

/// A waiter of another client, as a bare `BLPOP` on the wake-up list of `name` (5 s at most),
/// announced in its waiters' set; returns whether it got a wake-up. One more connection
/// blocked.
fn another_clients_waiter(
    server: &RedisServer,
    name: &str,
    stats: &mut Stats,
) -> std::thread::JoinHandle<bool> {
    let before = stats.blocked();
    let mut other = server.conn();
    let (secs, _): (u64, u64) = redis::cmd("TIME").query(&mut other).unwrap();
    let _: i64 = redis::cmd("ZADD")
        .arg(format!("{{{name}}}:waitq"))
        .arg((secs + 60) * 1000)
        .arg("another-client")
        .query(&mut other)
        .unwrap();
    let wake = format!("{{{name}}}:wake");
    let waiter = std::thread::spawn(move || {
        redis::cmd("BLPOP")
            .arg(wake)
            .arg(5)
            .query::<Option<(String, String)>>(&mut other)
            .unwrap()
            .is_some()
    });
    blocked(stats, before + 1);
    waiter
}

/// A release's wake-up that a client's shared waiting connection pops just after the call it
/// was for gave up (the client has yet to end that connection's `BLPOP`: here its
/// `CLIENT UNBLOCK` is held back) is passed on: another client's waiter, blocked behind it on
/// the same list, gets it, rather than waiting out its own wait while the lock lies free.
#[test]
fn a_wake_up_popped_for_a_call_that_gave_up_is_passed_on() {
    use redmutex_tests::proxy::{FaultProxy, Mode};
    let server = RedisServer::start();
    let proxy = FaultProxy::start(&server.addr());
    let mut stats = Stats(server.conn());
    let name = "waiting:pass-on";
    let holder = Client::open(&server.url()).unwrap();
    let guard = holder.mutex(name).lock().unwrap();
    // Client A, through the proxy.
    let a = Client::open(&proxy.url()).unwrap();
    let lane = Lane::take(&holder, &a, &mut stats);
    let gives_up = {
        let mutex = a.mutex(name);
        std::thread::spawn(move || mutex.try_lock_for(Duration::from_millis(800)).map(drop))
    };
    blocked(&mut stats, 2);
    let other = another_clients_waiter(&server, name, &mut stats);
    // A's call gives up; the end of its shared connection's `BLPOP` is held back.
    proxy.set_mode(Mode::DelayRequestsWith(b"UNBLOCK", Duration::from_secs(1)));
    let gave_up = gives_up.join().unwrap();
    assert!(
        matches!(gave_up, Err(redmutex::TryLockError::WouldBlock)),
        "{gave_up:?}"
    );
    // The release's one wake-up goes to the connection blocked first on the list: A's.
    guard.unlock().unwrap();
    assert!(
        other.join().unwrap(),
        "the wake-up A popped after its call gave up never reached the other waiter"
    );
    proxy.set_mode(Mode::Pass);
    lane.release();
}

/// A call interrupted right after a release woke it (its interrupt check says stop before its
/// round) passes the wake-up on: another client's waiter, blocked behind it, gets it.
#[test]
fn a_call_interrupted_after_its_wake_up_passes_it_on() {
    let server = RedisServer::start();
    let mut stats = Stats(server.conn());
    let name = "waiting:interrupted-pass-on";
    let holder = Client::open(&server.url()).unwrap();
    let guard = holder.mutex(name).lock().unwrap();
    let a = Client::open(&server.url()).unwrap();
    let lane = Lane::take(&holder, &a, &mut stats);
    let released = Arc::new(AtomicBool::new(false));
    let interrupted = {
        let mutex = a.mutex(name);
        let released = released.clone();
        std::thread::spawn(move || {
            let mut check = || released.load(Ordering::SeqCst);
            mutex.lock_interruptible(None, &mut check).map(drop)
        })
    };
    blocked(&mut stats, 2);
    let other = another_clients_waiter(&server, name, &mut stats);
    released.store(true, Ordering::SeqCst);
    guard.unlock().unwrap();
    match interrupted.join().unwrap() {
        Err(redmutex::TryLockError::Error(e)) => {
            assert_eq!(e.kind(), redmutex::ErrorKind::Interrupted, "{e}")
        }
        other => panic!("expected Interrupted, got {other:?}"),
    }
    assert!(
        other.join().unwrap(),
        "the wake-up of the interrupted call never reached the other waiter"
    );
    lane.release();
}
