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

/// A redis-rs type or error-kind name, which a message must not show either: a reply reads as
/// the server sent it (`ERR nonsense`, `{"a": 1}`, `12345678901234567890`).
fn shows_rust_names(message: &str) -> bool {
    [
        "big-number(",
        "map(",
        "double(",
        "verbatim",
        "ResponseError",
        "BusyLoading",
        "NoPerm",
        "NoScript",
        "ReadOnly",
        "(\"",
        "Extension",
    ]
    .iter()
    .any(|d| message.contains(d))
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

/// The reply parser fuzzed through every call: servers that answer each command with a random
/// RESP value (any type, nested, seeded and so replayable) meet every kind of lock call. Each
/// call ends within its bound, and every message a user reads is a sentence without Rust's
/// debug text. (A random reply can happen to have a grant's shape, so grants are not counted
/// as failures here; `nonsense_is_never_a_grant` holds the shapes that must not grant.)
#[test]
fn random_replies_are_reported_in_sentences() {
    let mut messages = Vec::new();
    let mut calls = 0;
    for seed in 1..=12u64 {
        let server = Nonsense::random(seed);
        let client = Client::builder()
            .nodes([server.url()])
            .node_timeout(Duration::from_millis(100))
            .connect_timeout(Duration::from_millis(200))
            .build()
            .unwrap();
        let mut note = |r: Result<(), String>| {
            calls += 1;
            if let Err(m) = r {
                messages.push(format!("seed {seed}: {m}"));
            }
        };
        for i in 0..12 {
            let fencing = i % 2 == 0;
            let mutex = client
                .mutex(format!("random:{i}"))
                .options(MutexOptions::default().with_fencing(fencing));
            let taken = match i % 3 {
                0 => mutex.try_lock(),
                _ => mutex.try_lock_for(Duration::from_millis(50)),
            };
            match taken {
                Ok(guard) => {
                    note(
                        guard
                            .extend(Duration::from_secs(5))
                            .map_err(|e| e.to_string()),
                    );
                    note(guard.unlock().map(drop).map_err(|e| e.to_string()));
                }
                Err(e) => note(Err(e.to_string())),
            }
            note(mutex.status().map(drop).map_err(|e| e.to_string()));
            let sem = client.semaphore(format!("random-sem:{i}"), 2);
            note(sem.try_acquire().map(drop).map_err(|e| e.to_string()));
            let rw = client.rwlock(format!("random-rw:{i}"));
            note(rw.try_read().map(drop).map_err(|e| e.to_string()));
            note(rw.status().map(drop).map_err(|e| e.to_string()));
        }
    }
    let mut distinct: Vec<&String> = messages.iter().collect();
    distinct.sort_by_key(|m| m.split_once(": ").map_or(m.as_str(), |(_, rest)| rest));
    distinct.dedup_by_key(|m| m.split_once(": ").map_or(m.clone(), |(_, r)| r.to_owned()));
    eprintln!("{calls} calls; {} distinct messages:", distinct.len());
    for m in &distinct {
        eprintln!("  {m}");
    }
    assert!(
        messages.len() > calls / 2,
        "random replies should mostly fail"
    );
    for m in &messages {
        assert!(!shows_debug_text(m), "a message shows debug text: {m}");
        assert!(
            !shows_rust_names(m),
            "a message shows redis-rs's names: {m}"
        );
    }
}
