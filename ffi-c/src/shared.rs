//! The other kinds of lock: the semaphore (`redmutex_semaphore_acquire*`) and the read-write
//! lock (`redmutex_read_lock*`, `redmutex_write_lock*`), each handing out a `redmutex_guard`,
//! and what Redis says of their holders (`redmutex_semaphore_status*`,
//! `redmutex_rwlock_status*`).

use std::ffi::c_char;
use std::time::Duration;

use redmutex::{MAX_NAME_LEN, MutexOptions};

use crate::client::redmutex_client;
use crate::guard::redmutex_guard;
use crate::options::redmutex_lock_options;
use crate::ptr::{Out, arg, bytes, c_str};
use crate::result::{Failure, boundary, redmutex_result};
use crate::take::{Kind, take};

/// The shapes every kind's entry points share: a C string name, a byte name, or a byte name
/// with options.
fn by_c_str(
    client: *const redmutex_client,
    name: *const c_char,
    kind: Kind,
    ttl_ms: u64,
    wait_ms: i64,
    out_guard: *mut *mut redmutex_guard,
) -> redmutex_result {
    boundary(|| {
        let client = arg(client, "client")?;
        let name = c_str(name, "name")?;
        let out = Out::new(out_guard, "out_guard")?;
        let opts = MutexOptions::default().with_ttl(Duration::from_millis(ttl_ms));
        take(client, name.as_bytes(), kind, opts, None, wait_ms, out)
    })
}

fn by_bytes(
    client: *const redmutex_client,
    name: *const u8,
    name_len: usize,
    kind: Kind,
    ttl_ms: u64,
    wait_ms: i64,
    out_guard: *mut *mut redmutex_guard,
) -> redmutex_result {
    boundary(|| {
        let client = arg(client, "client")?;
        let name = bytes(name, name_len, MAX_NAME_LEN, "name")?;
        let out = Out::new(out_guard, "out_guard")?;
        let opts = MutexOptions::default().with_ttl(Duration::from_millis(ttl_ms));
        take(client, name, kind, opts, None, wait_ms, out)
    })
}

fn with_options(
    client: *const redmutex_client,
    name: *const u8,
    name_len: usize,
    kind: Kind,
    options: *const redmutex_lock_options,
    wait_ms: i64,
    out_guard: *mut *mut redmutex_guard,
) -> redmutex_result {
    boundary(|| {
        let client = arg(client, "client")?;
        let name = bytes(name, name_len, MAX_NAME_LEN, "name")?;
        let options = arg(options, "options")?;
        let out = Out::new(out_guard, "out_guard")?;
        let (opts, interrupt) = (options.opts.clone(), options.interruption()?);
        take(client, name, kind, opts, interrupt, wait_ms, out)
    })
}

/// Takes one of the `permits` permits of the semaphore named by the NUL-terminated UTF-8
/// string `name`: at most `permits` holders of a name at a time, fleet-wide. Each permit is a
/// lease like a lock's, of `ttl_ms` milliseconds (10 ms to 24 h), renewed by the client's
/// renew thread while the guard lives, and back by itself after its TTL when its holder dies.
///
/// `permits` is 1 to 1024, and every user of one name must give the same count: while any
/// permit of the name is held, a call with another count fails with
/// `REDMUTEX_RESULT_INVALID_ARGUMENT` and a message naming both counts. `wait_ms` as in
/// `redmutex_lock`: `-1` forever, `0` one attempt, else at most that many milliseconds; a
/// release wakes one waiter.
///
/// On success writes a new guard to `*out_guard`, ended like any guard with `redmutex_unlock`
/// (or `redmutex_guard_free`); `redmutex_guard_fence` gives the permit's fence, strictly
/// greater than that of every earlier permit (and mutex grant) of the name. On failure leaves
/// `*out_guard` alone.
///
/// Returns as `redmutex_lock` (`REDMUTEX_RESULT_WOULD_BLOCK` when every permit was held for
/// the whole wait), plus `REDMUTEX_RESULT_INVALID_ARGUMENT` for `permits` of 0 or above 1024,
/// for a count other than the live permits' and for a client of several independent masters
/// (majorities granting different permits need not share a node, so N permits could admit
/// up to 2N-1 holders; use one node, Sentinel or a Cluster).
///
/// Thread-safety: any number of threads may acquire through one client at once.
#[unsafe(no_mangle)]
pub extern "C" fn redmutex_semaphore_acquire(
    client: *const redmutex_client,
    name: *const c_char,
    permits: u32,
    ttl_ms: u64,
    wait_ms: i64,
    out_guard: *mut *mut redmutex_guard,
) -> redmutex_result {
    let kind = Kind::Semaphore(permits);
    by_c_str(client, name, kind, ttl_ms, wait_ms, out_guard)
}

/// Like `redmutex_semaphore_acquire`, for a name of `name_len` arbitrary bytes (it may hold
/// NUL bytes and need not be UTF-8).
#[unsafe(no_mangle)]
pub extern "C" fn redmutex_semaphore_acquire_bytes(
    client: *const redmutex_client,
    name: *const u8,
    name_len: usize,
    permits: u32,
    ttl_ms: u64,
    wait_ms: i64,
    out_guard: *mut *mut redmutex_guard,
) -> redmutex_result {
    let kind = Kind::Semaphore(permits);
    by_bytes(client, name, name_len, kind, ttl_ms, wait_ms, out_guard)
}

/// Like `redmutex_semaphore_acquire_bytes`, with the TTL and every other setting taken from
/// `options` (see `redmutex_lock_options_new`). Also returns `REDMUTEX_RESULT_INTERRUPTED`
/// when the options' interrupt check stopped the wait, and `REDMUTEX_RESULT_INVALID_ARGUMENT`
/// for a setting out of range.
#[unsafe(no_mangle)]
pub extern "C" fn redmutex_semaphore_acquire_with_options(
    client: *const redmutex_client,
    name: *const u8,
    name_len: usize,
    permits: u32,
    options: *const redmutex_lock_options,
    wait_ms: i64,
    out_guard: *mut *mut redmutex_guard,
) -> redmutex_result {
    let kind = Kind::Semaphore(permits);
    with_options(client, name, name_len, kind, options, wait_ms, out_guard)
}

/// Takes a read hold of the read-write lock named by the NUL-terminated UTF-8 string `name`:
/// many readers at once, or one writer. A read hold waits while a writer holds the name or
/// waits for it (writer preference: a steady stream of readers cannot starve a writer). The
/// write side is the lock of the same name, so a `redmutex_lock` holder of `name` (or any
/// `SET name x NX` holder) keeps readers out too.
///
/// `ttl_ms` and `wait_ms` as in `redmutex_lock`. On success writes a new guard to
/// `*out_guard`, ended like any guard with `redmutex_unlock`; its `redmutex_guard_fence` is
/// the fence of the last write it may observe (0 when there was none), which does not
/// increase per reader. On failure leaves `*out_guard` alone.
///
/// Returns as `redmutex_lock`: `REDMUTEX_RESULT_WOULD_BLOCK` when a writer held or awaited the
/// lock for the whole wait.
///
/// Thread-safety: any number of threads may lock through one client at once.
#[unsafe(no_mangle)]
pub extern "C" fn redmutex_read_lock(
    client: *const redmutex_client,
    name: *const c_char,
    ttl_ms: u64,
    wait_ms: i64,
    out_guard: *mut *mut redmutex_guard,
) -> redmutex_result {
    by_c_str(client, name, Kind::Read, ttl_ms, wait_ms, out_guard)
}

/// Like `redmutex_read_lock`, for a name of `name_len` arbitrary bytes.
#[unsafe(no_mangle)]
pub extern "C" fn redmutex_read_lock_bytes(
    client: *const redmutex_client,
    name: *const u8,
    name_len: usize,
    ttl_ms: u64,
    wait_ms: i64,
    out_guard: *mut *mut redmutex_guard,
) -> redmutex_result {
    by_bytes(
        client,
        name,
        name_len,
        Kind::Read,
        ttl_ms,
        wait_ms,
        out_guard,
    )
}

/// Like `redmutex_read_lock_bytes`, with the TTL and every other setting taken from `options`;
/// returns as `redmutex_lock_with_options`.
#[unsafe(no_mangle)]
pub extern "C" fn redmutex_read_lock_with_options(
    client: *const redmutex_client,
    name: *const u8,
    name_len: usize,
    options: *const redmutex_lock_options,
    wait_ms: i64,
    out_guard: *mut *mut redmutex_guard,
) -> redmutex_result {
    with_options(
        client,
        name,
        name_len,
        Kind::Read,
        options,
        wait_ms,
        out_guard,
    )
}

/// Takes the write hold of the read-write lock named by the NUL-terminated UTF-8 string
/// `name`: exclusive of every reader and of every other writer. It is the same lock as
/// `redmutex_lock` on `name` (the same key, the same fence), so a write hold and a mutex
/// holder of one name exclude each other; while it waits, new readers queue behind it.
///
/// `ttl_ms`, `wait_ms`, `*out_guard` and the results as in `redmutex_lock`
/// (`REDMUTEX_RESULT_WOULD_BLOCK` when a writer or readers held the lock for the whole wait).
/// Its fence strictly increases, past every earlier write's and every read hold's.
///
/// Thread-safety: any number of threads may lock through one client at once.
#[unsafe(no_mangle)]
pub extern "C" fn redmutex_write_lock(
    client: *const redmutex_client,
    name: *const c_char,
    ttl_ms: u64,
    wait_ms: i64,
    out_guard: *mut *mut redmutex_guard,
) -> redmutex_result {
    by_c_str(client, name, Kind::Write, ttl_ms, wait_ms, out_guard)
}

/// Like `redmutex_write_lock`, for a name of `name_len` arbitrary bytes.
#[unsafe(no_mangle)]
pub extern "C" fn redmutex_write_lock_bytes(
    client: *const redmutex_client,
    name: *const u8,
    name_len: usize,
    ttl_ms: u64,
    wait_ms: i64,
    out_guard: *mut *mut redmutex_guard,
) -> redmutex_result {
    by_bytes(
        client,
        name,
        name_len,
        Kind::Write,
        ttl_ms,
        wait_ms,
        out_guard,
    )
}

/// Like `redmutex_write_lock_bytes`, with the TTL and every other setting taken from
/// `options`; returns as `redmutex_lock_with_options`.
#[unsafe(no_mangle)]
pub extern "C" fn redmutex_write_lock_with_options(
    client: *const redmutex_client,
    name: *const u8,
    name_len: usize,
    options: *const redmutex_lock_options,
    wait_ms: i64,
    out_guard: *mut *mut redmutex_guard,
) -> redmutex_result {
    with_options(
        client,
        name,
        name_len,
        Kind::Write,
        options,
        wait_ms,
        out_guard,
    )
}

/// Asks Redis how many permits of the semaphore named by the NUL-terminated UTF-8 string
/// `name` are held: for monitoring (the answer may be stale by the time the caller reads it),
/// never instead of acquiring. No count is given: any user's count will do for a look.
///
/// On success writes to `*out_permits` the count the live permits were taken with (0 when none
/// is held), to `*out_held` the number of live permits, and to `*out_fence` the last fence
/// number granted for the name (shared with the lock of the same name; 0 when none was).
/// Nothing is written on failure.
///
/// Returns `REDMUTEX_RESULT_OK`, `REDMUTEX_RESULT_CONNECTION` when the node did not answer,
/// `REDMUTEX_RESULT_NULL_PARAMETER`, `REDMUTEX_RESULT_INVALID_UTF8`, or
/// `REDMUTEX_RESULT_INVALID_ARGUMENT` for a bad name or a client of several independent
/// masters (which has no semaphores).
#[unsafe(no_mangle)]
pub extern "C" fn redmutex_semaphore_status(
    client: *const redmutex_client,
    name: *const c_char,
    out_permits: *mut u32,
    out_held: *mut usize,
    out_fence: *mut u64,
) -> redmutex_result {
    boundary(|| {
        let name = c_str(name, "name")?;
        semaphore_status(client, name.as_bytes(), out_permits, out_held, out_fence)
    })
}

/// Like `redmutex_semaphore_status`, for a name of `name_len` arbitrary bytes.
#[unsafe(no_mangle)]
pub extern "C" fn redmutex_semaphore_status_bytes(
    client: *const redmutex_client,
    name: *const u8,
    name_len: usize,
    out_permits: *mut u32,
    out_held: *mut usize,
    out_fence: *mut u64,
) -> redmutex_result {
    boundary(|| {
        let name = bytes(name, name_len, MAX_NAME_LEN, "name")?;
        semaphore_status(client, name, out_permits, out_held, out_fence)
    })
}

fn semaphore_status(
    client: *const redmutex_client,
    name: &[u8],
    out_permits: *mut u32,
    out_held: *mut usize,
    out_fence: *mut u64,
) -> Result<(), Failure> {
    let client = arg(client, "client")?;
    let permits = Out::new(out_permits, "out_permits")?;
    let held = Out::new(out_held, "out_held")?;
    let fence = Out::new(out_fence, "out_fence")?;
    let st = client.client.semaphore(name, 1).status()?;
    permits.write(st.permits.unwrap_or(0));
    held.write(st.holders.len());
    fence.write(st.fence);
    Ok(())
}

/// Asks Redis who holds the read-write lock named by the NUL-terminated UTF-8 string `name`:
/// for monitoring, like `redmutex_status` (which names the writer and its lease).
///
/// On success writes to `*out_writer` whether a writer (or a `redmutex_lock` holder, or any
/// `SET name x NX` holder) has it, to `*out_readers` the number of live read holds, and to
/// `*out_fence` the last fence number granted for the name. Nothing is written on failure.
///
/// Returns `REDMUTEX_RESULT_OK`, `REDMUTEX_RESULT_NO_QUORUM` / `REDMUTEX_RESULT_CONNECTION`
/// when too few nodes answered, `REDMUTEX_RESULT_NULL_PARAMETER`,
/// `REDMUTEX_RESULT_INVALID_UTF8` or `REDMUTEX_RESULT_INVALID_ARGUMENT`.
#[unsafe(no_mangle)]
pub extern "C" fn redmutex_rwlock_status(
    client: *const redmutex_client,
    name: *const c_char,
    out_writer: *mut bool,
    out_readers: *mut usize,
    out_fence: *mut u64,
) -> redmutex_result {
    boundary(|| {
        let name = c_str(name, "name")?;
        rwlock_status(client, name.as_bytes(), out_writer, out_readers, out_fence)
    })
}

/// Like `redmutex_rwlock_status`, for a name of `name_len` arbitrary bytes.
#[unsafe(no_mangle)]
pub extern "C" fn redmutex_rwlock_status_bytes(
    client: *const redmutex_client,
    name: *const u8,
    name_len: usize,
    out_writer: *mut bool,
    out_readers: *mut usize,
    out_fence: *mut u64,
) -> redmutex_result {
    boundary(|| {
        let name = bytes(name, name_len, MAX_NAME_LEN, "name")?;
        rwlock_status(client, name, out_writer, out_readers, out_fence)
    })
}

fn rwlock_status(
    client: *const redmutex_client,
    name: &[u8],
    out_writer: *mut bool,
    out_readers: *mut usize,
    out_fence: *mut u64,
) -> Result<(), Failure> {
    let client = arg(client, "client")?;
    let writer = Out::new(out_writer, "out_writer")?;
    let readers = Out::new(out_readers, "out_readers")?;
    let fence = Out::new(out_fence, "out_fence")?;
    let st = client.client.rwlock(name).status()?;
    writer.write(st.writer.holder.is_some());
    readers.write(st.readers.len());
    fence.write(st.writer.fence);
    Ok(())
}
