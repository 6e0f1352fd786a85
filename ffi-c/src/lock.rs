//! Taking a lock: `redmutex_lock*`, `redmutex_is_locked*`, `redmutex_status*` and
//! `redmutex_lock_options`.

use std::ffi::c_char;
use std::time::Duration;

use redmutex::{LockStatus, MAX_NAME_LEN, MutexOptions};

use crate::client::redmutex_client;
use crate::guard::redmutex_guard;
use crate::options::redmutex_lock_options;
use crate::ptr::{Out, arg, bytes, c_str};
use crate::result::{Failure, boundary, copy_bytes, redmutex_result};
use crate::take::{Kind, take};

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
            options.interruption()?,
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
