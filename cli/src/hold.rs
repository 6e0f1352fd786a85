//! The three ways `redmutex run` holds a key: the lock itself, one of N permits of a
//! semaphore (`--permits N`), or a shared read hold (`--shared`); and what each says when it
//! was not granted.

use std::time::{Duration, Instant};

use redmutex::{
    Client, Error, MutexGuard, MutexOptions, Permit, ReadGuard, Released, TryLockError,
};

use crate::report;

/// Which hold a run takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The lock: alone, like `flock -x`.
    Exclusive,
    /// One of this many permits of a semaphore.
    Permits(u32),
    /// A read hold of the read-write lock: with other shared runs, like `flock -s`.
    Shared,
}

/// A held key of any kind.
pub enum Held {
    Lock(MutexGuard),
    Permit(Permit),
    Read(ReadGuard),
}

/// Runs `$body` with `$g` bound to the guard inside `$held`, whatever its kind.
macro_rules! each {
    ($held:expr, $g:ident => $body:expr) => {
        match $held {
            Held::Lock($g) => $body,
            Held::Permit($g) => $body,
            Held::Read($g) => $body,
        }
    };
}

impl Held {
    pub fn fence(&self) -> u64 {
        each!(self, g => g.fence())
    }

    pub fn is_held(&self) -> bool {
        each!(self, g => g.is_held())
    }

    pub fn check(&self) -> Result<(), Error> {
        each!(self, g => g.check())
    }

    pub fn valid_until(&self) -> Instant {
        each!(self, g => g.valid_until())
    }

    pub fn on_lost(&self, callback: impl FnOnce() + Send + 'static) {
        each!(self, g => g.on_lost(callback))
    }

    pub fn unlock(self) -> Result<Released, Error> {
        each!(self, g => g.unlock())
    }
}

/// Takes a hold of `kind` on `key` with `opts`, waiting until `deadline` (`None`: as long as
/// it takes) while `interrupted` says no.
pub fn take(
    client: &Client,
    key: &str,
    kind: Kind,
    opts: MutexOptions,
    deadline: Option<Instant>,
    interrupted: &mut dyn FnMut() -> bool,
) -> Result<Held, TryLockError> {
    Ok(match kind {
        Kind::Exclusive => Held::Lock(
            client
                .mutex(key)
                .options(opts)
                .lock_interruptible(deadline, interrupted)?,
        ),
        Kind::Permits(n) => Held::Permit(
            client
                .semaphore(key, n)
                .options(opts)
                .acquire_interruptible(deadline, interrupted)?,
        ),
        Kind::Shared => Held::Read(
            client
                .rwlock(key)
                .options(opts)
                .read_interruptible(deadline, interrupted)?,
        ),
    })
}

/// The conflict line: who holds `key` so that a hold of `kind` was not granted.
pub fn conflict_line(client: &Client, key: &str, kind: Kind, waited: Option<Duration>) -> String {
    let gave_up = match waited {
        Some(w) if !w.is_zero() => format!("; gave up after {}", crate::duration::show(w)),
        _ => String::new(),
    };
    match kind {
        Kind::Permits(n) => {
            let held = match client.semaphore(key, n).status() {
                Ok(st) if !st.holders.is_empty() => format!(
                    " (by {})",
                    st.holders
                        .iter()
                        .map(|(token, _)| report::holder(token))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                _ => String::new(),
            };
            format!(
                "all {n} permits of {} are held{held}{gave_up}",
                report::one_line(key)
            )
        }
        Kind::Exclusive | Kind::Shared => {
            let status = client.rwlock(key).status();
            match status {
                Ok(st) if st.writer.holder.is_none() && !st.readers.is_empty() => format!(
                    "{} is held by {} shared run{}{gave_up}",
                    report::one_line(key),
                    st.readers.len(),
                    if st.readers.len() == 1 { "" } else { "s" }
                ),
                Ok(st) if st.writer.holder.is_none() && kind == Kind::Shared => format!(
                    "{} is awaited by an exclusive run, which goes first{gave_up}",
                    report::one_line(key)
                ),
                Ok(st) => report::conflict_line(key, Ok(st.writer), waited),
                Err(e) => report::conflict_line(key, Err(e), waited),
            }
        }
    }
}
