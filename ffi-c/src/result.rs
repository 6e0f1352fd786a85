//! The result enum, the calling thread's last error message, and the panic boundary that
//! every export runs inside.

use std::cell::RefCell;
use std::ffi::{CStr, c_char};
use std::panic::{AssertUnwindSafe, catch_unwind};

use redmutex::{Error, ErrorKind, TryLockError};

/// Declares `redmutex_result` and its name table from one list. The header has the same
/// list as its `REDMUTEX_RESULTS(X)` macro (in `ffi-c/cbindgen.toml`, which makes the C enum
/// from it); `the_header_lists_every_result` keeps the two identical.
macro_rules! results {
    ($( $(#[doc = $doc:literal])* $variant:ident = $value:literal, $c_name:literal; )*) => {
        /// What a call did: `REDMUTEX_RESULT_OK` (0) or why it failed.
        ///
        /// The numbers are stable and never reused. Values 1 to 99 mirror the library's error
        /// kinds one to one; values from 100 on are about the call itself (a NULL pointer, bad
        /// UTF-8, a bug). Functions that take a result (such as `redmutex_result_name`) take a
        /// `uint32_t` and accept any value, so a result from a newer library is never
        /// undefined behaviour.
        ///
        /// After a failure, `redmutex_last_error_message` gives the details on the same thread.
        #[repr(u32)]
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum redmutex_result {
            $( $(#[doc = $doc])* $variant = $value, )*
        }

        impl redmutex_result {
            /// Every result, with its C name (`REDMUTEX_RESULT_` and this).
            const ALL: &[(redmutex_result, &'static CStr)] = &[
                $( (redmutex_result::$variant, $c_name), )*
            ];
        }
    };
}

results! {
    /// Success.
    Ok = 0, c"REDMUTEX_RESULT_OK";
    /// The lock is held by someone else and the wait (if any) ran out.
    WouldBlock = 1, c"REDMUTEX_RESULT_WOULD_BLOCK";
    /// Fewer than a majority of the nodes agreed; the message has each node's answer.
    NoQuorum = 2, c"REDMUTEX_RESULT_NO_QUORUM";
    /// The lock was lost: it expired, or another owner's value replaced ours.
    Lost = 3, c"REDMUTEX_RESULT_LOST";
    /// The guard no longer holds the lock: it was released, or it was inherited through
    /// `fork()` (only the process that took a lock releases it).
    NotHeld = 4, c"REDMUTEX_RESULT_NOT_HELD";
    /// The Redis server could not be reached, or the connection broke or timed out.
    Connection = 5, c"REDMUTEX_RESULT_CONNECTION";
    /// A Redis server refused the credentials (`WRONGPASS`, `NOAUTH`, `NOPERM`).
    Auth = 6, c"REDMUTEX_RESULT_AUTH";
    /// A Redis server answered with an error (for example `OOM`, `READONLY`).
    Server = 7, c"REDMUTEX_RESULT_SERVER";
    /// An argument was out of range or malformed (an empty lock name, a TTL of 0, a bad
    /// URL); nothing was sent to Redis.
    InvalidArgument = 8, c"REDMUTEX_RESULT_INVALID_ARGUMENT";
    /// The interrupt check set with `redmutex_lock_options_set_interrupt` stopped the wait.
    Interrupted = 9, c"REDMUTEX_RESULT_INTERRUPTED";
    /// A required pointer argument was NULL.
    NullParameter = 100, c"REDMUTEX_RESULT_NULL_PARAMETER";
    /// A string argument was not valid UTF-8.
    InvalidUtf8 = 101, c"REDMUTEX_RESULT_INVALID_UTF8";
    /// The library hit an internal error (a Rust panic) and stopped it at the API boundary.
    /// Please report it, with the message from `redmutex_last_error_message`.
    Panic = 102, c"REDMUTEX_RESULT_PANIC";
    /// A failure this version of the C API has no dedicated code for.
    Other = 103, c"REDMUTEX_RESULT_OTHER";
}

impl redmutex_result {
    /// The stable name of a result value (its C constant's name).
    fn name(value: u32) -> &'static CStr {
        Self::ALL
            .iter()
            .find(|(r, _)| *r as u32 == value)
            .map_or(c"REDMUTEX_RESULT_UNKNOWN", |(_, name)| name)
    }
}

/// Returns the name of a result value, such as `"REDMUTEX_RESULT_NO_QUORUM"`, or
/// `"REDMUTEX_RESULT_UNKNOWN"` for a value this library does not know.
///
/// The string is static: never free it. Safe to call from any thread at any time.
#[unsafe(no_mangle)]
pub extern "C" fn redmutex_result_name(result: u32) -> *const c_char {
    match catch_unwind(|| redmutex_result::name(result)) {
        Ok(name) => name.as_ptr(),
        Err(_) => c"REDMUTEX_RESULT_UNKNOWN".as_ptr(),
    }
}

/// Copies the detailed message of the calling thread's last failure into `buf`.
///
/// The message names the failure and its cause, such as the server's error text, the node
/// that failed, or each node's answer when several were asked. Every function that returns a
/// result other than `REDMUTEX_RESULT_OK` sets it for the calling thread; successes leave it
/// as it was. Before any failure it is the empty string.
///
/// Like `snprintf`: writes at most `len - 1` bytes of the message (cut at a character
/// boundary) and a terminating NUL, and sets `*out_n` to the length of the whole message,
/// without the NUL. The message was cut short when `*out_n >= len`. `buf` may be NULL only
/// when `len` is 0, to learn the length.
///
/// Returns `REDMUTEX_RESULT_OK`, or `REDMUTEX_RESULT_NULL_PARAMETER` (and leaves the stored
/// message alone) when `out_n` is NULL, or `buf` is NULL while `len` is not 0.
#[unsafe(no_mangle)]
pub extern "C" fn redmutex_last_error_message(
    buf: *mut c_char,
    len: usize,
    out_n: *mut usize,
) -> redmutex_result {
    // Not through `boundary`: a failure here must not replace the message being read.
    let copied = catch_unwind(AssertUnwindSafe(|| {
        if out_n.is_null() || (buf.is_null() && len != 0) {
            return redmutex_result::NullParameter;
        }
        write_len(
            out_n,
            LAST_ERROR.with(|last| copy_str(&last.borrow(), buf, len)),
        );
        redmutex_result::Ok
    }));
    copied.unwrap_or(redmutex_result::Panic)
}

/// Writes `n` to a non-NULL `*out_n`.
fn write_len(out_n: *mut usize, n: usize) {
    // SAFETY: the caller checked `out_n` for NULL, and C passes a writable `size_t`.
    unsafe { out_n.write(n) }
}

thread_local! {
    static LAST_ERROR: RefCell<String> = const { RefCell::new(String::new()) };
}

fn set_last_error(message: String) {
    // Fails only while the thread is being torn down, when nobody can read it any more.
    let _ = LAST_ERROR.try_with(|last| *last.borrow_mut() = message);
}

/// Copies `s` into `buf` (`len` bytes) as a NUL-terminated string, cut at a character
/// boundary, and returns the length of all of `s`. `buf` may be NULL only when `len` is 0.
pub(crate) fn copy_str(s: &str, buf: *mut c_char, len: usize) -> usize {
    let mut n = s.len().min(len.saturating_sub(1));
    while !s.is_char_boundary(n) {
        n -= 1;
    }
    copy_prefix(&s.as_bytes()[..n], buf, len);
    s.len()
}

/// Copies `b` into `buf` (`len` bytes) as a NUL-terminated string, cut to `len - 1` bytes,
/// and returns the length of all of `b`. `buf` may be NULL only when `len` is 0.
pub(crate) fn copy_bytes(b: &[u8], buf: *mut c_char, len: usize) -> usize {
    copy_prefix(&b[..b.len().min(len.saturating_sub(1))], buf, len);
    b.len()
}

/// Writes `prefix` (shorter than `len`) and a NUL to `buf`, unless `len` is 0.
fn copy_prefix(prefix: &[u8], buf: *mut c_char, len: usize) {
    if len > 0 {
        // SAFETY: the caller guarantees `buf` has room for `len` bytes, and prefix.len() < len.
        unsafe {
            std::ptr::copy_nonoverlapping(prefix.as_ptr().cast::<c_char>(), buf, prefix.len());
            buf.add(prefix.len()).write(0);
        }
    }
}

/// A failed call: the code to return and the message `redmutex_last_error_message` shows.
pub(crate) struct Failure {
    code: redmutex_result,
    message: String,
}

impl Failure {
    pub(crate) fn new(code: redmutex_result, message: impl Into<String>) -> Failure {
        Failure {
            code,
            message: message.into(),
        }
    }

    pub(crate) fn null(param: &str) -> Failure {
        Failure::new(
            redmutex_result::NullParameter,
            format!("null parameter: `{param}` is NULL"),
        )
    }

    pub(crate) fn invalid(message: impl Into<String>) -> Failure {
        Failure::new(
            redmutex_result::InvalidArgument,
            format!("invalid argument: {}", message.into()),
        )
    }
}

impl From<Error> for Failure {
    fn from(e: Error) -> Failure {
        Failure::new(code_of(e.kind()), e.to_string())
    }
}

impl From<TryLockError> for Failure {
    fn from(e: TryLockError) -> Failure {
        Failure::from(Error::from(e))
    }
}

/// The C code of a core error kind; kinds added to the core after this version map to
/// `Other` until they get their own code.
fn code_of(kind: ErrorKind) -> redmutex_result {
    match kind {
        ErrorKind::WouldBlock => redmutex_result::WouldBlock,
        ErrorKind::NoQuorum => redmutex_result::NoQuorum,
        ErrorKind::Lost => redmutex_result::Lost,
        ErrorKind::NotHeld => redmutex_result::NotHeld,
        ErrorKind::Connection => redmutex_result::Connection,
        ErrorKind::Auth => redmutex_result::Auth,
        ErrorKind::Server => redmutex_result::Server,
        ErrorKind::InvalidArgument => redmutex_result::InvalidArgument,
        ErrorKind::Interrupted => redmutex_result::Interrupted,
        _ => redmutex_result::Other,
    }
}

/// Runs the body of an export that returns a result: a panic becomes `Panic`, a failure
/// becomes its code, and either one sets the thread's last error message.
pub(crate) fn boundary(body: impl FnOnce() -> Result<(), Failure>) -> redmutex_result {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => redmutex_result::Ok,
        Ok(Err(failure)) => {
            set_last_error(failure.message);
            failure.code
        }
        Err(payload) => {
            set_last_error(panic_message(payload.as_ref()));
            redmutex_result::Panic
        }
    }
}

/// Runs the body of an export that returns a plain value: a panic returns `fallback`.
pub(crate) fn boundary_value<T>(fallback: T, body: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(value) => value,
        Err(payload) => {
            set_last_error(panic_message(payload.as_ref()));
            fallback
        }
    }
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    let detail = payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("no message");
    format!("panic: an internal error was stopped at the C API boundary ({detail})")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_has_its_own_name() {
        for value in [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 100, 101, 102, 103] {
            let name = redmutex_result::name(value).to_str().unwrap();
            assert!(name.starts_with("REDMUTEX_RESULT_"), "{name}");
            assert_ne!(name, "REDMUTEX_RESULT_UNKNOWN", "{value}");
        }
        for value in [10, 99, 104, u32::MAX] {
            assert_eq!(
                redmutex_result::name(value),
                c"REDMUTEX_RESULT_UNKNOWN",
                "{value}"
            );
        }
    }

    #[test]
    fn the_header_lists_every_result() {
        // The header's `X(NAME, value)` rows, in order, must be this crate's list.
        let header = include_str!("../../include/redmutex.h");
        let start = header
            .find("#define REDMUTEX_RESULTS(X)")
            .expect("the header defines REDMUTEX_RESULTS");
        let end = start + header[start..].find("\n\n").unwrap();
        let rows: Vec<(String, u32)> = header[start..end]
            .lines()
            .skip(1)
            .map(|line| {
                let row = line.trim().strip_prefix("X(").expect(line);
                let (name, rest) = row.split_once(", ").expect(line);
                let value = rest.split_once(')').expect(line).0;
                (
                    format!("REDMUTEX_RESULT_{name}"),
                    value.parse().expect(line),
                )
            })
            .collect();
        let ours: Vec<(String, u32)> = redmutex_result::ALL
            .iter()
            .map(|(r, name)| (name.to_str().unwrap().to_owned(), *r as u32))
            .collect();
        assert_eq!(rows, ours);
    }

    #[test]
    fn a_panic_becomes_a_code_and_a_message() {
        let r = boundary(|| panic!("boom"));
        assert_eq!(r, redmutex_result::Panic);
        LAST_ERROR.with(|m| assert!(m.borrow().contains("boom"), "{}", m.borrow()));
        assert_eq!(boundary_value(7u64, || panic!("boom")), 7);
    }

    #[test]
    fn copy_str_cuts_at_a_character_boundary() {
        let mut buf = [1 as c_char; 4];
        // "aé" is 3 bytes: 'a' and a 2-byte 'é'; with room for 2 bytes only 'a' fits.
        assert_eq!(copy_str("aéz", buf.as_mut_ptr(), 3), 4);
        assert_eq!(buf[..2], [b'a' as c_char, 0]);
        assert_eq!(copy_str("xyz", buf.as_mut_ptr(), 0), 3);
        // Bytes are cut anywhere, and a NUL inside them is copied as it is.
        assert_eq!(copy_bytes(b"a\0\xffz", buf.as_mut_ptr(), 4), 4);
        assert_eq!(buf, [b'a' as c_char, 0, 0xff_u8 as c_char, 0]);
    }
}
