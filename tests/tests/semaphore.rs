//! The counting semaphore on real redis-servers: at most N holders, permits that come back,
//! hand-off within about a round trip, fences, and bad input answered before anything is sent.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::{Duration, Instant};

use redmutex::{Client, ErrorKind, MAX_NAME_LEN, MAX_PERMITS, TryLockError, drift};
use redmutex_tests::{RedisServer, RedisServers, wait_until};

/// Whether some connection of `server` is blocked in BLPOP right now.
fn someone_blocked(server: &RedisServer) -> bool {
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query(&mut server.conn())
        .unwrap();
    list.lines().any(|l| l.contains("cmd=blpop"))
}

const WORKER: &str = env!("CARGO_BIN_EXE_worker");

/// A worker process holding one permit (auto-renewed), once it says so.
fn permit_holder(server: &RedisServer, name: &str, permits: u32, ttl_ms: u64) -> Child {
    let mut child = Command::new(WORKER)
        .args([
            "permit",
            &server.url(),
            name,
            &permits.to_string(),
            &ttl_ms.to_string(),
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.starts_with("locked "), "worker said {line:?}");
    child
}

fn dbsize(server: &RedisServer) -> i64 {
    redis::cmd("DBSIZE").query(&mut server.conn()).unwrap()
}

#[test]
fn at_most_n_hold_and_a_dropped_permit_is_free_again() {
    let server = RedisServer::start();
    let clients: Vec<Client> = (0..4)
        .map(|_| Client::open(&server.url()).unwrap())
        .collect();
    let sems: Vec<_> = clients.iter().map(|c| c.semaphore("pay:sem", 3)).collect();
    let mut held: Vec<_> = sems[..3].iter().map(|s| s.try_acquire().unwrap()).collect();
    assert!(matches!(
        sems[3].try_acquire(),
        Err(TryLockError::WouldBlock)
    ));
    let status = sems[0].status().unwrap();
    assert_eq!(status.permits, Some(3));
    assert_eq!(status.holders.len(), 3);
    for p in &held {
        assert!(status.holders.iter().any(|(t, _)| t == p.token()));
    }
    drop(held.pop());
    let fourth = sems[3].try_acquire().unwrap();
    assert!(fourth.is_held());
    assert!(matches!(
        sems[0].try_acquire(),
        Err(TryLockError::WouldBlock)
    ));
}

#[test]
fn eight_threads_on_three_permits_never_exceed_three() {
    let server = RedisServer::start();
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let fences = Arc::new(StdMutex::new(Vec::new()));
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let sem = Client::open(&server.url())
                .unwrap()
                .semaphore("many:sem", 3);
            let (inside, most, fences) = (inside.clone(), most.clone(), fences.clone());
            std::thread::spawn(move || {
                for _ in 0..15 {
                    let permit = sem.try_acquire_for(Duration::from_secs(10)).unwrap();
                    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    fences.lock().unwrap().push(permit.fence());
                    std::thread::sleep(Duration::from_millis(3));
                    inside.fetch_sub(1, Ordering::SeqCst);
                    permit.unlock().unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let most = most.load(Ordering::SeqCst);
    assert!(most <= 3, "{most} holders at once");
    assert!(most >= 2, "the permits were never shared ({most})");
    let mut fences = fences.lock().unwrap().clone();
    let n = fences.len();
    fences.sort_unstable();
    fences.dedup();
    assert_eq!(fences.len(), n, "every permit has its own fence");
}

#[test]
fn fences_strictly_increase() {
    let server = RedisServer::start();
    let client = Client::open(&server.url()).unwrap();
    let sem = client.semaphore("fence:sem", 2);
    let mut last = 0;
    for _ in 0..20 {
        let a = sem.acquire().unwrap();
        let b = sem.acquire().unwrap();
        assert!(a.fence() > last && b.fence() > a.fence());
        last = b.fence();
    }
    // The fence counter is one sequence per name, shared with a mutex of the name.
    let m = client.mutex("fence:sem").lock().unwrap();
    assert!(m.fence() > last);
}

#[test]
fn a_waiter_gets_a_released_permit_within_50ms() {
    let server = RedisServer::start();
    let holder = Client::open(&server.url())
        .unwrap()
        .semaphore("hand:sem", 2);
    let waiter = Client::open(&server.url())
        .unwrap()
        .semaphore("hand:sem", 2);
    let _kept = holder.acquire().unwrap();
    let mut worst = Duration::ZERO;
    for trial in 0..100 {
        let permit = holder.acquire().unwrap();
        let w = waiter.clone();
        let t = std::thread::spawn(move || {
            let p = w.try_acquire_for(Duration::from_secs(10)).unwrap();
            let at = Instant::now();
            p.unlock().unwrap();
            at
        });
        assert!(wait_until(Duration::from_secs(5), || someone_blocked(
            &server
        )));
        let released = Instant::now();
        permit.unlock().unwrap();
        let took = t.join().unwrap() - released;
        worst = worst.max(took);
        assert!(took <= Duration::from_millis(50), "trial {trial}: {took:?}");
    }
    eprintln!("worst hand-off of 100: {worst:?}");
}

#[test]
fn a_permit_whose_holder_stopped_renewing_comes_back_after_its_ttl() {
    let server = RedisServer::start();
    let client = Client::open(&server.url()).unwrap();
    let ttl = Duration::from_millis(300);
    let dead = client.semaphore("dead:sem", 2).ttl(ttl).auto_renew(false);
    // Two holders that vanish without releasing: nothing renews or releases their permits.
    let taken = Instant::now();
    std::mem::forget(dead.acquire().unwrap());
    std::mem::forget(dead.acquire().unwrap());
    let live = Client::open(&server.url())
        .unwrap()
        .semaphore("dead:sem", 2);
    assert!(matches!(live.try_acquire(), Err(TryLockError::WouldBlock)));
    let permit = live.try_acquire_for(Duration::from_secs(3)).unwrap();
    let after = taken.elapsed();
    // What a holder is promised: nobody else before its validity ends (the TTL less the
    // drift allowance, which covers the server counting time in whole milliseconds).
    assert!(
        after >= ttl - drift(ttl),
        "granted before the holder's validity ran out: {after:?}"
    );
    assert!(
        after <= ttl + Duration::from_millis(300),
        "came back late: {after:?}"
    );
    assert!(permit.is_held());
}

#[test]
fn a_lost_permit_is_reported() {
    let server = RedisServer::start();
    let sem = Client::open(&server.url())
        .unwrap()
        .semaphore("lost:sem", 1)
        .ttl(Duration::from_millis(200))
        .auto_renew(false);
    let permit = sem.acquire().unwrap();
    let (told, heard) = std::sync::mpsc::channel();
    permit.on_lost(move || told.send(()).unwrap());
    assert!(permit.wait_lost(Duration::from_secs(2)));
    heard.recv_timeout(Duration::from_secs(2)).unwrap();
    assert_eq!(permit.check().unwrap_err().kind(), ErrorKind::Lost);
    assert_eq!(
        permit.extend(Duration::from_secs(1)).unwrap_err().kind(),
        ErrorKind::Lost
    );
}

#[test]
fn renewal_and_extend_keep_a_permit() {
    let server = RedisServer::start();
    let client = Client::open(&server.url()).unwrap();
    let sem = client
        .semaphore("renew:sem", 1)
        .ttl(Duration::from_millis(150));
    let permit = sem.acquire().unwrap();
    std::thread::sleep(Duration::from_millis(500));
    assert!(permit.is_held());
    assert!(permit.renewals() >= 2);
    permit.extend(Duration::from_secs(5)).unwrap();
    let status = sem.status().unwrap();
    assert!(status.holders[0].1 > Duration::from_secs(4));
    assert!(matches!(sem.try_acquire(), Err(TryLockError::WouldBlock)));
    permit.unlock().unwrap();
    assert_eq!(sem.status().unwrap().holders.len(), 0);
    assert_eq!(sem.status().unwrap().permits, None);
}

#[test]
fn a_mismatched_count_is_refused_with_both_numbers() {
    let server = RedisServer::start();
    let client = Client::open(&server.url()).unwrap();
    let _held = client.semaphore("mix:sem", 3).acquire().unwrap();
    let other = client.semaphore("mix:sem", 5);
    let expected = "the semaphore \"mix:sem\" is held with 3 permits, but this call asked for \
                    5; every user of one name must give the same count";
    for err in [
        other.try_acquire().unwrap_err().into(),
        other.acquire().unwrap_err(),
        redmutex::Error::from(other.try_acquire_for(Duration::from_secs(1)).unwrap_err()),
    ] {
        assert_eq!(err.kind(), ErrorKind::InvalidArgument);
        assert_eq!(err.message(), expected);
    }
    assert_eq!(other.status().unwrap().holders.len(), 1);
}

#[test]
fn bad_input_is_refused_and_nothing_is_sent() {
    let server = RedisServer::start();
    let client = Client::open(&server.url()).unwrap();
    let long = vec![b'x'; MAX_NAME_LEN + 1];
    let cases: [(&[u8], u32, String); 4] = [
        (
            b"zero:sem",
            0,
            format!("a semaphore must have 1 to {MAX_PERMITS} permits, got 0"),
        ),
        (
            b"many:sem",
            MAX_PERMITS + 1,
            format!(
                "a semaphore must have 1 to {MAX_PERMITS} permits, got {}",
                MAX_PERMITS + 1
            ),
        ),
        (
            &long,
            3,
            format!(
                "a lock name must be 1 to {MAX_NAME_LEN} bytes, got {}",
                MAX_NAME_LEN + 1
            ),
        ),
        (
            b"",
            3,
            format!("a lock name must be 1 to {MAX_NAME_LEN} bytes, got 0"),
        ),
    ];
    for (name, permits, message) in cases {
        let sem = client.semaphore(name, permits);
        let err = sem.acquire().unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidArgument);
        assert_eq!(err.message(), message);
        assert_eq!(
            redmutex::Error::from(sem.try_acquire().unwrap_err()).kind(),
            ErrorKind::InvalidArgument
        );
        assert_eq!(sem.status().unwrap_err().kind(), ErrorKind::InvalidArgument);
    }
    assert_eq!(dbsize(&server), 0, "nothing may reach Redis");
}

#[test]
fn several_independent_masters_are_refused() {
    let servers = RedisServers::start(3);
    let client = Client::builder().nodes(servers.urls()).build().unwrap();
    let sem = client.semaphore("redlock:sem", 2);
    let err = sem.acquire().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    assert_eq!(
        err.message(),
        "a semaphore needs one voter (one node, Sentinel or a Cluster), not 3 independent \
         masters: majorities granting different permits need not share a node, so N permits \
         could admit up to 2N-1 holders"
    );
    assert!(
        matches!(sem.try_acquire(), Err(TryLockError::Error(e)) if e.kind() == ErrorKind::InvalidArgument)
    );
    for s in &servers.0 {
        assert_eq!(dbsize(s), 0);
    }
}

#[test]
fn a_killed_holder_process_gives_its_permit_back_within_its_ttl() {
    let server = RedisServer::start();
    let ttl = Duration::from_millis(500);
    let mut holders: Vec<Child> = (0..3)
        .map(|_| permit_holder(&server, "kill:sem", 3, ttl.as_millis() as u64))
        .collect();
    let sem = Client::open(&server.url())
        .unwrap()
        .semaphore("kill:sem", 3);
    // Renewed by their processes: still held after several TTLs.
    std::thread::sleep(ttl * 3);
    assert!(matches!(sem.try_acquire(), Err(TryLockError::WouldBlock)));
    holders[0].kill().unwrap();
    holders[0].wait().unwrap();
    let killed = Instant::now();
    let permit = sem.try_acquire_for(Duration::from_secs(5)).unwrap();
    let back = killed.elapsed();
    assert!(
        back <= ttl + Duration::from_millis(150),
        "back after {back:?}"
    );
    assert!(matches!(sem.try_acquire(), Err(TryLockError::WouldBlock)));
    drop(permit);
    for mut h in holders.into_iter().skip(1) {
        h.kill().unwrap();
        h.wait().unwrap();
    }
}

/// A Redis Cluster is one voter: every key of a semaphore (and of a read-write lock) shares
/// its name's slot, on whichever master serves it.
#[test]
fn a_cluster_serves_semaphores_and_read_write_locks() {
    use redmutex_tests::cluster::RedisCluster;
    let cluster = RedisCluster::start(3, 0);
    let client = Client::builder()
        .cluster(cluster.seed_urls())
        .build()
        .unwrap();
    for i in 0..6 {
        let name = format!("cl-sem-{i}");
        let sem = client.semaphore(&name, 2);
        let a = sem.acquire().unwrap();
        let b = sem.try_acquire().unwrap();
        assert!(b.fence() > a.fence());
        assert!(matches!(sem.try_acquire(), Err(TryLockError::WouldBlock)));
        assert_eq!(sem.status().unwrap().holders.len(), 2);
        drop(a);
        sem.try_acquire().unwrap().unlock().unwrap();

        let rw = client.rwlock(format!("cl-rw-{i}"));
        let read = rw.read().unwrap();
        assert!(matches!(rw.try_write(), Err(TryLockError::WouldBlock)));
        drop(read);
        let write = rw.try_write().unwrap();
        assert!(matches!(rw.try_read(), Err(TryLockError::WouldBlock)));
        write.unlock().unwrap();
    }
}

/// Eight processes on three permits, one of them killed and one stopped for longer than the
/// TTL mid-run (each spends most of its time holding a permit): no moment has more than three holds, where a hold ends at its release or at the
/// last validity the library promised its holder, whichever is first. Fences are unique.
#[test]
fn eight_processes_killed_and_stopped_never_exceed_three_holds() {
    use std::collections::HashMap;
    let server = RedisServer::start();
    let outputs = redmutex_tests::workers::lines_under_kill_and_stop(
        WORKER,
        &["permits", &server.url(), "torture:sem", "3", "300"],
        8,
    );
    // (start, end) of every hold, and every fence.
    let mut holds: Vec<(i64, i64)> = Vec::new();
    let mut fences = Vec::new();
    for lines in outputs {
        let mut open: HashMap<u64, (i64, i64, Option<i64>)> = HashMap::new();
        for line in lines {
            let f: Vec<&str> = line.split(' ').collect();
            let seq: u64 = f[1].parse().unwrap();
            let t: i64 = f[2].parse().unwrap();
            match f[0] {
                "acquire" => {
                    fences.push(f[3].parse::<u64>().unwrap());
                    open.insert(seq, (t, f[4].parse().unwrap(), None));
                }
                "renew" => {
                    let h = open.get_mut(&seq).unwrap();
                    h.1 = h.1.max(f[3].parse().unwrap());
                }
                "release" => open.get_mut(&seq).unwrap().2 = Some(t),
                other => panic!("unknown line {other}"),
            }
        }
        for (start, valid, released) in open.into_values() {
            holds.push((start, released.map_or(valid, |r| r.min(valid))));
        }
    }
    let most = redmutex_tests::history::most_at_once(&holds);
    eprintln!("{} holds, at most {most} at once", holds.len());
    assert!(most <= 3, "{most} holds overlapped");
    assert!(
        holds.len() > 50,
        "too little progress: {} holds",
        holds.len()
    );
    let n = fences.len();
    fences.sort_unstable();
    fences.dedup();
    assert_eq!(fences.len(), n, "a fence was handed out twice");
}

/// A permit kept as a guard of any kind (as a binding keeps every kind in one handle) is the
/// same permit: the conversion sends nothing and releases nothing, the guard still names
/// itself a permit, and dropping it gives the permit back.
#[test]
fn a_permit_kept_as_any_guard_is_the_same_permit() {
    let server = RedisServer::start();
    let client = Client::open(&server.url()).unwrap();
    let sem = client.semaphore("any:sem", 1);
    let permit = sem.try_acquire().unwrap();
    let fence = permit.fence();
    let any: redmutex::Guard<redmutex::kind::Any> = permit.into_any();
    assert!(any.is_held());
    assert_eq!(any.fence(), fence);
    assert_eq!(sem.status().unwrap().holders.len(), 1, "still held");
    assert!(format!("{any:?}").starts_with("Permit {"), "{any:?}");
    assert!(matches!(sem.try_acquire(), Err(TryLockError::WouldBlock)));
    drop(any);
    assert_eq!(sem.status().unwrap().holders.len(), 0, "given back on drop");
    sem.try_acquire().unwrap().unlock().unwrap();
}
