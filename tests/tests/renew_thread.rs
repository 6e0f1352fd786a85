//! One renew thread per client, however many locks it keeps (its own test binary, so that no
//! other test's client adds threads to the count).

use std::time::Duration;

use redmutex::Client;
use redmutex_tests::RedisServer;

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
    std::thread::sleep(Duration::from_millis(400));
    assert!(guards.iter().all(|g| g.is_held()));
    let renewers = std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.unwrap().path().join("comm")).ok())
        .filter(|c| c.trim() == "redmutex-renew")
        .count();
    assert_eq!(renewers, 1);
}
