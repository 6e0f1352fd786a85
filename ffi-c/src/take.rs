//! The one body behind every lock call (`redmutex_lock*`, `redmutex_semaphore_acquire*`,
//! `redmutex_read_lock*`, `redmutex_write_lock*`): the wait, the interrupt check, the guard.

use std::ffi::c_void;
use std::os::fd::{BorrowedFd, RawFd};
use std::time::{Duration, Instant};

use redmutex::MutexOptions;

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
    let call = move || -> Result<_, Failure> {
        Ok(match kind {
            Kind::Mutex => c
                .mutex(name)
                .options(opts)
                .lock_interruptible(deadline, &mut interrupted)?
                .into_any(),
            Kind::Semaphore(permits) => c
                .semaphore(name, permits)
                .options(opts)
                .acquire_interruptible(deadline, &mut interrupted)?
                .into_any(),
            Kind::Read => c
                .rwlock(name)
                .options(opts)
                .read_interruptible(deadline, &mut interrupted)?
                .into_any(),
            Kind::Write => c
                .rwlock(name)
                .options(opts)
                .write_interruptible(deadline, &mut interrupted)?
                .into_any(),
        })
    };
    let held = match wake_fd {
        None => call()?,
        // SAFETY: the caller keeps the descriptor it gave open while it locks with these
        // options (`redmutex_lock_options_set_interrupt_fd` says so); the core duplicates it
        // for the call.
        Some(fd) => redmutex::wake_on(unsafe { BorrowedFd::borrow_raw(fd) }, call)??,
    };
    out.write(redmutex_guard::new_raw(held));
    Ok(())
}
