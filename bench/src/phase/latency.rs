//! The PING baseline and the uncontended rows, with the peers' uncontended rows measured in
//! chunks between the rounds (see `crate::uncontended` for why they take turns).

use crate::cost::{self, CpuPerCycle, ServerTime};
use crate::external::{self, Chunks, External};
use crate::lockers::RedmutexLocker;
use crate::phase::peers::{C_LABEL, C_NAME, Peers};
use crate::phase::{Ctx, Phase, progress};
use crate::report::{Mark, Row};
use crate::stats::fmt_ratio;
use crate::uncontended::{self, Uncontended};

/// The C program's loop from Rust in a process of its own: the row the C row is set against.
pub const RUST_PROCESS: &str = "redmutex (Rust, a process of its own, as the C program)";
/// The Python loop from Rust in a process of its own: the row the Python row is set against.
pub const RUST_ONE_LOCK: &str = "redmutex (Rust, a process of its own, as the Python loop)";

pub struct Latency {
    pub unc: Uncontended,
    /// The baseline: the median PING round trip, the unit of every ratio.
    pub base: u64,
    pub server_time: ServerTime,
    /// CPU per try_lock + unlock on one node and on five.
    pub cpu1: CpuPerCycle,
    pub cpu5: CpuPerCycle,
    /// CPU per cycle of the fenced floor (redis-rs alone).
    pub cpu_floor: CpuPerCycle,
    /// The Python rows (PING and each lock), measured between the rounds.
    pub python: Vec<External>,
    /// The C binding's row, when compared.
    pub c: Option<External>,
    /// The same loop from Rust in a process of its own, measured alike (with the C row).
    pub rust_process: Option<External>,
    /// The Python loop from Rust in a process of its own, measured alike (with the Python
    /// rows).
    pub rust_one_lock: Option<External>,
}

/// Runs the interleaved rounds; the rows are the baseline's and the uncontended ones.
pub fn run(ctx: &Ctx, peers: &mut Peers) -> Result<Phase<Latency>, String> {
    let counts = ctx.counts;
    let url = ctx.url.as_str();
    let mut py_chunks = Chunks::default();
    let mut c_chunks = Chunks::default();
    progress("uncontended rows and the PING baseline (interleaved, with the Python and C rows)");
    let unc = uncontended::run(
        url,
        &ctx.urls5,
        &uncontended::Plan {
            rounds: counts.rounds,
            per_round: counts.per_round,
            per_round_redlock: counts.per_round_redlock,
            with_peers: ctx.compare,
            between_every: counts.rounds / counts.chunks,
        },
        &mut || {
            if let Some(py) = peers.python.as_mut() {
                let n = counts.python_n / counts.chunks;
                py_chunks.add_all(py.uncontended(url, n));
                py_chunks.add(
                    RUST_ONE_LOCK,
                    RUST_ONE_LOCK,
                    external::rust_process(url, n, true),
                );
            }
            if let Some(Ok(c)) = &peers.c {
                let n = counts.c_n / counts.chunks;
                c_chunks.add(C_NAME, C_LABEL, c.run(url, n));
                c_chunks.add(
                    RUST_PROCESS,
                    RUST_PROCESS,
                    external::rust_process(url, n, false),
                );
            }
            Ok(())
        },
    )?;
    let base = unc.ping.median();
    let server_time = cost::server_time(url, counts.chunks * 100)?;
    let one = std::slice::from_ref(&ctx.url);
    let key = "bench:cpu-per-cycle";
    let mut m1 = RedmutexLocker::open(one, key)?;
    let mut floor = uncontended::FencedFloor::open(url)?;
    let mut both = cost::cpu_per_cycle_alternating(
        one,
        counts.chunks * 200,
        &mut [&mut || uncontended::try_unlock(&mut m1), &mut || {
            floor.cycle()
        }],
    )?;
    let (cpu1, cpu_floor) = (both.remove(0), both.remove(0));
    let mut m5 = RedmutexLocker::open(&ctx.urls5, key)?;
    let cpu5 = cost::cpu_per_cycle(&ctx.urls5, counts.chunks * 100, &mut || {
        uncontended::try_unlock(&mut m5)
    })?;
    let mut measured = c_chunks.finish();
    let rust_process = measured
        .iter()
        .position(|e| e.name == RUST_PROCESS)
        .map(|i| measured.remove(i));
    let c = match &peers.c {
        None => None,
        Some(Err(e)) => Some(External {
            name: C_NAME.into(),
            label: C_LABEL.into(),
            result: Err(e.clone()),
        }),
        Some(Ok(_)) => measured.pop(),
    };
    let mut python = py_chunks.finish();
    let rust_one_lock = python
        .iter()
        .position(|e| e.name == RUST_ONE_LOCK)
        .map(|i| python.remove(i));
    let mut rows = baseline_rows(&unc);
    rows.extend(uncontended_rows(&unc));
    rows.extend(kind_rows(&unc));
    Ok(Phase {
        rows,
        data: Latency {
            unc,
            base,
            server_time,
            cpu1,
            cpu5,
            cpu_floor,
            python,
            c,
            rust_process,
            rust_one_lock,
        },
    })
}

/// The baseline and the floors the lock rows compare with.
fn baseline_rows(unc: &Uncontended) -> Vec<Row> {
    vec![
        Row::latency("baseline: PING, 1 node (redis-rs)", unc.ping.clone()),
        Row::latency("context: PING to 5 nodes at once", unc.ping5.clone())
            .result("floor of a 5-node round"),
        Row::latency(
            "context: PING to 5 nodes, until 3 answered",
            unc.ping5q.clone(),
        )
        .result(format!(
            "floor of a 5-node quorum round; {} the 5-node PING",
            ratio(unc.ping5q.median(), unc.ping5.median())
        )),
        Row::latency(
            "context: SET NX PX + compare-and-delete script",
            unc.floor1.clone(),
        )
        .result("floor of a lock with a safe release (redis-rs alone)"),
        Row::latency(
            "context: fenced SET NX PX script + compare-and-delete script",
            unc.floor_fenced.clone(),
        )
        .result(format!(
            "floor of a fenced lock with a safe release; {} the unfenced floor",
            ratio(unc.floor_fenced.median(), unc.floor1.median())
        )),
        Row::latency(
            "context: fenced floor on 5 nodes, each round until 3 answered",
            unc.floor5q.clone(),
        )
        .result(format!(
            "floor of a fenced 5-node lock (both scripts to every node, each round done at its quorum, the next written behind the late replies); {} the 1-node fenced floor; {} the 3-of-5 PING",
            ratio(unc.floor5q.median(), unc.floor_fenced.median()),
            ratio(unc.floor5q.median(), unc.ping5q.median())
        )),
        Row::latency(
            "context: fenced floor on 5 nodes, each round until 3 answered, replies read node by node",
            unc.floor5n.clone(),
        )
        .result(format!(
            "the same floor read as a client must that cannot wait on every socket at once (a blocking read per node, in node order: the round waits for the first three nodes, not the first three replies); {} the floor read as replies arrive",
            ratio(unc.floor5n.median(), unc.floor5q.median()),
        )),
        Row::latency(
            "context: SET NX PX and INCR in one write + compare-and-delete script",
            unc.floor_plain.clone(),
        )
        .result(format!(
            "floor of a fenced lock whose acquire is no script (its counter rises on refusals too, which redmutex's does not); {} the unfenced floor; {} the fenced floor",
            ratio(unc.floor_plain.median(), unc.floor1.median()),
            ratio(unc.floor_plain.median(), unc.floor_fenced.median())
        )),
        Row::latency(
            "context: redmutex's acquire from bare redis-rs + the floor's compare-and-delete script",
            unc.bare_floor1.clone(),
        )
        .result(format!(
            "redmutex's try_lock of a fenced lock (its acquire script: SET NX PX and INCR, the holder's TTL when refused), the floor's release; {} the fenced floor",
            ratio(unc.bare_floor1.median(), unc.floor_fenced.median()),
        )),
        Row::latency(
            "context: redmutex's requests from bare redis-rs: acquire commands + release script",
            unc.bare1.clone(),
        )
        .result(format!(
            "redmutex's requests without its transport, lease or renewal; {} the fenced floor; {} the same with the floor's release (the release's look for waiters); the 1-node row is {} it",
            ratio(unc.bare1.median(), unc.floor_fenced.median()),
            ratio(unc.bare1.median(), unc.bare_floor1.median()),
            ratio(unc.redmutex1.median(), unc.bare1.median())
        )),
    ]
}

/// `try_lock` + `unlock` on 1 and on 5 nodes, and on 1 node with fencing off, against their
/// floors (and rslock's rows, when measured).
fn uncontended_rows(unc: &Uncontended) -> Vec<Row> {
    let (r1, r5) = (unc.redmutex1.median(), unc.redmutex5.median());
    let f1 = r1 as f64 / unc.floor1.median().max(1) as f64;
    let u5 = r5 as f64 / r1.max(1) as f64;
    let mut one = vec![
        format!("{} the unfenced floor", ratio(r1, unc.floor1.median())),
        format!("{} the fenced floor", ratio(r1, unc.floor_fenced.median())),
        format!(
            "{} the scriptless fenced floor",
            ratio(r1, unc.floor_plain.median())
        ),
    ];
    if let Some(s) = &unc.rslock1 {
        one.push(format!("{} rslock's 1-node row", ratio(r1, s.median())));
    }
    vec![
        Row::latency(
            "uncontended, 1 node: try_lock + unlock",
            unc.redmutex1.clone(),
        )
        .result(one.join("; "))
        .target("≤ 1.15× the unfenced floor", Mark::of(f1 <= 1.15)),
        Row::latency(
            "uncontended, 5 nodes: try_lock + unlock",
            unc.redmutex5.clone(),
        )
        .result(format!(
            "{} the 1-node row; {} the 5-node fenced floor (which is {} the 1-node fenced floor), {} it read node by node; {} the 5-node PING; {} the 3-of-5 PING",
            fmt_ratio(u5),
            ratio(r5, unc.floor5q.median()),
            ratio(unc.floor5q.median(), unc.floor_fenced.median()),
            ratio(r5, unc.floor5n.median()),
            ratio(r5, unc.ping5.median()),
            ratio(r5, unc.ping5q.median())
        ))
        .target("≤ 1.3× the 1-node row", Mark::of(u5 <= 1.3)),
        Row::latency(
            "uncontended, 1 node, fencing off: try_lock + unlock",
            unc.unfenced1.clone(),
        )
        .result(format!(
            "its try_lock is plain commands (SET NX PX, GET, EXISTS), no script; {} the unfenced floor; {} the fenced 1-node row",
            ratio(unc.unfenced1.median(), unc.floor1.median()),
            ratio(unc.unfenced1.median(), r1)
        )),
    ]
}

/// The semaphore's and the read-write lock's uncontended rows, against the mutex's.
fn kind_rows(unc: &Uncontended) -> Vec<Row> {
    let mutex = unc.redmutex1.median();
    let row = |label: &str, s: &crate::stats::Samples| {
        Row::latency(label, s.clone()).result(format!(
            "{} the mutex's 1-node row",
            ratio(s.median(), mutex)
        ))
    };
    vec![
        row(
            "uncontended semaphore (3 permits), 1 node: try_acquire + unlock",
            &unc.semaphore1,
        ),
        row(
            "uncontended read lock, 1 node: try_read + unlock",
            &unc.read1,
        ),
        row(
            "uncontended write lock, 1 node: try_write + unlock",
            &unc.write1,
        ),
    ]
}

/// `a / b` for the table: `2.07×`.
pub fn ratio(a: u64, b: u64) -> String {
    fmt_ratio(a as f64 / b.max(1) as f64)
}
