//! `redmutex list` and `redmutex unlock --force`: what an operator reads and does.

use redmutex::{Client, Error, ListedHold, ListedLock};

use crate::duration;
use crate::report::{holder, one_line};

/// What a lock's holds are, for the KIND column: `exclusive`, `read`, `permit`, several
/// joined by `+`, or `waited` for a lock nobody holds that someone waits for.
fn kinds(lock: &ListedLock) -> String {
    let mut kinds: Vec<&str> = lock.holds.iter().map(|h| h.kind.as_str()).collect();
    kinds.dedup();
    if kinds.is_empty() {
        "waited".to_owned()
    } else {
        kinds.join("+")
    }
}

/// `web-1:4242 (27.3s)`, with `on 2 of 3 nodes` when the nodes disagree.
fn hold_text(h: &ListedHold, nodes: usize) -> String {
    let left = h.ttl.map_or_else(|| "no expiry".to_owned(), duration::show);
    let on = if h.nodes < nodes {
        format!(", on {} of {nodes} nodes", h.nodes)
    } else {
        String::new()
    };
    format!("{} ({left}{on})", holder(&h.holder))
}

/// What `redmutex list` prints: a header, then one line per lock — name, kind, last fence,
/// waiters, holders with their time left — or `no lock matches PATTERN`.
pub fn list_lines(client: &Client, pattern: &str) -> Result<String, Error> {
    let locks = client.list(pattern)?;
    if locks.is_empty() {
        return Ok(format!("no lock matches {}\n", one_line(pattern)));
    }
    let mut rows = vec![["NAME", "KIND", "FENCE", "WAITERS", "HOLDERS"].map(str::to_owned)];
    for lock in &locks {
        let holders: Vec<String> = lock
            .holds
            .iter()
            .map(|h| hold_text(h, lock.nodes))
            .collect();
        rows.push([
            one_line(&String::from_utf8_lossy(&lock.name)),
            kinds(lock),
            lock.fence.to_string(),
            lock.waiters.to_string(),
            if holders.is_empty() {
                "-".to_owned()
            } else {
                holders.join(", ")
            },
        ]);
    }
    let width = |c: usize| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0);
    let (name, kind, fence, waiters) = (width(0), width(1), width(2), width(3));
    Ok(rows
        .iter()
        .map(|r| {
            format!(
                "{:name$}  {:kind$}  {:>fence$}  {:>waiters$}  {}\n",
                r[0], r[1], r[2], r[3], r[4]
            )
        })
        .collect())
}

fn hold_json(h: &ListedHold) -> serde_json::Value {
    serde_json::json!({
        "kind": h.kind.as_str(),
        "holder": String::from_utf8_lossy(&h.holder),
        "owner": holder(&h.holder),
        "ttl_ms": h.ttl.map(|t| t.as_millis() as u64),
        "nodes": h.nodes,
    })
}

/// What `redmutex list --json` prints: one JSON object per lock and line (the fields are
/// listed in the README).
pub fn list_json(client: &Client, pattern: &str) -> Result<String, Error> {
    let mut out = String::new();
    for lock in client.list(pattern)? {
        let object = serde_json::json!({
            "name": String::from_utf8_lossy(&lock.name),
            "kind": kinds(&lock),
            "holds": lock.holds.iter().map(hold_json).collect::<Vec<_>>(),
            "fence": lock.fence,
            "waiters": lock.waiters,
            "nodes": lock.nodes,
            "disagree": lock.disagree(),
        });
        out.push_str(&object.to_string());
        out.push('\n');
    }
    Ok(out)
}

/// What `redmutex unlock --force KEY` prints: a line per hold removed, or that nothing was
/// held.
pub fn unlock_lines(client: &Client, key: &str, json: bool) -> Result<String, Error> {
    let removed = client.force_unlock(key)?;
    if json {
        let object = serde_json::json!({
            "name": key,
            "removed": removed.iter().map(hold_json).collect::<Vec<_>>(),
        });
        return Ok(format!("{object}\n"));
    }
    let key = one_line(key);
    if removed.is_empty() {
        return Ok(format!("{key} was not held: nothing removed\n"));
    }
    let nodes = client.node_count();
    Ok(removed
        .iter()
        .map(|h| {
            let of = match nodes {
                1 => String::new(),
                n => format!(" on {} of {n} nodes", h.nodes),
            };
            let left = h.ttl.map_or_else(String::new, |t| {
                format!(", which had {} left", duration::show(t))
            });
            format!(
                "removed the {} hold of {} on {key}{of}{left}\n",
                h.kind.as_str(),
                holder(&h.holder)
            )
        })
        .collect())
}
