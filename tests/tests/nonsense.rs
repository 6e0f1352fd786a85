//! A server that answers nonsense: every command gets the next of a few replies that no script
//! of the library returns for what it asked. No call may read a grant in them, and no message
//! a user reads may show Rust's debug text.

use std::time::Duration;

use redmutex::{Client, MutexOptions};
use redmutex_tests::Nonsense;

/// Rust's debug text of an `Option` or a `Result`, which a message must not show.
fn shows_debug_text(message: &str) -> bool {
    ["Ok(", "Some(", "Err("].iter().any(|d| message.contains(d))
}

/// Every way of asking for the lock, fenced or not, and with a wait, meets only nonsense:
/// none is granted, and every error is a sentence.
#[test]
fn nonsense_is_never_a_grant() {
    let server = Nonsense::start();
    let client = Client::builder()
        .nodes([server.url()])
        .node_timeout(Duration::from_millis(200))
        .connect_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let mut messages = Vec::new();
    for i in 0..40 {
        let fencing = i % 2 == 0;
        let opts = MutexOptions::default().with_fencing(fencing);
        let mutex = client.mutex(format!("nonsense:{i}")).options(opts);
        let taken = match i % 4 {
            0 | 1 => mutex.try_lock().map_err(|e| e.to_string()),
            _ => mutex
                .try_lock_for(Duration::from_millis(100))
                .map_err(|e| e.to_string()),
        };
        match taken {
            Ok(guard) => panic!(
                "call {i} (fencing {fencing}) was granted by nonsense, fence {}",
                guard.fence()
            ),
            Err(message) => messages.push(message),
        }
    }
    let mut distinct = messages.clone();
    distinct.sort();
    distinct.dedup();
    eprintln!("what a user reads:\n{}", distinct.join("\n"));
    for m in &messages {
        assert!(!shows_debug_text(m), "a message shows debug text: {m}");
    }
}
