//! The read-write lock on real redis-servers: readers overlap, a writer (or a plain mutex,
//! or any `SET NX` holder) excludes them, writer preference, fences, and several masters.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::{Duration, Instant};

use redis::Commands;
use redmutex::{Client, ErrorKind, TryLockError};
use redmutex_tests::{RedisServer, RedisServers};

fn would_block<T: std::fmt::Debug>(r: Result<T, TryLockError>) -> bool {
    matches!(r, Err(TryLockError::WouldBlock))
}

#[test]
fn four_readers_of_200ms_overlap() {
    let server = RedisServer::start();
    let started = Instant::now();
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let lock = Client::open(&server.url()).unwrap().rwlock("cache:rw");
            std::thread::spawn(move || {
                let read = lock.read().unwrap();
                std::thread::sleep(Duration::from_millis(200));
                read.unlock().unwrap();
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let took = started.elapsed();
    assert!(took < Duration::from_millis(400), "took {took:?}");
}

#[test]
fn writers_mutexes_and_set_nx_exclude_readers_and_back() {
    let server = RedisServer::start();
    let client = Client::open(&server.url()).unwrap();
    let lock = client.rwlock("doc:rw");
    let mutex = client.mutex("doc:rw");

    let write = lock.write().unwrap();
    assert!(would_block(lock.try_read()));
    assert!(would_block(lock.try_write()));
    assert!(would_block(mutex.try_lock()));
    write.unlock().unwrap();

    let held = mutex.lock().unwrap();
    assert!(would_block(lock.try_read()));
    assert!(would_block(lock.try_write()));
    held.unlock().unwrap();

    let r1 = lock.read().unwrap();
    let r2 = lock.try_read().unwrap();
    assert!(would_block(lock.try_write()));
    assert!(would_block(mutex.try_lock()));
    assert!(!mutex.is_locked().unwrap());
    let status = lock.status().unwrap();
    assert_eq!(status.readers.len(), 2);
    assert!(status.writer.holder.is_none());
    drop(r1);
    assert!(would_block(mutex.try_lock()));
    r2.unlock().unwrap();
    mutex.try_lock().unwrap().unlock().unwrap();

    // A foreign `SET NX` holder is a writer too.
    let set: bool = server.conn().set_nx("doc:rw", "someone-else").unwrap();
    assert!(set);
    assert!(would_block(lock.try_read()));
    let status = lock.status().unwrap();
    assert_eq!(status.writer.holder.as_deref(), Some(&b"someone-else"[..]));
    let _: () = server.conn().del("doc:rw").unwrap();
    lock.try_read().unwrap().unlock().unwrap();
}

#[test]
fn a_waiting_reader_gets_in_soon_after_the_writer_leaves() {
    let server = RedisServer::start();
    let lock = Client::open(&server.url()).unwrap().rwlock("soon:rw");
    let write = lock.write().unwrap();
    let readers: Vec<_> = (0..3)
        .map(|_| {
            let lock = Client::open(&server.url()).unwrap().rwlock("soon:rw");
            std::thread::spawn(move || {
                let read = lock.try_read_for(Duration::from_secs(5)).unwrap();
                let at = Instant::now();
                std::thread::sleep(Duration::from_millis(50));
                drop(read);
                at
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let released = Instant::now();
    write.unlock().unwrap();
    for r in readers {
        let took = r.join().unwrap() - released;
        assert!(took < Duration::from_millis(200), "a reader took {took:?}");
    }
}

#[test]
fn a_writer_behind_a_stream_of_readers_gets_in_within_the_longest_hold() {
    let server = RedisServer::start();
    let hold = Duration::from_millis(100);
    let stop = Arc::new(AtomicBool::new(false));
    // Read intervals and the write interval, to check that they never overlap.
    let reads = Arc::new(StdMutex::new(Vec::<(Instant, Instant)>::new()));
    let readers: Vec<_> = (0..4)
        .map(|i| {
            let lock = Client::open(&server.url()).unwrap().rwlock("stream:rw");
            let (stop, reads) = (stop.clone(), reads.clone());
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(25 * i));
                while !stop.load(Ordering::SeqCst) {
                    let Ok(read) = lock.try_read_for(Duration::from_secs(2)) else {
                        continue;
                    };
                    let from = Instant::now();
                    std::thread::sleep(hold);
                    let to = Instant::now();
                    read.unlock().unwrap();
                    reads.lock().unwrap().push((from, to));
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let writer = Client::open(&server.url()).unwrap().rwlock("stream:rw");
    let asked = Instant::now();
    let write = writer.try_write_for(Duration::from_secs(5)).unwrap();
    let got = Instant::now();
    let waited = got - asked;
    std::thread::sleep(Duration::from_millis(50));
    let done = Instant::now();
    write.unlock().unwrap();
    stop.store(true, Ordering::SeqCst);
    for r in readers {
        r.join().unwrap();
    }
    assert!(
        waited < hold + Duration::from_millis(100),
        "the writer waited {waited:?} behind {hold:?} reads"
    );
    let reads = reads.lock().unwrap();
    assert!(
        reads.len() > 8,
        "the readers did not stream ({})",
        reads.len()
    );
    for (from, to) in reads.iter() {
        assert!(*to <= got || *from >= done, "a read overlapped the write");
    }
}

#[test]
fn fences_of_reads_and_writes() {
    let server = RedisServer::start();
    let client = Client::open(&server.url()).unwrap();
    let lock = client.rwlock("fence:rw");
    assert_eq!(lock.read().unwrap().fence(), 0);
    let mut last = 0;
    for _ in 0..5 {
        let w = lock.write().unwrap();
        assert!(w.fence() > last);
        last = w.fence();
        drop(w);
        let r1 = lock.read().unwrap();
        let r2 = lock.read().unwrap();
        assert_eq!((r1.fence(), r2.fence()), (last, last));
        assert_eq!(lock.status().unwrap().writer.fence, last);
    }
    let m = client.mutex("fence:rw").lock().unwrap();
    assert!(m.fence() > last);
}

#[test]
fn a_reader_that_stopped_renewing_lets_the_writer_in_after_its_ttl() {
    let server = RedisServer::start();
    let client = Client::open(&server.url()).unwrap();
    let ttl = Duration::from_millis(300);
    let lock = client.rwlock("dead:rw").ttl(ttl).auto_renew(false);
    let taken = Instant::now();
    std::mem::forget(lock.read().unwrap());
    let writer = Client::open(&server.url()).unwrap().rwlock("dead:rw");
    assert!(would_block(writer.try_write()));
    let write = writer.try_write_for(Duration::from_secs(3)).unwrap();
    let after = taken.elapsed();
    // Not before the reader's validity ran out (see the semaphore's test of the same).
    let least = ttl - redmutex::drift(ttl);
    assert!(
        after >= least && after <= ttl + Duration::from_millis(300),
        "{after:?}"
    );
    assert!(write.is_held());
    // The renewed read hold survives many TTLs.
    drop(write);
    let renewed = client.rwlock("renew:rw").ttl(Duration::from_millis(150));
    let read = renewed.read().unwrap();
    std::thread::sleep(Duration::from_millis(500));
    assert!(read.is_held() && read.renewals() >= 2);
    assert!(would_block(renewed.try_write()));
    read.extend(Duration::from_secs(2)).unwrap();
    read.unlock().unwrap();
    renewed.try_write().unwrap().unlock().unwrap();
}

#[test]
fn bad_names_are_refused_before_anything_is_sent() {
    let server = RedisServer::start();
    let client = Client::open(&server.url()).unwrap();
    let long = vec![b'x'; redmutex::MAX_NAME_LEN + 1];
    for name in [&long[..], b""] {
        let lock = client.rwlock(name);
        assert_eq!(lock.read().unwrap_err().kind(), ErrorKind::InvalidArgument);
        assert_eq!(lock.write().unwrap_err().kind(), ErrorKind::InvalidArgument);
        assert_eq!(
            lock.status().unwrap_err().kind(),
            ErrorKind::InvalidArgument
        );
    }
    let n: i64 = redis::cmd("DBSIZE").query(&mut server.conn()).unwrap();
    assert_eq!(n, 0);
}

/// Over three independent masters, a read and a write each need a majority; two majorities
/// share a node, whose script refuses the later one.
#[test]
fn three_masters_keep_readers_and_writers_apart() {
    let servers = RedisServers::start(3);
    let client = || Client::builder().nodes(servers.urls()).build().unwrap();
    let lock = client().rwlock("redlock:rw");
    let other = client().rwlock("redlock:rw");
    let r1 = lock.read().unwrap();
    let r2 = other.try_read().unwrap();
    assert!(would_block(other.try_write()));
    assert!(would_block(client().mutex("redlock:rw").try_lock()));
    drop((r1, r2));
    let w = other.write().unwrap();
    assert!(would_block(lock.try_read()));
    let fence = w.fence();
    drop(w);
    // At least the write's fence: a node whose late grant the write did not wait for may
    // have counted on (to its own time in µs).
    assert!(lock.read().unwrap().fence() >= fence);
    // A read hold on only one node (a minority) does not keep the writer out.
    let lone = Client::open(&servers.urls()[0])
        .unwrap()
        .rwlock("redlock:rw");
    let _minority = lone.read().unwrap();
    let w = other.try_write().unwrap();
    assert!(w.fence() > fence);
}

#[test]
fn a_killed_reader_process_lets_the_writer_in_within_its_ttl() {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    let server = RedisServer::start();
    let ttl = Duration::from_millis(500);
    let mut reader = Command::new(env!("CARGO_BIN_EXE_worker"))
        .args([
            "read",
            &server.url(),
            "kill:rw",
            &ttl.as_millis().to_string(),
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(reader.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.starts_with("locked "), "worker said {line:?}");
    let lock = Client::open(&server.url()).unwrap().rwlock("kill:rw");
    std::thread::sleep(ttl * 3);
    assert!(would_block(lock.try_write()));
    lock.try_read().unwrap().unlock().unwrap();
    reader.kill().unwrap();
    reader.wait().unwrap();
    let killed = Instant::now();
    let write = lock.try_write_for(Duration::from_secs(5)).unwrap();
    let back = killed.elapsed();
    assert!(
        back <= ttl + Duration::from_millis(150),
        "in after {back:?}"
    );
    write.unlock().unwrap();
}

/// Six processes taking read and write holds, one killed and one stopped for longer than the
/// TTL mid-run: no write hold overlaps any other hold, where a hold ends at its release or at
/// the last validity promised to its holder, whichever is first; write fences are unique, no
/// read's fence is ahead of the writes begun before it, and reads do overlap.
#[test]
fn six_processes_killed_and_stopped_never_overlap_a_write() {
    use std::collections::HashMap;
    let server = RedisServer::start();
    let outputs = redmutex_tests::workers::lines_under_kill_and_stop(
        env!("CARGO_BIN_EXE_worker"),
        &["rw", &server.url(), "torture:rw", "300"],
        6,
    );
    // (start, end, is a write, fence) of every hold.
    let mut holds: Vec<(i64, i64, bool, u64)> = Vec::new();
    for lines in outputs {
        let mut open: HashMap<u64, (i64, i64, Option<i64>, bool, u64)> = HashMap::new();
        for line in lines {
            let f: Vec<&str> = line.split(' ').collect();
            let seq: u64 = f[1].parse().unwrap();
            let t: i64 = f[3].parse().unwrap();
            match f[0] {
                "acquire" => {
                    let fence = f[4].parse().unwrap();
                    open.insert(seq, (t, f[5].parse().unwrap(), None, f[2] == "w", fence));
                }
                "renew" => {
                    let h = open.get_mut(&seq).unwrap();
                    h.1 = h.1.max(f[4].parse().unwrap());
                }
                "release" => open.get_mut(&seq).unwrap().2 = Some(t),
                other => panic!("unknown line {other}"),
            }
        }
        for (start, valid, released, write, fence) in open.into_values() {
            holds.push((
                start,
                released.map_or(valid, |r| r.min(valid)),
                write,
                fence,
            ));
        }
    }
    let writes: Vec<_> = holds.iter().filter(|h| h.2).collect();
    let reads = holds.len() - writes.len();
    assert!(
        writes.len() > 10 && reads > 30,
        "{} writes, {reads} reads",
        writes.len()
    );
    for w in &writes {
        for h in &holds {
            if std::ptr::eq(*w, h) {
                continue;
            }
            assert!(
                h.1 <= w.0 || h.0 >= w.1,
                "a write hold {w:?} overlapped {h:?}"
            );
        }
    }
    let mut fences: Vec<u64> = writes.iter().map(|w| w.3).collect();
    let n = fences.len();
    fences.sort_unstable();
    fences.dedup();
    assert_eq!(fences.len(), n, "a write fence was handed out twice");
    let mut shared = 0;
    for r in holds.iter().filter(|h| !h.2) {
        // A read carries the fence of the last write before it: every write that begins
        // after the read ended has a larger one. (A write whose holder was killed or stopped
        // before it could log its grant may be the one a read carries: it is in no history,
        // so a read's fence is not compared with the writes before it.)
        let later = writes.iter().filter(|w| w.0 >= r.1).map(|w| w.3).min();
        assert!(
            later.is_none_or(|l| r.3 < l),
            "read fence {} not below a later write's {later:?}",
            r.3
        );
        shared += holds
            .iter()
            .filter(|h| !h.2 && h.0 < r.1 && r.0 < h.1)
            .count()
            - 1;
    }
    assert!(shared > 0, "no two reads ever overlapped");
}

/// A write `try_lock` without fencing asks with plain commands whose `SET` goes in before its
/// `EXISTS` looks for read holds: against a live read hold it is refused and takes its `SET`
/// back at once. The lock key is never left behind: the reader keeps renewing, and more
/// readers get in. A fenced one (the acquire script) is held to the same.
#[test]
fn a_write_try_lock_refused_by_a_reader_leaves_no_lock_behind() {
    let server = RedisServer::start();
    let client = Client::open(&server.url()).unwrap();
    let mut conn = server.conn();
    for fencing in [false, true] {
        let name = format!("undo:rw:{fencing}");
        let lock = client
            .rwlock(&name)
            .ttl(Duration::from_millis(200))
            .fencing(fencing);
        let mutex = client.mutex(&name).fencing(fencing);
        let read = lock.read().unwrap();
        for _ in 0..10 {
            assert!(would_block(lock.try_write()));
            assert!(would_block(mutex.try_lock()));
            let key: Option<Vec<u8>> = conn.get(&name).unwrap();
            assert_eq!(key, None, "a refused write try_lock left its SET");
            lock.try_read().unwrap().unlock().unwrap();
        }
        std::thread::sleep(Duration::from_millis(300));
        assert!(read.is_held() && read.renewals() >= 1);
        read.unlock().unwrap();
        mutex.try_lock().unwrap().unlock().unwrap();
    }
}

/// The read holds' key must end with the last live hold: a write `try_lock` reads it with
/// `EXISTS`. Here a long hold is released while a shorter one is left whose holder died (in
/// another process: its member stays until it ends): once that hold's TTL has passed, the
/// write `try_lock` gets in, not only when the released hold would have ended.
#[test]
fn a_released_longer_read_hold_leaves_the_key_to_the_dead_shorter_one() {
    let server = RedisServer::start();
    let client = Client::open(&server.url()).unwrap();
    let long = client.rwlock("left:rw").ttl(Duration::from_secs(20));
    let held = long.read().unwrap();
    // The dead holder's read hold, as its acquire stored it: its token, ending in 300 ms
    // (server time).
    let mut conn = server.conn();
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query(&mut conn).unwrap();
    let ttl = Duration::from_millis(300);
    let ends = secs * 1000 + micros / 1000 + ttl.as_millis() as u64;
    let taken = Instant::now();
    let _: () = conn.zadd("{left:rw}:readers", "dead:1:00ff", ends).unwrap();
    held.unlock().unwrap();
    // Without fencing, the write try_lock asks with plain commands: its `EXISTS` reads the key.
    let writer = Client::open(&server.url())
        .unwrap()
        .rwlock("left:rw")
        .fencing(false);
    assert!(would_block(writer.try_write()));
    let mut write = None;
    let got_in = redmutex_tests::wait_until(Duration::from_secs(3), || {
        write = writer.try_write().ok();
        write.is_some()
    });
    let after = taken.elapsed();
    assert!(got_in, "the write try_lock was refused for {after:?}");
    assert!(
        after >= ttl - Duration::from_millis(20) && after <= ttl + Duration::from_millis(300),
        "{after:?}"
    );
    write.unwrap().unlock().unwrap();
}

/// How many `RPUSH`es the server has run, scripts' included (`INFO commandstats`): a wake-up
/// signal is one.
fn pushes(server: &RedisServer) -> u64 {
    server
        .info("commandstats", "cmdstat_rpush")
        .and_then(|s| s.strip_prefix("calls=")?.split(',').next()?.parse().ok())
        .unwrap_or(0)
}

/// While a reader holds and a writer waits behind it, readers that come later wait behind the
/// writer; when their waits run out (every 30 ms here) they create no wake-up signal: only a
/// release does. A reader passes a wake-up on only when it was woken by one (it may have
/// taken the waiting writer's). Before, each reader whose wait simply timed out pushed one,
/// and the readers woke each other in a storm while nothing was released. Once the holder
/// releases, everyone gets in: the writer first, then the readers.
#[test]
fn readers_whose_waits_run_out_push_no_wake_up_while_nothing_is_released() {
    let server = RedisServer::start();
    let opts = redmutex::MutexOptions::default().with_wait_cap(Duration::from_millis(30));
    let name = "storm:rw";
    let holder = Client::open(&server.url()).unwrap().rwlock(name);
    let read = holder.read().unwrap();
    let writer = Client::open(&server.url())
        .unwrap()
        .rwlock(name)
        .options(opts.clone());
    let waiting_writer = std::thread::spawn(move || {
        writer
            .try_write_for(Duration::from_secs(10))
            .map(|w| w.unlock().unwrap())
    });
    // The writer is announced before the readers come (they then queue behind it).
    let waiters = format!("{{{name}}}:waitq");
    let mut conn = server.conn();
    let announced = Instant::now();
    while conn.zcard::<_, u64>(&waiters).unwrap() == 0 {
        assert!(
            announced.elapsed() < Duration::from_secs(5),
            "the writer never announced itself"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let readers: Vec<_> = (0..4)
        .map(|_| {
            let lock = Client::open(&server.url())
                .unwrap()
                .rwlock(name)
                .options(opts.clone());
            std::thread::spawn(move || {
                lock.try_read_for(Duration::from_secs(10))
                    .map(|r| r.unlock().unwrap())
            })
        })
        .collect();
    // Every reader is announced too, and has had many waits run out.
    while conn.zcard::<_, u64>(&waiters).unwrap() < 5 {
        assert!(
            announced.elapsed() < Duration::from_secs(5),
            "the readers never announced themselves"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let before = pushes(&server);
    std::thread::sleep(Duration::from_millis(600));
    let pushed = pushes(&server) - before;
    read.unlock().unwrap();
    waiting_writer
        .join()
        .unwrap()
        .expect("the waiting writer got in");
    for r in readers {
        r.join().unwrap().expect("a waiting reader got in");
    }
    assert_eq!(
        pushed, 0,
        "waits that ran out pushed {pushed} wake-ups while nothing was released"
    );
}
