//! Runs `on_lost` callables on a thread of their own.
//!
//! The core calls loss callbacks on its renew thread, which serves every lock of a client.
//! Calling Python there would make renewals wait for the interpreter (another thread may hold
//! the GIL for a long time), so the callback only queues the call here.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Mutex};

use pyo3::prelude::*;

use crate::gate::Gate;
use crate::sync::lock;

type Job = Box<dyn FnOnce() + Send + 'static>;

/// The callback thread's queue, and the process it runs in: a forked child inherits the
/// queue but not the thread, and starts its own.
static QUEUE: Mutex<Option<(u32, Sender<Job>)>> = Mutex::new(None);

/// Calls the callable in `cell` (if any) soon, with no arguments, on the callback thread,
/// unless `gate` is closed first (the acquisition it is about was released). An exception it
/// raises goes to `sys.unraisablehook` (printed by default); nothing is called once the
/// interpreter is shutting down.
pub(crate) fn call_soon(cell: Arc<Mutex<Option<Py<PyAny>>>>, gate: Arc<Gate>) {
    if lock(&cell).is_none() {
        return;
    }
    post(Box::new(move || gate.run(|| call(&cell))));
}

fn call(cell: &Mutex<Option<Py<PyAny>>>) {
    Python::try_attach(|py| {
        // Not called under the cell's lock: the call may run the garbage collector, whose
        // `__clear__` takes it.
        let callable = lock(cell).as_ref().map(|c| c.clone_ref(py));
        if let Some(callable) = callable
            && let Err(e) = callable.call0(py)
        {
            e.write_unraisable(py, Some(callable.bind(py)));
        }
    });
}

fn post(job: Job) {
    let pid = std::process::id();
    let mut queue = lock(&QUEUE);
    let job = match queue.as_ref() {
        Some((p, tx)) if *p == pid => match tx.send(job) {
            Ok(()) => return,
            // The thread is gone (it cannot be, short of a bug): start another.
            Err(mpsc::SendError(job)) => job,
        },
        _ => job,
    };
    let (tx, rx) = mpsc::channel::<Job>();
    let spawned = std::thread::Builder::new()
        .name("redmutex-on-lost".into())
        .spawn(move || {
            for job in rx {
                let _ = catch_unwind(AssertUnwindSafe(job));
            }
        });
    match spawned {
        Ok(_) => {
            // The receiver is alive, so this send cannot fail.
            let _ = tx.send(job);
            *queue = Some((pid, tx));
        }
        Err(_) => {
            // No thread to be had: run it here rather than lose it.
            drop(queue);
            let _ = catch_unwind(AssertUnwindSafe(job));
        }
    }
}
