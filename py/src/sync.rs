//! The one way this crate locks a `std::sync::Mutex`.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locks `m`; a panic elsewhere while it was held leaves nothing half-done here.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}
