//! The command table and the string and key commands.
//!
//! Adding a command is one row in [`COMMANDS`] and one function `fn(&mut Db, &[Vec<u8>]) ->
//! Reply` that sees the arguments after the name, already checked against the arity.

use super::db::{Data, Db, Reply};
use super::num::parse_i64;
use super::{list, zset};

/// A command's implementation: the keyspace and the arguments after the command name.
pub type Run = fn(&mut Db, &[Vec<u8>]) -> Reply;

/// One row of the command table.
pub struct Command {
    /// Lowercase name, as Redis prints it in errors.
    pub name: &'static str,
    /// Redis's arity: `n` = exactly `n` words with the name, `-n` = at least `n`.
    pub arity: i32,
    /// The implementation.
    pub run: Run,
}

/// Every data command the simulated Redis knows. Connection-level commands (EVAL, EVALSHA,
/// SCRIPT, BLPOP) are handled by the server, since they touch more than the keyspace.
pub static COMMANDS: &[Command] = &[
    Command {
        name: "ping",
        arity: -1,
        run: ping,
    },
    Command {
        name: "get",
        arity: 2,
        run: get,
    },
    Command {
        name: "set",
        arity: -3,
        run: set,
    },
    Command {
        name: "del",
        arity: -2,
        run: del,
    },
    Command {
        name: "exists",
        arity: -2,
        run: exists,
    },
    Command {
        name: "type",
        arity: 2,
        run: type_,
    },
    Command {
        name: "pttl",
        arity: 2,
        run: |db, a| ttl(db, a, true),
    },
    Command {
        name: "ttl",
        arity: 2,
        run: |db, a| ttl(db, a, false),
    },
    Command {
        name: "pexpire",
        arity: -3,
        run: |db, a| expire(db, a, "pexpire", 1, false),
    },
    Command {
        name: "expire",
        arity: -3,
        run: |db, a| expire(db, a, "expire", 1000, false),
    },
    Command {
        name: "pexpireat",
        arity: -3,
        run: |db, a| expire(db, a, "pexpireat", 1, true),
    },
    Command {
        name: "expireat",
        arity: -3,
        run: |db, a| expire(db, a, "expireat", 1000, true),
    },
    Command {
        name: "incr",
        arity: 2,
        run: |db, a| incr_by(db, &a[0], Some(1)),
    },
    Command {
        name: "incrby",
        arity: 3,
        run: |db, a| incr_by(db, &a[0], parse_i64(&a[1])),
    },
    Command {
        name: "time",
        arity: 1,
        run: time,
    },
    Command {
        name: "rpush",
        arity: -3,
        run: |db, a| list::push(db, a, false),
    },
    Command {
        name: "lpush",
        arity: -3,
        run: |db, a| list::push(db, a, true),
    },
    Command {
        name: "lpop",
        arity: -2,
        run: list::lpop,
    },
    Command {
        name: "llen",
        arity: 2,
        run: list::llen,
    },
    Command {
        name: "lrange",
        arity: 4,
        run: list::lrange,
    },
    Command {
        name: "ltrim",
        arity: 4,
        run: list::ltrim,
    },
    Command {
        name: "zadd",
        arity: -4,
        run: zset::zadd,
    },
    Command {
        name: "zrem",
        arity: -3,
        run: zset::zrem,
    },
    Command {
        name: "zcard",
        arity: 2,
        run: zset::zcard,
    },
    Command {
        name: "zscore",
        arity: 3,
        run: zset::zscore,
    },
    Command {
        name: "zrange",
        arity: -4,
        run: zset::zrange,
    },
    Command {
        name: "zrangebyscore",
        arity: -4,
        run: zset::zrangebyscore,
    },
    Command {
        name: "zremrangebyscore",
        arity: 4,
        run: zset::zremrangebyscore,
    },
    Command {
        name: "spublish",
        arity: 3,
        run: spublish,
    },
];

/// `SPUBLISH`, as the release scripts announce a wake-up signal: the simulated clients wait
/// in `BLPOP` (a Cluster's listening connection is not simulated), so no one listens and the
/// reply is Redis's for that, 0 receivers.
fn spublish(_: &mut Db, _: &[Vec<u8>]) -> Reply {
    Reply::Int(0)
}

/// The row for `name`, case-insensitively.
pub fn lookup(name: &[u8]) -> Option<&'static Command> {
    COMMANDS
        .iter()
        .find(|c| c.name.as_bytes().eq_ignore_ascii_case(name))
}

/// Whether `argc` words (with the name) fit the command's arity.
pub fn arity_ok(cmd: &Command, argc: usize) -> bool {
    let argc = argc as i32;
    if cmd.arity >= 0 {
        argc == cmd.arity
    } else {
        argc >= -cmd.arity
    }
}

fn upper(b: &[u8]) -> Vec<u8> {
    b.to_ascii_uppercase()
}

fn ping(_: &mut Db, a: &[Vec<u8>]) -> Reply {
    match a {
        [] => Reply::Status("PONG".into()),
        [m] => Reply::bulk(m),
        _ => Reply::err("ERR wrong number of arguments for 'ping' command"),
    }
}

fn get(db: &mut Db, a: &[Vec<u8>]) -> Reply {
    match db.get(&a[0]).map(|e| &e.data) {
        None => Reply::Nil,
        Some(Data::Str(v)) => Reply::bulk(v),
        Some(_) => Reply::wrong_type(),
    }
}

/// `SET key value [NX|XX] [GET] [EX s|PX ms|KEEPTTL]`, checked in Redis 7.0's order: options,
/// then the expire value, then GET's type check, then the NX/XX condition.
fn set(db: &mut Db, a: &[Vec<u8>]) -> Reply {
    let (key, value) = (&a[0], &a[1]);
    let (mut nx, mut xx, mut get_old, mut keep) = (false, false, false, false);
    let mut expire: Option<(&[u8], i64)> = None;
    let mut i = 2;
    while i < a.len() {
        let opt = upper(&a[i]);
        let next = a.get(i + 1);
        match opt.as_slice() {
            b"NX" if !xx => nx = true,
            b"XX" if !nx => xx = true,
            b"GET" => get_old = true,
            b"KEEPTTL" if expire.is_none() => keep = true,
            b"EX" | b"PX" if expire.is_none() && !keep && next.is_some() => {
                let unit = if opt == b"EX" { 1000 } else { 1 };
                expire = Some((next.expect("checked").as_slice(), unit));
                i += 1;
            }
            _ => return Reply::syntax(),
        }
        i += 1;
    }
    let mut expire_at = None;
    if let Some((raw, unit)) = expire {
        let Some(n) = parse_i64(raw) else {
            return Reply::not_integer();
        };
        if n <= 0 || n.checked_mul(unit).is_none() {
            return Reply::err("ERR invalid expire time in 'set' command");
        }
        expire_at = Some(db.now.saturating_add((n * unit) as u64));
    }
    let old = if get_old {
        match get(db, &a[..1]) {
            e @ Reply::Error(_) => return e,
            r => Some(r),
        }
    } else {
        None
    };
    let found = db.exists(key);
    if (nx && found) || (xx && !found) {
        return old.unwrap_or(Reply::Nil);
    }
    if keep {
        expire_at = db.get(key).and_then(|e| e.expire_at);
    }
    db.put(key, Data::Str(value.clone()), expire_at);
    old.unwrap_or_else(Reply::ok)
}

fn del(db: &mut Db, a: &[Vec<u8>]) -> Reply {
    Reply::Int(a.iter().filter(|k| db.remove(k)).count() as i64)
}

fn exists(db: &mut Db, a: &[Vec<u8>]) -> Reply {
    Reply::Int(a.iter().filter(|k| db.exists(k)).count() as i64)
}

fn type_(db: &mut Db, a: &[Vec<u8>]) -> Reply {
    let name = db.get(&a[0]).map_or("none", |e| e.data.type_name());
    Reply::Status(name.into())
}

fn ttl(db: &mut Db, a: &[Vec<u8>], ms: bool) -> Reply {
    let now = db.now;
    match db.get(&a[0]) {
        None => Reply::Int(-2),
        Some(e) => match e.expire_at {
            None => Reply::Int(-1),
            Some(t) => {
                let left = t.saturating_sub(now) as i64;
                Reply::Int(if ms { left } else { (left + 500) / 1000 })
            }
        },
    }
}

/// `PEXPIRE`/`EXPIRE key time [NX|XX|GT|LT]` with Redis 7 semantics, and with `absolute`
/// `PEXPIREAT`/`EXPIREAT key unix-time …`: no expiry counts as an infinite TTL (GT never
/// applies to it, LT always does); a time already past deletes the key.
fn expire(db: &mut Db, a: &[Vec<u8>], name: &str, unit: i64, absolute: bool) -> Reply {
    let (mut nx, mut xx, mut gt, mut lt) = (false, false, false, false);
    for opt in &a[2..] {
        match upper(opt).as_slice() {
            b"NX" => nx = true,
            b"XX" => xx = true,
            b"GT" => gt = true,
            b"LT" => lt = true,
            _ => {
                let o = String::from_utf8_lossy(opt);
                return Reply::err(format!("ERR Unsupported option {o}"));
            }
        }
    }
    if nx && (xx || gt || lt) {
        return Reply::err("ERR NX and XX, GT or LT options at the same time are not compatible");
    }
    if gt && lt {
        return Reply::err("ERR GT and LT options at the same time are not compatible");
    }
    let Some(n) = parse_i64(&a[1]) else {
        return Reply::not_integer();
    };
    let bad_time = || Reply::err(format!("ERR invalid expire time in '{name}' command"));
    let base = if absolute { 0 } else { db.now as i64 };
    let Some(when) = n.checked_mul(unit).and_then(|w| w.checked_add(base)) else {
        return bad_time();
    };
    let now = db.now as i64;
    let Some(entry) = db.get(&a[0]) else {
        return Reply::Int(0);
    };
    let current = entry.expire_at.map(|t| t as i64);
    let refused = (nx && current.is_some())
        || (xx && current.is_none())
        || (gt && current.is_none_or(|c| when <= c))
        || (lt && current.is_some_and(|c| when >= c));
    if refused {
        return Reply::Int(0);
    }
    if when <= now {
        db.remove(&a[0]);
    } else {
        entry.expire_at = Some(when as u64);
    }
    Reply::Int(1)
}

/// `INCR`/`INCRBY`: keeps the key's TTL, as Redis does.
fn incr_by(db: &mut Db, key: &[u8], by: Option<i64>) -> Reply {
    let Some(by) = by else {
        return Reply::not_integer();
    };
    let (current, expire_at) = match db.get(key) {
        None => (0, None),
        Some(e) => match &e.data {
            Data::Str(v) => match parse_i64(v) {
                Some(n) => (n, e.expire_at),
                None => return Reply::not_integer(),
            },
            _ => return Reply::wrong_type(),
        },
    };
    let Some(n) = current.checked_add(by) else {
        return Reply::err("ERR increment or decrement would overflow");
    };
    db.put(key, Data::Str(n.to_string().into_bytes()), expire_at);
    Reply::Int(n)
}

fn time(db: &mut Db, _: &[Vec<u8>]) -> Reply {
    let (s, us) = (db.now_us / 1_000_000, db.now_us % 1_000_000);
    Reply::Array(vec![
        Reply::bulk(s.to_string()),
        Reply::bulk(us.to_string()),
    ])
}
