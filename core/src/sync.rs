//! The locks and condition variables of the library: std's, which a forked child can use.
//!
//! parking_lot keeps one process-wide table of parked threads; a child inherits it with
//! entries of the parent's threads, which the child does not have, and the next contended
//! lock or condition wait there can follow them and hang or crash (parking_lot issue 515).
//! std's primitives are one futex word each, with nothing shared between them. Poisoning is
//! ignored: no lock here guards state that a panic can leave half-written.

use std::sync::{PoisonError, TryLockError};
use std::time::{Duration, Instant};

pub(crate) use std::sync::MutexGuard as LocalGuard;

/// A lock within this process (std's), never to be confused with the distributed
/// [`Mutex`](crate::Mutex).
pub(crate) struct LocalMutex<T>(std::sync::Mutex<T>);

impl<T> LocalMutex<T> {
    pub(crate) const fn new(value: T) -> LocalMutex<T> {
        LocalMutex(std::sync::Mutex::new(value))
    }

    pub(crate) fn lock(&self) -> LocalGuard<'_, T> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn try_lock(&self) -> Option<LocalGuard<'_, T>> {
        match self.0.try_lock() {
            Ok(guard) => Some(guard),
            Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
            Err(TryLockError::WouldBlock) => None,
        }
    }

    /// Tries for up to `timeout`, every millisecond (for locks held across a round trip).
    pub(crate) fn try_lock_for(&self, timeout: Duration) -> Option<LocalGuard<'_, T>> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(guard) = self.try_lock() {
                return Some(guard);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            std::thread::sleep(left.min(Duration::from_millis(1)));
        }
    }
}

pub(crate) struct LocalCondvar(std::sync::Condvar);

impl LocalCondvar {
    pub(crate) const fn new() -> LocalCondvar {
        LocalCondvar(std::sync::Condvar::new())
    }

    pub(crate) fn notify_one(&self) {
        self.0.notify_one();
    }

    pub(crate) fn notify_all(&self) {
        self.0.notify_all();
    }

    pub(crate) fn wait<'a, T>(&self, guard: LocalGuard<'a, T>) -> LocalGuard<'a, T> {
        self.0.wait(guard).unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits for a notification or until `until`, whichever comes first (or spuriously).
    pub(crate) fn wait_until<'a, T>(
        &self,
        guard: LocalGuard<'a, T>,
        until: Instant,
    ) -> LocalGuard<'a, T> {
        let timeout = until.saturating_duration_since(Instant::now());
        match self.0.wait_timeout(guard, timeout) {
            Ok((guard, _)) => guard,
            Err(p) => p.into_inner().0,
        }
    }
}

pub(crate) struct LocalRwLock<T>(std::sync::RwLock<T>);

impl<T> LocalRwLock<T> {
    pub(crate) const fn new(value: T) -> LocalRwLock<T> {
        LocalRwLock(std::sync::RwLock::new(value))
    }

    pub(crate) fn read(&self) -> std::sync::RwLockReadGuard<'_, T> {
        self.0.read().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn write(&self) -> std::sync::RwLockWriteGuard<'_, T> {
        self.0.write().unwrap_or_else(PoisonError::into_inner)
    }
}
