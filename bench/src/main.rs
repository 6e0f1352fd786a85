//! `redmutex-bench`: the benchmark command (`make bench`).
//!
//! Starts its own redis-servers on loopback, measures redmutex against a `PING` round trip
//! and against the locks users would pick instead, prints one table and, with `--write`,
//! rewrites BENCHMARKS.md and its plot. See BENCHMARKS.md ("Method") for what each row times.
//!
//! ```text
//! redmutex-bench [--quick] [--write [PATH]] [--no-compare]
//! ```

mod bare;
mod child;
mod contended;
mod cost;
mod counts;
mod external;
mod handoff;
mod info;
mod lockers;
mod phase;
mod pin;
mod proc;
mod publish;
mod quorum;
mod renew;
mod report;
mod rslock;
mod stats;
mod svg;
mod uncontended;

use std::path::PathBuf;
use std::time::Instant;

use clap::Parser;
use redmutex_tests::{RedisServer, RedisServers};

use crate::counts::Counts;
use crate::phase::{Ctx, Notes, progress};
use crate::stats::{fmt_ns, fmt_ratio, thousands};

/// Measures redmutex against a PING round trip and against the locks users would pick
/// instead, on redis-servers of its own (redis-server from PATH, or $REDMUTEX_REDIS_SERVER).
#[derive(Parser)]
#[command(name = "redmutex-bench")]
struct Args {
    /// Smaller counts (finishes in well under 30 s); never writes BENCHMARKS.md.
    #[arg(long)]
    quick: bool,
    /// Write the results to PATH (default BENCHMARKS.md at the repository root) and the plot
    /// to bench/benchmarks.svg beside it.
    #[arg(long, value_name = "PATH", num_args = 0..=1)]
    write: Option<Option<PathBuf>>,
    /// Only the redmutex rows (no redlock, Python or C rows).
    #[arg(long)]
    no_compare: bool,
}

impl Args {
    /// Where `--write` writes, if it was given.
    fn write_path(&self) -> Option<PathBuf> {
        self.write.as_ref().map(|p| {
            p.clone().unwrap_or_else(|| {
                external::repo_root()
                    .unwrap_or_else(|| PathBuf::from("."))
                    .join("BENCHMARKS.md")
            })
        })
    }
}

fn main() {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    if let Some(code) = child::dispatch(&argv) {
        std::process::exit(code);
    }
    let args = Args::parse();
    if let Err(e) = run(&args) {
        eprintln!("redmutex-bench: {e}");
        std::process::exit(1);
    }
}

fn run(args: &Args) -> Result<(), String> {
    let started = Instant::now();
    let counts = Counts::new(args.quick);
    let root = external::repo_root();
    let load_start = report::loadavg();
    progress("starting 6 redis-servers on loopback");
    let one = RedisServer::start();
    let five = RedisServers::start(5);
    let pids: Vec<u32> = std::iter::once(&one)
        .chain(five.iter())
        .map(|s| s.pid())
        .collect();
    progress(&format!("CPUs: {}", pin::split(&pids).placement));
    let mut ctx = Ctx {
        url: one.url(),
        urls5: five.urls(),
        counts: &counts,
        compare: !args.no_compare,
        root: root.as_deref(),
        base: 0,
    };
    let redis_version = publish::redis_version(&ctx.url)?;
    let mut notes = Notes::new(ctx.root);

    let mut peers = phase::peers::prepare(&ctx, &mut notes);
    let latency = phase::latency::run(&ctx, &mut peers)?;
    ctx.base = latency.data.base;
    // The baseline again between the later phases, to show how much the machine drifted.
    let mut drift = Vec::new();
    ctx.probe(&mut drift)?;
    let handoff = phase::handoff::run(&ctx, &peers, &latency.data.python, &mut drift, &mut notes)?;
    ctx.probe(&mut drift)?;
    let contended = phase::contended::run(&ctx)?;
    ctx.probe(&mut drift)?;
    let renew = phase::renew::run(&ctx)?;
    ctx.probe(&mut drift)?;
    let waiters = phase::waiters::run(&ctx, &peers, &mut notes)?;
    let readers = phase::readers::run(&ctx)?;
    let fleet = phase::fleet::run(
        &ctx,
        handoff.data.redmutex.samples.median(),
        peers.python.as_ref(),
        peers.c.as_ref().and_then(|c| c.as_ref().ok()),
        &mut notes,
    )?;
    let load_end = report::loadavg();

    let base = ctx.base;
    let mut rows = latency.rows;
    rows.extend(handoff.rows);
    rows.extend(contended.rows);
    rows.extend(renew.rows);
    rows.extend(waiters.rows);
    rows.extend(readers.rows);
    rows.extend(fleet.rows);
    let summary = report::summary(&rows, base);
    for n in closing_notes(&latency.data, &handoff.data, &renew.data, &drift) {
        notes.push(n);
    }
    if ctx.compare {
        let measured = phase::peers::Measured {
            unc: &latency.data.unc,
            python: &latency.data.python,
            c: latency.data.c.as_ref(),
            rust_process: latency.data.rust_process.as_ref(),
            rust_one_lock: latency.data.rust_one_lock.as_ref(),
            handoff: &handoff.data.compare,
        };
        rows.extend(phase::peers::rows(&measured, &mut notes));
    }

    let table = report::table(&rows, base);
    println!();
    println!("{table}");
    for n in &notes.lines {
        println!("note: {n}");
    }
    println!();
    for s in &summary {
        println!("{}", s.replace("**", ""));
    }
    let elapsed = started.elapsed();
    println!(
        "\nbaseline (PING median) {}; load average {} at start, {} at end; took {:.0} s",
        fmt_ns(base),
        load_start,
        load_end,
        elapsed.as_secs_f64()
    );

    if let Some(path) = args.write_path() {
        if args.quick {
            println!("quick run: {} not written", path.display());
            return Ok(());
        }
        publish::write(&publish::Results {
            path: &path,
            root: ctx.root,
            table: &table,
            notes: &notes.lines,
            summary: &summary,
            counts: &counts,
            redis_version: &redis_version,
            python: peers.python.as_ref().map(|p| p.version.as_str()),
            load: (&load_start, &load_end),
            elapsed,
            handoff: &handoff.data,
            contended: &contended.data,
            base,
        })?;
    }
    Ok(())
}

/// The notes that read across phases: this machine's floors, the drift of the baseline, the
/// server's own time per call, how long taking the renewed locks took.
fn closing_notes(
    lat: &phase::latency::Latency,
    hand: &phase::handoff::Handoffs,
    ren: &renew::Renew,
    drift: &[u64],
) -> Vec<String> {
    let (unc, base) = (&lat.unc, lat.base);
    let ratio = |a: u64, b: u64| fmt_ratio(a as f64 / b.max(1) as f64);
    vec![
        format!(
            "floors of this machine: one 5-node scatter/gather PING round is {} the 1-node PING \
             ({}), so the 5-node row is {} its own floor \
             against {} for the 1-node row; the fenced floor on 5 nodes, each round done at its \
             quorum, is {} the fenced floor on one, and the 5-node row {} it; read node by node, \
             as a client must that cannot wait on every socket at once (redis-rs's blocking \
             connections), that floor \
             is {} and the 5-node row {} it. \
             A waiter that slept wakes in {} at best (RPUSH → \
             BLPOP across processes, median), and in {} when a script sends the wake-up: a \
             release is a script on Redis 7 (no compare-and-delete command), and a script on a \
             server that sat idle until the release costs far more than RPUSH. A hand-off \
             whose waiter takes the lock itself, with a second script pipelined behind its \
             BLPOP (Redis 7 has no compare-and-set command either), wakes in {} at best, {} \
             the first floor. redmutex's handoff is {} the first floor, {} the second and {} \
             the third: its release is one script, and the waiter's acquire, pipelined behind \
             its BLPOP, a second one.",
            ratio(unc.ping5.median(), base),
            pin::current().placement,
            ratio(unc.redmutex5.median(), unc.ping5.median()),
            ratio(unc.redmutex1.median(), base),
            ratio(unc.floor5q.median(), unc.floor_fenced.median()),
            ratio(unc.redmutex5.median(), unc.floor5q.median()),
            ratio(unc.floor5n.median(), unc.floor_fenced.median()),
            ratio(unc.redmutex5.median(), unc.floor5n.median()),
            fmt_ns(hand.blpop.samples.median()),
            fmt_ns(hand.blpop_script.samples.median()),
            fmt_ns(hand.blpop_claim.samples.median()),
            ratio(
                hand.blpop_claim.samples.median(),
                hand.blpop.samples.median()
            ),
            ratio(hand.redmutex.samples.median(), hand.blpop.samples.median()),
            ratio(
                hand.redmutex.samples.median(),
                hand.blpop_script.samples.median()
            ),
            ratio(
                hand.redmutex.samples.median(),
                hand.blpop_claim.samples.median()
            ),
        ),
        format!(
            "a lock whose release is safe costs at least {} the PING here: SET NX PX, then a \
             compare-and-delete script, with redis-rs alone (Redis 7 has no compare-and-delete \
             command); with a fence whose INCR only on success needs its acquire to be a script \
             too, {}; with a fenced acquire that is no script (SET NX PX and INCR in one write, \
             whose counter then rises on refusals too), {}. redmutex's 1-node row (a fenced \
             lock, the default) is {} the first floor and {} the fenced one: its acquire is a \
             script like the fenced floor's that also looks for read holds of the same name and \
             reads the holder's TTL when refused, its release a script that also looks for \
             waiters (see the server time below), and the client keeps the guard, its renewal \
             and the waiter state. With fencing off its try_lock is no script: SET NX PX, a GET \
             (its own token, should the request run twice) and an EXISTS (read holds) in one \
             write, {} the first floor.",
            ratio(unc.floor1.median(), base),
            ratio(unc.floor_fenced.median(), base),
            ratio(unc.floor_plain.median(), base),
            ratio(unc.redmutex1.median(), unc.floor1.median()),
            ratio(unc.redmutex1.median(), unc.floor_fenced.median()),
            ratio(unc.unfenced1.median(), unc.floor1.median()),
        ),
        format!(
            "CPU per try_lock + unlock (/proc, the client and every server it asks): one node \
             {:.0} µs in the client and {:.0} µs in the server (the fenced floor, redis-rs alone: \
             {:.0} µs and {:.0} µs); five nodes {:.0} µs and {:.0} µs. \
             With {} (of {} CPUs), a 5-node cycle therefore takes {} on average at least, {} \
             the 1-node cycle's mean in the same measure ({}; the 5-node cycles there took {}), \
             however well its rounds overlap; with a CPU per process (as on a real fleet) the \
             quorum round's own floor is the 3-of-5 PING row.",
            lat.cpu1.client_us,
            lat.cpu1.servers_us,
            lat.cpu_floor.client_us,
            lat.cpu_floor.servers_us,
            lat.cpu5.client_us,
            lat.cpu5.servers_us,
            pin::current().placement,
            pin::current().machine,
            fmt_ns(lat.cpu5.floor_ns()),
            ratio(lat.cpu5.floor_ns(), lat.cpu1.wall_ns()),
            fmt_ns(lat.cpu1.wall_ns()),
            fmt_ns(lat.cpu5.wall_ns()),
        ),
        format!(
            "PING median in short probes between the later phases (handoff, contended, renew): \
             {}–{} (the baseline row, interleaved with the uncontended rows: {}).",
            fmt_ns(drift.iter().copied().min().unwrap_or(0)),
            fmt_ns(drift.iter().copied().max().unwrap_or(0)),
            fmt_ns(base)
        ),
        format!(
            "server time (INFO commandstats, 1 node): PING {:.2} µs; per try_lock + unlock, \
             every command counted: redmutex {:.2} µs (fencing off: {:.2} µs), the fenced \
             floor's two scripts {:.2} µs, the scriptless fenced floor {:.2} µs.",
            lat.server_time.ping_us,
            lat.server_time.redmutex_us,
            lat.server_time.unfenced_us,
            lat.server_time.fenced_us,
            lat.server_time.plain_us
        ),
        format!(
            "renew scale: taking the {} locks one by one took {}, releasing them {}.",
            thousands(ren.locks),
            fmt_ns(ren.acquire_ns),
            fmt_ns(ren.release_ns)
        ),
    ]
}
