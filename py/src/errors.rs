//! The exception hierarchy, and the mapping from core error kinds to it.
//!
//! ```text
//! LockError(Exception)
//! ├── LockLostError
//! ├── NoQuorumError
//! ├── LockConnectionError   (also a builtin ConnectionError)
//! ├── AuthenticationError
//! ├── NotHeldError          (also a RuntimeError, as threading.Lock.release raises)
//! └── ServerError
//! ```
//!
//! Bad arguments raise the builtin `TypeError`/`ValueError`; an interrupted wait re-raises
//! what the signal handler raised (`KeyboardInterrupt` for Ctrl-C).

use pyo3::create_exception;
use pyo3::exceptions::{
    PyConnectionError, PyException, PyKeyboardInterrupt, PyRuntimeError, PyValueError,
};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyTuple, PyType};
use redmutex::ErrorKind;

create_exception!(
    redmutex,
    LockError,
    PyException,
    "Base class of the errors redmutex raises (bad arguments raise TypeError or ValueError)."
);
create_exception!(
    redmutex,
    LockLostError,
    LockError,
    "The lock was lost: it expired, or another owner's value replaced ours. Raised by check(), \
     release(), extend() and the fence property once the lease is gone; another process may \
     hold the lock now."
);
create_exception!(
    redmutex,
    NoQuorumError,
    LockError,
    "Fewer than a majority of the nodes answered or agreed (Redlock with several nodes). The \
     message lists what each node said."
);
create_exception!(
    redmutex,
    AuthenticationError,
    LockError,
    "A Redis node refused the credentials (WRONGPASS, NOAUTH, NOPERM)."
);
create_exception!(
    redmutex,
    ServerError,
    LockError,
    "A Redis node answered with an error (for example OOM, READONLY, or WRONGTYPE when the \
     lock's key holds something else)."
);

static CONNECTION_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static NOT_HELD_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();

/// `class <name>(LockError, <builtin>)`: `create_exception!` takes one base only.
fn with_builtin_base(
    py: Python<'_>,
    name: &str,
    builtin: Bound<'_, PyType>,
    doc: &str,
) -> PyResult<Py<PyType>> {
    let dict = PyDict::new(py);
    dict.set_item("__module__", "redmutex")?;
    dict.set_item("__doc__", doc)?;
    let bases = PyTuple::new(py, [py.get_type::<LockError>(), builtin])?;
    let ty = py.get_type::<PyType>().call1((name, bases, dict))?;
    Ok(ty.cast_into::<PyType>()?.unbind())
}

/// `LockConnectionError(LockError, ConnectionError)`.
pub(crate) fn connection_error(py: Python<'_>) -> PyResult<&Bound<'_, PyType>> {
    CONNECTION_ERROR
        .get_or_try_init(py, || {
            with_builtin_base(
                py,
                "LockConnectionError",
                py.get_type::<PyConnectionError>(),
                "A Redis node could not be reached, or the connection broke or timed out. Also \
                 a builtin ConnectionError.",
            )
        })
        .map(|t| t.bind(py))
}

/// `NotHeldError(LockError, RuntimeError)`.
pub(crate) fn not_held_error(py: Python<'_>) -> PyResult<&Bound<'_, PyType>> {
    NOT_HELD_ERROR
        .get_or_try_init(py, || {
            with_builtin_base(
                py,
                "NotHeldError",
                py.get_type::<PyRuntimeError>(),
                "This Lock does not hold the lock: it was never acquired, was already released, \
                 or was inherited through fork. Also a RuntimeError, like releasing an \
                 unlocked threading.Lock.",
            )
        })
        .map(|t| t.bind(py))
}

/// An exception of a type made at run time, falling back to `LockError` if it could not be.
fn raise(ty: PyResult<&Bound<'_, PyType>>, msg: String) -> PyErr {
    match ty {
        Ok(ty) => PyErr::from_type(ty.clone(), msg),
        Err(_) => LockError::new_err(msg),
    }
}

/// `NotHeldError(msg)`.
pub(crate) fn not_held(py: Python<'_>, msg: impl Into<String>) -> PyErr {
    raise(not_held_error(py), msg.into())
}

/// The Python exception for a core error.
pub(crate) fn to_py(py: Python<'_>, e: redmutex::Error) -> PyErr {
    let msg = e.to_string();
    match e.kind() {
        ErrorKind::InvalidArgument => PyValueError::new_err(msg),
        ErrorKind::Lost => LockLostError::new_err(msg),
        ErrorKind::NoQuorum => NoQuorumError::new_err(msg),
        ErrorKind::NotHeld => not_held(py, msg),
        ErrorKind::Connection => raise(connection_error(py), msg),
        ErrorKind::Auth => AuthenticationError::new_err(msg),
        ErrorKind::Server => ServerError::new_err(msg),
        ErrorKind::Interrupted => PyKeyboardInterrupt::new_err(msg),
        _ => LockError::new_err(msg),
    }
}

/// Adds the exception classes to the module.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("LockError", py.get_type::<LockError>())?;
    m.add("LockLostError", py.get_type::<LockLostError>())?;
    m.add("NoQuorumError", py.get_type::<NoQuorumError>())?;
    m.add("LockConnectionError", connection_error(py)?)?;
    m.add("AuthenticationError", py.get_type::<AuthenticationError>())?;
    m.add("NotHeldError", not_held_error(py)?)?;
    m.add("ServerError", py.get_type::<ServerError>())?;
    Ok(())
}
