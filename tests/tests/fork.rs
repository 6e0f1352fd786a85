//! A child forked while other threads of the parent lock and unlock on the same client (its
//! own test binary, so that no other test's threads are running at the fork).
//!
//! At the instant of a fork another thread may hold the client's connection pool or renew
//! queue, or be parked in a lock's slow path. The child has no such thread: whatever it waits
//! for must never depend on one.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use redmutex::Client;
use redmutex_tests::RedisServer;

#[test]
fn a_child_forked_while_other_threads_lock_takes_its_own_lock_in_time() {
    let server = RedisServer::start();
    let client = Client::open(&server.url()).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let busy: Vec<_> = (0..2)
        .map(|i| {
            let (client, stop) = (client.clone(), Arc::clone(&stop));
            thread::spawn(move || {
                let mutex = client.mutex(format!("fork:busy:{i}"));
                // Only the load matters here: a slow round on a busy machine may fail.
                while !stop.load(Ordering::Relaxed) {
                    if let Ok(guard) = mutex.try_lock() {
                        let _ = guard.unlock();
                    }
                }
            })
        })
        .collect();
    thread::sleep(Duration::from_millis(50));

    // Before children stopped waiting for their parent's threads, about 1 fork in 100 left a
    // child stuck in a lock (seen with gdb: the pool's lock in Endpoint::take, the renew
    // queue's in Renewer::ensure_started), or crashed in parking_lot's table of parked threads.
    let started = Instant::now();
    let (mut forks, mut stuck, mut failed) = (0, 0, 0);
    while forks < 400 && started.elapsed() < Duration::from_secs(10) {
        forks += 1;
        // SAFETY: the child only locks and unlocks through the inherited client, then leaves
        // with _exit (no exit handlers, no unwinding into the test harness).
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            let name = format!("fork:child:{forks}");
            let ok = match client.mutex(name).try_lock() {
                Ok(guard) => guard.unlock().is_ok(),
                Err(_) => false,
            };
            unsafe { libc::_exit(if ok { 0 } else { 1 }) }
        }
        match wait_for_exit(pid, Duration::from_secs(5)) {
            Some(0) => {}
            Some(_) => failed += 1,
            None => stuck += 1,
        }
    }
    stop.store(true, Ordering::Relaxed);
    for t in busy {
        t.join().unwrap();
    }
    assert_eq!(
        (stuck, failed),
        (0, 0),
        "of {forks} children, {stuck} were stuck for 5 s and {failed} failed or crashed"
    );
    assert!(forks >= 50, "only {forks} forks in 10 s");
}

/// A token's random part comes from a buffer of OS random bytes that each process fills for
/// itself: a child forked after its parent drew from the buffer never draws the bytes its
/// parent draws next (with one buffer for both, the two next tokens would be the same).
#[test]
fn a_forked_childs_tokens_are_not_its_parents() {
    let server = RedisServer::start();
    let client = Client::open(&server.url()).unwrap();
    client
        .mutex("fork:tokens:warm")
        .try_lock()
        .unwrap()
        .unlock()
        .unwrap();
    // SAFETY: the child only takes a lock through the inherited client, then leaves with
    // _exit (no exit handlers, no unwinding into the test harness).
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        // Held until its TTL ends: the parent reads the child's token off the server.
        let ok = client
            .mutex("fork:tokens:child")
            .ttl(Duration::from_secs(60))
            .auto_renew(false)
            .try_lock()
            .map(std::mem::forget)
            .is_ok();
        unsafe { libc::_exit(if ok { 0 } else { 1 }) }
    }
    let parent = client.mutex("fork:tokens:parent").try_lock().unwrap();
    assert_eq!(wait_for_exit(pid, Duration::from_secs(5)), Some(0));
    let child: Vec<u8> = redis::cmd("GET")
        .arg("fork:tokens:child")
        .query(&mut server.conn())
        .unwrap();
    let random = |token: &[u8]| token[token.len() - 32..].to_vec();
    assert_ne!(
        random(&child),
        random(parent.token()),
        "the child's token repeats its parent's random bytes"
    );
}

/// A child forked while a thread of its parent waits for a lock (that thread is its
/// client's one waiter on Redis for it, and would let the client's other waiting threads
/// park behind it) waits on its own: it gets the lock soon after it is free, not at its
/// deadline behind a waiter it does not have.
#[test]
fn a_forked_child_waits_on_its_own_not_behind_its_parents_waiter() {
    let server = RedisServer::start();
    let name = "fork:room";
    // A foreign holder whose key ends in 1 s, with no release signal.
    let _: () = redis::cmd("SET")
        .arg(name)
        .arg("foreign")
        .arg("PX")
        .arg(1000)
        .query(&mut server.conn())
        .unwrap();
    let client = Client::open(&server.url()).unwrap();
    let mutex = client.mutex(name);
    let waiter = thread::spawn(move || {
        mutex
            .try_lock_for(Duration::from_secs(10))
            .map(|g| g.unlock().map(drop))
    });
    let blocked = || {
        let info: String = redis::cmd("INFO")
            .arg("clients")
            .query(&mut server.conn())
            .unwrap();
        info.contains("blocked_clients:1")
    };
    assert!(redmutex_tests::wait_until(Duration::from_secs(5), blocked));
    // SAFETY: the child only takes a lock through the inherited client, then leaves with
    // _exit (no exit handlers, no unwinding into the test harness).
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let ok = client
            .mutex(name)
            .try_lock_for(Duration::from_secs(8))
            .map(|g| g.unlock())
            .is_ok();
        unsafe { libc::_exit(if ok { 0 } else { 1 }) }
    }
    assert_eq!(
        wait_for_exit(pid, Duration::from_secs(5)),
        Some(0),
        "the child waited behind its parent's waiter"
    );
    waiter.join().unwrap().unwrap().unwrap();
}

/// The child's exit code (128 + the signal if a signal ended it), or `None` (after killing it)
/// when it is still running after `bound`.
fn wait_for_exit(pid: libc::pid_t, bound: Duration) -> Option<i32> {
    let deadline = Instant::now() + bound;
    let mut status = 0;
    loop {
        // SAFETY: waitpid on our own child, with a valid out-pointer.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if r == pid {
            return Some(if libc::WIFSIGNALED(status) {
                128 + libc::WTERMSIG(status)
            } else {
                libc::WEXITSTATUS(status)
            });
        }
        if Instant::now() >= deadline {
            // SAFETY: as above; the child is ours and has not been reaped.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &mut status, 0);
            }
            return None;
        }
        thread::sleep(Duration::from_millis(1));
    }
}
