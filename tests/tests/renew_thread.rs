//! One renew thread per client, however many locks it keeps (its own test binary, so that no
//! other test's client adds threads to the count).

use std::time::Duration;

use redmutex::Client;
use redmutex_tests::{RedisServer, wait_until};

#[test]
fn one_renew_thread_per_client() {
    let server = RedisServer::start();
    let client = Client::open(&server.url()).unwrap();
    let guards: Vec<_> = (0..50)
        .map(|i| {
            client
                .mutex(format!("threads:{i}"))
                .ttl(Duration::from_millis(300))
                .lock()
                .unwrap()
        })
        .collect();
    // Every guard renewed a few times (TTL 300 ms: past its first lease).
    assert!(wait_until(Duration::from_secs(3), || guards
        .iter()
        .all(|g| g.renewals() >= 3)));
    assert!(guards.iter().all(|g| g.is_held()));
    assert_eq!(renewers(), 1);
    // A dropped client (with its guards) stops its thread.
    drop(guards);
    drop(client);
    assert!(wait_until(Duration::from_secs(2), || renewers() == 0));
}

fn renewers() -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.unwrap().path().join("comm")).ok())
        .filter(|c| c.trim() == "redmutex-renew")
        .count()
}
