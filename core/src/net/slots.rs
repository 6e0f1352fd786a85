//! Redis Cluster's key slots: which slot a key hashes to, and the `CLUSTER SLOTS` reply that
//! tells which master serves each.

use std::sync::Arc;

use redis::Value;

use super::endpoint::Endpoint;

/// Redis Cluster's number of hash slots.
pub(crate) const SLOTS: usize = 16384;

/// The non-empty text between the first `{` and the next `}`, as Redis Cluster defines it.
pub(crate) fn hash_tag(key: &[u8]) -> Option<&[u8]> {
    let open = key.iter().position(|&b| b == b'{')?;
    let len = key[open + 1..].iter().position(|&b| b == b'}')?;
    (len > 0).then(|| &key[open + 1..open + 1 + len])
}

/// The Redis Cluster slot of a key (CRC16/XMODEM of the hash tag or whole key, mod 16384).
pub(crate) fn key_slot(key: &[u8]) -> u16 {
    let data = hash_tag(key).unwrap_or(key);
    let mut crc: u16 = 0;
    for &b in data {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16384
}

/// `(start, end, master host, master port)` for each range of a `CLUSTER SLOTS` reply. An
/// empty host (a node that does not know its own address) means the node that was asked.
pub(crate) fn parse_slots(reply: &Value, asked: &str) -> Option<Vec<(u16, u16, String, u16)>> {
    let Value::Array(entries) = reply else {
        return None;
    };
    let mut ranges = Vec::with_capacity(entries.len());
    for entry in entries {
        let Value::Array(fields) = entry else {
            return None;
        };
        let [start, end, master, ..] = fields.as_slice() else {
            return None;
        };
        let Value::Array(master) = master else {
            return None;
        };
        let (host, port) = match master.as_slice() {
            [host, port, ..] => (text(host)?, slot_number(port)?),
            _ => return None,
        };
        let host = if host.is_empty() || host == "?" {
            asked.to_owned()
        } else {
            host
        };
        let (start, end) = (slot_number(start)?, slot_number(end)?);
        if start > end || usize::from(end) >= SLOTS {
            return None;
        }
        ranges.push((start, end, host, port));
    }
    Some(ranges)
}

fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    }
}

fn slot_number(v: &Value) -> Option<u16> {
    match v {
        Value::Int(i) => u16::try_from(*i).ok(),
        _ => None,
    }
}

/// `host:port` or `[v6]:port` (or a bare `v6:port`, as `MOVED` replies write it).
pub(crate) fn split_addr(addr: &str) -> Option<(String, u16)> {
    let (host, port) = addr.rsplit_once(':')?;
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    Some((host.to_owned(), port.parse().ok()?))
}

/// The index of `endpoint` in `masters`, where it is added if it is new.
pub(crate) fn index_of(masters: &mut Vec<Arc<Endpoint>>, endpoint: &Arc<Endpoint>) -> u16 {
    match masters.iter().position(|m| Arc::ptr_eq(m, endpoint)) {
        Some(at) => at as u16,
        None => {
            masters.push(Arc::clone(endpoint));
            (masters.len() - 1) as u16
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_match_redis() {
        // Values from the Redis Cluster specification and `CLUSTER KEYSLOT`.
        assert_eq!(key_slot(b"123456789"), 0x31C3);
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
        assert_eq!(key_slot(b"foo{}{bar}"), key_slot(b"foo{}{bar}"));
    }

    #[test]
    fn reads_cluster_slots_replies() {
        let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        let reply = Value::Array(vec![
            Value::Array(vec![
                Value::Int(0),
                Value::Int(5460),
                Value::Array(vec![bulk("10.0.0.1"), Value::Int(7000), bulk("id1")]),
                Value::Array(vec![bulk("10.0.0.4"), Value::Int(7003), bulk("id4")]),
            ]),
            Value::Array(vec![
                Value::Int(5461),
                Value::Int(16383),
                Value::Array(vec![bulk(""), Value::Int(7001)]),
            ]),
        ]);
        assert_eq!(
            parse_slots(&reply, "seed").unwrap(),
            vec![
                (0, 5460, "10.0.0.1".to_owned(), 7000),
                (5461, 16383, "seed".to_owned(), 7001)
            ]
        );
        assert!(parse_slots(&Value::Nil, "x").is_none());
        let bad = Value::Array(vec![Value::Array(vec![Value::Int(5), Value::Int(1)])]);
        assert!(parse_slots(&bad, "x").is_none());
        assert_eq!(split_addr("::1:7000"), Some(("::1".to_owned(), 7000)));
        assert_eq!(split_addr("[::1]:7000"), Some(("::1".to_owned(), 7000)));
        assert_eq!(split_addr("h"), None);
    }
}
