//! Network calls that Ctrl-C can end, run on the calling thread.
//!
//! Python runs signal handlers only on the main thread, and only between bytecodes: a thread
//! blocked in a call into Rust never runs them. But Python's C-level handler writes the
//! signal's number to its wake-up descriptor (`signal.set_wakeup_fd`) the moment the signal
//! arrives. So a call on the main thread points that descriptor at a pipe of this module for
//! the rest of the call once it lasts (20 ms), or once it is about to wait for a release, and
//! from then on every network wait watches the pipe (`redmutex::wake_on_checked_after`): each
//! read of a reply, each connect, each wait for a release. When a signal comes, the wait runs
//! the handlers (`PyErr_CheckSignals`); they run once at that setting-up too, for a signal
//! that came before. When one raised (`KeyboardInterrupt`), the call stops at once: its round
//! counts as one whose time ran out, its clean-up goes to the background, and the exception
//! is raised. Otherwise the wait goes on. No helper thread, no periodic check: a call that
//! ends within a round trip or two sets nothing up and costs what the Rust call costs, and
//! the waits keep the core's wait cap.
//!
//! On other threads no handler would ever run, so the call runs as it is. The descriptor that
//! was set before the call (an asyncio loop's) is set back after it, and the signal numbers
//! the call's pipe took in are passed on to it.

use std::cell::{Cell, RefCell};
use std::io::PipeWriter;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;

use crate::sync::lock;

/// The longest a blocking call waits without running Python's signal handlers where it
/// cannot watch the signal pipe (a wait for a lock's loss), so that Ctrl-C interrupts it
/// well within 100 ms.
pub(crate) const SIGNAL_CHECK: Duration = Duration::from_millis(50);

/// This process's signal pipe and main thread: found on first use, and anew in a forked
/// child (which must not share its parent's pipe, and whose main thread is the one that
/// forked).
static PROCESS: Mutex<Option<Process>> = Mutex::new(None);

struct Process {
    pid: u32,
    /// The main thread's id (`threading.main_thread().ident`).
    main: u64,
    /// The read end, shared with each call's waits as it is (no duplicate per call).
    reader: Arc<OwnedFd>,
    writer: Arc<PipeWriter>,
}

type Ends = (Arc<OwnedFd>, Arc<PipeWriter>);

impl Process {
    /// The pipe's ends, when `me` is the main thread.
    fn ends_for(&self, me: u64) -> Option<Ends> {
        (me == self.main).then(|| (Arc::clone(&self.reader), Arc::clone(&self.writer)))
    }
}

/// The signal pipe's ends (both non-blocking: Python requires it of a wake-up descriptor)
/// when this is the thread that runs Python's signal handlers; `None` on other threads.
/// Looked up per call at the cost of one `getpid`.
fn signal_pipe(py: Python<'_>) -> PyResult<Option<Ends>> {
    let pid = std::process::id();
    // SAFETY: takes no argument and only reads the calling thread's id.
    #[allow(clippy::useless_conversion)] // a `c_ulong`: 32 bits on some platforms
    let me = u64::from(unsafe { pyo3::ffi::PyThread_get_thread_ident() });
    if let Some(p) = lock(&PROCESS).as_ref().filter(|p| p.pid == pid) {
        return Ok(p.ends_for(me));
    }
    // Asked with no lock held: Python code may let other threads run meanwhile.
    let Ok(main) = main_thread(py) else {
        return Ok(None);
    };
    let fail = |e: std::io::Error| PyRuntimeError::new_err(format!("cannot make a pipe: {e}"));
    let mut slot = lock(&PROCESS);
    if let Some(p) = slot.as_ref().filter(|p| p.pid == pid) {
        return Ok(p.ends_for(me));
    }
    let (reader, writer) = std::io::pipe().map_err(fail)?;
    for fd in [reader.as_fd(), writer.as_fd()] {
        rustix::io::ioctl_fionbio(fd, true).map_err(|e| fail(e.into()))?;
    }
    let p = Process {
        pid,
        main,
        reader: Arc::new(reader.into()),
        writer: Arc::new(writer),
    };
    let ends = p.ends_for(me);
    // A parent's pipe, inherited through fork, stays open: the parent still uses it.
    std::mem::forget(slot.replace(p));
    Ok(ends)
}

/// `threading.main_thread().ident`: the thread that runs Python's signal handlers.
fn main_thread(py: Python<'_>) -> PyResult<u64> {
    py.import("threading")?
        .call_method0("main_thread")?
        .getattr("ident")?
        .extract()
}

/// Reads what the pipe holds (the numbers of the signals that came) into `into`.
fn drain(reader: &OwnedFd, into: &mut Vec<u8>) {
    let mut buf = [0u8; 64];
    loop {
        match rustix::io::read(reader, &mut buf) {
            Ok(0) => return,
            Ok(n) => into.extend_from_slice(&buf[..n]),
            Err(rustix::io::Errno::INTR) => {}
            Err(_) => return,
        }
    }
}

/// `signal.set_wakeup_fd(fd)`: the descriptor set before. Called positionally (no keyword
/// dictionary to build per call): `warn_on_full_buffer` is then Python's default, which only
/// matters for a pipe left unread (a call's pipe is read at each of its waits).
fn set_wakeup_fd(py: Python<'_>, fd: RawFd) -> PyResult<RawFd> {
    static SET: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    let set = SET.get_or_try_init(py, || {
        PyResult::Ok(py.import("signal")?.getattr("set_wakeup_fd")?.unbind())
    })?;
    set.bind(py).call1((fd,))?.extract()
}

/// How long a call on the main thread runs before its signal pipe is set up: a call that
/// ends sooner (on a healthy server, every call that waits for no release) never sets it
/// up, and a signal that comes meanwhile is handled at the latest then (see
/// `redmutex::wake_on_checked_after`), well within 100 ms.
const ARM_AFTER: Duration = Duration::from_millis(20);

/// Runs `work` with the GIL released and returns what it returns, or the exception of a
/// signal handler (`KeyboardInterrupt`) that ran meanwhile: then `work` sees its flag set
/// (its call's interrupt check) and ends at once, keeping nothing. Off the main thread,
/// where no signal handler runs, `work` gets no flag: nothing can interrupt it.
pub(crate) fn call<T: Send>(
    py: Python<'_>,
    work: impl FnOnce(Option<&AtomicBool>) -> T + Send,
) -> PyResult<T> {
    let Some((reader, writer)) = signal_pipe(py)? else {
        return Ok(py.detach(|| work(None)));
    };
    // Signals that came before the call: their handlers run now.
    py.check_signals()?;
    // One allocation per call, shared by its arming and its check.
    let watch = Rc::new(Watch {
        reader,
        writer,
        stop: AtomicBool::new(false),
        raised: RefCell::new(None),
        taken: RefCell::new(Vec::new()),
        before: Cell::new(None),
    });
    let arm = {
        let watch = Rc::clone(&watch);
        move || {
            let reader = watch.arm()?;
            Some((reader, move || watch.go_on()))
        }
    };
    let flag = &watch.stop;
    let done = redmutex::wake_on_checked_after(ARM_AFTER, arm, || py.detach(|| work(Some(flag))));
    // A handler may have run in Python code the call ran (a log record's), and raised there.
    if let Some(e) = pending(py) {
        watch.raised.borrow_mut().get_or_insert(e);
    }
    if let Some(before) = watch.before.get() {
        restore(py, before, &watch.reader, watch.taken.take())?;
    }
    match watch.raised.take() {
        Some(e) => Err(e),
        None => Ok(done),
    }
}

/// What a call on the main thread shares with its arming and its check.
struct Watch {
    reader: Arc<OwnedFd>,
    writer: Arc<PipeWriter>,
    /// The check said stop: the call's interrupt check.
    stop: AtomicBool,
    /// The exception a handler raised.
    raised: RefCell<Option<PyErr>>,
    /// The signal numbers the pipe took in.
    taken: RefCell<Vec<u8>>,
    /// The descriptor set before the call's, once the call's is set (armed).
    before: Cell<Option<RawFd>>,
}

impl Watch {
    /// Points Python's wake-up descriptor at the pipe: its read end, to watch. `None` when
    /// this is not the main interpreter's main thread after all: no handler runs here, and
    /// there is nothing to watch.
    fn arm(&self) -> Option<Arc<OwnedFd>> {
        let set = Python::attach(|py| set_wakeup_fd(py, self.writer.as_raw_fd())).ok()?;
        self.before.set(Some(set));
        Some(Arc::clone(&self.reader))
    }

    /// The check: drains the pipe and runs the signal handlers; `false` (stop) when one
    /// raised.
    fn go_on(&self) -> bool {
        drain(&self.reader, &mut self.taken.borrow_mut());
        match Python::attach(|py| pending(py).map_or_else(|| py.check_signals(), Err)) {
            Ok(()) => true,
            Err(e) => {
                *self.raised.borrow_mut() = Some(e);
                self.stop.store(true, Ordering::SeqCst);
                false
            }
        }
    }
}

/// Sets the descriptor `before` back, as it was before the call set its own, and tells it of
/// the signals this call's pipe took in. With none before, what the pipe holds now stays
/// there: the next call's first wait finds it and runs the handlers (which Python runs
/// anyway at its next instruction).
fn restore(py: Python<'_>, before: RawFd, reader: &OwnedFd, mut taken: Vec<u8>) -> PyResult<()> {
    let restored = set_wakeup_fd(py, before);
    if before >= 0 {
        drain(reader, &mut taken);
        if !taken.is_empty() {
            // SAFETY: `before` is the open descriptor Python had; it is only written to here.
            let before = unsafe { BorrowedFd::borrow_raw(before) };
            let _ = rustix::io::write(before, &taken);
        }
    }
    restored.map(drop)
}

/// The exception left set by Python code that the call ran on this thread: the library's log
/// records go to Python's `logging`, where a signal's handler may run and raise, and the
/// logging bridge leaves that exception set for its caller.
fn pending(py: Python<'_>) -> Option<PyErr> {
    PyErr::take(py)
}
