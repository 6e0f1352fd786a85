//! Property tests over URL parsing and the validation of client and lock options:
//! no input panics, a rejected input is an `InvalidArgument`, and a password given in a URL
//! never shows in the `Display` or `Debug` of an error, a client or a builder.
//!
//! Only the closed-port case does I/O (a refused loopback connection), so this runs in a few
//! seconds. `PROPTEST_CASES=10000 cargo test -p redmutex --test props` searches longer.

use std::net::TcpListener;
use std::time::Duration;

use proptest::prelude::*;
use redmutex::{Client, ErrorKind, MAX_NAME_LEN, MutexOptions, TryLockError};

/// A marker every generated password starts with; the tests look for it in all output.
const MARK: &str = "Zq";

/// A password: the marker and eight alphanumerics, sometimes followed by characters that end
/// or confuse the user-info part of a URL.
fn password() -> impl Strategy<Value = String> {
    (
        "[A-Za-z0-9]{8}",
        prop_oneof![Just(String::new()), "[%:/#?@!$&'()*+,;=.~-]{1,4}"],
    )
        .prop_map(|(core, tail)| format!("{MARK}{core}{tail}"))
}

/// The part of the password that must never be printed.
fn secret(pw: &str) -> &str {
    &pw[..MARK.len() + 8]
}

fn scheme() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("redis".to_owned()),
        Just("rediss".to_owned()),
        Just("valkey".to_owned()),
        Just("unix".to_owned()),
        Just("redis+unix".to_owned()),
        Just("http".to_owned()),
        "[a-z+]{0,6}",
    ]
}

/// URLs with a password in them, in every place redis-rs reads one, wrapped in noise.
fn url_with_password() -> impl Strategy<Value = (String, String)> {
    let host = prop_oneof![
        Just("127.0.0.1".to_owned()),
        Just("localhost".to_owned()),
        Just("[::1]".to_owned()),
        Just("[::1".to_owned()),
        Just(String::new()),
        "\\PC{0,12}",
    ];
    let port = prop_oneof![
        Just(String::new()),
        (0u32..70000).prop_map(|p| format!(":{p}")),
        "(:[^/]{0,6})",
    ];
    let tail = prop_oneof![
        Just(String::new()),
        Just("/0".to_owned()),
        Just("/#insecure".to_owned()),
        Just("/#other".to_owned()),
        "/[0-9a-z]{0,3}",
        "\\PC{0,10}",
    ];
    let userinfo = (scheme(), "[a-z]{0,5}", password(), host, port, tail).prop_map(
        |(scheme, user, pw, host, port, tail)| {
            (format!("{scheme}://{user}:{pw}@{host}{port}{tail}"), pw)
        },
    );
    let query = (
        scheme(),
        "(/[a-z]{0,8}){0,3}",
        "[a-z=&0-9]{0,10}",
        password(),
        "[a-z=&#0-9]{0,10}",
    )
        .prop_map(|(scheme, path, before, pw, after)| {
            (format!("{scheme}://{path}?{before}&pass={pw}&{after}"), pw)
        });
    prop_oneof![3 => userinfo, 1 => query]
}

/// A URL with the password it holds, if it was made with one (noise can spell the password's
/// mark by chance without being a password).
fn any_url() -> impl Strategy<Value = (String, Option<String>)> {
    prop_oneof![
        url_with_password().prop_map(|(u, pw)| (u, Some(pw))),
        "\\PC{0,40}".prop_map(|u| (u, None)),
        Just(("redis://127.0.0.1:6379".to_owned(), None)),
    ]
}

/// Durations around every bound the library checks, and far beyond them.
fn duration() -> impl Strategy<Value = Duration> {
    prop_oneof![
        Just(Duration::ZERO),
        Just(Duration::MAX),
        (0u64..5).prop_map(Duration::from_nanos),
        (0u64..2_000_000).prop_map(Duration::from_micros),
        (0u64..100_000).prop_map(Duration::from_millis),
        (0u64..(400 * 24 * 3600)).prop_map(Duration::from_secs),
        (any::<u64>(), 0u32..1_000_000_000).prop_map(|(s, n)| Duration::new(s, n)),
    ]
}

/// Mostly a duration in `lo..hi` milliseconds, sometimes any duration at all.
fn mostly_ms(lo: u64, hi: u64) -> impl Strategy<Value = Duration> {
    prop_oneof![3 => (lo..hi).prop_map(Duration::from_millis), 1 => duration()]
}

fn owner() -> impl Strategy<Value = String> {
    prop_oneof![
        "[!-~]{1,20}",
        "[!-~]{120,130}",
        "\\PC{0,20}",
        Just(String::new()),
        Just("a b".to_owned()),
    ]
}

fn assert_no_secret(texts: &[String], secrets: &[&str]) -> Result<(), TestCaseError> {
    for text in texts {
        for s in secrets {
            prop_assert!(!text.contains(s), "password {s:?} shown in {text:?}");
        }
    }
    Ok(())
}

fn in_range(d: Duration, lo: Duration, hi: Duration) -> bool {
    lo <= d && d <= hi
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn a_url_with_a_password_never_shows_it((url, pw) in url_with_password()) {
        let secret = secret(&pw);
        let builder = Client::builder().node(url.clone());
        let mut texts = vec![format!("{builder:?}")];
        match Client::open(&url) {
            Ok(client) => {
                texts.push(format!("{client:?}"));
                texts.extend(client.node_names());
            }
            Err(e) => {
                prop_assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{}", e);
                texts.push(e.to_string());
                texts.push(format!("{e:?}"));
            }
        }
        assert_no_secret(&texts, &[secret])?;
    }

    #[test]
    fn builder_settings_are_checked_without_panicking(
        urls in prop::collection::vec(any_url(), 0..5),
        many in any::<bool>(),
        owner in prop::option::of(owner()),
        connect_timeout in prop::option::of(duration()),
        node_timeout in prop::option::of(duration()),
    ) {
        let (mut urls, passwords): (Vec<String>, Vec<Option<String>>) = urls.into_iter().unzip();
        if many {
            urls = urls.iter().cycle().take(64).cloned().collect();
        }
        let mut builder = Client::builder().nodes(urls.clone());
        if let Some(o) = &owner {
            builder = builder.owner(o.clone());
        }
        if let Some(t) = connect_timeout {
            builder = builder.connect_timeout(t);
        }
        if let Some(t) = node_timeout {
            builder = builder.node_timeout(t);
        }
        let debug = format!("{builder:?}");
        let result = builder.build();

        let timeout_ok = |t: Option<Duration>| {
            t.is_none_or(|t| in_range(t, Duration::from_millis(1), Duration::from_secs(3600)))
        };
        let owner_ok = owner.as_ref().is_none_or(|o| {
            !o.is_empty() && o.len() <= 128 && o.bytes().all(|b| b.is_ascii_graphic())
        });
        let must_fail = urls.is_empty()
            || urls.len() > 63
            || !timeout_ok(connect_timeout)
            || !timeout_ok(node_timeout)
            || !owner_ok;
        let mut texts = vec![debug];
        match result {
            Ok(client) => {
                prop_assert!(!must_fail, "accepted {urls:?} {owner:?} {connect_timeout:?} {node_timeout:?}");
                prop_assert_eq!(client.node_count(), urls.len());
                prop_assert_eq!(client.quorum(), urls.len() / 2 + 1);
                texts.push(format!("{client:?}"));
            }
            Err(e) => {
                prop_assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{}", e);
                texts.push(e.to_string());
                texts.push(format!("{e:?}"));
            }
        }
        // No password a URL was made with may show.
        let secrets: Vec<&str> = passwords.iter().flatten().map(|pw| secret(pw)).collect();
        assert_no_secret(&texts, &secrets)?;
    }
}

/// A loopback port that nothing listens on: connecting is refused at once.
fn closed_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn locks_with_any_name_and_options_fail_cleanly_on_a_closed_port(
        name in prop_oneof![
            prop::collection::vec(any::<u8>(), 0..16),
            prop::collection::vec(any::<u8>(), (MAX_NAME_LEN - 2)..(MAX_NAME_LEN + 3)),
        ],
        pw in "[A-Za-z0-9]{8}".prop_map(|s| format!("{MARK}{s}")),
        ttl in mostly_ms(10, 100_000),
        max_hold in prop::option::weighted(0.3, mostly_ms(10, 100_000)),
        node_timeout in prop::option::weighted(0.3, mostly_ms(1, 10)),
        retry_delay in mostly_ms(1, 1000),
        wait_cap in mostly_ms(1, 1000),
        handoff_window in mostly_ms(0, 10),
        fencing in any::<bool>(),
        auto_renew in any::<bool>(),
        wait_ms in prop::option::of(0u64..15),
    ) {
        let url = format!("redis://user:{pw}@127.0.0.1:{}", closed_port());
        let client = Client::builder()
            .node(url)
            .connect_timeout(Duration::from_millis(20))
            .build()
            .unwrap();
        let opts = MutexOptions::default()
            .with_ttl(ttl)
            .with_max_hold(max_hold)
            .with_node_timeout(node_timeout)
            .with_retry_delay(retry_delay)
            .with_wait_cap(wait_cap)
            .with_handoff_window(handoff_window)
            .with_fencing(fencing)
            .with_auto_renew(auto_renew);
        let valid = !name.is_empty() && name.len() <= MAX_NAME_LEN && opts.validate().is_ok();
        let mutex = client.mutex(&name).options(opts);
        let result = match wait_ms {
            None => mutex.try_lock(),
            Some(ms) => mutex.try_lock_for(Duration::from_millis(ms)),
        };
        let err = match result {
            Ok(_) => return Err(TestCaseError::fail("locked on a closed port")),
            Err(TryLockError::WouldBlock) => {
                return Err(TestCaseError::fail("would block on a closed port"));
            }
            Err(e) => redmutex::Error::from(e),
        };
        let expected = if valid { ErrorKind::Connection } else { ErrorKind::InvalidArgument };
        prop_assert_eq!(err.kind(), expected, "{}", err);
        let is_locked = mutex.is_locked();
        if let Err(e) = &is_locked {
            prop_assert!(matches!(e.kind(), ErrorKind::Connection | ErrorKind::InvalidArgument), "{}", e);
        }
        assert_no_secret(
            &[
                err.to_string(),
                format!("{err:?}"),
                format!("{client:?}"),
                format!("{mutex:?}"),
                format!("{is_locked:?}"),
            ],
            &[secret(&pw)],
        )?;
    }
}
