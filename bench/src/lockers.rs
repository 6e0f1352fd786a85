//! The Rust locks under test behind one small interface: redmutex (its mutex, semaphore and
//! read-write lock) and the `redlock` crate.

use std::time::Duration;

use redmutex::{Client, MutexGuard, Permit, ReadGuard, Released, TryLockError, WriteGuard};

use crate::bare::BareRequests;

/// The lease every lock of the benchmark uses: long enough never to expire during a sample.
pub const TTL: Duration = Duration::from_secs(30);

/// A lock as the benchmark drives it: one name, held at most once at a time.
pub trait Locker {
    /// Blocks until held, with the implementation's own way of waiting.
    fn lock(&mut self) -> Result<(), String>;
    /// One attempt; `Ok(false)` when someone else holds it.
    fn try_lock(&mut self) -> Result<bool, String>;
    /// Releases what `lock`/`try_lock` took.
    fn unlock(&mut self) -> Result<(), String>;
}

/// Which Rust implementation a child process runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Impl {
    Redmutex,
    /// redmutex's semaphore with one permit: its hand-off is a permit's.
    Semaphore,
    Redlock,
    /// Not a lock: `RPUSH` wakes a `BLPOP`, the floor of any wake-up through a Redis list.
    Blpop,
    /// Not a lock either: a script wakes the `BLPOP` (see [`ListWake::handing_over`]), the
    /// floor of a safe hand-off on a Redis without a compare-and-delete command.
    BlpopScript,
    /// A script wakes the `BLPOP` and leaves the lock for the waiters, which claims it with a
    /// second script pipelined behind its `BLPOP` (see [`ListWake::leaving_for_waiters`]).
    BlpopClaim,
    /// redmutex's requests from a bare redis-rs connection (see [`BareRequests`]).
    Bare,
}

impl Impl {
    pub fn parse(s: &str) -> Result<Impl, String> {
        match s {
            "redmutex" => Ok(Impl::Redmutex),
            "semaphore" => Ok(Impl::Semaphore),
            "redlock" => Ok(Impl::Redlock),
            "blpop" => Ok(Impl::Blpop),
            "blpop-script" => Ok(Impl::BlpopScript),
            "blpop-claim" => Ok(Impl::BlpopClaim),
            "redmutex-requests" => Ok(Impl::Bare),
            _ => Err(format!("unknown lock implementation {s:?}")),
        }
    }

    pub fn open(self, urls: &[String], key: &str) -> Result<Box<dyn Locker>, String> {
        Ok(match self {
            Impl::Redmutex => Box::new(RedmutexLocker::open(urls, key)?),
            Impl::Semaphore => Box::new(Shared::semaphore(&client(urls)?, key, 1)),
            Impl::Redlock => Box::new(RedlockLocker::open(urls, key)),
            Impl::Blpop => Box::new(ListWake::open(&urls[0], key)?),
            Impl::BlpopScript => Box::new(ListWake::open(&urls[0], key)?.handing_over()),
            Impl::BlpopClaim => Box::new(ListWake::open(&urls[0], key)?.leaving_for_waiters()?),
            Impl::Bare => Box::new(BareRequests::open(&urls[0], key)?),
        })
    }
}

fn client(urls: &[String]) -> Result<Client, String> {
    Client::builder()
        .nodes(urls.iter().cloned())
        .build()
        .map_err(|e| e.to_string())
}

/// redmutex with its default options (auto-renew, fencing, hand-off), TTL 30 s.
pub struct RedmutexLocker {
    mutex: redmutex::Mutex,
    guard: Option<MutexGuard>,
}

impl RedmutexLocker {
    pub fn open(urls: &[String], key: &str) -> Result<RedmutexLocker, String> {
        Ok(RedmutexLocker::new(client(urls)?.mutex(key).ttl(TTL)))
    }

    /// The same with fencing off: its `try_lock` asks with plain commands.
    pub fn unfenced(urls: &[String], key: &str) -> Result<RedmutexLocker, String> {
        Ok(RedmutexLocker::new(
            client(urls)?.mutex(key).ttl(TTL).fencing(false),
        ))
    }

    pub fn new(mutex: redmutex::Mutex) -> RedmutexLocker {
        RedmutexLocker { mutex, guard: None }
    }
}

impl Locker for RedmutexLocker {
    fn lock(&mut self) -> Result<(), String> {
        self.guard = Some(self.mutex.lock().map_err(|e| e.to_string())?);
        Ok(())
    }

    fn try_lock(&mut self) -> Result<bool, String> {
        match self.mutex.try_lock() {
            Ok(g) => {
                self.guard = Some(g);
                Ok(true)
            }
            Err(TryLockError::WouldBlock) => Ok(false),
            Err(e) => Err(e.to_string()),
        }
    }

    fn unlock(&mut self) -> Result<(), String> {
        let guard = self.guard.take().ok_or("unlock without a guard")?;
        guard.unlock().map(drop).map_err(|e| e.to_string())
    }
}

/// A guard of redmutex's other kinds, released the same way.
enum Held {
    Permit(Permit),
    Read(ReadGuard),
    Write(WriteGuard),
}

impl Held {
    fn unlock(self) -> Result<Released, redmutex::Error> {
        match self {
            Held::Permit(g) => g.unlock(),
            Held::Read(g) => g.unlock(),
            Held::Write(g) => g.unlock(),
        }
    }
}

/// One attempt at a lock of another kind: a held guard, `None` when it is taken.
type Attempt = Box<dyn FnMut(bool) -> Result<Option<Held>, String>>;

/// redmutex's semaphore or either side of its read-write lock, default options, TTL 30 s.
pub struct Shared {
    take: Attempt,
    held: Option<Held>,
}

fn attempt<G>(r: Result<G, TryLockError>, wrap: fn(G) -> Held) -> Result<Option<Held>, String> {
    match r {
        Ok(g) => Ok(Some(wrap(g))),
        Err(TryLockError::WouldBlock) => Ok(None),
        Err(e) => Err(e.to_string()),
    }
}

impl Shared {
    /// A permit of a semaphore of `permits`.
    pub fn semaphore(client: &Client, key: &str, permits: u32) -> Shared {
        let sem = client.semaphore(key, permits).ttl(TTL);
        Shared::new(Box::new(move |wait| {
            let r = match wait {
                true => sem.acquire().map_err(TryLockError::from),
                false => sem.try_acquire(),
            };
            attempt(r, Held::Permit)
        }))
    }

    /// A read hold of a read-write lock.
    pub fn read(client: &Client, key: &str) -> Shared {
        let rw = client.rwlock(key).ttl(TTL);
        Shared::new(Box::new(move |wait| {
            let r = match wait {
                true => rw.read().map_err(TryLockError::from),
                false => rw.try_read(),
            };
            attempt(r, Held::Read)
        }))
    }

    /// The write side of a read-write lock.
    pub fn write(client: &Client, key: &str) -> Shared {
        let rw = client.rwlock(key).ttl(TTL);
        Shared::new(Box::new(move |wait| {
            let r = match wait {
                true => rw.write().map_err(TryLockError::from),
                false => rw.try_write(),
            };
            attempt(r, Held::Write)
        }))
    }

    fn new(take: Attempt) -> Shared {
        Shared { take, held: None }
    }

    /// A client of one node, for the uncontended rows.
    pub fn client(url: &str) -> Result<Client, String> {
        client(&[url.to_owned()])
    }
}

impl Locker for Shared {
    fn lock(&mut self) -> Result<(), String> {
        self.held = Some((self.take)(true)?.ok_or("a blocking acquire came back without")?);
        Ok(())
    }

    fn try_lock(&mut self) -> Result<bool, String> {
        self.held = (self.take)(false)?;
        Ok(self.held.is_some())
    }

    fn unlock(&mut self) -> Result<(), String> {
        let held = self.held.take().ok_or("unlock without a guard")?;
        held.unlock().map(drop).map_err(|e| e.to_string())
    }
}

/// The `redlock` crate (2.0): sequential `SET NX PX` per node over a new connection per call,
/// and a waiter that retries 3 times with a random 0–200 ms sleep, then starts over.
pub struct RedlockLocker {
    manager: &'static redlock::RedLock,
    /// The same nodes with one round per call, for `try_lock`.
    one_round: &'static redlock::RedLock,
    key: Vec<u8>,
    held: Option<redlock::Lock<'static>>,
}

impl RedlockLocker {
    pub fn open(urls: &[String], key: &str) -> RedlockLocker {
        // A `Lock` borrows its manager; the manager lives as long as the benchmark process.
        let manager = redlock::RedLock::new(urls.to_vec());
        let mut one_round = manager.clone();
        // Its sleep after a failed round is random in 0..1 ms, i.e. none.
        one_round.set_retry(1, 1);
        RedlockLocker {
            manager: Box::leak(Box::new(manager)),
            one_round: Box::leak(Box::new(one_round)),
            key: key.as_bytes().to_vec(),
            held: None,
        }
    }

    fn ttl_ms() -> usize {
        TTL.as_millis() as usize
    }
}

impl Locker for RedlockLocker {
    fn lock(&mut self) -> Result<(), String> {
        // What `RedLock::acquire` does, without its guard type.
        loop {
            match self.manager.lock(&self.key, Self::ttl_ms()) {
                Ok(Some(l)) => {
                    self.held = Some(l);
                    return Ok(());
                }
                Ok(None) => continue,
                Err(e) => return Err(e.to_string()),
            }
        }
    }

    fn try_lock(&mut self) -> Result<bool, String> {
        match self.one_round.lock(&self.key, Self::ttl_ms()) {
            Ok(Some(l)) => {
                self.held = Some(l);
                Ok(true)
            }
            Ok(None) => Ok(false),
            Err(e) => Err(e.to_string()),
        }
    }

    fn unlock(&mut self) -> Result<(), String> {
        let l = self.held.take().ok_or("unlock without a lock")?;
        self.manager.unlock(&l);
        Ok(())
    }
}

/// The wake-up floor: "lock" is `BLPOP key 0`, "unlock" is `RPUSH key 1` on a raw redis-rs
/// connection. The list must hold one element before the first "lock".
pub struct ListWake {
    conn: redis::Connection,
    key: String,
    /// "unlock" runs this script instead of a bare `RPUSH`.
    script: Option<redis::Script>,
    /// "lock" pipelines this script (loaded on the server) behind its `BLPOP`.
    claim: Option<redis::Script>,
}

/// The lock key of a floor whose wake-up list is `key`, and the one token both of its
/// processes use (a floor needs no owners of its own).
pub fn floor_lock(key: &str) -> String {
    format!("{key}:lock")
}
const FLOOR_TOKEN: &str = "floor-token";

impl ListWake {
    pub fn open(url: &str, key: &str) -> Result<ListWake, String> {
        let conn = redis::Client::open(url)
            .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(5)))
            .map_err(|e| e.to_string())?;
        Ok(ListWake {
            conn,
            key: key.to_owned(),
            script: None,
            claim: None,
        })
    }

    /// "unlock" is one script that does what a release handing the lock straight to a waiter
    /// must at least do: read the lock and compare it with the holder's token, store the next
    /// holder's token with its TTL, push the wake-up. Redis 7 has no compare-and-delete
    /// command, so a safe release is a script; this row shows what a script costs on a
    /// server that sat idle until the release (scripts touch far more memory than `RPUSH`).
    pub fn handing_over(mut self) -> ListWake {
        self.script = Some(redis::Script::new(
            r"
local v = redis.call('GET', KEYS[1])
if v == false or v == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  redis.call('RPUSH', KEYS[2], '1')
  return 1
end
return 0",
        ));
        self
    }

    /// The floor of a hand-off in which the waiter takes the lock itself, as redmutex's does:
    /// "unlock" is a script that compares the holder's token, leaves the lock for the waiters
    /// (the empty value, for a few seconds) and pushes the wake-up; "lock" is `BLPOP` with a
    /// second script pipelined behind it that takes the left lock (`GET`, compare, `SET PX`).
    /// Without a compare-and-set command (Redis 7), taking a lock that someone else may hold
    /// is a script.
    pub fn leaving_for_waiters(mut self) -> Result<ListWake, String> {
        self.script = Some(redis::Script::new(
            r"
local v = redis.call('GET', KEYS[1])
if v == false or v == ARGV[1] then
  redis.call('SET', KEYS[1], '', 'PX', 5000)
  redis.call('RPUSH', KEYS[2], '1')
  return 1
end
return 0",
        ));
        let claim = redis::Script::new(
            r"
local v = redis.call('GET', KEYS[1])
if v == false or v == '' then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
return 0",
        );
        claim.load(&mut self.conn).map_err(|e| e.to_string())?;
        self.claim = Some(claim);
        Ok(self)
    }
}

impl Locker for ListWake {
    fn lock(&mut self) -> Result<(), String> {
        let Some(claim) = &self.claim else {
            let _: Option<(String, String)> = redis::cmd("BLPOP")
                .arg(&self.key)
                .arg(0)
                .query(&mut self.conn)
                .map_err(|e| e.to_string())?;
            return Ok(());
        };
        let (_, taken): (Option<(String, String)>, i64) = redis::pipe()
            .cmd("BLPOP")
            .arg(&self.key)
            .arg(0)
            .cmd("EVALSHA")
            .arg(claim.get_hash())
            .arg(1)
            .arg(floor_lock(&self.key))
            .arg(FLOOR_TOKEN)
            .arg(TTL.as_millis() as u64)
            .query(&mut self.conn)
            .map_err(|e| e.to_string())?;
        match taken {
            1 => Ok(()),
            _ => Err(format!(
                "{} was not left for the waiter",
                floor_lock(&self.key)
            )),
        }
    }

    fn try_lock(&mut self) -> Result<bool, String> {
        let v: Option<String> = redis::cmd("LPOP")
            .arg(&self.key)
            .query(&mut self.conn)
            .map_err(|e| e.to_string())?;
        Ok(v.is_some())
    }

    fn unlock(&mut self) -> Result<(), String> {
        if let Some(script) = &self.script {
            let handed: i64 = script
                .key(floor_lock(&self.key))
                .key(&self.key)
                .arg(FLOOR_TOKEN)
                .arg(TTL.as_millis() as u64)
                .invoke(&mut self.conn)
                .map_err(|e| e.to_string())?;
            return match handed {
                1 => Ok(()),
                _ => Err(format!("{} holds another token", floor_lock(&self.key))),
            };
        }
        redis::cmd("RPUSH")
            .arg(&self.key)
            .arg(1)
            .query::<i64>(&mut self.conn)
            .map(drop)
            .map_err(|e| e.to_string())
    }
}
