//! The peers: the locks users would pick instead (the redlock and rslock crates, the Python
//! locks) and redmutex's own C binding. They are measured inside the other phases (so that
//! they share the machine's state with the redmutex rows); this phase prepares them and turns
//! what was measured into their rows, each peer's uncontended row followed by its hand-off
//! row (rslock has no hand-off row).

use crate::external::{self, CProgram, External, Python};
use crate::handoff::Handoff;
use crate::phase::latency::{RUST_ONE_LOCK, RUST_PROCESS, ratio};
use crate::phase::{Ctx, Notes, progress};
use crate::report::{Mark, Row, blocked_at_release, handoff_row};
use crate::rslock;
use crate::stats::{Samples, fmt_ratio};
use crate::uncontended::Uncontended;

pub const C_NAME: &str = "redmutex-c";
pub const C_LABEL: &str = "redmutex C binding";

/// The external programs, when compared.
pub struct Peers {
    pub python: Option<Python>,
    /// The compiled C program, or why it could not be built.
    pub c: Option<Result<CProgram, String>>,
}

/// Finds Python and compiles the C program (with `--no-compare`: neither).
pub fn prepare(ctx: &Ctx, notes: &mut Notes) -> Peers {
    let mut peers = Peers {
        python: None,
        c: None,
    };
    if ctx.compare {
        match external::python(ctx.root) {
            Ok(py) => peers.python = Some(py),
            Err(e) => notes.skip("Python rows", &e),
        }
        progress("compiling the C binding's program");
        peers.c = Some(external::c_program(ctx.root));
    }
    peers
}

/// What the other phases measured of the peers.
pub struct Measured<'a> {
    /// The uncontended rows, with redlock's.
    pub unc: &'a Uncontended,
    /// The Python rows and the C binding's, from the latency phase.
    pub python: &'a [External],
    pub c: Option<&'a External>,
    /// The C program's loop from Rust in a process of its own.
    pub rust_process: Option<&'a External>,
    /// The Python loop from Rust in a process of its own.
    pub rust_one_lock: Option<&'a External>,
    /// (label, hand-off) of every peer whose hand-off ran.
    pub handoff: &'a [(String, Handoff)],
}

/// The peers' rows: redlock's, then each Python lock's, then the C binding's.
pub fn rows(m: &Measured, notes: &mut Notes) -> Vec<Row> {
    let compare = m.handoff;
    let mut rows = Vec::new();
    if let Some(s) = &m.unc.redlock1 {
        rows.push(Row::latency(
            "redlock 2.0.0: uncontended, 1 node",
            s.clone(),
        ));
    }
    if let Some(s) = &m.unc.redlock5 {
        rows.push(
            Row::latency("redlock 2.0.0: uncontended, 5 nodes", s.clone()).result(format!(
                "{} the 3-of-5 PING",
                ratio(s.median(), m.unc.ping5q.median())
            )),
        );
    }
    for (label, h) in compare.iter().filter(|(l, _)| l.starts_with("redlock")) {
        rows.push(handoff_row(label, h));
    }
    rows.extend(rslock_rows(m.unc));
    for e in m.python {
        match &e.result {
            Ok(s) if e.name == "ping" => rows.push(
                Row::latency(format!("{}: PING (Python context)", e.label), s.clone())
                    .result("Python client's own round trip"),
            ),
            Ok(s) if e.name == "redmutex-py" => rows.extend(python_rows(m, &e.label, s)),
            Ok(s) => {
                let row = Row::latency(format!("{}: uncontended, 1 node", e.label), s.clone());
                rows.push(match asyncio_uncontended(m, e, s) {
                    Some(note) => row.result(note),
                    None => row,
                });
            }
            Err(why) => skipped(&mut rows, notes, e, why),
        }
        if let Some((label, h)) = compare.iter().find(|(l, _)| *l == e.label) {
            rows.push(asyncio_handoff(m, e, h).unwrap_or_else(|| handoff_row(label, h)));
        }
    }
    let rust = m.rust_process.and_then(|r| r.result.as_ref().ok());
    if let Some(r) = rust {
        rows.push(
            Row::latency(
                format!("context: {RUST_PROCESS}: uncontended, 1 node"),
                r.clone(),
            )
            .result(format!(
                "the C program's loop (a handle per call) in Rust, run like it: {} the \
                     in-process 1-node row, which runs in the bench's own process",
                ratio(r.median(), m.unc.redmutex1.median())
            )),
        );
    }
    if let Some(c) = m.c {
        match &c.result {
            Ok(s) => {
                let mut row = Row::latency(format!("{}: uncontended, 1 node", c.label), s.clone());
                if let Some(r) = rust {
                    let x = s.median() as f64 / r.median().max(1) as f64;
                    let mark = if x <= 1.05 { Mark::Pass } else { Mark::Miss };
                    row = row
                        .result(format!(
                            "{} the same loop from Rust in a process of its own",
                            fmt_ratio(x)
                        ))
                        .target("≤ 1.05× Rust measured alike", mark);
                }
                rows.push(row)
            }
            Err(why) => skipped(&mut rows, notes, c, why),
        }
    }
    rows
}

/// The Python binding's uncontended row, set against the same calls from Rust in a process of
/// its own (one lock handle, as the Python loop holds one lock object; started and measured
/// as the Python process is, in the same chunks), which comes first as a context row. Set
/// against the Rust 1-node row, which runs in the bench's own long-lived process, the ratio
/// also holds what any second process costs (shown too).
fn python_rows(m: &Measured, label: &str, s: &Samples) -> Vec<Row> {
    let in_process = s.median() as f64 / m.unc.redmutex1.median().max(1) as f64;
    let on_main = "on Python's main thread, where Ctrl-C works";
    let row = Row::latency(format!("{label}: uncontended, 1 node"), s.clone());
    let Some(Ok(rust)) = m.rust_one_lock.map(|r| &r.result) else {
        let mark = Mark::of(in_process <= 1.2);
        return vec![
            row.result(format!(
                "{} the Rust 1-node row ({on_main})",
                fmt_ratio(in_process)
            ))
            .target("≤ 1.2× the Rust row", mark),
        ];
    };
    let x = s.median() as f64 / rust.median().max(1) as f64;
    let mark = Mark::of(x <= 1.2);
    vec![
        Row::latency(
            format!("context: {RUST_ONE_LOCK}: uncontended, 1 node"),
            rust.clone(),
        )
        .result(format!(
            "the Python loop's calls (one lock object) in Rust, run like it: {} the \
             in-process 1-node row",
            ratio(rust.median(), m.unc.redmutex1.median())
        )),
        row.result(format!(
            "{} the same calls from Rust in a process of its own; {} the in-process Rust \
             1-node row ({on_main})",
            fmt_ratio(x),
            fmt_ratio(in_process)
        ))
        .target("≤ 1.2× the Rust row, measured alike", mark),
    ]
}

/// The note of an asyncio row (one task on a running loop, `locks.py`): against its blocking
/// twin's row, and redmutex.asyncio against the Rust row too. No target: the issue asks for
/// the rows, and the gap to the blocking row is what they show.
fn asyncio_uncontended(m: &Measured, e: &External, s: &Samples) -> Option<String> {
    let twin = twin_of(m, e)?;
    let mut parts = vec!["one asyncio task on a running loop".to_owned()];
    if e.name.starts_with("redmutex") {
        parts[0].push_str(", each call on a pool thread, awaited");
    }
    if let Ok(b) = &twin.result {
        parts.push(format!(
            "{} the {} row",
            ratio(s.median(), b.median()),
            twin.label
        ));
    }
    if e.name.starts_with("redmutex") {
        parts.push(format!(
            "{} the Rust 1-node row",
            ratio(s.median(), m.unc.redmutex1.median())
        ));
    }
    Some(parts.join("; "))
}

/// An asyncio row's hand-off, against its blocking twin's hand-off when that ran.
fn asyncio_handoff(m: &Measured, e: &External, h: &Handoff) -> Option<Row> {
    let twin = twin_of(m, e)?;
    let mut result = blocked_at_release(h);
    if let Some((_, b)) = m.handoff.iter().find(|(l, _)| *l == twin.label) {
        let x = ratio(h.samples.median(), b.samples.median());
        result.push_str(&format!("; {x} the {} hand-off", twin.label));
    }
    Some(Row::latency(format!("{}: handoff, 1 node", e.label), h.samples.clone()).result(result))
}

/// The blocking row of the asyncio row `e` (`None` when `e` is no asyncio row).
fn twin_of<'a>(m: &Measured<'a>, e: &External) -> Option<&'a External> {
    let name = external::blocking_twin(&e.name)?;
    m.python.iter().find(|t| t.name == name)
}

/// rslock's rows (async, tokio current-thread runtime in a process of its own; TTL 10 s), the
/// 5-node one against its 1-node row and the quorum floor.
fn rslock_rows(unc: &Uncontended) -> Vec<Row> {
    let (Some(one), Some(five)) = (&unc.rslock1, &unc.rslock5) else {
        return Vec::new();
    };
    let label = format!("rslock {} (tokio)", rslock::VERSION);
    vec![
        Row::latency(format!("{label}: uncontended, 1 node"), one.clone()).result(format!(
            "{} redmutex's 1-node row; a lock without fences: {} the unfenced floor, {} redmutex's row with fencing off",
            ratio(one.median(), unc.redmutex1.median()),
            ratio(one.median(), unc.floor1.median()),
            ratio(one.median(), unc.unfenced1.median())
        )),
        Row::latency(format!("{label}: uncontended, 5 nodes"), five.clone()).result(format!(
            "{} its 1-node row; {} the 3-of-5 PING; {} redmutex's 5-node row",
            ratio(five.median(), one.median()),
            ratio(five.median(), unc.ping5q.median()),
            ratio(five.median(), unc.redmutex5.median())
        )),
    ]
}

fn skipped(rows: &mut Vec<Row>, notes: &mut Notes, e: &External, why: &str) {
    rows.push(Row::value(
        format!("{}: uncontended", e.label),
        "skipped (see notes)",
    ));
    notes.skip(&format!("{} uncontended", e.label), why);
}
