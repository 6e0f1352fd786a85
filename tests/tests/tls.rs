//! TLS: `rediss://` against a redis-server that speaks only TLS, with a CA and a
//! server certificate made by `openssl` for the test. Certificates are checked unless the URL
//! says `#insecure`; a wrong CA fails with a clear error.
//!
//! If the `redis-server` on this machine was built without TLS, every test here prints a
//! "SKIPPED" note and returns; set `REDMUTEX_REQUIRE_TLS=1` to make that a failure instead.

use std::time::{Duration, Instant};

use redmutex::{Client, ErrorKind, TryLockError};
use redmutex_tests::tls::{Pki, TlsServer, setup};
use redmutex_tests::{FaultProxy, Mode, three_cycles_each_under};

#[test]
fn lock_and_unlock_over_tls_with_the_right_ca() {
    let Some((pki, server)) = setup() else { return };
    let client = client_of(&pki, &server);
    let mutex = client.mutex("tls:lock").ttl(Duration::from_secs(2));
    let guard = mutex.lock().unwrap();
    let first = guard.fence();
    assert!(first > 0);
    assert!(matches!(mutex.try_lock(), Err(TryLockError::WouldBlock)));
    guard.extend(Duration::from_secs(3)).unwrap();
    guard.unlock().unwrap();
    assert!(!mutex.is_locked().unwrap());
    assert!(mutex.lock().unwrap().fence() > first);

    // The same CA also works by host name (the certificate names both).
    let by_name = Client::builder()
        .node(format!("rediss://localhost:{}", server.port()))
        .tls_ca_cert(pki.pem("ca.crt"))
        .build()
        .unwrap();
    assert!(by_name.mutex("tls:lock").is_locked().is_ok());
}

fn assert_certificate_error(err: &redmutex::Error) {
    assert_eq!(err.kind(), ErrorKind::Connection, "{err}");
    let text = err.to_string().to_lowercase();
    assert!(
        text.contains("certificate verification failed") && text.contains("rediss://127.0.0.1"),
        "the error should say it is about the certificate: {err}"
    );
}

#[test]
fn a_wrong_ca_fails_with_a_clear_certificate_error() {
    let Some((pki, server)) = setup() else { return };
    let client = Client::builder()
        .node(server.url())
        .tls_ca_cert(pki.pem("other-ca.crt"))
        .connect_timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let started = Instant::now();
    let err = match client.mutex("tls:lock").try_lock() {
        Err(TryLockError::Error(e)) => e,
        other => panic!("a wrong CA must fail, got {other:?}"),
    };
    assert_certificate_error(&err);
    assert!(started.elapsed() < Duration::from_secs(5));
    // Waiting cannot fix a certificate: `lock` reports it at once too, without riding over it
    // for the 10 s connect timeout like an outage.
    let started = Instant::now();
    assert_certificate_error(&client.mutex("tls:lock").lock().unwrap_err());
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[test]
fn certificates_are_checked_by_default_and_insecure_must_be_asked_for() {
    let Some((_pki, server)) = setup() else {
        return;
    };
    // No CA given: the system's roots do not know the test CA.
    let checked = Client::builder()
        .node(server.url())
        .connect_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    match checked.mutex("tls:lock").try_lock() {
        Err(TryLockError::Error(e)) => assert_certificate_error(&e),
        other => panic!("an unknown CA must be refused by default, got {other:?}"),
    }

    let insecure = Client::open(&format!("{}/#insecure", server.url())).unwrap();
    let guard = insecure.mutex("tls:lock").try_lock().unwrap();
    assert!(guard.fence() > 0);
    guard.unlock().unwrap();
}

#[test]
fn a_ca_that_is_no_certificate_or_a_plain_url_is_an_invalid_argument() {
    // No server needed: these are refused before any I/O.
    let pki = Pki::generate();
    for pem in [
        b"".to_vec(),
        b"not a certificate".to_vec(),
        pki.pem("ca.key"),
        b"-----BEGIN CERTIFICATE-----\n%%%%\n-----END CERTIFICATE-----\n".to_vec(),
    ] {
        let err = Client::builder()
            .node("rediss://127.0.0.1:1")
            .tls_ca_cert(pem.clone())
            .build()
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
    }
    let err = Client::builder()
        .node("redis://127.0.0.1:1")
        .tls_ca_cert(pki.pem("ca.crt"))
        .build()
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
    assert!(err.to_string().contains("rediss://"), "{err}");
}

/// Five TLS servers, each behind a proxy that passes its bytes through, and a client of all
/// five with the test CA.
fn five_tls_behind_proxies(pki: &Pki) -> Option<(Vec<TlsServer>, Vec<FaultProxy>, Client)> {
    let servers = (0..5)
        .map(|_| TlsServer::start(pki))
        .collect::<Option<Vec<_>>>()?;
    let proxies: Vec<_> = servers
        .iter()
        .map(|s| FaultProxy::start_opaque(&format!("127.0.0.1:{}", s.port())))
        .collect();
    let client = Client::builder()
        .nodes(proxies.iter().map(|p| format!("rediss://{}", p.addr())))
        .tls_ca_cert(pki.pem("ca.crt"))
        .node_timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    Some((servers, proxies, client))
}

/// A round over `rediss://` servers ends with its quorum's first replies, not with the first
/// nodes in its list: its TLS connections are waited on together, as plain ones are. With the
/// first two of five nodes answering 600 ms late (behind proxies that pass the TLS bytes
/// through and delay the replies), not even the first `try_lock` and `unlock` after that wait
/// for them.
#[test]
fn a_tls_round_ends_with_its_first_replies_not_its_first_nodes() {
    const SLOW: Duration = Duration::from_millis(600);
    let pki = Pki::generate();
    let Some((_servers, proxies, client)) = five_tls_behind_proxies(&pki) else {
        return;
    };
    let mutex = client
        .mutex("tls:first-replies")
        .ttl(Duration::from_secs(10));
    mutex.try_lock().unwrap().unlock().unwrap(); // pooled connections everywhere
    proxies[..2]
        .iter()
        .for_each(|p| p.set_mode(Mode::Delay(SLOW)));
    three_cycles_each_under(&mutex, SLOW / 2);
}

/// A client of `server` alone, checked against the test CA.
fn client_of(pki: &Pki, server: &TlsServer) -> Client {
    Client::builder()
        .node(server.url())
        .tls_ca_cert(pki.pem("ca.crt"))
        .build()
        .unwrap()
}

/// A redis-rs connection straight to `server`, checked against the test CA.
fn direct_conn(pki: &Pki, server: &TlsServer) -> redis::Connection {
    let certs = redis::TlsCertificates {
        client_tls: None,
        root_cert: Some(pki.pem("ca.crt")),
    };
    redis::Client::build_with_tls(server.url(), certs)
        .unwrap()
        .get_connection()
        .unwrap()
}

/// A reply that comes after its read gave up is dropped when it comes, over TLS as over plain
/// TCP, so that it is never taken for a later request's. Redis ends a block on its 100 ms
/// tick, so a short wait is often still blocked at its deadline: it is then ended from another
/// connection (`CLIENT UNBLOCK`) and its connection kept, to read the block's late reply
/// first and the attempt written behind it after. Ten short waits for a lock held elsewhere,
/// then each call answers with its own reply.
#[test]
fn a_late_tls_reply_is_never_taken_for_a_later_requests() {
    let Some((pki, server)) = setup() else { return };
    let client = client_of(&pki, &server);
    let mut direct = direct_conn(&pki, &server);
    let mut run = |cmd: &mut redis::Cmd| cmd.query::<redis::Value>(&mut direct).unwrap();
    run(redis::cmd("SET")
        .arg("tls:late")
        .arg("elsewhere")
        .arg("PX")
        .arg(10_000));
    let mutex = client.mutex("tls:late").ttl(Duration::from_secs(10));
    for _ in 0..10 {
        let waited = mutex.try_lock_for(Duration::from_millis(120));
        assert!(
            matches!(waited, Err(TryLockError::WouldBlock)),
            "{waited:?}"
        );
        assert!(mutex.is_locked().unwrap());
    }
    run(redis::cmd("DEL").arg("tls:late"));
    assert!(!mutex.is_locked().unwrap());
    let guard = mutex.try_lock().unwrap();
    assert!(guard.fence() > 0);
    assert!(mutex.is_locked().unwrap());
    guard.unlock().unwrap();
    assert!(!mutex.is_locked().unwrap());
}

/// A pooled TLS connection that the server closed meanwhile (`CLIENT KILL`: Redis ends the TLS
/// session, then the socket) is found closed and replaced: the next calls succeed, each with
/// its own answer.
#[test]
fn a_tls_connection_the_server_closed_is_replaced() {
    let Some((pki, server)) = setup() else { return };
    let client = client_of(&pki, &server);
    let mutex = client.mutex("tls:killed").ttl(Duration::from_secs(10));
    assert!(mutex.lock().unwrap().fence() > 0); // a pooled connection
    let mut direct = direct_conn(&pki, &server);
    // Bounded: a closed session that is not noticed would keep a read going.
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut last = 0;
        for _ in 2..5 {
            let killed: i64 = redis::cmd("CLIENT")
                .arg("KILL")
                .arg("TYPE")
                .arg("normal")
                .arg("SKIPME")
                .arg("yes")
                .query(&mut direct)
                .unwrap();
            assert!(killed >= 1, "the client's pooled connection");
            let guard = mutex.try_lock().unwrap();
            assert!(guard.fence() > last);
            last = guard.fence();
            guard.unlock().unwrap();
            assert!(!mutex.is_locked().unwrap());
        }
        done.send(()).unwrap();
    });
    finished
        .recv_timeout(Duration::from_secs(20))
        .expect("every call after a kill ended");
}
