//! The renew thread: one per client, keeping every auto-renewed guard alive.
//!
//! It owns a deadline heap of weak references to guards. Due guards are renewed in batches:
//! one pipelined round per node carries up to `BATCH` extensions. A guard that was released
//! or dropped cannot be upgraded any more and simply falls out of the heap. The same thread
//! sends the clean-ups (`cleanup.rs`).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use std::panic::{AssertUnwindSafe, catch_unwind};

use super::cleanup::{self, Cleanup};
use super::clock::{Clock, Stamp};
use super::scripts::Call;
use super::tally::{Confirmations, Tally};
use crate::net::{self, Node};
use crate::process::PerProcess;
use crate::sync::{LocalCondvar, LocalMutex};

/// Extensions per pipelined round.
const BATCH: usize = 256;

/// How long dropping a client waits at most for its renew thread to finish the round it is
/// sending (each round is bounded by its own node timeout; this bounds a callback that hangs).
const STOP_WAIT: Duration = Duration::from_secs(2);

/// A callback that runs when a lease is lost.
pub(crate) type Callback = Box<dyn FnOnce() + Send + 'static>;

/// Runs on-lost callbacks; a panicking callback is logged and does not stop the others.
pub(crate) fn fire(callbacks: Vec<Callback>) {
    for cb in callbacks {
        if catch_unwind(AssertUnwindSafe(cb)).is_err() {
            log::error!("redmutex: an on-lost callback panicked");
        }
    }
}

/// What the renew thread should do with a lease that is due.
pub(crate) enum Duty {
    /// Released, lost, or inherited through fork: forget it.
    Forget,
    /// Renew it with this TTL.
    Renew(Duration),
    /// Nothing to renew; look again at this instant (its validity deadline).
    At(Instant),
}

/// The outcome of one extension.
pub(crate) enum Renewal {
    /// Confirmed; look again at this instant.
    Renewed(Instant),
    /// Not confirmed yet, but the lock is still valid: try again at this instant.
    Retry(Instant),
    /// Lost or released.
    Gone,
}

/// A lease the renew thread keeps alive.
pub(crate) trait Renewable: Send + Sync {
    /// What to do with it now, and the callbacks to run (it may have run out).
    fn due(&self) -> (Duty, Vec<Callback>);
    /// Held while an operation of its owner (unlock, extend) runs: no renewal meanwhile.
    fn gate(&self) -> &LocalMutex<()>;
    /// The extension that renews it with `ttl`.
    fn extend_call(&self, ttl: Duration) -> Call;
    /// The `WAIT` that must follow its extension (replicas and timeout), if any.
    fn replica_wait(&self) -> Option<(u32, Duration)>;
    /// The per-node timeout of its requests.
    fn node_timeout(&self) -> Duration;
    /// Applies the tally of an extension sent at `t0` with `ttl`.
    fn apply_extend(&self, t0: Stamp, ttl: Duration, tally: &Tally) -> (Renewal, Vec<Callback>);
    /// Its renewal is being sent `lag` after it was due (for the client's figures).
    fn renewing_late(&self, _lag: Duration) {}
    /// Its current schedule: [`Renewer::reschedule`] starts a new one, and entries of an
    /// older one are dropped, so a guard always has one entry.
    fn generation(&self) -> u64;
}

pub(crate) struct Renewer {
    /// The nodes every lease of this renewer lives on (one client's), and its lease clock.
    fleet: Arc<Fleet>,
    /// The heap and its thread's wake-up: a forked child has its own, and starts its own
    /// thread (the parent's guards are not the child's to renew).
    current: PerProcess<Served>,
}

/// One process's heap, and whether its thread was started.
struct Served {
    shared: Arc<Shared>,
    started: AtomicBool,
}

impl Served {
    fn new() -> Served {
        Served {
            shared: Shared::new(),
            started: AtomicBool::new(false),
        }
    }
}

struct Shared {
    state: LocalMutex<Heap>,
    cv: LocalCondvar,
}

#[derive(Default)]
struct Heap {
    heap: BinaryHeap<Reverse<Entry>>,
    seq: u64,
    /// Guards released since the heap was last purged of entries whose guard is gone.
    released: usize,
    /// Clean-ups waiting for their time.
    cleanups: Vec<Cleanup>,
    stop: bool,
    /// The thread is sending a round (renewals or clean-ups), with the nodes in hand.
    working: bool,
    /// The thread, once it runs.
    thread: Option<std::thread::ThreadId>,
}

struct Entry {
    at: Instant,
    seq: u64,
    guard: Weak<dyn Renewable>,
    /// The guard's schedule this entry belongs to: an entry of an older one is stale.
    generation: u64,
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Entry {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

impl Renewer {
    pub(crate) fn new(nodes: Vec<Arc<Node>>, clock: Arc<dyn Clock>) -> Renewer {
        Renewer {
            fleet: Arc::new(Fleet { nodes, clock }),
            current: PerProcess::new(Served::new()),
        }
    }

    /// Asks the renew thread to look at `guard` (whose schedule is `generation`) at `at`;
    /// starts the thread on first use.
    pub(crate) fn schedule(&self, at: Instant, guard: Weak<dyn Renewable>, generation: u64) {
        self.enqueue(at, guard, generation, false);
    }

    /// Like [`Renewer::schedule`], for a guard that may already have an entry, of an older
    /// schedule (an `extend` moves a guard's renewals): that entry is removed (in the time
    /// of a pass over the heap), or, if the renew thread holds it right now, dropped when it
    /// comes back.
    pub(crate) fn reschedule(&self, at: Instant, guard: Weak<dyn Renewable>, generation: u64) {
        self.enqueue(at, guard, generation, true);
    }

    fn enqueue(&self, at: Instant, guard: Weak<dyn Renewable>, generation: u64, replace: bool) {
        let shared = self.ensure_started();
        let mut st = shared.state.lock();
        if replace {
            st.heap.retain(|Reverse(e)| !Weak::ptr_eq(&e.guard, &guard));
        }
        push(&mut st, at, guard, generation);
        let earliest = st.heap.peek().is_some_and(|Reverse(e)| e.at == at);
        drop(st);
        if earliest {
            shared.cv.notify_one();
        }
    }

    /// Sends `cleanup` from the renew thread, now and again until it is done.
    pub(crate) fn clean_up(&self, cleanup: Cleanup) {
        let shared = self.ensure_started();
        shared.state.lock().cleanups.push(cleanup);
        shared.cv.notify_one();
    }

    /// Notes that a guard was released. Its entry would otherwise stay until its next check
    /// (up to TTL/3 away) and keep the guard's allocation alive, so a process that takes many
    /// short locks would grow by one entry per lock: purge the heap once released guards
    /// make up half of it.
    pub(crate) fn forget(&self) {
        let Some(served) = self.current.existing() else {
            return;
        };
        let mut st = served.shared.state.lock();
        st.released += 1;
        if st.released >= 64 && st.released * 2 >= st.heap.len() {
            st.heap.retain(|Reverse(e)| e.guard.strong_count() > 0);
            st.released = 0;
        }
    }

    /// How many entries the heap holds (live and not yet purged), for tests.
    pub(crate) fn queued(&self) -> usize {
        self.current
            .existing()
            .map_or(0, |served| served.shared.state.lock().heap.len())
    }

    /// Stops the thread (dropping the renewer does too; a second stop does nothing more). A
    /// round it is sending right now is finished first (within [`STOP_WAIT`]): when the last
    /// handle of a client is gone, its thread holds none of its connections any more, so a
    /// program that frees its client and exits leaves nothing half-done behind (and a memory
    /// checker sees every connection closed). Clean-ups still waiting for their time are
    /// dropped; the keys they would remove expire with their TTL.
    pub(crate) fn stop(&self) {
        let Some(served) = self.current.existing() else {
            return;
        };
        if !served.started.load(Ordering::Acquire) {
            return;
        }
        let shared = &served.shared;
        let mut st = shared.state.lock();
        st.stop = true;
        shared.cv.notify_all();
        // The last handle may go on the thread itself (a guard it renews was the last).
        if st.thread == Some(std::thread::current().id()) {
            return;
        }
        let deadline = Instant::now() + STOP_WAIT;
        while st.working && Instant::now() < deadline {
            st = shared.cv.wait_until(st, deadline);
        }
    }

    fn ensure_started(&self) -> Arc<Shared> {
        let served = self.current.get(|_| Served::new());
        if !served.started.load(Ordering::Acquire)
            && served
                .started
                .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        {
            let shared = Arc::clone(&served.shared);
            // Weak: between rounds the thread keeps no node (nor its connections) alive.
            let fleet = Arc::downgrade(&self.fleet);
            let spawned = std::thread::Builder::new()
                .name("redmutex-renew".into())
                .spawn(move || run(&shared, &fleet));
            if let Err(e) = spawned {
                log::error!("redmutex: cannot start the renew thread: {e}");
                served.started.store(false, Ordering::Release);
            }
        }
        Arc::clone(&served.shared)
    }
}

impl Shared {
    fn new() -> Arc<Shared> {
        Arc::new(Shared {
            state: LocalMutex::new(Heap::default()),
            cv: LocalCondvar::new(),
        })
    }
}

impl Drop for Renewer {
    fn drop(&mut self) {
        self.stop();
    }
}

fn push(st: &mut Heap, at: Instant, guard: Weak<dyn Renewable>, generation: u64) {
    st.seq += 1;
    let seq = st.seq;
    st.heap.push(Reverse(Entry {
        at,
        seq,
        guard,
        generation,
    }));
}

/// What the renew thread works with.
struct Fleet {
    nodes: Vec<Arc<Node>>,
    clock: Arc<dyn Clock>,
}

fn run(shared: &Shared, fleet: &Weak<Fleet>) {
    let mut st = shared.state.lock();
    st.thread = Some(std::thread::current().id());
    loop {
        if st.stop {
            return;
        }
        let now = Instant::now();
        let cleanup_at = st.cleanups.iter().map(|c| c.at).min();
        if cleanup_at.is_some_and(|at| at <= now) {
            let (due, later) = std::mem::take(&mut st.cleanups)
                .into_iter()
                .partition(|c| c.at <= now);
            st.cleanups = later;
            st.working = true;
            drop(st);
            let again = fleet.upgrade().map(|fleet| cleanup::run(due, &fleet.nodes));
            st = done_working(shared);
            let Some(again) = again else {
                return;
            };
            st.cleanups.extend(again);
            continue;
        }
        let wake = match (st.heap.peek().map(|Reverse(e)| e.at), cleanup_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        match wake {
            None => {
                st = shared.cv.wait(st);
                continue;
            }
            Some(at) if at > now => {
                st = shared.cv.wait_until(st, at);
                continue;
            }
            Some(_) => {}
        }
        let mut due = Vec::new();
        while let Some(Reverse(e)) = st.heap.peek() {
            if e.at > now || due.len() >= 16 * BATCH {
                break;
            }
            if let Some(Reverse(e)) = st.heap.pop() {
                due.push((e.guard, e.generation, e.at));
            }
        }
        st.working = true;
        drop(st);
        let next = fleet.upgrade().map(|fleet| serve(&fleet, due));
        st = done_working(shared);
        let Some(next) = next else {
            return;
        };
        for (at, guard, generation) in next {
            push(&mut st, at, guard, generation);
        }
    }
}

/// Takes the lock back after a round, and tells a client that is being dropped (waiting in
/// [`Renewer`]'s `drop`) that the round is over.
fn done_working(shared: &Shared) -> crate::sync::LocalGuard<'_, Heap> {
    let mut st = shared.state.lock();
    st.working = false;
    if st.stop {
        shared.cv.notify_all();
    }
    st
}

/// A lease to renew: with its TTL, its schedule and when its renewal was due.
type Due = (Arc<dyn Renewable>, Duration, u64, Instant);

/// When to look at a lease next, and its schedule.
type Next = Vec<(Instant, Weak<dyn Renewable>, u64)>;

/// Handles the due guards; returns when to look at each of them next.
fn serve(fleet: &Fleet, due: Vec<(Weak<dyn Renewable>, u64, Instant)>) -> Next {
    let mut next = Vec::new();
    let mut renew = Vec::new();
    for (weak, generation, at) in due {
        let Some(guard) = weak.upgrade() else {
            continue;
        };
        if guard.generation() != generation {
            continue;
        }
        let (plan, callbacks) = guard.due();
        fire(callbacks);
        match plan {
            Duty::Forget => {}
            Duty::At(at) => next.push((at, weak, generation)),
            Duty::Renew(ttl) => renew.push((guard, ttl, generation, at)),
        }
    }
    for chunk in renew.chunks(BATCH) {
        renew_batch(fleet, chunk, &mut next);
    }
    next
}

/// One pipelined round of extensions for guards of one client.
fn renew_batch(fleet: &Fleet, chunk: &[Due], next: &mut Next) {
    // A guard whose owner is unlocking or extending right now is skipped: its owner's
    // operation decides, and no renewal may follow an unlock.
    let mut held = Vec::with_capacity(chunk.len());
    let now = Instant::now();
    for (guard, ttl, generation, at) in chunk {
        match guard.gate().try_lock() {
            Some(op) => {
                guard.renewing_late(now.saturating_duration_since(*at));
                held.push((guard, *ttl, op, *generation));
            }
            None => next.push((
                Instant::now() + Duration::from_millis(5),
                Arc::downgrade(guard),
                *generation,
            )),
        }
    }
    if held.is_empty() {
        return;
    }
    let leases: Vec<(&dyn Renewable, Duration)> =
        held.iter().map(|(g, ttl, ..)| (&***g, *ttl)).collect();
    let (t0, tallies) = extension_round(&fleet.nodes, &*fleet.clock, &leases);
    let mut callbacks = Vec::new();
    for ((guard, ttl, op, generation), tally) in held.into_iter().zip(tallies) {
        let (outcome, cbs) = guard.apply_extend(t0, ttl, &tally);
        drop(op);
        callbacks.extend(cbs);
        match outcome {
            Renewal::Renewed(at) | Renewal::Retry(at) => {
                next.push((at, Arc::downgrade(guard), generation))
            }
            Renewal::Gone => {}
        }
    }
    fire(callbacks);
}

/// One round of extensions, pipelined per node: each lease's extension to its `ttl`, sent to
/// every node, and its tally. Serves the renew thread (a batch of one client's leases) and
/// [`Lease::extend`](super::lease::Lease) (a batch of one), so that both end their round the
/// same way. Returns when the round was sent (`t0`, on the lease clock) and one tally per
/// lease.
///
/// The round ends at its quorum, like an acquisition round: the slower nodes still run the
/// extensions, and their replies are read later. Leases with `min_replicas` share one `WAIT`
/// at the end of the pipeline: it waits for every earlier write of the connection, so its
/// count holds for each of their extensions. It asks for the most replicas and waits the
/// longest any of them asks.
pub(super) fn extension_round(
    nodes: &[Arc<Node>],
    clock: &dyn Clock,
    leases: &[(&dyn Renewable, Duration)],
) -> (Stamp, Vec<Tally>) {
    let mut calls: Vec<_> = leases.iter().map(|(g, ttl)| g.extend_call(*ttl)).collect();
    let timeout = leases
        .iter()
        .map(|(g, _)| g.node_timeout())
        .max()
        .unwrap_or(Duration::from_millis(100));
    let waits: Vec<_> = leases
        .iter()
        .filter_map(|(g, _)| g.replica_wait())
        .collect();
    let wait_at = calls.len();
    let wait_timeout = waits.iter().map(|(_, t)| *t).max().unwrap_or_default();
    if let Some(most) = waits.iter().map(|(n, _)| *n).max() {
        calls.push(Call::wait(most, wait_timeout));
    }
    let t0 = clock.now();
    let replicas: Vec<_> = leases
        .iter()
        .map(|(g, _)| g.replica_wait().map(|(n, _)| (wait_at, n)))
        .collect();
    let mut confirmations = Confirmations::new(nodes.len(), &replicas);
    let answers = net::exchange_until(
        nodes,
        &vec![&calls[..]; nodes.len()],
        Instant::now() + timeout + wait_timeout,
        None,
        &mut |_, answer| confirmations.count(answer),
    );
    let answers = net::unread_as_timeouts(answers);
    let tallies = (0..leases.len())
        .map(|j| Tally::of_ints(nodes, &answers, j, replicas[j]))
        .collect();
    (t0, tallies)
}

#[cfg(test)]
mod tests;
