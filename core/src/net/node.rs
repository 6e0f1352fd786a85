//! One voter: a Redis server (alone or behind Sentinel), or a Redis Cluster whose key slots
//! decide which master a request goes to.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

use super::cluster::{self, Cluster};
use super::endpoint::{Endpoint, Setup, Target};
use super::hub::{self, Hub, Lane};
use super::sentinel::{self, Sentinel};
use super::slots::key_slot;
use super::url::{self, redact};
use crate::sync::LocalMutex;
use crate::wire::NetError;

/// The states of a node's first connection: not tried, being opened, tried.
const FRESH: u8 = 0;
const OPENING: u8 = 1;
const OPENED: u8 = 2;

/// One voter of the quorum.
pub(crate) struct Node {
    kind: Kind,
    display: String,
    /// Whether the client's first connection to this node was opened yet: see
    /// [`Node::warm_up`].
    first: AtomicU8,
    /// The waiting connection shared by the client's waits for a release (see `hub.rs`);
    /// on a cluster, one per master, by the master's address.
    hub: Arc<Hub>,
    masters: LocalMutex<HashMap<String, Arc<Hub>>>,
}

enum Kind {
    Single(Arc<Endpoint>),
    Cluster(Box<Cluster>),
}

impl Node {
    /// A node for `url`; with `ca` (PEM), TLS certificates must chain to that CA instead of
    /// the system's roots. A `redis+sentinel://` URL makes a node whose connections go to the
    /// master that its sentinels name; a `redis+cluster://` URL makes a cluster node; both
    /// have `rediss+` forms for TLS. The error says what is wrong, never with the password.
    pub(crate) fn open(url: &str, setup: Setup, ca: Option<&[u8]>) -> Result<Node, String> {
        if cluster::SCHEMES.matches(url) {
            let c = Cluster::parse(url, ca, setup)
                .map_err(|e| format!("malformed Redis Cluster URL {}: {e}", redact(url)))?;
            return Ok(Node::cluster(c));
        }
        if sentinel::SCHEMES.matches(url) {
            let s = Sentinel::parse(url, ca)
                .map_err(|e| format!("malformed Redis Sentinel URL {}: {e}", redact(url)))?;
            return Ok(Node::sentinel(s, setup));
        }
        let (client, tls, display) = url::direct(url, ca)?;
        Ok(Node::single(Endpoint::new(
            Target::Direct(client, tls),
            display,
            &setup,
        )))
    }

    /// A node behind Sentinel.
    pub(crate) fn sentinel(s: Sentinel, setup: Setup) -> Node {
        let display = s.display().to_owned();
        Node::single(Endpoint::new(Target::Sentinel(s), display, &setup))
    }

    /// A node for a Redis Cluster.
    pub(crate) fn cluster(c: Cluster) -> Node {
        Node {
            display: c.display().to_owned(),
            kind: Kind::Cluster(Box::new(c)),
            first: AtomicU8::new(FRESH),
            hub: Arc::new(Hub::new()),
            masters: LocalMutex::new(HashMap::new()),
        }
    }

    fn single(endpoint: Endpoint) -> Node {
        Node {
            display: endpoint.name().to_owned(),
            kind: Kind::Single(Arc::new(endpoint)),
            first: AtomicU8::new(FRESH),
            hub: Arc::new(Hub::new()),
            masters: LocalMutex::new(HashMap::new()),
        }
    }

    /// Whether the client has not yet begun to connect to this node.
    pub(crate) fn is_fresh(&self) -> bool {
        self.first.load(Ordering::Acquire) == FRESH
    }

    /// Takes on opening the first connection: true for exactly one caller, which must then
    /// call [`Node::warm_up`].
    pub(crate) fn claim_warm_up(&self) -> bool {
        self.first
            .compare_exchange(FRESH, OPENING, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// Opens the client's first connection to this node (for a cluster: learns the slot map
    /// and connects to the master of `slot`) and pools it, within the connect timeout;
    /// returns whether it was opened. A round's per-node timeout is far shorter than a
    /// handshake may take (TLS, a distant or busy server), so a fresh client's first round
    /// starts only once a quorum of its nodes is done with this (see
    /// [`fanout::warm_up`](super::fanout::warm_up)). Every later connection is opened within
    /// the round's deadline, and in the background when that cuts it short (see
    /// [`Endpoint::connect`]).
    pub(crate) fn warm_up(&self, slot: u16) -> bool {
        let deadline = Instant::now() + self.connect_timeout();
        let opened = self
            .endpoint(slot, deadline)
            .and_then(|e| e.take_or_connect(deadline).map(|conn| e.put(conn)));
        if let Err(e) = &opened {
            log::debug!("{}: first connection failed: {e}", self.display);
        }
        self.first.store(OPENED, Ordering::Release);
        opened.is_ok()
    }

    /// Closes the node's pooled connections, and every one put back later (see
    /// [`Endpoint::close`]): its client is gone.
    fn connect_timeout(&self) -> Duration {
        match &self.kind {
            Kind::Single(e) => e.connect_timeout(),
            Kind::Cluster(c) => c.connect_timeout(),
        }
    }

    pub(crate) fn close(&self) {
        match &self.kind {
            Kind::Single(e) => e.close(),
            Kind::Cluster(c) => c.close(),
        }
        hub::close(&self.hub);
        self.masters.lock().values().for_each(|h| hub::close(h));
    }

    /// The node's address without credentials, for reports and logs.
    pub(crate) fn name(&self) -> &str {
        &self.display
    }

    /// What the node's server said it is at the first connection that passed the probe
    /// (`Redis 7.0.15`, `Valkey 8.1.8`; for a cluster, each version its masters run); `None`
    /// before that, or when it would not say (an ACL user without `INFO`).
    pub(crate) fn server(&self) -> Option<String> {
        match &self.kind {
            Kind::Single(e) => e.server().map(str::to_owned),
            Kind::Cluster(c) => Some(c.servers().join(", ")).filter(|s| !s.is_empty()),
        }
    }

    /// Connections open now to this node's server (every master of a cluster).
    pub(crate) fn open_connections(&self) -> u64 {
        match &self.kind {
            Kind::Single(e) => e.open_connections(),
            Kind::Cluster(c) => c.open_connections(),
        }
    }

    /// The cluster behind this node, if it is one.
    pub(crate) fn as_cluster(&self) -> Option<&Cluster> {
        match &self.kind {
            Kind::Cluster(c) => Some(c),
            Kind::Single(_) => None,
        }
    }

    /// Whether a server that refuses connections may be replaced by a promoted replica
    /// (Sentinel, Cluster): then a refused connection does not mean the node is gone.
    pub(crate) fn follows_failover(&self) -> bool {
        match &self.kind {
            Kind::Cluster(_) => true,
            Kind::Single(e) => e.follows_failover(),
        }
    }

    /// The most replies an idle connection to this node still owes (0 for a cluster).
    pub(crate) fn most_owed(&self) -> u32 {
        match &self.kind {
            Kind::Single(e) => e.most_owed(),
            Kind::Cluster(_) => 0,
        }
    }

    /// Where a wait for a release on a list in `slot` blocks (see `hub.rs`): on a Redis
    /// Cluster, with the hub of the slot's master (found before `deadline`, or the wait
    /// blocks on a connection of its own).
    pub(crate) fn lane(&self, slot: u16, deadline: Instant) -> Lane {
        match &self.kind {
            Kind::Single(e) => hub::lane(&self.hub, e),
            Kind::Cluster(c) => match c.endpoint(slot, deadline) {
                Ok(e) => {
                    let hub = Arc::clone(
                        self.masters
                            .lock()
                            .entry(e.name().to_owned())
                            .or_insert_with(|| Arc::new(Hub::listening())),
                    );
                    hub::lane(&hub, &e)
                }
                Err(_) => Lane::Own { _lane: None },
            },
        }
    }

    /// The call that waited on the list `key` ended: the shared waiting connections stop
    /// waiting on it.
    pub(crate) fn forget_wait(&self, key: &[u8]) {
        let mut kept = Vec::from_iter(hub::forget(&self.hub, key));
        kept.extend(
            self.masters
                .lock()
                .values()
                .filter_map(|h| hub::forget(h, key)),
        );
        // A signal kept for the call's next wait, which will not come: passed on.
        for pass in kept {
            let deadline = Instant::now() + self.connect_timeout();
            if let Ok(endpoint) = self.endpoint(key_slot(key), deadline) {
                hub::pass_on(&endpoint, &pass);
            }
        }
    }

    /// Where a request about every key goes (a `SCAN`): nowhere in particular for one
    /// server (`None`), one slot of each master for a cluster.
    pub(crate) fn servers_by_slot(&self, deadline: Instant) -> Result<Vec<Option<u16>>, NetError> {
        match &self.kind {
            Kind::Single(_) => Ok(vec![None]),
            Kind::Cluster(c) => Ok(c.master_slots(deadline)?.into_iter().map(Some).collect()),
        }
    }

    /// Where requests about keys in `slot` go, resolved before `deadline`.
    pub(crate) fn endpoint(&self, slot: u16, deadline: Instant) -> Result<Arc<Endpoint>, NetError> {
        match &self.kind {
            Kind::Single(e) => Ok(Arc::clone(e)),
            Kind::Cluster(c) => c.endpoint(slot, deadline),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn open(url: &str) -> Result<Node, String> {
        let setup = Setup {
            client_name: "t".into(),
            connect_timeout: Duration::from_secs(1),
            preload: Arc::new([]),
            probe: None,
        };
        Node::open(url, setup, None)
    }

    #[test]
    fn display_never_shows_the_password() {
        let n = open("redis://alice:s3cret@127.0.0.1:7000/2").unwrap();
        assert_eq!(n.name(), "redis://alice@127.0.0.1:7000/2");
        let n = open("redis+sentinel://alice:s3cret@s1:26379,s2/mymaster/2?sentinel_password=sp")
            .unwrap();
        assert_eq!(
            n.name(),
            "redis+sentinel://alice@s1:26379,s2:26379/mymaster/2"
        );
    }

    #[test]
    fn malformed_urls_are_refused_without_their_password() {
        for url in [
            "",
            "nonsense",
            "http://x:1",
            "redis://:pw@[::1:7000",
            "redis+sentinel://:pw@s1:26379",
            "redis+sentinel://:pw@s1:x/m",
            "redis+sentinel://:pw@s1/m?sentinel_password=pw&x=1",
            "rediss+sentinel://:pw@s1/m#other",
            "redis+cluster://:pw@h:0",
        ] {
            let err = open(url).err().unwrap();
            assert!(!err.contains("pw@"), "{err}");
        }
    }
}
