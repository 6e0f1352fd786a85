//! One-line messages and exit codes.

use std::time::Duration;

use redmutex::{Client, ClientStats, Error, ErrorKind, LockStatus, LossReason, NodeOutcome};

use crate::duration;

/// Bad arguments: a malformed duration or URL, no URL at all (`EX_USAGE`).
pub const EXIT_USAGE: i32 = 64;
/// Redis could not be used: unreachable, no quorum, refused credentials, server errors
/// (`EX_UNAVAILABLE`).
pub const EXIT_UNAVAILABLE: i32 = 69;
/// The operating system failed us: no pipe, no signal handler (`EX_OSERR`).
pub const EXIT_OSERR: i32 = 71;
/// Default: the lock was lost while the command ran (`EX_IOERR`).
pub const EXIT_LOST: u8 = 74;
/// Default: the lock was not acquired within the wait (`EX_TEMPFAIL`).
pub const EXIT_CONFLICT: u8 = 75;
/// The command was found but could not be started.
pub const EXIT_CANNOT_EXEC: i32 = 126;
/// The command was not found.
pub const EXIT_NOT_FOUND: i32 = 127;

/// Prints `redmutex: <message>` on stderr.
pub fn fail(message: impl std::fmt::Display) {
    eprintln!("redmutex: {message}");
}

/// The exit code for a failed Redis operation.
pub fn exit_code(e: &Error) -> i32 {
    match e.kind() {
        ErrorKind::InvalidArgument => EXIT_USAGE,
        _ => EXIT_UNAVAILABLE,
    }
}

/// A failed Redis operation in one line: `cannot reach redis://…: connection refused`.
pub fn describe(e: &Error) -> String {
    let nodes = e.nodes();
    let failed: Vec<String> = nodes
        .iter()
        .filter_map(|n| match &n.outcome {
            NodeOutcome::Unreachable(why) => {
                Some(format!("cannot reach {}: {}", n.node, brief(why)))
            }
            NodeOutcome::Auth(why) => Some(format!(
                "{} refused our credentials: {}",
                n.node,
                one_line(why)
            )),
            NodeOutcome::ReplicasShort { acked, wanted } => Some(format!(
                "{}: the lock's write reached {acked} of the {wanted} replicas required",
                n.node
            )),
            NodeOutcome::Error(why) => Some(format!(
                "{} answered with an error: {}",
                n.node,
                one_line(why)
            )),
            _ => None,
        })
        .collect();
    match e.kind() {
        ErrorKind::InvalidArgument => one_line(e.message()),
        _ if nodes.len() > 1 && !failed.is_empty() => {
            // Nodes the round was decided without: they may well have answered a moment later.
            let not_waited_for = nodes
                .iter()
                .filter(|n| n.outcome == NodeOutcome::NotWaitedFor)
                .count();
            let answered = nodes.len() - failed.len() - not_waited_for;
            let mut line = format!(
                "no quorum: {answered} of {} Redis nodes answered, {} needed; {}",
                nodes.len(),
                nodes.len() / 2 + 1,
                failed.join("; ")
            );
            if not_waited_for > 0 {
                line.push_str(&format!("; {not_waited_for} not waited for"));
            }
            line
        }
        _ if failed.len() == 1 => failed[0].clone(),
        _ => one_line(&e.to_string()),
    }
}

/// The usual cause in two or three words, else the first line of the text.
fn brief(why: &str) -> String {
    let lower = why.to_ascii_lowercase();
    let known = [
        ("refused", "connection refused"),
        ("timed out", "timed out"),
        ("timeout", "timed out"),
        ("would block", "timed out"),
        ("temporarily unavailable", "timed out"),
        ("reset by peer", "connection reset"),
        ("broken pipe", "connection closed"),
        ("no route to host", "no route to host"),
        ("network is unreachable", "network unreachable"),
        ("failed to lookup address", "unknown host"),
        ("name or service not known", "unknown host"),
    ];
    known
        .iter()
        .find(|(needle, _)| lower.contains(needle))
        .map_or_else(|| one_line(why), |(_, short)| (*short).to_owned())
}

/// Text of unknown origin (an error, a foreign lock value) made safe for one line.
pub fn one_line(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.trim().chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// Who holds a lock, from its value: the owner label of a redmutex token (`host:pid`, the
/// token without its random part), or a foreign value as it is.
pub fn holder(value: &[u8]) -> String {
    let text = String::from_utf8_lossy(value);
    let label = match text.rsplit_once(':') {
        Some((label, random))
            if !label.is_empty()
                && random.len() >= 32
                && random.bytes().all(|b| b.is_ascii_hexdigit()) =>
        {
            label
        }
        _ => &text,
    };
    let mut label = one_line(label);
    if label.len() > 200 {
        let cut = (0..=200)
            .rev()
            .find(|i| label.is_char_boundary(*i))
            .unwrap_or(0);
        label.truncate(cut);
        label.push('…');
    }
    label
}

fn expiry(ttl: Option<Duration>) -> String {
    match ttl {
        Some(t) => format!("expires in {}", duration::show(t)),
        None => "no expiry".to_owned(),
    }
}

/// `--stats`: the client's figures as one line of `key=value` pairs, for a log.
pub fn stats_line(s: &ClientStats) -> String {
    let lost_by: Vec<String> = LossReason::ALL
        .iter()
        .filter(|&&r| s.lost_by.get(r) > 0)
        .map(|r| r.name().to_owned())
        .collect();
    format!(
        "stats acquired={} refused={} timed_out={} interrupted={} failed={} lost={}{} \
         renewals={} renewal_failures={} waited={:.3}s held={:.3}s handoffs={} \
         renewal_lag={:.3}s",
        s.acquired,
        s.refused,
        s.timed_out,
        s.interrupted,
        s.failed,
        s.lost,
        if lost_by.is_empty() {
            String::new()
        } else {
            format!(" lost_by={}", lost_by.join(","))
        },
        s.renewals,
        s.renewal_failures,
        s.wait_seconds.sum,
        s.held_seconds.sum,
        s.handoffs,
        s.renewal_lag_seconds
            .mean()
            .unwrap_or_default()
            .as_secs_f64(),
    )
}

/// `held by web-1:4242, expires in 27.3s, last fence 42` or `free, last fence 42`.
pub fn status_line(st: &LockStatus) -> String {
    match &st.holder {
        Some(h) => format!(
            "held by {}, {}, last fence {}",
            holder(h),
            expiry(st.ttl),
            st.fence
        ),
        None => format!("free, last fence {}", st.fence),
    }
}

/// What `redmutex status` reads of one key: the lock (the write side), the shared holds,
/// the semaphore's permits, and what each node runs.
struct Gathered {
    writer: LockStatus,
    readers: Vec<(Vec<u8>, Duration)>,
    /// The semaphore's permit count (when set) and its holders.
    permits: (Option<u32>, Vec<(Vec<u8>, Duration)>),
    servers: Vec<(String, Option<String>)>,
}

fn gather(client: &Client, key: &str) -> Result<Gathered, Error> {
    let rw = client.rwlock(key).status()?;
    // Any valid count will do for a look; several masters have no semaphores to show.
    let permits = match client.semaphore(key, 1).status() {
        Ok(st) => (st.permits, st.holders),
        Err(e) if e.kind() == ErrorKind::InvalidArgument && client.node_count() > 1 => {
            (None, Vec::new())
        }
        Err(e) => return Err(e),
    };
    Ok(Gathered {
        writer: rw.writer,
        readers: rw.readers,
        permits,
        servers: client
            .node_names()
            .into_iter()
            .zip(client.servers())
            .collect(),
    })
}

/// What `redmutex status KEY` prints: the status line of the lock (the holder of a plain run,
/// the write side), then the shared holds and the semaphore permits of KEY when there are any,
/// one line each, and last what each node runs (`server redis://h:6379: Valkey 8.1.8`; not
/// for a server that would not say).
pub fn status_lines(client: &Client, key: &str) -> Result<String, Error> {
    let g = gather(client, key)?;
    let mut out = format!("{}\n", status_line(&g.writer));
    let each = |out: &mut String, holders: &[(Vec<u8>, Duration)]| {
        for (token, ttl) in holders {
            out.push_str(&format!("  {}, {}\n", holder(token), expiry(Some(*ttl))));
        }
    };
    if !g.readers.is_empty() {
        out.push_str(&format!("shared by {}:\n", g.readers.len()));
        each(&mut out, &g.readers);
    }
    let (limit, permits) = &g.permits;
    if !permits.is_empty() {
        let of = limit.map_or_else(String::new, |n| format!(" of {n}"));
        out.push_str(&format!("permits held: {}{of}:\n", permits.len()));
        each(&mut out, permits);
    }
    for (node, server) in &g.servers {
        if let Some(server) = server {
            out.push_str(&format!("server {node}: {}\n", one_line(server)));
        }
    }
    Ok(out)
}

/// What `redmutex status --json KEY` prints: one JSON object (the fields are listed in the
/// README). Values that are not UTF-8 are shown with replacement characters.
pub fn status_json(client: &Client, key: &str) -> Result<String, Error> {
    use serde_json::{Value, json};
    let g = gather(client, key)?;
    let hold = |value: &[u8], ttl: Option<Duration>| {
        json!({
            "holder": String::from_utf8_lossy(value),
            "owner": holder(value),
            "ttl_ms": ttl.map(|t| t.as_millis() as u64),
        })
    };
    let holds = |all: &[(Vec<u8>, Duration)]| -> Vec<Value> {
        all.iter().map(|(v, t)| hold(v, Some(*t))).collect()
    };
    let w = &g.writer;
    let object = json!({
        "name": key,
        "held": w.holder.is_some(),
        "holder": w.holder.as_deref().map(String::from_utf8_lossy),
        "owner": w.holder.as_deref().map(holder),
        "ttl_ms": w.ttl.map(|t| t.as_millis() as u64),
        "fence": w.fence,
        "shared": holds(&g.readers),
        "permits": { "limit": g.permits.0, "holders": holds(&g.permits.1) },
        "servers": g.servers.iter().map(|(node, server)| json!({"node": node, "server": server})).collect::<Vec<_>>(),
    });
    Ok(object.to_string())
}

/// The conflict line: who holds `key`, for how long.
pub fn conflict_line(
    key: &str,
    status: Result<LockStatus, Error>,
    waited: Option<Duration>,
) -> String {
    let gave_up = match waited {
        Some(w) if !w.is_zero() => format!("; gave up after {}", duration::show(w)),
        _ => String::new(),
    };
    let key = one_line(key);
    match status {
        Ok(LockStatus {
            holder: Some(h),
            ttl,
            ..
        }) => format!("{key} is held by {} ({}){gave_up}", holder(&h), expiry(ttl)),
        Ok(_) => format!("{key} was held by someone else and is free now{gave_up}"),
        Err(_) => format!("{key} is held by someone else{gave_up}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holder_strips_the_random_part_of_a_token() {
        let token = format!("web-1:4242:{}", "ab12".repeat(8));
        assert_eq!(holder(token.as_bytes()), "web-1:4242");
        assert_eq!(holder(b"cron on db-2"), "cron on db-2");
        assert_eq!(holder(b"x:abc"), "x:abc");
        assert_eq!(holder(b"two\nlines"), "two\\nlines");
    }

    #[test]
    fn brief_reasons() {
        assert_eq!(
            brief("Connection refused (os error 111)"),
            "connection refused"
        );
        assert_eq!(
            brief("Resource temporarily unavailable (os error 11)"),
            "timed out"
        );
        assert_eq!(brief("something\nelse"), "something\\nelse");
    }
}
