//! A file descriptor whose readability ends the calling thread's waits at once (see
//! [`crate::wake_on`] and [`crate::wake_on_checked`]): typically the read end of the self-pipe
//! a signal handler writes to. A thread-local setting, so that every kind of lock honours it
//! with no argument added to each call. The thread keeps the descriptor open while the setting
//! lasts.
//!
//! Two strengths:
//! - **waits only** (`wake_on`): a wait for a release ends when the descriptor is readable,
//!   and the call's interrupt check decides what comes next. A round's reads run to their
//!   deadline as always.
//! - **every wait** (`wake_on_checked`, with a check): also every read of a reply, every
//!   connect on this thread, and the threads this thread starts to connect for its round
//!   (which watch a flag instead: they have no descriptor of their own). The descriptor being
//!   readable asks the check; when it says stop, the setting stops for good: every later wait
//!   of the scope ends at once, as if its deadline had passed, so the call's round is treated
//!   as one whose time ran out (its unread nodes undone behind their requests, or by a
//!   clean-up in the background) and the call ends quickly whatever its servers do.
//!
//! A setting of the second kind may also start **unarmed** (`scoped_later`), for a binding
//! that must set its descriptor up for each call (Python's `signal.set_wakeup_fd`): nothing
//! is watched, and nothing set up, until the call has lasted its grace (a connect then waits
//! on its socket alone, at most until then; a read, by itself with the grace as the kernel's
//! timeout, so that a reply costs no `poll` before it) or until it is about to wait for
//! anything else (a release, a pause, the threads that connect for it). Then the binding's
//! arming sets the descriptor up, and its check runs once at once, for the signals that came
//! before the descriptor was there. A call that ends within its grace (on a healthy server,
//! any call that waits for no release) costs no more than an unwatched one.

use std::cell::{Cell, RefCell};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use super::poll;

/// How often a thread that watches a flag rather than a descriptor (one started to connect
/// for a watching call) looks at it, and how often a watching thread that waits for such
/// threads looks at its descriptor between their ends.
const SLICE: Duration = Duration::from_millis(5);

/// Asked when the descriptor is readable during a watched wait: `true` when it drained the
/// descriptor and the wait goes on, `false` to stop.
pub(crate) type GoOn = Box<dyn FnMut() -> bool>;

/// Sets a descriptor up, when an unarmed setting is armed: the descriptor, watched from then
/// on, and its check; `None` when this thread has nothing to watch after all.
pub(crate) type Arm = Box<dyn FnOnce() -> Option<(Arc<OwnedFd>, GoOn)>>;

/// This thread's setting.
struct Wake {
    fd: Arc<OwnedFd>,
    /// With a check, every wait is watched; without, waits for a release only.
    go_on: Option<RefCell<GoOn>>,
    /// The check said stop; shared with the threads started for the call.
    stopped: Arc<AtomicBool>,
}

enum Setting {
    /// A descriptor of this thread's own.
    Own(Rc<Wake>),
    /// A thread started for a watching call: it watches that call's stop flag.
    Helping(Arc<AtomicBool>),
    /// Not armed yet (see the module's doc).
    Later(Later),
}

/// An unarmed setting: armed at `at`, or before when a wait other than a read needs it.
struct Later {
    at: Instant,
    /// How long after the scope began `at` is.
    grace: Duration,
    /// Taken while arming.
    arm: Cell<Option<Arm>>,
}

thread_local! {
    static SETTING: RefCell<Option<Rc<Setting>>> = const { RefCell::new(None) };
}

fn with_setting<R>(setting: Option<Rc<Setting>>, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<Rc<Setting>>);
    impl Drop for Restore {
        fn drop(&mut self) {
            SETTING.set(self.0.take());
        }
    }
    let _restore = Restore(SETTING.replace(setting));
    f()
}

fn current() -> Option<Rc<Setting>> {
    SETTING.with_borrow(Clone::clone)
}

/// Runs `f` with `fd` as this thread's wake-up descriptor, then restores the one before:
/// watching waits for a release only, or every wait with `go_on`.
pub(crate) fn scoped<R>(fd: Arc<OwnedFd>, go_on: Option<GoOn>, f: impl FnOnce() -> R) -> R {
    let wake = Wake {
        fd,
        go_on: go_on.map(RefCell::new),
        stopped: Arc::new(AtomicBool::new(false)),
    };
    with_setting(Some(Rc::new(Setting::Own(Rc::new(wake)))), f)
}

/// Runs `f` with a setting that watches every wait once armed (see the module's doc): `arm`
/// runs at the latest `grace` into the scope, and only if a wait of `f` is still going on
/// then.
pub(crate) fn scoped_later<R>(grace: Duration, arm: Arm, f: impl FnOnce() -> R) -> R {
    let later = Later {
        at: Instant::now() + grace,
        grace,
        arm: Cell::new(Some(arm)),
    };
    with_setting(Some(Rc::new(Setting::Later(later))), f)
}

/// Arms `later`, this thread's setting: what its arming gives becomes the setting for the
/// rest of the scope, and the check runs once. A wait inside the arming finds it taken, and
/// the setting still unarmed.
fn arm(later: &Later) {
    let Some(arm) = later.arm.take() else {
        return;
    };
    let armed = arm().map(|(fd, go_on)| {
        Rc::new(Wake {
            fd,
            go_on: Some(RefCell::new(go_on)),
            stopped: Arc::new(AtomicBool::new(false)),
        })
    });
    SETTING.set(armed.clone().map(|w| Rc::new(Setting::Own(w))));
    if let Some(w) = armed {
        w.check();
    }
}

/// This thread's setting, armed first if it was not (see the module's doc).
fn armed() -> Option<Rc<Setting>> {
    armed_if(|_| true)
}

/// This thread's setting, armed first if it was not and its time has come.
fn armed_when_due() -> Option<Rc<Setting>> {
    armed_if(|later| Instant::now() >= later.at)
}

fn armed_if(now: impl FnOnce(&Later) -> bool) -> Option<Rc<Setting>> {
    let setting = current();
    match setting.as_deref() {
        Some(Setting::Later(later)) if now(later) => {
            arm(later);
            current()
        }
        _ => setting,
    }
}

impl AsFd for Wake {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl Wake {
    /// Whether the check runs now (this is a wait inside it).
    fn checking(&self) -> bool {
        self.go_on
            .as_ref()
            .is_some_and(|g| g.try_borrow_mut().is_err())
    }

    /// Whether the waits of this scope stop now: the check said so earlier, or the
    /// descriptor is readable and the check (if any) says so.
    fn stop(&self) -> bool {
        if self.stopped.load(Ordering::SeqCst) {
            return true;
        }
        poll::readable_now(self) && self.check()
    }

    /// Asks the check (if any), whether or not the descriptor is readable: `true` when it
    /// says stop.
    fn check(&self) -> bool {
        let Some(go_on) = &self.go_on else {
            return true;
        };
        // A check runs already (it may run user code that calls the library): a wait inside
        // it is not ended by the descriptor it answers for.
        let Ok(mut go_on) = go_on.try_borrow_mut() else {
            return false;
        };
        let go = go_on();
        if !go {
            self.stopped.store(true, Ordering::SeqCst);
        }
        !go
    }
}

/// This thread's wake-up descriptor, if it has one (armed now if it was not: a wait for a
/// release asks).
pub(super) fn fd() -> Option<WakeFd> {
    match armed().as_deref() {
        Some(Setting::Own(w)) => Some(WakeFd(Rc::clone(w))),
        _ => None,
    }
}

/// This thread's wake-up descriptor when it watches every wait (reads too), once armed.
pub(super) fn watched_fd() -> Option<WakeFd> {
    match armed_when_due().as_deref() {
        Some(Setting::Own(w)) if w.go_on.is_some() => Some(WakeFd(Rc::clone(w))),
        _ => None,
    }
}

/// When this thread's unarmed setting falls due: a wait on sockets alone ends then.
pub(super) fn due() -> Option<Instant> {
    match current().as_deref() {
        Some(Setting::Later(later)) => Some(later.at),
        _ => None,
    }
}

/// The grace of this thread's setting while it is unarmed and not due yet: a read then waits
/// on its socket alone, this long at most (see `socket.rs`), before the setting is armed. So
/// the setting is armed one grace after it fell due at the latest.
pub(super) fn unarmed_grace() -> Option<Duration> {
    match current().as_deref() {
        Some(Setting::Later(later)) if Instant::now() < later.at => Some(later.grace),
        _ => None,
    }
}

/// Arms this thread's setting now if it is unarmed: a signal interrupted a wait on a socket
/// alone, and its handler may want the call to stop.
pub(super) fn arm_now() {
    armed();
}

/// Whether this thread watches every wait and its waits stop now: a round's reads end.
pub(super) fn reads_stop() -> bool {
    watches() && stops(armed_when_due())
}

/// A thread's wake-up descriptor, kept open while it is held.
pub(super) struct WakeFd(Rc<Wake>);

impl AsFd for WakeFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

/// Whether this thread has a wake-up descriptor (armed or not).
pub(crate) fn is_set() -> bool {
    matches!(
        current().as_deref(),
        Some(Setting::Own(_) | Setting::Later(_))
    )
}

/// Whether this thread's waits stop now (see the module's doc): `false` when it has no
/// setting. Asks the check when the descriptor is readable. For a wait for a release: an
/// unarmed setting is armed first.
pub(crate) fn woken_now() -> bool {
    stops(armed())
}

fn stops(setting: Option<Rc<Setting>>) -> bool {
    match setting.as_deref() {
        Some(Setting::Own(w)) => w.stop(),
        Some(Setting::Helping(stopped)) => stopped.load(Ordering::SeqCst),
        Some(Setting::Later(_)) | None => false,
    }
}

/// Whether a check said stop in this thread's scope: the call's clean-up then goes to the
/// background rather than wait on its servers.
pub(crate) fn stopped() -> bool {
    match current().as_deref() {
        Some(Setting::Own(w)) => w.stopped.load(Ordering::SeqCst),
        Some(Setting::Helping(stopped)) => stopped.load(Ordering::SeqCst),
        Some(Setting::Later(_)) | None => false,
    }
}

/// The setting of a thread started for this thread's call (to connect on): it watches this
/// one's stop flag. `None` when this thread does not watch every wait.
pub(super) fn for_helper() -> Option<Arc<AtomicBool>> {
    match armed().as_deref() {
        Some(Setting::Own(w)) if w.go_on.is_some() => Some(Arc::clone(&w.stopped)),
        Some(Setting::Helping(stopped)) => Some(Arc::clone(stopped)),
        _ => None,
    }
}

/// Runs `f` on a thread started for a watching call (see [`for_helper`]).
pub(super) fn helping<R>(stopped: Option<Arc<AtomicBool>>, f: impl FnOnce() -> R) -> R {
    match stopped {
        Some(s) => with_setting(Some(Rc::new(Setting::Helping(s))), f),
        None => f(),
    }
}

/// Whether this thread watches every wait (reads and connects too).
pub(super) fn watches() -> bool {
    watching().is_some()
}

fn watching() -> Option<Rc<Setting>> {
    current().filter(|s| match &**s {
        Setting::Own(w) => w.go_on.is_some(),
        Setting::Helping(_) | Setting::Later(_) => true,
    })
}

/// The error of a watched wait that stopped or ran out: a timeout, as the wait's own.
fn timed_out() -> io::Error {
    io::Error::new(
        io::ErrorKind::TimedOut,
        "the wait was ended (interrupted, or timed out)",
    )
}

/// Before a blocking read of `socket` (or a connect, `write`: its end) that may wait up to
/// `timeout`: on a watching thread, waits until it can go on at once, and fails as a timeout
/// when the wait stops or `timeout` passes first. On other threads, returns at once.
pub(super) fn ready(
    socket: BorrowedFd<'_>,
    write: bool,
    timeout: impl FnOnce() -> io::Result<Option<Duration>>,
) -> io::Result<()> {
    let Some(mut setting) = watching() else {
        return Ok(());
    };
    let until = timeout()?.map(|t| Instant::now() + t);
    loop {
        let left = until.map(|u| u.saturating_duration_since(Instant::now()));
        if left.is_some_and(|l| l.is_zero()) {
            return Err(timed_out());
        }
        match &*setting {
            Setting::Later(later) => {
                // Unarmed: the socket alone, until the setting falls due. Then, or when a
                // signal interrupted the wait (its handler may want the call to stop), the
                // setting is armed and the wait goes on watched.
                let due = later.at.saturating_duration_since(Instant::now());
                if poll::fd_ready(socket, write, left.map_or(due, |l| l.min(due))) {
                    return Ok(());
                }
                arm(later);
                match watching() {
                    Some(s) if !Rc::ptr_eq(&s, &setting) => setting = s,
                    // Nothing to watch after all, or arming runs already (a wait inside it).
                    _ => return Ok(()),
                }
            }
            Setting::Own(w) => {
                // The descriptor is polled with the socket, and the check asked only when
                // it is readable: a read whose reply is there costs one `poll`.
                if w.stopped.load(Ordering::SeqCst) {
                    return Err(timed_out());
                }
                if w.checking() {
                    // A wait inside the check: the descriptor is not its to watch.
                    match left {
                        None => return Ok(()),
                        Some(l) if poll::fd_ready(socket, write, l) => return Ok(()),
                        Some(_) => continue,
                    }
                }
                match poll::fd_or(socket, write, &**w, left) {
                    poll::Either::Socket => return Ok(()),
                    poll::Either::TimedOut => return Err(timed_out()),
                    poll::Either::Woken if w.stop() => return Err(timed_out()),
                    // Drained by the check, or a signal interrupted the poll: wait on.
                    poll::Either::Woken => {}
                }
            }
            Setting::Helping(stopped) => {
                if stopped.load(Ordering::SeqCst) {
                    return Err(timed_out());
                }
                let slice = left.map_or(SLICE, |l| l.min(SLICE));
                if poll::fd_ready(socket, write, slice) {
                    return Ok(());
                }
            }
        }
    }
}

/// On a thread that watches every wait, waits until `done()` or the wait stops, looking at
/// `done` every few milliseconds: before joining threads that connect for this one (they
/// stop on their own once this one's check said stop). Elsewhere returns at once.
pub(super) fn until_done(done: impl Fn() -> bool) {
    let Some(setting) = armed() else {
        return;
    };
    let Setting::Own(w) = &*setting else {
        return;
    };
    while !done() && !w.stop() {
        poll::fd_ready(w.as_fd(), false, SLICE);
    }
}

/// The next message on `rx`, `None` once it is closed; on a thread that watches every wait,
/// also `None` once its waits stop (looked at every few milliseconds).
pub(super) fn recv<T>(rx: &Receiver<T>) -> Option<T> {
    if !watches() {
        return rx.recv().ok();
    }
    loop {
        match rx.recv_timeout(SLICE) {
            Ok(v) => return Some(v),
            Err(RecvTimeoutError::Disconnected) => return None,
            Err(RecvTimeoutError::Timeout) if reads_stop() => return None,
            Err(RecvTimeoutError::Timeout) => {}
        }
    }
}

/// Sleeps for `pause`; on a thread with a wake-up descriptor, ends early when its waits stop.
pub(crate) fn sleep(pause: Duration) {
    let Some(setting) = armed() else {
        return std::thread::sleep(pause);
    };
    let until = Instant::now() + pause;
    loop {
        if woken_now() {
            return;
        }
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return;
        }
        match &*setting {
            Setting::Own(w) => {
                poll::fd_ready(w.as_fd(), false, left);
            }
            Setting::Helping(_) => std::thread::sleep(left.min(SLICE)),
            // Arming runs already (a sleep inside it): nothing to watch.
            Setting::Later(_) => return std::thread::sleep(left),
        }
    }
}
