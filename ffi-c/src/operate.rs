//! What an operator asks of the servers: `redmutex_list*`, every held or waited-for lock
//! whose name matches a pattern, and `redmutex_force_unlock*`, breaking a stuck lock (what
//! `redmutex list` and `redmutex unlock --force` do).

use std::ffi::{c_char, c_int, c_void};

use redmutex::{HoldKind, ListedHold, MAX_NAME_LEN, MAX_PATTERN_LEN};

use crate::client::redmutex_client;
use crate::ptr::{Out, arg, bytes, c_str};
use crate::result::{Failure, boundary, boundary_value, redmutex_result};

/// What a listed hold is. The values are stable; a later version of the library may pass
/// values this header does not name (treat them as `REDMUTEX_HOLD_KIND_OTHER`).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum redmutex_hold_kind {
    /// A mutex's hold (`redmutex_lock`), or the write side of a read-write lock: one key,
    /// the same hold.
    Exclusive = 0,
    /// A read hold of a read-write lock.
    Read = 1,
    /// A semaphore's permit.
    Permit = 2,
    /// A kind of hold this version of the C API has no dedicated value for.
    Other = 3,
}

/// One hold of a lock that `redmutex_list` found, as the nodes that have it see it.
///
/// Made by the library and only read by the caller, as an element of an array: its layout
/// never changes. Its pointers are valid only during the callback that received it.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct redmutex_listed_hold {
    /// What it holds.
    pub kind: redmutex_hold_kind,
    /// The holder's token, `holder_len` bytes, not NUL-terminated
    /// (`owner-label:random-hex` for redmutex holders, so it tells who holds it).
    pub holder: *const u8,
    /// The length of `holder`, in bytes.
    pub holder_len: usize,
    /// Its remaining lease in milliseconds, the shortest among the nodes that have it; -1
    /// for a key without expiry (not one redmutex set).
    pub ttl_ms: i64,
    /// On how many nodes it is: fewer than the lock's `nodes` shows the nodes of a Redlock
    /// disagreeing.
    pub nodes: usize,
}

/// One lock that `redmutex_list` found: held, or waited for.
///
/// Made by the library and only read by the caller, so a later version may add fields at
/// the end. It and everything it points to are valid only during the callback that
/// received it: copy what you keep.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct redmutex_listed_lock {
    /// The lock's name, `name_len` bytes, not NUL-terminated (it may hold NUL bytes and
    /// need not be UTF-8).
    pub name: *const u8,
    /// The length of `name`, in bytes.
    pub name_len: usize,
    /// Its holds, `holds_len` of them, by kind, then holder (NULL when there is none: a
    /// lock listed only for its waiters).
    pub holds: *const redmutex_listed_hold,
    /// How many holds `holds` points to.
    pub holds_len: usize,
    /// The last fence number granted for the name (the largest among the nodes).
    pub fence: u64,
    /// How many callers have announced that they wait for it (the most any node counts).
    pub waiters: u64,
    /// How many nodes answered.
    pub nodes: usize,
    /// Whether the nodes that answered disagree: some hold is not on every one of them (a
    /// Redlock node that missed a grant or a release; it settles as leases run out).
    pub disagree: bool,
}

/// Called by `redmutex_list` once per lock found, in name order, on the thread that called
/// `redmutex_list`, with the `user_data` given to it. `lock` and everything it points to
/// are valid only until the callback returns.
///
/// Returning 0 goes on to the next lock; any other value stops the listing, and
/// `redmutex_list` returns `REDMUTEX_RESULT_OK` at once. It must not unwind (no C++
/// exception, no `longjmp`). It may call into this library, also on the same client.
pub type redmutex_list_callback = Option<
    unsafe extern "C" fn(lock: *const redmutex_listed_lock, user_data: *mut c_void) -> c_int,
>;

/// Returns the name `redmutex list` prints for a `redmutex_hold_kind` value: `"exclusive"`,
/// `"read"`, `"permit"`, or `"other"` for any other value (such as one from a newer
/// library).
///
/// The string is static: never free it. Safe to call from any thread at any time.
#[unsafe(no_mangle)]
pub extern "C" fn redmutex_hold_kind_name(kind: u32) -> *const c_char {
    boundary_value(c"other".as_ptr(), || {
        let name = match kind {
            k if k == redmutex_hold_kind::Exclusive as u32 => c"exclusive",
            k if k == redmutex_hold_kind::Read as u32 => c"read",
            k if k == redmutex_hold_kind::Permit as u32 => c"permit",
            _ => c"other",
        };
        name.as_ptr()
    })
}

/// Finds every lock whose name matches the NUL-terminated UTF-8 `pattern` (Redis's glob:
/// `*`, `?`, `[a-z]`, `\x`; `"*"` matches every name) and that is held or waited for now,
/// and calls `callback` with each, sorted by name: its holds with their holders and
/// remaining leases, its last fence and its waiters, read on every node. What
/// `redmutex list` shows. For monitoring: the answer may be stale by the time it is read.
///
/// Locks are found by a `SCAN` (never `KEYS`) of each server, every master of a Redis
/// Cluster, for the keys a lock keeps beside its own: its fence counter (every fenced grant
/// leaves one), its read holds, permits and waiters. A lock taken with fencing off, held
/// while nobody waits, keeps only its own key and is not listed: ask `redmutex_status` for
/// it by name. The scan walks every key of every server once, and the whole listing is read
/// before the first callback.
///
/// Returns `REDMUTEX_RESULT_OK` (also when `callback` stopped the listing, or no lock
/// matched); `REDMUTEX_RESULT_NO_QUORUM` / `REDMUTEX_RESULT_CONNECTION` when too few nodes
/// answered (then `callback` was never called); `REDMUTEX_RESULT_NULL_PARAMETER` when
/// `client`, `pattern` or `callback` is NULL; `REDMUTEX_RESULT_INVALID_UTF8`;
/// `REDMUTEX_RESULT_INVALID_ARGUMENT` for an empty pattern or one over 2048 bytes.
/// `user_data` may be NULL.
///
/// Thread-safety: any number of threads may list through one client at once.
#[unsafe(no_mangle)]
pub extern "C" fn redmutex_list(
    client: *const redmutex_client,
    pattern: *const c_char,
    callback: redmutex_list_callback,
    user_data: *mut c_void,
) -> redmutex_result {
    boundary(|| {
        let client = arg(client, "client")?;
        let pattern = c_str(pattern, "pattern")?;
        list(client, pattern.as_bytes(), callback, user_data)
    })
}

/// Like `redmutex_list`, for a pattern of `pattern_len` arbitrary bytes (it may hold NUL
/// bytes and need not be UTF-8).
#[unsafe(no_mangle)]
pub extern "C" fn redmutex_list_bytes(
    client: *const redmutex_client,
    pattern: *const u8,
    pattern_len: usize,
    callback: redmutex_list_callback,
    user_data: *mut c_void,
) -> redmutex_result {
    boundary(|| {
        let client = arg(client, "client")?;
        let pattern = bytes(pattern, pattern_len, MAX_PATTERN_LEN, "pattern")?;
        list(client, pattern, callback, user_data)
    })
}

fn list(
    client: &redmutex_client,
    pattern: &[u8],
    callback: redmutex_list_callback,
    user_data: *mut c_void,
) -> Result<(), Failure> {
    let callback = callback.ok_or_else(|| Failure::null("callback"))?;
    for lock in client.client.list(pattern)? {
        let holds: Vec<redmutex_listed_hold> = lock.holds.iter().map(listed_hold).collect();
        let listed = redmutex_listed_lock {
            name: lock.name.as_ptr(),
            name_len: lock.name.len(),
            holds: if holds.is_empty() {
                std::ptr::null()
            } else {
                holds.as_ptr()
            },
            holds_len: holds.len(),
            fence: lock.fence,
            waiters: lock.waiters,
            nodes: lock.nodes,
            disagree: lock.disagree(),
        };
        // SAFETY: a callback the caller registered for this call, given a struct whose
        // pointers (into `lock` and `holds`) live until it returns.
        if unsafe { callback(&listed, user_data) } != 0 {
            break;
        }
    }
    Ok(())
}

/// A hold as C sees it; its `holder` points into `hold`.
fn listed_hold(hold: &ListedHold) -> redmutex_listed_hold {
    redmutex_listed_hold {
        kind: match hold.kind {
            HoldKind::Exclusive => redmutex_hold_kind::Exclusive,
            HoldKind::Read => redmutex_hold_kind::Read,
            HoldKind::Permit => redmutex_hold_kind::Permit,
            _ => redmutex_hold_kind::Other,
        },
        holder: hold.holder.as_ptr(),
        holder_len: hold.holder.len(),
        ttl_ms: hold
            .ttl
            .map_or(-1, |t| t.as_millis().min(i64::MAX as u128) as i64),
        nodes: hold.nodes,
    }
}

/// Removes every hold of the lock named by the NUL-terminated UTF-8 string `name`, whoever
/// has it: the mutex's (or writer's), the read holds, a semaphore's permits (a client of
/// several masters has no semaphores and leaves permits alone). What
/// `redmutex unlock --force` does: for a lock whose holder is gone for good (killed with a
/// long lease), when waiting for the lease to run out costs more than the risk below.
///
/// Each node is sent the release of each hold it has, with the holder's own token: a hold
/// taken meanwhile by someone else is not removed, the fence counter is kept (later fences
/// stay larger), and the waiters are woken as by the holder's own release.
///
/// A holder that is still alive keeps running its critical section until it learns of the
/// loss, at its next renewal or `redmutex_guard_check`: until then two holders run at once,
/// and only fencing protects the resource.
///
/// On success writes to `*out_removed` how many holds were removed (0 when nothing was
/// held). Nothing is written on failure.
///
/// Returns `REDMUTEX_RESULT_OK`; `REDMUTEX_RESULT_NO_QUORUM` / `REDMUTEX_RESULT_CONNECTION`
/// when too few nodes answered (some holds may have been removed on those that did);
/// `REDMUTEX_RESULT_NULL_PARAMETER` when `client`, `name` or `out_removed` is NULL;
/// `REDMUTEX_RESULT_INVALID_UTF8`; `REDMUTEX_RESULT_INVALID_ARGUMENT` for an empty name or
/// one over 512 bytes.
///
/// Thread-safety: any number of threads may call it through one client at once.
#[unsafe(no_mangle)]
pub extern "C" fn redmutex_force_unlock(
    client: *const redmutex_client,
    name: *const c_char,
    out_removed: *mut usize,
) -> redmutex_result {
    boundary(|| {
        let client = arg(client, "client")?;
        let name = c_str(name, "name")?;
        let out = Out::new(out_removed, "out_removed")?;
        out.write(client.client.force_unlock(name)?.len());
        Ok(())
    })
}

/// Like `redmutex_force_unlock`, for a name of `name_len` arbitrary bytes.
#[unsafe(no_mangle)]
pub extern "C" fn redmutex_force_unlock_bytes(
    client: *const redmutex_client,
    name: *const u8,
    name_len: usize,
    out_removed: *mut usize,
) -> redmutex_result {
    boundary(|| {
        let client = arg(client, "client")?;
        let name = bytes(name, name_len, MAX_NAME_LEN, "name")?;
        let out = Out::new(out_removed, "out_removed")?;
        out.write(client.client.force_unlock(name)?.len());
        Ok(())
    })
}
