//! `Guard`, a held lease of any kind, and `Source`, what hands out each kind of guard the
//! lock objects hold (a mutex, a semaphore, one side of a read-write lock), as `Holds` and
//! `redmutex.asyncio`'s grants use them.

use std::time::{Duration, Instant};

use redmutex::{Error, TryLockError};

/// A held lease of the core: a `redmutex::Guard` of any kind.
pub(crate) trait Guard: Send + Sync + 'static {
    fn fence(&self) -> u64;
    fn is_held(&self) -> bool;
    fn check(&self) -> Result<(), Error>;
    fn valid_until(&self) -> Instant;
    fn extend(&self, ttl: Duration) -> Result<(), Error>;
    fn on_lost(&self, callback: Box<dyn FnOnce() + Send + 'static>);
    fn release(&self) -> Result<(), Error>;
    fn unlock(self) -> Result<(), Error>;
}

impl<K: redmutex::kind::Kind> Guard for redmutex::Guard<K> {
    fn fence(&self) -> u64 {
        redmutex::Guard::fence(self)
    }
    fn is_held(&self) -> bool {
        redmutex::Guard::is_held(self)
    }
    fn check(&self) -> Result<(), Error> {
        redmutex::Guard::check(self)
    }
    fn valid_until(&self) -> Instant {
        redmutex::Guard::valid_until(self)
    }
    fn extend(&self, ttl: Duration) -> Result<(), Error> {
        redmutex::Guard::extend(self, ttl)
    }
    fn on_lost(&self, callback: Box<dyn FnOnce() + Send + 'static>) {
        redmutex::Guard::on_lost(self, callback)
    }
    fn release(&self) -> Result<(), Error> {
        redmutex::Guard::release(self).map(drop)
    }
    fn unlock(self) -> Result<(), Error> {
        redmutex::Guard::unlock(self).map(drop)
    }
}

/// What hands out one kind of guard: a mutex, a semaphore, one side of a read-write lock.
pub(crate) trait Source: Clone + Send + 'static {
    type Guard: Guard;
    /// One attempt.
    fn try_once(&self) -> Result<Self::Guard, TryLockError>;
    /// Waits until `deadline` (or forever), giving up when `cancel` returns true.
    fn wait(
        &self,
        deadline: Option<Instant>,
        cancel: &mut dyn FnMut() -> bool,
    ) -> Result<Self::Guard, TryLockError>;
    /// Waits until `deadline` (or forever), with nothing to interrupt it (so its waits grow
    /// while nothing is released, see `MutexOptions::wait_cap`).
    fn wait_uninterrupted(&self, deadline: Option<Instant>) -> Result<Self::Guard, TryLockError>;
}

impl Source for redmutex::Mutex {
    type Guard = redmutex::MutexGuard;
    fn try_once(&self) -> Result<Self::Guard, TryLockError> {
        self.try_lock()
    }
    fn wait(
        &self,
        deadline: Option<Instant>,
        cancel: &mut dyn FnMut() -> bool,
    ) -> Result<Self::Guard, TryLockError> {
        self.lock_interruptible(deadline, cancel)
    }
    fn wait_uninterrupted(&self, deadline: Option<Instant>) -> Result<Self::Guard, TryLockError> {
        match deadline {
            Some(d) => self.try_lock_until(d),
            None => self.lock().map_err(Into::into),
        }
    }
}

impl Source for redmutex::Semaphore {
    type Guard = redmutex::Permit;
    fn try_once(&self) -> Result<Self::Guard, TryLockError> {
        self.try_acquire()
    }
    fn wait(
        &self,
        deadline: Option<Instant>,
        cancel: &mut dyn FnMut() -> bool,
    ) -> Result<Self::Guard, TryLockError> {
        self.acquire_interruptible(deadline, cancel)
    }
    fn wait_uninterrupted(&self, deadline: Option<Instant>) -> Result<Self::Guard, TryLockError> {
        match deadline {
            Some(d) => self.try_acquire_until(d),
            None => self.acquire().map_err(Into::into),
        }
    }
}

/// The read side of a read-write lock.
#[derive(Clone)]
pub(crate) struct Reads(pub(crate) redmutex::RwLock);

/// The write side of a read-write lock.
#[derive(Clone)]
pub(crate) struct Writes(pub(crate) redmutex::RwLock);

impl Source for Reads {
    type Guard = redmutex::ReadGuard;
    fn try_once(&self) -> Result<Self::Guard, TryLockError> {
        self.0.try_read()
    }
    fn wait(
        &self,
        deadline: Option<Instant>,
        cancel: &mut dyn FnMut() -> bool,
    ) -> Result<Self::Guard, TryLockError> {
        self.0.read_interruptible(deadline, cancel)
    }
    fn wait_uninterrupted(&self, deadline: Option<Instant>) -> Result<Self::Guard, TryLockError> {
        match deadline {
            Some(d) => self.0.try_read_until(d),
            None => self.0.read().map_err(Into::into),
        }
    }
}

impl Source for Writes {
    type Guard = redmutex::WriteGuard;
    fn try_once(&self) -> Result<Self::Guard, TryLockError> {
        self.0.try_write()
    }
    fn wait(
        &self,
        deadline: Option<Instant>,
        cancel: &mut dyn FnMut() -> bool,
    ) -> Result<Self::Guard, TryLockError> {
        self.0.write_interruptible(deadline, cancel)
    }
    fn wait_uninterrupted(&self, deadline: Option<Instant>) -> Result<Self::Guard, TryLockError> {
        match deadline {
            Some(d) => self.0.try_write_until(d),
            None => self.0.write().map_err(Into::into),
        }
    }
}
