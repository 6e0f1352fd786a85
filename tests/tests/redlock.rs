//! Redlock: one lock over N independent real redis-servers.

use std::collections::HashMap;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use redis::Commands;
use redmutex::{Client, ErrorKind, NodeOutcome, TryLockError};
use redmutex_tests::{ClosedPort, RedisServer, RedisServers};

const WORKER: &str = env!("CARGO_BIN_EXE_worker");

#[derive(Clone, Copy, PartialEq, Debug)]
enum State {
    Free,
    Foreign,
    Down,
}

/// Every combination of free / held by a foreign value / down, for N = 3 and N = 5: one
/// attempt succeeds exactly when the free nodes form a majority, a failure tells taken from
/// unreachable, and no key with our token survives anywhere.
#[test]
fn every_combination_of_node_states() {
    for n in [3usize, 5] {
        let servers = RedisServers::start(n);
        let closed: Vec<ClosedPort> = (0..n).map(|_| ClosedPort::new()).collect();
        let dead: Vec<String> = closed.iter().map(ClosedPort::url).collect();
        let mut clients: HashMap<u32, Client> = HashMap::new();
        let mut conns: Vec<_> = servers.iter().map(|s| s.conn()).collect();
        for combo in 0..3u32.pow(n as u32) {
            let states: Vec<State> = (0..n)
                .map(|i| match (combo / 3u32.pow(i as u32)) % 3 {
                    0 => State::Free,
                    1 => State::Foreign,
                    _ => State::Down,
                })
                .collect();
            let down_mask = states
                .iter()
                .enumerate()
                .filter(|(_, s)| **s == State::Down)
                .fold(0u32, |m, (i, _)| m | 1 << i);
            let client = clients.entry(down_mask).or_insert_with(|| {
                let urls: Vec<String> = (0..n)
                    .map(|i| {
                        if down_mask & (1 << i) != 0 {
                            dead[i].clone()
                        } else {
                            servers[i].url()
                        }
                    })
                    .collect();
                Client::builder()
                    .nodes(urls)
                    .owner("combo")
                    .build()
                    .unwrap()
            });
            for (i, s) in states.iter().enumerate() {
                let _: () = if *s == State::Foreign {
                    conns[i].set("combo:lock", "foreign").unwrap()
                } else {
                    conns[i].del("combo:lock").unwrap()
                };
            }
            let free = states.iter().filter(|s| **s == State::Free).count();
            let result = client
                .mutex("combo:lock")
                .ttl(Duration::from_secs(10))
                .try_lock();
            match result {
                Ok(guard) => {
                    assert!(free > n / 2, "{states:?}: granted without a majority");
                    guard.unlock().unwrap();
                }
                Err(TryLockError::WouldBlock) => {
                    assert!(free <= n / 2, "{states:?}: refused with a free majority");
                    let answered = states.iter().filter(|s| **s != State::Down).count();
                    assert!(
                        answered > n / 2,
                        "{states:?}: 'taken' though most nodes were down"
                    );
                }
                Err(TryLockError::Error(e)) => {
                    assert!(free <= n / 2, "{states:?}: {e}");
                    assert_eq!(e.kind(), ErrorKind::NoQuorum, "{states:?}: {e}");
                    for (i, report) in e.nodes().iter().enumerate() {
                        let ok = match states[i] {
                            State::Free => report.outcome == NodeOutcome::Ok,
                            State::Foreign => matches!(&report.outcome,
                                NodeOutcome::Taken { holder, .. } if holder == b"foreign"),
                            State::Down => matches!(report.outcome, NodeOutcome::Unreachable(_)),
                        };
                        assert!(ok, "{states:?}: node {i} reported {report}");
                    }
                }
                Err(e) => panic!("{e}"),
            }
            // A release (or undo) counts at its quorum; the slower nodes' are still on their
            // way, and must land.
            for (i, s) in states.iter().enumerate() {
                if *s == State::Down {
                    continue;
                }
                let mut v: Option<String> = None;
                let gone = redmutex_tests::wait_until(Duration::from_secs(1), || {
                    v = conns[i].get("combo:lock").unwrap();
                    v.is_none() || v.as_deref() == Some("foreign")
                });
                assert!(gone, "{states:?}: node {i} kept {v:?}");
            }
        }
    }
}

#[test]
fn no_quorum_is_reported_in_time_when_three_of_five_are_down() {
    let servers = RedisServers::start(5);
    let urls = servers.urls();
    let node_timeout = Duration::from_millis(50);
    // Refused: three URLs where nobody listens.
    let closed: Vec<ClosedPort> = (0..3).map(|_| ClosedPort::new()).collect();
    let mut refused = urls.clone();
    for (u, c) in refused.iter_mut().zip(&closed) {
        *u = c.url();
    }
    let client = Client::builder()
        .nodes(refused)
        .node_timeout(node_timeout)
        .build()
        .unwrap();
    let started = Instant::now();
    let err = client
        .mutex("down:lock")
        .try_lock_for(Duration::from_secs(1))
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NoQuorum, "{err}");
    assert!(
        started.elapsed() <= Duration::from_secs(1) + node_timeout + Duration::from_millis(100)
    );

    // Frozen: three servers stopped with SIGSTOP.
    let client = Client::builder()
        .nodes(urls.clone())
        .node_timeout(node_timeout)
        .build()
        .unwrap();
    client.mutex("down:lock").lock().unwrap().unlock().unwrap();
    for s in servers.iter().take(3) {
        s.pause();
    }
    let started = Instant::now();
    let err = client
        .mutex("down:lock")
        .try_lock_for(Duration::from_secs(1))
        .unwrap_err();
    let took = started.elapsed();
    assert_eq!(err.kind(), ErrorKind::NoQuorum, "{err}");
    assert!(
        took <= Duration::from_secs(1) + node_timeout + Duration::from_millis(100),
        "{took:?}"
    );
    assert!(
        err.nodes()
            .iter()
            .take(3)
            .all(|r| matches!(r.outcome, NodeOutcome::Unreachable(_))),
        "{err}"
    );
    for s in servers.iter().take(3) {
        s.resume();
    }

    // Two down: still a majority.
    let mut two_down = urls;
    for (u, c) in two_down.iter_mut().zip(&closed[..2]) {
        *u = c.url();
    }
    let client = Client::builder()
        .nodes(two_down)
        .node_timeout(node_timeout)
        .build()
        .unwrap();
    client
        .mutex("down:lock")
        .try_lock()
        .unwrap()
        .unlock()
        .unwrap();
}

#[test]
fn a_node_frozen_during_acquire_keeps_no_key_of_the_failed_attempt() {
    let servers = RedisServers::start(3);
    let client = Client::builder()
        .nodes(servers.urls())
        .owner("late-grant")
        .node_timeout(Duration::from_millis(50))
        .build()
        .unwrap();
    let mutex = client.mutex("late:lock").ttl(Duration::from_secs(30));
    mutex.try_lock().unwrap().unlock().unwrap(); // pooled connections everywhere
    let _: () = servers[1].conn().set("late:lock", "foreign").unwrap();
    servers[0].pause();
    assert!(mutex.try_lock().is_err());
    servers[0].resume();
    // The frozen node applies our SET when it wakes, and then the undo queued behind it: well
    // within the 30 s TTL, nothing of ours is left.
    let mut conn = servers[0].conn();
    let v: Option<String> = conn.get("late:lock").unwrap();
    assert!(v.is_none(), "left behind: {v:?}");
    let v: Option<String> = servers[2].conn().get("late:lock").unwrap();
    assert!(v.is_none(), "left behind: {v:?}");
}

#[test]
fn renewal_survives_a_minority_and_reports_the_loss_of_the_majority() {
    let mut servers = RedisServers::start(5);
    let ttl = Duration::from_millis(600);
    let node_timeout = Duration::from_millis(50);
    let client = Client::builder()
        .nodes(servers.urls())
        .node_timeout(node_timeout)
        .build()
        .unwrap();
    let guard = client.mutex("renew5:lock").ttl(ttl).lock().unwrap();
    let lost = Arc::new(AtomicBool::new(false));
    let l = Arc::clone(&lost);
    guard.on_lost(move || l.store(true, Ordering::SeqCst));
    let start = Instant::now();
    let mut killed = 0;
    while start.elapsed() < ttl * 10 {
        // The first minority node dies after 2 TTLs, the second after 4.
        if killed < 2 && start.elapsed() >= ttl * (2 + 2 * killed as u32) {
            servers[killed].kill();
            killed += 1;
        }
        assert!(
            guard.is_held(),
            "lost with {killed} nodes down: {:?}",
            guard.check()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(killed, 2);
    assert!(guard.renewals() >= 10);
    servers[2].kill();
    let died = Instant::now();
    assert!(guard.wait_lost(ttl * 2));
    let took = died.elapsed();
    // Refused connections are asked again within the validity (a node restarting with its
    // data on disk keeps the lock): the loss comes when the validity runs out, no later.
    assert!(
        took <= ttl + node_timeout + Duration::from_millis(60),
        "{took:?}"
    );
    assert!(
        lost.load(Ordering::SeqCst)
            || redmutex_tests::wait_until(Duration::from_millis(200), || lost
                .load(Ordering::SeqCst))
    );
}

/// Four processes on five nodes while nodes are frozen and killed (a killed node comes back
/// only after a TTL, as Redlock requires of nodes without persistence): the counter is exact.
#[test]
fn exclusion_holds_while_nodes_fail() {
    let mut servers = RedisServers::start(5);
    let data = RedisServer::start();
    let _ = &mut servers;
    let urls = servers.urls().join(",");
    let procs: Vec<_> = (0..4)
        .map(|_| {
            Command::new(WORKER)
                .args(["rmw", &urls, "chaos:lock", "chaos:counter", "100", "1000"])
                .env("DATA_URL", data.url())
                .env("NODE_TIMEOUT_MS", "100")
                .stdout(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let done = Arc::new(AtomicBool::new(false));
    let chaos = {
        let done = Arc::clone(&done);
        std::thread::spawn(move || {
            let mut round = 0usize;
            while !done.load(Ordering::SeqCst) {
                let i = round % 5;
                if round.is_multiple_of(2) {
                    servers[i].pause();
                    std::thread::sleep(Duration::from_millis(150));
                    servers[i].resume();
                } else {
                    servers[i].kill();
                    std::thread::sleep(Duration::from_millis(1100));
                    servers[i].restart();
                }
                round += 1;
            }
            round
        })
    };
    let outputs: Vec<_> = procs
        .into_iter()
        .map(|p| p.wait_with_output().unwrap())
        .collect();
    done.store(true, Ordering::SeqCst);
    let rounds = chaos.join().unwrap();
    for out in &outputs {
        assert!(out.status.success(), "{out:?}");
    }
    assert!(rounds >= 2, "too few faults injected ({rounds})");
    let count: u64 = data.conn().get("chaos:counter").unwrap();
    assert_eq!(count, 400);
}

/// 500 grants across 3 clients while a random minority of nodes is clogged by foreign values,
/// with failed attempts on a clogged majority in between (they bump some counters): every
/// fence is greater than all earlier ones.
#[test]
fn fences_stay_monotonic_across_different_majorities() {
    let servers = RedisServers::start(5);
    let clients: Vec<Client> = (0..3)
        .map(|_| Client::builder().nodes(servers.urls()).build().unwrap())
        .collect();
    let mut conns: Vec<_> = servers.iter().map(|s| s.conn()).collect();
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut rand = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut last = 0u64;
    let mut diverged = false;
    let mut grants = 0;
    let mut round = 0u32;
    while grants < 500 {
        round += 1;
        let clogged_count = if round.is_multiple_of(7) {
            3
        } else {
            (rand() % 3) as usize
        };
        let mut clogged = Vec::new();
        while clogged.len() < clogged_count {
            let i = (rand() % 5) as usize;
            if !clogged.contains(&i) {
                clogged.push(i);
            }
        }
        for &i in &clogged {
            let _: () = conns[i].set("fence5:lock", "foreign").unwrap();
        }
        let client = &clients[(rand() % 3) as usize];
        match client.mutex("fence5:lock").try_lock() {
            Ok(guard) => {
                assert!(clogged_count < 3);
                assert!(guard.fence() > last, "fence {} after {last}", guard.fence());
                last = guard.fence();
                grants += 1;
                let token = guard.token().to_vec();
                guard.unlock().unwrap();
                // The release counts at its quorum; the slower nodes' releases are still on
                // their way, and the next attempt (maybe another client's) would find those
                // nodes held. Wait until every node has let go of the token (which they must).
                let released = redmutex_tests::wait_until(Duration::from_secs(2), || {
                    conns.iter_mut().all(|c| {
                        let v: Option<Vec<u8>> = c.get("fence5:lock").unwrap();
                        v.as_deref() != Some(&token[..])
                    })
                });
                assert!(released, "a node still holds the token 2 s after unlock");
            }
            Err(TryLockError::WouldBlock) => assert_eq!(clogged_count, 3),
            Err(e) => panic!("{e}"),
        }
        for &i in &clogged {
            let _: () = conns[i].del("fence5:lock").unwrap();
        }
        if !clogged.is_empty() {
            let counters: Vec<u64> = conns
                .iter_mut()
                .map(|c| {
                    c.get::<_, Option<u64>>("{fence5:lock}:fence")
                        .unwrap()
                        .unwrap_or(0)
                })
                .collect();
            diverged |= counters.iter().any(|c| *c != counters[0]);
        }
    }
    assert!(
        diverged,
        "the nodes' counters never diverged: the test proved nothing"
    );
}

/// Five servers, each behind a fault proxy, and a client of the five through the proxies
/// with a node timeout (2 s) far above the delays the tests set.
fn five_behind_proxies() -> (RedisServers, Vec<redmutex_tests::FaultProxy>, Client) {
    use redmutex_tests::FaultProxy;
    let servers = RedisServers::start(5);
    let proxies = FaultProxy::in_front_of(&servers);
    let client = Client::builder()
        .nodes(proxies.iter().map(FaultProxy::url))
        .node_timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    (servers, proxies, client)
}

/// A round ends at its majority: with two of five nodes answering 600 ms late (their requests
/// run at once; only the replies are slow), `try_lock` and `unlock` return as soon as the three
/// fast nodes decided, long before the slow replies. The late grants are part of the lock
/// (the slow nodes hold its token), the release reaches them too (reported as not waited for,
/// not as failed), and the connections that still owed those replies serve the next round.
#[test]
fn a_round_ends_at_its_majority_and_keeps_the_late_grants() {
    use redmutex_tests::{Mode, wait_until};
    const SLOW: Duration = Duration::from_millis(600);
    let (servers, proxies, client) = five_behind_proxies();
    let mutex = client.mutex("quorum:late").ttl(Duration::from_secs(10));
    mutex.try_lock().unwrap().unlock().unwrap(); // pooled connections everywhere
    proxies[3..]
        .iter()
        .for_each(|p| p.set_mode(Mode::Delay(SLOW)));
    for round in 0..3 {
        let started = Instant::now();
        let guard = mutex.try_lock().unwrap();
        let took = started.elapsed();
        assert!(took < SLOW / 2, "round {round}: try_lock took {took:?}");
        // The slow nodes' requests ran (only their replies are late): they hold the token.
        let token = String::from_utf8(guard.token().to_vec()).unwrap();
        assert!(
            wait_until(SLOW / 2, || servers.iter().all(|s| {
                s.conn().get::<_, Option<String>>("quorum:late").unwrap() == Some(token.clone())
            })),
            "round {round}: every node holds the token"
        );
        let started = Instant::now();
        let released = guard.unlock().unwrap();
        let took = started.elapsed();
        assert!(took < SLOW / 2, "round {round}: unlock took {took:?}");
        assert_eq!(
            (released.released, released.failed, released.pending),
            (3, 0, 2),
            "{released:?}"
        );
        for (i, report) in released.nodes.iter().enumerate() {
            let late = report.outcome == NodeOutcome::NotWaitedFor;
            assert_eq!(late, i >= 3, "round {round}, node {i}: {released:?}");
        }
        assert!(
            released_everywhere(&servers, "quorum:late", Duration::from_secs(1)),
            "round {round}: the release reached every node"
        );
    }
}

/// The bytes received but not yet read by this machine's established TCP connections to
/// `port` on loopback (`rx_queue` in `/proc/net/tcp`): replies a client left unread.
fn unread_bytes_to(port: u16) -> Vec<u64> {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap();
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let remote_port = u16::from_str_radix(f[2].split(':').nth(1)?, 16).ok()?;
            let established = f[3] == "01";
            let rx = u64::from_str_radix(f[4].split(':').nth(1)?, 16).ok()?;
            (established && remote_port == port).then_some(rx)
        })
        .collect()
}

/// A round ends at its quorum and leaves the other nodes' replies to be read later. A client
/// that does nothing but take and release a lock on five healthy nodes, again and again,
/// must still read them: replies left unread pile up in the sockets and then in the servers'
/// output buffers, without bound.
#[test]
fn replies_left_behind_by_quorum_rounds_do_not_pile_up() {
    let servers = RedisServers::start(5);
    let client = Client::builder()
        .nodes(servers.iter().map(|s| s.url()))
        .build()
        .unwrap();
    let mutex = client.mutex("quorum:backlog").ttl(Duration::from_secs(10));
    for _ in 0..2000 {
        mutex.try_lock().unwrap().unlock().unwrap();
    }
    for server in servers.iter() {
        let unread = unread_bytes_to(server.port());
        assert!(!unread.is_empty(), "no connection to {}", server.port());
        let most = unread.iter().max().copied().unwrap_or(0);
        assert!(
            most < 1024,
            "{most} bytes of replies wait unread on a connection to node {} after 2,000 \
             cycles (each reply is a few bytes)",
            server.port()
        );
    }
}

/// A node whose replies are steadily slow is on no round's path once a round has found it
/// slow, wherever it stands in the list of nodes: the rounds end with the fast majority
/// (here the slow nodes are the first two).
#[test]
fn steadily_slow_nodes_first_in_the_list_leave_the_path() {
    use redmutex_tests::Mode;
    const SLOW: Duration = Duration::from_millis(600);
    let (_servers, proxies, client) = five_behind_proxies();
    let mutex = client
        .mutex("quorum:slow-first")
        .ttl(Duration::from_secs(10));
    mutex.try_lock().unwrap().unlock().unwrap(); // pooled connections everywhere
    proxies[..2]
        .iter()
        .for_each(|p| p.set_mode(Mode::Delay(SLOW)));
    // One cycle may meet each slow node once before it is known to be slow.
    mutex.try_lock().unwrap().unlock().unwrap();
    redmutex_tests::three_cycles_each_under(&mutex, SLOW / 2);
}

/// A round ends with its quorum's first replies, not with the first nodes in its list: with
/// the first two of five nodes answering 600 ms late from the start, not even the first
/// `try_lock` and `unlock` after that wait for them (replies are read as they come, so no
/// round needs to find a node slow first).
#[test]
fn a_round_ends_with_its_first_replies_not_its_first_nodes() {
    use redmutex_tests::Mode;
    const SLOW: Duration = Duration::from_millis(600);
    let (_servers, proxies, client) = five_behind_proxies();
    let mutex = client
        .mutex("quorum:first-replies")
        .ttl(Duration::from_secs(10));
    mutex.try_lock().unwrap().unlock().unwrap(); // pooled connections everywhere
    proxies[..2]
        .iter()
        .for_each(|p| p.set_mode(Mode::Delay(SLOW)));
    redmutex_tests::three_cycles_each_under(&mutex, SLOW / 2);
}

/// The same over Unix sockets: five servers reached by `unix://` URLs, the first two in the
/// list frozen (`SIGSTOP`) after the client's connections to them were pooled. Not even the
/// first `try_lock` and `unlock` wait for them; the lock and its fence are those of any
/// other transport.
#[test]
fn a_unix_socket_round_ends_with_its_first_replies_not_its_first_nodes() {
    const NODE_TIMEOUT: Duration = Duration::from_secs(2);
    let servers = RedisServers::start_with(5, &["--unixsocket", "redis.sock"]);
    let client = Client::builder()
        .nodes(servers.iter().map(RedisServer::unix_url))
        .node_timeout(NODE_TIMEOUT)
        .build()
        .unwrap();
    let mutex = client.mutex("quorum:unix").ttl(Duration::from_secs(10));
    let guard = mutex.try_lock().unwrap(); // pooled connections everywhere
    assert!(guard.fence() > 0);
    guard.unlock().unwrap();
    servers[..2].iter().for_each(RedisServer::pause);
    redmutex_tests::three_cycles_each_under(&mutex, NODE_TIMEOUT / 4);
    servers[..2].iter().for_each(RedisServer::resume);
}

/// What the connections to a slow node owe stays what is in flight: with two of five nodes
/// answering 50 ms late, a client that takes and releases a lock for 1.5 s leaves each round's
/// request to them unanswered when the round ends, and reads their replies as they come, so
/// that its idle connections owe about the replies of the last 50 ms (a thirtieth of the
/// rounds), not of every round since the nodes turned slow.
#[test]
fn what_a_slow_node_owes_stays_what_is_in_flight() {
    use redmutex_tests::Mode;
    const SLOW: Duration = Duration::from_millis(50);
    let (_servers, proxies, client) = five_behind_proxies();
    let mutex = client
        .mutex("quorum:in-flight")
        .ttl(Duration::from_secs(10));
    mutex.try_lock().unwrap().unlock().unwrap(); // pooled connections everywhere
    proxies[3..]
        .iter()
        .for_each(|p| p.set_mode(Mode::Delay(SLOW)));
    let started = Instant::now();
    let mut rounds = 0u32;
    while started.elapsed() < SLOW * 30 {
        mutex.try_lock().unwrap().unlock().unwrap();
        rounds += 2;
    }
    let owed = client.replies_owed();
    assert!(
        owed <= rounds / 4,
        "an idle connection owes {owed} replies after {rounds} rounds"
    );
}

/// Renewals and `extend` end at their quorum too. With two of five nodes answering 400 ms
/// late, a lock with a 900 ms TTL is renewed every 300 ms: waiting for every node, each
/// renewal would be confirmed 400 ms after it was sent, with less than 500 ms of validity
/// left; ending with the fast majority, it is confirmed at once, with nearly the whole TTL
/// left (a renewal may meet each slow node once before it is known to be slow). An
/// `extend` then returns with the fast majority too, and the slow nodes still run it.
#[test]
fn renewals_and_extend_end_at_their_quorum() {
    use redmutex_tests::{Mode, wait_until};
    use std::sync::Mutex;
    const SLOW: Duration = Duration::from_millis(400);
    const TTL: Duration = Duration::from_millis(900);
    let (servers, proxies, client) = five_behind_proxies();
    let mutex = client.mutex("quorum:renewed").ttl(TTL);
    mutex.try_lock().unwrap().unlock().unwrap(); // pooled connections everywhere
    let guard = mutex.try_lock().unwrap();
    let lost = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&lost);
    guard.on_lost(move || flag.store(true, Ordering::SeqCst));
    // The validity each renewal left, as its confirmation came in.
    let left = Arc::new(Mutex::new(Vec::new()));
    let record = Arc::clone(&left);
    guard.on_renewed(move |until| {
        let now = Instant::now();
        record
            .lock()
            .unwrap()
            .push(until.saturating_duration_since(now));
    });
    proxies[3..]
        .iter()
        .for_each(|p| p.set_mode(Mode::Delay(SLOW)));
    assert!(
        wait_until(Duration::from_secs(8), || left.lock().unwrap().len() >= 10
            || !guard.is_held()),
        "ten renewals did not come in 8 s"
    );
    assert!(
        guard.is_held() && !lost.load(Ordering::SeqCst),
        "the lock was lost while a majority of its nodes answered at once: {:?}",
        guard.check()
    );
    let left = left.lock().unwrap().clone();
    let late = left
        .iter()
        .filter(|l| **l < TTL - Duration::from_millis(200))
        .count();
    assert!(
        late <= 2,
        "{late} of {} renewals waited for the slow nodes (validity left at each: {left:?})",
        left.len()
    );
    let started = Instant::now();
    guard.extend(Duration::from_secs(30)).unwrap();
    let took = started.elapsed();
    assert!(took < SLOW / 2, "extend took {took:?}");
    assert!(
        wait_until(SLOW * 3, || servers.iter().all(|s| {
            s.conn().pttl::<_, i64>("quorum:renewed").unwrap() > 20_000
        })),
        "the slow nodes ran the extension too"
    );
    guard.unlock().unwrap();
}

/// The fence write-back ends at its quorum too. One of five nodes holds a far larger counter
/// than the other four. Two of those four answer 100 ms late; the round ends with the first
/// three answers (the node ahead and two behind it), so the largest fence must be written
/// back until a quorum holds it. One of the two behind that answered is slow on exactly that
/// request (the proxy holds it 800 ms; it answered the acquire at once). A write-back that
/// waited for the nodes that answered would wait for it; this one also goes to the two late
/// nodes, behind their acquire, and counts the first two confirmations: `try_lock` returns
/// without waiting for the slow node, with the largest fence. The slow node still gets the
/// write-back, and a later quorum made of nodes that were behind grants a larger fence.
#[test]
fn a_fence_write_back_ends_at_its_quorum() {
    use redmutex_tests::{Mode, wait_until};
    const SLOW: Duration = Duration::from_millis(800);
    const LATE: Duration = Duration::from_millis(100);
    const NAME: &str = "quorum:fenced";
    let (servers, proxies, client) = five_behind_proxies();
    let mutex = client.mutex(NAME).ttl(Duration::from_secs(10));
    mutex.try_lock().unwrap().unlock().unwrap(); // pooled connections everywhere
    let fence_key = format!("{{{NAME}}}:fence");
    let counter = |i: usize| -> u64 {
        servers[i]
            .conn()
            .get::<_, Option<u64>>(&fence_key)
            .unwrap()
            .unwrap_or(0)
    };
    // Far above the other counters, which the server's time in µs raises every fence to.
    const AHEAD: u64 = 1 << 52;
    let _: () = servers[0].conn().set(&fence_key, AHEAD).unwrap();
    // The write-back: two keys (the fence counter first), by hash.
    let needle = format!("$1\r\n2\r\n${}\r\n{fence_key}\r\n", fence_key.len());
    let needle: &'static [u8] = Box::leak(needle.into_bytes().into_boxed_slice());
    proxies[1].set_mode(Mode::DelayRequestsWith(needle, SLOW));
    proxies[2..4]
        .iter()
        .for_each(|p| p.set_mode(Mode::Delay(LATE)));

    let started = Instant::now();
    let guard = mutex.try_lock().unwrap();
    let took = started.elapsed();
    assert_eq!(guard.fence(), AHEAD + 1);
    assert!(
        took < SLOW / 2,
        "try_lock waited {took:?} for the slow node's fence write-back"
    );
    let holding = (0..5).filter(|&i| counter(i) > AHEAD).count();
    assert!(holding >= 3, "{holding} nodes hold the fence");
    assert!(
        wait_until(SLOW * 3, || counter(1) == AHEAD + 1),
        "the slow node never got the write-back: {}",
        counter(1)
    );
    proxies.iter().for_each(|p| p.set_mode(Mode::Pass));
    guard.unlock().unwrap();
    assert!(
        released_everywhere(&servers, NAME, Duration::from_secs(2)),
        "the release reached every node"
    );
    for s in &servers[..2] {
        let _: () = s.conn().set(NAME, "foreign").unwrap();
    }
    let later = mutex.try_lock().unwrap();
    assert_eq!(
        later.fence(),
        AHEAD + 2,
        "a quorum of nodes that were behind"
    );
    later.unlock().unwrap();
}

/// Whether, within `within`, no node holds the key `name` any more: a release that ended at
/// its quorum reached the slower nodes too.
fn released_everywhere(servers: &RedisServers, name: &str, within: Duration) -> bool {
    redmutex_tests::wait_until(within, || {
        servers.iter().all(|s| {
            let held: Option<String> = s.conn().get(name).unwrap();
            held.is_none()
        })
    })
}

/// A node whose connections hang stays off the path: one of five nodes loses its pooled
/// connection and every new one hangs (the proxy accepts, then forwards nothing: a host gone
/// without a reset, a server frozen after its connection broke). The round that finds its
/// connect hanging waits for it (up to its node timeout); no later `try_lock` or `unlock`
/// does, while a connection is opened in the background (each took the 2 s node timeout when
/// every round tried to connect on its own time). Once the node answers again, the background
/// connection brings it back into the rounds.
#[test]
fn a_node_whose_connections_hang_stays_off_the_path() {
    use redmutex_tests::{Mode, wait_until};
    const NODE_TIMEOUT: Duration = Duration::from_secs(2);
    let (servers, proxies, client) = five_behind_proxies();
    let mutex = client.mutex("quorum:hanging").ttl(Duration::from_secs(10));
    mutex.try_lock().unwrap().unlock().unwrap(); // pooled connections everywhere
    // The release ends at its quorum: the last node's may still be in the proxy, which would
    // drop it once it blackholes, and that node would keep the key for the whole TTL.
    assert!(
        released_everywhere(&servers, "quorum:hanging", Duration::from_secs(2)),
        "the release reached every node"
    );
    proxies[4].set_mode(Mode::Blackhole);
    // The server drops the connections; the proxy closes the client's side.
    let _: () = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("normal")
        .query(&mut servers[4].conn())
        .unwrap();
    assert!(
        wait_until(Duration::from_secs(2), || proxies[4].threads() == 0),
        "the proxy closed the client's side"
    );
    // The round that finds the connect hanging.
    mutex.try_lock().unwrap().unlock().unwrap();
    redmutex_tests::three_cycles_each_under(&mutex, NODE_TIMEOUT / 4);
    proxies[4].set_mode(Mode::Pass);
    let back = wait_until(Duration::from_secs(5), || {
        let guard = mutex.try_lock().unwrap();
        let token = guard.token().to_vec();
        let there = wait_until(Duration::from_millis(200), || {
            let v: Option<Vec<u8>> = servers[4].conn().get("quorum:hanging").unwrap();
            v == Some(token.clone())
        });
        guard.unlock().unwrap();
        there
    });
    assert!(back, "the node never came back into the rounds");
}

/// An error reports every node, also those whose answer the round did not wait for: three of
/// five nodes fail the acquire at once (its fence counter holds a list there: `WRONGTYPE`), so
/// no quorum can grant and the round ends without the two nodes that answer 600 ms late.
/// The error still has one report per node, in node order, the late ones "not waited for"
/// (not "unreachable": nothing says they are).
#[test]
fn an_error_reports_every_node_also_those_not_waited_for() {
    use redmutex_tests::Mode;
    const NAME: &str = "quorum:reports";
    let (servers, proxies, client) = five_behind_proxies();
    let mutex = client.mutex(NAME).ttl(Duration::from_secs(10));
    mutex.try_lock().unwrap().unlock().unwrap(); // pooled connections everywhere
    let fence = format!("{{{NAME}}}:fence");
    for s in &servers[..3] {
        let _: () = s.conn().del(&fence).unwrap();
        let _: () = s.conn().rpush(&fence, "not a counter").unwrap();
    }
    proxies[3..]
        .iter()
        .for_each(|p| p.set_mode(Mode::Delay(Duration::from_millis(600))));
    let err = match mutex.try_lock() {
        Err(TryLockError::Error(e)) => e,
        other => panic!("{other:?}"),
    };
    assert_eq!(err.nodes().len(), servers.len(), "{err}");
    for (i, report) in err.nodes().iter().enumerate() {
        assert_eq!(report.node, proxies[i].url(), "report {i}: {err}");
        let late = report.outcome == NodeOutcome::NotWaitedFor;
        assert_eq!(late, i >= 3, "report {i}: {err}");
    }
    assert!(err.to_string().contains("not waited for"), "{err}");
}

/// A waiting writer whose round is granted by some nodes and refused by a quorum undoes its
/// grants, and stays announced as a waiter on those nodes too. The grant removes its
/// announcement there, so the undo must put it back. Otherwise readers are no longer told
/// to queue behind the writer on those nodes, and can keep taking a quorum of read holds
/// while it waits. Here three of five nodes are held by a foreign value, and the other two
/// grant every round of the waiting `lock()`, then take the grant back.
#[test]
fn a_waiter_stays_announced_where_its_split_grants_were_undone() {
    use redmutex_tests::wait_until;
    let servers = RedisServers::start(5);
    let client = Client::builder().nodes(servers.urls()).build().unwrap();
    let name = "split:announced";
    let mut conns: Vec<_> = servers.iter().map(RedisServer::conn).collect();
    for conn in &mut conns[..3] {
        let _: () = redis::cmd("SET")
            .arg(name)
            .arg("foreign")
            .arg("PX")
            .arg(20_000)
            .query(conn)
            .unwrap();
    }
    let waiting = std::thread::spawn({
        let mutex = client.mutex(name).ttl(Duration::from_secs(10));
        move || mutex.try_lock_for(Duration::from_secs(2)).map(drop)
    });
    let waitq = format!("{{{name}}}:waitq");
    let announced = |conn: &mut redis::Connection| -> Vec<String> {
        redis::cmd("ZRANGE")
            .arg(&waitq)
            .arg(0)
            .arg(-1)
            .query(conn)
            .unwrap()
    };
    // The refusing nodes hold the announcement from the first round on.
    assert!(
        wait_until(Duration::from_millis(1500), || !announced(&mut conns[0])
            .is_empty()),
        "the waiter never announced itself where it was refused"
    );
    let waiter = announced(&mut conns[0]);
    // Rounds after the first one have waited: the free nodes grant them (and the undo
    // follows). The announcement must be there too.
    let everywhere = wait_until(Duration::from_millis(1500), || {
        conns[3..].iter_mut().all(|c| announced(c) == waiter)
    });
    let free: Vec<Vec<String>> = conns[3..].iter_mut().map(announced).collect();
    assert!(
        everywhere,
        "the waiter {waiter:?} is not announced where its grants were undone: {free:?}"
    );
    assert!(matches!(
        waiting.join().unwrap(),
        Err(TryLockError::WouldBlock)
    ));
}
