//! Network calls that Ctrl-C can end.
//!
//! Python runs signal handlers only on the main thread, and only between bytecodes: a thread
//! blocked in a call into Rust never runs them. So on the main thread a call that may wait
//! (for Redis, or for the first connection to it) runs on a helper thread while this one runs
//! the handlers every `SIGNAL_CHECK`. On other threads no handler would ever run, so the call
//! runs in place.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::thread;
use std::time::Duration;

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;

/// The longest a blocking call waits without running Python's signal handlers, so that
/// Ctrl-C interrupts it well within 100 ms. It is also the lock's `wait_cap`: a waiter blocks
/// on Redis at most this long before it tries again.
pub(crate) const SIGNAL_CHECK: Duration = Duration::from_millis(50);

/// Runs `work` with the GIL released and returns what it returns, or the exception of a
/// signal handler (`KeyboardInterrupt`) that ran meanwhile: then `work` sees its flag set
/// and finishes on its own in the background (it must leave nothing held).
pub(crate) fn call<T: Send + 'static>(
    py: Python<'_>,
    work: impl FnOnce(&AtomicBool) -> T + Send + 'static,
) -> PyResult<T> {
    if !on_main_thread(py) {
        let cancel = AtomicBool::new(false);
        return Ok(py.detach(|| work(&cancel)));
    }
    let cancel = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&cancel);
    let (tx, mut rx) = mpsc::sync_channel(1);
    thread::Builder::new()
        .name("redmutex-call".into())
        .spawn(move || {
            // The caller may have gone (interrupted); then nobody needs the answer.
            let _ = tx.send(work(&flag));
        })
        .map_err(|e| PyRuntimeError::new_err(format!("cannot start a thread: {e}")))?;
    loop {
        // A Receiver is not Sync: it goes with the wait and comes back.
        let (answer, back) = py.detach(move || (rx.recv_timeout(SIGNAL_CHECK), rx));
        rx = back;
        match answer {
            Ok(value) => return Ok(value),
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if let Err(e) = py.check_signals() {
                    cancel.store(true, Ordering::SeqCst);
                    return Err(e);
                }
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                return Err(PyRuntimeError::new_err(
                    "redmutex: an internal error stopped the call",
                ));
            }
        }
    }
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
