//! The native module `redmutex._redmutex`; the public Python API is re-exported by the
//! `redmutex` package in `py/python/redmutex/`.

use pyo3::prelude::*;

/// Native part of the `redmutex` package.
#[pymodule]
fn _redmutex(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
