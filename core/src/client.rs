//! `Client`: one set of Redis nodes and the services its locks share.

use std::sync::Arc;
use std::time::Duration;

use crate::error::Error;
use crate::lock::{self, Voters, Warn};
use crate::net::{Cluster, Node, Sentinel, Setup, redact};
use crate::sentinel_master::SentinelMaster;
use crate::stats::ClientStats;

/// Default bound on opening one connection (TCP connect, AUTH, script loading).
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// The most nodes one client accepts (Redlock deployments use 3, 5 or 7).
pub const MAX_NODES: usize = 63;
/// The longest owner label, in bytes.
pub const MAX_OWNER_LEN: usize = 128;

/// One set of Redis nodes — one server (alone, behind Sentinel or a Redis Cluster), or N
/// independent ones for Redlock — plus the background services shared by all of its locks: a
/// connection pool per server and one renew thread.
///
/// Cheap to clone (an `Arc` inside), `Send + Sync`; share one `Client` between threads.
/// Opening a client does no I/O: nodes are connected on first use. Dropping its last handle
/// (a clone, or a guard) lets the renew thread finish the round it is sending (within 2 s),
/// then closes the client's connections before it returns.
///
/// # Examples
///
/// ```no_run
/// use redmutex::Client;
/// use std::time::Duration;
///
/// let client = Client::open("redis://127.0.0.1:6379")?;
/// let guard = client.mutex("invoice:nightly:lock").ttl(Duration::from_secs(30)).lock()?;
/// println!("holding fence {}", guard.fence());
/// guard.unlock()?;
/// # Ok::<(), redmutex::Error>(())
/// ```
#[derive(Clone)]
pub struct Client {
    pub(crate) inner: Arc<Voters>,
}

impl Client {
    /// A client for one Redis node, from a URL such as `redis://127.0.0.1:6379`,
    /// `redis://user:password@host:6379/0` or `rediss://host:6380`.
    ///
    /// A master watched by Redis Sentinel is one node too, given by its sentinels and its
    /// name: `redis+sentinel://[[user]:password@]s1[:26379][,s2[:port],...]/mymaster[/db]`,
    /// optionally with `?sentinel_username=…&sentinel_password=…` when the sentinels require
    /// a password of their own. The user-info credentials and the database are the master's;
    /// sentinels without a port listen on 26379. Each new connection asks the sentinels for
    /// the current master and checks with `ROLE` that it is one, so the client follows a
    /// failover. Set [`ClientBuilder::connect_timeout`] to cover the failover time if lock
    /// calls should ride over it.
    ///
    /// A Redis Cluster is one node as well: `redis+cluster://[[user]:password@]h1:7000[,h2:7000,...]`
    /// (see [`ClientBuilder::cluster`]).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) for a malformed URL.
    pub fn open(url: &str) -> Result<Client, Error> {
        Client::builder().node(url).build()
    }

    /// A builder for several nodes (Redlock) or non-default timeouts and owner label.
    pub fn builder() -> ClientBuilder {
        ClientBuilder::default()
    }

    /// How many nodes this client talks to.
    pub fn node_count(&self) -> usize {
        self.inner.nodes.len()
    }

    /// How many nodes must agree: `N/2 + 1`.
    pub fn quorum(&self) -> usize {
        self.inner.quorum
    }

    /// How many guards the renew thread currently tracks, including released ones not yet
    /// purged. Exposed for tests of the renew thread's memory bound.
    #[doc(hidden)]
    pub fn renew_queue_len(&self) -> usize {
        self.inner.renewer.queued()
    }

    /// The most replies that an idle connection to any node still owes: rounds that end at
    /// their quorum leave the slower nodes' replies to be read later. Exposed for tests of
    /// that bound.
    #[doc(hidden)]
    pub fn replies_owed(&self) -> u32 {
        self.inner
            .nodes
            .iter()
            .map(|n| n.most_owed())
            .max()
            .unwrap_or(0)
    }

    /// What this client's locks did so far, and what they hold and wait for now: a snapshot
    /// of counters the library keeps as it goes (atomics; no network).
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redmutex::Error> {
    /// let client = redmutex::Client::open("redis://127.0.0.1:6379")?;
    /// drop(client.mutex("report").try_lock());
    /// let stats = client.stats();
    /// println!("{} granted, {} refused, {} lost", stats.acquired, stats.refused, stats.lost);
    /// # Ok(())
    /// # }
    /// ```
    pub fn stats(&self) -> ClientStats {
        let mut stats = self.inner.counters.snapshot();
        stats.connections = self
            .inner
            .nodes
            .iter()
            .map(|n| n.open_connections())
            .collect();
        stats
    }

    /// The nodes' addresses, without credentials.
    pub fn node_names(&self) -> Vec<String> {
        self.inner
            .nodes
            .iter()
            .map(|n| n.name().to_owned())
            .collect()
    }

    /// What each node's server said it is at the client's first connection to it, in the
    /// order of [`Client::node_names`]: `Redis 7.0.15`, `Valkey 8.1.8` (Valkey by its own
    /// version, not the Redis version it also reports), or for a cluster each version its
    /// masters connected to so far run, comma-separated. `None` for a node not connected to
    /// yet, or whose server would not say (an ACL user without `INFO`).
    ///
    /// Servers older than Redis 6.2 are refused at that first connection: every call then
    /// fails with [`ErrorKind::Server`](crate::ErrorKind::Server), naming the node and its
    /// version.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redmutex::Error> {
    /// let client = redmutex::Client::open("redis://127.0.0.1:6379")?;
    /// client.mutex("report").status()?;
    /// assert!(client.servers()[0].is_some());
    /// # Ok(())
    /// # }
    /// ```
    pub fn servers(&self) -> Vec<Option<String>> {
        self.inner.nodes.iter().map(|n| n.server()).collect()
    }
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("nodes", &self.node_names())
            .field("quorum", &self.inner.quorum)
            .finish_non_exhaustive()
    }
}

/// Builds a [`Client`]: the nodes, the timeouts, the owner label and (with the `tls-rustls`
/// feature) the CA that TLS nodes must be signed by.
#[derive(Clone, Default)]
pub struct ClientBuilder {
    voters: Vec<Voter>,
    connect_timeout: Option<Duration>,
    node_timeout: Option<Duration>,
    owner: Option<String>,
    tls_ca_cert: Option<Vec<u8>>,
    require_noeviction: bool,
    on_warning: Option<Warn>,
    prefix_label: Option<u8>,
}

/// One voter as the builder was given it.
#[derive(Clone)]
enum Voter {
    Url(String),
    Cluster(Vec<String>),
    Sentinel(Vec<String>, SentinelMaster),
}

impl Voter {
    /// The voter's URLs without passwords.
    fn redacted(&self) -> String {
        let join = |urls: &[String]| urls.iter().map(|u| redact(u)).collect::<Vec<_>>().join(",");
        match self {
            Voter::Url(u) => redact(u),
            Voter::Cluster(seeds) => format!("cluster({})", join(seeds)),
            Voter::Sentinel(urls, master) => {
                format!("sentinel({}; {})", join(urls), master.name)
            }
        }
    }

    fn open(&self, setup: Setup, tls_ca_cert: Option<&[u8]>) -> Result<Node, Error> {
        match self {
            Voter::Url(url) => Node::open(url, setup, tls_ca_cert).map_err(Error::invalid),
            Voter::Cluster(seeds) => {
                let c = Cluster::from_seeds(seeds, tls_ca_cert, setup)
                    .map_err(|e| Error::invalid(format!("unusable Redis Cluster seeds: {e}")))?;
                Ok(Node::cluster(c))
            }
            Voter::Sentinel(urls, master) => {
                if master.db < 0 {
                    return Err(Error::invalid(format!(
                        "unusable Redis Sentinel group: the database must not be negative, got {}",
                        master.db
                    )));
                }
                let s = Sentinel::from_parts(urls, (&master.name, master.settings()), tls_ca_cert)
                    .map_err(|e| Error::invalid(format!("unusable Redis Sentinel group: {e}")))?;
                Ok(Node::sentinel(s, setup))
            }
        }
    }
}

impl std::fmt::Debug for ClientBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The URLs may carry passwords.
        let voters: Vec<String> = self.voters.iter().map(Voter::redacted).collect();
        f.debug_struct("ClientBuilder")
            .field("voters", &voters)
            .field("connect_timeout", &self.connect_timeout)
            .field("node_timeout", &self.node_timeout)
            .field("owner", &self.owner)
            .field(
                "tls_ca_cert",
                &self
                    .tls_ca_cert
                    .as_ref()
                    .map(|c| format!("{} bytes", c.len())),
            )
            .field("require_noeviction", &self.require_noeviction)
            .field("on_warning", &self.on_warning.as_ref().map(|_| "…"))
            .field("prefix_label", &self.prefix_label)
            .finish()
    }
}

impl ClientBuilder {
    /// Adds one node: a server URL (`redis://`, `rediss://`, `unix://`), or one of the URL
    /// forms of a voter made of several servers, `redis+sentinel://` (see [`Client::open`])
    /// and `redis+cluster://` (see [`ClientBuilder::cluster`]).
    pub fn node(mut self, url: impl Into<String>) -> Self {
        self.voters.push(Voter::Url(url.into()));
        self
    }

    /// Adds several independent nodes: the lock is held only when a majority agrees (Redlock).
    /// Use an odd number (3, 5, 7) of masters that fail independently.
    pub fn nodes<I, S>(mut self, urls: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.voters
            .extend(urls.into_iter().map(|u| Voter::Url(u.into())));
        self
    }

    /// Adds a Redis Cluster, given by some of its nodes (`redis://[[user]:password@]host:port`;
    /// any reachable one tells where the others are). The whole cluster is one voter: each
    /// lock lives on the master that serves its hash slot (the lock's companion keys share
    /// it), so a cluster spreads many locks over its masters. Redirections during resharding
    /// (`MOVED`, `ASK`, `TRYAGAIN`) and a master's failover are followed, not reported.
    ///
    /// The URL form, for [`ClientBuilder::node`], [`Client::open`] and the C, Python and
    /// command-line interfaces, is
    /// `redis+cluster://[[user]:password@]host[:port][,host2[:port2],...]` (port 6379 when left
    /// out). Credentials, if any, are those of every node and must be the same in every seed.
    ///
    /// A failover can lose a lock that the old master had not yet passed on to its replica
    /// (Redis replicates asynchronously); [`MutexOptions::min_replicas`](crate::MutexOptions)
    /// closes that gap. Several clusters (or a cluster and other nodes) make a Redlock quorum,
    /// each cluster one voter.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let client = redmutex::Client::builder()
    ///     .cluster(["redis://10.0.0.1:7000", "redis://10.0.0.2:7000", "redis://10.0.0.3:7000"])
    ///     .build()?;
    /// let guard = client.mutex("invoice:nightly:lock").lock()?;
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn cluster<I, S>(mut self, seeds: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.voters
            .push(Voter::Cluster(seeds.into_iter().map(Into::into).collect()));
        self
    }

    /// Adds a master watched by Redis Sentinel, given by its sentinels
    /// (`redis://[[user]:password@]host[:port]`, port 26379 when left out; credentials are the
    /// sentinels' own and must be the same in every URL) and the name they know it by — or a
    /// [`SentinelMaster`] with the master's own credentials and database. Each new connection
    /// asks the sentinels for the current master and checks with `ROLE` that it is one, so the
    /// client follows a failover.
    ///
    /// The URL form, for [`ClientBuilder::node`], [`Client::open`] and the C, Python and
    /// command-line interfaces, is
    /// `redis+sentinel://[[user]:password@]s1[:26379][,s2...]/mymaster[/db]` (see
    /// [`Client::open`]).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use redmutex::SentinelMaster;
    ///
    /// let client = redmutex::Client::builder()
    ///     .sentinel(
    ///         ["redis://10.0.0.1:26379", "redis://10.0.0.2:26379"],
    ///         SentinelMaster::new("mymaster").password("s3cret"),
    ///     )
    ///     .connect_timeout(std::time::Duration::from_secs(10)) // ride over a failover
    ///     .build()?;
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn sentinel<I, S>(mut self, sentinels: I, master: impl Into<SentinelMaster>) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.voters.push(Voter::Sentinel(
            sentinels.into_iter().map(Into::into).collect(),
            master.into(),
        ));
        self
    }

    /// The bound on opening one connection (TCP connect, AUTH, script loading); default 1 s.
    /// It also bounds how long a lock call keeps retrying while no quorum of nodes is
    /// reachable before it reports the failure, and the client's first request to each node
    /// (which opens its first connection) may take this long instead of the per-node timeout;
    /// with several nodes, only until a quorum of them has connected.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = Some(timeout);
        self
    }

    /// The per-node, per-operation timeout for every lock of this client. By default each lock
    /// derives it from its TTL (see [`MutexOptions::node_timeout`](crate::MutexOptions)).
    pub fn node_timeout(mut self, timeout: Duration) -> Self {
        self.node_timeout = Some(timeout);
        self
    }

    /// The owner label at the start of every token (default `hostname:pid`), so that `GET` on
    /// a lock tells an operator who holds it. At most 128 visible ASCII characters.
    pub fn owner(mut self, label: impl Into<String>) -> Self {
        self.owner = Some(label.into());
        self
    }

    /// The certificate authority (PEM, one or more certificates) that `rediss://` nodes'
    /// certificates must chain to, instead of the system's roots. Use it for a private CA.
    ///
    /// Certificates are always checked unless a URL explicitly opts out with the fragment
    /// `#insecure` (`rediss://host:6380/#insecure`). Without this setting the system's roots
    /// are used (the `SSL_CERT_FILE` and `SSL_CERT_DIR` environment variables are honoured).
    /// Every node must then be a `rediss://` URL.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let pem = std::fs::read("ca.crt").expect("the CA certificate");
    /// let client = redmutex::Client::builder()
    ///     .node("rediss://redis.internal:6380")
    ///     .tls_ca_cert(pem)
    ///     .build()?;
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    #[cfg(feature = "tls-rustls")]
    pub fn tls_ca_cert(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.tls_ca_cert = Some(pem.into());
        self
    }

    /// Refuses servers whose `maxmemory-policy` is not `noeviction` (default: false, they are
    /// only warned of). Under any `allkeys-*` or `volatile-*` policy, memory pressure can
    /// evict a held lock key, so that another client takes it, or a fence counter, so that
    /// fences go backwards. Each server's policy is read with `INFO memory` on its first
    /// connection (an ACL user needs `+info`; without it the check is skipped); a refused
    /// server fails lock calls at once with [`ErrorKind::Server`](crate::ErrorKind::Server)
    /// and a message naming its policy.
    pub fn require_noeviction(mut self, on: bool) -> Self {
        self.require_noeviction = on;
        self
    }

    /// Where warnings go (default: the `log` crate, at `warn` level): a server whose
    /// `maxmemory-policy` may evict locks, said once per server. The command line prints them
    /// on stderr and Python makes them `warnings.warn`.
    pub fn on_warning(mut self, warn: impl Fn(&str) + Send + Sync + 'static) -> Self {
        self.on_warning = Some(Arc::new(warn));
        self
    }

    /// With the `metrics` feature: `redmutex_acquisitions_total` also carries a `prefix`
    /// label, the lock name up to its first `separator` byte (`invoice` for
    /// `invoice:2026-12-06` with `b':'`), or the whole name when it has none. For names whose
    /// first part is a small, fixed set; a name that starts with an id would give a series
    /// per id.
    #[cfg(feature = "metrics")]
    pub fn metrics_prefix_label(mut self, separator: u8) -> Self {
        self.prefix_label = Some(separator);
        self
    }

    /// Checks the settings and makes the client; no I/O happens here.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) for no nodes, more
    /// than 63 nodes, a malformed URL, a zero timeout or a bad owner label; with a TLS CA, also
    /// for PEM without a certificate and for a node that is not a `rediss://` URL.
    pub fn build(self) -> Result<Client, Error> {
        if self.voters.is_empty() {
            return Err(Error::invalid("a client needs at least one Redis URL"));
        }
        if self.voters.len() > MAX_NODES {
            return Err(Error::invalid(format!(
                "{} nodes given; at most {MAX_NODES} are supported",
                self.voters.len()
            )));
        }
        let connect_timeout = self.connect_timeout.unwrap_or(DEFAULT_CONNECT_TIMEOUT);
        check_timeout("connect timeout", connect_timeout)?;
        if let Some(t) = self.node_timeout {
            check_timeout("node timeout", t)?;
        }
        if let Some(label) = &self.owner {
            check_label(label)?;
        }
        let name_label = self.owner.as_deref().unwrap_or(lock::default_label());
        let client_name: Arc<str> = format!("redmutex:{name_label}").into();
        let preload = lock::preload();
        let warn = self.on_warning.clone().unwrap_or_else(lock::log_warning);
        let probe = lock::server_probe(self.require_noeviction, warn);
        let nodes = self
            .voters
            .iter()
            .map(|v| {
                let setup = Setup {
                    client_name: Arc::clone(&client_name),
                    connect_timeout,
                    preload: Arc::clone(&preload),
                    probe: Some(probe.clone()),
                };
                v.open(setup, self.tls_ca_cert.as_deref()).map(Arc::new)
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Client {
            inner: Arc::new(
                Voters::new(nodes, self.node_timeout, connect_timeout, self.owner)
                    .with_prefix_label(self.prefix_label),
            ),
        })
    }
}

fn check_timeout(what: &str, t: Duration) -> Result<(), Error> {
    if t < Duration::from_millis(1) || t > Duration::from_secs(3600) {
        return Err(Error::invalid(format!(
            "{what} must be between 1 ms and 1 h, got {t:?}"
        )));
    }
    Ok(())
}

fn check_label(label: &str) -> Result<(), Error> {
    if label.is_empty()
        || label.len() > MAX_OWNER_LEN
        || !label.bytes().all(|b| b.is_ascii_graphic())
    {
        return Err(Error::invalid(format!(
            "the owner label must be 1 to {MAX_OWNER_LEN} visible ASCII characters, got {label:?}"
        )));
    }
    Ok(())
}
