//! RESP framing: where one whole reply ends in the bytes read so far, so that a connection
//! hands redis-rs's parser whole replies only, and knows whether a reply has all come without
//! reading the socket again; and the value of a whole reply made only of the kinds a lock's
//! replies are made of, without that parser.

use redis::{ErrorKind, RedisError, RedisResult, Value};

/// The length of the first whole reply in `b`, `None` while it has not all come. Only the
/// framing: the reply itself is read by [`simple_value`] or redis-rs's parser.
pub(crate) fn frame(b: &[u8]) -> RedisResult<Option<usize>> {
    let malformed = || RedisError::from((ErrorKind::Parse, "malformed reply from the server"));
    let mut pos = 0;
    // Values still to read: the reply, and the elements of the aggregates met so far.
    let mut pending: usize = 1;
    while pending > 0 {
        let Some((whole, rest)) = split_line(&b[pos..]) else {
            return Ok(None);
        };
        let Some((&kind, line)) = whole.split_first() else {
            return Err(malformed());
        };
        pos = b.len() - rest.len();
        pending -= 1;
        let len = || -> RedisResult<i64> {
            std::str::from_utf8(line)
                .ok()
                .and_then(|s| s.parse().ok())
                .ok_or_else(malformed)
        };
        match kind {
            b'+' | b'-' | b':' | b'_' | b',' | b'#' | b'(' => {}
            // Bulk strings, bulk errors, verbatim strings: `len` bytes and CRLF (-1: nil).
            b'$' | b'!' | b'=' => {
                if let Ok(n) = usize::try_from(len()?) {
                    if b.len() < pos + n + 2 {
                        return Ok(None);
                    }
                    pos += n + 2;
                }
            }
            // Arrays, sets, pushes: `len` values (-1: nil).
            b'*' | b'~' | b'>' => pending += usize::try_from(len()?).unwrap_or(0),
            // Maps: `len` pairs. Attributes: `len` pairs, then the value they describe.
            b'%' => pending += 2 * usize::try_from(len()?).unwrap_or(0),
            b'|' => pending += 2 * usize::try_from(len()?).unwrap_or(0) + 1,
            _ => return Err(malformed()),
        }
    }
    Ok(Some(pos))
}

/// The first line of `b`, without its CRLF, and what follows it; `None` while it has not all
/// come.
fn split_line(b: &[u8]) -> Option<(&[u8], &[u8])> {
    let nl = b.windows(2).position(|w| w == b"\r\n")?;
    Some((&b[..nl], &b[nl + 2..]))
}

/// The value of `b`, one whole reply (as [`frame`] found it), when it is made only of
/// integers, simple and bulk strings, nil and arrays of these: exactly the value redis-rs's
/// parser makes of it. `None` for anything else (an error, a RESP3 kind, deep nesting, a
/// line that does not read), which that parser is then given.
///
/// Every reply a lock call reads is of these kinds but an error. redis-rs's parser (built
/// with `combine`, which copies its state around) cost about 6,600 instructions a reply
/// more: a `try_lock` + unlock, two replies, fell from 31,559 to 18,300 user-space
/// instructions (callgrind). In time, on warm caches, a reply took 0.3–0.7 µs there and
/// 0.04–0.11 µs here. The two replies a woken waiter reads (its `BLPOP`'s and its
/// acquire's) are on the hand-off's critical path.
pub(crate) fn simple_value(b: &[u8]) -> Option<Value> {
    match value(b, 0)? {
        (v, []) => Some(v),
        _ => None,
    }
}

/// Nesting this deep goes to redis-rs's parser (whose own limit is 100 levels); a lock's
/// replies nest two deep at most.
const MAX_DEPTH: usize = 4;

/// The first value in `b` and what follows it.
fn value(b: &[u8], depth: usize) -> Option<(Value, &[u8])> {
    let (whole, rest) = split_line(b)?;
    let (&kind, line) = whole.split_first()?;
    let line = std::str::from_utf8(line).ok()?;
    let len = || line.trim().parse::<i64>().ok();
    match kind {
        b'+' if line == "OK" => Some((Value::Okay, rest)),
        b'+' => Some((Value::SimpleString(line.to_owned()), rest)),
        b':' => Some((Value::Int(len()?), rest)),
        b'$' => {
            let Ok(n) = usize::try_from(len()?) else {
                return Some((Value::Nil, rest));
            };
            let end = n.checked_add(2)?;
            if rest.get(n..end)? != b"\r\n" {
                return None;
            }
            Some((Value::BulkString(rest[..n].to_vec()), &rest[end..]))
        }
        b'*' if depth < MAX_DEPTH => {
            let Ok(n) = usize::try_from(len()?) else {
                return Some((Value::Nil, rest));
            };
            // Each element takes at least 3 bytes ("_\r\n"): no larger allocation than the
            // reply can fill.
            let mut items = Vec::with_capacity(n.min(rest.len() / 3));
            let mut rest = rest;
            for _ in 0..n {
                let (item, after) = value(rest, depth + 1)?;
                items.push(item);
                rest = after;
            }
            Some((Value::Array(items), rest))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use redis::Value;

    use super::{frame, simple_value};

    /// A value of the kinds [`simple_value`] reads, nested up to 3 deep.
    fn simple() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            any::<i64>().prop_map(Value::Int),
            "[^\r\n]{0,12}".prop_map(|s| if s == "OK" {
                Value::Okay
            } else {
                Value::SimpleString(s)
            }),
            proptest::collection::vec(any::<u8>(), 0..40).prop_map(Value::BulkString),
            Just(Value::Nil),
        ];
        leaf.prop_recursive(3, 24, 6, |inner| {
            proptest::collection::vec(inner, 0..6).prop_map(Value::Array)
        })
    }

    fn encode(v: &Value, out: &mut Vec<u8>) {
        match v {
            Value::Int(i) => out.extend_from_slice(format!(":{i}\r\n").as_bytes()),
            Value::Okay => out.extend_from_slice(b"+OK\r\n"),
            Value::SimpleString(s) => out.extend_from_slice(format!("+{s}\r\n").as_bytes()),
            Value::BulkString(b) => {
                out.extend_from_slice(format!("${}\r\n", b.len()).as_bytes());
                out.extend_from_slice(b);
                out.extend_from_slice(b"\r\n");
            }
            Value::Array(items) => {
                out.extend_from_slice(format!("*{}\r\n", items.len()).as_bytes());
                items.iter().for_each(|i| encode(i, out));
            }
            _ => out.extend_from_slice(b"$-1\r\n"),
        }
    }

    fn redis_rs(b: &[u8]) -> redis::RedisResult<Value> {
        redis::Parser::new().parse_value(b)
    }

    proptest! {
        /// Every reply of these kinds is read, as redis-rs reads it.
        #[test]
        fn a_simple_reply_reads_as_redis_rs_reads_it(v in simple()) {
            let mut b = Vec::new();
            encode(&v, &mut b);
            prop_assert_eq!(simple_value(&b), Some(v.clone()));
            prop_assert_eq!(redis_rs(&b).unwrap(), v);
        }

        /// Whatever the bytes, a value read is the one redis-rs reads; anything else is left
        /// to redis-rs.
        #[test]
        fn any_framed_reply_reads_as_redis_rs_reads_it_or_not_at_all(
            v in simple(),
            edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..3),
        ) {
            let mut b = Vec::new();
            encode(&v, &mut b);
            for (at, byte) in edits {
                if !b.is_empty() {
                    let i = at.index(b.len());
                    b[i] = byte;
                }
            }
            if let Ok(Some(len)) = frame(&b)
                && let Some(read) = simple_value(&b[..len])
            {
                prop_assert_eq!(Ok::<_, String>(read), redis_rs(&b[..len]).map_err(|e| e.to_string()));
            }
        }
    }

    #[test]
    fn what_is_left_to_redis_rs() {
        for other in [
            &b"-ERR no\r\n"[..],
            b"_\r\n",
            b"%1\r\n+k\r\n:1\r\n",
            b"*1\r\n-ERR inside\r\n",
            b"*1\r\n*1\r\n*1\r\n*1\r\n*0\r\n",
            b":x\r\n",
            b"$3\r\nabcd\r\n",
            b"+OK\r\n:1\r\n",
        ] {
            assert_eq!(simple_value(other), None, "{other:?}");
        }
        assert_eq!(
            simple_value(b"*3\r\n:0\r\n$-1\r\n*-1\r\n"),
            Some(Value::Array(vec![Value::Int(0), Value::Nil, Value::Nil]))
        );
    }

    #[test]
    fn a_reply_is_framed_only_when_it_has_all_come() {
        let whole: &[&[u8]] = &[
            b"+OK\r\n",
            b"-ERR no\r\n",
            b":42\r\n",
            b"$-1\r\n",
            b"$5\r\nab\r\nc\r\n",
            b"*-1\r\n",
            b"*0\r\n",
            b"*2\r\n:1\r\n$3\r\nabc\r\n",
            b"*2\r\n*1\r\n+a\r\n$0\r\n\r\n",
            b"%1\r\n+k\r\n:1\r\n",
            b"|1\r\n+a\r\n+b\r\n:7\r\n",
            b"_\r\n",
        ];
        for reply in whole {
            assert_eq!(frame(reply).unwrap(), Some(reply.len()), "{reply:?}");
            let mut more = reply.to_vec();
            more.extend_from_slice(b":1\r\n");
            assert_eq!(
                frame(&more).unwrap(),
                Some(reply.len()),
                "{reply:?} then more"
            );
            for cut in 0..reply.len() {
                assert_eq!(
                    frame(&reply[..cut]).unwrap(),
                    None,
                    "{reply:?} cut at {cut}"
                );
            }
        }
        for bad in [&b"?x\r\n"[..], b"$x\r\n", b"\r\n"] {
            assert!(frame(bad).is_err(), "{bad:?}");
        }
    }
}
