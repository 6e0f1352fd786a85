//! The nightly invoice run: three servers start the same job at 02:00, and customers must get
//! exactly one invoice.
//!
//! ```text
//! cargo run --release -p redmutex-examples --bin nightly_invoice [REDIS_URL]
//! ```
//!
//! Without a URL (and without `REDMUTEX_URL`) the demo starts its own `redis-server` on a free
//! loopback port and stops it at the end. It then starts three worker processes that begin the
//! job at the same instant. Each tries the lock once: the one that gets it sends the invoices,
//! passing its fence number along; the others skip and say who holds the lock.

use std::process::{Command, ExitCode};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::Commands;
use redmutex::{Client, ErrorKind, NodeOutcome, TryLockError};

const LOCK: &str = "invoice:nightly:lock";
const SENT: &str = "invoice:nightly:sent";
const CUSTOMERS: [&str; 3] = ["ACME Corp", "Globex", "Initech"];

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--worker") {
        return worker(&args[2], &args[3], args[4].parse().unwrap_or(0));
    }
    let given = args
        .get(1)
        .cloned()
        .or_else(|| std::env::var("REDMUTEX_URL").ok());
    let server = given.is_none().then(redmutex_tests::RedisServer::start);
    let url = given.unwrap_or_else(|| server.as_ref().map(|s| s.url()).unwrap_or_default());
    println!(
        "redis: {url}{}",
        if server.is_some() {
            " (started by the demo)"
        } else {
            ""
        }
    );

    let mut conn = match redis::Client::open(url.as_str()).and_then(|c| c.get_connection()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("nightly_invoice: cannot reach {url}: {e}");
            return ExitCode::FAILURE;
        }
    };
    let _: () = conn.del(SENT).unwrap_or(());

    // 02:00 — every server's cron fires at the same instant.
    let start_at = now_ms() + 300;
    let exe = std::env::current_exe().expect("the demo's own path");
    let workers: Vec<_> = ["billing-1", "billing-2", "billing-3"]
        .iter()
        .map(|name| {
            Command::new(&exe)
                .args(["--worker", &url, name, &start_at.to_string()])
                .spawn()
                .expect("start a worker")
        })
        .collect();
    let mut ok = true;
    for mut w in workers {
        ok &= w.wait().map(|s| s.success()).unwrap_or(false);
    }
    let sent: Vec<String> = conn.lrange(SENT, 0, -1).unwrap_or_default();
    println!(
        "invoices sent: {} for {} customers — {}",
        sent.len(),
        CUSTOMERS.len(),
        if sent.len() == CUSTOMERS.len() {
            "each customer got exactly one"
        } else {
            "WRONG"
        }
    );
    if sent.len() != CUSTOMERS.len() || !ok {
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

fn worker(url: &str, name: &str, start_at: u128) -> ExitCode {
    let client = match Client::builder().node(url).owner(name).build() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{name}: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mutex = client.mutex(LOCK).ttl(Duration::from_secs(30));
    std::thread::sleep(Duration::from_millis(
        start_at.saturating_sub(now_ms()) as u64
    ));
    match mutex.try_lock() {
        Ok(guard) => {
            println!(
                "{name}: got the lock (fence {}), sending invoices",
                guard.fence()
            );
            let mut conn = redis::Client::open(url)
                .and_then(|c| c.get_connection())
                .expect("connect for the invoices");
            for customer in CUSTOMERS {
                // A real job would hand the fence to its database, which rejects writes that
                // carry a lower fence than one it has already seen.
                guard.check().expect("still holding the lock");
                let _: () = conn
                    .rpush(SENT, format!("{customer} (fence {})", guard.fence()))
                    .expect("record the invoice");
                println!("{name}:   invoice sent to {customer}");
                std::thread::sleep(Duration::from_millis(200));
            }
            match guard.unlock() {
                Ok(_) => println!("{name}: done, lock released"),
                Err(e) => println!("{name}: done, but {e}"),
            }
            ExitCode::SUCCESS
        }
        Err(TryLockError::WouldBlock) => {
            let holder = mutex
                .status()
                .ok()
                .and_then(|s| Some((s.holder?, s.ttl)))
                .map(|(h, ttl)| {
                    format!(
                        "{} holds it for {:.1} s more",
                        String::from_utf8_lossy(&h),
                        ttl.unwrap_or_default().as_secs_f64()
                    )
                })
                .unwrap_or_else(|| "another server already ran it".into());
            println!("{name}: skipped — {holder}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            let reports: Vec<String> = e
                .nodes()
                .iter()
                .filter(|r| !matches!(r.outcome, NodeOutcome::Ok))
                .map(|r| r.to_string())
                .collect();
            eprintln!(
                "{name}: cannot take the lock ({}): {e} {reports:?}",
                e.kind()
            );
            if e.kind() == ErrorKind::InvalidArgument {
                return ExitCode::from(2);
            }
            ExitCode::FAILURE
        }
    }
}

fn now_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0)
}
