//! `RwLock` and its guards `ReadGuard` and `WriteGuard`: many readers or one writer, with
//! writer preference. The write side is the mutex of the same name; the read holds' scripts
//! are the lock protocol's business (`lock/calls.rs`, `lock/scripts/shared.rs`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::client::Client;
use crate::error::{Error, TryLockError};
use crate::guard::{Guard, kind};
use crate::lock::{Keys, Kind, Plan, RwLockStatus};
use crate::options::MutexOptions;
use crate::setters::option_setters;

/// A fleet-wide read-write lock: many readers or one writer of a name at a time.
///
/// Made by [`Client::rwlock`]; cheap to create and clone, holds no connection.
///
/// - **The write side is the mutex.** A [`WriteGuard`] is taken exactly like a
///   [`Mutex`](crate::Mutex) of the same name (the same key, the same scripts), so a `Mutex`
///   of name K and the writers of K exclude each other, and both exclude K's readers — like
///   `flock -x` and `flock -s` on one file. `SET K x NX` interop stays as it is: any such
///   holder keeps readers out too.
/// - **Writer preference.** Once a writer (or a mutex caller) waits, new readers queue behind
///   it, so a steady stream of readers cannot starve a writer: it gets the lock once the read
///   holds it found have ended. Waiting readers never hold a writer up.
/// - **Fences.** A write guard's fence strictly increases (the mutex's); a read guard carries
///   the fence of the last write it may observe (the counter's value when it was granted).
///
/// On the wire: the read holds are a sorted set `{name}:readers` of tokens scored by when
/// each ends (server time); the mutex's acquire refuses while it has live members.
///
/// # Topologies
///
/// One node, Sentinel and Cluster, and several independent masters (Redlock): a read hold and
/// a write hold each need a majority, and two majorities always share a node, whose script
/// refuses the later of the two.
///
/// # Examples
///
/// ```no_run
/// use redmutex::Client;
///
/// let client = Client::open("redis://127.0.0.1:6379")?;
/// let cache = client.rwlock("cache:prices");
/// {
///     let read = cache.read()?;
///     println!("reading, last write fence {}", read.fence());
/// }
/// let write = cache.write()?;
/// println!("rebuilding with fence {}", write.fence());
/// # Ok::<(), redmutex::Error>(())
/// ```
#[derive(Clone)]
pub struct RwLock {
    client: Client,
    keys: Arc<Keys>,
    opts: MutexOptions,
}

impl Client {
    /// A read-write lock on the given name with default options; cheap, holds no connection.
    /// The name is the key of its write side (a mutex of the same name is that write side);
    /// it is checked when first used, as for [`Client::mutex`].
    pub fn rwlock(&self, name: impl AsRef<[u8]>) -> RwLock {
        RwLock {
            client: self.clone(),
            keys: Arc::new(Keys::for_name(name.as_ref().to_vec())),
            opts: MutexOptions::default(),
        }
    }
}

option_setters!(RwLock);

impl RwLock {
    /// Blocks until a read hold is granted: no writer holds the lock and none waits.
    ///
    /// # Errors
    ///
    /// As [`Mutex::lock`](crate::Mutex::lock).
    pub fn read(&self) -> Result<ReadGuard, Error> {
        self.take_read(None, None).map_err(Error::from)
    }

    /// One attempt at a read hold, no waiting.
    ///
    /// # Errors
    ///
    /// [`TryLockError::WouldBlock`] when a writer holds the lock or waits for it; otherwise as
    /// [`read`](RwLock::read).
    pub fn try_read(&self) -> Result<ReadGuard, TryLockError> {
        self.take_read(Some(Instant::now()), None)
    }

    /// Waits at most `timeout` for a read hold.
    ///
    /// # Errors
    ///
    /// [`TryLockError::WouldBlock`] when the wait ran out; otherwise as [`read`](RwLock::read).
    pub fn try_read_for(&self, timeout: Duration) -> Result<ReadGuard, TryLockError> {
        self.take_read(Instant::now().checked_add(timeout), None)
    }

    /// Waits until `deadline` at most for a read hold.
    ///
    /// # Errors
    ///
    /// As [`try_read_for`](RwLock::try_read_for).
    pub fn try_read_until(&self, deadline: Instant) -> Result<ReadGuard, TryLockError> {
        self.take_read(Some(deadline), None)
    }

    /// A read hold, waiting until `deadline` (or forever with `None`) and giving up when
    /// `interrupted` returns true; see
    /// [`Mutex::lock_interruptible`](crate::Mutex::lock_interruptible).
    ///
    /// # Errors
    ///
    /// As [`try_read_until`](RwLock::try_read_until), plus
    /// [`ErrorKind::Interrupted`](crate::ErrorKind).
    pub fn read_interruptible(
        &self,
        deadline: Option<Instant>,
        interrupted: &mut dyn FnMut() -> bool,
    ) -> Result<ReadGuard, TryLockError> {
        self.take_read(deadline, Some(interrupted))
    }

    /// Blocks until the write hold is granted: no reader, writer or mutex holder has the
    /// lock. While it waits, new readers queue behind it.
    ///
    /// # Errors
    ///
    /// As [`Mutex::lock`](crate::Mutex::lock).
    pub fn write(&self) -> Result<WriteGuard, Error> {
        self.take_write(None, None).map_err(Error::from)
    }

    /// One attempt at the write hold, no waiting.
    ///
    /// # Errors
    ///
    /// [`TryLockError::WouldBlock`] when it is held (read or write); otherwise as
    /// [`write`](RwLock::write).
    pub fn try_write(&self) -> Result<WriteGuard, TryLockError> {
        self.take_write(Some(Instant::now()), None)
    }

    /// Waits at most `timeout` for the write hold.
    ///
    /// # Errors
    ///
    /// [`TryLockError::WouldBlock`] when the wait ran out; otherwise as
    /// [`write`](RwLock::write).
    pub fn try_write_for(&self, timeout: Duration) -> Result<WriteGuard, TryLockError> {
        self.take_write(Instant::now().checked_add(timeout), None)
    }

    /// Waits until `deadline` at most for the write hold.
    ///
    /// # Errors
    ///
    /// As [`try_write_for`](RwLock::try_write_for).
    pub fn try_write_until(&self, deadline: Instant) -> Result<WriteGuard, TryLockError> {
        self.take_write(Some(deadline), None)
    }

    /// The write hold, waiting until `deadline` (or forever with `None`) and giving up when
    /// `interrupted` returns true.
    ///
    /// # Errors
    ///
    /// As [`try_write_until`](RwLock::try_write_until), plus
    /// [`ErrorKind::Interrupted`](crate::ErrorKind).
    pub fn write_interruptible(
        &self,
        deadline: Option<Instant>,
        interrupted: &mut dyn FnMut() -> bool,
    ) -> Result<WriteGuard, TryLockError> {
        self.take_write(deadline, Some(interrupted))
    }

    /// The writer (with the last fence number) and the live read holds.
    ///
    /// # Errors
    ///
    /// As [`Mutex::status`](crate::Mutex::status).
    pub fn status(&self) -> Result<RwLockStatus, Error> {
        self.plan(Kind::Read)?.rwlock_status()
    }

    fn plan(&self, kind: Kind) -> Result<Plan, Error> {
        Plan::for_kind(&self.client.inner, &self.keys, &self.opts, kind)
    }

    fn take_read(
        &self,
        deadline: Option<Instant>,
        interrupted: Option<&mut dyn FnMut() -> bool>,
    ) -> Result<ReadGuard, TryLockError> {
        let lease = self.plan(Kind::Read)?.acquire(deadline, interrupted)?;
        Ok(ReadGuard::new(lease))
    }

    fn take_write(
        &self,
        deadline: Option<Instant>,
        interrupted: Option<&mut dyn FnMut() -> bool>,
    ) -> Result<WriteGuard, TryLockError> {
        let lease = self.plan(Kind::Mutex)?.acquire(deadline, interrupted)?;
        Ok(WriteGuard::new(lease))
    }
}

impl std::fmt::Debug for RwLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RwLock")
            .field("name", &String::from_utf8_lossy(&self.keys.lock))
            .field("options", &self.opts)
            .finish_non_exhaustive()
    }
}

/// A read hold of an [`RwLock`], until it is released or lost.
///
/// It has the methods of a [`MutexGuard`](crate::MutexGuard) and the same promises (owned,
/// `Send`, renewed while it lives, answered locally, released on drop). Its
/// [`fence`](Guard::fence) is that of the last write it may observe: the largest write
/// fence granted before it (0 when there was none); it does not increase per reader.
pub type ReadGuard = Guard<kind::Read>;

/// The write hold of an [`RwLock`]: a mutex grant of the same name, until it is released or
/// lost.
///
/// It has the methods of a [`MutexGuard`](crate::MutexGuard) and the same promises. Its
/// [`fence`](Guard::fence) is strictly greater than that of every earlier write (and
/// mutex grant) of this name, and than every read guard's fence.
pub type WriteGuard = Guard<kind::Write>;
