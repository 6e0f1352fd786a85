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

/// A reply as a reader of an error message would write it: `1`, `"text"`, `nil`, `OK`,
/// `[1, "a"]`, `{"a": 1}`, `1.5`, `true`, `error ERR …`. Bytes that are not UTF-8 are shown with replacement characters;
/// long replies are cut.
pub(crate) fn shown(v: &Value) -> String {
    const MAX: usize = 200;
    let mut out = String::new();
    render(v, &mut out);
    if out.len() > MAX {
        let cut = (0..=MAX)
            .rev()
            .find(|&i| out.is_char_boundary(i))
            .unwrap_or(0);
        out.truncate(cut);
        out.push('…');
    }
    out
}

fn render(v: &Value, out: &mut String) {
    use std::fmt::Write;
    match v {
        Value::Nil => out.push_str("nil"),
        Value::Int(i) => {
            let _ = write!(out, "{i}");
        }
        Value::BulkString(b) => {
            let _ = write!(out, "\"{}\"", String::from_utf8_lossy(b));
        }
        Value::SimpleString(s) => out.push_str(s),
        Value::Okay => out.push_str("OK"),
        Value::ServerError(e) => {
            let _ = write!(
                out,
                "error {} {}",
                e.code(),
                e.details().unwrap_or_default()
            );
        }
        Value::Double(d) => {
            let _ = write!(out, "{d}");
        }
        Value::Boolean(b) => {
            let _ = write!(out, "{b}");
        }
        Value::Array(items) | Value::Set(items) | Value::Push { data: items, .. } => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                render(item, out);
            }
            out.push(']');
        }
        Value::Map(pairs) => {
            out.push('{');
            for (i, (k, v)) in pairs.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                render(k, out);
                out.push_str(": ");
                render(v, out);
            }
            out.push('}');
        }
        Value::Attribute { data, .. } => render(data, out),
        Value::VerbatimString { text, .. } => {
            let _ = write!(out, "\"{text}\"");
        }
        Value::BigNumber(digits) => out.push_str(&String::from_utf8_lossy(digits)),
        // A type a later redis-rs may add: named, never shown as Rust.
        _ => out.push_str("a reply of an unknown type"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::NodeOutcome;
    use crate::lock::tally::unexpected;

    #[test]
    fn an_unexpected_reply_reads_as_a_reply_not_as_rust() {
        let reply = Value::Array(vec![
            Value::Int(1),
            Value::BulkString(b"held".to_vec()),
            Value::Nil,
            Value::Okay,
        ]);
        assert_eq!(
            unexpected("reply", &[&reply]),
            NodeOutcome::Error(r#"unexpected reply [1, "held", nil, OK]"#.into())
        );
        assert_eq!(
            unexpected("WAIT reply", &[]),
            NodeOutcome::Error("no WAIT reply".into())
        );
        let resp3 = Value::Map(vec![(
            Value::BulkString(b"a".to_vec()),
            Value::Array(vec![Value::Double(1.5), Value::BigNumber(b"123".to_vec())]),
        )]);
        assert_eq!(shown(&resp3), r#"{"a": [1.5, 123]}"#);
        let long = Value::BulkString(vec![b'x'; 1000]);
        assert!(shown(&long).chars().count() <= 201, "{}", shown(&long));
    }
}
