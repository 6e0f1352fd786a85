//! One waiter on Redis per lock and client: the client's waiting room.
//!
//! A release wakes one waiter (one wake-up signal; a mutex admits one holder at a time), so
//! of a client's threads that wait for the same lock, only one needs to wait on Redis. The
//! first whose call must wait takes the lock's seat and waits as any waiter does (announced,
//! blocked on the wake-up list, its round behind the wait); the others park here, in order,
//! costing Redis no command and holding no connection, until the seat is handed to them.
//! Whoever holds the seat keeps it across its waits and rounds until its call ends, then hands
//! it to the first parked thread, which goes on with a round at once (announcing itself, and
//! taking the lock if it is free). So the client's threads take the lock in turn, each
//! within a round trip or two of the release before it, and a thousand of them cost Redis
//! what one costs.
//!
//! Why this keeps every waiter's promise:
//! - every parked thread's call made a round first (refused: the lock was busy), and its
//!   announcement lets a release keep the lock for this client's waiters while it lives; the
//!   seated thread renews its own with each round;
//! - a parked thread still gives up at its own deadline, and still ends at once when its
//!   wake-up descriptor becomes readable (see [`crate::wake_on`]); it is never woken to find
//!   nothing, so the order is first come, first served within the client;
//! - where the seated call meets an outage (a round found too few nodes), the seat is given
//!   up and every parked thread goes on with its own round: each rides the outage, or reports
//!   it, on its own clock, as if it had never parked.
//!
//! A forked child gets a room of its own (the parent's seated threads are not in it).

use std::collections::HashMap;
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

use crate::process::PerProcess;
use crate::sync::{LocalCondvar, LocalGuard, LocalMutex};

/// How often a parked thread with a wake-up descriptor looks at it.
const LOOK: Duration = Duration::from_millis(50);

/// The waiting rooms of one client, by lock.
pub(crate) struct Rooms {
    lines: PerProcess<LocalMutex<HashMap<Vec<u8>, Line>>>,
}

/// The threads parked for one lock's seat, in order. A line in the map means the seat is
/// taken.
#[derive(Default)]
struct Line {
    parked: VecDeque<Arc<Parked>>,
}

/// One parked thread.
struct Parked {
    cv: LocalCondvar,
    /// [`WAITING`], [`HANDED`] or [`FREED`].
    state: AtomicU8,
}

/// Still parked.
const WAITING: u8 = 0;
/// The seat is this thread's.
const HANDED: u8 = 1;
/// The seat was given up: go on with a round, on your own.
const FREED: u8 = 2;

/// A call's place in its client's room for one lock: nowhere, parked, or in the seat (then
/// the call is its client's one waiter on Redis for the lock). Dropped in the seat, the seat
/// goes to the first parked thread; dropped parked, the call leaves the line.
pub(crate) struct Place<'a> {
    rooms: &'a Rooms,
    key: Vec<u8>,
    at: At,
}

enum At {
    Nowhere,
    Parked(Arc<Parked>),
    Seated,
}

/// How a call's turn to wait came.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Turn {
    /// The call holds the seat: wait on Redis now.
    Seated,
    /// The call may go on with a round now: the seat was handed to it (it holds it now) or
    /// given up, its deadline came, or its wake-up descriptor became readable.
    Go,
    /// The call is still parked, and its `look` period passed: check whether it was
    /// interrupted, then ask again.
    Look,
}

impl Rooms {
    pub(crate) fn new() -> Rooms {
        Rooms {
            lines: PerProcess::new(LocalMutex::new(HashMap::new())),
        }
    }

    fn lines(&self) -> LocalGuard<'_, HashMap<Vec<u8>, Line>> {
        self.lines.get(|_| LocalMutex::new(HashMap::new())).lock()
    }

    /// A place, nowhere yet, for a call on the lock `key`.
    pub(crate) fn place(&self, key: Vec<u8>) -> Place<'_> {
        Place {
            rooms: self,
            key,
            at: At::Nowhere,
        }
    }
}

impl Place<'_> {
    /// The call must wait for a release: it is seated when it holds the seat already or
    /// nobody does; otherwise it parks (or stays parked) until the seat is handed to it or
    /// given up, until `until`, until `woken` says its wake-up descriptor is readable (asked
    /// every [`LOOK`]), or for `look` at most.
    pub(crate) fn turn(
        &mut self,
        until: Option<Instant>,
        woken: Option<&dyn Fn() -> bool>,
        look: Option<Duration>,
    ) -> Turn {
        let mut lines = self.rooms.lines();
        let me = match &self.at {
            At::Seated => return Turn::Seated,
            At::Parked(me) => Arc::clone(me),
            At::Nowhere => {
                let Some(line) = lines.get_mut(&self.key) else {
                    lines.insert(self.key.clone(), Line::default());
                    self.at = At::Seated;
                    return Turn::Seated;
                };
                let me = Arc::new(Parked {
                    cv: LocalCondvar::new(),
                    state: AtomicU8::new(WAITING),
                });
                line.parked.push_back(Arc::clone(&me));
                self.at = At::Parked(Arc::clone(&me));
                me
            }
        };
        let look_until = look.map(|l| Instant::now() + l);
        loop {
            match me.state.load(Ordering::Acquire) {
                HANDED => {
                    self.at = At::Seated;
                    return Turn::Go;
                }
                FREED => {
                    self.at = At::Nowhere;
                    return Turn::Go;
                }
                _ => {}
            }
            let now = Instant::now();
            if until.is_some_and(|u| now >= u) || woken.is_some_and(|w| w()) {
                if let Some(line) = lines.get_mut(&self.key) {
                    line.parked.retain(|p| !Arc::ptr_eq(p, &me));
                }
                self.at = At::Nowhere;
                return Turn::Go;
            }
            if look_until.is_some_and(|l| now >= l) {
                return Turn::Look;
            }
            let next_look = woken.map(|_| now + LOOK);
            lines = match until.into_iter().chain(next_look).chain(look_until).min() {
                Some(at) => me.cv.wait_until(lines, at),
                None => me.cv.wait(lines),
            };
        }
    }

    /// Gives the seat up, if the call holds it, and lets every parked thread go on with its
    /// own round: the call met an outage, and each rides it, or reports it, on its own.
    pub(crate) fn free_all(&mut self) {
        if matches!(self.at, At::Seated) {
            self.leave(true);
        }
    }

    /// Leaves the room: the seat goes to the first parked thread (or, with `free_all`, every
    /// parked thread goes on); a parked call leaves the line, and hands the seat on when it
    /// was handed to it meanwhile.
    fn leave(&mut self, free_all: bool) {
        let at = std::mem::replace(&mut self.at, At::Nowhere);
        let mut lines = self.rooms.lines();
        let Some(line) = lines.get_mut(&self.key) else {
            return;
        };
        match at {
            At::Nowhere => return,
            At::Parked(me) => {
                line.parked.retain(|p| !Arc::ptr_eq(p, &me));
                if me.state.load(Ordering::Acquire) != HANDED {
                    return;
                }
            }
            At::Seated => {}
        }
        let next = match free_all {
            false => line.parked.pop_front(),
            true => None,
        };
        match next {
            Some(next) => {
                next.state.store(HANDED, Ordering::Release);
                next.cv.notify_one();
            }
            None => {
                for p in line.parked.drain(..) {
                    p.state.store(FREED, Ordering::Release);
                    p.cv.notify_one();
                }
                lines.remove(&self.key);
            }
        }
    }
}

impl Drop for Place<'_> {
    fn drop(&mut self) {
        self.leave(false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parked_len(rooms: &Rooms) -> usize {
        rooms.lines().get(&b"k"[..]).map_or(0, |l| l.parked.len())
    }

    /// The first waiter is seated; the next parks until the seat is handed to it, and holds
    /// it then; the lock's line is gone once nobody holds the seat.
    #[test]
    fn the_seat_goes_to_the_first_parked_thread() {
        let rooms = Arc::new(Rooms::new());
        let mut first = rooms.place(b"k".to_vec());
        assert_eq!(first.turn(None, None, None), Turn::Seated);
        let parked = {
            let rooms = Arc::clone(&rooms);
            std::thread::spawn(move || {
                let mut place = rooms.place(b"k".to_vec());
                let turn = place.turn(None, None, None);
                (turn, place.turn(None, None, None))
            })
        };
        while parked_len(&rooms) == 0 {
            std::thread::yield_now();
        }
        drop(first);
        assert_eq!(parked.join().unwrap(), (Turn::Go, Turn::Seated));
        assert!(rooms.lines().is_empty(), "a line outlived its last seat");
    }

    /// A parked thread ends at its deadline without the seat, and leaves the line; one that
    /// looks stays in it.
    #[test]
    fn a_parked_thread_leaves_at_its_deadline_and_keeps_its_place_when_it_looks() {
        let rooms = Rooms::new();
        let mut first = rooms.place(b"k".to_vec());
        first.turn(None, None, None);
        let mut place = rooms.place(b"k".to_vec());
        let look = Some(Duration::from_millis(5));
        assert_eq!(place.turn(None, None, look), Turn::Look);
        assert_eq!(parked_len(&rooms), 1);
        let until = Instant::now() + Duration::from_millis(20);
        assert_eq!(place.turn(Some(until), None, None), Turn::Go);
        assert_eq!(parked_len(&rooms), 0);
        assert!(matches!(place.at, At::Nowhere));
    }

    /// Freed, every parked thread goes on without the seat.
    #[test]
    fn freeing_the_seat_lets_every_parked_thread_go() {
        let rooms = Arc::new(Rooms::new());
        let mut first = rooms.place(b"k".to_vec());
        first.turn(None, None, None);
        let parked: Vec<_> = (0..3)
            .map(|_| {
                let rooms = Arc::clone(&rooms);
                std::thread::spawn(move || {
                    let mut place = rooms.place(b"k".to_vec());
                    let turn = place.turn(None, None, None);
                    (turn, matches!(place.at, At::Nowhere))
                })
            })
            .collect();
        while parked_len(&rooms) < 3 {
            std::thread::yield_now();
        }
        first.free_all();
        for p in parked {
            assert_eq!(p.join().unwrap(), (Turn::Go, true));
        }
        assert!(rooms.lines().is_empty());
    }
}
