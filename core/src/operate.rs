//! What an operator asks of the servers: every lock whose name matches a pattern, and
//! breaking a stuck lock (`redmutex list`, `redmutex unlock --force`).

use crate::client::Client;
use crate::error::Error;
use crate::lock::{ListedHold, ListedLock};

/// The longest pattern [`Client::list`] takes, in bytes.
pub const MAX_PATTERN_LEN: usize = 4 * crate::MAX_NAME_LEN;

impl Client {
    /// Every lock whose name matches `pattern` (Redis's glob: `*`, `?`, `[a-z]`, `\x`) and
    /// that is held or waited for now, sorted by name: its holds with their holders and
    /// remaining leases, its last fence and its waiters, read on every node (a hold on fewer
    /// nodes than answered shows a Redlock's nodes disagreeing, see
    /// [`ListedLock::disagree`]). For monitoring: the answer may be stale by the time it is
    /// read.
    ///
    /// Locks are found by a `SCAN` (never `KEYS`) of each server, every master of a Redis
    /// Cluster, for the keys a lock keeps beside its own: its fence counter (every fenced
    /// grant leaves one), its read holds, permits and waiters. A mutex with fencing off, held
    /// while nobody waits, keeps only its own key, which cannot be told from any other
    /// string key: ask [`Mutex::status`](crate::Mutex::status) for it by name. The scan
    /// walks every key of every server once, in steps of 1,000.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redmutex::Error> {
    /// let client = redmutex::Client::open("redis://127.0.0.1:6379")?;
    /// for lock in client.list("invoice:*")? {
    ///     for hold in &lock.holds {
    ///         println!("{} {:?} held by {}", String::from_utf8_lossy(&lock.name),
    ///             hold.kind, String::from_utf8_lossy(&hold.holder));
    ///     }
    /// }
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) for an empty
    /// pattern or one over [`MAX_PATTERN_LEN`] bytes;
    /// [`ErrorKind::NoQuorum`](crate::ErrorKind::NoQuorum) when fewer than a quorum of nodes
    /// answered.
    pub fn list(&self, pattern: impl AsRef<[u8]>) -> Result<Vec<ListedLock>, Error> {
        let pattern = pattern.as_ref();
        if pattern.is_empty() || pattern.len() > MAX_PATTERN_LEN {
            return Err(Error::invalid(format!(
                "a pattern must have 1 to {MAX_PATTERN_LEN} bytes (\"*\" matches every name), \
                 got {}",
                pattern.len()
            )));
        }
        self.inner.list(pattern)
    }

    /// Removes every hold of the lock `name`, whoever has it: the mutex's (or writer's), the
    /// read holds, a semaphore's permits (a client of several masters has no semaphores and
    /// leaves permits alone). For a lock whose holder is gone for good — killed with a long
    /// lease — when waiting for the lease to run out costs more than the risk below.
    ///
    /// Each node is sent the release of each hold it has, with the holder's own token: a
    /// hold taken meanwhile by someone else is not removed, the fence counter is kept (later
    /// fences stay larger), and the waiters are woken as by the holder's own release.
    /// Returns what was removed, each hold with the number of nodes it was removed from
    /// (empty when nothing was held).
    ///
    /// A holder that is still alive keeps running its critical section until it learns of
    /// the loss: at its next renewal (or a check of its guard), as
    /// [`LossReason::Gone`](crate::LossReason::Gone), or
    /// [`LossReason::AnotherOwner`](crate::LossReason::AnotherOwner) once a waiter has
    /// taken the lock. Until then two holders run at once; only fencing protects the
    /// resource then.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) for a name no lock
    /// may have; [`ErrorKind::NoQuorum`](crate::ErrorKind::NoQuorum) when fewer than a
    /// quorum of nodes answered (some holds may have been removed on those that did).
    pub fn force_unlock(&self, name: impl AsRef<[u8]>) -> Result<Vec<ListedHold>, Error> {
        self.inner.force_unlock(name.as_ref())
    }
}
