//! One acquisition's on-lost gate: after `close` returns, its `on_lost` call is not running
//! and never starts, so `release()` means what it says.

use std::cell::RefCell;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::sync::lock;

/// Opened when a lock is acquired, closed when that acquisition is released or dropped.
///
/// The call runs on the callback thread while holding `running`, and `close` waits for it,
/// so whoever closes must not hold the GIL (the call needs it). A call that closes its own
/// gate (its callable released or dropped the Lock) does not wait for itself.
pub(crate) struct Gate {
    armed: AtomicBool,
    running: Mutex<()>,
}

thread_local! {
    /// The gates whose calls this thread is running now, innermost last.
    static INSIDE: RefCell<Vec<*const Gate>> = const { RefCell::new(Vec::new()) };
}

impl Gate {
    pub(crate) fn new() -> Gate {
        Gate {
            armed: AtomicBool::new(true),
            running: Mutex::new(()),
        }
    }

    fn is_inside(&self) -> bool {
        INSIDE.with(|inside| inside.borrow().contains(&std::ptr::from_ref(self)))
    }

    /// Runs `call` unless the gate was closed.
    pub(crate) fn run(&self, call: impl FnOnce()) {
        let _running = lock(&self.running);
        if self.armed.load(Ordering::SeqCst) {
            INSIDE.with(|inside| inside.borrow_mut().push(std::ptr::from_ref(self)));
            call();
            INSIDE.with(|inside| inside.borrow_mut().pop());
        }
    }

    /// No call starts after this, and none is running when it returns (but the one this
    /// thread is inside of, if any).
    pub(crate) fn close(&self) {
        self.disarm();
        if !self.is_inside() {
            drop(lock(&self.running));
        }
    }

    /// No call starts after this; one that is running may go on.
    pub(crate) fn disarm(&self) {
        self.armed.store(false, Ordering::SeqCst);
    }
}
