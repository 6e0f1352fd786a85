//! Test support: real servers for the transport's own tests.

use std::net::TcpListener;
use std::process::{Child, Command as Process, Stdio};
use std::time::{Duration, Instant};

/// A `redis-server` of this test's own on a free loopback port, stopped by its pid when
/// dropped.
pub(crate) struct Server {
    child: Child,
    pub(crate) url: String,
    pub(crate) port: u16,
}

impl Server {
    pub(crate) fn start() -> Server {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let child = Process::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server (make deps installs it)");
        let server = Server {
            child,
            url: format!("redis://127.0.0.1:{port}"),
            port,
        };
        let up = Instant::now() + Duration::from_secs(10);
        let client = redis::Client::open(server.url.as_str()).unwrap();
        while client
            .get_connection_with_timeout(Duration::from_millis(100))
            .and_then(|mut c| redis::cmd("PING").query::<String>(&mut c))
            .is_err()
        {
            assert!(Instant::now() < up, "redis-server did not start");
            std::thread::sleep(Duration::from_millis(10));
        }
        server
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
