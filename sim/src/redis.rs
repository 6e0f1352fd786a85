//! A simulated Redis 7.0 server: the keyspace, the real Lua scripts, BLPOP, restarts.
//!
//! It has no clock of its own: the world sets [`Server::set_now`] before every command, and
//! the time stays fixed while one command or script runs. Redis 7.0 freezes a script's time
//! for deciding whether a key expired, but `PTTL` and `SET … PX` inside a script read the
//! clock afresh; a script runs here in no time, so the two coincide (a real script that runs
//! across a millisecond boundary can see a PTTL 1 ms lower).

mod cmd;
mod db;
mod list;
mod lua;
mod num;
mod zset;

use std::cell::RefCell;
use std::rc::Rc;

pub use cmd::{COMMANDS, Command};
pub use db::{Data, Db, Entry, Reply, ZSet};
pub use lua::sha1_hex;
pub use num::fmt_g17;

use lua::Engine;
use num::{parse_f64, parse_i64};

/// Identifies a client connection on one server (for BLPOP's replies).
pub type ClientId = u64;

/// A client blocked in BLPOP.
struct Blocked {
    client: ClientId,
    keys: Vec<Vec<u8>>,
    /// Absolute server time (ms) after which it times out; `None` waits forever.
    deadline: Option<u64>,
}

/// One simulated Redis server.
pub struct Server {
    db: Rc<RefCell<Db>>,
    engine: Engine,
    blocked: Vec<Blocked>,
    /// Replies to blocked clients that a write served, waiting to be collected.
    served: Vec<(ClientId, Reply)>,
    /// How often the server looks for timed-out BLPOPs (Redis 7's `hz 10` cron: 100 ms);
    /// 0 checks at the exact deadline.
    pub block_tick_ms: u64,
}

impl Default for Server {
    fn default() -> Self {
        Server::new()
    }
}

impl Server {
    /// An empty server at time 0.
    pub fn new() -> Server {
        let db = Rc::new(RefCell::new(Db::default()));
        let engine = Engine::new(db.clone());
        Server {
            db,
            engine,
            blocked: Vec::new(),
            served: Vec::new(),
            block_tick_ms: 100,
        }
    }

    /// The server's clock (ms).
    pub fn now(&self) -> u64 {
        self.db.borrow().now
    }

    /// Sets the server's clock (ms); the next command sees this time.
    pub fn set_now(&mut self, now: u64) {
        self.set_now_us(now * 1000);
    }

    /// Sets the server's clock in µs: `TIME` reads it whole, everything else in ms.
    pub fn set_now_us(&mut self, now_us: u64) {
        let mut db = self.db.borrow_mut();
        db.now = now_us / 1000;
        db.now_us = now_us;
    }

    /// Empties the keyspace, as `FLUSHALL` from another client does (or a failover to a
    /// replica that lacked the keys): connections, blocked clients and scripts stay.
    pub fn flush_keys(&mut self) {
        self.db.borrow_mut().clear();
    }

    /// Runs one command from `client`; `None` when the client is now blocked (BLPOP) and its
    /// reply will come from [`Server::take_served`] or [`Server::expire_blocked`].
    pub fn exec(&mut self, client: ClientId, argv: &[Vec<u8>]) -> Option<Reply> {
        let reply = self.dispatch(client, argv);
        self.serve_ready();
        reply
    }

    fn dispatch(&mut self, client: ClientId, argv: &[Vec<u8>]) -> Option<Reply> {
        let Some(name) = argv.first() else {
            return Some(Reply::err("ERR empty command"));
        };
        let lower = name.to_ascii_lowercase();
        let arity = |n: usize, exact: bool| {
            let ok = if exact {
                argv.len() == n
            } else {
                argv.len() >= n
            };
            let name = String::from_utf8_lossy(&lower);
            (!ok).then(|| {
                Reply::err(format!(
                    "ERR wrong number of arguments for '{name}' command"
                ))
            })
        };
        match lower.as_slice() {
            b"eval" | b"evalsha" => Some(arity(3, false).unwrap_or_else(|| self.eval(argv))),
            b"script" => Some(arity(2, false).unwrap_or_else(|| self.script(argv))),
            b"blpop" => match arity(3, false) {
                Some(e) => Some(e),
                None => self.blpop(client, &argv[1..]),
            },
            b"client"
                if (argv.len() == 3 || argv.len() == 4)
                    && argv[1].eq_ignore_ascii_case(b"unblock") =>
            {
                Some(self.unblock(&argv[2], argv.get(3).map(Vec::as_slice)))
            }
            _ => Some(match cmd::lookup(name) {
                None => {
                    let args: String = argv[1..]
                        .iter()
                        .map(|a| format!("'{}' ", String::from_utf8_lossy(a)))
                        .collect();
                    let name = String::from_utf8_lossy(name);
                    Reply::err(format!(
                        "ERR unknown command '{name}', with args beginning with: {args}"
                    ))
                }
                Some(c) => match arity(c.arity.unsigned_abs() as usize, c.arity >= 0) {
                    Some(e) => e,
                    None => (c.run)(&mut self.db.borrow_mut(), &argv[1..]),
                },
            }),
        }
    }

    /// `EVAL source numkeys …` and `EVALSHA sha numkeys …`.
    fn eval(&mut self, argv: &[Vec<u8>]) -> Reply {
        let Some(numkeys) = parse_i64(&argv[2]) else {
            return Reply::not_integer();
        };
        if numkeys > (argv.len() - 3) as i64 {
            return Reply::err("ERR Number of keys can't be greater than number of args");
        }
        if numkeys < 0 {
            return Reply::err("ERR Number of keys can't be negative");
        }
        let (keys, args) = argv[3..].split_at(numkeys as usize);
        let sha = if argv[0].eq_ignore_ascii_case(b"eval") {
            match self.engine.load(&argv[1]) {
                Ok(sha) => sha,
                Err(e) => return e,
            }
        } else {
            String::from_utf8_lossy(&argv[1]).into_owned()
        };
        self.engine
            .run(&sha, keys, args)
            .unwrap_or_else(|| Reply::err("NOSCRIPT No matching script. Please use EVAL."))
    }

    /// `SCRIPT LOAD | FLUSH | EXISTS`.
    fn script(&mut self, argv: &[Vec<u8>]) -> Reply {
        match (argv[1].to_ascii_uppercase().as_slice(), &argv[2..]) {
            (b"LOAD", [src]) => match self.engine.load(src) {
                Ok(sha) => Reply::bulk(sha),
                Err(e) => e,
            },
            (b"FLUSH", [] | [_]) => {
                self.engine.flush();
                Reply::ok()
            }
            (b"EXISTS", shas) if !shas.is_empty() => Reply::Array(
                shas.iter()
                    .map(|s| Reply::Int(self.engine.exists(&String::from_utf8_lossy(s)) as i64))
                    .collect(),
            ),
            _ => {
                let sub = String::from_utf8_lossy(&argv[1]);
                Reply::err(format!(
                    "ERR unknown subcommand or wrong number of arguments for '{sub}'. Try SCRIPT HELP."
                ))
            }
        }
    }

    /// `BLPOP key… timeout`: pops at once if it can, else blocks `client`.
    fn blpop(&mut self, client: ClientId, a: &[Vec<u8>]) -> Option<Reply> {
        let (keys, timeout) = a.split_at(a.len() - 1);
        let Some(secs) = parse_f64(&timeout[0]).filter(|s| s.is_finite()) else {
            return Some(Reply::err("ERR timeout is not a float or out of range"));
        };
        if secs < 0.0 {
            return Some(Reply::err("ERR timeout is negative"));
        }
        if let Some(r) = list::pop_first(&mut self.db.borrow_mut(), keys) {
            return Some(r);
        }
        let deadline = (secs > 0.0).then(|| self.now() + (secs * 1000.0) as u64);
        self.blocked.push(Blocked {
            client,
            keys: keys.to_vec(),
            deadline,
        });
        None
    }

    /// `CLIENT UNBLOCK id [TIMEOUT|ERROR]`: ends the client's `BLPOP` as if it had timed out
    /// (its reply, the nil array), or with the `UNBLOCKED` error (`ERROR`); the reply comes
    /// from [`Server::take_served`]. 1 when it was blocked, 0 otherwise.
    fn unblock(&mut self, id: &[u8], mode: Option<&[u8]>) -> Reply {
        let Some(id) = std::str::from_utf8(id)
            .ok()
            .and_then(|s| s.parse::<ClientId>().ok())
        else {
            return Reply::err("ERR value is not an integer or out of range");
        };
        let reply = match mode {
            None => Reply::NilArray,
            Some(m) if m.eq_ignore_ascii_case(b"timeout") => Reply::NilArray,
            Some(m) if m.eq_ignore_ascii_case(b"error") => {
                Reply::err("UNBLOCKED client unblocked via CLIENT UNBLOCK")
            }
            Some(_) => return Reply::err("ERR CLIENT UNBLOCK reason should be TIMEOUT or ERROR"),
        };
        match self.blocked.iter().position(|b| b.client == id) {
            Some(i) => {
                self.blocked.remove(i);
                self.served.push((id, reply));
                Reply::Int(1)
            }
            None => Reply::Int(0),
        }
    }

    /// Serves blocked clients from the lists that the last command filled, oldest first.
    fn serve_ready(&mut self) {
        let ready = std::mem::take(&mut self.db.borrow_mut().ready);
        for key in ready {
            while let Some(i) = self.blocked.iter().position(|b| b.keys.contains(&key)) {
                let Some(reply) =
                    list::pop_first(&mut self.db.borrow_mut(), std::slice::from_ref(&key))
                else {
                    break;
                };
                let b = self.blocked.remove(i);
                self.served.push((b.client, reply));
            }
        }
        self.db.borrow_mut().ready.clear();
    }

    /// Replies for blocked clients that writes served since the last call.
    pub fn take_served(&mut self) -> Vec<(ClientId, Reply)> {
        std::mem::take(&mut self.served)
    }

    /// Times out the blocked clients whose deadline passed (strictly before now), answering
    /// each with the nil array.
    pub fn expire_blocked(&mut self) -> Vec<(ClientId, Reply)> {
        let now = self.now();
        let mut out = Vec::new();
        self.blocked.retain(|b| {
            let late = b.deadline.is_some_and(|d| d < now);
            if late {
                out.push((b.client, Reply::NilArray));
            }
            !late
        });
        out
    }

    /// When the server will next notice a timed-out BLPOP: the first cron tick after the
    /// earliest deadline (ticks fall on multiples of `block_tick_ms` of the server's clock).
    pub fn next_block_check(&self) -> Option<u64> {
        let d = self.blocked.iter().filter_map(|b| b.deadline).min()?;
        let tick = self.block_tick_ms.max(1);
        Some((d / tick + 1) * tick)
    }

    /// A client's connection closed: it no longer waits in BLPOP.
    pub fn disconnect(&mut self, client: ClientId) {
        self.blocked.retain(|b| b.client != client);
    }

    /// Restarts the server: connections and the script cache are gone; the keyspace stays
    /// only with `persist` (expiries are absolute times on the server's clock, so a key
    /// whose time passed while it was down is gone too).
    pub fn restart(&mut self, persist: bool) {
        self.blocked.clear();
        self.served.clear();
        self.engine.flush();
        if !persist {
            self.db.borrow_mut().clear();
        }
    }

    /// Runs every script loaded from now on with `from` replaced by `to`, under its own SHA1:
    /// a negative control's older version of a script.
    pub fn rewrite_scripts(&mut self, from: &str, to: &str) {
        self.engine.rewrite(from, to);
    }

    /// The entry at `key` as stored, expired or not (for a checker that judges expiry itself).
    pub fn peek(&self, key: &[u8]) -> Option<Entry> {
        self.db.borrow().peek(key)
    }

    /// Every live key with its entry, in key order.
    pub fn entries(&mut self) -> Vec<(Vec<u8>, Entry)> {
        self.db.borrow_mut().entries()
    }
}
