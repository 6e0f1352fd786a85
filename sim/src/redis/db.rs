//! The keyspace: values, expiries on the server's clock, and the replies commands give.

use std::collections::{BTreeMap, VecDeque};

/// A reply as Redis sends it over RESP2.
#[derive(Clone, Debug, PartialEq)]
pub enum Reply {
    /// `+OK`-style status.
    Status(String),
    /// `-ERR …`; the text without the leading `-`.
    Error(String),
    /// `:n`.
    Int(i64),
    /// A bulk string.
    Bulk(Vec<u8>),
    /// The nil bulk string (`$-1`).
    Nil,
    /// The nil array (`*-1`), e.g. BLPOP's timeout; clients usually see it as nil too.
    NilArray,
    /// An array of replies.
    Array(Vec<Reply>),
}

impl Reply {
    /// The `+OK` status.
    pub fn ok() -> Reply {
        Reply::Status("OK".into())
    }

    /// An error reply; `text` starts with its code (`ERR`, `WRONGTYPE`, …).
    pub fn err(text: impl Into<String>) -> Reply {
        Reply::Error(text.into())
    }

    /// Redis's answer to a command on a key of another type.
    pub fn wrong_type() -> Reply {
        Reply::err("WRONGTYPE Operation against a key holding the wrong kind of value")
    }

    /// Redis's answer to an argument that should be an integer.
    pub fn not_integer() -> Reply {
        Reply::err("ERR value is not an integer or out of range")
    }

    /// Redis's answer to an unknown option or a wrong combination of them.
    pub fn syntax() -> Reply {
        Reply::err("ERR syntax error")
    }

    /// A bulk string reply.
    pub fn bulk(b: impl AsRef<[u8]>) -> Reply {
        Reply::Bulk(b.as_ref().to_vec())
    }
}

/// A reply as text for traces and failure logs: `"bulk"`, `(nil)`, `:1`, `+OK`, `-ERR …`,
/// `[a, b]`.
impl std::fmt::Display for Reply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reply::Status(s) => write!(f, "+{s}"),
            Reply::Error(e) => write!(f, "-{e}"),
            Reply::Int(n) => write!(f, ":{n}"),
            Reply::Bulk(b) => write!(f, "{:?}", String::from_utf8_lossy(b)),
            Reply::Nil => f.write_str("(nil)"),
            Reply::NilArray => f.write_str("(nil array)"),
            Reply::Array(items) => {
                f.write_str("[")?;
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{item}")?;
                }
                f.write_str("]")
            }
        }
    }
}

/// A sorted set: member → score; ordered by (score, member) when read.
pub type ZSet = BTreeMap<Vec<u8>, f64>;

/// A value of one of the types the scripts can meet.
#[derive(Clone, Debug, PartialEq)]
pub enum Data {
    /// A string (also what INCR counts on).
    Str(Vec<u8>),
    /// A list; never empty while stored (Redis deletes an emptied list).
    List(VecDeque<Vec<u8>>),
    /// A sorted set; never empty while stored.
    ZSet(ZSet),
}

impl Data {
    /// The name `TYPE` reports.
    pub fn type_name(&self) -> &'static str {
        match self {
            Data::Str(_) => "string",
            Data::List(_) => "list",
            Data::ZSet(_) => "zset",
        }
    }
}

/// A key's value and its absolute expiry on the server's clock (ms), if any.
#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    /// The value.
    pub data: Data,
    /// When the key stops existing: it exists while `now <= expire_at`, as in Redis.
    pub expire_at: Option<u64>,
}

/// The keyspace and the server time its commands see.
///
/// Expiry is lazy and exact: a key whose time passed is treated as missing by every lookup
/// (Redis's active expiry only reclaims memory earlier; no reply can tell the difference).
/// A `BTreeMap` keeps every iteration in one order, so a seed replays identically.
#[derive(Clone, Debug, Default)]
pub struct Db {
    map: BTreeMap<Vec<u8>, Entry>,
    /// The server's clock in ms; frozen while one command or script runs.
    pub now: u64,
    /// The same clock in µs, for `TIME`.
    pub now_us: u64,
    /// Keys that a write turned into a non-empty list: blocked BLPOP clients may be served.
    pub ready: Vec<Vec<u8>>,
}

impl Db {
    /// The live entry at `key`, if any; drops it first if it expired.
    pub fn get(&mut self, key: &[u8]) -> Option<&mut Entry> {
        let now = self.now;
        let expired = matches!(self.map.get(key), Some(e) if e.expire_at.is_some_and(|t| now > t));
        if expired {
            self.map.remove(key);
        }
        self.map.get_mut(key)
    }

    /// The entry at `key` as stored, expired or not.
    pub fn peek(&self, key: &[u8]) -> Option<Entry> {
        self.map.get(key).cloned()
    }

    /// Whether a live key exists.
    pub fn exists(&mut self, key: &[u8]) -> bool {
        self.get(key).is_some()
    }

    /// Stores `data` at `key` with the given expiry, replacing whatever was there.
    pub fn put(&mut self, key: &[u8], data: Data, expire_at: Option<u64>) {
        if matches!(&data, Data::List(l) if !l.is_empty()) {
            self.ready.push(key.to_vec());
        }
        self.map.insert(key.to_vec(), Entry { data, expire_at });
    }

    /// Deletes a live key; answers whether there was one.
    pub fn remove(&mut self, key: &[u8]) -> bool {
        self.get(key).is_some() && self.map.remove(key).is_some()
    }

    /// Marks a list key as grown, for blocked clients.
    pub fn touch_list(&mut self, key: &[u8]) {
        self.ready.push(key.to_vec());
    }

    /// Removes `key` if its list or sorted set became empty (Redis never stores empty ones).
    pub fn drop_if_empty(&mut self, key: &[u8]) {
        let empty = match self.map.get(key).map(|e| &e.data) {
            Some(Data::List(l)) => l.is_empty(),
            Some(Data::ZSet(z)) => z.is_empty(),
            _ => false,
        };
        if empty {
            self.map.remove(key);
        }
    }

    /// Every live key with its entry, in key order (for comparing and checking).
    pub fn entries(&mut self) -> Vec<(Vec<u8>, Entry)> {
        let now = self.now;
        self.map.retain(|_, e| e.expire_at.is_none_or(|t| now <= t));
        self.map
            .iter()
            .map(|(k, e)| (k.clone(), e.clone()))
            .collect()
    }

    /// Empties the keyspace.
    pub fn clear(&mut self) {
        self.map.clear();
        self.ready.clear();
    }
}
