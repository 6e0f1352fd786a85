//! Real Redis Cluster deployments for tests: masters and replicas are [`RedisServer`]s started
//! with `--cluster-enabled yes` and joined by `redis-cli --cluster create`; faults are real
//! (`SIGKILL` of a node, then the cluster's own failover) and so are slot moves
//! (`redis-cli --cluster reshard`).
//!
//! [`ClusterConn`] is a small key-routing connection for test data (counters, assertions): it
//! sends each command to the master of the key's slot and follows `MOVED` and `ASK`
//! redirections, so it keeps working while slots move and while a replica takes over.
//!
//! ```no_run
//! use redmutex_tests::cluster::{RedisCluster, key_slot};
//! use std::time::Duration;
//!
//! let mut cluster = RedisCluster::start(3, 1);
//! let mut data = cluster.conn();
//! data.set(b"{k}:n", b"1").unwrap();
//! let old = cluster.kill_master_of_slot(key_slot(b"{k}:n"));
//! let new = cluster.wait_for_failover(key_slot(b"{k}:n"), Duration::from_secs(20));
//! assert_ne!(old, new);
//! ```

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs::File;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::server::{REDIS_SERVER_ENV, kill_and_reap, spawn_orphan_safe};
use crate::{RedisServer, TempDir, free_port, wait_until};

/// Environment variable naming the `redis-cli` binary. When unset, the `redis-cli` next to the
/// binary named by [`REDIS_SERVER_ENV`] is used if there is one, and otherwise `redis-cli` on
/// `PATH`.
pub const REDIS_CLI_ENV: &str = "REDMUTEX_REDIS_CLI";

/// The number of hash slots of a Redis Cluster.
pub const SLOTS: u16 = 16384;

/// The `--cluster-node-timeout` of [`RedisCluster::start`]: a killed master is failed over
/// within a few seconds.
pub const DEFAULT_NODE_TIMEOUT: Duration = Duration::from_millis(1000);

/// How long `redis-cli --cluster create` plus the wait for a healthy cluster may take.
const CREATE_TIMEOUT: Duration = Duration::from_secs(30);
/// How long one `redis-cli --cluster reshard` may take.
const RESHARD_TIMEOUT: Duration = Duration::from_secs(60);
/// How long the cluster may take to agree on the slot map after a reshard.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(15);
/// How many bus ports a node start tries when it loses the [`free_port`] race.
const MAX_BUS_PORT_ATTEMPTS: usize = 5;
/// Timeouts of the harness's own connections.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
const IO_TIMEOUT: Duration = Duration::from_secs(2);
/// Default bound on one [`ClusterConn`] command, redirections and retries included.
const DEFAULT_QUERY_TIMEOUT: Duration = Duration::from_secs(15);
/// How many lines of each node's log a panic message shows.
const LOG_TAIL_LINES: usize = 40;

/// The Redis Cluster hash slot of a key: CRC16 (XMODEM) of its hash tag (the non-empty text
/// between the first `{` and the next `}`) or of the whole key, modulo 16384. Agrees with
/// `CLUSTER KEYSLOT`.
pub fn key_slot(key: &[u8]) -> u16 {
    let tagged = key.iter().position(|&b| b == b'{').and_then(|open| {
        let rest = &key[open + 1..];
        let len = rest.iter().position(|&b| b == b'}')?;
        (len > 0).then(|| &rest[..len])
    });
    let mut crc: u16 = 0;
    for &b in tagged.unwrap_or(key) {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % SLOTS
}

/// One range of slots in the slot map (`CLUSTER SLOTS`): its master and its replicas, by port
/// (every node listens on `127.0.0.1`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotRange {
    /// First slot of the range.
    pub start: u16,
    /// Last slot of the range (inclusive).
    pub end: u16,
    /// Port of the master serving the range.
    pub master: u16,
    /// Ports of its replicas that the answering node does not consider failed, ascending.
    pub replicas: Vec<u16>,
}

impl SlotRange {
    /// Whether `slot` is in the range.
    pub fn contains(&self, slot: u16) -> bool {
        (self.start..=self.end).contains(&slot)
    }

    /// How many slots the range has.
    pub fn len(&self) -> usize {
        usize::from(self.end - self.start) + 1
    }

    /// Always false: a range has at least one slot (for symmetry with [`SlotRange::len`]).
    pub fn is_empty(&self) -> bool {
        false
    }
}

/// One node of a [`RedisCluster`]: its server process, cluster node id and bus port.
#[derive(Debug)]
pub struct ClusterNode {
    server: RedisServer,
    id: String,
    bus_port: u16,
}

impl ClusterNode {
    /// The node's server process (for [`RedisServer::conn`], [`RedisServer::log`], …).
    pub fn server(&self) -> &RedisServer {
        &self.server
    }

    /// The client port, on `127.0.0.1`.
    pub fn port(&self) -> u16 {
        self.server.port()
    }

    /// The node id (`CLUSTER MYID`): stable across [`RedisCluster::restart`], since the
    /// node's `nodes.conf` survives in its directory.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The cluster bus port (`--cluster-port`).
    pub fn bus_port(&self) -> u16 {
        self.bus_port
    }

    /// Whether the process is alive.
    pub fn is_running(&self) -> bool {
        self.server.is_running()
    }
}

/// A Redis Cluster of real processes, owned by the test: every node is a [`RedisServer`]
/// (stopped by pid on drop, like any), started with
///
/// ```text
/// --cluster-enabled yes --cluster-config-file nodes.conf --cluster-node-timeout <ms>
/// --cluster-port <a second free port> --repl-diskless-sync-delay 0 --repl-ping-replica-period 1
/// ```
///
/// on top of the server's usual `--save '' --appendonly no` in its own directory. The bus
/// port is chosen explicitly (a Redis 7 option) rather than derived as port + 10000, which
/// could clash with another test's port; before Redis 7 (no `--cluster-port`), the client
/// port is chosen so that port + 10000 is free. A replica syncs at once
/// (`--repl-diskless-sync-delay 0`) instead of after the default 5 s, and masters ping their
/// replicas every second rather than every 10 s: `CLUSTER SLOTS` lists a replica only once
/// its replication offset is non-zero, which on an idle master only a ping makes it.
///
/// Node roles change (failover, restart), so the harness never remembers them: every question
/// about masters, replicas and slots is asked of a live node.
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<ClusterNode>,
    node_timeout: Duration,
}

impl RedisCluster {
    /// Starts `masters` masters (at least 3, which `redis-cli --cluster create` requires),
    /// each with `replicas` replicas, with [`DEFAULT_NODE_TIMEOUT`]; see
    /// [`RedisCluster::start_with`].
    pub fn start(masters: usize, replicas: usize) -> RedisCluster {
        Self::start_with(masters, replicas, DEFAULT_NODE_TIMEOUT)
    }

    /// Starts `masters * (1 + replicas)` nodes with `--cluster-node-timeout` set to
    /// `node_timeout`, joins them with `redis-cli --cluster create … --cluster-replicas
    /// <replicas> --cluster-yes` (the first `masters` nodes become the masters, with the slots
    /// split evenly in start order), and returns once the cluster is healthy (see
    /// [`RedisCluster::wait_healthy`]). Panics, with the output of `redis-cli` and the nodes'
    /// logs, if that takes more than 30 s.
    pub fn start_with(masters: usize, replicas: usize, node_timeout: Duration) -> RedisCluster {
        assert!(
            masters >= 3,
            "a Redis Cluster created by redis-cli needs at least 3 masters, not {masters}"
        );
        let started = Instant::now();
        let timeout_ms = node_timeout.as_millis().max(1).to_string();
        let mut nodes: Vec<ClusterNode> = Vec::new();
        for _ in 0..masters * (1 + replicas) {
            let (server, bus_port) = start_node(&timeout_ms);
            nodes.push(ClusterNode {
                server,
                id: String::new(),
                bus_port,
            });
        }
        let mut cluster = RedisCluster {
            nodes,
            node_timeout,
        };

        let mut args: Vec<String> = vec!["--cluster".into(), "create".into()];
        args.extend(cluster.nodes.iter().map(|n| n.server.addr()));
        args.extend([
            "--cluster-replicas".into(),
            replicas.to_string(),
            "--cluster-yes".into(),
        ]);
        let (ok, output) = run_cli(&args, CREATE_TIMEOUT);
        if !ok {
            panic!(
                "redis-cli --cluster create failed:\n{output}\n{}",
                cluster.logs()
            );
        }
        for node in &mut cluster.nodes {
            node.id = redis::cmd("CLUSTER")
                .arg("MYID")
                .query(&mut node.server.conn())
                .unwrap_or_else(|e| panic!("CLUSTER MYID on {}: {e}", node.server.addr()));
        }
        let left = CREATE_TIMEOUT.saturating_sub(started.elapsed());
        cluster.wait_healthy(left.max(Duration::from_secs(5)));
        cluster
    }

    /// The `--cluster-node-timeout` the nodes run with.
    pub fn node_timeout(&self) -> Duration {
        self.node_timeout
    }

    /// Every node, in start order (the first `masters` were the masters at creation).
    pub fn nodes(&self) -> &[ClusterNode] {
        &self.nodes
    }

    /// The node listening on `port`. Panics if there is none.
    pub fn node(&self, port: u16) -> &ClusterNode {
        self.nodes
            .iter()
            .find(|n| n.port() == port)
            .unwrap_or_else(|| panic!("no node of this cluster listens on port {port}"))
    }

    /// The node id of the node listening on `port`. Panics if there is none.
    pub fn node_id(&self, port: u16) -> &str {
        self.node(port).id()
    }

    /// The slot map, as `CLUSTER SLOTS` of the first live node that answers gives it, sorted
    /// by slot. Panics if no node answers.
    pub fn slots(&self) -> Vec<SlotRange> {
        self.live()
            .find_map(|n| cluster_slots(n.port()).ok())
            .unwrap_or_else(|| panic!("no node answered CLUSTER SLOTS\n{}", self.logs()))
    }

    /// The masters that serve slots, by port, in slot order.
    pub fn masters(&self) -> Vec<u16> {
        let mut out: Vec<u16> = Vec::new();
        for r in self.slots() {
            if !out.contains(&r.master) {
                out.push(r.master);
            }
        }
        out
    }

    /// The replicas of `master` in the slot map (empty for a master that serves no slots).
    pub fn replicas_of(&self, master: u16) -> Vec<u16> {
        self.slots()
            .into_iter()
            .find(|r| r.master == master)
            .map(|r| r.replicas)
            .unwrap_or_default()
    }

    /// The slot ranges that `master` serves, in slot order.
    pub fn slots_of(&self, master: u16) -> Vec<SlotRange> {
        self.slots()
            .into_iter()
            .filter(|r| r.master == master)
            .collect()
    }

    /// The port of the master that serves `slot`. Panics if the slot is not served.
    pub fn master_of_slot(&self, slot: u16) -> u16 {
        let slots = self.slots();
        slots
            .iter()
            .find(|r| r.contains(slot))
            .map(|r| r.master)
            .unwrap_or_else(|| panic!("slot {slot} is not served: {slots:?}"))
    }

    /// The port of the master that serves `key`'s slot.
    pub fn master_of_key(&self, key: &[u8]) -> u16 {
        self.master_of_slot(key_slot(key))
    }

    /// `redis://127.0.0.1:PORT` of every master that serves slots, in slot order: the seed
    /// list of a cluster client.
    pub fn seed_urls(&self) -> Vec<String> {
        self.masters()
            .into_iter()
            .map(|p| format!("redis://127.0.0.1:{p}"))
            .collect()
    }

    /// `redis+cluster://127.0.0.1:P1,127.0.0.1:P2,…` with every master that serves slots.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .masters()
            .into_iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect();
        format!("redis+cluster://{}", hosts.join(","))
    }

    /// Kills the node on `port` with `SIGKILL` (idempotent). Its directory, `nodes.conf`
    /// included, is kept for [`RedisCluster::restart`].
    pub fn kill(&mut self, port: u16) {
        self.node_mut(port).server.kill();
    }

    /// Kills the master serving `slot` with `SIGKILL` and returns its port.
    pub fn kill_master_of_slot(&mut self, slot: u16) -> u16 {
        let port = self.master_of_slot(slot);
        self.kill(port);
        port
    }

    /// Restarts the node on `port` (killing it first if it runs) on the same ports with the
    /// same `nodes.conf`: it rejoins the cluster under its old node id, without data. A master
    /// that was failed over comes back as a replica of its successor. Does not wait for the
    /// cluster; call [`RedisCluster::wait_healthy`] for that.
    pub fn restart(&mut self, port: u16) {
        self.node_mut(port).server.restart();
    }

    /// Waits until a live node serves `slot` and the cluster is usable again: every live node
    /// reports `cluster_state:ok` and they all give the same slot map, in which `slot`'s
    /// master is alive. Returns that master's port: after a [`RedisCluster::kill`] of the
    /// slot's master, the promoted replica. Panics with the last state seen and the nodes'
    /// logs after `timeout`.
    pub fn wait_for_failover(&self, slot: u16, timeout: Duration) -> u16 {
        let mut state = Err(String::from("not checked yet"));
        let ok = wait_until(timeout, || {
            state = self.agreed_slots(false).and_then(|slots| {
                let master = slots
                    .iter()
                    .find(|r| r.contains(slot))
                    .map(|r| r.master)
                    .ok_or_else(|| format!("slot {slot} is not served"))?;
                if self
                    .nodes
                    .iter()
                    .any(|n| n.port() == master && n.is_running())
                {
                    Ok(master)
                } else {
                    Err(format!(
                        "slot {slot} is still served by {master}, which is down"
                    ))
                }
            });
            if state.is_err() {
                std::thread::sleep(Duration::from_millis(20));
            }
            state.is_ok()
        });
        match state {
            Ok(master) if ok => master,
            state => panic!(
                "no live master took over slot {slot} within {timeout:?}: {}\n{}",
                state.err().unwrap_or_default(),
                self.logs()
            ),
        }
    }

    /// Waits until the cluster is healthy: every live node reports `cluster_state:ok`, they
    /// all give the same slot map covering all 16384 slots, every live node is in it (as a
    /// master or a replica) and every replica's link to its master is up. Panics with the
    /// last problem seen and the nodes' logs after `timeout`.
    pub fn wait_healthy(&self, timeout: Duration) {
        let mut state = Err(String::from("not checked yet"));
        let ok = wait_until(timeout, || {
            state = self.agreed_slots(true).map(drop);
            if state.is_err() {
                std::thread::sleep(Duration::from_millis(20));
            }
            state.is_ok()
        });
        if !ok {
            panic!(
                "the cluster did not become healthy within {timeout:?}: {}\n{}",
                state.err().unwrap_or_default(),
                self.logs()
            );
        }
    }

    /// Moves `nslots` slots from the master on `from` to the master on `to` with
    /// `redis-cli --cluster reshard <from> --cluster-from <id> --cluster-to <id>
    /// --cluster-slots <nslots> --cluster-yes` (keys included, by `MIGRATE`). redis-cli takes
    /// the lowest-numbered slots of `from`. Waits until the nodes agree on the new slot map.
    /// Panics, with redis-cli's output and the nodes' logs, if redis-cli fails or runs for
    /// more than 60 s, or if the cluster does not settle within 15 s.
    pub fn reshard(&self, from: u16, to: u16, nslots: usize) {
        let args: Vec<String> = vec![
            "--cluster".into(),
            "reshard".into(),
            format!("127.0.0.1:{from}"),
            "--cluster-from".into(),
            self.node_id(from).to_owned(),
            "--cluster-to".into(),
            self.node_id(to).to_owned(),
            "--cluster-slots".into(),
            nslots.to_string(),
            "--cluster-yes".into(),
        ];
        let (ok, output) = run_cli(&args, RESHARD_TIMEOUT);
        if !ok || output.contains("[ERR]") {
            panic!(
                "redis-cli --cluster reshard of {nslots} slots from {from} to {to} failed:\n\
                 {output}\n{}",
                self.logs()
            );
        }
        let mut state = Err(String::from("not checked yet"));
        let settled = wait_until(SETTLE_TIMEOUT, || {
            state = self.agreed_slots(false).map(drop);
            state.is_ok()
        });
        if !settled {
            panic!(
                "the cluster did not settle after a reshard: {}\n{}",
                state.err().unwrap_or_default(),
                self.logs()
            );
        }
    }

    /// A fresh [`ClusterConn`] seeded with every node of the cluster.
    pub fn conn(&self) -> ClusterConn {
        ClusterConn::new(self.nodes.iter().map(|n| n.server.addr()))
    }

    /// The value of `key`, read from the master that serves its slot (redirections followed).
    /// Panics if it cannot be read within 15 s.
    pub fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.conn()
            .get(key)
            .unwrap_or_else(|e| panic!("GET {}: {e}", String::from_utf8_lossy(key)))
    }

    /// Error replies sent so far, by error prefix (`MOVED`, `ASK`, `TRYAGAIN`, …), summed over
    /// the live nodes (`INFO errorstats`; a restarted node starts from zero). Shows which
    /// redirections clients had to follow.
    pub fn error_stats(&self) -> BTreeMap<String, u64> {
        let mut out = BTreeMap::new();
        for n in self.live() {
            let Ok(info) = query::<String>(n.port(), redis::cmd("INFO").arg("errorstats")) else {
                continue;
            };
            // errorstat_MOVED:count=12
            for line in info.lines() {
                let Some((name, count)) = line
                    .trim()
                    .strip_prefix("errorstat_")
                    .and_then(|l| l.split_once(":count="))
                else {
                    continue;
                };
                if let Ok(count) = count.parse::<u64>() {
                    *out.entry(name.to_owned()).or_default() += count;
                }
            }
        }
        out
    }

    /// The last lines of every node's log (and what it printed on stdout/stderr), with its
    /// port, id and state; for panic messages.
    pub fn logs(&self) -> String {
        let mut out = String::new();
        for n in &self.nodes {
            let log = n.server.log();
            let lines: Vec<&str> = log.lines().collect();
            let tail = &lines[lines.len().saturating_sub(LOG_TAIL_LINES)..];
            out.push_str(&format!(
                "=== node 127.0.0.1:{} id {} ({}) ===\n{}\n",
                n.port(),
                n.id,
                if n.is_running() { "running" } else { "down" },
                tail.join("\n")
            ));
        }
        out
    }

    fn node_mut(&mut self, port: u16) -> &mut ClusterNode {
        self.nodes
            .iter_mut()
            .find(|n| n.port() == port)
            .unwrap_or_else(|| panic!("no node of this cluster listens on port {port}"))
    }

    fn live(&self) -> impl Iterator<Item = &ClusterNode> {
        self.nodes.iter().filter(|n| n.is_running())
    }

    /// The slot map if every live node reports `cluster_state:ok` and gives this same map,
    /// covering every slot; with `replicas`, also every live node in the map and every
    /// replica's link up. Otherwise what is wrong.
    fn agreed_slots(&self, replicas: bool) -> Result<Vec<SlotRange>, String> {
        let live: Vec<&ClusterNode> = self.live().collect();
        if live.is_empty() {
            return Err("no node is running".into());
        }
        let mut agreed: Option<(u16, Vec<SlotRange>)> = None;
        for n in &live {
            let port = n.port();
            let info: String = query(port, redis::cmd("CLUSTER").arg("INFO"))
                .map_err(|e| format!("CLUSTER INFO on {port}: {e}"))?;
            if !info.contains("cluster_state:ok") {
                return Err(format!("node {port} is not in cluster_state:ok"));
            }
            let slots = cluster_slots(port).map_err(|e| format!("CLUSTER SLOTS on {port}: {e}"))?;
            match &agreed {
                None => agreed = Some((port, slots)),
                Some((first, map)) if *map != slots => {
                    return Err(format!(
                        "nodes {first} and {port} disagree on the slot map: {map:?} vs {slots:?}"
                    ));
                }
                Some(_) => {}
            }
        }
        let (_, slots) = agreed.expect("at least one live node");
        let covered: usize = slots.iter().map(SlotRange::len).sum();
        if covered != usize::from(SLOTS) {
            return Err(format!("only {covered} slots are served: {slots:?}"));
        }
        if replicas {
            let in_map: BTreeSet<u16> = slots
                .iter()
                .flat_map(|r| std::iter::once(r.master).chain(r.replicas.iter().copied()))
                .collect();
            for n in &live {
                let port = n.port();
                if !in_map.contains(&port) {
                    return Err(format!("node {port} is in no slot range yet: {slots:?}"));
                }
            }
            for r in &slots {
                for &replica in &r.replicas {
                    let info: String = query(replica, redis::cmd("INFO").arg("replication"))
                        .map_err(|e| format!("INFO replication on {replica}: {e}"))?;
                    let master_line = format!("master_port:{}", r.master);
                    if !info.lines().any(|l| l.trim() == master_line)
                        || !info.contains("master_link_status:up")
                    {
                        return Err(format!(
                            "replica {replica} has no live link to master {}",
                            r.master
                        ));
                    }
                }
            }
        }
        Ok(slots)
    }
}

/// Starts one cluster-enabled node; retries with another bus port if the chosen one was taken.
fn start_node(node_timeout_ms: &str) -> (RedisServer, u16) {
    let mut attempt = 1;
    loop {
        let old = crate::server_version() < (7, 0);
        let bus_port = free_port();
        let bus = bus_port.to_string();
        let mut args = vec![
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
            "--cluster-node-timeout",
            node_timeout_ms,
            "--repl-diskless-sync-delay",
            "0",
            "--repl-ping-replica-period",
            "1",
        ];
        if !old {
            args.extend(["--cluster-port", &bus]);
        }
        // RedisServer retries a taken client port by itself, but keeps our bus port: a taken
        // bus port makes every one of its attempts fail, which it reports by panicking.
        // Before Redis 7 the bus is always on the client port + 10000: a client port is
        // picked whose bus port is free too (and may still be taken meanwhile, as above).
        let started = std::panic::catch_unwind(|| {
            if old {
                let server = RedisServer::start_on(&mut free_port_with_free_bus, &args);
                let bus_port = server.port() + BUS_PORT_OFFSET;
                (server, bus_port)
            } else {
                (RedisServer::start_with(&args), bus_port)
            }
        });
        match started {
            Ok(started) => return started,
            Err(panic) => {
                let msg = panic
                    .downcast_ref::<String>()
                    .map(String::as_str)
                    .or_else(|| panic.downcast_ref::<&str>().copied())
                    .unwrap_or("");
                if attempt >= MAX_BUS_PORT_ATTEMPTS || !msg.contains("(cluster)") {
                    std::panic::resume_unwind(panic);
                }
                attempt += 1;
            }
        }
    }
}

/// Where a server before Redis 7 puts its cluster bus: its client port plus this.
const BUS_PORT_OFFSET: u16 = 10000;

/// A free port whose cluster bus port (+ [`BUS_PORT_OFFSET`]) is free as well.
fn free_port_with_free_bus() -> u16 {
    loop {
        let port = free_port();
        let Some(bus) = port.checked_add(BUS_PORT_OFFSET) else {
            continue;
        };
        if std::net::TcpListener::bind(("127.0.0.1", bus)).is_ok() {
            return port;
        }
    }
}

/// The `redis-cli` binary to run (see [`REDIS_CLI_ENV`]).
fn redis_cli() -> PathBuf {
    if let Some(cli) = std::env::var_os(REDIS_CLI_ENV) {
        return cli.into();
    }
    if let Some(server) = std::env::var_os(REDIS_SERVER_ENV) {
        let sibling = PathBuf::from(server).with_file_name("redis-cli");
        if sibling.is_file() {
            return sibling;
        }
    }
    PathBuf::from("redis-cli")
}

/// Runs `redis-cli args…` for at most `timeout`; returns whether it exited with status 0, and
/// its stdout and stderr.
fn run_cli(args: &[String], timeout: Duration) -> (bool, String) {
    let dir = TempDir::new("redmutex-redis-cli");
    let out_path = dir.path().join("output");
    let out = File::create(&out_path).expect("create redis-cli's output file");
    let err = out.try_clone().expect("dup redis-cli's output file");
    let bin = redis_cli();
    let mut cmd = Command::new(&bin);
    cmd.args(args).stdin(Stdio::null()).stdout(out).stderr(err);
    let child = spawn_orphan_safe(cmd).unwrap_or_else(|e| {
        panic!("cannot run {bin:?} (set {REDIS_CLI_ENV} or put redis-cli on PATH): {e}")
    });
    let mut slot = Some(child);
    let mut status = None;
    wait_until(timeout, || {
        status = slot.as_mut().and_then(|c| c.try_wait().ok().flatten());
        if status.is_none() {
            std::thread::sleep(Duration::from_millis(20));
        }
        status.is_some()
    });
    let timed_out = status.is_none();
    kill_and_reap(&mut slot);
    let mut output = std::fs::read(&out_path)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default();
    if timed_out {
        output.push_str(&format!("\n<redis-cli killed after {timeout:?}>"));
    }
    let line = format!("$ redis-cli {}\n", args.join(" "));
    (status.is_some_and(|s| s.success()), line + &output)
}

/// A connection to `127.0.0.1:port` with the harness's timeouts.
fn connect(addr: &str) -> redis::RedisResult<redis::Connection> {
    let conn = redis::Client::open(format!("redis://{addr}"))?
        .get_connection_with_timeout(CONNECT_TIMEOUT)?;
    conn.set_read_timeout(Some(IO_TIMEOUT))?;
    conn.set_write_timeout(Some(IO_TIMEOUT))?;
    Ok(conn)
}

fn query<T: redis::FromRedisValue>(port: u16, cmd: &redis::Cmd) -> redis::RedisResult<T> {
    cmd.query(&mut connect(&format!("127.0.0.1:{port}"))?)
}

/// `CLUSTER SLOTS` of the node on `port`, sorted by slot.
fn cluster_slots(port: u16) -> redis::RedisResult<Vec<SlotRange>> {
    let reply: redis::Value = query(port, redis::cmd("CLUSTER").arg("SLOTS"))?;
    parse_slots(&reply).ok_or_else(|| {
        redis::RedisError::from((
            redis::ErrorKind::UnexpectedReturnType,
            "unexpected CLUSTER SLOTS reply",
            format!("{reply:?}"),
        ))
    })
}

fn parse_slots(reply: &redis::Value) -> Option<Vec<SlotRange>> {
    use redis::Value;
    let int = |v: &Value| match v {
        Value::Int(i) => u16::try_from(*i).ok(),
        _ => None,
    };
    let port = |v: &Value| match v {
        Value::Array(node) => node.get(1).and_then(int),
        _ => None,
    };
    let Value::Array(entries) = reply else {
        return None;
    };
    let mut out = Vec::with_capacity(entries.len());
    for entry in entries {
        let Value::Array(fields) = entry else {
            return None;
        };
        let mut replicas: Vec<u16> = fields.get(3..)?.iter().map(port).collect::<Option<_>>()?;
        replicas.sort_unstable();
        out.push(SlotRange {
            start: int(fields.first()?)?,
            end: int(fields.get(1)?)?,
            master: port(fields.get(2)?)?,
            replicas,
        });
    }
    out.sort_by_key(|r| r.start);
    Some(out)
}

/// A small cluster-aware connection for test data: each command goes to the master serving its
/// key's slot, following `MOVED` (which updates its slot map) and `ASK` (a one-off `ASKING`
/// plus the command on the importing node) redirections.
///
/// While a slot has no reachable master (a failover in progress) or answers `TRYAGAIN`,
/// `CLUSTERDOWN`, `LOADING` or `MASTERDOWN`, the command is retried, with a fresh slot map,
/// until its timeout (15 s by default). A command may thus be sent twice when a node dies
/// after running it: use idempotent commands (`GET`, `SET`, `DEL`), as tests of a lock do.
///
/// Used from other processes too: it needs only seed addresses, not the [`RedisCluster`]. Like
/// the harness's clusters, it assumes that every master listens on `127.0.0.1`.
pub struct ClusterConn {
    seeds: Vec<String>,
    /// The master of each slot, as an index into `addrs`; `usize::MAX` when unknown.
    owners: Vec<usize>,
    addrs: Vec<String>,
    conns: HashMap<String, redis::Connection>,
    timeout: Duration,
}

impl std::fmt::Debug for ClusterConn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterConn")
            .field("seeds", &self.seeds)
            .field("masters", &self.addrs)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl ClusterConn {
    /// A connection that learns the slot map from the first of `seeds` that answers. Each
    /// seed is `host:port` or `redis://host:port`. No I/O happens until the first command.
    pub fn new<I, S>(seeds: I) -> ClusterConn
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let seeds = seeds
            .into_iter()
            .map(|s| {
                let s = s.as_ref();
                s.strip_prefix("redis://")
                    .unwrap_or(s)
                    .trim_end_matches('/')
                    .to_owned()
            })
            .collect();
        ClusterConn {
            seeds,
            owners: vec![usize::MAX; usize::from(SLOTS)],
            addrs: Vec::new(),
            conns: HashMap::new(),
            timeout: DEFAULT_QUERY_TIMEOUT,
        }
    }

    /// Sets how long one command may take, redirections and retries included.
    pub fn with_timeout(mut self, timeout: Duration) -> ClusterConn {
        self.timeout = timeout;
        self
    }

    /// Runs `cmd`, whose key is `key`, on the master serving `key`'s slot.
    ///
    /// # Errors
    ///
    /// The command's own error (such as `WRONGTYPE`) at once; the last redirection,
    /// connection or cluster-state error when the timeout passes.
    pub fn query_key<T: redis::FromRedisValue>(
        &mut self,
        key: &[u8],
        cmd: &redis::Cmd,
    ) -> redis::RedisResult<T> {
        let slot = usize::from(key_slot(key));
        let deadline = Instant::now() + self.timeout;
        let mut asking: Option<String> = None;
        loop {
            let (addr, ask) = match asking.take() {
                Some(addr) => (addr, true),
                None => {
                    if self.owners[slot] == usize::MAX {
                        self.refresh();
                    }
                    match self.owners[slot] {
                        usize::MAX => (self.seeds.first().cloned().unwrap_or_default(), false),
                        i => (self.addrs[i].clone(), false),
                    }
                }
            };
            let result = self.run(&addr, cmd, ask);
            let err = match result {
                Ok(v) => return Ok(v),
                Err(e) => e,
            };
            if Instant::now() >= deadline {
                return Err(err);
            }
            if let Some((target, _)) = err.redirect_node() {
                let target = target.to_owned();
                if err.code() == Some("ASK") {
                    asking = Some(target);
                } else {
                    self.owners[slot] = self.intern(target);
                }
                continue;
            }
            let retry = err.is_io_error()
                || err.is_timeout()
                || err.is_connection_dropped()
                || err.is_connection_refusal()
                || matches!(
                    err.code(),
                    Some("TRYAGAIN" | "CLUSTERDOWN" | "LOADING" | "MASTERDOWN")
                );
            if !retry {
                return Err(err);
            }
            self.conns.remove(&addr);
            self.owners[slot] = usize::MAX;
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `GET key`.
    ///
    /// # Errors
    ///
    /// As [`ClusterConn::query_key`].
    pub fn get(&mut self, key: &[u8]) -> redis::RedisResult<Option<Vec<u8>>> {
        self.query_key(key, redis::cmd("GET").arg(key))
    }

    /// `GET key` as an integer; `None` when the key does not exist.
    ///
    /// # Errors
    ///
    /// As [`ClusterConn::query_key`], and a type error for a value that is not an integer.
    pub fn get_u64(&mut self, key: &[u8]) -> redis::RedisResult<Option<u64>> {
        self.query_key(key, redis::cmd("GET").arg(key))
    }

    /// `SET key value`.
    ///
    /// # Errors
    ///
    /// As [`ClusterConn::query_key`].
    pub fn set(&mut self, key: &[u8], value: impl redis::ToRedisArgs) -> redis::RedisResult<()> {
        self.query_key(key, redis::cmd("SET").arg(key).arg(value))
    }

    fn intern(&mut self, addr: String) -> usize {
        match self.addrs.iter().position(|a| *a == addr) {
            Some(i) => i,
            None => {
                self.addrs.push(addr);
                self.addrs.len() - 1
            }
        }
    }

    /// Reloads the whole slot map from the first known node that answers; keeps the old one
    /// if none does.
    fn refresh(&mut self) {
        let mut candidates: Vec<String> = self.addrs.clone();
        for s in &self.seeds {
            if !candidates.contains(s) {
                candidates.push(s.clone());
            }
        }
        for addr in candidates {
            let reply = self.run::<redis::Value>(&addr, redis::cmd("CLUSTER").arg("SLOTS"), false);
            let Some(slots) = reply.ok().as_ref().and_then(parse_slots) else {
                self.conns.remove(&addr);
                continue;
            };
            self.owners.fill(usize::MAX);
            for r in slots {
                let i = self.intern(format!("127.0.0.1:{}", r.master));
                self.owners[usize::from(r.start)..=usize::from(r.end)].fill(i);
            }
            return;
        }
    }

    fn run<T: redis::FromRedisValue>(
        &mut self,
        addr: &str,
        cmd: &redis::Cmd,
        asking: bool,
    ) -> redis::RedisResult<T> {
        if !self.conns.contains_key(addr) {
            let conn = connect(addr)?;
            self.conns.insert(addr.to_owned(), conn);
        }
        let conn = self.conns.get_mut(addr).expect("inserted above");
        if asking {
            let (v,): (T,) = redis::pipe()
                .cmd("ASKING")
                .ignore()
                .add_command(cmd.clone())
                .query(conn)?;
            Ok(v)
        } else {
            cmd.query(conn)
        }
    }
}
