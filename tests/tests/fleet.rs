//! Waiting at fleet scale: a client's threads waiting on many locks share one waiting
//! connection per server (beside the one wait that keeps a connection of its own), and each
//! still takes its lock when it is released.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use redmutex::{Client, MutexOptions};
use redmutex_tests::{Counters, RedisServer, wait_until};

fn blocked(server: &RedisServer) -> u64 {
    server
        .info("clients", "blocked_clients")
        .and_then(|b| b.parse().ok())
        .unwrap_or(0)
}

/// One thread per lock, each waiting (a minute at most) to take its lock once; `inside`
/// says, per lock, that a holder is in it.
fn waiters(
    client: &Client,
    names: &[String],
    inside: &Arc<Vec<AtomicBool>>,
    taken: &Arc<AtomicUsize>,
    started: &Arc<Barrier>,
) -> Vec<std::thread::JoinHandle<()>> {
    names
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let mutex = client.mutex(name);
            let (inside, taken, started) = (inside.clone(), taken.clone(), started.clone());
            std::thread::spawn(move || {
                started.wait();
                let guard = mutex.try_lock_for(Duration::from_secs(60)).unwrap();
                assert!(
                    !inside[i].swap(true, Ordering::SeqCst),
                    "two holders at once"
                );
                taken.fetch_add(1, Ordering::SeqCst);
                inside[i].store(false, Ordering::SeqCst);
                guard.unlock().unwrap();
            })
        })
        .collect()
}

/// A thousand threads of one client wait on a thousand held locks: while nothing is released
/// they keep at most two connections blocked on the server (the first wait's own, and the
/// shared one) and open none; after the releases every thread takes its lock exactly once.
#[test]
fn a_thousand_threads_waiting_on_a_thousand_locks_block_two_connections() {
    let server = RedisServer::start();
    let mut counters = Counters(server.conn());
    let n = 1000;
    let names: Vec<String> = (0..n).map(|i| format!("fleet:{i}")).collect();
    // Held for long: the holder's renewals (a thousand every ten seconds with the default
    // lease) would be counted with what the waiters cost.
    let holder = Client::open(&server.url()).unwrap();
    let guards: Vec<_> = names
        .iter()
        .map(|name| {
            let mutex = holder.mutex(name).ttl(Duration::from_secs(600));
            mutex.lock().unwrap()
        })
        .collect();
    let client = Client::open(&server.url()).unwrap();
    let inside = Arc::new((0..n).map(|_| AtomicBool::new(false)).collect::<Vec<_>>());
    let taken = Arc::new(AtomicUsize::new(0));
    let started = Arc::new(Barrier::new(n));
    let threads = waiters(&client, &names, &inside, &taken, &started);
    let began = Instant::now();
    // The first rounds, all at once, open connections; the waits that follow run out at
    // different times, so that the rounds after them come a few at a time. Measured once a
    // whole wait cap went by without a connection opened.
    let cap = MutexOptions::default().wait_cap;
    let mut last = counters.read().1;
    assert!(
        wait_until(Duration::from_secs(60), || {
            std::thread::sleep(cap);
            let now = counters.read().1;
            std::mem::replace(&mut last, now) == now && counters.blocked() >= 1
        }),
        "the waiters kept opening connections"
    );
    let mut most = 0;
    let (commands, opened) = {
        let until = Instant::now() + Duration::from_secs(3);
        let (c0, n0, _) = counters.read();
        let mut looks = 0;
        while Instant::now() < until {
            looks += 1;
            most = most.max(counters.blocked());
            std::thread::sleep(Duration::from_millis(20));
        }
        let (c1, n1, _) = counters.read();
        // Less the `INFO`s that measured them.
        (c1 - c0 - looks - 1, n1 - n0)
    };
    let (_, _, open) = counters.read();
    eprintln!(
        "{n} waiters on {n} locks: at most {most} blocked, {opened} opened, {open} open, \
         settled after {:?}",
        began.elapsed()
    );
    eprintln!(
        "{:.2} commands/s per waiting thread",
        commands as f64 / 3.0 / n as f64
    );
    assert!(
        most <= 2,
        "{most} connections blocked while {n} threads wait"
    );
    assert_eq!(opened, 0, "connections opened while {n} threads wait");

    for guard in guards {
        guard.unlock().unwrap();
    }
    let all_done = Instant::now() + Duration::from_secs(60);
    for t in threads {
        assert!(
            wait_until(all_done.saturating_duration_since(Instant::now()), || t
                .is_finished()),
            "a waiter never got its lock"
        );
        t.join().unwrap();
    }
    assert_eq!(taken.load(Ordering::SeqCst), n);
}

/// The client's waiting connections are killed (`CLIENT KILL`: the shared one and the first
/// wait's own) while two threads wait on two held locks: after the releases, each still
/// takes its lock within its wait cap.
#[test]
fn waiters_whose_waiting_connections_are_killed_still_get_their_locks() {
    let server = RedisServer::start();
    let holder = Client::open(&server.url()).unwrap();
    let names = ["fleet:killed:a", "fleet:killed:b"];
    let guards: Vec<_> = names
        .iter()
        .map(|name| holder.mutex(name).lock().unwrap())
        .collect();
    let client = Client::open(&server.url()).unwrap();
    let cap = MutexOptions::default().wait_cap;
    let threads: Vec<_> = names
        .iter()
        .map(|name| {
            let mutex = client.mutex(name);
            std::thread::spawn(move || {
                let guard = mutex.try_lock_for(Duration::from_secs(60)).unwrap();
                let at = Instant::now();
                guard.unlock().unwrap();
                at
            })
        })
        .collect();
    assert!(wait_until(Duration::from_secs(10), || blocked(&server) == 2));
    let mut admin = server.conn();
    let list: String = redis::cmd("CLIENT").arg("LIST").query(&mut admin).unwrap();
    let mut killed = 0;
    for line in list.lines().filter(|l| l.contains("cmd=blpop")) {
        let id = line.split(' ').find_map(|f| f.strip_prefix("id=")).unwrap();
        let _: i64 = redis::cmd("CLIENT")
            .arg("KILL")
            .arg("ID")
            .arg(id)
            .query(&mut admin)
            .unwrap();
        killed += 1;
    }
    assert_eq!(killed, 2, "two blocked connections: {list}");
    let released = Instant::now();
    drop(guards);
    for t in threads {
        let at = t.join().unwrap();
        assert!(
            at - released <= cap + Duration::from_secs(1),
            "a waiter took {:?} after the release",
            at - released
        );
    }
}
