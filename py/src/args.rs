//! Argument conversion: names, URLs and seconds, checked before anything is sent to Redis.
//!
//! Wrong types raise `TypeError`; values out of range (NaN, negative, zero, huge) raise
//! `ValueError` with the argument's name and the accepted range.

use std::time::{Duration, Instant};

use pyo3::exceptions::{PyOverflowError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyInt, PyList, PyString, PyTuple};

/// The name of `obj`'s type, for messages.
fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".into())
}

/// A number of seconds as given (int or float, not bool); range checks are the caller's.
pub(crate) fn number(what: &str, obj: &Bound<'_, PyAny>) -> PyResult<f64> {
    let bad_type = || {
        PyTypeError::new_err(format!(
            "{what} must be a number of seconds (int or float), got {}",
            type_name(obj)
        ))
    };
    if obj.is_instance_of::<PyBool>() {
        return Err(bad_type());
    }
    match obj.extract::<f64>() {
        Ok(v) => Ok(v),
        Err(e) if e.is_instance_of::<PyOverflowError>(obj.py()) => Err(PyValueError::new_err(
            format!("{what} is too large to be a number of seconds"),
        )),
        Err(_) => Err(bad_type()),
    }
}

/// A duration between `min` and `max`, given in seconds.
pub(crate) fn duration(
    what: &str,
    obj: &Bound<'_, PyAny>,
    min: Duration,
    max: Duration,
) -> PyResult<Duration> {
    let secs = number(what, obj)?;
    if !(secs >= min.as_secs_f64() && secs <= max.as_secs_f64()) {
        return Err(PyValueError::new_err(format!(
            "{what} must be between {} and {} seconds, got {secs}",
            min.as_secs_f64(),
            max.as_secs_f64()
        )));
    }
    // Clamped because the float round trip may land a nanosecond outside the range.
    Ok(Duration::from_secs_f64(secs).clamp(min, max))
}

/// An optional duration (`None` stays `None`).
pub(crate) fn optional_duration(
    what: &str,
    obj: Option<&Bound<'_, PyAny>>,
    min: Duration,
    max: Duration,
) -> PyResult<Option<Duration>> {
    match obj {
        Some(o) if !o.is_none() => duration(what, o, min, max).map(Some),
        _ => Ok(None),
    }
}

/// A deadline `timeout` seconds from now: `None` when it is `None`, infinite, or too far away
/// to represent (all three mean "wait forever").
pub(crate) fn deadline(
    what: &str,
    timeout: Option<&Bound<'_, PyAny>>,
) -> PyResult<Option<Instant>> {
    let Some(obj) = timeout.filter(|o| !o.is_none()) else {
        return Ok(None);
    };
    let secs = number(what, obj)?;
    if secs.is_nan() || secs < 0.0 {
        return Err(PyValueError::new_err(format!(
            "{what} must be a non-negative number of seconds or None, got {secs}"
        )));
    }
    Ok(far(secs))
}

/// `now + secs`, or `None` when that cannot be represented.
fn far(secs: f64) -> Option<Instant> {
    Duration::try_from_secs_f64(secs)
        .ok()
        .and_then(|d| Instant::now().checked_add(d))
}

/// How long `acquire` may wait.
pub(crate) enum Wait {
    /// One attempt.
    Once,
    /// Until this instant, or forever with `None`.
    Until(Option<Instant>),
}

/// `acquire`'s arguments, with `threading.Lock.acquire` semantics: `blocking` is any truthy
/// value (`None`: true), `timeout=-1` (or `None`) waits forever, `timeout=0` tries once, and a
/// non-blocking call takes no timeout.
pub(crate) fn wait(
    blocking: Option<&Bound<'_, PyAny>>,
    timeout: Option<&Bound<'_, PyAny>>,
) -> PyResult<Wait> {
    let blocking = match blocking {
        Some(b) => b.is_truthy()?,
        None => true,
    };
    let secs = match timeout.filter(|o| !o.is_none()) {
        None => None,
        Some(obj) => Some(number("timeout", obj)?),
    };
    let forever = secs.is_none_or(|s| s == -1.0);
    if !blocking {
        if !forever {
            return Err(PyValueError::new_err(
                "can't specify a timeout for a non-blocking call",
            ));
        }
        return Ok(Wait::Once);
    }
    match secs {
        _ if forever => Ok(Wait::Until(None)),
        Some(s) if s.is_nan() || s < 0.0 => Err(PyValueError::new_err(format!(
            "timeout must be a non-negative number of seconds, -1 or None, got {s}"
        ))),
        Some(0.0) => Ok(Wait::Once),
        Some(s) => Ok(Wait::Until(far(s))),
        None => Ok(Wait::Until(None)),
    }
}

/// A lock name: `str` (sent as UTF-8) or `bytes`, 1 to `MAX_NAME_LEN` bytes. Returns the bytes
/// and whether it was given as `str`.
pub(crate) fn name(obj: &Bound<'_, PyAny>) -> PyResult<(Vec<u8>, bool)> {
    let (bytes, is_str) = if let Ok(s) = obj.cast::<PyString>() {
        (s.extract::<String>()?.into_bytes(), true)
    } else if let Ok(b) = obj.cast::<PyBytes>() {
        (b.as_bytes().to_vec(), false)
    } else {
        return Err(PyTypeError::new_err(format!(
            "a lock name must be str or bytes, got {}",
            type_name(obj)
        )));
    };
    if bytes.is_empty() || bytes.len() > redmutex::MAX_NAME_LEN {
        return Err(PyValueError::new_err(format!(
            "a lock name must be 1 to {} bytes long, got {}",
            redmutex::MAX_NAME_LEN,
            bytes.len()
        )));
    }
    Ok((bytes, is_str))
}

/// A pattern of lock names (`Client.list`): `str` (sent as UTF-8) or `bytes`. Returns the
/// bytes and whether it was given as `str`; its length is the core's to check.
pub(crate) fn pattern(obj: &Bound<'_, PyAny>) -> PyResult<(Vec<u8>, bool)> {
    if let Ok(s) = obj.cast::<PyString>() {
        Ok((s.extract::<String>()?.into_bytes(), true))
    } else if let Ok(b) = obj.cast::<PyBytes>() {
        Ok((b.as_bytes().to_vec(), false))
    } else {
        Err(PyTypeError::new_err(format!(
            "a pattern must be str or bytes, got {}",
            type_name(obj)
        )))
    }
}

/// A semaphore's permit count: an int (not bool) from 1 to `MAX_PERMITS`.
pub(crate) fn permits(obj: &Bound<'_, PyAny>) -> PyResult<u32> {
    let bad_type =
        || PyTypeError::new_err(format!("permits must be an int, got {}", type_name(obj)));
    if obj.is_instance_of::<PyBool>() || !obj.is_instance_of::<PyInt>() {
        return Err(bad_type());
    }
    let n: i128 = match obj.extract::<i64>() {
        Ok(n) => n.into(),
        Err(_) => i128::MAX,
    };
    match u32::try_from(n) {
        Ok(n) if (1..=redmutex::MAX_PERMITS).contains(&n) => Ok(n),
        _ => Err(PyValueError::new_err(format!(
            "a semaphore must have 1 to {} permits, got {}",
            redmutex::MAX_PERMITS,
            obj.str()?
        ))),
    }
}

/// One Redis URL, or a list or tuple of them (several independent masters: Redlock).
pub(crate) fn urls(obj: &Bound<'_, PyAny>) -> PyResult<Vec<String>> {
    let url_type_error = |o: &Bound<'_, PyAny>| {
        PyTypeError::new_err(format!(
            "url must be a str or a list of str, got {}",
            type_name(o)
        ))
    };
    if let Ok(s) = obj.cast::<PyString>() {
        return Ok(vec![s.extract()?]);
    }
    let items: Vec<Bound<'_, PyAny>> = if let Ok(l) = obj.cast::<PyList>() {
        l.iter().collect()
    } else if let Ok(t) = obj.cast::<PyTuple>() {
        t.iter().collect()
    } else {
        return Err(url_type_error(obj));
    };
    if items.is_empty() {
        return Err(PyValueError::new_err("at least one Redis URL is needed"));
    }
    items
        .iter()
        .map(|item| match item.cast::<PyString>() {
            Ok(s) => s.extract(),
            Err(_) => Err(url_type_error(item)),
        })
        .collect()
}

/// `min_replicas=(n, timeout_seconds)`: `n` a positive int, the timeout a number of seconds
/// (its upper bound, half the TTL, is checked with the other lock options). `None` is off.
pub(crate) fn min_replicas(obj: Option<&Bound<'_, PyAny>>) -> PyResult<Option<(u32, Duration)>> {
    let Some(obj) = obj.filter(|o| !o.is_none()) else {
        return Ok(None);
    };
    let bad_type = || {
        PyTypeError::new_err(format!(
            "min_replicas must be None or a tuple (n, timeout_seconds), got {}",
            type_name(obj)
        ))
    };
    let tuple = obj.cast::<pyo3::types::PyTuple>().map_err(|_| bad_type())?;
    if tuple.len() != 2 {
        return Err(bad_type());
    }
    let n = tuple.get_item(0)?;
    if n.is_instance_of::<PyBool>() {
        return Err(PyTypeError::new_err(
            "min_replicas n must be an int, got bool",
        ));
    }
    let n: i64 = n.extract().map_err(|_| {
        PyTypeError::new_err(format!(
            "min_replicas n must be an int, got {}",
            type_name(&n)
        ))
    })?;
    if !(1..=i64::from(u32::MAX)).contains(&n) {
        return Err(PyValueError::new_err(format!(
            "min_replicas n must be at least 1, got {n}"
        )));
    }
    let timeout = duration(
        "the min_replicas timeout",
        &tuple.get_item(1)?,
        Duration::from_millis(1),
        redmutex::MAX_TTL,
    )?;
    Ok(Some((n as u32, timeout)))
}
