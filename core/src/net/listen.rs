//! The shared waiting connection of a Redis Cluster master: it listens for releases on
//! sharded pub/sub, and claims each signal with `LPOP`.
//!
//! A Cluster refuses a `BLPOP` over keys of several slots, and the names a client waits for
//! live in many slots. So on a Cluster the hub does not block on the wake-up lists: its
//! connection subscribes to each list's own sharded channel (`SSUBSCRIBE`, one command per
//! key: channels of several slots may not share one), where every release that pushes a
//! signal announces it (`SPUBLISH` in the scripts). A message sends `LPOP` on a pooled
//! connection: the client that pops the signal wakes its wait; one that finds the list empty
//! (another client, or a waiter blocked on the list itself, took it first: Redis serves a
//! blocked `BLPOP` before any later command) waits on. So a release still wakes one waiter,
//! and costs each other listening client one `LPOP`.
//!
//! A subscription's confirmation is followed by an `LPOP` of its list too: a signal a release
//! left before the subscription began is claimed, not missed. The same after a reconnection.
//!
//! Servers before Redis 7.0 have no sharded pub/sub: the first `SSUBSCRIBE` is refused as an
//! unknown command (or `NOPERM`, for an ACL user without it), and each wait on that master
//! keeps a connection of its own, as before. A subscription the server ends (its slot moved
//! to another master) or refuses (`MOVED`) sends that key's wait to a connection of its own.

use std::collections::{HashSet, VecDeque};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::{RedisResult, Value};

use super::conn::Connection;
use super::endpoint::Endpoint;
use super::poll::{self, Either};

/// What the hub's state is told by the listening thread, and asked.
pub(super) trait Waits {
    /// The keys to listen on next (after draining `bell`); `None` when the thread ends.
    fn next_keys(&self, bell: &mut UnixStream) -> Option<Vec<Vec<u8>>>;
    /// Whether the keys listened on should change now.
    fn stale(&self) -> bool;
    /// A signal was popped from the list `key`.
    fn popped(&self, key: Vec<u8>);
    /// The key cannot be listened on here: its wait takes a connection of its own.
    fn refused(&self, key: Vec<u8>);
    /// Nothing can be listened on here (no sharded pub/sub, or a connection that cannot be
    /// polled): every wait takes a connection of its own.
    fn unusable(&self);
    /// Pauses after `failures` failed connections in a row, or until a new wait comes.
    fn pause(&self, failures: u32);
    /// Reads what the bell holds.
    fn drain(&self, bell: &mut UnixStream);
}

/// How long the connection stays silent before a `PING` checks it.
const QUIET: Duration = Duration::from_secs(5);
/// How long the `PING`'s reply may take before the connection is taken for broken.
const GRACE: Duration = Duration::from_secs(2);

/// What the server said on the listening connection.
enum Event {
    /// A release announced a signal on this key's channel.
    Message(Vec<u8>),
    /// A subscription began.
    Subscribed(Vec<u8>),
    /// A subscription ended (asked for, or the server's: the slot moved).
    Unsubscribed(Vec<u8>),
    /// Anything else: the reply to the `PING`, or a message of no concern here.
    Other,
    /// An error reply: to the oldest `SSUBSCRIBE` not yet confirmed.
    Refused(String),
}

/// The listening thread of one master's hub: until `waits` has no key left (or the client is
/// gone).
pub(super) fn run(waits: &dyn Waits, endpoint: &Arc<Endpoint>, mut bell: UnixStream) {
    let mut conn: Option<Listening> = None;
    let mut failures = 0u32;
    while let Some(keys) = waits.next_keys(&mut bell) {
        if conn.is_none() {
            match endpoint.connect(Instant::now() + endpoint.connect_timeout()) {
                Ok(c) if c.can_wait() => conn = Some(Listening::new(c)),
                Ok(_) => {
                    waits.unusable();
                    break;
                }
                Err(_) => {
                    failures += 1;
                    waits.pause(failures);
                    continue;
                }
            }
        }
        let Some(l) = conn.as_mut() else { continue };
        match l.listen(waits, endpoint, keys, &mut bell) {
            Ok(()) => failures = 0,
            Err(End::Unusable) => {
                waits.unusable();
                break;
            }
            Err(End::Broken) => {
                // Reconnected at once; paused only when that fails too.
                conn = None;
                failures += 1;
                if failures > 1 {
                    waits.pause(failures);
                }
            }
        }
    }
}

enum End {
    Broken,
    Unusable,
}

/// A connection in subscriber mode: it never goes back to the pool.
struct Listening {
    c: Connection,
    /// The keys subscribed to, or asked for.
    on: HashSet<Vec<u8>>,
    /// The `SSUBSCRIBE`s not confirmed yet, in the order sent.
    asked: VecDeque<Vec<u8>>,
}

impl Listening {
    fn new(c: Connection) -> Listening {
        Listening {
            c,
            on: HashSet::new(),
            asked: VecDeque::new(),
        }
    }

    /// Subscribes to `keys` (and from the others), then hands over the signals announced on
    /// them until the keys go stale (the bell rang).
    fn listen(
        &mut self,
        waits: &dyn Waits,
        endpoint: &Arc<Endpoint>,
        keys: Vec<Vec<u8>>,
        bell: &mut UnixStream,
    ) -> Result<(), End> {
        let keys: HashSet<Vec<u8>> = keys.into_iter().collect();
        let new: Vec<&Vec<u8>> = keys.difference(&self.on).collect();
        let gone: Vec<&Vec<u8>> = self.on.difference(&keys).collect();
        let mut packed = Vec::new();
        for k in &new {
            packed.extend(
                redis::cmd("SSUBSCRIBE")
                    .arg(k.as_slice())
                    .get_packed_command(),
            );
        }
        for k in &gone {
            packed.extend(
                redis::cmd("SUNSUBSCRIBE")
                    .arg(k.as_slice())
                    .get_packed_command(),
            );
        }
        self.asked.extend(new.into_iter().cloned());
        self.on = keys;
        let sent = match packed.is_empty() {
            true => Ok(()),
            false => self
                .c
                .set_write_timeout(Some(endpoint.connect_timeout()))
                .and_then(|()| self.c.send_packed_command(&packed)),
        };
        sent.map_err(|_| End::Broken)?;
        let mut quiet_until = Instant::now() + QUIET;
        let mut pinged = false;
        loop {
            let mut claims = Vec::new();
            while self.c.holds(1) {
                let event = event(self.c.recv_response()).ok_or(End::Broken)?;
                match event {
                    Event::Message(k) if self.on.contains(&k) => claims.push(k),
                    Event::Message(_) => {}
                    Event::Subscribed(k) => {
                        self.asked.retain(|a| *a != k);
                        // A signal left before the subscription began.
                        if self.on.contains(&k) {
                            claims.push(k);
                        }
                    }
                    Event::Unsubscribed(k) => {
                        // Ended by the server while still wanted: the slot moved.
                        if self.on.remove(&k) {
                            waits.refused(k);
                        }
                    }
                    Event::Other => {}
                    Event::Refused(e) => {
                        let e = e.to_ascii_lowercase();
                        // No sharded pub/sub here (before 7.0), or not for this user (ACL).
                        if e.contains("unknown command") || e.contains("noperm") {
                            return Err(End::Unusable);
                        }
                        if let Some(k) = self.asked.pop_front()
                            && self.on.remove(&k)
                        {
                            waits.refused(k);
                        }
                    }
                }
                // Whatever came, the connection is alive.
                quiet_until = Instant::now() + QUIET;
                pinged = false;
            }
            for k in claim(endpoint, &claims) {
                waits.popped(k);
            }
            if waits.stale() || endpoint.is_closed() {
                return Ok(());
            }
            let socket = self.c.socket().ok_or(End::Unusable)?;
            let wait = quiet_until.saturating_duration_since(Instant::now());
            match poll::socket_or(socket, &*bell, wait) {
                Either::Socket => {
                    if !self.c.fill() {
                        return Err(End::Broken);
                    }
                }
                Either::Woken => waits.drain(bell),
                Either::TimedOut if pinged => return Err(End::Broken),
                Either::TimedOut => {
                    let ping = redis::cmd("PING").get_packed_command();
                    self.c.send_packed_command(&ping).map_err(|_| End::Broken)?;
                    pinged = true;
                    quiet_until = Instant::now() + GRACE;
                }
            }
        }
    }
}

/// One message of a subscribed connection (RESP2: an array whose first word says what it
/// is); `None` when the connection failed.
fn event(reply: RedisResult<Value>) -> Option<Event> {
    let items = match reply {
        Ok(Value::Array(items)) => items,
        Ok(Value::ServerError(e)) => return Some(Event::Refused(format!("{e:?}"))),
        Ok(_) => return Some(Event::Other),
        Err(e) if e.is_io_error() || e.is_timeout() => return None,
        Err(e) => return Some(Event::Refused(e.to_string())),
    };
    let mut items = items.into_iter();
    let (Some(Value::BulkString(kind)), Some(Value::BulkString(key))) =
        (items.next(), items.next())
    else {
        return Some(Event::Other);
    };
    Some(match kind.as_slice() {
        b"smessage" | b"message" => Event::Message(key),
        b"ssubscribe" => Event::Subscribed(key),
        b"sunsubscribe" => Event::Unsubscribed(key),
        _ => Event::Other,
    })
}

/// Pops one signal from each of the lists `keys` (on a pooled connection to the master):
/// the keys whose list had one. A list another client emptied first has none.
fn claim(endpoint: &Arc<Endpoint>, keys: &[Vec<u8>]) -> Vec<Vec<u8>> {
    if keys.is_empty() {
        return Vec::new();
    }
    let deadline = Instant::now() + endpoint.connect_timeout();
    let Ok(mut c) = endpoint.take_or_connect(deadline) else {
        return Vec::new();
    };
    let mut packed = Vec::new();
    for k in keys {
        packed.extend(redis::cmd("LPOP").arg(k.as_slice()).get_packed_command());
    }
    let left = deadline.saturating_duration_since(Instant::now());
    if c.set_write_timeout(Some(left)).is_err()
        || c.set_read_timeout(Some(left.max(Duration::from_millis(1))))
            .is_err()
        || c.send_packed_command(&packed).is_err()
    {
        return Vec::new();
    }
    let mut popped = Vec::new();
    for k in keys {
        match c.recv_response() {
            Ok(Value::BulkString(_)) => popped.push(k.clone()),
            Ok(_) => {}
            // Unread replies would precede the next request's: the connection is dropped.
            Err(_) => return popped,
        }
    }
    endpoint.put(c);
    popped
}
