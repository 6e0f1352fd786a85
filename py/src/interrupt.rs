//! Network calls that Ctrl-C can end.
//!
//! Python runs signal handlers only on the main thread, and only between bytecodes: a thread
//! blocked in a call into Rust never runs them. So on the main thread a call that may wait
//! (for Redis, or for the first connection to it) runs on a helper thread while this one runs
//! the handlers every `SIGNAL_CHECK`. On other threads no handler would ever run, so the call
//! runs in place.
//!
//! The helper is one thread kept for the next call: starting a thread per call costs more
//! than a round trip to a local Redis. A call takes it out of its slot and puts it back when
//! done, so a call that a signal handler makes meanwhile gets a helper of its own; an
//! interrupted call leaves its helper to finish the work in the background, and the next call
//! starts another. The helper waits for a release with a wake-up pipe (`redmutex::wake_on`)
//! that an interrupted call writes to: its wait ends at once rather than at the core's wait
//! cap, so the wait cap stays the core's (a waiting thread costs Redis one round per cap).
//!
//! The calling thread looks for the helper's answer for its first [`SPIN`] without sleeping
//! (giving the CPU away between looks), then sleeps on the channel. Most calls are one round
//! trip, and an answer found so spares a sleeping thread's wake-up, which on a loaded or
//! virtual machine costs tens of microseconds: in `make bench`, the Python uncontended row
//! went from 1.60× the Rust row to about 1.2× with it.

use std::io::{PipeWriter, Write};
use std::os::fd::AsFd;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;

use crate::sync::lock;

/// The longest a blocking call waits without running Python's signal handlers, so that
/// Ctrl-C interrupts it well within 100 ms.
pub(crate) const SIGNAL_CHECK: Duration = Duration::from_millis(50);

type Job = Box<dyn FnOnce() + Send + 'static>;

/// A helper thread, fed through its queue; it ends when the queue's sender is dropped.
struct Helper {
    /// The process that started it: a forked child inherits the slot but not the thread.
    pid: u32,
    jobs: Sender<Job>,
    /// The write end of the pipe that ends the helper's wait for a release: written once,
    /// by the call that was interrupted, which then lets the helper go.
    wake: PipeWriter,
}

/// The idle helper, if any.
static IDLE: Mutex<Option<Helper>> = Mutex::new(None);

impl Helper {
    /// The idle helper of this process, or a new one.
    fn take() -> PyResult<Helper> {
        let pid = std::process::id();
        let idle = lock(&IDLE).take();
        match idle {
            Some(h) if h.pid == pid => Ok(h),
            stale => {
                // Inherited from the parent process: its thread does not exist here, and its
                // queue's state is the parent's; leave it untouched.
                std::mem::forget(stale);
                Helper::start(pid)
            }
        }
    }

    fn start(pid: u32) -> PyResult<Helper> {
        let (jobs, queue) = mpsc::channel::<Job>();
        let (woken, wake) = std::io::pipe()
            .map_err(|e| PyRuntimeError::new_err(format!("cannot make a pipe: {e}")))?;
        thread::Builder::new()
            .name("redmutex-call".into())
            .spawn(move || {
                for job in queue {
                    // A panic drops the job's answer sender: its caller sees an error.
                    let _ = catch_unwind(AssertUnwindSafe(|| {
                        let mut job = Some(job);
                        let _ = redmutex::wake_on(woken.as_fd(), || job.take().map(|j| j()));
                        // The pipe could not be used (no descriptor left): wait as before.
                        if let Some(job) = job {
                            job();
                        }
                    }));
                }
            })
            .map_err(|e| PyRuntimeError::new_err(format!("cannot start a thread: {e}")))?;
        Ok(Helper { pid, jobs, wake })
    }

    /// Ends the helper's wait for a release now: its interrupted call needs it no more.
    fn wake(&self) {
        // A full pipe (it is written once) would mean it was woken already.
        let _ = (&self.wake).write(b"!");
    }

    /// Runs `job` on this helper, or on a new one if this one is gone (it cannot be, short
    /// of a bug).
    fn run(self, job: Job) -> PyResult<Helper> {
        match self.jobs.send(job) {
            Ok(()) => Ok(self),
            Err(mpsc::SendError(job)) => {
                let h = Helper::start(self.pid)?;
                h.jobs
                    .send(job)
                    .map_err(|_| PyRuntimeError::new_err("redmutex: the helper thread is gone"))?;
                Ok(h)
            }
        }
    }

    /// Back in the slot for the next call, unless a helper is there already (one that a call
    /// made from a signal handler started meanwhile): then this one ends.
    fn put_back(self) {
        let mut idle = lock(&IDLE);
        if idle.is_none() {
            *idle = Some(self);
        }
    }
}

/// Runs `work` with the GIL released and returns what it returns, or the exception of a
/// signal handler (`KeyboardInterrupt`) that ran meanwhile: then `work` sees its flag set
/// and finishes on its own in the background (it must leave nothing held). Off the main
/// thread, where no signal handler runs, `work` gets no flag: nothing can interrupt it.
pub(crate) fn call<T: Send + 'static>(
    py: Python<'_>,
    work: impl FnOnce(Option<&AtomicBool>) -> T + Send + 'static,
) -> PyResult<T> {
    if !on_main_thread(py) {
        return Ok(py.detach(|| work(None)));
    }
    let cancel = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&cancel);
    let (tx, mut rx) = mpsc::sync_channel(1);
    let helper = Helper::take()?.run(Box::new(move || {
        // The caller may have gone (interrupted); then nobody needs the answer.
        let _ = tx.send(work(Some(&flag)));
    }))?;
    let mut first = true;
    loop {
        // A Receiver is not Sync: it goes with the wait and comes back.
        let spin = std::mem::take(&mut first);
        let (answer, back) = py.detach(move || (answer_within(&rx, spin), rx));
        rx = back;
        match answer {
            Ok(value) => {
                helper.put_back();
                return Ok(value);
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if let Err(e) = py.check_signals() {
                    cancel.store(true, Ordering::SeqCst);
                    helper.wake();
                    // The helper finishes `work`, then ends: its queue closes here.
                    drop(helper);
                    return Err(e);
                }
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                helper.put_back();
                return Err(PyRuntimeError::new_err(
                    "redmutex: an internal error stopped the call",
                ));
            }
        }
    }
}

/// How long the calling thread keeps looking for the helper's answer, giving the CPU away
/// between looks, before it sleeps on the channel: most calls are one round trip to a healthy
/// server, and an answer found this way spares the wake-up of a sleeping thread (on a loaded
/// machine, tens of µs). A call that takes longer (a wait for a release) costs this much CPU
/// once.
const SPIN: Duration = Duration::from_micros(400);

/// The helper's answer within `SIGNAL_CHECK`; on a call's first look (`spin`), looked for
/// without sleeping for [`SPIN`] first.
fn answer_within<T>(rx: &mpsc::Receiver<T>, spin: bool) -> Result<T, mpsc::RecvTimeoutError> {
    if spin {
        let begun = std::time::Instant::now();
        while begun.elapsed() < SPIN {
            match rx.try_recv() {
                Ok(v) => return Ok(v),
                Err(mpsc::TryRecvError::Disconnected) => {
                    return Err(mpsc::RecvTimeoutError::Disconnected);
                }
                Err(mpsc::TryRecvError::Empty) => thread::yield_now(),
            }
        }
    }
    rx.recv_timeout(SIGNAL_CHECK)
}

/// Whether this is the thread that runs Python's signal handlers.
fn on_main_thread(py: Python<'_>) -> bool {
    let check = || -> PyResult<bool> {
        let threading = py.import("threading")?;
        let main = threading.call_method0("main_thread")?.getattr("ident")?;
        let me = threading.call_method0("get_ident")?;
        main.eq(me)
    };
    check().unwrap_or(false)
}
