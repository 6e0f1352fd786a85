//! Faults between the client and Redis: nodes refused, frozen or blackholed by a
//! TCP fault proxy; replies dropped or delayed; and every way a guard can be dropped.

use std::time::{Duration, Instant};

use redis::Commands;
use redmutex::{Client, ErrorKind, NodeOutcome, drift};
use redmutex_tests::history;
use redmutex_tests::{ClosedPort, FaultProxy, Mode, RedisServer, RedisServers, wait_until};

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn ping(conn: &mut redis::Connection) -> redis::RedisResult<String> {
    redis::cmd("PING").query(conn)
}

fn proxied_conn(proxy: &FaultProxy, timeout: Duration) -> redis::Connection {
    let conn = redis::Client::open(proxy.url())
        .unwrap()
        .get_connection_with_timeout(Duration::from_secs(2))
        .unwrap();
    conn.set_read_timeout(Some(timeout)).unwrap();
    conn
}

/// The proxy itself: each mode does what it says, and its threads end when it drops.
#[test]
fn the_fault_proxy_passes_blackholes_drops_and_delays() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(&server.addr());
    let mut conn = proxied_conn(&proxy, Duration::from_millis(300));
    assert_eq!(ping(&mut conn).unwrap(), "PONG");

    proxy.set_mode(Mode::Blackhole);
    assert!(
        redis::cmd("SET")
            .arg("bh")
            .arg(1)
            .query::<()>(&mut conn)
            .is_err()
    );
    let v: Option<i64> = server.conn().get("bh").unwrap();
    assert_eq!(v, None, "a blackholed request must not reach Redis");

    proxy.set_mode(Mode::Pass);
    drop(conn);
    let mut conn = proxied_conn(&proxy, Duration::from_millis(300));
    proxy.set_mode(Mode::DropReplies);
    assert!(
        redis::cmd("SET")
            .arg("dr")
            .arg(1)
            .query::<()>(&mut conn)
            .is_err()
    );
    let v: Option<i64> = server.conn().get("dr").unwrap();
    assert_eq!(v, Some(1), "a request whose reply is dropped is executed");

    proxy.set_mode(Mode::Pass);
    drop(conn);
    let mut conn = proxied_conn(&proxy, Duration::from_secs(2));
    proxy.set_mode(Mode::Delay(Duration::from_millis(150)));
    let started = Instant::now();
    assert_eq!(ping(&mut conn).unwrap(), "PONG");
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(150), "{took:?}");
    assert!(took < Duration::from_secs(1), "{took:?}");
    assert!(proxy.first_request_since(started).is_some());

    proxy.set_mode(Mode::Pass);
    drop(conn);
    // Connections that closed end their threads.
    assert!(wait_until(Duration::from_secs(2), || proxy.threads() == 0));
    let _keep_one_open = proxied_conn(&proxy, Duration::from_millis(300));
    // Per connection: a reader and a writer each way.
    assert!(wait_until(Duration::from_secs(2), || proxy.threads() == 4));
    // Its listening socket is closed: told apart by its inode, since this binary's other
    // tests bind ports meanwhile and one took the freed port within microseconds (twice).
    let port = proxy.addr().port();
    let listening = || tcp_sockets(|local, _, state| local == port && state == LISTEN);
    let listener = listening();
    assert_eq!(listener.len(), 1, "the proxy's listening socket");
    // Closed by the drop, though it can be seen a moment longer: a `redis-server` another test
    // starts meanwhile holds a copy of every descriptor between its fork and its exec.
    drop(proxy);
    let closed = wait_until(Duration::from_secs(2), || {
        !listening().contains(&listener[0])
    });
    assert!(closed, "still listening");
}

/// 3 of 5 nodes refused, frozen or blackholed: `NoQuorum` within the wait plus one node
/// timeout plus 100 ms (the bound of the Redlock issue's acceptance; this suite's other tests
/// load the same 2 cores meanwhile), and a wait without deadline ends too (within the connect
/// timeout).
#[test]
fn no_quorum_in_time_with_three_of_five_refused_frozen_or_blackholed() {
    const NODE_TIMEOUT: Duration = Duration::from_millis(50);
    const WAIT: Duration = Duration::from_millis(400);
    const CONNECT: Duration = Duration::from_millis(700);
    const SLACK: Duration = Duration::from_millis(100);
    let servers = RedisServers::start(5);
    let proxies = FaultProxy::in_front_of(&servers);
    let proxied: Vec<String> = proxies.iter().map(FaultProxy::url).collect();
    let closed: Vec<ClosedPort> = (0..3).map(|_| ClosedPort::new()).collect();
    let mut refused = servers.urls();
    for (u, c) in refused.iter_mut().zip(&closed) {
        *u = c.url();
    }
    for fault in ["refused", "frozen", "blackholed"] {
        let urls = if fault == "refused" {
            &refused
        } else {
            &proxied
        };
        let client = Client::builder()
            .nodes(urls.iter().map(String::as_str))
            .node_timeout(NODE_TIMEOUT)
            .connect_timeout(CONNECT)
            .build()
            .unwrap();
        let mutex = client.mutex(format!("{fault}:lock"));
        if fault != "refused" {
            // Pooled connections everywhere first: the fault hits established connections.
            mutex.try_lock().unwrap().unlock().unwrap();
        }
        match fault {
            "frozen" => servers.iter().take(3).for_each(RedisServer::pause),
            "blackholed" => proxies
                .iter()
                .take(3)
                .for_each(|p| p.set_mode(Mode::Blackhole)),
            _ => {}
        }
        let started = Instant::now();
        let err = mutex.try_lock_for(WAIT).unwrap_err();
        let bounded = started.elapsed();
        assert_eq!(err.kind(), ErrorKind::NoQuorum, "{fault}: {err}");
        assert!(
            err.nodes()
                .iter()
                .take(3)
                .all(|r| matches!(r.outcome, NodeOutcome::Unreachable(_))),
            "{fault}: {err}"
        );
        // No deadline: the outage is reported after the connect timeout.
        let started = Instant::now();
        let err = mutex.lock().unwrap_err();
        let unbounded = started.elapsed();
        assert_eq!(err.kind(), ErrorKind::NoQuorum, "{fault}: {err}");
        eprintln!(
            "{fault}: try_lock_for({WAIT:?}) -> NoQuorum after {:.1} ms, lock() after {:.1} ms \
             (node timeout {NODE_TIMEOUT:?}, connect timeout {CONNECT:?})",
            ms(bounded),
            ms(unbounded)
        );
        assert!(
            bounded <= WAIT + NODE_TIMEOUT + SLACK,
            "{fault}: {bounded:?}"
        );
        // Never hangs: bounded by the connect timeout (looser slack: several attempts).
        assert!(
            unbounded <= CONNECT + NODE_TIMEOUT + 3 * SLACK,
            "{fault}: {unbounded:?}"
        );
        match fault {
            "frozen" => servers.iter().take(3).for_each(RedisServer::resume),
            "blackholed" => proxies.iter().take(3).for_each(|p| p.set_mode(Mode::Pass)),
            _ => continue,
        }
        // Healed: the same client locks again.
        mutex
            .try_lock_for(Duration::from_secs(5))
            .unwrap()
            .unlock()
            .unwrap();
    }
}

/// A fresh client opens its first connections before its first round, within the connect
/// timeout, but only until a quorum of nodes is ready: a minority that hangs (a host gone
/// without a reset, a frozen server) is left to finish in the background and costs the first
/// lock call no more than any later one, not the 3 s connect timeout.
#[test]
fn a_fresh_client_waits_for_a_quorum_of_first_connections_not_for_a_hung_node() {
    let servers = RedisServers::start(5);
    let proxies = FaultProxy::in_front_of(&servers);
    proxies[0].set_mode(Mode::Blackhole);
    servers[1].pause();
    let client = Client::builder()
        .nodes(proxies.iter().map(FaultProxy::url))
        .node_timeout(Duration::from_millis(50))
        .connect_timeout(Duration::from_secs(3))
        .build()
        .unwrap();
    let started = Instant::now();
    let result = client.mutex("fresh-minority:lock").try_lock();
    let took = started.elapsed();
    servers[1].resume();
    let guard = result.unwrap_or_else(|e| panic!("after {took:?}: {e}"));
    eprintln!(
        "a fresh client's try_lock with 2 of 5 nodes hung: {:.1} ms",
        ms(took)
    );
    assert!(took < Duration::from_secs(1), "{took:?}");
    guard.unlock().unwrap();
}

/// The lock key's value on every server (read directly, not through a proxy).
fn values(servers: &RedisServers, key: &str) -> Vec<Option<String>> {
    servers
        .iter()
        .map(|s| s.conn().get::<_, Option<String>>(key).unwrap())
        .collect()
}

/// The fence counter on every server: it grows only where an acquire's `SET NX` succeeded.
fn fences(servers: &RedisServers, key: &str) -> Vec<u64> {
    let fence = format!("{{{key}}}:fence");
    servers
        .iter()
        .map(|s| s.conn().get::<_, Option<u64>>(&fence).unwrap().unwrap_or(0))
        .collect()
}

/// Replies dropped, or delayed past the node timeout, on 3 of 5 nodes: the acquire fails, but
/// Redis executed it there (the token was stored). Once healed, no key with a failed
/// attempt's token survives — within one TTL at the latest; in fact the undo queued behind a
/// late request removes it at once.
#[test]
fn dropped_or_delayed_replies_leave_no_key_of_a_failed_attempt() {
    const TTL: Duration = Duration::from_secs(3);
    const NODE_TIMEOUT: Duration = Duration::from_millis(50);
    let servers = RedisServers::start(5);
    let proxies = FaultProxy::in_front_of(&servers);
    let client = Client::builder()
        .nodes(proxies.iter().map(FaultProxy::url))
        .owner("late-replies")
        .node_timeout(NODE_TIMEOUT)
        .connect_timeout(Duration::from_secs(3))
        .build()
        .unwrap();
    for fault in [
        Mode::DropReplies,
        Mode::Delay(3 * NODE_TIMEOUT),
        // Past the deadline by more than the gather's short grace reads after a slow node
        // (1 ms socket timeouts, which the kernel rounds up to its timer tick).
        Mode::Delay(NODE_TIMEOUT + Duration::from_millis(30)),
    ] {
        let key = format!("late:{fault:?}");
        let mutex = client.mutex(&key).ttl(TTL);
        mutex.try_lock().unwrap().unlock().unwrap(); // pooled connections everywhere
        let set_faulty = |mode| proxies.iter().take(3).for_each(|p| p.set_mode(mode));
        let mut tries = 0;
        let (err, before) = loop {
            tries += 1;
            let before = fences(&servers, &key);
            set_faulty(fault);
            match mutex.try_lock_for(Duration::from_millis(300)) {
                Err(err) => break (err, before),
                // Delayed replies are read in time when this thread was paused past their
                // arrival (a loaded machine): a grant within its validity, rightly taken.
                // That attempt did not fail; it is let go and the fault tried again.
                Ok(guard) if matches!(fault, Mode::Delay(_)) && tries < 5 => {
                    set_faulty(Mode::Pass);
                    guard.unlock().unwrap();
                }
                Ok(guard) => panic!("{fault:?}: granted {tries} times: {guard:?}"),
            }
        };
        assert_eq!(err.kind(), ErrorKind::NoQuorum, "{fault:?}: {err}");
        set_faulty(Mode::Pass);
        let healed = Instant::now();
        let after = fences(&servers, &key);
        // The fault really happened: the faulty nodes granted (and counted) the attempts
        // whose answers never arrived in time.
        let grants: Vec<u64> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
        assert!(grants[..3].iter().all(|g| *g >= 1), "{fault:?}: {grants:?}");
        let ours =
            |v: &Option<String>| v.as_deref().is_some_and(|v| v.starts_with("late-replies:"));
        let gone = wait_until(TTL, || !values(&servers, &key).iter().any(ours));
        let took = healed.elapsed();
        eprintln!(
            "{fault:?} on 3 of 5: NoQuorum; {} late grants on the faulty nodes; no key of a \
             failed attempt {:.1} ms after healing (TTL {TTL:?})",
            grants[..3].iter().sum::<u64>(),
            ms(took)
        );
        assert!(gone, "{fault:?}: left behind: {:?}", values(&servers, &key));
        // Healed: the lock works again.
        mutex
            .try_lock_for(Duration::from_secs(5))
            .unwrap()
            .unlock()
            .unwrap();
    }
}

/// Replies delayed by D (below the node timeout): the lock is granted, and the validity it
/// reports counts from before the request left, so it excludes the time the replies took:
/// `valid_until <= (a request first seen whole by a proxy) + TTL - drift`, and what is left at
/// return is at most `TTL - D - drift`. Same for an explicit extension.
#[test]
fn validity_excludes_the_time_delayed_replies_took() {
    const TTL: Duration = Duration::from_millis(1000);
    const DELAY: Duration = Duration::from_millis(40);
    let servers = RedisServers::start(5);
    let proxies = FaultProxy::in_front_of(&servers);
    let client = Client::builder()
        .nodes(proxies.iter().map(FaultProxy::url))
        .node_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let mutex = client.mutex("delayed:lock").ttl(TTL).auto_renew(false);
    mutex.try_lock().unwrap().unlock().unwrap(); // pooled connections everywhere
    // Delayed on all but one node: a quorum needs at least two delayed answers.
    proxies
        .iter()
        .skip(1)
        .for_each(|p| p.set_mode(Mode::Delay(DELAY)));
    let first_request = |since: Instant| {
        proxies
            .iter()
            .filter_map(|p| p.first_request_since(since))
            .min()
            .expect("the request went through the proxies")
    };
    let allowed = TTL - drift(TTL);
    for round in 0..3 {
        let start = Instant::now();
        let guard = mutex.try_lock().unwrap();
        let returned = Instant::now();
        let valid_until = guard.valid_until();
        let sent = first_request(start);
        let took = returned - start;
        let left = valid_until.saturating_duration_since(returned);
        // How far the validity reaches past `start + TTL - drift`: the time between our
        // `start` and the library's own `t0`, taken just before it sends (a few microseconds,
        // or as long as this thread was paused in between: shown, not asserted).
        let past_start = (valid_until - start).as_secs_f64() - allowed.as_secs_f64();
        eprintln!(
            "round {round}: acquire took {:.1} ms with replies delayed {DELAY:?}; {:.1} ms of \
             validity left at return (TTL {TTL:?}, drift {:?}); valid_until - start - (TTL - \
             drift) = {:+.3} ms",
            ms(took),
            ms(left),
            drift(TTL),
            past_start * 1e3
        );
        assert!(took >= DELAY, "the delay did not happen: {took:?}");
        assert!(
            valid_until <= sent + allowed,
            "validity counted from after the request left"
        );
        assert!(left <= allowed - DELAY, "{left:?} left");

        let start = Instant::now();
        guard.extend(TTL).unwrap();
        let returned = Instant::now();
        let sent = first_request(start);
        assert!(returned - start >= DELAY);
        assert!(guard.valid_until() <= sent + allowed);
        assert!(guard.valid_until().saturating_duration_since(returned) <= allowed - DELAY);
        guard.unlock().unwrap();
    }
}

/// How many EVALSHA calls the server ran (every acquire, extend and release is one).
fn evalsha_calls(server: &RedisServer) -> u64 {
    let stats = server.info("commandstats", "cmdstat_evalsha");
    stats.map_or(0, |s| {
        let calls = s
            .strip_prefix("calls=")
            .and_then(|rest| rest.split(',').next());
        calls.unwrap().parse().unwrap()
    })
}

/// After a guard is gone, nothing renews its token: a key planted with that token and a lease
/// of 10×TTL keeps running down (an extension would set it back to one TTL), and the server
/// runs no script at all during 2×TTL (6 renewal periods).
fn assert_never_renewed(server: &RedisServer, key: &str, token: &[u8], ttl: Duration) {
    let mut conn = server.conn();
    let planted = 10 * ttl.as_millis() as u64;
    let _: () = redis::cmd("SET")
        .arg(key)
        .arg(token)
        .arg("PX")
        .arg(planted)
        .query(&mut conn)
        .unwrap();
    let scripts = evalsha_calls(server);
    let end = Instant::now() + 2 * ttl;
    let mut last = i64::MAX;
    while Instant::now() < end {
        let pttl: i64 = redis::cmd("PTTL").arg(key).query(&mut conn).unwrap();
        assert!(pttl <= last, "{key}: PTTL went up from {last} to {pttl}");
        assert!(
            pttl > 7 * ttl.as_millis() as i64,
            "{key}: renewed to {pttl} ms"
        );
        last = pttl;
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(evalsha_calls(server), scripts, "{key}: a script ran");
    let _: () = conn.del(key).unwrap();
}

/// A guard dropped at the end of its scope or by panic unwinding releases the lock at once and
/// is never renewed after; a process that exits while holding leaves its key to expire
/// within one TTL, and nothing renews it. (A C guard freed without unlock:
/// `test_guard_free_releases_the_lock` in `tests/c/test_lock.c`, no callback after it in
/// `tests/c/test_lost.c`; Python `with` plus an exception: `test_with_releases_and_reraises`
/// in `py/tests/test_acceptance.py`.)
#[test]
fn a_guard_dropped_any_way_is_never_renewed_and_its_key_goes() {
    const TTL: Duration = Duration::from_millis(300);
    let server = RedisServer::start();
    let client = Client::open(&server.url()).unwrap();
    let get = |key: &str| -> Option<Vec<u8>> { server.conn().get(key).unwrap() };

    // Scope end.
    let token = {
        let guard = client.mutex("drop:scope").ttl(TTL).lock().unwrap();
        assert!(wait_until(Duration::from_secs(2), || guard.renewals() >= 1));
        assert_eq!(get("drop:scope").as_deref(), Some(guard.token()));
        guard.token().to_vec()
    };
    assert_eq!(get("drop:scope"), None, "released at scope end");
    assert_never_renewed(&server, "drop:scope", &token, TTL);

    // Panic unwinding.
    let mut token = Vec::new();
    let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let guard = client.mutex("drop:panic").ttl(TTL).lock().unwrap();
        assert!(wait_until(Duration::from_secs(2), || guard.renewals() >= 1));
        token = guard.token().to_vec();
        panic!("a panic while holding the lock");
    }));
    assert!(unwound.is_err());
    assert_eq!(get("drop:panic"), None, "released while unwinding");
    assert_never_renewed(&server, "drop:panic", &token, TTL);

    // Process exit while holding (`std::process::exit`: no destructor runs).
    let dir = redmutex_tests::TempDir::new("redmutex-exit");
    let history = dir.path().join("exit.jsonl");
    let ttl_ms = TTL.as_millis().to_string();
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_torture"))
        .args(["--urls", &server.url(), "--data-url", &server.url()])
        .args(["--key", "drop:exit", "--client", "exiter"])
        .args(["--ttl-ms", &ttl_ms, "--mode", "exit-holding"])
        .arg("--history")
        .arg(&history)
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    let exited_ns = history::mono_ns();
    assert!(status.success(), "{status}");
    let events = history::read_histories(&[&history]).unwrap();
    let used = events
        .iter()
        .find(|e| e.event == history::Kind::Use)
        .expect("it used the lock before exiting");
    assert!(events.iter().all(|e| e.event != history::Kind::Release));
    let key_then = get("drop:exit");
    assert_eq!(
        key_then.as_deref(),
        Some(used.token.as_bytes()),
        "the exit left the lock in place (no release)"
    );
    let gone = wait_until(2 * TTL, || get("drop:exit").is_none());
    let gone_ns = history::mono_ns();
    let after_use = Duration::from_nanos((gone_ns - used.t_ns) as u64);
    eprintln!(
        "process exit while holding: key gone {:.1} ms after its last use (exit observed \
         {:.1} ms after it), TTL {TTL:?}",
        ms(after_use),
        (exited_ns - used.t_ns) as f64 / 1e6
    );
    assert!(gone, "the key outlived 2×TTL");
    assert!(
        after_use <= TTL + Duration::from_millis(20),
        "key gone {after_use:?} after the last use"
    );
    assert_never_renewed(&server, "drop:exit", used.token.as_bytes(), TTL);
}

/// A server whose connections take longer to open than a request may take (a distant server,
/// TLS): each attempt's deadline cuts the connection short, but it is finished in the
/// background within the connect timeout and pooled, so a later attempt gets through
/// instead of timing out the same way until the connect timeout is spent.
#[test]
fn a_connection_slower_to_open_than_the_node_timeout_is_still_made() {
    // A client through a proxy that delays every reply: 50 ms per request, 2 s to connect.
    let slow_client = |server: &RedisServer, delay_ms: u64, password: Option<&str>| {
        let proxy = FaultProxy::start(&server.addr());
        proxy.set_mode(Mode::Delay(Duration::from_millis(delay_ms)));
        let url = match password {
            None => proxy.url(),
            Some(pw) => proxy.url().replace("redis://", &format!("redis://:{pw}@")),
        };
        let client = Client::builder()
            .node(url)
            .node_timeout(Duration::from_millis(50))
            .connect_timeout(Duration::from_secs(2))
            .build()
            .unwrap();
        (proxy, client)
    };
    let lock = |client: &Client| {
        let started = Instant::now();
        let result = client
            .mutex("slow-open:lock")
            .try_lock_for(Duration::from_secs(2));
        (started.elapsed(), result)
    };

    let kill_connections = |server: &RedisServer| {
        let _: redis::Value = redis::cmd("CLIENT")
            .arg(&["KILL", "TYPE", "normal", "SKIPME", "yes"])
            .query(&mut server.conn())
            .unwrap();
    };

    // Opening costs one delayed reply (the setup), two with a password (AUTH first); a
    // request costs one. A fresh client's first connection may take the connect timeout:
    // even a `try_lock`, which waits for no holder, gets the lock.
    let server = RedisServer::start_with(&["--requirepass", "pw"]);
    let (_proxy, client) = slow_client(&server, 35, Some("pw"));
    let guard = client.mutex("slow-open:lock").try_lock().unwrap();
    guard.unlock().unwrap();
    // Later connections are opened within a round's 50 ms. When that cuts one short (70 ms
    // here), it is finished in the background, and a waiting call takes the lock on it.
    kill_connections(&server);
    let (took, result) = lock(&client);
    let guard = result.unwrap_or_else(|e| panic!("after {took:?}: {e}"));
    guard.unlock().unwrap();

    // A connection opened in 35 ms leaves 15 for a 35 ms request: rather than send it and
    // lose the connection to the timeout at every attempt, the round pools it for the next.
    let server = RedisServer::start();
    let (_proxy, client) = slow_client(&server, 35, None);
    client
        .mutex("slow-open:lock")
        .try_lock()
        .unwrap()
        .unlock()
        .unwrap();
    kill_connections(&server);
    let (took, result) = lock(&client);
    let guard = result.unwrap_or_else(|e| panic!("after {took:?}: {e}"));
    guard.unlock().unwrap();

    // When the connection opened in the background fails, later attempts say why instead of
    // timing out: a wrong password is an authentication error. Here even the AUTH reply
    // comes after the node timeout.
    let locked = RedisServer::start_with(&["--requirepass", "right-one"]);
    let (_proxy, client) = slow_client(&locked, 80, Some("wrong-one"));
    let (took, result) = lock(&client);
    let err = result.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Auth, "after {took:?}: {err}");
    assert!(took < Duration::from_secs(1), "{took:?}: {err}");
}

/// `/proc/net/tcp`'s state of a listening socket, and of an open connection.
const LISTEN: u8 = 0x0A;
const ESTABLISHED: u8 = 0x01;

/// The inodes of this machine's IPv4 TCP sockets whose local port, remote port and state pass
/// `keep` (the kernel changes a socket's state as it is closed, at once).
fn tcp_sockets(keep: impl Fn(u16, u16, u8) -> bool) -> Vec<u64> {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap();
    let port = |addr: &str| u16::from_str_radix(addr.rsplit(':').next().unwrap_or(""), 16).ok();
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let (local, remote) = (port(f.get(1)?)?, port(f.get(2)?)?);
            let state = u8::from_str_radix(f.get(3)?, 16).ok()?;
            keep(local, remote, state).then(|| f.get(9)?.parse().ok())?
        })
        .collect()
}

/// The open TCP connections to `port` (client ends: the tests' servers and proxies listen on
/// ports of their own).
fn connections_to(port: u16) -> usize {
    tcp_sockets(|_, remote, state| remote == port && state == ESTABLISHED).len()
}

/// Dropping a client's last handle closes its pooled connections before it returns, also
/// while one of its connections is still being opened in the background (its setup is never
/// answered: *a reply that never comes*). The thread opening it holds the server's address,
/// not the client's pool, and closes what it opens once it sees the client gone. Otherwise
/// the pool lives on in that thread until it finishes, and a program that frees its client
/// and exits ends with the pool being torn down on another thread.
#[test]
fn dropping_a_client_closes_its_pool_while_a_connection_opens_in_the_background() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(&server.addr());
    let port = proxy.addr().port();
    let client = Client::builder()
        .node(proxy.url())
        .node_timeout(Duration::from_millis(100))
        .connect_timeout(Duration::from_secs(3))
        .build()
        .unwrap();
    let lock = client.mutex("bg-open:lock");
    lock.try_lock().unwrap().unlock().unwrap();
    // The pooled connection goes; the next one's setup is swallowed: the attempt gives up at
    // its node timeout and the connection goes on opening in the background.
    let _: redis::Value = redis::cmd("CLIENT")
        .arg(&["KILL", "TYPE", "normal", "SKIPME", "yes"])
        .query(&mut server.conn())
        .unwrap();
    assert!(wait_until(Duration::from_secs(2), || connections_to(port) == 0));
    proxy.set_mode(Mode::Blackhole);
    let started = Instant::now();
    let err = lock.try_lock().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Connection, "{err}");
    // The attempt's setup arrived first; the background one's comes a node timeout later.
    let attempt = proxy.first_request_since(started).unwrap();
    assert!(
        wait_until(Duration::from_secs(2), || proxy
            .first_request_since(attempt + Duration::from_millis(50))
            .is_some()),
        "no connection was opened in the background"
    );
    proxy.set_mode(Mode::Pass);
    // A connection opened and pooled meanwhile. (The request written on the killed pooled
    // connection may have run, for all the client can tell: the background clean-up of its
    // grant may hold one more.)
    lock.try_lock().unwrap().unlock().unwrap();
    let open = connections_to(port);
    assert!(
        open >= 2,
        "one pooled connection and one opening in the background: {open}"
    );

    drop(lock);
    drop(client);
    assert!(
        connections_to(port) < open,
        "the dropped client's pooled connection is still open"
    );
    assert!(
        wait_until(Duration::from_secs(5), || connections_to(port) == 0),
        "the connection opened in the background for a dropped client stays open"
    );
}
