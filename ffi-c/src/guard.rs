//! `redmutex_guard`: a held lock, and everything one can ask or do with it.

use std::cell::RefCell;
use std::ffi::{c_char, c_void};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::ptr::{Out, arg};
use crate::result::{Failure, boundary, boundary_value, copy_str, redmutex_result};
use redmutex::{Guard, kind};

/// Called once when a held lock is lost (it expired, renewal failed, or another owner took
/// it over), with the `user_data` given to `redmutex_guard_on_lost`.
///
/// It usually runs on the client's renew thread, so whatever `user_data` points to must be
/// safe to use from there. It may also run on the caller's thread inside
/// `redmutex_guard_on_lost` (when the lock is already lost), `redmutex_guard_extend` or
/// `redmutex_guard_wait_lost`. Keep it short; it must not block, must not unwind (no C++
/// exception, no `longjmp`) and must not unlock or free its own guard. It may call the
/// functions that answer locally (`redmutex_guard_is_held`, `redmutex_guard_check`, ...) and
/// `redmutex_guard_on_lost`, also on its own guard: a callback registered on a lost guard
/// runs at once, on the same thread, before `redmutex_guard_on_lost` returns.
pub type redmutex_lost_callback = Option<unsafe extern "C" fn(user_data: *mut c_void)>;

/// A held lock: proof that this process holds it, until it is released or lost.
///
/// While the guard lives, the client's renew thread extends the lease (unless auto-renew is
/// off). Whether the lock is still held is answered locally, without the network, by
/// `redmutex_guard_is_held`: the lease minus the time the grant took minus a clock-drift
/// allowance, on the monotonic clock.
///
/// Thread-safety: a guard belongs to one caller at a time. The functions that take a
/// `const redmutex_guard *` may be called from several threads at once: a watchdog thread
/// may wait in `redmutex_guard_wait_lost` while the owner works, and the owner ends that wait
/// with `redmutex_guard_release`. `redmutex_unlock` and `redmutex_guard_free` must not overlap
/// any other call on the same guard: release first, join the watchdog, then free.
///
/// Kinds: the same type holds a mutex grant (`redmutex_lock*`), a semaphore's permit
/// (`redmutex_semaphore_acquire*`) and a read-write lock's read or write hold
/// (`redmutex_read_lock*`, `redmutex_write_lock*`); every `redmutex_guard_*` function and
/// `redmutex_unlock` apply to each, and "the lock" below means whichever of them it holds.
///
/// Ownership: made by the functions above; ended exactly once by `redmutex_unlock` (release,
/// report the outcome, free) or `redmutex_guard_free` (release best effort, free; also after
/// `redmutex_guard_release`).
/// A guard inherited by a child through `fork()` is a copy the child can only free: it never
/// renews and never releases the parent's lock, and `redmutex_guard_is_held` is false there.
pub struct redmutex_guard {
    guard: Guard<kind::Any>,
    callbacks: Arc<CallbackGate>,
    /// The process that took the lock; a forked child's copy skips the gate (see `close`).
    pid: u32,
}

/// Lets `redmutex_unlock`, `redmutex_guard_free` and `redmutex_guard_release` promise that
/// once they return, no on-lost callback is running or will ever run, so the caller may free
/// its `user_data`. The core stops calling back after a release, but a loss found just before
/// the release may still be calling back while the release runs; closing the gate waits for
/// that call to finish.
///
/// A callback may re-enter its own gate (it registers another callback on its lost guard,
/// which the core runs at once on the same thread): the thread that is inside a gate's call
/// never waits for that gate, so this cannot deadlock.
struct CallbackGate {
    armed: AtomicBool,
    /// Held while a callback runs.
    running: Mutex<()>,
}

thread_local! {
    /// The gates whose callbacks this thread is running now, innermost last.
    static INSIDE: RefCell<Vec<*const CallbackGate>> = const { RefCell::new(Vec::new()) };
}

impl CallbackGate {
    fn is_inside(&self) -> bool {
        INSIDE.with(|inside| inside.borrow().contains(&std::ptr::from_ref(self)))
    }

    /// Runs `call` unless the gate was closed; `close` waits for it.
    fn run(&self, call: impl FnOnce()) {
        if self.is_inside() {
            // This thread already holds `running`, in the call that led here.
            if self.armed.load(Ordering::SeqCst) {
                call();
            }
            return;
        }
        let _running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        if self.armed.load(Ordering::SeqCst) {
            INSIDE.with(|inside| inside.borrow_mut().push(std::ptr::from_ref(self)));
            call();
            INSIDE.with(|inside| inside.borrow_mut().pop());
        }
    }

    /// No callback starts after this, and none is running when it returns (except the one
    /// this thread is inside of, if any).
    fn close(&self) {
        self.armed.store(false, Ordering::SeqCst);
        if !self.is_inside() {
            drop(self.running.lock().unwrap_or_else(PoisonError::into_inner));
        }
    }
}

/// A C callback and its argument, sent to the renew thread.
struct LostCallback {
    callback: unsafe extern "C" fn(user_data: *mut c_void),
    user_data: *mut c_void,
    gate: Arc<CallbackGate>,
}

// SAFETY: the C caller declares, by registering the callback, that `user_data` may be used
// from the renew thread (see `redmutex_lost_callback`).
unsafe impl Send for LostCallback {}

impl LostCallback {
    fn call(self) {
        // SAFETY: registered by the caller for exactly this call; the gate keeps the guard
        // from being closed while it runs.
        self.gate.run(|| unsafe { (self.callback)(self.user_data) });
    }
}

impl redmutex_guard {
    pub(crate) fn new_raw(guard: Guard<kind::Any>) -> *mut redmutex_guard {
        Box::into_raw(Box::new(redmutex_guard {
            guard,
            callbacks: Arc::new(CallbackGate {
                armed: AtomicBool::new(true),
                running: Mutex::new(()),
            }),
            pid: std::process::id(),
        }))
    }

    /// Takes ownership back from C and disarms the on-lost callbacks.
    fn close(guard: *mut redmutex_guard) -> Option<Guard<kind::Any>> {
        if guard.is_null() {
            return None;
        }
        // SAFETY: a non-NULL guard came from Box::into_raw in new_raw and is closed once.
        let guard = unsafe { Box::from_raw(guard) };
        guard.disarm();
        Some(guard.guard)
    }

    /// Stops the on-lost callbacks, waiting for one that is running to finish.
    ///
    /// In a forked child the gate is skipped: it may have been copied locked (the parent's
    /// renew thread was in a callback), and the child's copy of the guard never calls back
    /// on its own anyway.
    fn disarm(&self) {
        if self.pid == std::process::id() {
            self.callbacks.close();
        }
    }
}

/// Releases the lock (only if it still holds our value: compare-and-delete on every node)
/// and frees the guard, whatever the outcome. After it returns, no on-lost callback of this
/// guard is running or will run. `guard` is invalid afterwards, even on failure.
///
/// Returns `REDMUTEX_RESULT_OK` when a majority of nodes released it;
/// `REDMUTEX_RESULT_LOST` when the lock had already expired or another owner had it (their
/// value is left alone); `REDMUTEX_RESULT_NO_QUORUM` (or the node's own code, such as
/// `REDMUTEX_RESULT_CONNECTION`, with one node) when too few nodes confirmed: the lock then
/// ends by its TTL; `REDMUTEX_RESULT_NOT_HELD` for a copy inherited through `fork()`, which
/// is freed without touching the parent's lock; `REDMUTEX_RESULT_NULL_PARAMETER`.
#[unsafe(no_mangle)]
pub extern "C" fn redmutex_unlock(guard: *mut redmutex_guard) -> redmutex_result {
    boundary(|| {
        let guard = redmutex_guard::close(guard).ok_or_else(|| Failure::null("guard"))?;
        guard.unlock()?;
        Ok(())
    })
}

/// Releases the lock like `redmutex_unlock` but keeps the guard: for a guard that a watchdog
/// thread waits on. Every `redmutex_guard_wait_lost` on it returns at once with `*out_lost`
/// false, now and later; `redmutex_guard_is_held` is false; no on-lost callback is running or
/// will run once it returns. It may be called while other threads are inside the functions
/// that take a `const redmutex_guard *` (not while one is in `redmutex_unlock` or
/// `redmutex_guard_free`). Afterwards join those threads and end the guard with
/// `redmutex_guard_free` (`redmutex_unlock` would report `REDMUTEX_RESULT_NOT_HELD`).
///
///     pthread_create(&watchdog, NULL, watch, guard);   // redmutex_guard_wait_lost(guard, ...)
///     ... work ...
///     redmutex_result r = redmutex_guard_release(guard);
///     pthread_join(watchdog, NULL);
///     redmutex_guard_free(guard);
///
/// Returns what `redmutex_unlock` returns, and `REDMUTEX_RESULT_NOT_HELD` when the guard
/// was already released (or is a copy inherited through `fork()`).
#[unsafe(no_mangle)]
pub extern "C" fn redmutex_guard_release(guard: *const redmutex_guard) -> redmutex_result {
    boundary(|| {
        let guard = arg(guard, "guard")?;
        guard.disarm();
        guard.guard.release()?;
        Ok(())
    })
}

/// Releases the lock best effort (outcome ignored; it can block up to the client's connect
/// timeout while it asks unreachable nodes again, never past the lock's validity) and frees
/// the guard: for error paths, where `redmutex_unlock`'s report is not needed. A copy
/// inherited through `fork()` is freed without releasing anything. After it returns, no
/// on-lost callback of this guard is running or will run. Must be called at most once per
/// guard, and not after `redmutex_unlock`. NULL is a no-op.
#[unsafe(no_mangle)]
pub extern "C" fn redmutex_guard_free(guard: *mut redmutex_guard) {
    let _ = boundary(|| {
        drop(redmutex_guard::close(guard));
        Ok(())
    });
}

/// Returns the fence number of this grant: strictly greater than that of every earlier
/// holder of the lock's name (0 when fencing is off, or when `guard` is NULL). Pass it to the
/// resource you protect, and have that resource refuse writes carrying a lower number than
/// one it has already seen. Local, no network.
///
/// A semaphore's permits each have their own increasing fence, but several are held at once,
/// so a resource they share must accept each holder's own fence. A read hold's fence is that
/// of the last write it may observe (0 when there was none); it does not increase per reader.
#[unsafe(no_mangle)]
pub extern "C" fn redmutex_guard_fence(guard: *const redmutex_guard) -> u64 {
    boundary_value(0, || arg(guard, "guard").map_or(0, |g| g.guard.fence()))
}

/// Returns whether the lock is still held, answered locally without the network: not
/// released, not reported lost, and before the validity deadline. False when `guard` is NULL
/// and always false in a forked child. Check it before each step of the protected work.
#[unsafe(no_mangle)]
pub extern "C" fn redmutex_guard_is_held(guard: *const redmutex_guard) -> bool {
    boundary_value(false, || {
        arg(guard, "guard").is_ok_and(|g| g.guard.is_held())
    })
}

/// Returns the milliseconds left until the validity deadline (rounded down), during which no
/// other client can hold the lock; renewal moves the deadline forward. 0 when the lock is no
/// longer held or `guard` is NULL. Local, no network.
#[unsafe(no_mangle)]
pub extern "C" fn redmutex_guard_valid_ms(guard: *const redmutex_guard) -> u64 {
    boundary_value(0, || {
        arg(guard, "guard").map_or(0, |g| {
            if !g.guard.is_held() {
                return 0;
            }
            let left = g
                .guard
                .valid_until()
                .saturating_duration_since(Instant::now());
            u64::try_from(left.as_millis()).unwrap_or(u64::MAX)
        })
    })
}

/// Returns how many renewals (automatic or by `redmutex_guard_extend`) succeeded so far; 0
/// when `guard` is NULL.
#[unsafe(no_mangle)]
pub extern "C" fn redmutex_guard_renewals(guard: *const redmutex_guard) -> u64 {
    boundary_value(0, || arg(guard, "guard").map_or(0, |g| g.guard.renewals()))
}

/// Returns `REDMUTEX_RESULT_OK` while the lock is held (as `redmutex_guard_is_held`, no
/// network) and `REDMUTEX_RESULT_LOST` once it is not, with the reason in
/// `redmutex_last_error_message` (for example "lost: its TTL ran out (auto-renew is off)");
/// `REDMUTEX_RESULT_NULL_PARAMETER` when `guard` is NULL.
#[unsafe(no_mangle)]
pub extern "C" fn redmutex_guard_check(guard: *const redmutex_guard) -> redmutex_result {
    boundary(|| {
        arg(guard, "guard")?.guard.check()?;
        Ok(())
    })
}

/// Extends the lease to `ttl_ms` milliseconds from now on a majority of nodes (only where the
/// lock still holds our value; a lock that is gone is never re-created). Later automatic
/// renewals use this TTL too. The servers only ever lengthen an expiry: with a TTL shorter
/// than the lease has left, the key keeps its later expiry there (a request that arrives late
/// must never cut a longer lease short), while the guard counts itself valid for `ttl_ms`
/// from now.
///
/// Returns `REDMUTEX_RESULT_OK`; `REDMUTEX_RESULT_LOST` when the lock is gone or another owner
/// has it; `REDMUTEX_RESULT_NO_QUORUM` (or the node's own code with one node) when too few
/// nodes confirmed, in which case the lock may still be held until its validity deadline;
/// `REDMUTEX_RESULT_INVALID_ARGUMENT` for a TTL outside 10 ms to 24 h;
/// `REDMUTEX_RESULT_NULL_PARAMETER`.
#[unsafe(no_mangle)]
pub extern "C" fn redmutex_guard_extend(
    guard: *const redmutex_guard,
    ttl_ms: u64,
) -> redmutex_result {
    boundary(|| {
        arg(guard, "guard")?
            .guard
            .extend(Duration::from_millis(ttl_ms))?;
        Ok(())
    })
}

/// Registers `callback` to be called once, with `user_data`, when the lock is lost (see
/// `redmutex_lost_callback` for where it runs and what it may do). If the lock is already
/// lost, it runs at once on this thread, also when this thread is inside an on-lost callback
/// of the same guard. It never runs once `redmutex_unlock`, `redmutex_guard_release` or
/// `redmutex_guard_free` has returned, so `user_data` may be freed then (registering after
/// that is accepted and does nothing). Several callbacks may be registered; each runs once.
///
/// Returns `REDMUTEX_RESULT_OK`, or `REDMUTEX_RESULT_NULL_PARAMETER` when `guard` or
/// `callback` is NULL. `user_data` may be NULL.
#[unsafe(no_mangle)]
pub extern "C" fn redmutex_guard_on_lost(
    guard: *const redmutex_guard,
    callback: redmutex_lost_callback,
    user_data: *mut c_void,
) -> redmutex_result {
    boundary(|| {
        let guard = arg(guard, "guard")?;
        let callback = callback.ok_or_else(|| Failure::null("callback"))?;
        let lost = LostCallback {
            callback,
            user_data,
            gate: Arc::clone(&guard.callbacks),
        };
        guard.guard.on_lost(move || lost.call());
        Ok(())
    })
}

/// Blocks until the lock is lost or released, or `timeout_ms` milliseconds pass, for
/// watchdog threads; no network. On success writes to `*out_lost` whether the lock was lost
/// (true) or not (false: the time ran out while it was held, or `redmutex_guard_release` was
/// called, which ends every wait at once).
///
/// Returns `REDMUTEX_RESULT_OK`, or `REDMUTEX_RESULT_NULL_PARAMETER` when `guard` or
/// `out_lost` is NULL.
#[unsafe(no_mangle)]
pub extern "C" fn redmutex_guard_wait_lost(
    guard: *const redmutex_guard,
    timeout_ms: u64,
    out_lost: *mut bool,
) -> redmutex_result {
    boundary(|| {
        let guard = arg(guard, "guard")?;
        let out = Out::new(out_lost, "out_lost")?;
        // The core treats a timeout too long for the clock as no timeout.
        let lost = guard.guard.wait_lost(Duration::from_millis(timeout_ms));
        out.write(lost);
        Ok(())
    })
}

/// Copies the guard's token, the value of the lock key (`owner-label:random-hex`), into
/// `buf` as a NUL-terminated string, like `redmutex_last_error_message`: at most `len - 1`
/// bytes and a NUL, and `*out_n` set to the token's full length (cut short when
/// `*out_n >= len`). `buf` may be NULL only when `len` is 0. An operator can match it
/// against `GET <name>` in Redis. Local, no network.
///
/// Returns `REDMUTEX_RESULT_OK`, or `REDMUTEX_RESULT_NULL_PARAMETER` when `guard` or `out_n`
/// is NULL, or `buf` is NULL while `len` is not 0.
#[unsafe(no_mangle)]
pub extern "C" fn redmutex_guard_token(
    guard: *const redmutex_guard,
    buf: *mut c_char,
    len: usize,
    out_n: *mut usize,
) -> redmutex_result {
    boundary(|| {
        let guard = arg(guard, "guard")?;
        let out = Out::new(out_n, "out_n")?;
        if buf.is_null() && len != 0 {
            return Err(Failure::null("buf"));
        }
        // Tokens are ASCII: a visible-ASCII owner label, a colon and hex digits.
        let token = String::from_utf8_lossy(guard.guard.token());
        out.write(copy_str(&token, buf, len));
        Ok(())
    })
}
