//! TLS-only topologies: a Redis Cluster of three masters and a Sentinel group, every
//! connection (clients, the cluster bus, sentinel to master) over TLS with one test PKI.
//!
//! Like [`TlsServer`], each start returns `None` (after a "SKIPPED" note) when redis-server
//! was built without TLS; `REDMUTEX_REQUIRE_TLS=1` makes that a panic.

use std::fs;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::server::{REDIS_SERVER_ENV, kill_and_reap, running, spawn_orphan_safe};
use crate::tls::{Pki, TlsServer};
use crate::{TempDir, free_port, wait_until};

/// How long a topology may take to come up.
const STARTUP: Duration = Duration::from_secs(30);

/// A connection to a TLS server of the test PKI (checked against its CA).
fn connect(pki: &Pki, port: u16) -> redis::RedisResult<redis::Connection> {
    let certs = redis::TlsCertificates {
        client_tls: None,
        root_cert: Some(pki.pem("ca.crt")),
    };
    let client = redis::Client::build_with_tls(format!("rediss://127.0.0.1:{port}"), certs)?;
    let conn = client.get_connection_with_timeout(Duration::from_secs(2))?;
    conn.set_read_timeout(Some(Duration::from_secs(2)))?;
    conn.set_write_timeout(Some(Duration::from_secs(2)))?;
    Ok(conn)
}

fn query<T: redis::FromRedisValue>(
    pki: &Pki,
    port: u16,
    cmd: &redis::Cmd,
) -> redis::RedisResult<T> {
    cmd.query(&mut connect(pki, port)?)
}

/// A Redis Cluster of three TLS-only masters (no replicas) that split the slots evenly, with
/// TLS on the cluster bus too (`--tls-cluster yes`).
pub struct TlsCluster {
    nodes: Vec<TlsServer>,
}

impl TlsCluster {
    /// Starts and joins the three nodes; returns once each of them reports
    /// `cluster_state:ok`. Panics if that takes more than 30 s.
    pub fn start(pki: &Pki) -> Option<TlsCluster> {
        let mut nodes = Vec::new();
        for _ in 0..3 {
            let bus = free_port().to_string();
            let extra: Vec<String> = [
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-node-timeout",
                "2000",
                "--cluster-port",
                &bus,
                "--tls-cluster",
                "yes",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect();
            nodes.push(TlsServer::start_with(pki, &extra)?);
        }
        let cluster = TlsCluster { nodes };
        let n = cluster.nodes.len() as u32;
        let first = cluster.nodes[0].port();
        for (i, node) in cluster.nodes.iter().enumerate() {
            let (lo, hi) = (16384 * i as u32 / n, 16384 * (i as u32 + 1) / n - 1);
            let _: () = query(
                pki,
                node.port(),
                redis::cmd("CLUSTER").arg("ADDSLOTSRANGE").arg(lo).arg(hi),
            )
            .unwrap_or_else(|e| panic!("CLUSTER ADDSLOTSRANGE on {}: {e}", node.port()));
            if node.port() != first {
                let bus = cluster_port(pki, node.port());
                let _: () = query(
                    pki,
                    first,
                    redis::cmd("CLUSTER")
                        .arg("MEET")
                        .arg("127.0.0.1")
                        .arg(node.port())
                        .arg(bus),
                )
                .unwrap_or_else(|e| panic!("CLUSTER MEET {}: {e}", node.port()));
            }
        }
        let healthy = wait_until(STARTUP, || {
            let ok = cluster.nodes.iter().all(|node| {
                let info: String =
                    query(pki, node.port(), redis::cmd("CLUSTER").arg("INFO")).unwrap_or_default();
                info.contains("cluster_state:ok") && info.contains("cluster_known_nodes:3")
            });
            if !ok {
                std::thread::sleep(Duration::from_millis(50));
            }
            ok
        });
        assert!(
            healthy,
            "the TLS cluster did not become healthy within 30 s"
        );
        Some(cluster)
    }

    /// The TLS ports of the masters, in start order.
    pub fn ports(&self) -> Vec<u16> {
        self.nodes.iter().map(TlsServer::port).collect()
    }

    /// `rediss+cluster://127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3`.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .ports()
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect();
        format!("rediss+cluster://{}", hosts.join(","))
    }

    /// The masters as `rediss://127.0.0.1:P` seed URLs.
    pub fn seed_urls(&self) -> Vec<String> {
        self.nodes.iter().map(TlsServer::url).collect()
    }
}

/// The cluster bus port a node listens on (`--cluster-port`).
fn cluster_port(pki: &Pki, port: u16) -> u16 {
    let reply: Vec<String> = query(
        pki,
        port,
        redis::cmd("CONFIG").arg("GET").arg("cluster-port"),
    )
    .unwrap_or_else(|e| panic!("CONFIG GET cluster-port on {port}: {e}"));
    reply
        .get(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no cluster-port in {reply:?}"))
}

/// A TLS-only master watched by one TLS-only sentinel that reaches it over TLS
/// (`tls-replication yes`).
pub struct TlsSentinel {
    // The sentinel first: it is stopped before the master it watches.
    sentinel: SentinelProcess,
    master: TlsServer,
}

/// The name the sentinel knows the master by.
pub const MASTER_NAME: &str = "mymaster";

/// One sentinel process, killed on drop.
struct SentinelProcess {
    child: Option<Child>,
    port: u16,
    dir: TempDir,
}

impl Drop for SentinelProcess {
    fn drop(&mut self) {
        kill_and_reap(&mut self.child);
    }
}

impl TlsSentinel {
    /// Starts the master and the sentinel; returns once the sentinel names the master.
    /// Panics if that takes more than 30 s.
    pub fn start(pki: &Pki) -> Option<TlsSentinel> {
        let master = TlsServer::start(pki)?;
        for _ in 0..20 {
            if let Some(sentinel) = start_sentinel(pki, master.port()) {
                return Some(TlsSentinel { sentinel, master });
            }
        }
        panic!("every port tried for the TLS sentinel was already in use");
    }

    /// `rediss+sentinel://127.0.0.1:PORT/mymaster`.
    pub fn url(&self) -> String {
        format!(
            "rediss+sentinel://127.0.0.1:{}/{MASTER_NAME}",
            self.sentinel.port
        )
    }

    /// The sentinel as a `rediss://127.0.0.1:PORT` URL.
    pub fn sentinel_url(&self) -> String {
        format!("rediss://127.0.0.1:{}", self.sentinel.port)
    }

    /// The master's TLS port.
    pub fn master_port(&self) -> u16 {
        self.master.port()
    }
}

/// A sentinel watching the TLS master on `master_port`, or `None` when its port was taken.
fn start_sentinel(pki: &Pki, master_port: u16) -> Option<SentinelProcess> {
    let bin = std::env::var(REDIS_SERVER_ENV).unwrap_or_else(|_| "redis-server".into());
    let path = |f: &str| pki.path(f).display().to_string();
    let dir = TempDir::new("redmutex-tls-sentinel");
    let port = free_port();
    let log = dir.path().join("sentinel.log");
    let config = [
        "port 0".to_owned(),
        format!("tls-port {port}"),
        "bind 127.0.0.1".to_owned(),
        format!("tls-cert-file \"{}\"", path("server.crt")),
        format!("tls-key-file \"{}\"", path("server.key")),
        format!("tls-ca-cert-file \"{}\"", path("ca.crt")),
        "tls-auth-clients no".to_owned(),
        "tls-replication yes".to_owned(),
        format!("dir \"{}\"", dir.path().display()),
        format!("logfile \"{}\"", log.display()),
        format!("sentinel monitor {MASTER_NAME} 127.0.0.1 {master_port} 1"),
        format!("sentinel down-after-milliseconds {MASTER_NAME} 500"),
    ];
    let conf: PathBuf = dir.path().join("sentinel.conf");
    fs::write(&conf, config.join("\n") + "\n").unwrap();
    let mut cmd = Command::new(&bin);
    cmd.arg(&conf)
        .arg("--sentinel")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let child =
        spawn_orphan_safe(cmd).unwrap_or_else(|e| panic!("cannot run {bin} --sentinel: {e}"));
    let mut sentinel = SentinelProcess {
        child: Some(child),
        port,
        dir,
    };
    let deadline = Instant::now() + STARTUP;
    loop {
        if running(&mut sentinel.child).is_none() {
            let text = fs::read_to_string(&log).unwrap_or_default();
            if text.contains("Address already in use") {
                return None;
            }
            panic!("the TLS sentinel exited during startup:\n{text}");
        }
        let named: redis::RedisResult<Option<(String, u16)>> = query(
            pki,
            port,
            redis::cmd("SENTINEL")
                .arg("get-master-addr-by-name")
                .arg(MASTER_NAME),
        );
        if matches!(named, Ok(Some((_, p))) if p == master_port) {
            return Some(sentinel);
        }
        assert!(
            Instant::now() < deadline,
            "the TLS sentinel does not name its master after 30 s: {named:?}\n{}",
            fs::read_to_string(sentinel.dir.path().join("sentinel.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
