//! `Client`: one set of Redis nodes, and the factory of locks.

use std::path::PathBuf;
use std::time::Duration;

use pyo3::exceptions::{PyRuntimeWarning, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use redmutex::MutexOptions;

use crate::args;
use crate::errors;
use crate::interrupt;
use crate::lock::Lock;
use crate::operate::{ListedHold, ListedLock};
use crate::rwlock::RwLock;
use crate::semaphore::Semaphore;
use crate::stats::ClientStats;

/// The range the core accepts for connect and node timeouts.
const MIN_TIMEOUT: Duration = Duration::from_millis(1);
const MAX_TIMEOUT: Duration = Duration::from_secs(3600);
/// The longest `max_hold` the core accepts (366 days).
const MAX_HOLD: Duration = Duration::from_secs(366 * 24 * 3600);

/// One Redis server, or several independent masters (Redlock), and the factory of locks.
///
/// url: a Redis URL ("redis://host:6379", "redis://user:password@host:6379/0",
///     "rediss://host:6380"; a master behind Sentinel as
///     "redis+sentinel://s1:26379,s2:26379/mymaster", a Redis Cluster as
///     "redis+cluster://h1:7000,h2:7000"; rediss+ for either over TLS), or a list of URLs
///     of independent masters for
///     Redlock (use 3, 5 or 7); a lock is then held only while a majority agrees.
/// connect_timeout: seconds to open one connection (default 1.0); also how long a lock
///     call rides over unreachable nodes before it raises, and how long the client's first
///     request to each node (which opens its first connection) may take.
/// node_timeout: seconds each node has to answer one request (default: 2 % of each
///     lock's ttl, between 0.05 and 0.25).
/// owner: the label at the start of every lock value, so that GET on a lock tells who
///     holds it (default "hostname:pid"); 1 to 128 visible ASCII characters.
/// tls_ca_cert: for TLS URLs (rediss://, rediss+cluster://, rediss+sentinel://), the CA
///     certificate(s) the servers' certificates must chain to instead of the system's roots:
///     PEM as bytes, or the path of a PEM file. Certificates are always checked unless a URL
///     ends in "#insecure".
/// require_noeviction: refuse a server whose maxmemory-policy is not noeviction (its lock
///     calls raise ServerError at once). Without it, such a server is used, and a
///     RuntimeWarning says once per server that memory pressure may evict a held lock or a
///     fence counter.
///
/// Making a Client does no I/O: nodes are connected on first use, and a forked child opens its
/// own connections. Thread-safe; share one Client between threads.
#[pyclass(module = "redmutex", name = "Client", frozen)]
pub struct Client {
    inner: redmutex::Client,
}

#[pymethods]
impl Client {
    #[new]
    #[pyo3(signature = (url, *, connect_timeout = None, node_timeout = None, owner = None, tls_ca_cert = None, require_noeviction = false))]
    fn new(
        url: &Bound<'_, PyAny>,
        connect_timeout: Option<&Bound<'_, PyAny>>,
        node_timeout: Option<&Bound<'_, PyAny>>,
        owner: Option<&Bound<'_, PyAny>>,
        tls_ca_cert: Option<&Bound<'_, PyAny>>,
        require_noeviction: bool,
    ) -> PyResult<Client> {
        let py = url.py();
        let mut builder = redmutex::Client::builder()
            .nodes(args::urls(url)?)
            .require_noeviction(require_noeviction)
            .on_warning(warn);
        if let Some(t) =
            args::optional_duration("connect_timeout", connect_timeout, MIN_TIMEOUT, MAX_TIMEOUT)?
        {
            builder = builder.connect_timeout(t);
        }
        if let Some(t) =
            args::optional_duration("node_timeout", node_timeout, MIN_TIMEOUT, MAX_TIMEOUT)?
        {
            builder = builder.node_timeout(t);
        }
        if let Some(owner) = owner.filter(|o| !o.is_none()) {
            let label: String = owner
                .extract()
                .map_err(|_| PyTypeError::new_err("owner must be a str or None"))?;
            builder = builder.owner(label);
        }
        if let Some(ca) = tls_ca_cert.filter(|c| !c.is_none()) {
            builder = builder.tls_ca_cert(pem(ca)?);
        }
        let inner = builder.build().map_err(|e| errors::to_py(py, e))?;
        Ok(Client { inner })
    }

    /// A Lock on `name`; cheap, holds no connection and sends nothing until it is used.
    ///
    /// name: the Redis key of the lock, str (sent as UTF-8) or bytes, 1 to 512 bytes.
    /// ttl: the lease in seconds (0.01 to 86400): how long the lock outlives a holder that
    ///     stopped renewing it (crashed, frozen, partitioned).
    /// auto_renew: keep extending the lease every ttl/3 while the Lock is held, on the
    ///     client's renew thread (no GIL needed).
    /// max_hold: seconds after which renewal stops, so the lock expires even if the holder
    ///     never releases it; None for no limit.
    /// fencing: give each acquisition a fence number (Lock.fence). Turn it off for names
    ///     of unbounded cardinality: the counter is one Redis key per name that never expires.
    /// on_lost: a callable taking no arguments, called once when a held lock is lost
    ///     (renewal failed, or another owner replaced our value). It runs on a background
    ///     thread; keep it short. An exception it raises is printed (sys.unraisablehook).
    ///     It is not called after release().
    /// min_replicas: None (default) or (n, timeout_seconds): each grant and renewal counts
    ///     on a node only once n of its replicas acknowledged the write within the timeout
    ///     (Redis WAIT; timeout 0.001 s to ttl/2). A failover to one of those replicas keeps
    ///     the lock; WAIT is not consensus, so other failovers still may not.
    #[pyo3(
        signature = (name, ttl = None, *, auto_renew = true, max_hold = None, fencing = true, on_lost = None, min_replicas = None),
        text_signature = "(self, name, ttl=30.0, *, auto_renew=True, max_hold=None, fencing=True, on_lost=None, min_replicas=None)"
    )]
    // The Python keyword arguments, one parameter each.
    #[allow(clippy::too_many_arguments)]
    fn lock(
        &self,
        py: Python<'_>,
        name: &Bound<'_, PyAny>,
        ttl: Option<&Bound<'_, PyAny>>,
        auto_renew: bool,
        max_hold: Option<&Bound<'_, PyAny>>,
        fencing: bool,
        on_lost: Option<&Bound<'_, PyAny>>,
        min_replicas: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Lock> {
        let (name, name_is_str) = args::name(name)?;
        let opts = lease_options(py, ttl, auto_renew, max_hold, fencing, min_replicas)?;
        let on_lost = callable(on_lost)?;
        let mutex = self.inner.mutex(name).options(opts);
        Ok(Lock::new(mutex, name_is_str, on_lost))
    }

    /// A Semaphore of `permits` on `name`: at most that many holders at once, fleet-wide;
    /// cheap, holds no connection and sends nothing until it is used.
    ///
    /// name: str or bytes, 1 to 512 bytes (its keys are "{name}:holders" and the like).
    /// permits: the count, an int from 1 to 1024; every user of one name must give the same
    ///     count while any permit is held (acquire() raises ValueError otherwise).
    /// ttl, auto_renew, max_hold, fencing, on_lost: as for Client.lock(), for each permit.
    ///
    /// Needs one voter: a single server, Sentinel or a Cluster. On a client of several
    /// independent masters every call raises ValueError: majorities granting different
    /// permits need not share a node, so N permits could admit up to 2N-1 holders.
    #[pyo3(
        signature = (name, permits, ttl = None, *, auto_renew = true, max_hold = None, fencing = true, on_lost = None),
        text_signature = "(self, name, permits, ttl=30.0, *, auto_renew=True, max_hold=None, fencing=True, on_lost=None)"
    )]
    #[allow(clippy::too_many_arguments)]
    fn semaphore(
        &self,
        py: Python<'_>,
        name: &Bound<'_, PyAny>,
        permits: &Bound<'_, PyAny>,
        ttl: Option<&Bound<'_, PyAny>>,
        auto_renew: bool,
        max_hold: Option<&Bound<'_, PyAny>>,
        fencing: bool,
        on_lost: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Semaphore> {
        let (name, name_is_str) = args::name(name)?;
        let permits = args::permits(permits)?;
        let opts = lease_options(py, ttl, auto_renew, max_hold, fencing, None)?;
        let on_lost = callable(on_lost)?;
        let semaphore = self.inner.semaphore(name, permits).options(opts);
        Ok(Semaphore::new(semaphore, name_is_str, on_lost))
    }

    /// An RwLock on `name`: many readers or one writer at a time, fleet-wide; cheap, holds
    /// no connection and sends nothing until it is used. Its write side is the lock of the
    /// same name: Client.lock(name) and the writers of name exclude each other, and both
    /// exclude its readers.
    ///
    /// name: str or bytes, 1 to 512 bytes (the Redis key of the write side).
    /// ttl, auto_renew, max_hold, fencing, on_lost: as for Client.lock(), for each read and
    ///     write hold.
    #[pyo3(
        signature = (name, ttl = None, *, auto_renew = true, max_hold = None, fencing = true, on_lost = None),
        text_signature = "(self, name, ttl=30.0, *, auto_renew=True, max_hold=None, fencing=True, on_lost=None)"
    )]
    #[allow(clippy::too_many_arguments)]
    fn rwlock(
        &self,
        py: Python<'_>,
        name: &Bound<'_, PyAny>,
        ttl: Option<&Bound<'_, PyAny>>,
        auto_renew: bool,
        max_hold: Option<&Bound<'_, PyAny>>,
        fencing: bool,
        on_lost: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<RwLock> {
        let (name, name_is_str) = args::name(name)?;
        let opts = lease_options(py, ttl, auto_renew, max_hold, fencing, None)?;
        let on_lost = callable(on_lost)?;
        let rwlock = self.inner.rwlock(name).options(opts);
        RwLock::new(py, rwlock, name_is_str, on_lost)
    }

    /// The nodes' addresses, without credentials.
    #[getter]
    fn nodes(&self) -> Vec<String> {
        self.inner.node_names()
    }

    /// What each node said it runs at the client's first connection to it ("Redis 7.0.15",
    /// "Valkey 8.1.8"), in the order of nodes; None for a node not connected to yet, or whose
    /// server would not say. Local, no network.
    #[getter]
    fn servers(&self) -> Vec<Option<String>> {
        self.inner.servers()
    }

    /// Every lock whose name matches `pattern` (Redis's glob: *, ?, [a-z], \x) and that is
    /// held or waited for now, sorted by name: its holds with their holders and leases, its
    /// last fence and its waiters, read on every node. What `redmutex list` shows. For
    /// monitoring: the answer may be stale at once.
    ///
    /// pattern: str (sent as UTF-8; names come back as str) or bytes (names come back as
    ///     bytes), 1 to 2048 bytes; "*" matches every name.
    ///
    /// Locks are found by a SCAN of every server for the keys a lock keeps beside its own (its
    /// fence counter, read holds, permits, waiters): a lock taken with fencing=False, held
    /// while nobody waits, is not listed (Lock.status() reads it by name).
    ///
    /// Raises TypeError for a pattern that is not str or bytes, ValueError for an empty or
    /// too long one, NoQuorumError or LockConnectionError when too few nodes answered.
    #[pyo3(signature = (pattern = None), text_signature = "(self, pattern='*')")]
    fn list(
        &self,
        py: Python<'_>,
        pattern: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Vec<ListedLock>> {
        let (pattern, is_str) = match pattern {
            Some(p) => args::pattern(p)?,
            None => (b"*".to_vec(), true),
        };
        let client = self.inner.clone();
        let locks = interrupt::call(py, move |_| client.list(pattern))?
            .map_err(|e| errors::to_py(py, e))?;
        locks
            .iter()
            .map(|l| ListedLock::new(py, l, is_str))
            .collect()
    }

    /// Removes every hold of the lock `name`, whoever has it (a Lock's or an RwLock writer's,
    /// the read holds, a Semaphore's permits), and returns what was removed, each hold with
    /// the number of nodes it was removed from: an empty list when nothing was held. What
    /// `redmutex unlock --force` does, for a lock whose holder is gone for good (killed with a
    /// long ttl).
    ///
    /// Each node is sent the release of each hold, with the holder's own value: a hold taken
    /// meanwhile by someone else is kept, fences keep growing, and waiters are woken as by the
    /// holder's release. A holder that is still alive runs on until its next renewal or
    /// check() tells it the lock is lost: until then two holders run at once.
    ///
    /// name: str (sent as UTF-8) or bytes, 1 to 512 bytes.
    ///
    /// Raises TypeError or ValueError for a bad name, NoQuorumError or LockConnectionError
    /// when too few nodes answered (some holds may have been removed on those that did).
    fn force_unlock(&self, py: Python<'_>, name: &Bound<'_, PyAny>) -> PyResult<Vec<ListedHold>> {
        let (name, _) = args::name(name)?;
        let client = self.inner.clone();
        // Interrupted, the forced release goes on in the background.
        let removed = interrupt::call(py, move |_| client.force_unlock(name))?
            .map_err(|e| errors::to_py(py, e))?;
        Ok(removed.iter().map(|h| ListedHold::new(py, h)).collect())
    }

    /// What this client's locks did so far, and what they hold and wait for now. Local.
    fn stats(&self, py: Python<'_>) -> PyResult<ClientStats> {
        ClientStats::new(py, self.inner.stats())
    }

    /// How many nodes must agree: len(nodes) // 2 + 1.
    #[getter]
    fn quorum(&self) -> usize {
        self.inner.quorum()
    }

    fn __repr__(&self) -> String {
        format!("<redmutex.Client nodes={:?}>", self.inner.node_names())
    }
}

/// Says a warning of the library as a Python `RuntimeWarning`, from whichever thread it
/// arises on; a warning turned into an error (a `-W error` filter) is printed instead.
fn warn(message: &str) {
    Python::attach(|py| {
        let said = py
            .import("warnings")
            .and_then(|w| w.call_method1("warn", (message, py.get_type::<PyRuntimeWarning>())));
        if let Err(e) = said {
            e.write_unraisable(py, None);
        }
    });
}

/// The options of a lock of any kind, checked before anything is sent.
fn lease_options(
    py: Python<'_>,
    ttl: Option<&Bound<'_, PyAny>>,
    auto_renew: bool,
    max_hold: Option<&Bound<'_, PyAny>>,
    fencing: bool,
    min_replicas: Option<&Bound<'_, PyAny>>,
) -> PyResult<MutexOptions> {
    let ttl = match ttl.filter(|t| !t.is_none()) {
        Some(t) => args::duration("ttl", t, redmutex::MIN_TTL, redmutex::MAX_TTL)?,
        None => redmutex::DEFAULT_TTL,
    };
    let max_hold = args::optional_duration("max_hold", max_hold, redmutex::MIN_TTL, MAX_HOLD)?;
    let opts = MutexOptions::default()
        .with_ttl(ttl)
        .with_auto_renew(auto_renew)
        .with_max_hold(max_hold)
        .with_fencing(fencing)
        .with_min_replicas(args::min_replicas(min_replicas)?);
    opts.validate().map_err(|e| errors::to_py(py, e))?;
    Ok(opts)
}

/// `on_lost`: a callable or None.
fn callable(on_lost: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Py<PyAny>>> {
    match on_lost.filter(|c| !c.is_none()) {
        Some(c) if c.is_callable() => Ok(Some(c.clone().unbind())),
        Some(c) => Err(PyTypeError::new_err(format!(
            "on_lost must be callable or None, got {}",
            c.get_type().name()?
        ))),
        None => Ok(None),
    }
}

/// `tls_ca_cert`: PEM bytes, or the path (str or os.PathLike) of a PEM file.
fn pem(ca: &Bound<'_, PyAny>) -> PyResult<Vec<u8>> {
    if let Ok(bytes) = ca.cast::<PyBytes>() {
        return Ok(bytes.as_bytes().to_vec());
    }
    let path: PathBuf = ca.extract().map_err(|_| {
        PyTypeError::new_err("tls_ca_cert must be PEM bytes, a path (str or os.PathLike) or None")
    })?;
    // FileNotFoundError, PermissionError, … as Python's open() raises them.
    std::fs::read(&path).map_err(PyErr::from)
}
