//! One voter: a Redis server (or a Sentinel-watched master, or a cluster of masters), and a
//! small pool of blocking connections per endpoint.
//!
//! A connection is used by one thread at a time: it is taken out of the pool for one exchange
//! and put back only when the exchange ended cleanly. A connection that timed out or broke is
//! dropped, never reused, so a late reply can never be read as the answer to a new request.

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::time::{Duration, Instant};

use redis::{ConnectionAddr, ConnectionInfo, IntoConnectionInfo, RedisConnectionInfo, RedisError};

use crate::cluster::{self, Cluster};
use crate::error::Error;
use crate::process::PerProcess;
use crate::scripts;
use crate::sentinel::{self, Sentinel};
use crate::sync::Mutex;
use crate::url;

/// The states of a node's first connection: not tried, being opened, tried.
const FRESH: u8 = 0;
const OPENING: u8 = 1;
const OPENED: u8 = 2;

/// Idle connections older than this are closed.
const IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// At most this many idle connections are kept per node.
const MAX_IDLE: usize = 64;

/// One voter of the quorum: a single server (by URL or behind Sentinel), or a Redis Cluster
/// whose key slots decide which master a lock's requests go to.
pub(crate) struct Node {
    kind: Kind,
    display: String,
    /// Whether the client's first connection to this node was opened yet: see
    /// [`Node::warm_up`].
    first: AtomicU8,
}

enum Kind {
    Single(Arc<Endpoint>),
    Cluster(Box<Cluster>),
}

/// One place connections go, with its pool: a server, a Sentinel-watched master, or one master
/// of a cluster.
pub(crate) struct Endpoint {
    target: Target,
    display: String,
    client_name: Arc<str>,
    connect_timeout: Duration,
    /// Idle connections, with when each was put back; a forked child has its own (empty)
    /// pool, since the sockets belong to the parent's conversation with Redis.
    pool: PerProcess<Mutex<Vec<(redis::Connection, Instant)>>>,
    /// A connection is being opened in the background (see [`Endpoint::connect`]).
    warming: AtomicBool,
    /// Why the last connection opened in the background failed, and when.
    background_error: Mutex<Option<(Instant, RedisError)>>,
}

/// Where an endpoint's connections go.
enum Target {
    /// One server, by its URL.
    Direct(redis::Client),
    /// Whichever server a group of sentinels names as the master.
    Sentinel(Sentinel),
}

impl Node {
    /// A node for `url`; with `tls_ca_cert` (PEM), a `rediss://` node whose certificate must
    /// chain to that CA instead of the system's roots. A `redis+sentinel://` URL makes a node
    /// whose connections go to the master that its sentinels name (see `sentinel.rs`); a
    /// `redis+cluster://` URL makes a cluster node (see `cluster.rs`).
    pub(crate) fn open(
        url: &str,
        client_name: &str,
        connect_timeout: Duration,
        tls_ca_cert: Option<&[u8]>,
    ) -> Result<Node, Error> {
        if cluster::is_cluster_url(url) {
            let c = Cluster::parse(url, client_name, connect_timeout).map_err(|e| {
                Error::invalid(format!("malformed Redis Cluster URL {}: {e}", redact(url)))
            })?;
            no_tls_ca(tls_ca_cert, c.display())?;
            return Ok(Node::cluster(c));
        }
        let (target, display) = if sentinel::is_sentinel_url(url) {
            let s = Sentinel::parse(url).map_err(|e| {
                Error::invalid(format!("malformed Redis Sentinel URL {}: {e}", redact(url)))
            })?;
            no_tls_ca(tls_ca_cert, s.display())?;
            let display = s.display().to_owned();
            (Target::Sentinel(s), display)
        } else {
            direct(url, tls_ca_cert)?
        };
        Ok(Node::single(Endpoint::new(
            target,
            display,
            client_name.into(),
            connect_timeout,
        )))
    }

    /// A node behind Sentinel, from its parts.
    pub(crate) fn sentinel(s: Sentinel, client_name: &str, connect_timeout: Duration) -> Node {
        let display = s.display().to_owned();
        Node::single(Endpoint::new(
            Target::Sentinel(s),
            display,
            client_name.into(),
            connect_timeout,
        ))
    }

    /// A node for a Redis Cluster.
    pub(crate) fn cluster(c: Cluster) -> Node {
        Node {
            display: c.display().to_owned(),
            kind: Kind::Cluster(Box::new(c)),
            first: AtomicU8::new(FRESH),
        }
    }

    fn single(endpoint: Endpoint) -> Node {
        Node {
            display: endpoint.display.clone(),
            kind: Kind::Single(Arc::new(endpoint)),
            first: AtomicU8::new(FRESH),
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
    /// starts only once a quorum of its nodes is done with this (see [`quorum::warm_up`]):
    /// its first `try_lock` neither fails on a slow connect nor spends its lease's validity
    /// on it. Every later connection is opened within the round's deadline, and in the
    /// background when that cuts it short (see [`Endpoint::connect`]).
    ///
    /// [`quorum::warm_up`]: crate::quorum::warm_up
    pub(crate) fn warm_up(&self, slot: u16) -> bool {
        let connect_timeout = match &self.kind {
            Kind::Single(e) => e.connect_timeout,
            Kind::Cluster(c) => c.connect_timeout(),
        };
        let deadline = Instant::now() + connect_timeout;
        let opened = self
            .endpoint(slot, deadline)
            .and_then(|e| e.take_or_connect(deadline).map(|conn| e.put(conn)));
        if let Err(e) = &opened {
            log::debug!("{}: first connection failed: {e}", self.display);
        }
        self.first.store(OPENED, Ordering::Release);
        opened.is_ok()
    }

    /// The node's address without credentials, for reports and logs.
    pub(crate) fn name(&self) -> &str {
        &self.display
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
            Kind::Single(e) => matches!(e.target, Target::Sentinel(_)),
        }
    }

    /// Where requests about keys in `slot` go, resolved before `deadline`.
    pub(crate) fn endpoint(
        &self,
        slot: u16,
        deadline: Instant,
    ) -> Result<Arc<Endpoint>, RedisError> {
        match &self.kind {
            Kind::Single(e) => Ok(Arc::clone(e)),
            Kind::Cluster(c) => c.endpoint(slot, deadline),
        }
    }
}

fn no_tls_ca(tls_ca_cert: Option<&[u8]>, display: &str) -> Result<(), Error> {
    if tls_ca_cert.is_some() {
        return Err(Error::invalid(format!(
            "a TLS CA certificate was given, but {display} is not a rediss:// URL"
        )));
    }
    Ok(())
}

fn direct(url: &str, tls_ca_cert: Option<&[u8]>) -> Result<(Target, String), Error> {
    let info: ConnectionInfo = url
        .into_connection_info()
        .map(without_setinfo)
        .map_err(|e| Error::invalid(format!("malformed Redis URL {}: {e}", redact(url))))?;
    let display = describe(&info);
    let client = match tls_ca_cert {
        None => redis::Client::open(info),
        Some(pem) => tls::client_with_ca(info, &display, pem)?,
    }
    .map_err(|e| Error::invalid(format!("unusable Redis URL {display}: {e}")))?;
    #[cfg(feature = "tls-rustls")]
    if matches!(
        client.get_connection_info().addr(),
        ConnectionAddr::TcpTls { .. }
    ) {
        tls::install_crypto_provider();
    }
    Ok((Target::Direct(client), display))
}

impl Endpoint {
    fn new(
        target: Target,
        display: String,
        client_name: Arc<str>,
        connect_timeout: Duration,
    ) -> Endpoint {
        Endpoint {
            target,
            display,
            client_name,
            connect_timeout,
            pool: PerProcess::new(Mutex::new(Vec::new())),
            warming: AtomicBool::new(false),
            background_error: Mutex::new(None),
        }
    }

    /// One master of a cluster, at `host:port`, with the cluster's credentials.
    pub(crate) fn cluster_master(
        host: &str,
        port: u16,
        settings: &RedisConnectionInfo,
        client_name: Arc<str>,
        connect_timeout: Duration,
    ) -> Result<Endpoint, RedisError> {
        let info = without_setinfo(
            ConnectionAddr::Tcp(host.to_owned(), port)
                .into_connection_info()?
                .set_redis_settings(settings.clone()),
        );
        Ok(Endpoint::new(
            Target::Direct(redis::Client::open(info)?),
            url::host_port(host, port),
            client_name,
            connect_timeout,
        ))
    }

    /// The endpoint's address without credentials.
    pub(crate) fn name(&self) -> &str {
        &self.display
    }

    /// An idle connection, if there is one (the most recently used: it is the likeliest alive).
    pub(crate) fn take(&self) -> Option<redis::Connection> {
        self.idle().lock().pop().map(|(c, _)| c)
    }

    /// This process's idle connections. A forked child starts with none: it closes its copies
    /// of the parent's sockets (which does not disturb the parent) when their pool is not
    /// locked, and leaves them otherwise.
    fn idle(&self) -> &Mutex<Vec<(redis::Connection, Instant)>> {
        self.pool.get(|parent| {
            if let Some(mut inherited) = parent.try_lock() {
                inherited.clear();
            }
            Mutex::new(Vec::new())
        })
    }

    /// Returns a connection that finished its exchange cleanly.
    pub(crate) fn put(&self, conn: redis::Connection) {
        let now = Instant::now();
        let mut idle = self.idle().lock();
        idle.retain(|(_, since)| now.duration_since(*since) < IDLE_TIMEOUT);
        if idle.len() < MAX_IDLE {
            idle.push((conn, now));
        }
    }

    /// A pooled connection, or a new one opened before `deadline`.
    pub(crate) fn take_or_connect(
        self: &Arc<Self>,
        deadline: Instant,
    ) -> Result<redis::Connection, RedisError> {
        match self.take() {
            Some(conn) => Ok(conn),
            None => self.connect(deadline),
        }
    }

    /// Opens a new connection within `deadline`: connect, name it, load the scripts.
    ///
    /// A request's deadline (the per-node timeout, 50–250 ms by default) can be shorter than
    /// opening a connection takes (TLS, a distant server): when it cuts one short, a
    /// connection is opened in the background within the connect timeout and pooled, so that
    /// a later attempt finds it instead of timing out the same way forever. When the
    /// background connection fails instead (a certificate that does not verify, a wrong
    /// password), later attempts cut short report that error rather than a bare timeout.
    pub(crate) fn connect(
        self: &Arc<Self>,
        deadline: Instant,
    ) -> Result<redis::Connection, RedisError> {
        let cut_short = deadline < Instant::now() + self.connect_timeout;
        let result = self.try_connect(deadline).map_err(explain_tls);
        let Err(e) = &result else {
            return result;
        };
        if !e.is_timeout() || !cut_short {
            return result;
        }
        // A recent failure in the background says why; do not start another one meanwhile.
        if let Some((at, why)) = &*self.background_error.lock()
            && at.elapsed() < self.connect_timeout
        {
            return Err(why.clone());
        }
        if !self.warming.swap(true, Ordering::AcqRel) {
            let endpoint = Arc::clone(self);
            let spawned = std::thread::Builder::new()
                .name("redmutex-connect".into())
                .spawn(move || {
                    let deadline = Instant::now() + endpoint.connect_timeout;
                    let outcome = endpoint.try_connect(deadline).map_err(explain_tls);
                    *endpoint.background_error.lock() = match outcome {
                        Ok(conn) => {
                            endpoint.put(conn);
                            None
                        }
                        // A timeout says nothing new; the next cut-short attempt tries again.
                        Err(e) if e.is_timeout() => None,
                        Err(e) => Some((Instant::now(), e)),
                    };
                    endpoint.warming.store(false, Ordering::Release);
                });
            if spawned.is_err() {
                self.warming.store(false, Ordering::Release);
            }
        }
        result
    }

    fn try_connect(&self, deadline: Instant) -> Result<redis::Connection, RedisError> {
        let mut conn = match &self.target {
            Target::Direct(client) => {
                open_connection(client, remaining(deadline)?.min(self.connect_timeout))?
            }
            Target::Sentinel(s) => s.connect_master(deadline, self.connect_timeout)?,
        };
        let mut setup = redis::pipe();
        if let Target::Sentinel(_) = self.target {
            setup.cmd("ROLE");
        }
        setup.cmd("CLIENT").arg("SETNAME").arg(&*self.client_name);
        for s in scripts::all() {
            setup.cmd("SCRIPT").arg("LOAD").arg(s.source());
        }
        // Sent at once; each reply is read with the time that is left (redis-rs's pipeline
        // would wait the whole timeout again for every reply a frozen server never sends).
        // The first error stands: a server that wants a password that was not given answers
        // every command `NOAUTH`, an authentication error.
        conn.set_write_timeout(Some(remaining(deadline)?))?;
        conn.send_packed_command(&setup.get_packed_pipeline())?;
        let mut replies = Vec::with_capacity(setup.len());
        for _ in 0..setup.len() {
            conn.set_read_timeout(Some(remaining(deadline)?))?;
            replies.push(conn.recv_response()?.extract_error()?);
        }
        if let Target::Sentinel(_) = self.target {
            sentinel::check_master(&replies[0], &self.display)?;
        }
        Ok(conn)
    }
}

/// `info` without redis-rs's `CLIENT SETINFO` handshake: the connection is named by our own
/// setup (`CLIENT SETNAME`), and each handshake reply would cost a frozen server the whole
/// connect budget again (see [`open_connection`]).
pub(crate) fn without_setinfo(info: ConnectionInfo) -> ConnectionInfo {
    let settings = info.redis_settings().clone().set_skip_set_lib_name();
    info.set_redis_settings(settings)
}

/// Opens a connection of `client` within `budget`. redis-rs bounds the TCP connect and then
/// each handshake reply (`AUTH`, `SELECT`) by the timeout it is given, one after another, so
/// the budget is shared among them. It clears its timeouts afterwards; the caller sets its own.
pub(crate) fn open_connection(
    client: &redis::Client,
    budget: Duration,
) -> Result<redis::Connection, RedisError> {
    let settings = client.get_connection_info().redis_settings();
    let replies = u32::from(settings.password().is_some()) + u32::from(settings.db() != 0);
    client.get_connection_with_timeout(budget / replies.max(1))
}

/// Says that a rustls verification failure (`invalid peer certificate: UnknownIssuer`) is about
/// TLS, so that it does not read like an unreachable node. Still an I/O error: the kind stays
/// `Connection`.
fn explain_tls(e: RedisError) -> RedisError {
    let text = e.to_string();
    if e.is_io_error() && text.contains("certificate") {
        RedisError::from(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{TLS_UNVERIFIED}: {text}"),
        ))
    } else {
        e
    }
}

/// How a connection whose server certificate did not verify is reported.
pub(crate) const TLS_UNVERIFIED: &str = "TLS certificate verification failed";

/// The time left until `deadline`, or a timeout error when there is none.
pub(crate) fn remaining(deadline: Instant) -> Result<Duration, RedisError> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left < Duration::from_micros(100) {
        Err(timed_out())
    } else {
        Ok(left)
    }
}

/// What a node that did not answer by the deadline is reported as.
pub(crate) const NO_ANSWER: &str = "timed out: no answer in time";

pub(crate) fn timed_out() -> RedisError {
    RedisError::from(io::Error::new(io::ErrorKind::TimedOut, NO_ANSWER))
}

/// Bounds both directions of `conn` by `deadline`.
pub(crate) fn set_timeouts(conn: &redis::Connection, deadline: Instant) -> Result<(), RedisError> {
    let left = remaining(deadline)?;
    conn.set_read_timeout(Some(left))?;
    conn.set_write_timeout(Some(left))?;
    Ok(())
}

#[cfg(feature = "tls-rustls")]
mod tls {
    use redis::{ConnectionAddr, ConnectionInfo, RedisResult, TlsCertificates};
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;

    use crate::error::Error;

    /// A client for a `rediss://` node whose certificate must chain to the CA in `pem`.
    pub(super) fn client_with_ca(
        info: ConnectionInfo,
        display: &str,
        pem: &[u8],
    ) -> Result<RedisResult<redis::Client>, Error> {
        if !matches!(info.addr(), ConnectionAddr::TcpTls { .. }) {
            return Err(Error::invalid(format!(
                "a TLS CA certificate was given, but {display} is not a rediss:// URL"
            )));
        }
        // redis-rs silently ignores input without a PEM certificate in it, which would make
        // every connection fail verification later with a misleading error.
        let mut certs = 0;
        for cert in CertificateDer::pem_slice_iter(pem) {
            cert.map_err(|e| Error::invalid(format!("unreadable TLS CA certificate PEM: {e}")))?;
            certs += 1;
        }
        if certs == 0 {
            return Err(Error::invalid(
                "the TLS CA certificate holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
            ));
        }
        Ok(redis::Client::build_with_tls(
            info,
            TlsCertificates {
                client_tls: None,
                root_cert: Some(pem.to_vec()),
            },
        ))
    }

    /// Makes `ring` the process's rustls provider unless one was chosen already: rustls cannot
    /// pick one by itself when another crate in the program also enables `aws-lc-rs`.
    pub(super) fn install_crypto_provider() {
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

#[cfg(not(feature = "tls-rustls"))]
mod tls {
    use redis::{ConnectionInfo, RedisResult};

    use crate::error::Error;

    pub(super) fn client_with_ca(
        _info: ConnectionInfo,
        _display: &str,
        _pem: &[u8],
    ) -> Result<RedisResult<redis::Client>, Error> {
        Err(Error::invalid(
            "redmutex was built without the tls-rustls feature",
        ))
    }
}

/// `scheme://[user@]host:port/db`, never the password.
fn describe(info: &ConnectionInfo) -> String {
    let redis = info.redis_settings();
    let (scheme, addr) = match info.addr() {
        ConnectionAddr::Tcp(h, p) => ("redis", format!("{h}:{p}")),
        ConnectionAddr::TcpTls { host, port, .. } => ("rediss", format!("{host}:{port}")),
        ConnectionAddr::Unix(path) => ("unix", path.display().to_string()),
        _ => ("redis", info.addr().to_string()),
    };
    let user = redis
        .username()
        .map(|u| format!("{u}@"))
        .unwrap_or_default();
    let db = if redis.db() != 0 {
        format!("/{}", redis.db())
    } else {
        String::new()
    };
    format!("{scheme}://{user}{addr}{db}")
}

/// A URL with any password replaced, for error messages about URLs that did not parse: the
/// user-info password (`redis://user:***@host`) and a `pass=` query parameter (the form of
/// `unix:///run/redis.sock?pass=…` URLs).
pub(crate) fn redact(url: &str) -> String {
    let url = redact_query_password(url);
    let (head, rest) = match url.split_once("://") {
        Some((scheme, rest)) => (format!("{scheme}://"), rest),
        None => (String::new(), url.as_str()),
    };
    match rest.rsplit_once('@') {
        Some((creds, host)) => {
            let user = creds.split(':').next().unwrap_or("");
            format!("{head}{user}:***@{host}")
        }
        None => url,
    }
}

fn redact_query_password(url: &str) -> String {
    let Some((base, query)) = url.split_once('?') else {
        return url.to_owned();
    };
    let params: Vec<String> = query
        .split('&')
        .map(|p| match p.split_once('=') {
            Some((k, _)) if k.contains("pass") => format!("{k}=***"),
            _ => p.to_owned(),
        })
        .collect();
    format!("{base}?{}", params.join("&"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_never_shows_the_password() {
        let n = Node::open(
            "redis://alice:s3cret@127.0.0.1:7000/2",
            "t",
            Duration::from_secs(1),
            None,
        )
        .unwrap();
        assert_eq!(n.name(), "redis://alice@127.0.0.1:7000/2");
        assert_eq!(redact("redis://:pw@h:1"), "redis://:***@h:1");

        let n = Node::open(
            "redis+sentinel://alice:s3cret@s1:26379,s2/mymaster/2?sentinel_password=sp",
            "t",
            Duration::from_secs(1),
            None,
        )
        .unwrap();
        assert_eq!(
            n.name(),
            "redis+sentinel://alice@s1:26379,s2:26379/mymaster/2"
        );
    }

    #[test]
    fn malformed_urls_are_invalid_arguments() {
        for url in [
            "",
            "nonsense",
            "http://x:1",
            "redis://:pw@[::1:7000",
            "redis+sentinel://:pw@s1:26379",
            "redis+sentinel://:pw@s1:x/m",
            "redis+sentinel://:pw@s1/m?sentinel_password=pw&x=1",
            "rediss+sentinel://:pw@s1/m",
        ] {
            let err = Node::open(url, "t", Duration::from_secs(1), None)
                .err()
                .unwrap();
            assert_eq!(err.kind(), crate::ErrorKind::InvalidArgument, "{url}");
            assert!(!err.to_string().contains("pw@"), "{err}");
        }
    }
}
