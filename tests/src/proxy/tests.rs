//! Each mode against a real `redis-server`: what Redis ran, and what the client saw.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use super::{FaultProxy, Mode};
use crate::{RedisServer, wait_until};

/// A RESP command, as a client sends it.
fn command(args: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n{a}\r\n", a.len()).as_bytes());
    }
    out
}

/// A raw client connection through the proxy, with a read timeout.
fn client(proxy: &FaultProxy, read_timeout: Duration) -> TcpStream {
    let c = TcpStream::connect(proxy.addr()).expect("connect to the proxy");
    c.set_read_timeout(Some(read_timeout)).unwrap();
    c
}

/// What the client receives before the connection ends or `timeout` passes, and whether
/// it ended (closed or reset by the other side).
fn read_all(c: &mut TcpStream, timeout: Duration) -> (Vec<u8>, bool) {
    let end = Instant::now() + timeout;
    let mut got = Vec::new();
    let mut buf = [0u8; 256];
    while Instant::now() < end {
        match c.read(&mut buf) {
            Ok(0) => return (got, true),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => return (got, true),
        }
    }
    (got, false)
}

/// One reply line (bounded wait).
fn reply(c: &mut TcpStream) -> Vec<u8> {
    let mut reply = Vec::new();
    assert!(
        wait_until(Duration::from_secs(5), || {
            reply.extend(read_all(c, Duration::from_millis(50)).0);
            reply.ends_with(b"\r\n")
        }),
        "no reply: {reply:?}"
    );
    reply
}

/// A server, a proxy in front of it in `mode`, and a raw client of the proxy that has sent
/// `args`.
fn sent_through(mode: Mode, args: &[&str]) -> (RedisServer, FaultProxy, TcpStream) {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(&server.addr());
    proxy.set_mode(mode);
    let mut c = client(&proxy, Duration::from_millis(50));
    c.write_all(&command(args)).unwrap();
    (server, proxy, c)
}

fn counter(server: &RedisServer, key: &str) -> Option<i64> {
    redis::cmd("GET")
        .arg(key)
        .query(&mut server.conn())
        .unwrap()
}

/// A request that arrives after its sender gave up: the client writes `SET`, waits in vain
/// for the reply, closes its connection; Redis runs the `SET` afterwards, at the delay.
#[test]
fn delay_requests_delivers_a_request_after_its_client_closed() {
    const DELAY: Duration = Duration::from_millis(400);
    let sent = Instant::now();
    let (server, _proxy, mut c) = sent_through(Mode::DelayRequests(DELAY), &["SET", "late", "1"]);
    let (reply, _) = read_all(&mut c, Duration::from_millis(100));
    assert!(reply.is_empty(), "a reply came before the delay: {reply:?}");
    drop(c);
    assert_eq!(
        counter(&server, "late"),
        None,
        "Redis ran it before the delay"
    );

    assert!(
        wait_until(Duration::from_secs(5), || counter(&server, "late")
            == Some(1)),
        "the request was never delivered after the client closed"
    );
    let ran = sent.elapsed();
    assert!(ran >= DELAY, "ran {ran:?} after it was sent");
    eprintln!("the SET ran {ran:?} after it was sent (delay {DELAY:?}), after its client left");
}

/// A node slow on one kind of request: the request with the needle is held, the one
/// before it passes at once, and the one behind it waits behind it, in order.
#[test]
fn delay_requests_with_holds_only_the_requests_with_the_needle() {
    const DELAY: Duration = Duration::from_millis(400);
    let (server, _proxy, mut c) =
        sent_through(Mode::DelayRequestsWith(b"held", DELAY), &["INCR", "before"]);
    assert_eq!(reply(&mut c), b":1\r\n");
    let sent = Instant::now();
    c.write_all(&command(&["INCR", "held"])).unwrap();
    c.write_all(&command(&["INCR", "behind"])).unwrap();
    let mut got = Vec::new();
    assert!(
        wait_until(Duration::from_secs(5), || {
            got.extend(read_all(&mut c, Duration::from_millis(20)).0);
            got.len() >= 8
        }),
        "replies {got:?}"
    );
    assert_eq!(got, b":1\r\n:1\r\n", "both replies, in order");
    let took = sent.elapsed();
    assert!(
        took >= DELAY,
        "the held request was answered after {took:?}"
    );
    assert_eq!(counter(&server, "behind"), Some(1));
}

/// A retry of something that already ran: one `INCR`, one reply, two increments.
#[test]
fn duplicate_runs_a_request_twice_and_answers_once() {
    let (server, proxy, mut c) = sent_through(Mode::Duplicate, &["INCR", "twice"]);
    let got = reply(&mut c);
    assert!(
        got == b":1\r\n" || got == b":2\r\n",
        "one reply to the client: {got:?}"
    );
    assert!(
        wait_until(Duration::from_secs(5), || counter(&server, "twice")
            == Some(2)),
        "Redis ran it {:?} times",
        counter(&server, "twice")
    );
    assert_eq!(proxy.duplicated(), 1);
    // No reply beyond the one: the duplicate's answer went nowhere.
    let (more, _) = read_all(&mut c, Duration::from_millis(200));
    assert!(more.is_empty(), "{more:?}");

    // Back to Pass: once is once.
    proxy.set_mode(Mode::Pass);
    c.write_all(&command(&["INCR", "twice"])).unwrap();
    assert!(wait_until(Duration::from_secs(5), || counter(
        &server, "twice"
    ) == Some(3)));
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(counter(&server, "twice"), Some(3));
    assert_eq!(proxy.duplicated(), 1);
}

/// A reply that never comes, for a request that ran: the connection closes after the
/// request reached Redis and before the reply reached the client.
#[test]
fn cut_after_request_closes_the_connection_before_the_reply() {
    let (server, proxy, mut c) = sent_through(Mode::CutAfterRequest, &["INCR", "cut"]);
    let (got, ended) = read_all(&mut c, Duration::from_secs(5));
    assert!(got.is_empty(), "a reply reached the client: {got:?}");
    assert!(ended, "the connection was not closed");
    assert!(
        wait_until(Duration::from_secs(5), || counter(&server, "cut")
            == Some(1)),
        "Redis did not run the request"
    );
    assert_eq!(proxy.cut(), 1);

    // A new connection in Pass is answered.
    proxy.set_mode(Mode::Pass);
    let mut c = client(&proxy, Duration::from_millis(50));
    c.write_all(&command(&["INCR", "cut"])).unwrap();
    assert_eq!(reply(&mut c), b":2\r\n");
}
