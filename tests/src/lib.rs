//! Test support for redmutex: real `redis-server` processes on free loopback ports, and small
//! helpers (bounded waits, scratch directories).
//!
//! Tests never mock Redis: a mock answers what its author expected, not what Redis does. A test
//! starts its own servers with [`RedisServer::start`] or [`RedisServers::start`] and injects
//! real faults with [`RedisServer::kill`], [`RedisServer::pause`] / [`RedisServer::resume`] and
//! [`RedisServer::restart`]. Every server is stopped by pid when its handle drops, including
//! when the test panics, and (on Linux) killed by the kernel if the test process itself dies.
//!
//! ```no_run
//! use redmutex_tests::RedisServer;
//!
//! let server = RedisServer::start();
//! let mut conn = server.conn();
//! let pong: String = redis::cmd("PING").query(&mut conn).unwrap();
//! assert_eq!(pong, "PONG");
//! ```

#![warn(missing_docs)]

mod closed_port;
pub mod cluster;
mod counters;
pub mod history;
mod nonsense;
pub mod proxy;
pub mod schedule;
mod sentinel;
mod server;
mod tempdir;
pub mod tls;
pub mod tls_topology;
pub mod torture;
pub mod workers;

pub use closed_port::ClosedPort;
pub use counters::Counters;
pub use nonsense::Nonsense;
pub use proxy::{FaultProxy, Mode};
pub use sentinel::Sentinel;
pub use server::{
    REDIS_SERVER_ENV, RedisServer, RedisServers, free_port, server_binary, server_version,
    tool_server, wait_until,
};
pub use tempdir::TempDir;

/// Three `try_lock` + `unlock` cycles of `mutex`, each call returning within `limit`: the
/// rounds of a client whose slow nodes are off their path.
pub fn three_cycles_each_under(mutex: &redmutex::Mutex, limit: std::time::Duration) {
    for round in 0..3 {
        let started = std::time::Instant::now();
        let guard = mutex.try_lock().unwrap();
        let took = started.elapsed();
        assert!(took < limit, "round {round}: try_lock took {took:?}");
        let started = std::time::Instant::now();
        guard.unlock().unwrap();
        let took = started.elapsed();
        assert!(took < limit, "round {round}: unlock took {took:?}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpStream;
    use std::time::Duration;

    fn ping(conn: &mut redis::Connection) -> redis::RedisResult<String> {
        redis::cmd("PING").query(conn)
    }

    /// Whether a process with this pid exists (zombies included).
    fn pid_exists(pid: u32) -> bool {
        // SAFETY: signal 0 only checks for existence.
        unsafe { libc::kill(pid as libc::pid_t, 0) == 0 }
    }

    #[test]
    fn start_answers_and_drop_stops_it() {
        let server = RedisServer::start();
        assert_ne!(server.port(), 6379);
        assert_eq!(server.url(), format!("redis://127.0.0.1:{}", server.port()));
        assert_eq!(server.addr(), format!("127.0.0.1:{}", server.port()));
        assert!(server.is_running());
        let mut conn = server.conn();
        assert_eq!(ping(&mut conn).unwrap(), "PONG");
        // Small, throw-away servers: no persistence.
        let save: Vec<String> = redis::cmd("CONFIG")
            .arg("GET")
            .arg("save")
            .query(&mut conn)
            .unwrap();
        assert_eq!(save, ["save", ""]);
        let aof: Vec<String> = redis::cmd("CONFIG")
            .arg("GET")
            .arg("appendonly")
            .query(&mut conn)
            .unwrap();
        assert_eq!(aof, ["appendonly", "no"]);

        let (pid, dir) = (server.pid(), server.dir().to_owned());
        assert!(dir.join("redis.log").exists());
        drop(server);
        assert!(!pid_exists(pid), "drop must kill and reap the server");
        assert!(!dir.exists(), "drop must remove the temp dir");
    }

    #[test]
    fn panicking_test_still_stops_server() {
        let mut pid = 0;
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let server = RedisServer::start();
            pid = server.pid();
            panic!("test failure while a server runs");
        }));
        assert!(result.is_err());
        assert_ne!(pid, 0);
        assert!(!pid_exists(pid));
    }

    #[test]
    fn pause_and_resume() {
        let server = RedisServer::start();
        let mut conn = server.conn();
        conn.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        assert_eq!(ping(&mut conn).unwrap(), "PONG");

        server.pause();
        assert!(server.is_running(), "a paused server is still running");
        assert!(ping(&mut conn).is_err(), "PING must time out while paused");

        server.resume();
        // The old connection may hold the late reply; use a fresh one.
        let mut conn = server.conn();
        assert_eq!(ping(&mut conn).unwrap(), "PONG");
    }

    #[test]
    fn kill_is_idempotent() {
        let mut server = RedisServer::start();
        let pid = server.pid();
        server.kill();
        assert!(!server.is_running());
        assert!(!pid_exists(pid));
        assert!(TcpStream::connect(server.addr()).is_err());
        server.kill();
        assert!(!server.is_running());
    }

    #[test]
    fn restart_on_same_port_comes_back_empty() {
        let mut server = RedisServer::start();
        let (port, old_pid) = (server.port(), server.pid());
        let mut conn = server.conn();
        let _: () = redis::cmd("SET")
            .arg("k")
            .arg("v")
            .query(&mut conn)
            .unwrap();

        server.restart();
        assert_eq!(server.port(), port);
        assert_ne!(server.pid(), old_pid);
        assert!(!pid_exists(old_pid));
        let mut conn = server.conn();
        assert_eq!(ping(&mut conn).unwrap(), "PONG");
        let v: Option<String> = redis::cmd("GET").arg("k").query(&mut conn).unwrap();
        assert_eq!(v, None, "no persistence: a restart comes back empty");

        // Restart of a killed server works too, and so does a paused one.
        server.kill();
        server.restart();
        server.pause();
        server.restart();
        assert_eq!(ping(&mut server.conn()).unwrap(), "PONG");
    }

    #[test]
    fn restart_waits_for_the_port_to_be_released() {
        let mut server = RedisServer::start();
        server.kill();
        // Someone else holds the port for a moment; restart must retry, not fail.
        let squatter = std::net::TcpListener::bind(server.addr()).unwrap();
        let release = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            drop(squatter);
        });
        server.restart();
        release.join().unwrap();
        assert_eq!(ping(&mut server.conn()).unwrap(), "PONG");
        assert!(server.log().contains("Address already in use"));
    }

    #[test]
    fn requirepass() {
        let server = RedisServer::start_with(&["--requirepass", "pw"]);
        assert_eq!(server.password(), Some("pw"));

        let client = redis::Client::open(server.url()).unwrap();
        let mut anon = client
            .get_connection_with_timeout(Duration::from_secs(5))
            .unwrap();
        let err = ping(&mut anon).unwrap_err();
        assert!(err.to_string().contains("NOAUTH"), "{err}");

        let mut conn = server.conn();
        assert_eq!(ping(&mut conn).unwrap(), "PONG");
    }

    #[test]
    fn several_independent_servers() {
        let servers = RedisServers::start(3);
        assert_eq!(servers.len(), 3);
        let urls = servers.urls();
        let mut ports: Vec<u16> = servers.iter().map(RedisServer::port).collect();
        ports.sort_unstable();
        ports.dedup();
        assert_eq!(ports.len(), 3);
        for (i, server) in servers.iter().enumerate() {
            assert_eq!(urls[i], server.url());
            let mut conn = server.conn();
            let _: () = redis::cmd("SET").arg("k").arg(i).query(&mut conn).unwrap();
        }
        let v: usize = redis::cmd("GET")
            .arg("k")
            .query(&mut servers[1].conn())
            .unwrap();
        assert_eq!(v, 1, "servers are independent");
    }

    #[test]
    fn server_outlives_the_thread_that_started_it() {
        // PR_SET_PDEATHSIG fires on the spawning thread's exit; spawning happens on a
        // long-lived helper thread, so a server started on a short-lived thread survives it.
        let server = std::thread::spawn(RedisServer::start).join().unwrap();
        std::thread::sleep(Duration::from_millis(100));
        assert!(server.is_running());
        assert_eq!(ping(&mut server.conn()).unwrap(), "PONG");
    }

    #[test]
    fn bad_argument_panics_with_log() {
        let err = std::panic::catch_unwind(|| RedisServer::start_with(&["--no-such-option", "1"]))
            .unwrap_err();
        let msg = err.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(msg.contains("exited during startup"), "{msg}");
        assert!(
            msg.contains("no-such-option"),
            "log must be in the panic: {msg}"
        );
    }

    #[test]
    fn free_port_is_bindable() {
        let port = free_port();
        assert_ne!(port, 6379);
        std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
    }

    #[test]
    fn wait_until_is_bounded() {
        let mut n = 0;
        assert!(wait_until(Duration::from_secs(1), || {
            n += 1;
            n == 3
        }));
        let start = std::time::Instant::now();
        assert!(!wait_until(Duration::from_millis(50), || false));
        assert!(start.elapsed() >= Duration::from_millis(50));
        assert!(start.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn temp_dirs_are_unique_and_removed() {
        let a = TempDir::new("redmutex-test");
        let b = TempDir::new("redmutex-test");
        assert_ne!(a.path(), b.path());
        assert!(a.path().is_dir());
        assert!(a.path().starts_with(std::env::temp_dir()));
        std::fs::write(a.path().join("f"), b"x").unwrap();
        let path = a.path().to_owned();
        drop(a);
        assert!(!path.exists());
    }
}
