//! Checked conversions of the raw pointers C hands us. Each one turns NULL (and bad UTF-8,
//! and an oversized length) into a `Failure` naming the parameter, so no export dereferences
//! a pointer it has not checked.

use std::ffi::{CStr, c_char};

use crate::result::{Failure, redmutex_result};

/// `&*p`, or a NULL-parameter failure.
pub(crate) fn arg<'a, T>(p: *const T, param: &str) -> Result<&'a T, Failure> {
    // SAFETY: non-NULL pointers handed to the C API must point to a live object of the
    // documented type (a handle from its `_new` function that was not freed).
    unsafe { p.as_ref() }.ok_or_else(|| Failure::null(param))
}

/// An out-pointer, checked for NULL up front and written only on success.
pub(crate) struct Out<T>(*mut T);

impl<T> Out<T> {
    pub(crate) fn new(p: *mut T, param: &str) -> Result<Out<T>, Failure> {
        if p.is_null() {
            Err(Failure::null(param))
        } else {
            Ok(Out(p))
        }
    }

    pub(crate) fn write(self, value: T) {
        // SAFETY: non-NULL (checked in `new`); the caller passes a writable location. `write`
        // does not drop the old contents, which C may have left uninitialized.
        unsafe { self.0.write(value) }
    }
}

/// Copies the first `len` of `items` (all of them when there are fewer) into the caller's
/// array `out` of `len` elements, and returns how many `items` there are. `out` may be NULL
/// only when `len` is 0; then nothing is written.
pub(crate) fn copy_items<T: Copy>(
    items: &[T],
    out: *mut T,
    len: usize,
    param: &str,
) -> Result<usize, Failure> {
    if out.is_null() && len != 0 {
        return Err(Failure::null(param));
    }
    let n = items.len().min(len);
    if n > 0 {
        // SAFETY: non-NULL (len != 0), and the caller passes room for `len >= n` elements,
        // which cannot overlap `items` (the library's own).
        unsafe { std::ptr::copy_nonoverlapping(items.as_ptr(), out, n) };
    }
    Ok(items.len())
}

/// Frees a handle made with `Box::into_raw`; NULL is a no-op.
pub(crate) fn free_box<T>(p: *mut T) {
    if !p.is_null() {
        // SAFETY: non-NULL handles come from Box::into_raw in their `_new` function, and the
        // C API documents that each is freed at most once.
        drop(unsafe { Box::from_raw(p) });
    }
}

/// A NUL-terminated UTF-8 string argument.
pub(crate) fn c_str<'a>(p: *const c_char, param: &str) -> Result<&'a str, Failure> {
    if p.is_null() {
        return Err(Failure::null(param));
    }
    // SAFETY: non-NULL, and the caller passes a NUL-terminated string.
    let s = unsafe { CStr::from_ptr(p) };
    s.to_str().map_err(|e| {
        Failure::new(
            redmutex_result::InvalidUtf8,
            format!(
                "invalid UTF-8: `{param}` is not valid UTF-8 (bad byte at offset {})",
                e.valid_up_to()
            ),
        )
    })
}

/// A byte buffer argument of `len` bytes, at most `max` (checked before it is read).
pub(crate) fn bytes<'a>(
    p: *const u8,
    len: usize,
    max: usize,
    param: &str,
) -> Result<&'a [u8], Failure> {
    if p.is_null() {
        return Err(Failure::null(param));
    }
    if len > max {
        return Err(Failure::invalid(format!(
            "`{param}` must be at most {max} bytes, got {len}"
        )));
    }
    // SAFETY: non-NULL, and the caller passes `len` readable bytes; len <= max is small.
    Ok(unsafe { std::slice::from_raw_parts(p, len) })
}
