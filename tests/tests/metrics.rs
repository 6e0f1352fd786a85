//! The `metrics` feature: the client's figures reach the `metrics` facade under their
//! documented names and labels, with no lock name in any label. Run with
//! `cargo test -p redmutex-tests --features metrics --test metrics`.

use std::collections::BTreeMap;
use std::time::Duration;

use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use redmutex::{Client, MutexOptions, TryLockError};
use redmutex_tests::RedisServer;

/// Every metric recorded so far: (name, its labels sorted) → value.
fn recorded(
    snapshotter: &metrics_util::debugging::Snapshotter,
) -> BTreeMap<(String, Vec<(String, String)>), DebugValue> {
    snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, _, _, value)| {
            let key = key.key();
            let mut labels: Vec<(String, String)> = key
                .labels()
                .map(|l| (l.key().to_owned(), l.value().to_owned()))
                .collect();
            labels.sort();
            ((key.name().to_owned(), labels), value)
        })
        .collect()
}

fn labels(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    v.sort();
    v
}

#[test]
fn figures_reach_the_facade_under_their_names_without_lock_names() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder.install().unwrap();

    let server = RedisServer::start();
    let client = Client::open(&server.url()).unwrap();
    let mutex = client.mutex("metrics:lock-name-0001");
    let guard = mutex.try_lock().unwrap();
    assert!(matches!(mutex.try_lock(), Err(TryLockError::WouldBlock)));
    assert!(matches!(
        mutex.try_lock_for(Duration::from_millis(50)),
        Err(TryLockError::WouldBlock)
    ));
    guard.unlock().unwrap();
    client
        .semaphore("metrics:lock-name-0002", 2)
        .try_acquire()
        .unwrap()
        .unlock()
        .unwrap();
    // Renewed every 100 ms, then deleted behind its back: lost, gone.
    let short = MutexOptions::default().with_ttl(Duration::from_millis(300));
    let lost = client
        .mutex("metrics:lock-name-0003")
        .options(short)
        .lock()
        .unwrap();
    redmutex_tests::wait_until(Duration::from_secs(5), || lost.renewals() >= 1);
    let () = redis::cmd("DEL")
        .arg("metrics:lock-name-0003")
        .query(&mut server.conn())
        .unwrap();
    assert!(lost.wait_lost(Duration::from_secs(10)));

    let got = recorded(&snapshotter);
    let counter = |name: &str, l: &[(&str, &str)]| match got.get(&(name.to_owned(), labels(l))) {
        Some(DebugValue::Counter(n)) => *n,
        other => panic!("{name} {l:?}: {other:?}\nall: {:#?}", got.keys()),
    };
    let acquisitions = "redmutex_acquisitions_total";
    assert_eq!(
        counter(acquisitions, &[("kind", "mutex"), ("outcome", "acquired")]),
        2
    );
    assert_eq!(
        counter(acquisitions, &[("kind", "mutex"), ("outcome", "refused")]),
        1
    );
    assert_eq!(
        counter(acquisitions, &[("kind", "mutex"), ("outcome", "timed_out")]),
        1
    );
    assert_eq!(
        counter(
            acquisitions,
            &[("kind", "semaphore"), ("outcome", "acquired")]
        ),
        1
    );
    assert_eq!(counter("redmutex_lost_total", &[("reason", "gone")]), 1);
    assert!(counter("redmutex_renewals_total", &[("result", "confirmed")]) >= 1);

    let gauge = |name: &str| match got.get(&(name.to_owned(), Vec::new())) {
        Some(DebugValue::Gauge(v)) => v.into_inner(),
        other => panic!("{name}: {other:?}"),
    };
    assert_eq!(gauge("redmutex_held"), 0.0);
    assert_eq!(gauge("redmutex_waiting"), 0.0);
    let histogram = |name: &str| match got.get(&(name.to_owned(), Vec::new())) {
        Some(DebugValue::Histogram(v)) => v.len(),
        other => panic!("{name}: {other:?}"),
    };
    assert_eq!(histogram("redmutex_acquire_wait_seconds"), 3);
    assert_eq!(histogram("redmutex_held_seconds"), 3);
    assert!(histogram("redmutex_renewal_lag_seconds") >= 1);
    assert!(!got.contains_key(&("redmutex_handoffs_total".to_owned(), Vec::new())));

    // Labelled by the name's first part, when asked: one more client, its own series.
    let prefixed = Client::builder()
        .node(server.url())
        .metrics_prefix_label(b':')
        .build()
        .unwrap();
    prefixed
        .mutex("billing:2026-12-06")
        .try_lock()
        .unwrap()
        .unlock()
        .unwrap();
    prefixed
        .mutex("nocolon")
        .try_lock()
        .unwrap()
        .unlock()
        .unwrap();
    let got = recorded(&snapshotter);
    let counter = |name: &str, l: &[(&str, &str)]| match got.get(&(name.to_owned(), labels(l))) {
        Some(DebugValue::Counter(n)) => *n,
        other => panic!("{name} {l:?}: {other:?}\nall: {:#?}", got.keys()),
    };
    for prefix in ["billing", "nocolon"] {
        assert_eq!(
            counter(
                acquisitions,
                &[
                    ("kind", "mutex"),
                    ("outcome", "acquired"),
                    ("prefix", prefix)
                ]
            ),
            1
        );
    }

    for (name, labels) in got.keys() {
        assert!(name.starts_with("redmutex_"), "{name}");
        for (k, v) in labels {
            assert!(!v.contains("lock-name") && k != "name", "{name}: {k}={v}");
            assert!(!v.contains("2026"), "only the prefix: {name}: {k}={v}");
        }
    }
}
