//! A TLS-only Redis Cluster and Sentinel group for the tests of the other languages (C,
//! Python), which cannot start them as easily as the Rust harness does.
//!
//! Prints `NAME=VALUE` lines (`REDMUTEX_TEST_TLS_CLUSTER_URL`, `REDMUTEX_TEST_TLS_SENTINEL_URL`,
//! `REDMUTEX_TEST_TLS_TOPOLOGY_CA`, `REDMUTEX_TEST_TLS_TOPOLOGY_OTHER_CA`: the CA that signed
//! the servers' certificates and one that signed nothing), then `READY`, and keeps everything
//! running until its standard input closes; then stops the servers by pid. Without TLS in
//! redis-server it prints a `SKIPPED:` line and `READY` only. The servers die with it, should
//! it be killed.

use std::io::{Read, Write};

use redmutex_tests::tls::Pki;
use redmutex_tests::tls_topology::{TlsCluster, TlsSentinel};

fn main() {
    let pki = Pki::generate();
    let topologies = TlsCluster::start(&pki).zip(TlsSentinel::start(&pki));
    let mut out = std::io::stdout().lock();
    match &topologies {
        Some((cluster, group)) => {
            let path = |f: &str| pki.path(f).display().to_string();
            writeln!(out, "REDMUTEX_TEST_TLS_CLUSTER_URL={}", cluster.url()).unwrap();
            writeln!(out, "REDMUTEX_TEST_TLS_SENTINEL_URL={}", group.url()).unwrap();
            writeln!(out, "REDMUTEX_TEST_TLS_TOPOLOGY_CA={}", path("ca.crt")).unwrap();
            writeln!(
                out,
                "REDMUTEX_TEST_TLS_TOPOLOGY_OTHER_CA={}",
                path("other-ca.crt")
            )
            .unwrap();
        }
        None => writeln!(out, "SKIPPED: redis-server was built without TLS").unwrap(),
    }
    writeln!(out, "READY").unwrap();
    out.flush().unwrap();
    drop(out);
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
    drop(topologies);
}
