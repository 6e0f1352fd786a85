//! The Rust locks under test behind one small interface: redmutex and the `redlock` crate.

use std::time::Duration;

use redmutex::{Client, MutexGuard, TryLockError};

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
    Redlock,
    /// Not a lock: `RPUSH` wakes a `BLPOP`, the floor of any wake-up through a Redis list.
    Blpop,
}

impl Impl {
    pub fn parse(s: &str) -> Result<Impl, String> {
        match s {
            "redmutex" => Ok(Impl::Redmutex),
            "redlock" => Ok(Impl::Redlock),
            "blpop" => Ok(Impl::Blpop),
            _ => Err(format!("unknown lock implementation {s:?}")),
        }
    }

    pub fn open(self, urls: &[String], key: &str) -> Result<Box<dyn Locker>, String> {
        Ok(match self {
            Impl::Redmutex => Box::new(RedmutexLocker::open(urls, key)?),
            Impl::Redlock => Box::new(RedlockLocker::open(urls, key)),
            Impl::Blpop => Box::new(ListWake::open(&urls[0], key)?),
        })
    }
}

/// redmutex with its default options (auto-renew, fencing, hand-off), TTL 30 s.
pub struct RedmutexLocker {
    mutex: redmutex::Mutex,
    guard: Option<MutexGuard>,
}

impl RedmutexLocker {
    pub fn open(urls: &[String], key: &str) -> Result<RedmutexLocker, String> {
        let client = Client::builder()
            .nodes(urls.iter().cloned())
            .build()
            .map_err(|e| e.to_string())?;
        Ok(RedmutexLocker::new(client.mutex(key).ttl(TTL)))
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
}

impl ListWake {
    pub fn open(url: &str, key: &str) -> Result<ListWake, String> {
        let conn = redis::Client::open(url)
            .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(5)))
            .map_err(|e| e.to_string())?;
        Ok(ListWake {
            conn,
            key: key.to_owned(),
        })
    }
}

impl Locker for ListWake {
    fn lock(&mut self) -> Result<(), String> {
        let _: Option<(String, String)> = redis::cmd("BLPOP")
            .arg(&self.key)
            .arg(0)
            .query(&mut self.conn)
            .map_err(|e| e.to_string())?;
        Ok(())
    }

    fn try_lock(&mut self) -> Result<bool, String> {
        let v: Option<String> = redis::cmd("LPOP")
            .arg(&self.key)
            .query(&mut self.conn)
            .map_err(|e| e.to_string())?;
        Ok(v.is_some())
    }

    fn unlock(&mut self) -> Result<(), String> {
        redis::cmd("RPUSH")
            .arg(&self.key)
            .arg(1)
            .query::<i64>(&mut self.conn)
            .map(drop)
            .map_err(|e| e.to_string())
    }
}
