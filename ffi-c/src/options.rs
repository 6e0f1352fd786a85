//! Lock options for `redmutex_lock_with_options` and the other `_with_options` calls: TTL,
//! renewal, timeouts, and what may interrupt a wait.

use std::ffi::{c_int, c_void};
use std::os::fd::RawFd;
use std::time::Duration;

use redmutex::MutexOptions;

use crate::ptr::{Out, free_box};
use crate::result::{Failure, boundary, redmutex_result};
use crate::take::Interrupt;

/// Called by a blocking `redmutex_lock_with_options` on the calling thread after every
/// wake-up, so at least every 250 ms (or the wait cap, if set lower with
/// `redmutex_lock_options_set_wait_cap`): a call with this check and no interrupt
/// descriptor keeps its waits that short. Returning true stops the wait with
/// `REDMUTEX_RESULT_INTERRUPTED`. Use it to honour a shutdown flag or a signal. It must
/// return quickly and must not call into this library for the same lock.
pub type redmutex_interrupt_callback = Option<unsafe extern "C" fn(user_data: *mut c_void) -> bool>;

/// Settings of one lock for `redmutex_lock_with_options`: TTL, auto-renew, max hold, fencing,
/// timeouts and an interrupt check. Every default is a finite lease.
///
/// Thread-safety: none of its own; do not change an options handle while another thread uses
/// it. Several threads may lock with the same options at once.
///
/// Ownership: made by `redmutex_lock_options_new`, freed exactly once by
/// `redmutex_lock_options_free`. A lock call copies the settings, so the options may be
/// changed or freed as soon as it returns.
pub struct redmutex_lock_options {
    pub(crate) opts: MutexOptions,
    pub(crate) interrupt: Option<Interrupt>,
    /// The descriptor of `redmutex_lock_options_set_interrupt_fd`.
    pub(crate) wake_fd: Option<RawFd>,
    /// `redmutex_lock_options_set_interrupt_every_wait`.
    pub(crate) every_wait: bool,
}

impl redmutex_lock_options {
    /// The interrupt check with its descriptor, for one call; a descriptor without a check is
    /// refused (a readable one would end every wait of the call at once).
    pub(crate) fn interruption(&self) -> Result<Option<Interrupt>, Failure> {
        match (self.interrupt, self.wake_fd) {
            (None, Some(_)) => Err(Failure::invalid(
                "an interrupt descriptor needs an interrupt check \
                 (redmutex_lock_options_set_interrupt)",
            )),
            (i, wake_fd) => Ok(i.map(|i| Interrupt {
                wake_fd,
                every_wait: self.every_wait,
                ..i
            })),
        }
    }
}

/// Makes lock options with the defaults: TTL 30 s, auto-renew on, no max hold, fencing on,
/// per-node timeout from the client or derived from the TTL, no interrupt check.
///
/// On success writes the new options to `*out_options` (free them with
/// `redmutex_lock_options_free`). Returns `REDMUTEX_RESULT_OK`, or
/// `REDMUTEX_RESULT_NULL_PARAMETER` when `out_options` is NULL.
#[unsafe(no_mangle)]
pub extern "C" fn redmutex_lock_options_new(
    out_options: *mut *mut redmutex_lock_options,
) -> redmutex_result {
    boundary(|| {
        let out = Out::new(out_options, "out_options")?;
        out.write(Box::into_raw(Box::new(redmutex_lock_options {
            opts: MutexOptions::default(),
            interrupt: None,
            wake_fd: None,
            every_wait: false,
        })));
        Ok(())
    })
}

/// Frees lock options. Must be called at most once per options handle. NULL is a no-op.
#[unsafe(no_mangle)]
pub extern "C" fn redmutex_lock_options_free(options: *mut redmutex_lock_options) {
    let _ = boundary(|| {
        free_box(options);
        Ok(())
    });
}

/// Sets the lease in milliseconds: how long the lock survives its holder's silence (default
/// 30000; 10 ms to 24 h, checked by the lock call).
///
/// Returns `REDMUTEX_RESULT_OK`, or `REDMUTEX_RESULT_NULL_PARAMETER` when `options` is NULL.
#[unsafe(no_mangle)]
pub extern "C" fn redmutex_lock_options_set_ttl(
    options: *mut redmutex_lock_options,
    ttl_ms: u64,
) -> redmutex_result {
    set(options, |o| o.ttl = Duration::from_millis(ttl_ms))
}

/// Turns renewal by the client's renew thread on (the default) or off. Without it the lock
/// ends after its TTL unless `redmutex_guard_extend` is called.
///
/// Returns `REDMUTEX_RESULT_OK`, or `REDMUTEX_RESULT_NULL_PARAMETER` when `options` is NULL.
#[unsafe(no_mangle)]
pub extern "C" fn redmutex_lock_options_set_auto_renew(
    options: *mut redmutex_lock_options,
    on: bool,
) -> redmutex_result {
    set(options, |o| o.auto_renew = on)
}

/// Stops renewal `max_hold_ms` milliseconds after the lock was taken, so a stuck holder
/// loses the lock then; `0` means no limit (the default). Checked by the lock call.
///
/// Returns `REDMUTEX_RESULT_OK`, or `REDMUTEX_RESULT_NULL_PARAMETER` when `options` is NULL.
#[unsafe(no_mangle)]
pub extern "C" fn redmutex_lock_options_set_max_hold(
    options: *mut redmutex_lock_options,
    max_hold_ms: u64,
) -> redmutex_result {
    set(options, |o| {
        o.max_hold = (max_hold_ms != 0).then(|| Duration::from_millis(max_hold_ms));
    })
}

/// Turns fence numbers on (the default) or off. With fencing off, `redmutex_guard_fence`
/// returns 0; turn it off for names of unbounded cardinality, since each name keeps one
/// counter key that never expires.
///
/// Returns `REDMUTEX_RESULT_OK`, or `REDMUTEX_RESULT_NULL_PARAMETER` when `options` is NULL.
#[unsafe(no_mangle)]
pub extern "C" fn redmutex_lock_options_set_fencing(
    options: *mut redmutex_lock_options,
    on: bool,
) -> redmutex_result {
    set(options, |o| o.fencing = on)
}

/// Sets the per-node, per-request timeout in milliseconds (1 ms up to the TTL, checked by
/// the lock call); `0` restores the default (the client's setting, else 2 % of the TTL
/// between 50 and 250 ms).
///
/// Returns `REDMUTEX_RESULT_OK`, or `REDMUTEX_RESULT_NULL_PARAMETER` when `options` is NULL.
#[unsafe(no_mangle)]
pub extern "C" fn redmutex_lock_options_set_node_timeout(
    options: *mut redmutex_lock_options,
    timeout_ms: u64,
) -> redmutex_result {
    set(options, |o| {
        o.node_timeout = (timeout_ms != 0).then(|| Duration::from_millis(timeout_ms));
    })
}

/// Replication safety: each grant and renewal counts on a node only once `n` of that node's
/// replicas acknowledged the write within `timeout_ms` (`WAIT n timeout_ms`); a grant that
/// falls short is undone there. `n == 0` turns it off (the default). Otherwise the timeout
/// must be 1 ms to half the TTL, checked by the lock call. It guarantees that the lock's
/// write reached `n` replicas before the lock counted as held, so a failover to one of them
/// keeps it; not that every failover does (`WAIT` is not consensus). Costs a round trip plus
/// replica lag per grant and renewal. An ACL user needs `+wait`.
///
/// Returns `REDMUTEX_RESULT_OK`, or `REDMUTEX_RESULT_NULL_PARAMETER` when `options` is NULL.
#[unsafe(no_mangle)]
pub extern "C" fn redmutex_lock_options_set_min_replicas(
    options: *mut redmutex_lock_options,
    n: u32,
    timeout_ms: u64,
) -> redmutex_result {
    set(options, |o| {
        o.min_replicas = (n != 0).then(|| (n, Duration::from_millis(timeout_ms)));
    })
}

/// Sets the base of the randomized retry delay in milliseconds (default 50; 1 ms to 60 s),
/// used when no wake-up signal can be awaited and between renewal retries.
///
/// Returns `REDMUTEX_RESULT_OK`, or `REDMUTEX_RESULT_NULL_PARAMETER` when `options` is NULL.
#[unsafe(no_mangle)]
pub extern "C" fn redmutex_lock_options_set_retry_delay(
    options: *mut redmutex_lock_options,
    delay_ms: u64,
) -> redmutex_result {
    set(options, |o| o.retry_delay = Duration::from_millis(delay_ms))
}

/// Sets the longest a waiter blocks for a wake-up signal before it tries again, in
/// milliseconds (default 2000; 1 ms to 60 s): the most a lost wake-up can cost. A call's
/// first wait, and its first after each wake-up, is at most 250 ms (or this cap, if lower),
/// and each wait that runs out doubles the next, up to this cap; with an interrupt callback
/// and no interrupt descriptor, every wait stays at the first one's length.
///
/// Returns `REDMUTEX_RESULT_OK`, or `REDMUTEX_RESULT_NULL_PARAMETER` when `options` is NULL.
#[unsafe(no_mangle)]
pub extern "C" fn redmutex_lock_options_set_wait_cap(
    options: *mut redmutex_lock_options,
    cap_ms: u64,
) -> redmutex_result {
    set(options, |o| o.wait_cap = Duration::from_millis(cap_ms))
}

/// Sets how long, after a release that had waiters, newcomers must leave the lock to a
/// waiter, in milliseconds (default 20; 0 turns the hand-off off; at most 60000, and a release
/// uses at most the TTL of it). It stops
/// a holder that re-locks at once from starving the waiters.
///
/// Returns `REDMUTEX_RESULT_OK`, or `REDMUTEX_RESULT_NULL_PARAMETER` when `options` is NULL.
#[unsafe(no_mangle)]
pub extern "C" fn redmutex_lock_options_set_handoff_window(
    options: *mut redmutex_lock_options,
    window_ms: u64,
) -> redmutex_result {
    set(options, |o| {
        o.handoff_window = Duration::from_millis(window_ms)
    })
}

/// Sets an interrupt check for blocking lock calls with these options (see
/// `redmutex_interrupt_callback`); `user_data` is passed to it as is and may be NULL.
///
/// Returns `REDMUTEX_RESULT_OK`, or `REDMUTEX_RESULT_NULL_PARAMETER` when `options` or
/// `callback` is NULL.
#[unsafe(no_mangle)]
pub extern "C" fn redmutex_lock_options_set_interrupt(
    options: *mut redmutex_lock_options,
    callback: redmutex_interrupt_callback,
    user_data: *mut c_void,
) -> redmutex_result {
    boundary(|| {
        let options = options_mut(options)?;
        let check = callback.ok_or_else(|| Failure::null("callback"))?;
        options.interrupt = Some(Interrupt {
            check,
            user_data,
            wake_fd: None,
            every_wait: false,
        });
        Ok(())
    })
}

/// Also ends a wait for a release the moment `fd` becomes readable, instead of at the wait
/// cap: typically the read end of a self-pipe that your signal handler writes to. The
/// interrupt check (`redmutex_lock_options_set_interrupt`, which these options must also
/// have) then runs at once and decides whether the call returns
/// `REDMUTEX_RESULT_INTERRUPTED`. Keep `fd` readable only while that check says to stop
/// (drain it when you decide to go on), or every wait ends at once; keep it open while you
/// lock with these options. A round already sent finishes first (within the node timeout).
/// `-1` removes it.
///
/// Returns `REDMUTEX_RESULT_OK`, `REDMUTEX_RESULT_NULL_PARAMETER` when `options` is NULL, or
/// `REDMUTEX_RESULT_INVALID_ARGUMENT` for a negative `fd` other than -1. A lock call with a
/// descriptor and no interrupt check returns `REDMUTEX_RESULT_INVALID_ARGUMENT`.
#[unsafe(no_mangle)]
pub extern "C" fn redmutex_lock_options_set_interrupt_fd(
    options: *mut redmutex_lock_options,
    fd: c_int,
) -> redmutex_result {
    boundary(|| {
        let options = options_mut(options)?;
        options.wake_fd = match fd {
            -1 => None,
            0.. => Some(fd),
            _ => {
                return Err(Failure::invalid(format!(
                    "`fd` must be a descriptor or -1, got {fd}"
                )));
            }
        };
        Ok(())
    })
}

/// With `every_wait`, the descriptor of `redmutex_lock_options_set_interrupt_fd` ends not only
/// a wait for a release but every wait of the call: each read of a reply and each connect
/// (also on the threads the call starts to connect on), so a call ends within about a
/// millisecond even while a server does not answer (frozen, or a host that is gone), not at
/// its node or connect timeout. The interrupt check then runs as soon as `fd` becomes
/// readable, in whichever wait: when it says to stop, the round in flight counts as one
/// whose nodes did not answer in time (what it may have stored is undone behind its
/// requests, or in the background), the call's clean-up (withdrawing its place among the
/// waiters) goes to the background, and the call returns `REDMUTEX_RESULT_INTERRUPTED`. When
/// it says to go on, it must have drained `fd`: the wait goes on. The check is also asked as
/// the call's interrupt check, when `fd` may be empty: it must not block reading it (make
/// `fd` non-blocking). Off by default (`false`).
///
/// Returns `REDMUTEX_RESULT_OK`, or `REDMUTEX_RESULT_NULL_PARAMETER` when `options` is NULL.
#[unsafe(no_mangle)]
pub extern "C" fn redmutex_lock_options_set_interrupt_every_wait(
    options: *mut redmutex_lock_options,
    every_wait: bool,
) -> redmutex_result {
    boundary(|| {
        options_mut(options)?.every_wait = every_wait;
        Ok(())
    })
}

fn set(
    options: *mut redmutex_lock_options,
    change: impl FnOnce(&mut MutexOptions),
) -> redmutex_result {
    boundary(|| {
        change(&mut options_mut(options)?.opts);
        Ok(())
    })
}

fn options_mut<'a>(
    options: *mut redmutex_lock_options,
) -> Result<&'a mut redmutex_lock_options, Failure> {
    // SAFETY: a non-NULL handle from redmutex_lock_options_new, not shared with a writer.
    unsafe { options.as_mut() }.ok_or_else(|| Failure::null("options"))
}
