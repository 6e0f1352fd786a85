//! `Mutex`: a lock name plus its options. Taking it is the lock protocol's business
//! (`lock/acquire.rs`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::client::Client;
#[allow(unused_imports)] // for the docs
use crate::error::ErrorKind;
use crate::error::{Error, TryLockError};
use crate::guard::MutexGuard;
use crate::lock::{Keys, LockStatus, Plan};
use crate::options::MutexOptions;
use crate::setters::option_setters;

/// A distributed lock: a name (its Redis key) plus its options.
///
/// Made by [`Client::mutex`]; cheap to create and clone, holds no connection. Taking it yields
/// a [`MutexGuard`], which releases the lock when dropped.
///
/// # Examples
///
/// ```no_run
/// use redmutex::{Client, TryLockError};
/// use std::time::Duration;
///
/// let client = Client::open("redis://127.0.0.1:6379")?;
/// let mutex = client.mutex("invoice:nightly:lock").ttl(Duration::from_secs(30));
/// match mutex.try_lock() {
///     Ok(guard) => println!("sending invoices with fence {}", guard.fence()),
///     Err(TryLockError::WouldBlock) => println!("another server sends them"),
///     Err(e) => return Err(e.into()),
/// }
/// # Ok::<(), redmutex::Error>(())
/// ```
///
/// # Differences from `std::sync::Mutex`
///
/// - The lock is a lease: without renewal it ends after its TTL even though the guard still
///   exists. Check [`MutexGuard::is_held`] before acting, and pass [`MutexGuard::fence`] to
///   the resource you protect.
/// - No poisoning, no data inside: the lock protects something outside this process.
/// - Every call may fail: Redis can be unreachable.
#[derive(Clone)]
pub struct Mutex {
    pub(crate) client: Client,
    /// The name (`keys.lock`) and its companion keys, derived once.
    pub(crate) keys: Arc<Keys>,
    pub(crate) opts: MutexOptions,
}

impl Client {
    /// A lock with the given name and default options; cheap, holds no connection.
    ///
    /// The name is the Redis key of the lock, exactly as given. It is checked when the lock is
    /// first used: an empty name or one longer than [`MAX_NAME_LEN`](crate::MAX_NAME_LEN)
    /// bytes is an invalid argument.
    pub fn mutex(&self, name: impl AsRef<[u8]>) -> Mutex {
        Mutex {
            client: self.clone(),
            keys: Arc::new(Keys::for_name(name.as_ref().to_vec())),
            opts: MutexOptions::default(),
        }
    }
}

option_setters!(Mutex);

impl Mutex {
    /// Replication safety: each grant and renewal counts on a node only once `n` of its
    /// replicas acknowledged the write within `timeout` (`WAIT`); see
    /// [`MutexOptions::min_replicas`] for what it does and does not guarantee.
    pub fn min_replicas(mut self, n: u32, timeout: Duration) -> Self {
        self.opts.min_replicas = Some((n, timeout));
        self
    }

    /// Blocks until the lock is held.
    ///
    /// Waiters do not poll: a release wakes one waiter within about a round trip; the wait
    /// for a wake-up is bounded by the holder's remaining TTL and the wait cap.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`] for a bad name or option (nothing is sent);
    /// [`ErrorKind::Auth`] at once, and so is a [`ErrorKind::Connection`] error for a server
    /// certificate that does not verify; [`ErrorKind::Connection`] (one node) or
    /// [`ErrorKind::NoQuorum`] (several) when no quorum of nodes could be reached for the
    /// client's connect timeout.
    pub fn lock(&self) -> Result<MutexGuard, Error> {
        self.acquire(None, None).map_err(Error::from)
    }

    /// One attempt, no waiting.
    ///
    /// # Errors
    ///
    /// [`TryLockError::WouldBlock`] when someone else holds the lock; otherwise as
    /// [`lock`](Mutex::lock).
    pub fn try_lock(&self) -> Result<MutexGuard, TryLockError> {
        self.acquire(Some(Instant::now()), None)
    }

    /// Waits at most `timeout` for the lock.
    ///
    /// # Errors
    ///
    /// [`TryLockError::WouldBlock`] when the wait ran out; otherwise as [`lock`](Mutex::lock).
    pub fn try_lock_for(&self, timeout: Duration) -> Result<MutexGuard, TryLockError> {
        // A wait too long to represent is a wait without end.
        self.acquire(Instant::now().checked_add(timeout), None)
    }

    /// Waits until `deadline` at most for the lock.
    ///
    /// # Errors
    ///
    /// [`TryLockError::WouldBlock`] when the wait ran out; otherwise as [`lock`](Mutex::lock).
    pub fn try_lock_until(&self, deadline: Instant) -> Result<MutexGuard, TryLockError> {
        self.acquire(Some(deadline), None)
    }

    /// Waits until `deadline` (or forever with `None`), calling `interrupted` after every
    /// wake-up — at least every [`wait_cap`](MutexOptions::wait_cap) — and giving up with
    /// [`ErrorKind::Interrupted`] when it returns true. For bindings that must honour Ctrl-C.
    ///
    /// # Errors
    ///
    /// As [`try_lock_until`](Mutex::try_lock_until), plus [`ErrorKind::Interrupted`].
    pub fn lock_interruptible(
        &self,
        deadline: Option<Instant>,
        interrupted: &mut dyn FnMut() -> bool,
    ) -> Result<MutexGuard, TryLockError> {
        self.acquire(deadline, Some(interrupted))
    }

    /// Asks Redis whether anyone holds this name (redmutex or any client using `SET NX`).
    ///
    /// # Errors
    ///
    /// As [`status`](Mutex::status).
    pub fn is_locked(&self) -> Result<bool, Error> {
        Ok(self.status()?.holder.is_some())
    }

    /// Who holds the lock, for how long, and the last fence number.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`] for a bad name; [`ErrorKind::Connection`] /
    /// [`ErrorKind::NoQuorum`] when fewer than a quorum of nodes answered.
    pub fn status(&self) -> Result<LockStatus, Error> {
        self.plan()?.status()
    }

    /// The call's arguments, checked.
    fn plan(&self) -> Result<Plan, Error> {
        Plan::new(&self.client.inner, &self.keys, &self.opts)
    }

    fn acquire(
        &self,
        deadline: Option<Instant>,
        interrupted: Option<&mut dyn FnMut() -> bool>,
    ) -> Result<MutexGuard, TryLockError> {
        let lease = self.plan()?.acquire(deadline, interrupted)?;
        Ok(MutexGuard::new(lease))
    }
}

impl std::fmt::Debug for Mutex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mutex")
            .field("name", &String::from_utf8_lossy(&self.keys.lock))
            .field("options", &self.opts)
            .finish_non_exhaustive()
    }
}
