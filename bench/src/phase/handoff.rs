//! Hand-off: how soon a waiting process holds the lock after the holder released it; the
//! floors (an `RPUSH` or a script waking a `BLPOP` in another process) and redmutex's rows in
//! alternating blocks, then the peers.

use std::time::Duration;

use crate::child::LOCK_CHILD;
use crate::external::External;
use crate::handoff::{self, Handoff};
use crate::phase::peers::Peers;
use crate::phase::{Ctx, Notes, Phase, progress};
use crate::proc::Proc;
use crate::report::{Mark, Row, blocked_at_release, handoff_row};

/// Blocks the alternating rows are measured in.
const HANDOFF_BLOCKS: usize = 10;

pub struct Handoffs {
    /// The wake-up floor: RPUSH → BLPOP across processes.
    pub blpop: Handoff,
    /// The same wake-up from a script that hands the lock over (a safe release's floor).
    pub blpop_script: Handoff,
    /// A script leaves the lock for the waiters and wakes one, which takes it with a second
    /// script behind its `BLPOP` (the floor of redmutex's kind of hand-off).
    pub blpop_claim: Handoff,
    pub redmutex: Handoff,
    /// (label, hand-off) of every comparison that ran.
    pub compare: Vec<(String, Handoff)>,
}

/// Runs the hand-off rows; `python` are the Python rows of the latency phase (a lock whose
/// uncontended row failed is not tried again here). Probes the baseline between runs.
pub fn run(
    ctx: &Ctx,
    peers: &Peers,
    python: &[External],
    drift: &mut Vec<u64>,
    notes: &mut Notes,
) -> Result<Phase<Handoffs>, String> {
    let counts = ctx.counts;
    let url = ctx.url.as_str();
    let plan = |n: usize| handoff::Plan {
        samples: n,
        warmup: (n / 20).clamp(3, 20),
        settle_min: counts.settle.0,
        settle_max: counts.settle.1,
    };
    let rust_child = |imp: &'static str, key: &'static str| {
        let url = url.to_owned();
        move |_: usize| Proc::this_exe(&[LOCK_CHILD.into(), imp.into(), url.clone(), key.into()])
    };
    // One of the Rust rows: children of this program running `imp` on `key`.
    let rust_row = |imp: &'static str, key: &'static str, n: usize| {
        handoff::run(imp, url, &plan(n), &rust_child(imp, key))
    };
    // The rows whose ratios the report gives run in alternating blocks, sharing the drift.
    progress(
        "handoff: RPUSH → BLPOP, one-script and two-script wake-up floors, redmutex's bare \
         requests, redmutex's mutex and semaphore (alternating)",
    );
    for key in [
        "bench:handoff:blpop",
        "bench:handoff:script",
        "bench:handoff:claim",
    ] {
        seed_blpop(url, key)?;
    }
    const ROWS: [(&str, &str); 6] = [
        ("blpop", "bench:handoff:blpop"),
        ("blpop-script", "bench:handoff:script"),
        ("blpop-claim", "bench:handoff:claim"),
        ("redmutex-requests", "bench:handoff:bare"),
        ("redmutex", "bench:handoff:redmutex"),
        ("semaphore", "bench:handoff:semaphore"),
    ];
    let children = ROWS.map(|(imp, key)| rust_child(imp, key));
    let rows: Vec<(&str, handoff::MakeChild)> = ROWS
        .iter()
        .zip(&children)
        .map(|(&(imp, _), make)| (imp, make as handoff::MakeChild))
        .collect();
    let measured = handoff::run_alternating(&rows, url, &plan(counts.handoff), HANDOFF_BLOCKS)?;
    let [blpop, blpop_script, blpop_claim, bare, redmutex, semaphore]: [Handoff; 6] = measured
        .try_into()
        .map_err(|_| "a hand-off row is missing")?;
    ctx.probe(drift)?;
    let mut compare: Vec<(String, Handoff)> = Vec::new();
    if ctx.compare {
        progress("handoff: redlock");
        match rust_row("redlock", "bench:handoff:redlock", counts.handoff_compare) {
            Ok(h) => compare.push(("redlock 2.0.0".into(), h)),
            Err(e) => notes.skip("redlock handoff", &e),
        }
        if let Some(py) = &peers.python {
            for e in python {
                if e.name == "ping" {
                    continue;
                }
                if let Err(why) = &e.result {
                    notes.skip(&format!("{} handoff", e.label), why);
                    continue;
                }
                ctx.probe(drift)?;
                progress(&format!("handoff: {}", e.label));
                let key = format!("bench:handoff:{}", e.name);
                let n = if e.name.starts_with("redmutex-py") {
                    counts.handoff_compare.max(counts.handoff / 4)
                } else {
                    counts.handoff_compare
                };
                match handoff::run(&e.label, url, &plan(n), &|_| {
                    Ok(py.child(&e.name, url, &key))
                }) {
                    Ok(h) => compare.push((e.label.clone(), h)),
                    Err(why) => notes.skip(&format!("{} handoff", e.label), &why),
                }
            }
        }
    }
    let floor = redmutex.samples.median() as f64 / blpop.samples.median().max(1) as f64;
    let ratio = crate::phase::latency::ratio;
    let rows = vec![
        handoff_row("context: RPUSH → BLPOP wake-up (2 processes)", &blpop),
        Row::latency(
            "context: script (GET, compare, SET PX, RPUSH) → BLPOP wake-up (2 processes)",
            blpop_script.samples.clone(),
        )
        .result(format!(
            "{}; floor of a safe hand-off (one script); {} the wake-up floor",
            blocked_at_release(&blpop_script),
            ratio(blpop_script.samples.median(), blpop.samples.median())
        )),
        Row::latency(
            "context: script (GET, compare, SET empty PX, RPUSH) → BLPOP + script (GET, compare, SET PX) (2 processes)",
            blpop_claim.samples.clone(),
        )
        .result(format!(
            "{}; floor of a hand-off whose waiter takes the lock itself (two scripts); {} the wake-up floor; {} the script wake-up floor",
            blocked_at_release(&blpop_claim),
            ratio(blpop_claim.samples.median(), blpop.samples.median()),
            ratio(blpop_claim.samples.median(), blpop_script.samples.median())
        )),
        Row::latency(
            "context: redmutex's requests from bare redis-rs: release script → BLPOP + acquire script (2 processes)",
            bare.samples.clone(),
        )
        .result(format!(
            "{}; redmutex's requests without its transport, lease or renewal; {} the script wake-up floor; {} the two-script floor; redmutex's row is {} it",
            blocked_at_release(&bare),
            ratio(bare.samples.median(), blpop_script.samples.median()),
            ratio(bare.samples.median(), blpop_claim.samples.median()),
            ratio(redmutex.samples.median(), bare.samples.median())
        )),
        Row::latency("handoff, 1 node (2 processes)", redmutex.samples.clone())
            .result(format!(
                "{}; {} the wake-up floor; {} the script wake-up floor; {} the two-script floor",
                blocked_at_release(&redmutex),
                crate::stats::fmt_ratio(floor),
                ratio(redmutex.samples.median(), blpop_script.samples.median()),
                ratio(redmutex.samples.median(), blpop_claim.samples.median())
            ))
            .target("≤ 1.4× the wake-up floor", Mark::of(floor <= 1.4)),
        Row::latency(
            "handoff, semaphore permit, 1 node (2 processes)",
            semaphore.samples.clone(),
        )
        .result(format!(
            "{}; {} the mutex's hand-off",
            blocked_at_release(&semaphore),
            ratio(semaphore.samples.median(), redmutex.samples.median())
        )),
    ];
    Ok(Phase {
        rows,
        data: Handoffs {
            blpop,
            blpop_script,
            blpop_claim,
            redmutex,
            compare,
        },
    })
}

/// One element on a floor's list `key`, so that the first BLPOP does not wait, and its lock
/// key free (a run before may have left it held).
fn seed_blpop(url: &str, key: &str) -> Result<(), String> {
    let mut c = redis::Client::open(url)
        .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(5)))
        .map_err(|e| e.to_string())?;
    redis::pipe()
        .cmd("DEL")
        .arg(key)
        .arg(crate::lockers::floor_lock(key))
        .cmd("RPUSH")
        .arg(key)
        .arg(1)
        .query::<()>(&mut c)
        .map_err(|e| e.to_string())
}
