//! The simulated Redis where the differential test cannot look: its clock, restarts and
//! blocking, which a real server only shows in real time.

use redmutex_sim::redis::{Reply, Server, sha1_hex};

fn argv(words: &[&str]) -> Vec<Vec<u8>> {
    words.iter().map(|w| w.as_bytes().to_vec()).collect()
}

fn run(s: &mut Server, words: &[&str]) -> Reply {
    s.exec(1, &argv(words)).expect("does not block")
}

fn script(name: &str) -> &'static str {
    redmutex::sim_support::scripts()
        .into_iter()
        .find(|(n, _)| *n == name)
        .map(|(_, src)| src)
        .expect("the core has this script")
}

fn acquire(s: &mut Server, token: &str, ttl: &str) -> Reply {
    let sha = sha1_hex(script("acquire").as_bytes());
    let keys = ["lock", "{lock}:fence", "{lock}:readers"];
    let mut words = vec!["EVALSHA", &sha, "3"];
    words.extend(keys);
    words.extend([token, ttl, "1"]);
    run(s, &words)
}

#[test]
fn a_key_lives_through_its_last_millisecond_and_not_after() {
    let mut s = Server::new();
    s.set_now(1_000);
    assert_eq!(run(&mut s, &["SET", "k", "v", "PX", "10"]), Reply::ok());
    s.set_now(1_010);
    assert_eq!(run(&mut s, &["PTTL", "k"]), Reply::Int(0));
    assert_eq!(run(&mut s, &["GET", "k"]), Reply::bulk("v"));
    s.set_now(1_011);
    assert_eq!(run(&mut s, &["GET", "k"]), Reply::Nil);
    // TIME reads the same clock: seconds and microseconds.
    s.set_now(1_700_000_123_456);
    let time = Reply::Array(vec![Reply::bulk("1700000123"), Reply::bulk("456000")]);
    assert_eq!(run(&mut s, &["TIME"]), time);
}

#[test]
fn the_lock_scripts_grant_once_until_the_ttl_passes_on_the_servers_clock() {
    let mut s = Server::new();
    s.set_now(5_000);
    run(&mut s, &["SCRIPT", "LOAD", script("acquire")]);
    // A fence is never below the server's time in µs.
    assert_eq!(acquire(&mut s, "a", "1000"), Reply::Int(5_000_000));
    s.set_now(5_400);
    let taken = Reply::Array(vec![Reply::Int(0), Reply::Int(600), Reply::bulk("a")]);
    assert_eq!(acquire(&mut s, "b", "1000"), taken);
    s.set_now(6_001);
    assert_eq!(acquire(&mut s, "b", "1000"), Reply::Int(6_001_000));
}

#[test]
fn a_restart_forgets_scripts_and_keeps_keys_only_with_persistence() {
    let mut s = Server::new();
    s.set_now(0);
    run(&mut s, &["SCRIPT", "LOAD", script("acquire")]);
    assert_eq!(acquire(&mut s, "a", "100"), Reply::Int(1));
    s.restart(true);
    let noscript = Reply::err("NOSCRIPT No matching script. Please use EVAL.");
    assert_eq!(acquire(&mut s, "b", "100"), noscript);
    // The expiry is an absolute time on the server's clock: it still ends at 100.
    s.set_now(100);
    assert_eq!(run(&mut s, &["GET", "lock"]), Reply::bulk("a"));
    s.set_now(101);
    assert_eq!(run(&mut s, &["GET", "lock"]), Reply::Nil);
    assert_eq!(run(&mut s, &["GET", "{lock}:fence"]), Reply::bulk("1"));
    s.restart(false);
    assert_eq!(run(&mut s, &["GET", "{lock}:fence"]), Reply::Nil);
}

#[test]
fn a_push_serves_blocked_clients_oldest_first() {
    let mut s = Server::new();
    assert_eq!(s.exec(2, &argv(&["BLPOP", "q", "0"])), None);
    assert_eq!(s.exec(3, &argv(&["BLPOP", "other", "q", "0"])), None);
    assert_eq!(run(&mut s, &["RPUSH", "q", "x", "y"]), Reply::Int(2));
    let served = s.take_served();
    let pair = |v: &str| Reply::Array(vec![Reply::bulk("q"), Reply::bulk(v)]);
    assert_eq!(served, vec![(2, pair("x")), (3, pair("y"))]);
    assert_eq!(
        run(&mut s, &["EXISTS", "q"]),
        Reply::Int(0),
        "an emptied list is deleted"
    );
}

/// `CLIENT UNBLOCK id` ends that client's BLPOP as if it had timed out (the nil array), and
/// answers whether it was blocked.
#[test]
fn client_unblock_ends_a_blpop_as_a_timeout() {
    let mut s = Server::new();
    assert_eq!(s.exec(2, &argv(&["BLPOP", "q", "0"])), None);
    assert_eq!(run(&mut s, &["CLIENT", "UNBLOCK", "2"]), Reply::Int(1));
    assert_eq!(s.take_served(), vec![(2, Reply::NilArray)]);
    assert_eq!(run(&mut s, &["CLIENT", "UNBLOCK", "2"]), Reply::Int(0));
    assert_eq!(run(&mut s, &["RPUSH", "q", "x"]), Reply::Int(1));
    assert!(
        s.take_served().is_empty(),
        "the unblocked client takes nothing"
    );
}

#[test]
fn a_blpop_times_out_on_the_first_cron_tick_after_its_deadline() {
    let mut s = Server::new();
    s.set_now(1_000);
    assert_eq!(s.exec(2, &argv(&["BLPOP", "q", "0.25"])), None);
    assert_eq!(s.next_block_check(), Some(1_300));
    s.set_now(1_250);
    assert!(
        s.expire_blocked().is_empty(),
        "Redis times out strictly after the deadline"
    );
    s.set_now(1_300);
    assert_eq!(s.expire_blocked(), vec![(2, Reply::NilArray)]);
    s.block_tick_ms = 0;
    assert_eq!(s.exec(2, &argv(&["BLPOP", "q", "1"])), None);
    assert_eq!(s.next_block_check(), Some(2_301));
    s.disconnect(2);
    assert_eq!(
        s.next_block_check(),
        None,
        "a closed connection no longer waits"
    );
}

#[test]
fn expire_gt_and_lt_treat_no_expiry_as_infinite() {
    let mut s = Server::new();
    run(&mut s, &["SET", "k", "v"]);
    assert_eq!(run(&mut s, &["PEXPIRE", "k", "100", "GT"]), Reply::Int(0));
    assert_eq!(run(&mut s, &["PEXPIRE", "k", "100", "LT"]), Reply::Int(1));
    assert_eq!(run(&mut s, &["PEXPIRE", "k", "50", "GT"]), Reply::Int(0));
    assert_eq!(run(&mut s, &["PEXPIRE", "k", "500", "GT"]), Reply::Int(1));
    assert_eq!(run(&mut s, &["PTTL", "k"]), Reply::Int(500));
}
