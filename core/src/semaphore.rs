//! `Semaphore` and its guard `Permit`: at most N holders of a name, each holding a lease like
//! a mutex guard. The permits' scripts are the lock protocol's business (`lock/calls.rs`, `lock/scripts/shared.rs`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::client::Client;
use crate::error::{Error, TryLockError};
use crate::guard::{Guard, kind};
use crate::lock::{Keys, Kind, Plan, SemaphoreStatus};
use crate::options::MutexOptions;
use crate::setters::option_setters;

/// A fleet-wide counting semaphore: at most `permits` holders of one name at a time.
///
/// Made by [`Client::semaphore`]; cheap to create and clone, holds no connection. Each
/// [`Permit`] is a lease like a [`MutexGuard`](crate::MutexGuard): its own token, a fence
/// number (strictly increasing per name), renewed by the client's renew thread, lost after its
/// TTL when its holder dies or stalls (so a crashed holder's permit comes back by itself), and
/// released on drop with a wake-up for one waiter, who learns of it within about one round
/// trip.
///
/// Waiters are served before newcomers: while waiters are announced, a caller that has not
/// waited yet only takes a permit beyond one kept for each of them, so a holder that releases
/// and re-acquires at once queues behind them.
///
/// All users of one name must give the same permit count: while any permit is held, a call
/// with another count fails with [`ErrorKind::InvalidArgument`](crate::ErrorKind) naming both
/// counts. Once no permit is held, the next grant may set another count.
///
/// On the wire: the holders are a sorted set `{name}:holders` of tokens scored by when each
/// permit ends (server time), the count is `{name}:permits`, and the fence counter
/// `{name}:fence` is shared with a mutex of the same name; waiters and wake-ups have their
/// own keys (`{name}:semwaitq`, `{name}:semwake`). A mutex and a semaphore of one name do not
/// exclude each other.
///
/// # Topologies
///
/// One voter only: a single node, Sentinel or a Cluster. On a client of several independent
/// masters (Redlock), every call fails with
/// [`ErrorKind::InvalidArgument`](crate::ErrorKind): majorities granting different permits
/// need not share a node, so N permits could admit up to 2N−1 holders.
///
/// # Examples
///
/// ```no_run
/// use redmutex::{Client, TryLockError};
///
/// let client = Client::open("redis://127.0.0.1:6379")?;
/// let payments = client.semaphore("payments:provider", 3);
/// match payments.try_acquire() {
///     Ok(permit) => println!("calling the provider, fence {}", permit.fence()),
///     Err(TryLockError::WouldBlock) => println!("three calls already in flight"),
///     Err(e) => return Err(e.into()),
/// }
/// # Ok::<(), redmutex::Error>(())
/// ```
#[derive(Clone)]
pub struct Semaphore {
    client: Client,
    keys: Arc<Keys>,
    permits: u32,
    opts: MutexOptions,
}

impl Client {
    /// A semaphore of `permits` (1 to [`MAX_PERMITS`](crate::MAX_PERMITS)) on the given name,
    /// with default options; cheap, holds no connection. The name and the count are checked
    /// when it is first used (nothing is sent for bad ones): an empty name, one longer than
    /// [`MAX_NAME_LEN`](crate::MAX_NAME_LEN) bytes, a count out of range or a client of
    /// several independent masters is an invalid argument.
    pub fn semaphore(&self, name: impl AsRef<[u8]>, permits: u32) -> Semaphore {
        Semaphore {
            client: self.clone(),
            keys: Arc::new(Keys::for_semaphore(name.as_ref().to_vec())),
            permits,
            opts: MutexOptions::default(),
        }
    }
}

option_setters!(Semaphore);

impl Semaphore {
    /// The permit count.
    pub fn permits(&self) -> u32 {
        self.permits
    }

    /// Blocks until a permit is held. Waiters do not poll: a release wakes a waiter within
    /// about a round trip.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind) for a bad name, count or option, or
    /// a client of several masters (nothing is sent), and when live permits of this name were
    /// taken with another count; otherwise as [`Mutex::lock`](crate::Mutex::lock).
    pub fn acquire(&self) -> Result<Permit, Error> {
        self.take(None, None).map_err(Error::from)
    }

    /// One attempt, no waiting.
    ///
    /// # Errors
    ///
    /// [`TryLockError::WouldBlock`] when every permit is held; otherwise as
    /// [`acquire`](Semaphore::acquire).
    pub fn try_acquire(&self) -> Result<Permit, TryLockError> {
        self.take(Some(Instant::now()), None)
    }

    /// Waits at most `timeout` for a permit.
    ///
    /// # Errors
    ///
    /// [`TryLockError::WouldBlock`] when the wait ran out; otherwise as
    /// [`acquire`](Semaphore::acquire).
    pub fn try_acquire_for(&self, timeout: Duration) -> Result<Permit, TryLockError> {
        self.take(Instant::now().checked_add(timeout), None)
    }

    /// Waits until `deadline` at most for a permit.
    ///
    /// # Errors
    ///
    /// As [`try_acquire_for`](Semaphore::try_acquire_for).
    pub fn try_acquire_until(&self, deadline: Instant) -> Result<Permit, TryLockError> {
        self.take(Some(deadline), None)
    }

    /// Waits until `deadline` (or forever with `None`), calling `interrupted` after every
    /// wake-up and giving up with [`ErrorKind::Interrupted`](crate::ErrorKind) when it
    /// returns true; see [`Mutex::lock_interruptible`](crate::Mutex::lock_interruptible).
    ///
    /// # Errors
    ///
    /// As [`try_acquire_until`](Semaphore::try_acquire_until), plus `Interrupted`.
    pub fn acquire_interruptible(
        &self,
        deadline: Option<Instant>,
        interrupted: &mut dyn FnMut() -> bool,
    ) -> Result<Permit, TryLockError> {
        self.take(deadline, Some(interrupted))
    }

    /// The live permits, the count they were taken with, and the last fence number. This
    /// handle's own count is not compared with the stored one here (any valid count will do
    /// for a look at a name).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind) as for
    /// [`acquire`](Semaphore::acquire); [`ErrorKind::Connection`](crate::ErrorKind) when the
    /// node did not answer.
    pub fn status(&self) -> Result<SemaphoreStatus, Error> {
        self.plan()?.semaphore_status()
    }

    fn plan(&self) -> Result<Plan, Error> {
        Plan::for_kind(
            &self.client.inner,
            &self.keys,
            &self.opts,
            Kind::Semaphore(self.permits),
        )
    }

    fn take(
        &self,
        deadline: Option<Instant>,
        interrupted: Option<&mut dyn FnMut() -> bool>,
    ) -> Result<Permit, TryLockError> {
        let lease = self.plan()?.acquire(deadline, interrupted)?;
        Ok(Permit::new(lease))
    }
}

impl std::fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Semaphore")
            .field("name", &String::from_utf8_lossy(&self.keys.lock))
            .field("permits", &self.permits)
            .field("options", &self.opts)
            .finish_non_exhaustive()
    }
}

/// One held permit of a [`Semaphore`], until it is released or lost.
///
/// It has the methods of a [`MutexGuard`](crate::MutexGuard) and the same promises: it owns
/// everything it needs, is `Send`, is renewed by the client's renew thread while it lives
/// (unless auto-renew is off), answers [`is_held`](Guard::is_held) locally, and releases the
/// permit when dropped (best effort, bounded by the client's connect timeout, never panics).
///
/// Its [`fence`](Guard::fence) is strictly greater than that of every earlier permit (and
/// mutex grant) of this name; several permits are held at once, so a resource shared by the
/// holders must accept each holder's own fence rather than only the largest.
pub type Permit = Guard<kind::Permit>;
