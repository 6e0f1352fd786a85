//! The native module `redmutex._redmutex`; the public Python API is re-exported by the
//! `redmutex` package in `py/python/redmutex/`, and described in its type stubs.
//!
//! Every call that may wait or touch the network runs with the GIL released, and every
//! locking decision is the core crate's: this crate only converts arguments, errors and
//! threads.

mod aio;
mod args;
mod callbacks;
mod client;
mod errors;
mod gate;
mod interrupt;
mod lease;
mod lock;
mod operate;
mod rwlock;
mod semaphore;
mod source;
mod stats;
mod status;
mod sync;

use pyo3::prelude::*;

/// Native part of the `redmutex` package.
#[pymodule]
fn _redmutex(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    // The library's log records go to Python's `logging`, under the logger "redmutex" (its
    // children name the module: "redmutex.net.node"). Levels are looked up at each record,
    // not cached, so `logging.getLogger("redmutex").setLevel(...)` takes effect at once; the
    // library logs only on failure paths, so the GIL this takes costs nothing on the hot path.
    // Another extension of the process may have taken Rust's one global logger first: then
    // the records go there.
    let _ = pyo3_log::Logger::new(m.py(), pyo3_log::Caching::Loggers)?.install();
    m.add_class::<client::Client>()?;
    m.add_class::<lock::Lock>()?;
    m.add_class::<status::LockStatus>()?;
    m.add_class::<semaphore::Semaphore>()?;
    m.add_class::<status::SemaphoreStatus>()?;
    m.add_class::<rwlock::RwLock>()?;
    m.add_class::<rwlock::ReadLock>()?;
    m.add_class::<rwlock::WriteLock>()?;
    m.add_class::<status::RwLockStatus>()?;
    m.add_class::<stats::ClientStats>()?;
    m.add_class::<stats::Histogram>()?;
    m.add_class::<stats::Outcomes>()?;
    m.add_class::<operate::ListedLock>()?;
    m.add_class::<operate::ListedHold>()?;
    m.add_class::<aio::Canceller>()?;
    m.add_class::<aio::Grant>()?;
    errors::register(m)?;
    Ok(())
}
