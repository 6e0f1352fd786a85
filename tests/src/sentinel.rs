//! Real Redis Sentinel processes (`redis-server <config> --sentinel`) on free loopback ports.

use std::fs::OpenOptions;
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use redis::IntoConnectionInfo;

use crate::TempDir;
use crate::server::spawn_orphan_safe;
use crate::server::{REDIS_SERVER_ENV, answers_ping, free_port, kill_and_reap, running};

/// How long one start may take before it is declared failed.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(10);
/// How many ports a start tries when it loses the [`free_port`] race.
const MAX_PORT_ATTEMPTS: usize = 20;
/// The sentinel's config file: sentinel rewrites it, so it lives in the sentinel's temp dir.
const CONFIG_FILE: &str = "sentinel.conf";
/// The sentinel's own log.
const LOG_FILE: &str = "sentinel.log";
/// Its stdout and stderr.
const STDIO_FILE: &str = "stdio.log";

/// One Redis Sentinel process, owned by the test; killed (by pid) and its temp dir removed on
/// drop, including when the test panics. Like [`RedisServer`](crate::RedisServer), it is
/// killed by the kernel if the test process dies (Linux).
///
/// It monitors one master at `127.0.0.1` with `down-after-milliseconds 500` and
/// `failover-timeout 2000`, so a killed master is failed over within a few seconds.
#[derive(Debug)]
pub struct Sentinel {
    port: u16,
    pid: u32,
    child: Mutex<Option<Child>>,
    dir: TempDir,
}

impl Sentinel {
    /// Starts a sentinel that monitors the master `name` at `127.0.0.1:master_port` with the
    /// given `quorum`, plus `extra` config lines (for example `sentinel auth-pass mymaster pw`,
    /// which must name the same master). Waits (at most 10 s) until it answers `PING`;
    /// retries with another port if the chosen one was taken meanwhile. Panics, with the log,
    /// if it does not come up.
    pub fn start(name: &str, master_port: u16, quorum: u32, extra: &[&str]) -> Sentinel {
        for _ in 0..MAX_PORT_ATTEMPTS {
            let dir = TempDir::new("redmutex-sentinel");
            let port = free_port();
            let mut config = vec![
                format!("port {port}"),
                "bind 127.0.0.1".to_owned(),
                "daemonize no".to_owned(),
                format!("dir \"{}\"", dir.path().display()),
                format!("logfile \"{}\"", dir.path().join(LOG_FILE).display()),
                format!("sentinel monitor {name} 127.0.0.1 {master_port} {quorum}"),
                format!("sentinel down-after-milliseconds {name} 500"),
                format!("sentinel failover-timeout {name} 2000"),
            ];
            config.extend(extra.iter().map(|l| l.to_string()));
            let conf = dir.path().join(CONFIG_FILE);
            std::fs::write(&conf, config.join("\n") + "\n")
                .unwrap_or_else(|e| panic!("cannot write {}: {e}", conf.display()));
            let stdio = OpenOptions::new()
                .create(true)
                .append(true)
                .open(dir.path().join(STDIO_FILE))
                .expect("open the sentinel's stdio log");
            let stderr = stdio.try_clone().expect("dup stdio log");
            let bin = std::env::var_os(REDIS_SERVER_ENV).unwrap_or_else(|| "redis-server".into());
            let mut cmd = Command::new(&bin);
            cmd.arg(&conf)
                .arg("--sentinel")
                .current_dir(dir.path())
                .stdin(Stdio::null())
                .stdout(stdio)
                .stderr(stderr);
            let child = spawn_orphan_safe(cmd)
                .unwrap_or_else(|e| panic!("cannot run {bin:?} --sentinel: {e}"));
            let sentinel = Sentinel {
                port,
                pid: child.id(),
                child: Mutex::new(Some(child)),
                dir,
            };
            let deadline = Instant::now() + STARTUP_TIMEOUT;
            loop {
                if !sentinel.is_running() {
                    if sentinel.log().contains("Address already in use") {
                        break; // another port
                    }
                    panic!("redis sentinel exited during startup\n{}", sentinel.log());
                }
                if answers_ping(port) {
                    return sentinel;
                }
                if Instant::now() >= deadline {
                    panic!(
                        "redis sentinel did not answer PING within 10 s\n{}",
                        sentinel.log()
                    );
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        panic!("every port tried for a sentinel was already in use");
    }

    /// The port it listens on (on `127.0.0.1`).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Pid of the process.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// `127.0.0.1:PORT`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// A fresh raw connection with 5 s connect, read and write timeouts. Panics if the
    /// connection cannot be made.
    pub fn conn(&self) -> redis::Connection {
        let timeout = Duration::from_secs(5);
        let info = redis::ConnectionAddr::Tcp("127.0.0.1".to_owned(), self.port)
            .into_connection_info()
            .expect("a TCP address is a valid connection info");
        let conn = redis::Client::open(info)
            .expect("a TCP address is a valid client")
            .get_connection_with_timeout(timeout)
            .unwrap_or_else(|e| panic!("cannot connect to the sentinel at {}: {e}", self.addr()));
        conn.set_read_timeout(Some(timeout))
            .expect("set_read_timeout");
        conn.set_write_timeout(Some(timeout))
            .expect("set_write_timeout");
        conn
    }

    /// The address (`ip`, `port`) the sentinel currently gives for the master `name`.
    pub fn master_addr(&self, name: &str) -> Option<(String, u16)> {
        redis::cmd("SENTINEL")
            .arg("get-master-addr-by-name")
            .arg(name)
            .query(&mut self.conn())
            .ok()
            .flatten()
    }

    /// Its config file (as rewritten by the sentinel), log and stdout/stderr; for diagnostics.
    pub fn log(&self) -> String {
        let read = |f: &str| {
            std::fs::read(self.dir.path().join(f))
                .map(|b| String::from_utf8_lossy(&b).into_owned())
                .unwrap_or_else(|e| format!("<cannot read {f}: {e}>"))
        };
        format!(
            "--- {CONFIG_FILE} ---\n{}\n--- {LOG_FILE} ---\n{}\n--- stdout/stderr ---\n{}",
            read(CONFIG_FILE),
            read(LOG_FILE),
            read(STDIO_FILE)
        )
    }

    /// Whether the process is alive.
    pub fn is_running(&self) -> bool {
        running(&mut self.child()).is_some()
    }

    /// Kill the process with `SIGKILL` and reap it. Idempotent.
    pub fn kill(&mut self) {
        kill_and_reap(&mut self.child());
    }

    fn child(&self) -> MutexGuard<'_, Option<Child>> {
        self.child.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        kill_and_reap(&mut self.child());
    }
}
