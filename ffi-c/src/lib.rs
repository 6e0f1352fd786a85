//! C ABI for redmutex.
//!
//! Everything exported here is `redmutex_*` and is declared in the checked-in header
//! `include/redmutex.h`, which `scripts/gen-header.sh` regenerates with cbindgen.
//! The bindings stay thin: behaviour lives in the `redmutex` crate.

#![warn(missing_docs)]
// The C names (`redmutex_client`, `redmutex_result`, …) are the contract.
#![allow(non_camel_case_types)]

// cbindgen writes the header in declaration order: results, clients, their figures, locks,
// the other kinds of lock, guards, what an operator asks of the servers.
mod result;

mod client;

mod stats;

mod options;

mod lock;

mod shared;

mod guard;

mod operate;

mod take;

mod ptr;

pub use client::*;
pub use guard::*;
pub use lock::*;
pub use operate::*;
pub use options::*;
pub use result::*;
pub use shared::*;
pub use stats::*;

use std::ffi::{CStr, c_char};

/// Major version of this library, as in `Cargo.toml`.
pub const REDMUTEX_VERSION_MAJOR: u32 = 0;
/// Minor version of this library, as in `Cargo.toml`.
pub const REDMUTEX_VERSION_MINOR: u32 = 1;
/// Patch version of this library, as in `Cargo.toml`.
pub const REDMUTEX_VERSION_PATCH: u32 = 0;

/// Returns the library version as a NUL-terminated string, such as `"0.1.0"`.
///
/// The string is static: never free it. Safe to call from any thread at any time.
#[unsafe(no_mangle)]
pub extern "C" fn redmutex_version() -> *const c_char {
    // Private items live in this body because cbindgen warns about every non-`pub` item
    // it meets at module level.

    // cbindgen can only copy literal constants into the header, so the version numbers
    // are spelled out above; these assertions stop a version bump from leaving them stale.
    const _: () = assert!(parse_u32(env!("CARGO_PKG_VERSION_MAJOR")) == REDMUTEX_VERSION_MAJOR);
    const _: () = assert!(parse_u32(env!("CARGO_PKG_VERSION_MINOR")) == REDMUTEX_VERSION_MINOR);
    const _: () = assert!(parse_u32(env!("CARGO_PKG_VERSION_PATCH")) == REDMUTEX_VERSION_PATCH);

    const fn parse_u32(s: &str) -> u32 {
        let bytes = s.as_bytes();
        let mut value = 0u32;
        let mut i = 0;
        while i < bytes.len() {
            assert!(bytes[i].is_ascii_digit());
            value = value * 10 + (bytes[i] - b'0') as u32;
            i += 1;
        }
        value
    }

    const VERSION: &CStr =
        match CStr::from_bytes_with_nul(concat!(env!("CARGO_PKG_VERSION"), "\0").as_bytes()) {
            Ok(version) => version,
            Err(_) => panic!("CARGO_PKG_VERSION contains a NUL byte"),
        };

    VERSION.as_ptr()
}

#[cfg(test)]
mod props;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_matches_cargo() {
        // SAFETY: redmutex_version returns a pointer to a static NUL-terminated string.
        let version = unsafe { CStr::from_ptr(redmutex_version()) };
        assert_eq!(version.to_str().unwrap(), env!("CARGO_PKG_VERSION"));
    }
}
