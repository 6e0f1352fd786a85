use std::time::Duration;

use redis::{ConnectionLike, ErrorKind, RedisConnectionInfo, Value};

use super::Plain;
use crate::net::testing::Server;

fn connect(server: &Server, settings: &RedisConnectionInfo) -> redis::RedisResult<Plain> {
    Plain::connect(
        "127.0.0.1",
        server.port,
        None,
        settings,
        Duration::from_secs(2),
    )
}

/// As redis-rs's connection does, which the transport relies on: a reply whose read timed
/// out is dropped when it comes, never taken for the next request's.
#[test]
fn a_reply_whose_read_failed_is_dropped_when_it_comes() {
    let server = Server::start();
    let mut conn = connect(&server, &RedisConnectionInfo::default()).unwrap();
    conn.set_read_timeout(Some(Duration::from_millis(50)))
        .unwrap();
    let blpop = redis::cmd("BLPOP")
        .arg("plain:k")
        .arg(0.3)
        .get_packed_command();
    conn.send_packed_command(&blpop).unwrap();
    assert!(conn.recv_response().unwrap_err().is_timeout());
    conn.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let pong: String = redis::cmd("PING").query(&mut conn).unwrap();
    assert_eq!(pong, "PONG");
}

/// Replies that came in one read, and one larger than the buffer, each come out whole.
#[test]
fn replies_come_out_whole_however_they_were_read() {
    let server = Server::start();
    let mut conn = connect(&server, &RedisConnectionInfo::default()).unwrap();
    let big = vec![b'x'; 100_000];
    let mut pipe = redis::pipe();
    pipe.cmd("SET")
        .arg("plain:big")
        .arg(&big)
        .cmd("GET")
        .arg("plain:big");
    pipe.cmd("PING");
    conn.send_packed_command(&pipe.get_packed_pipeline())
        .unwrap();
    std::thread::sleep(Duration::from_millis(50)); // all three replies in the socket
    assert_eq!(conn.recv_response().unwrap(), Value::Okay);
    assert_eq!(conn.recv_response().unwrap(), Value::BulkString(big));
    assert_eq!(
        conn.recv_response().unwrap(),
        Value::SimpleString("PONG".into())
    );
    assert!(conn.holds(0) && !conn.holds(1));
}

/// A reply that frames but does not parse (a RESP3 double that is no number) is reported,
/// and the reply behind it comes out whole: nothing of the bad one stays in the parser.
#[cfg(unix)]
#[test]
fn a_reply_that_does_not_parse_leaves_the_next_one_whole() {
    use std::io::Write;
    let (ours, mut server) = std::os::unix::net::UnixStream::pair().unwrap();
    let by = super::Instant::now() + Duration::from_secs(2);
    let socket = super::Socket::unix(ours);
    let mut conn = Plain::over(socket, None, &RedisConnectionInfo::default(), by).unwrap();
    server.write_all(b",not a number\r\n:7\r\n").unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    assert!(conn.recv_response().is_err());
    assert_eq!(conn.recv_response().unwrap(), Value::Int(7));
}

/// The acquire pipelined behind a wait comes in the wait's own read: taking its reply
/// from what was read asks the kernel nothing, not even for the new read timeout.
#[cfg(unix)]
#[test]
fn a_reply_already_read_is_taken_without_setting_the_kernels_timeout() {
    use std::io::Write;
    let (ours, mut server) = std::os::unix::net::UnixStream::pair().unwrap();
    let by = super::Instant::now() + Duration::from_secs(2);
    let mut conn = Plain::over(
        super::Socket::unix(ours),
        None,
        &RedisConnectionInfo::default(),
        by,
    )
    .unwrap();
    server
        .write_all(b"*2\r\n$1\r\nk\r\n$1\r\n1\r\n:7\r\n")
        .unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    assert!(matches!(conn.recv_response(), Ok(Value::Array(_))));
    conn.set_read_timeout(Some(Duration::from_secs(3600)))
        .unwrap();
    assert_eq!(conn.recv_response().unwrap(), Value::Int(7));
    assert_eq!(
        conn.socket().kernel_read_timeout().unwrap(),
        Some(Duration::from_secs(2)),
        "taking a reply already read gave the kernel a timeout"
    );
}

/// The handshake: the password, the database, and redis-rs's error for a wrong password.
#[test]
fn the_handshake_authenticates_and_selects_as_redis_rs_does() {
    let server = Server::start();
    let mut admin = connect(&server, &RedisConnectionInfo::default()).unwrap();
    redis::cmd("CONFIG")
        .arg("SET")
        .arg("requirepass")
        .arg("s3cret")
        .query::<()>(&mut admin)
        .unwrap();
    let good = RedisConnectionInfo::default()
        .set_password("s3cret")
        .set_db(3);
    let mut conn = connect(&server, &good).unwrap();
    let info: String = redis::cmd("CLIENT").arg("INFO").query(&mut conn).unwrap();
    assert!(info.contains(" db=3 "), "{info}");
    assert_eq!(conn.get_db(), 3);

    let wrong = RedisConnectionInfo::default().set_password("wrong");
    let ours = connect(&server, &wrong).err().expect("a wrong password");
    let url = format!("redis://:wrong@127.0.0.1:{}", server.port);
    let theirs = redis::Client::open(url.as_str())
        .and_then(|c| c.get_connection())
        .err()
        .expect("a wrong password");
    assert_eq!(ours.kind(), ErrorKind::AuthenticationFailed);
    assert_eq!(ours.kind(), theirs.kind());
    assert_eq!(ours.to_string(), theirs.to_string());
}
