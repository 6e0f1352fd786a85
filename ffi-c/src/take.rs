//! The one body behind every lock call (`redmutex_lock*`, `redmutex_semaphore_acquire*`,
//! `redmutex_read_lock*`, `redmutex_write_lock*`): the wait, the interrupt check, the guard.

use std::ffi::c_void;
use std::os::fd::{BorrowedFd, RawFd};
use std::time::{Duration, Instant};

use redmutex::{MutexOptions, TryLockError};

use crate::client::redmutex_client;
use crate::guard::redmutex_guard;
use crate::ptr::Out;
use crate::result::Failure;

/// The interrupt check of `redmutex_lock_options_set_interrupt`, with the descriptor of
/// `redmutex_lock_options_set_interrupt_fd`.
#[derive(Clone, Copy)]
pub(crate) struct Interrupt {
    pub(crate) check: unsafe extern "C" fn(user_data: *mut c_void) -> bool,
    pub(crate) user_data: *mut c_void,
    pub(crate) wake_fd: Option<RawFd>,
    /// `redmutex_lock_options_set_interrupt_every_wait`: the descriptor ends every wait.
    pub(crate) every_wait: bool,
}

/// What a lock call takes.
#[derive(Clone, Copy)]
pub(crate) enum Kind {
    Mutex,
    /// A permit of a semaphore of this many permits.
    Semaphore(u32),
    Read,
    Write,
}

/// Waits for a lease of `kind` on `name` as `wait_ms` says and hands out its guard.
pub(crate) fn take(
    client: &redmutex_client,
    name: &[u8],
    kind: Kind,
    opts: MutexOptions,
    interrupt: Option<Interrupt>,
    wait_ms: i64,
    out: Out<*mut redmutex_guard>,
) -> Result<(), Failure> {
    let deadline = match wait_ms {
        -1 => None,
        // A wait too long for the clock to represent is a wait without end.
        0.. => Instant::now().checked_add(Duration::from_millis(wait_ms.unsigned_abs())),
        _ => {
            return Err(Failure::invalid(format!(
                "`wait_ms` must be -1 (forever), 0 (one attempt) or a positive number of \
                 milliseconds, got {wait_ms}"
            )));
        }
    };
    let mut interrupted = || match interrupt {
        // SAFETY: the caller registered this function for exactly this use, with this
        // user_data, and it is called on the caller's own thread during the call.
        Some(i) => unsafe { (i.check)(i.user_data) },
        None => false,
    };
    let c = &client.client;
    let wake_fd = interrupt.and_then(|i| i.wake_fd);
    // Without an interrupt check, the plain waits: theirs grow while nothing is released
    // (a check that runs only when a wait ends keeps them short, see `wait_cap`).
    let checked = interrupt.is_some();
    let call = move || -> Result<_, Failure> {
        let check = &mut interrupted;
        Ok(match kind {
            Kind::Mutex => {
                let m = c.mutex(name).options(opts);
                match checked {
                    true => m.lock_interruptible(deadline, check),
                    false => plain(deadline, |d| m.try_lock_until(d), || m.lock()),
                }?
                .into_any()
            }
            Kind::Semaphore(permits) => {
                let s = c.semaphore(name, permits).options(opts);
                match checked {
                    true => s.acquire_interruptible(deadline, check),
                    false => plain(deadline, |d| s.try_acquire_until(d), || s.acquire()),
                }?
                .into_any()
            }
            Kind::Read => {
                let r = c.rwlock(name).options(opts);
                match checked {
                    true => r.read_interruptible(deadline, check),
                    false => plain(deadline, |d| r.try_read_until(d), || r.read()),
                }?
                .into_any()
            }
            Kind::Write => {
                let w = c.rwlock(name).options(opts);
                match checked {
                    true => w.write_interruptible(deadline, check),
                    false => plain(deadline, |d| w.try_write_until(d), || w.write()),
                }?
                .into_any()
            }
        })
    };
    let held = match (wake_fd, interrupt) {
        (None, _) => call()?,
        // SAFETY: the caller keeps the descriptor it gave open while it locks with these
        // options (`redmutex_lock_options_set_interrupt_fd` says so); the core duplicates it
        // for the call.
        (Some(fd), Some(i)) if i.every_wait => {
            // SAFETY: as `interrupted`: the caller's function, called on the caller's thread
            // during the call (the core asks it only there).
            let go_on = move || !unsafe { (i.check)(i.user_data) };
            redmutex::wake_on_checked(unsafe { BorrowedFd::borrow_raw(fd) }, go_on, call)??
        }
        (Some(fd), _) => redmutex::wake_on(unsafe { BorrowedFd::borrow_raw(fd) }, call)??,
    };
    out.write(redmutex_guard::new_raw(held));
    Ok(())
}

/// A wait with no interrupt check: until `deadline` (`until`), or without end (`forever`).
fn plain<G>(
    deadline: Option<Instant>,
    until: impl FnOnce(Instant) -> Result<G, TryLockError>,
    forever: impl FnOnce() -> Result<G, redmutex::Error>,
) -> Result<G, TryLockError> {
    match deadline {
        Some(d) => until(d),
        None => forever().map_err(Into::into),
    }
}
