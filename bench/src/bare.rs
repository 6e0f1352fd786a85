//! redmutex's own requests from a bare redis-rs connection: the scripts, keys and arguments
//! the library sends (made by the core itself, through its simulator interface, which builds
//! each round as the library does), sent and read by redis-rs, without the library's
//! transport, lease, guard or renewal around them. Its rows tell, in the same run, how much
//! of a redmutex row is the requests themselves and how much the machinery around them.

use std::time::Duration;

use redis::Value;
use redmutex::sim_support::{self, Argv, Lock, Round};

use crate::lockers::{Locker, TTL};

/// One node, one name, default options and the benchmark's TTL; one hold at a time.
pub struct BareRequests {
    conn: redis::Connection,
    lock: Lock,
    /// The longest wait for a release signal (the library's default wait cap).
    wait_cap: Duration,
    /// Tokens are this prefix and a counter: unique within the benchmark's run.
    prefix: String,
    made: u64,
    held: Option<Vec<u8>>,
}

impl BareRequests {
    pub fn open(url: &str, key: &str) -> Result<BareRequests, String> {
        let mut conn = redis::Client::open(url)
            .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(5)))
            .map_err(|e| e.to_string())?;
        for (_, source) in sim_support::scripts() {
            let _: String = redis::cmd("SCRIPT")
                .arg("LOAD")
                .arg(source)
                .query(&mut conn)
                .map_err(|e| e.to_string())?;
        }
        let opts = redmutex::MutexOptions::default();
        let us = |d: Duration| d.as_micros() as u64;
        let lock = Lock::new(
            key.as_bytes(),
            1,
            us(TTL),
            us(redmutex::default_node_timeout(TTL)),
            us(opts.wait_cap),
            us(opts.retry_delay),
            us(opts.handoff_window),
        );
        Ok(BareRequests {
            conn,
            lock,
            wait_cap: opts.wait_cap,
            prefix: format!("bare:{}:", std::process::id()),
            made: 0,
            held: None,
        })
    }

    /// Holds `token` when `reply` (to its acquire request) granted it.
    fn take(&mut self, token: Vec<u8>, reply: Value) -> Result<bool, String> {
        let ok = granted(reply)?;
        if ok {
            self.held = Some(token);
        }
        Ok(ok)
    }

    fn token(&mut self) -> Vec<u8> {
        self.made += 1;
        format!("{}{}", self.prefix, self.made).into_bytes()
    }

    /// The acquire request of a round with `token` (`waited`: after a wait; `announce`: it
    /// will wait if refused, announced by `waiter`).
    fn acquire(&self, token: &[u8], waited: bool, announce: bool, waiter: &[u8]) -> redis::Cmd {
        let round = Round::new(&self.lock, token.to_vec(), 0, waited, announce, waiter);
        cmd(&round.requests()[0])
    }
}

fn cmd(argv: &Argv) -> redis::Cmd {
    let mut c = redis::Cmd::new();
    for word in argv {
        c.arg(word.as_slice());
    }
    c
}

/// A grant answers its fence, an integer; a refusal is an array.
fn granted(reply: Value) -> Result<bool, String> {
    match reply {
        Value::Int(_) => Ok(true),
        Value::Array(_) => Ok(false),
        other => Err(format!("unexpected acquire reply {other:?}")),
    }
}

impl Locker for BareRequests {
    /// As the library's `lock` on one node: a round that announces the caller; when refused,
    /// the wait for a release signal with the next round pipelined behind it, until granted.
    fn lock(&mut self) -> Result<(), String> {
        let token = self.token();
        let waiter = token.clone();
        let first = self.acquire(&token, false, true, &waiter);
        let reply = first.query(&mut self.conn).map_err(|e| e.to_string())?;
        if self.take(token, reply)? {
            return Ok(());
        }
        loop {
            let token = self.token();
            let blpop = cmd(&self.lock.blpop(self.wait_cap.as_micros() as u64));
            let acquire = self.acquire(&token, true, true, &waiter);
            let (_, reply): (Value, Value) = redis::pipe()
                .add_command(blpop)
                .add_command(acquire)
                .query(&mut self.conn)
                .map_err(|e| e.to_string())?;
            if self.take(token, reply)? {
                return Ok(());
            }
        }
    }

    fn try_lock(&mut self) -> Result<bool, String> {
        let token = self.token();
        let acquire = self.acquire(&token, false, false, b"");
        let reply = acquire.query(&mut self.conn).map_err(|e| e.to_string())?;
        self.take(token, reply)
    }

    fn unlock(&mut self) -> Result<(), String> {
        let token = self.held.take().ok_or("unlock without a lock")?;
        let released: i64 = cmd(&self.lock.release(&token, true))
            .query(&mut self.conn)
            .map_err(|e| e.to_string())?;
        match released {
            1 => Ok(()),
            other => Err(format!("release answered {other}")),
        }
    }
}
