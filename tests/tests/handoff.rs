//! Fast hand-off: waiters learn of a release within about a round trip, fairly, and a lost
//! wake-up costs at most the wait cap.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use redis::Commands;
use redmutex::{Client, MutexOptions};
use redmutex_tests::{RedisServer, wait_until};

const WORKER: &str = env!("CARGO_BIN_EXE_worker");

/// Whether some connection of `server` is blocked in BLPOP right now.
fn someone_blocked(server: &RedisServer) -> bool {
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query(&mut server.conn())
        .unwrap();
    list.lines().any(|l| l.contains("cmd=blpop"))
}

#[test]
fn a_blocked_waiter_gets_the_lock_within_50ms_of_the_release() {
    let server = RedisServer::start();
    let holder = Client::open(&server.url()).unwrap().mutex("handoff:lock");
    let waiter = Client::open(&server.url()).unwrap().mutex("handoff:lock");
    let mut worst = Duration::ZERO;
    for trial in 0..100 {
        let guard = holder.lock().unwrap();
        let w = waiter.clone();
        let t = std::thread::spawn(move || {
            let g = w.lock().unwrap();
            let at = Instant::now();
            g.unlock().unwrap();
            at
        });
        assert!(wait_until(Duration::from_secs(5), || someone_blocked(
            &server
        )));
        let released = Instant::now();
        guard.unlock().unwrap();
        let took = t.join().unwrap() - released;
        worst = worst.max(took);
        assert!(took <= Duration::from_millis(50), "trial {trial}: {took:?}");
    }
    eprintln!("worst hand-off of 100: {worst:?}");
}

#[test]
fn four_looping_processes_each_get_a_fair_share() {
    let server = RedisServer::start();
    let url = server.url();
    let procs: Vec<_> = (0..4)
        .map(|_| {
            Command::new(WORKER)
                .args(["loop", &url, "fair:lock", "fair:counter", "2"])
                .stdout(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let counts: Vec<u64> = procs
        .into_iter()
        .map(|p| {
            let out = p.wait_with_output().unwrap();
            assert!(out.status.success());
            let text = String::from_utf8(out.stdout).unwrap();
            text.trim()
                .trim_start_matches("done sections=")
                .parse()
                .unwrap()
        })
        .collect();
    let total: u64 = counts.iter().sum();
    let counter: u64 = server.conn().get("fair:counter").unwrap();
    assert_eq!(counter, total, "lost updates");
    assert!(total >= 40, "too little contention to judge: {counts:?}");
    for c in &counts {
        assert!(*c * 10 >= total, "starved: {counts:?}");
    }
}

/// A worker process waiting in `lock()`; killed when dropped.
struct Waiter {
    child: Child,
    locked: mpsc::Receiver<Instant>,
}

impl Waiter {
    fn start(url: &str, key: &str) -> Waiter {
        let mut child = Command::new(WORKER)
            .args(["hold", url, key, "5000"])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let out = BufReader::new(child.stdout.take().unwrap());
        let (tx, locked) = mpsc::channel();
        std::thread::spawn(move || {
            for line in out.lines().map_while(Result::ok) {
                if line.starts_with("locked") {
                    let _ = tx.send(Instant::now());
                }
            }
        });
        Waiter { child, locked }
    }

    fn signal(&self, sig: libc::c_int) {
        // SAFETY: kill(2) on our own child's pid.
        assert_eq!(
            unsafe { libc::kill(self.child.id() as libc::pid_t, sig) },
            0
        );
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        self.signal(libc::SIGCONT);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn cap() -> Duration {
    MutexOptions::default().wait_cap
}

/// Slack for process scheduling on a loaded machine, on top of the bound under test.
const SLACK: Duration = Duration::from_millis(150);

#[test]
fn a_waiter_paused_across_the_release_still_gets_the_lock_within_the_cap() {
    let server = RedisServer::start();
    let client = Client::open(&server.url()).unwrap();
    let guard = client.mutex("paused:lock").lock().unwrap();
    let waiter = Waiter::start(&server.url(), "paused:lock");
    assert!(wait_until(Duration::from_secs(5), || someone_blocked(
        &server
    )));
    waiter.signal(libc::SIGSTOP);
    guard.unlock().unwrap();
    std::thread::sleep(Duration::from_millis(300)); // the pause outlives the signal's expiry
    let resumed = Instant::now();
    waiter.signal(libc::SIGCONT);
    let at = waiter.locked.recv_timeout(Duration::from_secs(5)).unwrap();
    assert!(at - resumed <= cap() + SLACK, "{:?}", at - resumed);
}

#[test]
fn a_release_without_a_signal_costs_at_most_the_cap() {
    let server = RedisServer::start();
    let mut conn = server.conn();
    // A foreign holder that never signals: plain SET NX PX, then plain DEL.
    let _: () = redis::cmd("SET")
        .arg("nosignal:lock")
        .arg("foreign")
        .arg("NX")
        .arg("PX")
        .arg(30_000)
        .query(&mut conn)
        .unwrap();
    let waiter = Waiter::start(&server.url(), "nosignal:lock");
    assert!(wait_until(Duration::from_secs(5), || someone_blocked(
        &server
    )));
    let _: () = conn.del("nosignal:lock").unwrap();
    let freed = Instant::now();
    let at = waiter.locked.recv_timeout(Duration::from_secs(5)).unwrap();
    assert!(at - freed <= cap() + SLACK, "{:?}", at - freed);
}

/// An operator (or a proxy, or Redis's `timeout`) kills the connection a waiter is blocked on
/// (`CLIENT KILL`): the waiter opens another and waits again, and still gets the lock after
/// the release, within its wait cap. Its request behind the block is undone or never ran:
/// nobody else holds the lock meanwhile.
#[test]
fn a_waiter_whose_blocked_connection_is_killed_still_gets_the_lock() {
    let server = RedisServer::start();
    let client = Client::open(&server.url()).unwrap();
    let guard = client.mutex("killed:lock").lock().unwrap();
    let waiter = Waiter::start(&server.url(), "killed:lock");
    assert!(wait_until(Duration::from_secs(5), || someone_blocked(
        &server
    )));
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query(&mut server.conn())
        .unwrap();
    let blocked = list
        .lines()
        .find(|l| l.contains("cmd=blpop"))
        .and_then(|l| l.split(' ').find_map(|f| f.strip_prefix("id=")))
        .expect("the blocked connection's id")
        .to_owned();
    let killed: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("ID")
        .arg(&blocked)
        .query(&mut server.conn())
        .unwrap();
    assert_eq!(killed, 1, "the blocked connection was not killed");
    // The waiter waits again on a new connection; the holder still holds.
    assert!(wait_until(Duration::from_secs(5), || someone_blocked(
        &server
    )));
    assert!(guard.is_held());
    guard.unlock().unwrap();
    let released = Instant::now();
    let at = waiter.locked.recv_timeout(Duration::from_secs(5)).unwrap();
    assert!(at - released <= cap() + SLACK, "{:?}", at - released);
}

#[test]
fn a_waiter_survives_its_node_restarting() {
    let mut server = RedisServer::start();
    let client = Client::open(&server.url()).unwrap();
    let guard = client.mutex("restart:lock").lock().unwrap();
    let waiter = Waiter::start(&server.url(), "restart:lock");
    assert!(wait_until(Duration::from_secs(5), || someone_blocked(
        &server
    )));
    server.restart();
    let back = Instant::now();
    let at = waiter.locked.recv_timeout(Duration::from_secs(5)).unwrap();
    assert!(at - back <= cap() + SLACK, "{:?}", at - back);
    drop(guard);
}

/// With one node, a waiter pipelines its next attempt behind its BLPOP, so Redis runs it the
/// moment the wait ends. When the waiter's own read deadline ends the wait first (here: the
/// server is frozen past it), that attempt still runs once the server wakes and may take the
/// lock for a token nobody holds. The undo queued behind it must release it at once: without
/// it, the lock would sit with that ghost token for its whole TTL (20 s here).
#[test]
fn an_attempt_queued_behind_a_cut_wait_leaves_no_ghost_holder() {
    let server = RedisServer::start();
    let mut conn = server.conn();
    // A holder that vanishes without releasing: the waiter blocks for the rest of its lease.
    let _: () = redis::cmd("SET")
        .arg("ghost:lock")
        .arg("foreign")
        .arg("NX")
        .arg("PX")
        .arg(300)
        .query(&mut conn)
        .unwrap();
    let mutex = Client::open(&server.url())
        .unwrap()
        .mutex("ghost:lock")
        .ttl(Duration::from_secs(20));
    let waiter = std::thread::spawn(move || {
        let guard = mutex.try_lock_for(Duration::from_secs(5));
        (Instant::now(), guard.map(|g| g.unlock()))
    });
    assert!(wait_until(Duration::from_secs(5), || someone_blocked(
        &server
    )));
    server.pause();
    // Frozen past the waiter's read deadline (at most the 250 ms cap) and the foreign lease.
    std::thread::sleep(Duration::from_millis(600));
    let resumed = Instant::now();
    server.resume();
    let (at, result) = waiter.join().unwrap();
    assert!(matches!(result, Ok(Ok(_))), "{result:?}");
    assert!(at - resumed <= cap() + SLACK, "{:?}", at - resumed);
}

/// A wait for a release ends the moment this thread's wake-up descriptor becomes readable
/// (`redmutex::wake_on`), not at its wait cap (10 s here): the interrupt check then runs and
/// ends the call with `Interrupted`. The holder still holds, and the waiter took nothing.
#[test]
fn a_wait_ends_when_its_wake_up_descriptor_becomes_readable() {
    use std::io::Write;
    use std::os::fd::AsFd;
    let server = RedisServer::start();
    let client = Client::open(&server.url()).unwrap();
    let guard = client.mutex("wake:lock").lock().unwrap();
    let waiter = Client::open(&server.url())
        .unwrap()
        .mutex("wake:lock")
        .options(MutexOptions::default().with_wait_cap(Duration::from_secs(10)));
    let (reader, mut writer) = std::io::pipe().unwrap();
    let poked = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = poked.clone();
    let poke = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        flag.store(true, std::sync::atomic::Ordering::SeqCst);
        writer.write_all(b"!").unwrap();
        writer
    });
    let started = Instant::now();
    let mut interrupted = || poked.load(std::sync::atomic::Ordering::SeqCst);
    let taken = redmutex::wake_on(reader.as_fd(), || {
        waiter.lock_interruptible(None, &mut interrupted)
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
    assert!(
        took < Duration::from_secs(5),
        "the wait ran {took:?}, to its cap"
    );
    assert!(guard.is_held());
    guard.unlock().unwrap();
    // The waiter's connections are in step: the late reply of its wait was skipped, not read
    // as the answer to a later request.
    for _ in 0..3 {
        let g = waiter.try_lock_for(Duration::from_secs(2)).unwrap();
        assert!(g.is_held());
        g.unlock().unwrap();
    }
}

/// Under a wake-up descriptor that never becomes readable, waits end as before: at their cap
/// or their holder's expiry, their late replies skipped, and the lock is taken once the
/// foreign holder's key (which never signals) expires.
#[test]
fn waits_under_a_quiet_wake_up_descriptor_end_as_before() {
    use std::os::fd::AsFd;
    let server = RedisServer::start();
    let mut conn = server.conn();
    let _: () = redis::cmd("SET")
        .arg("quiet:lock")
        .arg("foreign")
        .arg("PX")
        .arg(700)
        .query(&mut conn)
        .unwrap();
    let waiter = Client::open(&server.url()).unwrap().mutex("quiet:lock");
    let (reader, _writer) = std::io::pipe().unwrap();
    let taken = redmutex::wake_on(reader.as_fd(), || {
        waiter.try_lock_for(Duration::from_secs(5))
    })
    .unwrap();
    let guard = taken.expect("the lock, once the foreign key expired");
    assert!(guard.is_held());
    guard.unlock().unwrap();
}
