//! Sorted-set commands, for the scripts to come (waiter tracking, a counting semaphore).

use super::db::{Data, Db, Reply, ZSet};
use super::list::index_range;
use super::num::{fmt_g17, parse_f64, parse_i64};

fn zset_mut<'a>(db: &'a mut Db, key: &[u8]) -> Result<Option<&'a mut ZSet>, Reply> {
    match db.get(key) {
        None => Ok(None),
        Some(e) => match &mut e.data {
            Data::ZSet(z) => Ok(Some(z)),
            _ => Err(Reply::wrong_type()),
        },
    }
}

fn not_float() -> Reply {
    Reply::err("ERR value is not a valid float")
}

/// Members ordered by (score, member), as Redis orders them.
fn ordered(z: &ZSet) -> Vec<(&Vec<u8>, f64)> {
    let mut v: Vec<_> = z.iter().map(|(m, s)| (m, *s)).collect();
    v.sort_by(|a, b| a.1.total_cmp(&b.1).then_with(|| a.0.cmp(b.0)));
    v
}

/// `ZADD key [NX|XX] [GT|LT] [CH] score member…`.
pub fn zadd(db: &mut Db, a: &[Vec<u8>]) -> Reply {
    let (mut nx, mut xx, mut gt, mut lt, mut ch) = (false, false, false, false, false);
    let mut i = 1;
    while i < a.len() {
        match a[i].to_ascii_uppercase().as_slice() {
            b"NX" => nx = true,
            b"XX" => xx = true,
            b"GT" => gt = true,
            b"LT" => lt = true,
            b"CH" => ch = true,
            _ => break,
        }
        i += 1;
    }
    let pairs = &a[i..];
    if pairs.is_empty() || !pairs.len().is_multiple_of(2) {
        return Reply::syntax();
    }
    if nx && xx {
        return Reply::err("ERR XX and NX options at the same time are not compatible");
    }
    if (nx && (gt || lt)) || (gt && lt) {
        return Reply::err("ERR GT, LT, and/or NX options at the same time are not compatible");
    }
    let mut parsed = Vec::with_capacity(pairs.len() / 2);
    for p in pairs.chunks(2) {
        let Some(score) = parse_f64(&p[0]) else {
            return not_float();
        };
        parsed.push((score, p[1].clone()));
    }
    let key = &a[0];
    let z = match zset_mut(db, key) {
        Err(e) => return e,
        Ok(Some(z)) => z,
        Ok(None) if xx => return Reply::Int(0),
        Ok(None) => {
            db.put(key, Data::ZSet(ZSet::new()), None);
            zset_mut(db, key).ok().flatten().expect("just stored")
        }
    };
    let (mut added, mut changed) = (0, 0);
    for (score, member) in parsed {
        match z.get(&member).copied() {
            None if !xx => {
                z.insert(member, score);
                added += 1;
            }
            Some(old) if !(nx || old == score || (gt && score <= old) || (lt && score >= old)) => {
                z.insert(member, score);
                changed += 1;
            }
            _ => {}
        }
    }
    db.drop_if_empty(key);
    Reply::Int(if ch { added + changed } else { added })
}

pub fn zrem(db: &mut Db, a: &[Vec<u8>]) -> Reply {
    let n = match zset_mut(db, &a[0]) {
        Err(e) => return e,
        Ok(None) => 0,
        Ok(Some(z)) => a[1..].iter().filter(|m| z.remove(*m).is_some()).count(),
    };
    db.drop_if_empty(&a[0]);
    Reply::Int(n as i64)
}

pub fn zcard(db: &mut Db, a: &[Vec<u8>]) -> Reply {
    match zset_mut(db, &a[0]) {
        Err(e) => e,
        Ok(z) => Reply::Int(z.map_or(0, |z| z.len()) as i64),
    }
}

pub fn zscore(db: &mut Db, a: &[Vec<u8>]) -> Reply {
    match zset_mut(db, &a[0]) {
        Err(e) => e,
        Ok(z) => match z.and_then(|z| z.get(&a[1])) {
            None => Reply::Nil,
            Some(s) => Reply::bulk(fmt_g17(*s)),
        },
    }
}

/// `ZRANGE key start stop [WITHSCORES]`, by index only.
pub fn zrange(db: &mut Db, a: &[Vec<u8>]) -> Reply {
    let scores = match &a[3..] {
        [] => false,
        [w] if w.eq_ignore_ascii_case(b"WITHSCORES") => true,
        _ => return Reply::syntax(),
    };
    let (Some(start), Some(stop)) = (parse_i64(&a[1]), parse_i64(&a[2])) else {
        return Reply::not_integer();
    };
    let z = match zset_mut(db, &a[0]) {
        Err(e) => return e,
        Ok(None) => return Reply::Array(vec![]),
        Ok(Some(z)) => z,
    };
    let all = ordered(z);
    let Some((s, e)) = index_range(start, stop, all.len()) else {
        return Reply::Array(vec![]);
    };
    let mut out = Vec::new();
    for (m, score) in &all[s..=e] {
        out.push(Reply::bulk(m));
        if scores {
            out.push(Reply::bulk(fmt_g17(*score)));
        }
    }
    Reply::Array(out)
}

/// A score bound: `(x` exclusive, `-inf`/`+inf`, else inclusive.
fn bound(b: &[u8]) -> Option<(f64, bool)> {
    match b.strip_prefix(b"(") {
        Some(rest) => parse_f64(rest).map(|v| (v, true)),
        None => parse_f64(b).map(|v| (v, false)),
    }
}

/// `ZRANGEBYSCORE key min max [WITHSCORES]`: members with scores inside the bounds, in
/// order (`LIMIT` is not supported: the scripts do not use it).
pub fn zrangebyscore(db: &mut Db, a: &[Vec<u8>]) -> Reply {
    let (Some((min, min_ex)), Some((max, max_ex))) = (bound(&a[1]), bound(&a[2])) else {
        return Reply::err("ERR min or max is not a float");
    };
    let scores = match &a[3..] {
        [] => false,
        [w] if w.eq_ignore_ascii_case(b"WITHSCORES") => true,
        _ => return Reply::syntax(),
    };
    let inside = |s: f64| {
        (if min_ex { s > min } else { s >= min }) && (if max_ex { s < max } else { s <= max })
    };
    let z = match zset_mut(db, &a[0]) {
        Err(e) => return e,
        Ok(None) => return Reply::Array(vec![]),
        Ok(Some(z)) => z,
    };
    let mut out = Vec::new();
    for (m, score) in ordered(z).into_iter().filter(|(_, s)| inside(*s)) {
        out.push(Reply::bulk(m));
        if scores {
            out.push(Reply::bulk(fmt_g17(score)));
        }
    }
    Reply::Array(out)
}

pub fn zremrangebyscore(db: &mut Db, a: &[Vec<u8>]) -> Reply {
    let (Some((min, min_ex)), Some((max, max_ex))) = (bound(&a[1]), bound(&a[2])) else {
        return Reply::err("ERR min or max is not a float");
    };
    let inside = |s: f64| {
        (if min_ex { s > min } else { s >= min }) && (if max_ex { s < max } else { s <= max })
    };
    let n = match zset_mut(db, &a[0]) {
        Err(e) => return e,
        Ok(None) => 0,
        Ok(Some(z)) => {
            let before = z.len();
            z.retain(|_, s| !inside(*s));
            before - z.len()
        }
    };
    db.drop_if_empty(&a[0]);
    Reply::Int(n as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<Vec<u8>> {
        a.iter().map(|s| s.as_bytes().to_vec()).collect()
    }

    #[test]
    fn zadd_orders_by_score_then_member() {
        let mut db = Db::default();
        assert_eq!(
            zadd(&mut db, &args(&["z", "2", "b", "1", "c", "2", "a"])),
            Reply::Int(3)
        );
        let r = zrange(&mut db, &args(&["z", "0", "-1"]));
        assert_eq!(
            r,
            Reply::Array(vec![Reply::bulk("c"), Reply::bulk("a"), Reply::bulk("b")])
        );
        assert_eq!(
            zremrangebyscore(&mut db, &args(&["z", "(1", "+inf"])),
            Reply::Int(2)
        );
        assert_eq!(zcard(&mut db, &args(&["z"])), Reply::Int(1));
    }
}
