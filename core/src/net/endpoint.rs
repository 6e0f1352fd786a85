//! One place connections go — a server, a Sentinel-watched master, or one master of a
//! cluster — with its small pool of blocking connections.
//!
//! A connection is used by one thread at a time: it is taken out of the pool for one exchange
//! and put back only when the exchange ended cleanly. A connection that timed out or broke is
//! dropped, never reused, so a late reply can never be read as the answer to a new request.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use redis::{RedisConnectionInfo, RedisError, RedisResult, Value};

use super::conn::{self, Connection, remaining};
use super::sentinel::{self, Sentinel};
use super::url::{Tls, host_port};
use crate::process::PerProcess;
use crate::sync::LocalMutex;
use crate::wire::{Failure, NetError};

/// Idle connections older than this are closed.
const IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// An attempt to open a connection that timed out with at least this much time says the
/// server hangs (a healthy one answers in a few milliseconds; one given less may just have
/// been cut short); while it hangs, a caller's own attempt gets no more than this.
const HANG_BUDGET: Duration = Duration::from_millis(20);
/// At most this many idle connections are kept per endpoint.
const MAX_IDLE: usize = 64;
/// A connection of an endpoint not found slow that owes the replies of this many rounds is
/// read first (rounds, not replies: a round may be several requests).
const MAX_OWED: usize = 16;
/// How much longer than another's a server's reads must have waited on average for the server
/// to be read after it.
const SLOW_STEP: Duration = Duration::from_millis(20);

/// What every new connection of a client is set up with.
pub(crate) struct Setup {
    /// The connection's name (`CLIENT SETNAME`), so that `CLIENT LIST` tells whose it is.
    pub(crate) client_name: Arc<str>,
    /// The bound on opening one connection.
    pub(crate) connect_timeout: Duration,
    /// Commands run once on every new connection, before any request (the layer above loads
    /// its scripts this way).
    pub(crate) preload: Arc<[redis::Cmd]>,
    /// A question asked of each server on its connections until one answer passes.
    pub(crate) probe: Option<Probe>,
}

/// What the layer above makes of a server's answers to a probe's commands (an error reply
/// where a command was not answered): given the server's name and the answers, `Err` with a
/// sentence refuses the connection; `Ok` may say what the server is (its software and
/// version), which [`Endpoint::server`] then tells.
pub(crate) type Verdict =
    Arc<dyn Fn(&str, &[Value]) -> Result<Option<String>, String> + Send + Sync>;

/// Questions about a server's version and settings, and what the layer above makes of the
/// answers.
#[derive(Clone)]
pub(crate) struct Probe {
    pub(crate) cmds: Vec<redis::Cmd>,
    pub(crate) check: Verdict,
}

impl Setup {
    fn share(&self) -> Setup {
        Setup {
            client_name: Arc::clone(&self.client_name),
            connect_timeout: self.connect_timeout,
            preload: Arc::clone(&self.preload),
            probe: self.probe.clone(),
        }
    }
}

/// One place connections go, with its pool.
pub(crate) struct Endpoint {
    target: Target,
    display: String,
    setup: Setup,
    /// Idle connections, with when each was put back; a forked child has its own (empty)
    /// pool, since the sockets belong to the parent's conversation with Redis.
    pool: PerProcess<LocalMutex<Vec<(Connection, Instant)>>>,
    /// A connection is being opened in the background (see [`Endpoint::connect`]).
    warming: AtomicBool,
    /// The last attempt to open a connection timed out, and none has opened since: callers
    /// do not wait for attempts of their own meanwhile (see [`Endpoint::connect`]).
    hanging: AtomicBool,
    /// Why the last connection opened in the background failed, and when.
    background_error: LocalMutex<Option<(Instant, NetError)>>,
    /// The setup's probe passed on a connection: later ones skip it.
    probed: AtomicBool,
    /// What the server said it is when the probe passed (see [`Verdict`]).
    server: OnceLock<String>,
    /// The client is gone ([`Endpoint::close`]): a connection put back is closed instead.
    closed: AtomicBool,
    /// How long (ns) reads of a round's reply from this endpoint waited, on average (see
    /// [`Endpoint::note_read_wait`]).
    read_wait: AtomicU64,
    /// Its connections open now: pooled, in use or blocked waiting.
    open: Arc<AtomicU64>,
}

/// Where an endpoint's connections go.
pub(crate) enum Target {
    /// One server, and how it is secured.
    Direct(redis::Client, Tls),
    /// Whichever server a group of sentinels names as the master.
    Sentinel(Sentinel),
}

impl Endpoint {
    pub(crate) fn new(target: Target, display: String, setup: &Setup) -> Endpoint {
        Endpoint {
            target,
            display,
            setup: setup.share(),
            pool: PerProcess::new(LocalMutex::new(Vec::new())),
            warming: AtomicBool::new(false),
            hanging: AtomicBool::new(false),
            background_error: LocalMutex::new(None),
            probed: AtomicBool::new(false),
            server: OnceLock::new(),
            closed: AtomicBool::new(false),
            read_wait: AtomicU64::new(0),
            open: Arc::default(),
        }
    }

    /// Notes how long a read of a round's reply from here waited, averaged with the reads
    /// before (half each: one hiccup of a busy machine does not make a server slow, one slow
    /// reply makes it look half as slow). Replies are read as they come (our own
    /// connections: the wait is until this reply had all come) or one endpoint after another
    /// (redis-rs's, where a reply that came while an earlier one was awaited costs no wait):
    /// either way a steadily slow server stands out however its replies interleave with the
    /// others'.
    pub(crate) fn note_read_wait(&self, waited: Duration) {
        let ns = u64::try_from(waited.as_nanos()).unwrap_or(u64::MAX);
        let before = self.read_wait.load(Ordering::Relaxed);
        self.read_wait.store(before / 2 + ns / 2, Ordering::Relaxed);
    }

    fn read_wait(&self) -> Duration {
        Duration::from_nanos(self.read_wait.load(Ordering::Relaxed))
    }

    /// Where a round reads this endpoint's reply on `conn` among the others' (lowest first),
    /// so that a round that ends at its quorum leaves the slowest behind: endpoints by how
    /// long their reads waited, in steps of [`SLOW_STEP`] (a server found slow is read
    /// last, wherever it stands among the nodes; below the step, a busy machine's scheduling
    /// would reorder healthy servers at random), and among the others (in node order) first
    /// those whose connection owes the replies of [`MAX_OWED`] rounds or more, whose replies
    /// have long come and would otherwise pile up unread behind a fixed order.
    pub(crate) fn read_rank(&self, conn: &Connection) -> (u128, bool) {
        let step = self.read_wait().as_nanos() / SLOW_STEP.as_nanos();
        (step, conn.owed_rounds() < MAX_OWED)
    }

    /// Before `conn` goes back to the pool owing a round's replies: when this endpoint was
    /// found slow (its reads waited [`SLOW_STEP`] or more), reads the replies it owes to
    /// requests written longer ago than four times that wait (the average may be half the
    /// last wait), which must have come by now, so that what a slow server's connection owes
    /// stays what is in flight. An error when they did not come by `deadline`: the
    /// connection is then out of step and must be dropped.
    pub(crate) fn drain(&self, conn: &mut Connection, deadline: Instant) -> RedisResult<()> {
        let wait = self.read_wait();
        if wait < SLOW_STEP {
            return Ok(());
        }
        match Instant::now().checked_sub(wait * 4) {
            Some(before) => conn.settle_sent_before(Some(before), deadline),
            None => Ok(()),
        }
    }

    /// One master of a cluster, at `host:port`, with the cluster's credentials and TLS.
    pub(crate) fn cluster_master(
        host: &str,
        port: u16,
        settings: &RedisConnectionInfo,
        tls: &Tls,
        setup: &Setup,
    ) -> Result<Endpoint, RedisError> {
        Ok(Endpoint::new(
            Target::Direct(tls.client(host, port, settings)?, tls.clone()),
            host_port(host, port),
            setup,
        ))
    }

    /// The endpoint's address without credentials.
    /// Its connections open now.
    pub(crate) fn open_connections(&self) -> u64 {
        self.open.load(Ordering::Relaxed)
    }

    pub(crate) fn name(&self) -> &str {
        &self.display
    }

    /// What the server said it is (`Redis 7.0.15`, `Valkey 8.1.8`), once a connection's
    /// probe passed and the server said so.
    pub(crate) fn server(&self) -> Option<&str> {
        self.server.get().map(String::as_str)
    }

    pub(crate) fn connect_timeout(&self) -> Duration {
        self.setup.connect_timeout
    }

    /// Whether the server may be replaced by a promoted replica (Sentinel).
    pub(crate) fn follows_failover(&self) -> bool {
        matches!(self.target, Target::Sentinel(_))
    }

    /// An idle connection, if there is one (the most recently used: it is the likeliest alive),
    /// with the replies it still owes read first, waiting a millisecond at most: a node that
    /// answers at all has long sent them by the next use, and one that has not is slow, so
    /// its connection is dropped rather than waited for.
    pub(crate) fn take(&self) -> Option<Connection> {
        loop {
            let mut conn = self.take_owing()?;
            let usable = match conn.owed() {
                0 => !conn.closed_by_server(),
                _ => conn
                    .settle_owed(Instant::now() + Duration::from_millis(1))
                    .is_ok(),
            };
            if usable {
                return Some(conn);
            }
        }
    }

    /// An idle connection that may still owe replies: for a round that writes its requests
    /// first and reads those replies ahead of its own, within its own deadline.
    pub(crate) fn take_owing(&self) -> Option<Connection> {
        self.idle().lock().pop().map(|(c, _)| c)
    }

    /// This process's idle connections. A forked child starts with none: it closes its copies
    /// of the parent's sockets (which does not disturb the parent) when their pool is not
    /// locked, and leaves them otherwise.
    fn idle(&self) -> &LocalMutex<Vec<(Connection, Instant)>> {
        self.pool.get(|parent| {
            if let Some(mut inherited) = parent.try_lock() {
                inherited.clear();
            }
            LocalMutex::new(Vec::new())
        })
    }

    /// The most replies an idle connection still owes (for tests of what rounds that end at
    /// their quorum leave behind).
    pub(crate) fn most_owed(&self) -> u32 {
        let idle = self.idle().lock();
        idle.iter().map(|(c, _)| c.owed()).max().unwrap_or(0)
    }

    /// Returns a connection that finished its exchange cleanly.
    pub(crate) fn put(&self, conn: Connection) {
        let now = Instant::now();
        let mut idle = self.idle().lock();
        if self.closed.load(Ordering::Acquire) {
            drop(idle);
            drop(conn);
            return;
        }
        idle.retain(|(_, since)| now.duration_since(*since) < IDLE_TIMEOUT);
        if idle.len() < MAX_IDLE {
            idle.push((conn, now));
        }
    }

    /// Closes the idle connections, here and now, and from now on every connection put back:
    /// the client is gone. A thread still opening a connection in the background (see
    /// [`Endpoint::connect`]) may hold the endpoint for up to the connect timeout; without
    /// this it would hold the pool too, and close it whenever it finished, perhaps while the
    /// program that freed its client is exiting.
    pub(crate) fn close(&self) {
        let idle = {
            let mut pool = self.idle().lock();
            self.closed.store(true, Ordering::Release);
            std::mem::take(&mut *pool)
        };
        drop(idle);
    }

    /// Whether the client is gone (see [`Endpoint::close`]).
    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// A pooled connection, or a new one opened before `deadline`.
    pub(crate) fn take_or_connect(
        self: &Arc<Self>,
        deadline: Instant,
    ) -> Result<Connection, NetError> {
        match self.take() {
            Some(conn) => Ok(conn),
            None => self.connect(deadline),
        }
    }

    /// Opens a new connection within `deadline`: connect, name it, run the preload.
    ///
    /// A request's deadline (the per-node timeout, 50–250 ms by default) can be shorter than
    /// opening a connection takes (TLS, a distant server), and a host gone without a reset or
    /// a frozen server never lets one open. When an attempt times out, a connection is opened
    /// in the background within the connect timeout and pooled, so that a later attempt
    /// finds it instead of timing out the same way forever. Until one opens, an attempt of a
    /// caller's own gets [`HANG_BUDGET`] at most: enough for a server that answers again, and
    /// no round waits its whole node timeout for a node that still hangs while the other
    /// nodes decided it at once. When the background connection fails otherwise (a refused
    /// connection, a certificate that does not verify, a wrong password), attempts cut short
    /// report that error rather than a bare timeout.
    pub(crate) fn connect(self: &Arc<Self>, deadline: Instant) -> Result<Connection, NetError> {
        let connect_timeout = self.setup.connect_timeout;
        let deadline = match self.hanging.load(Ordering::Acquire) {
            true => {
                self.open_in_background();
                deadline.min(Instant::now() + HANG_BUDGET)
            }
            false => deadline,
        };
        let budget = deadline.saturating_duration_since(Instant::now());
        let cut_short = budget < connect_timeout;
        let result = self.try_connect(deadline);
        let Err(e) = &result else {
            self.hanging.store(false, Ordering::Release);
            return result;
        };
        if e.failure() != Failure::Timeout {
            return result;
        }
        // A recent failure in the background says why; do not start another one meanwhile.
        if cut_short
            && let Some((at, why)) = &*self.background_error.lock()
            && at.elapsed() < connect_timeout
        {
            return Err(why.clone());
        }
        // An attempt given too little time to tell says nothing about the server.
        if budget >= HANG_BUDGET {
            self.hanging.store(true, Ordering::Release);
        }
        self.open_in_background();
        result
    }

    /// Opens a connection in the background, within the connect timeout, and pools it,
    /// unless one is being opened already. A timeout leaves the endpoint [`hanging`]; any
    /// other outcome ends that.
    ///
    /// [`hanging`]: Self::hanging
    fn open_in_background(self: &Arc<Self>) {
        if self.warming.swap(true, Ordering::AcqRel) {
            return;
        }
        let endpoint = Arc::clone(self);
        let spawned = std::thread::Builder::new()
            .name("redmutex-connect".into())
            .spawn(move || {
                let deadline = Instant::now() + endpoint.setup.connect_timeout;
                let opened = endpoint.try_connect(deadline);
                let timed_out = matches!(&opened, Err(e) if e.failure() == Failure::Timeout);
                *endpoint.background_error.lock() = match opened {
                    Ok(conn) => {
                        endpoint.put(conn);
                        None
                    }
                    // A timeout says nothing new; the next caller starts another attempt.
                    Err(_) if timed_out => None,
                    Err(e) => Some((Instant::now(), e)),
                };
                endpoint.hanging.store(timed_out, Ordering::Release);
                endpoint.warming.store(false, Ordering::Release);
            });
        if spawned.is_err() {
            self.warming.store(false, Ordering::Release);
        }
    }

    fn try_connect(&self, deadline: Instant) -> Result<Connection, NetError> {
        let connect_timeout = self.setup.connect_timeout;
        let io = match &self.target {
            Target::Direct(client, tls) => conn::open(
                client,
                tls.config(),
                remaining(deadline)?.min(connect_timeout),
            )?,
            Target::Sentinel(s) => s.connect_master(deadline, connect_timeout)?,
        };
        let mut conn = Connection::new(io, None);
        conn.count_in(&self.open);
        let mut setup = redis::pipe();
        if let Target::Sentinel(_) = self.target {
            setup.cmd("ROLE");
        }
        let name_at = setup.len();
        setup
            .cmd("CLIENT")
            .arg("SETNAME")
            .arg(&*self.setup.client_name);
        let id_at = setup.len();
        setup.cmd("CLIENT").arg("ID");
        let probe = self
            .setup
            .probe
            .as_ref()
            .filter(|_| !self.probed.load(Ordering::Acquire));
        let probe_at = setup.len();
        let probe_end = probe_at + probe.map_or(0, |p| p.cmds.len());
        for cmd in probe.iter().flat_map(|p| p.cmds.iter()) {
            setup.add_command(cmd.clone());
        }
        for cmd in self.setup.preload.iter() {
            setup.add_command(cmd.clone());
        }
        // Sent at once; each reply is read with the time that is left (redis-rs's pipeline
        // would wait the whole timeout again for every reply a frozen server never sends).
        // The first error stands: a server that wants a password that was not given answers
        // every command `NOAUTH`, an authentication error.
        conn.set_write_timeout(Some(remaining(deadline)?))?;
        conn.send_packed_command(&setup.get_packed_pipeline())?;
        let mut replies = Vec::with_capacity(setup.len());
        for at in 0..setup.len() {
            conn.set_read_timeout(Some(remaining(deadline)?))?;
            let reply = conn.recv_response()?;
            // The name, the id and the probe are conveniences: a user whose ACL denies them
            // (a managed service's, without `CLIENT` or `INFO`) still connects.
            let optional = at == name_at || at == id_at || (probe_at..probe_end).contains(&at);
            replies.push(if optional {
                reply
            } else {
                reply.extract_error()?
            });
        }
        if let Target::Sentinel(_) = self.target {
            sentinel::check_master(&replies[0], &self.display)?;
        }
        if let Some(probe) = probe {
            let server =
                (probe.check)(&self.display, &replies[probe_at..probe_end]).map_err(|why| {
                    NetError::new(Failure::Unsuitable, std::io::ErrorKind::Other, why)
                })?;
            if let Some(server) = server {
                let _ = self.server.set(server);
            }
            self.probed.store(true, Ordering::Release);
        }
        conn.id = match replies[id_at] {
            Value::Int(id) => Some(id),
            _ => None,
        };
        Ok(conn)
    }
}
