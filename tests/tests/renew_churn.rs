//! Released guards leave the renew thread's queue: a process that takes many short locks does
//! not grow.

use redmutex::Client;
use redmutex_tests::RedisServer;

#[test]
fn released_guards_do_not_accumulate() {
    let server = RedisServer::start();
    let client = Client::open(&server.url()).unwrap();
    let held = client.mutex("churn:held").lock().unwrap();
    let mutex = client.mutex("churn:lock");
    for _ in 0..2000 {
        mutex.lock().unwrap().unlock().unwrap();
    }
    for _ in 0..500 {
        drop(mutex.lock().unwrap());
    }
    // The default TTL is 30 s: without purging, every cycle would still be queued here.
    assert!(
        client.renew_queue_len() < 200,
        "{} entries queued",
        client.renew_queue_len()
    );
    assert!(held.is_held());
}
