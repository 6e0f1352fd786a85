//! TLS to every topology: a TLS-only Redis Cluster of three masters (`rediss+cluster://`, or
//! `rediss://` seeds) and a TLS-only Sentinel group (`rediss+sentinel://`, or `rediss://`
//! sentinels), with the client's CA, and a wrong CA reported as a certificate error at once.
//!
//! Skipped with a note when redis-server was built without TLS (`REDMUTEX_REQUIRE_TLS=1`
//! makes that a failure).

use std::time::{Duration, Instant};

use redmutex::{Client, ErrorKind, SentinelMaster, TryLockError};
use redmutex_tests::cluster::key_slot;
use redmutex_tests::tls::Pki;
use redmutex_tests::tls_topology::{MASTER_NAME, TlsCluster, TlsSentinel};
use redmutex_tests::wait_until;

/// One name per master of a three-master cluster whose slots are split evenly.
fn a_name_on_each_master() -> Vec<String> {
    (0..3u32)
        .map(|m| {
            (0..)
                .map(|i| format!("tls-cluster:{m}:{i}"))
                .find(|k| u32::from(key_slot(k.as_bytes())) * 3 / 16384 == m)
                .unwrap()
        })
        .collect()
}

/// Takes, checks and releases a lock on `name`; another client is refused meanwhile. The
/// wait covers a first TLS handshake with a master that the round's per-node timeout cuts
/// short (it is finished in the background).
fn lock_round_trip(client: &Client, other: &Client, name: &str) {
    // The other client's first connection there (a slow handshake in a debug build, finished
    // in the background when a round cuts it short) is not what is being tested.
    assert!(
        wait_until(Duration::from_secs(10), || other
            .mutex(name)
            .status()
            .is_ok()),
        "{name}: the other client cannot reach its master"
    );
    let guard = client
        .mutex(name)
        .ttl(Duration::from_secs(5))
        .try_lock_for(Duration::from_secs(10))
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    assert!(guard.fence() >= 1);
    guard.check().unwrap();
    assert!(matches!(
        other.mutex(name).try_lock_for(Duration::from_millis(300)),
        Err(TryLockError::WouldBlock)
    ));
    guard.extend(Duration::from_secs(6)).unwrap();
    guard.unlock().unwrap();
    assert!(!client.mutex(name).is_locked().unwrap());
}

/// A wrong CA: `try_lock` and `lock` both fail with a certificate error, at once rather than
/// after riding over the 20 s connect timeout like an outage.
fn assert_refused_at_once(client: &Client, shown: &str) {
    for blocking in [false, true] {
        let started = Instant::now();
        let mutex = client.mutex("tls:wrong-ca");
        let err = if blocking {
            mutex.lock().unwrap_err()
        } else {
            match mutex.try_lock() {
                Err(TryLockError::Error(e)) => e,
                other => panic!("a wrong CA must fail, got {other:?}"),
            }
        };
        assert_eq!(err.kind(), ErrorKind::Connection, "{err}");
        let text = err.to_string();
        assert!(
            text.contains("certificate verification failed") && text.contains(shown),
            "the error should say it is about the certificate of {shown}: {err}"
        );
        assert!(started.elapsed() < Duration::from_secs(10), "{err}");
    }
}

#[test]
fn a_tls_cluster_locks_on_every_master_with_the_clients_ca() {
    let pki = Pki::generate();
    let Some(cluster) = TlsCluster::start(&pki) else {
        return;
    };
    let by_url = Client::builder()
        .node(cluster.url())
        .tls_ca_cert(pki.pem("ca.crt"))
        .build()
        .unwrap();
    let by_seeds = Client::builder()
        .cluster(cluster.seed_urls())
        .tls_ca_cert(pki.pem("ca.crt"))
        .build()
        .unwrap();
    assert_eq!(by_url.node_names()[0], cluster.url());
    for name in a_name_on_each_master() {
        lock_round_trip(&by_url, &by_seeds, &name);
        lock_round_trip(&by_seeds, &by_url, &name);
    }
    // An explicit #insecure skips the checks, as for one server.
    let insecure = Client::open(&format!("{}#insecure", cluster.url())).unwrap();
    let guard = insecure
        .mutex("tls-cluster:insecure")
        .try_lock_for(Duration::from_secs(10))
        .unwrap();
    guard.unlock().unwrap();
}

#[test]
fn a_tls_cluster_with_a_wrong_ca_is_a_certificate_error_at_once() {
    let pki = Pki::generate();
    let Some(cluster) = TlsCluster::start(&pki) else {
        return;
    };
    let client = Client::builder()
        .node(cluster.url())
        .tls_ca_cert(pki.pem("other-ca.crt"))
        .connect_timeout(Duration::from_secs(20))
        .build()
        .unwrap();
    assert_refused_at_once(&client, "rediss+cluster://127.0.0.1");
}

#[test]
fn a_tls_sentinel_group_locks_with_the_clients_ca_and_refuses_a_wrong_one() {
    let pki = Pki::generate();
    let Some(group) = TlsSentinel::start(&pki) else {
        return;
    };
    let by_url = Client::builder()
        .node(group.url())
        .tls_ca_cert(pki.pem("ca.crt"))
        .build()
        .unwrap();
    let by_parts = Client::builder()
        .sentinel([group.sentinel_url()], SentinelMaster::new(MASTER_NAME))
        .tls_ca_cert(pki.pem("ca.crt"))
        .build()
        .unwrap();
    assert_eq!(by_url.node_names()[0], group.url());
    lock_round_trip(&by_url, &by_parts, "tls-sentinel:lock");
    lock_round_trip(&by_parts, &by_url, "tls-sentinel:lock");

    let wrong = Client::builder()
        .node(group.url())
        .tls_ca_cert(pki.pem("other-ca.crt"))
        .connect_timeout(Duration::from_secs(20))
        .build()
        .unwrap();
    assert_refused_at_once(&wrong, "rediss+sentinel://127.0.0.1");
}

#[test]
fn a_ca_goes_with_tls_urls_only() {
    let pki = Pki::generate();
    for url in [
        "redis+cluster://127.0.0.1:1",
        "redis+sentinel://127.0.0.1:1/mymaster",
    ] {
        let err = Client::builder()
            .node(url)
            .tls_ca_cert(pki.pem("ca.crt"))
            .build()
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
        assert!(err.to_string().contains("rediss"), "{err}");
    }
    let err = Client::builder()
        .cluster(["redis://127.0.0.1:1", "rediss://127.0.0.1:2"])
        .build()
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
}
