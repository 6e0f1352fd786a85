//! Taking a lock: `redmutex_lock*`, `redmutex_is_locked*`, `redmutex_status*` and
//! `redmutex_lock_options`.

use std::ffi::{c_char, c_void};
use std::time::Duration;

use redmutex::{LockStatus, MAX_NAME_LEN, MutexOptions};

use crate::client::redmutex_client;
use crate::guard::redmutex_guard;
use crate::ptr::{Out, arg, bytes, c_str, free_box};
use crate::result::{Failure, boundary, copy_bytes, redmutex_result};
use crate::take::{Interrupt, Kind, take};

/// Called by a blocking `redmutex_lock_with_options` on the calling thread after every
/// wake-up, so at least once per wait cap (250 ms unless set with
/// `redmutex_lock_options_set_wait_cap`); returning true stops the wait with
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
}

/// Takes the lock named by the NUL-terminated UTF-8 string `name` (its Redis key), with a
/// lease of `ttl_ms` milliseconds (10 ms to 24 h) that the client's renew thread extends
/// every `ttl_ms / 3` while the guard lives.
///
/// `wait_ms`: `-1` waits as long as it takes, `0` makes one attempt, a positive value waits
/// at most that many milliseconds. Waiters are woken by the release, not by polling. Even
/// `-1` gives up with `REDMUTEX_RESULT_CONNECTION` / `REDMUTEX_RESULT_NO_QUORUM` when no
/// majority of the nodes could be reached for the client's connect timeout.
///
/// On success writes a new guard to `*out_guard`: the caller owns it and ends it with
/// `redmutex_unlock` (or `redmutex_guard_free`). On failure leaves `*out_guard` alone.
///
/// Returns `REDMUTEX_RESULT_OK`; `REDMUTEX_RESULT_WOULD_BLOCK` when someone else held the lock
/// for the whole wait; `REDMUTEX_RESULT_NO_QUORUM`, `REDMUTEX_RESULT_CONNECTION`,
/// `REDMUTEX_RESULT_AUTH`, `REDMUTEX_RESULT_SERVER`; `REDMUTEX_RESULT_NULL_PARAMETER`,
/// `REDMUTEX_RESULT_INVALID_UTF8`; `REDMUTEX_RESULT_INVALID_ARGUMENT` for an empty name or one
/// over 512 bytes, a TTL out of range or `wait_ms < -1`.
///
/// Thread-safety: any number of threads may lock through one client at once.
#[unsafe(no_mangle)]
pub extern "C" fn redmutex_lock(
    client: *const redmutex_client,
    name: *const c_char,
    ttl_ms: u64,
    wait_ms: i64,
    out_guard: *mut *mut redmutex_guard,
) -> redmutex_result {
    boundary(|| {
        let client = arg(client, "client")?;
        let name = c_str(name, "name")?;
        let out = Out::new(out_guard, "out_guard")?;
        let opts = MutexOptions::default().with_ttl(Duration::from_millis(ttl_ms));
        take(
            client,
            name.as_bytes(),
            Kind::Mutex,
            opts,
            None,
            wait_ms,
            out,
        )
    })
}

/// Like `redmutex_lock`, for a name of `name_len` arbitrary bytes (it may hold NUL bytes and
/// need not be UTF-8).
#[unsafe(no_mangle)]
pub extern "C" fn redmutex_lock_bytes(
    client: *const redmutex_client,
    name: *const u8,
    name_len: usize,
    ttl_ms: u64,
    wait_ms: i64,
    out_guard: *mut *mut redmutex_guard,
) -> redmutex_result {
    boundary(|| {
        let client = arg(client, "client")?;
        let name = bytes(name, name_len, MAX_NAME_LEN, "name")?;
        let out = Out::new(out_guard, "out_guard")?;
        let opts = MutexOptions::default().with_ttl(Duration::from_millis(ttl_ms));
        take(client, name, Kind::Mutex, opts, None, wait_ms, out)
    })
}

/// Like `redmutex_lock_bytes`, with the TTL and every other setting taken from `options`
/// (see `redmutex_lock_options_new`). Also returns `REDMUTEX_RESULT_INTERRUPTED` when the
/// options' interrupt check stopped the wait, and `REDMUTEX_RESULT_INVALID_ARGUMENT` for a
/// setting out of range.
#[unsafe(no_mangle)]
pub extern "C" fn redmutex_lock_with_options(
    client: *const redmutex_client,
    name: *const u8,
    name_len: usize,
    options: *const redmutex_lock_options,
    wait_ms: i64,
    out_guard: *mut *mut redmutex_guard,
) -> redmutex_result {
    boundary(|| {
        let client = arg(client, "client")?;
        let name = bytes(name, name_len, MAX_NAME_LEN, "name")?;
        let options = arg(options, "options")?;
        let out = Out::new(out_guard, "out_guard")?;
        take(
            client,
            name,
            Kind::Mutex,
            options.opts.clone(),
            options.interrupt,
            wait_ms,
            out,
        )
    })
}

/// Asks Redis whether anyone holds the lock named by the NUL-terminated UTF-8 string `name`
/// (a redmutex holder or any client that locks with `SET NX`). The answer may be stale by
/// the time the caller reads it; use it for monitoring, never instead of taking the lock.
///
/// On success writes the answer to `*out_locked`. Returns `REDMUTEX_RESULT_OK`,
/// `REDMUTEX_RESULT_NO_QUORUM` / `REDMUTEX_RESULT_CONNECTION` when too few nodes answered,
/// `REDMUTEX_RESULT_NULL_PARAMETER`, `REDMUTEX_RESULT_INVALID_UTF8` or
/// `REDMUTEX_RESULT_INVALID_ARGUMENT`.
#[unsafe(no_mangle)]
pub extern "C" fn redmutex_is_locked(
    client: *const redmutex_client,
    name: *const c_char,
    out_locked: *mut bool,
) -> redmutex_result {
    boundary(|| {
        let client = arg(client, "client")?;
        let name = c_str(name, "name")?;
        let out = Out::new(out_locked, "out_locked")?;
        out.write(client.client.mutex(name).is_locked()?);
        Ok(())
    })
}

/// Like `redmutex_is_locked`, for a name of `name_len` arbitrary bytes.
#[unsafe(no_mangle)]
pub extern "C" fn redmutex_is_locked_bytes(
    client: *const redmutex_client,
    name: *const u8,
    name_len: usize,
    out_locked: *mut bool,
) -> redmutex_result {
    boundary(|| {
        let client = arg(client, "client")?;
        let name = bytes(name, name_len, MAX_NAME_LEN, "name")?;
        let out = Out::new(out_locked, "out_locked")?;
        out.write(client.client.mutex(name).is_locked()?);
        Ok(())
    })
}

/// Asks Redis who holds the lock named by the NUL-terminated UTF-8 string `name`, for how
/// long, and which fence number it last granted: what `redmutex status` shows. Like
/// `redmutex_is_locked`, the answer may be stale by the time the caller reads it.
///
/// On success: the holder's value (for redmutex holders `owner-label:random-hex`, so it
/// tells who holds it; empty when the lock is free) is copied into `holder_buf` as a
/// NUL-terminated string of at most `holder_len - 1` bytes, and `*out_holder_n` is set to
/// its full length (cut short when `*out_holder_n >= holder_len`; 0 when free);
/// `*out_ttl_ms` to the holder's remaining lease in milliseconds (-1 when the lock is free
/// or never expires); `*out_fence` to the last fence number granted for the name (0 when
/// none was). `holder_buf` may be NULL only when `holder_len` is 0. Nothing is written on
/// failure.
///
/// Returns `REDMUTEX_RESULT_OK`, `REDMUTEX_RESULT_NO_QUORUM` / `REDMUTEX_RESULT_CONNECTION`
/// when too few nodes answered, `REDMUTEX_RESULT_NULL_PARAMETER`,
/// `REDMUTEX_RESULT_INVALID_UTF8` or `REDMUTEX_RESULT_INVALID_ARGUMENT`.
///
/// Thread-safety: any number of threads may ask through one client at once.
#[unsafe(no_mangle)]
pub extern "C" fn redmutex_status(
    client: *const redmutex_client,
    name: *const c_char,
    holder_buf: *mut c_char,
    holder_len: usize,
    out_holder_n: *mut usize,
    out_ttl_ms: *mut i64,
    out_fence: *mut u64,
) -> redmutex_result {
    boundary(|| {
        let name = c_str(name, "name")?;
        let out = StatusOut::new(holder_buf, holder_len, out_holder_n, out_ttl_ms, out_fence)?;
        out.write(arg(client, "client")?.client.mutex(name).status()?);
        Ok(())
    })
}

/// Like `redmutex_status`, for a name of `name_len` arbitrary bytes.
#[unsafe(no_mangle)]
pub extern "C" fn redmutex_status_bytes(
    client: *const redmutex_client,
    name: *const u8,
    name_len: usize,
    holder_buf: *mut c_char,
    holder_len: usize,
    out_holder_n: *mut usize,
    out_ttl_ms: *mut i64,
    out_fence: *mut u64,
) -> redmutex_result {
    boundary(|| {
        let name = bytes(name, name_len, MAX_NAME_LEN, "name")?;
        let out = StatusOut::new(holder_buf, holder_len, out_holder_n, out_ttl_ms, out_fence)?;
        out.write(arg(client, "client")?.client.mutex(name).status()?);
        Ok(())
    })
}

/// The checked outputs of `redmutex_status*`.
struct StatusOut {
    holder_buf: *mut c_char,
    holder_len: usize,
    holder_n: Out<usize>,
    ttl_ms: Out<i64>,
    fence: Out<u64>,
}

impl StatusOut {
    fn new(
        holder_buf: *mut c_char,
        holder_len: usize,
        holder_n: *mut usize,
        ttl_ms: *mut i64,
        fence: *mut u64,
    ) -> Result<StatusOut, Failure> {
        if holder_buf.is_null() && holder_len != 0 {
            return Err(Failure::null("holder_buf"));
        }
        Ok(StatusOut {
            holder_buf,
            holder_len,
            holder_n: Out::new(holder_n, "out_holder_n")?,
            ttl_ms: Out::new(ttl_ms, "out_ttl_ms")?,
            fence: Out::new(fence, "out_fence")?,
        })
    }

    fn write(self, status: LockStatus) {
        let holder = status.holder.as_deref().unwrap_or_default();
        self.holder_n
            .write(copy_bytes(holder, self.holder_buf, self.holder_len));
        let ttl = status
            .ttl
            .map_or(-1, |t| t.as_millis().min(i64::MAX as u128) as i64);
        self.ttl_ms.write(ttl);
        self.fence.write(status.fence);
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
/// milliseconds (default 250; 1 ms to 60 s): the most a lost wake-up can cost, and how
/// often the interrupt check runs.
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
        options.interrupt = Some(Interrupt { check, user_data });
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
