//! List commands. BLPOP's immediate half lives here; its blocking half is the server's.

use std::collections::VecDeque;

use super::db::{Data, Db, Reply};
use super::num::parse_i64;

/// The list at `key`: `Ok(None)` when missing, `Err` (WRONGTYPE) for another type.
fn list_mut<'a>(db: &'a mut Db, key: &[u8]) -> Result<Option<&'a mut VecDeque<Vec<u8>>>, Reply> {
    match db.get(key) {
        None => Ok(None),
        Some(e) => match &mut e.data {
            Data::List(l) => Ok(Some(l)),
            _ => Err(Reply::wrong_type()),
        },
    }
}

/// `RPUSH`/`LPUSH key value…`: the new length.
pub fn push(db: &mut Db, a: &[Vec<u8>], left: bool) -> Reply {
    let key = &a[0];
    match list_mut(db, key) {
        Err(e) => return e,
        Ok(Some(_)) => {}
        Ok(None) => db.put(key, Data::List(VecDeque::new()), None),
    }
    let l = list_mut(db, key)
        .ok()
        .flatten()
        .expect("a list is there now");
    for v in &a[1..] {
        if left {
            l.push_front(v.clone())
        } else {
            l.push_back(v.clone())
        }
    }
    let len = l.len();
    db.touch_list(key);
    Reply::Int(len as i64)
}

/// `LPOP key [count]`.
pub fn lpop(db: &mut Db, a: &[Vec<u8>]) -> Reply {
    if a.len() > 2 {
        return Reply::err("ERR wrong number of arguments for 'lpop' command");
    }
    let count = match a.get(1) {
        None => None,
        Some(c) => match parse_i64(c) {
            Some(n) if n >= 0 => Some(n as usize),
            _ => return Reply::err("ERR value is out of range, must be positive"),
        },
    };
    let key = &a[0];
    let reply = match list_mut(db, key) {
        Err(e) => return e,
        Ok(None) => {
            return if count.is_some() {
                Reply::NilArray
            } else {
                Reply::Nil
            };
        }
        Ok(Some(l)) => match count {
            None => Reply::Bulk(l.pop_front().expect("stored lists are never empty")),
            Some(n) => {
                let n = n.min(l.len());
                Reply::Array(l.drain(..n).map(Reply::Bulk).collect())
            }
        },
    };
    db.drop_if_empty(key);
    reply
}

/// BLPOP's attempt without blocking: `Some([key, value])` from the first non-empty list,
/// `None` when it would block, an error for a key of another type (checked in key order).
pub fn pop_first(db: &mut Db, keys: &[Vec<u8>]) -> Option<Reply> {
    for key in keys {
        match list_mut(db, key) {
            Err(e) => return Some(e),
            Ok(None) => {}
            Ok(Some(l)) => {
                let v = l.pop_front().expect("stored lists are never empty");
                db.drop_if_empty(key);
                return Some(Reply::Array(vec![Reply::bulk(key), Reply::Bulk(v)]));
            }
        }
    }
    None
}

pub fn llen(db: &mut Db, a: &[Vec<u8>]) -> Reply {
    match list_mut(db, &a[0]) {
        Err(e) => e,
        Ok(l) => Reply::Int(l.map_or(0, |l| l.len()) as i64),
    }
}

/// Resolves Redis's `start stop` indices (negative from the end) to a range of `len`.
pub fn index_range(start: i64, stop: i64, len: usize) -> Option<(usize, usize)> {
    let len = len as i64;
    let start = if start < 0 {
        (len + start).max(0)
    } else {
        start
    };
    let stop = if stop < 0 {
        len + stop
    } else {
        stop.min(len - 1)
    };
    (start <= stop && start < len).then_some((start as usize, stop as usize))
}

pub fn lrange(db: &mut Db, a: &[Vec<u8>]) -> Reply {
    let (Some(start), Some(stop)) = (parse_i64(&a[1]), parse_i64(&a[2])) else {
        return Reply::not_integer();
    };
    match list_mut(db, &a[0]) {
        Err(e) => e,
        Ok(None) => Reply::Array(vec![]),
        Ok(Some(l)) => match index_range(start, stop, l.len()) {
            None => Reply::Array(vec![]),
            Some((s, e)) => Reply::Array(l.range(s..=e).cloned().map(Reply::Bulk).collect()),
        },
    }
}

/// `LTRIM key start stop`: keeps the elements from `start` to `stop` (negative from the end);
/// a range that keeps none deletes the key. The indices are checked before the key.
pub fn ltrim(db: &mut Db, a: &[Vec<u8>]) -> Reply {
    let (Some(start), Some(stop)) = (parse_i64(&a[1]), parse_i64(&a[2])) else {
        return Reply::not_integer();
    };
    let key = &a[0];
    match list_mut(db, key) {
        Err(e) => return e,
        Ok(None) => {}
        Ok(Some(l)) => match index_range(start, stop, l.len()) {
            None => l.clear(),
            Some((s, e)) => {
                l.truncate(e + 1);
                l.drain(..s);
            }
        },
    }
    db.drop_if_empty(key);
    Reply::ok()
}
