//! One waiting connection per server, shared by all of a client's waits for a release.
//!
//! A wait for a release is a `BLPOP` on the lock's wake-up list. Blocked on a connection of
//! its own, each lock a client waits for holds one connection (and a thousand locks waited
//! for hold a thousand). Here one connection per server serves them all: a thread of the
//! client's (the hub) blocks on `BLPOP` over every wake-up list its waits name, and hands
//! the element it pops to the wait for that list. A release still pushes one element, Redis
//! still gives it to one blocked connection (the first to block on that list), so one
//! client is woken per release, as before.
//!
//! The first wait on a server keeps a connection of its own (the lane): it sends the round
//! that follows the wait behind its `BLPOP` (see `Then::Wait`), so a single waiter takes a
//! released lock in one round trip. The others share the hub's. So a client's waits hold at
//! most two connections per server, whatever their number.
//!
//! The hub's `BLPOP` names the keys of the waits on now, and of those whose call still goes
//! on (a wait that ran out makes a round, then waits again): those waits find their key still
//! waited on, and cost Redis nothing more. A key is added by ending the `BLPOP` early
//! (`CLIENT UNBLOCK`, from a pooled connection, sent by the hub's thread) and sending it
//! again with the new set; a call that ends takes its key out the same way, so that the hub
//! does not pop a signal that a release left for another client's waiter. An element popped
//! for a key whose wait is between two waits is kept for the next wait on it.
//!
//! On a Redis Cluster, a `BLPOP` over keys of several slots is refused: there the hub (one per
//! master) listens for the releases on sharded pub/sub and claims each signal with `LPOP`
//! instead (see `listen.rs`), with the same seats, lane and bounds. Not shared: the waits on
//! a Cluster master older than Redis 7.0 (no sharded pub/sub), and on connections that
//! cannot be polled (TLS): each wait there has a connection of its own, as the lane does.
//!
//! A signal the hub pops for a call that has ended (the release came between the call's end
//! and the hub's next `BLPOP`, which no longer names the key) is passed on: pushed back,
//! when another waiter's announcement is live (see `PASS_ON` in `lock/scripts.rs`, which the
//! wait hands the hub as its [`Pass`]), for the waiters of other clients blocked behind the
//! hub on that list. So is one kept for a call between two waits when the call ends instead.
//!
//! What a lost signal costs is what it costs any wait: the waiter's next round, when its wait
//! runs out. The hub's connection broken (killed, a restart), the hub opens another at once
//! and blocks again; the signal a release left is still in the list.

use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use redis::Value;

use super::conn::Connection;
use super::endpoint::Endpoint;
use super::hub_block::{block, drain};
use super::leg::connect_and_run;
use super::listen::{self, Waits};
use super::poll::CAN_POLL;
use crate::process::PerProcess;
use crate::sync::{LocalCondvar, LocalGuard, LocalMutex};
use crate::wire::Request;

/// A hub with no wait for this long ends its thread, and puts its connection back.
const IDLE: Duration = Duration::from_secs(2);
/// How long the client's end waits for its hub's thread to end (at the bell, once done with
/// the request it may be sending), so that no thread of it outlives it.
const END_WAIT: Duration = Duration::from_millis(200);
/// How long a key whose wait ran out stays in the hub's `BLPOP` (its call makes a round, and
/// waits again), and how long an element popped for it is kept for its next wait.
const KEEP: Duration = Duration::from_secs(2);
/// How often a wait with a wake-up descriptor looks at it.
const LOOK: Duration = Duration::from_millis(50);

/// The shared waiting connection of one node.
pub(crate) struct Hub {
    state: PerProcess<LocalMutex<State>>,
    /// The hub's thread waits here for a first wait.
    idle: LocalCondvar,
    /// A Cluster master's: it listens on sharded pub/sub rather than block on the lists.
    listens: bool,
}

#[derive(Default)]
struct State {
    /// The keys waited on now, each with its wait.
    seats: HashMap<Vec<u8>, Arc<Seat>>,
    /// Keys whose wait ran out while their call goes on, and when.
    recent: HashMap<Vec<u8>, Instant>,
    /// Keys whose element the hub popped while no wait was on them, and when.
    popped: HashMap<Vec<u8>, Instant>,
    /// Keys whose call ended while the `BLPOP` in flight still names them: an element
    /// popped for one is passed on.
    ended: HashSet<Vec<u8>>,
    /// How to pass on an element of each key the hub may pop or keeps.
    passes: HashMap<Vec<u8>, Pass>,
    /// The keys of the hub's `BLPOP` in flight.
    issued: HashSet<Vec<u8>>,
    /// The `BLPOP` in flight names other keys than it should: end it, send it again.
    stale: bool,
    /// The bell that wakes the hub's thread; `Some` while the thread runs.
    bell: Option<UnixStream>,
    /// The hub's thread, for the client's end to wait for.
    thread: Option<std::thread::JoinHandle<()>>,
    /// A wait holds a connection of its own (the lane).
    lane: bool,
    /// The hub's connections cannot be polled (TLS), or its server has no sharded pub/sub:
    /// every wait has its own.
    unusable: bool,
    /// Keys the hub cannot listen on (their slot moved): their waits have their own.
    refused: HashSet<Vec<u8>>,
}

struct Seat {
    cv: LocalCondvar,
    woken: AtomicBool,
}

/// The request that passes on a signal of one list, popped with no wait left to take it.
pub(crate) type Pass = Arc<dyn Request + Send>;

/// Where one wait for a release blocks.
pub(crate) enum Lane {
    /// On a connection of its own; the lane (when this wait took it) is given back when
    /// this is dropped.
    Own { _lane: Option<LaneGuard> },
    /// On the shared connection of this hub, to this endpoint (see [`wait_shared`]).
    Shared(Arc<Hub>, Arc<Endpoint>),
}

/// The lane of a hub, taken.
pub(crate) struct LaneGuard(Arc<Hub>);

impl Drop for LaneGuard {
    fn drop(&mut self) {
        self.0.state().lane = false;
    }
}

impl Hub {
    /// The hub of a server: it blocks on the lists waited for.
    pub(crate) fn new() -> Hub {
        Hub::with(false)
    }

    /// The hub of a Redis Cluster master: it listens for releases (see `listen.rs`).
    pub(crate) fn listening() -> Hub {
        Hub::with(true)
    }

    fn with(listens: bool) -> Hub {
        Hub {
            state: PerProcess::new(LocalMutex::new(State {
                unusable: !CAN_POLL,
                ..State::default()
            })),
            idle: LocalCondvar::new(),
            listens,
        }
    }

    /// A forked child starts with a hub of its own: no thread runs there.
    fn state(&self) -> LocalGuard<'_, State> {
        let child = |_: &LocalMutex<State>| {
            LocalMutex::new(State {
                unusable: !CAN_POLL,
                ..State::default()
            })
        };
        self.state.get(child).lock()
    }
}

/// Where a wait on `endpoint` blocks: the lane when it is free (or the hub cannot serve
/// the endpoint), the shared connection otherwise.
pub(crate) fn lane(hub: &Arc<Hub>, endpoint: &Arc<Endpoint>) -> Lane {
    let mut st = hub.state();
    if st.unusable {
        return Lane::Own { _lane: None };
    }
    if st.lane {
        return Lane::Shared(Arc::clone(hub), Arc::clone(endpoint));
    }
    st.lane = true;
    Lane::Own {
        _lane: Some(LaneGuard(Arc::clone(hub))),
    }
}

/// Waits on the endpoint's shared connection for an element of the list `key` until
/// `until`, or until `woken` says the thread's wake-up descriptor is readable (asked every
/// [`LOOK`]); `pass` makes what passes on an element popped after the call ended (made only
/// when the hub has none for the key yet). `Some(true)`: an
/// element came (a release); `Some(false)`: the wait ended without one; `None`: the hub
/// cannot take this wait (another wait of the client is on the key, or the hub's thread
/// could not start): wait on a connection of its own.
pub(crate) fn wait_shared(
    (hub, endpoint): (&Arc<Hub>, &Arc<Endpoint>),
    (key, pass): (&[u8], &dyn Fn() -> Pass),
    until: Instant,
    woken: Option<&dyn Fn() -> bool>,
) -> Option<bool> {
    let mut st = hub.state();
    if st.unusable || st.seats.contains_key(key) || st.refused.contains(key) {
        return None;
    }
    st.ended.remove(key);
    if !st.passes.contains_key(key) {
        st.passes.insert(key.to_vec(), pass());
    }
    if st.popped.remove(key).is_some_and(|at| at.elapsed() < KEEP) {
        return Some(true);
    }
    let seat = Arc::new(Seat {
        cv: LocalCondvar::new(),
        woken: AtomicBool::new(false),
    });
    st.seats.insert(key.to_vec(), Arc::clone(&seat));
    st.recent.remove(key);
    if st.bell.is_none() {
        if start(hub, endpoint, &mut st).is_err() {
            st.seats.remove(key);
            return None;
        }
    } else if !st.issued.contains(key) {
        st.stale = true;
        ring(&st);
    }
    hub.idle.notify_one();
    loop {
        if seat.woken.load(Ordering::Acquire) {
            st.seats.remove(key);
            return Some(true);
        }
        if st.refused.contains(key) {
            st.seats.remove(key);
            return None;
        }
        let now = Instant::now();
        if now >= until || woken.is_some_and(|w| w()) || st.unusable {
            st.seats.remove(key);
            st.recent.insert(key.to_vec(), now);
            return Some(false);
        }
        let at = woken.map_or(until, |_| until.min(now + LOOK));
        st = seat.cv.wait_until(st, at);
    }
}

/// The call that waited on `key` ended: the hub stops waiting on it (a release's signal is
/// then left for another client's waiter). Returns how to pass on the signal kept for the
/// call's next wait, if one was.
#[must_use]
pub(crate) fn forget(hub: &Hub, key: &[u8]) -> Option<Pass> {
    let state = hub.state.existing()?;
    let mut st = state.lock();
    st.recent.remove(key);
    st.refused.remove(key);
    if st.issued.contains(key) && !st.seats.contains_key(key) {
        st.ended.insert(key.to_vec());
        st.stale = true;
        ring(&st);
    }
    let kept = st.popped.remove(key).is_some_and(|at| at.elapsed() < KEEP);
    kept.then(|| st.passes.get(key).cloned()).flatten()
}

/// Passes a signal on (see [`Pass`]), on a pooled connection of `endpoint`.
pub(crate) fn pass_on(endpoint: &Arc<Endpoint>, pass: &Pass) {
    let deadline = Instant::now() + endpoint.connect_timeout();
    // Not passed on (the server is away): the waiters' own waits run out, as for any lost
    // signal.
    let _ = connect_and_run(endpoint, &[&**pass], false, deadline, None);
}

/// Rings the hub thread's bell (it ends its `BLPOP` to send it again, or notices the client
/// is gone).
fn ring(st: &State) {
    if let Some(mut bell) = st.bell.as_ref() {
        // A full bell has rung already.
        let _ = bell.write(&[1]);
    }
}

/// Rings the bell of the hub, if it has a thread: the client is gone (its endpoint closed).
/// Waits (up to [`END_WAIT`]) for the thread to end.
pub(crate) fn close(hub: &Hub) {
    let Some(state) = hub.state.existing() else {
        return;
    };
    let thread = {
        let mut st = state.lock();
        ring(&st);
        st.thread.take()
    };
    let Some(thread) = thread else {
        return;
    };
    let until = Instant::now() + END_WAIT;
    while !thread.is_finished() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(1));
    }
    if thread.is_finished() {
        let _ = thread.join();
    }
}

fn start(hub: &Arc<Hub>, endpoint: &Arc<Endpoint>, st: &mut State) -> std::io::Result<()> {
    let (ringer, bell) = UnixStream::pair()?;
    ringer.set_nonblocking(true)?;
    bell.set_nonblocking(true)?;
    let (hub, endpoint) = (Arc::clone(hub), Arc::clone(endpoint));
    st.thread = std::thread::Builder::new()
        .name("redmutex-wait".into())
        .spawn(move || match hub.listens {
            true => listen::run(&HubWaits(&hub, &endpoint), &endpoint, bell),
            false => run(&hub, &endpoint, bell),
        })
        .map(Some)?;
    st.bell = Some(ringer);
    Ok(())
}

/// The hub's thread: blocks on the keys waited for, hands each element popped to its wait,
/// until no wait is left for [`IDLE`] or the client is gone.
fn run(hub: &Hub, endpoint: &Arc<Endpoint>, mut bell: UnixStream) {
    let mut conn: Option<Connection> = None;
    let mut failures = 0u32;
    while let Some(keys) = next_keys(hub, endpoint, &mut bell) {
        let got = match conn.take() {
            Some(c) => Ok(c),
            None => endpoint.take_or_connect(Instant::now() + endpoint.connect_timeout()),
        };
        let mut c = match got {
            Ok(c) if c.can_wait() => c,
            Ok(c) => {
                // It cannot be polled (TLS): every wait keeps a connection of its own.
                endpoint.put(c);
                let mut st = hub.state();
                st.unusable = true;
                st.seats.values().for_each(|s| s.cv.notify_one());
                break;
            }
            Err(_) => {
                failures += 1;
                pause(hub, failures);
                continue;
            }
        };
        let stale = || hub.state().stale;
        match block((&stale, endpoint), &mut c, &keys, &mut bell) {
            Some(reply) => {
                failures = 0;
                // The key whose list the `BLPOP` popped an element of.
                if let Value::Array(items) = reply
                    && let Some(Value::BulkString(key)) = items.into_iter().next()
                    && let Some(pass) = popped(hub, key)
                {
                    pass_on(endpoint, &pass);
                }
                conn = Some(c);
            }
            None => {
                // Broken, killed, or the client is gone: the next round opens another at once,
                // and pauses only if that fails too.
                failures += 1;
                if failures > 1 {
                    pause(hub, failures);
                }
            }
        }
    }
    if let Some(c) = conn {
        endpoint.put(c);
    }
}

/// The keys for the next `BLPOP`; `None` when the thread ends (no wait for [`IDLE`], or the
/// client is gone).
fn next_keys(hub: &Hub, endpoint: &Endpoint, bell: &mut UnixStream) -> Option<Vec<Vec<u8>>> {
    let mut st = hub.state();
    let idle_until = Instant::now() + IDLE;
    loop {
        drain(bell);
        let now = Instant::now();
        st.recent.retain(|_, at| now.duration_since(*at) < KEEP);
        st.popped.retain(|_, at| now.duration_since(*at) < KEEP);
        if endpoint.is_closed() || st.unusable {
            break;
        }
        if !st.seats.is_empty() || !st.recent.is_empty() {
            let keys: HashSet<Vec<u8>> = (st.seats.keys().chain(st.recent.keys()))
                .filter(|k| !st.refused.contains(*k))
                .cloned()
                .collect();
            let State { passes, popped, .. } = &mut *st;
            passes.retain(|k, _| keys.contains(k) || popped.contains_key(k));
            st.issued.clone_from(&keys);
            st.ended.clear();
            st.stale = false;
            return Some(keys.into_iter().collect());
        }
        if now >= idle_until {
            break;
        }
        st = hub.idle.wait_until(st, idle_until);
    }
    st.bell = None;
    st.issued.clear();
    st.ended.clear();
    st.passes.clear();
    None
}

/// Pauses after `failures` failed connections in a row (50 ms, doubling up to 1 s), or until
/// a new wait comes.
fn pause(hub: &Hub, failures: u32) {
    let pause = Duration::from_millis(50 << failures.min(5)).min(Duration::from_secs(1));
    let st = hub.state();
    drop(hub.idle.wait_until(st, Instant::now() + pause));
}

/// A signal was popped from the list `key`: its wait is woken, or the signal is kept for
/// the next wait on it; or, when the call it was for has ended, returns how to pass it on.
#[must_use]
fn popped(hub: &Hub, key: Vec<u8>) -> Option<Pass> {
    let mut st = hub.state();
    if let Some(seat) = st.seats.get(&key) {
        seat.woken.store(true, Ordering::Release);
        seat.cv.notify_one();
        return None;
    }
    if st.ended.contains(&key) {
        return st.passes.get(&key).cloned();
    }
    st.popped.insert(key, Instant::now());
    None
}

/// A Cluster master's hub, as its listening thread sees it.
struct HubWaits<'a>(&'a Hub, &'a Arc<Endpoint>);

impl Waits for HubWaits<'_> {
    fn next_keys(&self, bell: &mut UnixStream) -> Option<Vec<Vec<u8>>> {
        next_keys(self.0, self.1, bell)
    }

    fn stale(&self) -> bool {
        self.0.state().stale
    }

    fn popped(&self, key: Vec<u8>) {
        if let Some(pass) = popped(self.0, key) {
            pass_on(self.1, &pass);
        }
    }

    fn refused(&self, key: Vec<u8>) {
        let mut st = self.0.state();
        if let Some(seat) = st.seats.get(&key) {
            seat.cv.notify_one();
        }
        st.refused.insert(key);
    }

    fn unusable(&self) {
        let mut st = self.0.state();
        st.unusable = true;
        st.seats.values().for_each(|s| s.cv.notify_one());
    }

    fn pause(&self, failures: u32) {
        pause(self.0, failures);
    }

    fn drain(&self, bell: &mut UnixStream) {
        drain(bell);
    }
}
