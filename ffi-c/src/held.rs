//! What a `redmutex_guard` holds: a mutex grant, a semaphore's permit, or a read-write lock's
//! read or write hold. Every guard function applies to each of them; this only forwards.

use std::time::{Duration, Instant};

use redmutex::{Error, MutexGuard, Permit, ReadGuard, Released, WriteGuard};

/// One held lease of any kind.
pub(crate) enum Held {
    Mutex(MutexGuard),
    Permit(Permit),
    Read(ReadGuard),
    Write(WriteGuard),
}

/// Runs `$body` with `$g` bound to the guard inside `$held`, whatever its kind.
macro_rules! each {
    ($held:expr, $g:ident => $body:expr) => {
        match $held {
            Held::Mutex($g) => $body,
            Held::Permit($g) => $body,
            Held::Read($g) => $body,
            Held::Write($g) => $body,
        }
    };
}

impl Held {
    pub(crate) fn fence(&self) -> u64 {
        each!(self, g => g.fence())
    }

    pub(crate) fn token(&self) -> &[u8] {
        each!(self, g => g.token())
    }

    pub(crate) fn is_held(&self) -> bool {
        each!(self, g => g.is_held())
    }

    pub(crate) fn check(&self) -> Result<(), Error> {
        each!(self, g => g.check())
    }

    pub(crate) fn valid_until(&self) -> Instant {
        each!(self, g => g.valid_until())
    }

    pub(crate) fn renewals(&self) -> u64 {
        each!(self, g => g.renewals())
    }

    pub(crate) fn extend(&self, ttl: Duration) -> Result<(), Error> {
        each!(self, g => g.extend(ttl))
    }

    pub(crate) fn on_lost(&self, callback: impl FnOnce() + Send + 'static) {
        each!(self, g => g.on_lost(callback))
    }

    pub(crate) fn wait_lost(&self, timeout: Duration) -> bool {
        each!(self, g => g.wait_lost(timeout))
    }

    pub(crate) fn release(&self) -> Result<Released, Error> {
        each!(self, g => g.release())
    }

    pub(crate) fn unlock(self) -> Result<Released, Error> {
        each!(self, g => g.unlock())
    }
}
