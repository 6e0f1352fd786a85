//! Reading the values of script replies.

use redis::Value;

/// A reply's integer (0 for anything else).
pub(crate) fn int(v: &Value) -> i64 {
    match v {
        Value::Int(i) => *i,
        Value::BulkString(b) => std::str::from_utf8(b)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0),
        _ => 0,
    }
}

/// A reply's bytes (empty for anything else).
pub(crate) fn bytes(v: &Value) -> Vec<u8> {
    match v {
        Value::BulkString(b) => b.clone(),
        Value::SimpleString(s) => s.clone().into_bytes(),
        _ => Vec::new(),
    }
}
