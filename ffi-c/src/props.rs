//! Property tests of the C API's argument handling: whatever bytes and numbers a C caller
//! passes, every function answers with a result code — never a panic, never a crash — and
//! writes its out-pointer only on success.

use std::ffi::{CString, c_char};
use std::mem::{offset_of, size_of};
use std::ptr;

use proptest::prelude::*;

use crate::client::{redmutex_client, redmutex_client_free, redmutex_client_new};
use crate::guard::redmutex_unlock;
use crate::lock::redmutex_lock_bytes;
use crate::result::{redmutex_last_error_message, redmutex_result, redmutex_result_name};
use crate::shared::{redmutex_read_lock_bytes, redmutex_semaphore_acquire_bytes};
use crate::stats::{redmutex_client_connections, redmutex_client_stats, redmutex_stats};

/// A client for a loopback port nobody listens on: attempts fail at once, with "refused".
fn closed_client() -> *mut redmutex_client {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap();
    let url = CString::new(format!("redis://127.0.0.1:{port}")).unwrap();
    let urls = [url.as_ptr()];
    let mut client = ptr::null_mut();
    assert_eq!(
        redmutex_client_new(urls.as_ptr(), 1, &mut client),
        redmutex_result::Ok
    );
    client
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn client_new_answers_any_urls(urls in prop::collection::vec(prop::collection::vec(1u8..=255, 0..80), 0..70)) {
        let owned: Vec<CString> = urls.into_iter().map(|u| CString::new(u).unwrap()).collect();
        let ptrs: Vec<*const c_char> = owned.iter().map(|c| c.as_ptr()).collect();
        let mut client = ptr::null_mut();
        let r = redmutex_client_new(ptrs.as_ptr(), ptrs.len(), &mut client);
        prop_assert!(r != redmutex_result::Panic);
        if r == redmutex_result::Ok {
            prop_assert!(!client.is_null());
            redmutex_client_free(client);
        } else {
            prop_assert!(client.is_null(), "out-pointer written on failure");
            prop_assert!(matches!(r, redmutex_result::InvalidArgument | redmutex_result::InvalidUtf8));
        }
    }

    #[test]
    fn lock_answers_any_name_ttl_and_wait(
        name in prop::collection::vec(any::<u8>(), 0..600),
        ttl_ms in prop_oneof![0u64..20, 0u64..100_000_000, Just(u64::MAX)],
        // -1 (wait forever) would ride out the refused connections for the connect timeout.
        wait_ms in prop_oneof![Just(0i64), -3i64..=-2, Just(i64::MIN)],
    ) {
        let client = closed_client();
        let mut guard = ptr::null_mut();
        let r = redmutex_lock_bytes(client, name.as_ptr(), name.len(), ttl_ms, wait_ms, &mut guard);
        let valid = !name.is_empty() && name.len() <= 512 && (10..=86_400_000).contains(&ttl_ms)
            && wait_ms >= -1;
        if valid && wait_ms == 0 {
            prop_assert_eq!(r, redmutex_result::Connection);
        } else if !valid {
            prop_assert_eq!(r, redmutex_result::InvalidArgument);
        }
        if r == redmutex_result::Ok {
            redmutex_unlock(guard);
        } else {
            prop_assert!(guard.is_null(), "out-pointer written on failure");
        }
        redmutex_client_free(client);
    }

    #[test]
    fn semaphore_and_read_lock_answer_any_name_and_count(
        name in prop::collection::vec(any::<u8>(), 0..600),
        permits in prop_oneof![0u32..4, 1020u32..1030, Just(u32::MAX)],
        read in any::<bool>(),
    ) {
        let client = closed_client();
        let mut guard = ptr::null_mut();
        let r = if read {
            redmutex_read_lock_bytes(client, name.as_ptr(), name.len(), 30_000, 0, &mut guard)
        } else {
            redmutex_semaphore_acquire_bytes(
                client, name.as_ptr(), name.len(), permits, 30_000, 0, &mut guard,
            )
        };
        let valid = !name.is_empty() && name.len() <= 512
            && (read || (1..=1024).contains(&permits));
        if valid {
            prop_assert_eq!(r, redmutex_result::Connection);
        } else {
            prop_assert_eq!(r, redmutex_result::InvalidArgument);
        }
        prop_assert!(guard.is_null(), "out-pointer written on failure");
        redmutex_client_free(client);
    }

    #[test]
    fn stats_fill_no_more_than_the_callers_size(size in prop_oneof![0usize..64, 0usize..2048]) {
        let client = closed_client();
        // An older (shorter) or newer (longer) program's struct, in a buffer with room to spare.
        let mut buf = vec![u64::MAX; 2048 / 8 + 8];
        // SAFETY: the buffer is 8-aligned and longer than a usize.
        unsafe { buf.as_mut_ptr().cast::<usize>().write(size) };
        let r = redmutex_client_stats(client, buf.as_mut_ptr().cast());
        let least = offset_of!(redmutex_stats, acquired) + size_of::<u64>();
        let filled = if size < least {
            prop_assert_eq!(r, redmutex_result::InvalidArgument);
            size_of::<usize>()
        } else {
            prop_assert_eq!(r, redmutex_result::Ok);
            size.min(size_of::<redmutex_stats>())
        };
        // SAFETY: reads the buffer's own bytes.
        let bytes = unsafe {
            std::slice::from_raw_parts(buf.as_ptr().cast::<u8>(), buf.len() * size_of::<u64>())
        };
        // SAFETY: as above.
        let size_out = unsafe { buf.as_ptr().cast::<usize>().read() };
        prop_assert_eq!(size_out, if size < least { size } else { filled });
        prop_assert!(bytes[filled..].iter().all(|&b| b == 0xFF),
            "written past the caller's size");
        redmutex_client_free(client);
    }

    #[test]
    fn connections_fill_no_more_than_len(len in 0usize..8, null_out in any::<bool>()) {
        let client = closed_client();
        let mut counts = [u64::MAX; 8];
        let mut n = usize::MAX;
        let out = if null_out { ptr::null_mut() } else { counts.as_mut_ptr() };
        let r = redmutex_client_connections(client, out, len, &mut n);
        if null_out && len != 0 {
            prop_assert_eq!(r, redmutex_result::NullParameter);
            prop_assert_eq!(n, usize::MAX, "out-pointer written on failure");
        } else {
            prop_assert_eq!(r, redmutex_result::Ok);
            // One node, never connected to: no I/O before the first lock call.
            prop_assert_eq!(n, 1);
            prop_assert_eq!(counts[0], if null_out || len == 0 { u64::MAX } else { 0 });
        }
        prop_assert!(counts[1..].iter().all(|&c| c == u64::MAX), "written past the first node");
        redmutex_client_free(client);
    }

    #[test]
    fn result_names_and_messages_take_any_value(code in any::<u32>(), len in 0usize..64) {
        prop_assert!(!redmutex_result_name(code).is_null());
        let mut buf = vec![0 as c_char; len];
        let mut n = 0usize;
        let target = if len == 0 { ptr::null_mut() } else { buf.as_mut_ptr() };
        prop_assert_eq!(redmutex_last_error_message(target, len, &mut n), redmutex_result::Ok);
    }
}
