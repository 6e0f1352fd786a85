//! `redmutex-bench`: the benchmark command (`make bench`).
//!
//! Starts its own redis-servers on loopback, measures redmutex against a `PING` round trip
//! and against the locks users would pick instead, prints one table and, with `--write`,
//! rewrites BENCHMARKS.md and its plot. See BENCHMARKS.md ("Method") for what each row times.
//!
//! ```text
//! redmutex-bench [--quick] [--write [PATH]] [--no-compare]
//! ```

mod child;
mod contended;
mod external;
mod handoff;
mod lockers;
mod proc;
mod renew;
mod report;
mod stats;
mod svg;
mod uncontended;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use redmutex_tests::{RedisServer, RedisServers};

use crate::child::LOCK_CHILD;
use crate::external::External;
use crate::proc::Proc;
use crate::report::{Mark, Row};
use crate::stats::{fmt_ns, fmt_ratio, sig3, thousands};

const USAGE: &str = "\
usage: redmutex-bench [--quick] [--write [PATH]] [--no-compare]

  --quick       smaller counts (finishes in well under 30 s); never writes BENCHMARKS.md
  --write PATH  write the results to PATH (default BENCHMARKS.md at the repository root)
                and the plot to bench/benchmarks.svg beside it
  --no-compare  only the redmutex rows (no redlock, Python or C rows)

Starts its own redis-servers (redis-server from PATH, or $REDMUTEX_REDIS_SERVER).";

struct Args {
    quick: bool,
    write: Option<PathBuf>,
    compare: bool,
}

fn parse_args(args: &[String]) -> Result<Args, String> {
    let mut a = Args {
        quick: false,
        write: None,
        compare: true,
    };
    let mut it = args.iter().peekable();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--quick" => a.quick = true,
            "--no-compare" => a.compare = false,
            "--write" => {
                let path = match it.next_if(|p| !p.starts_with("--")) {
                    Some(p) => PathBuf::from(p),
                    None => external::repo_root()
                        .unwrap_or_else(|| PathBuf::from("."))
                        .join("BENCHMARKS.md"),
                };
                a.write = Some(path);
            }
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(a)
}

/// How many samples of everything, full or quick.
struct Counts {
    rounds: usize,
    per_round: usize,
    per_round_redlock: usize,
    /// How many chunks the external (Python, C) uncontended rows are measured in.
    chunks: usize,
    handoff: usize,
    handoff_compare: usize,
    settle: (Duration, Duration),
    processes: usize,
    sections: usize,
    renew_locks: usize,
    renew_hold: Duration,
    renew_ttl: Duration,
    python_n: usize,
    c_n: usize,
    churn: usize,
}

impl Counts {
    fn new(quick: bool) -> Counts {
        if quick {
            Counts {
                rounds: 40,
                per_round: 10,
                per_round_redlock: 2,
                chunks: 4,
                handoff: 50,
                handoff_compare: 15,
                settle: (Duration::from_millis(2), Duration::from_millis(6)),
                processes: 4,
                sections: 100,
                renew_locks: 1_000,
                renew_hold: Duration::from_secs(4),
                renew_ttl: Duration::from_secs(3),
                python_n: 200,
                c_n: 200,
                churn: 5_000,
            }
        } else {
            Counts {
                rounds: 500,
                per_round: 10,
                per_round_redlock: 2,
                chunks: 10,
                handoff: 1_000,
                handoff_compare: 200,
                settle: (Duration::from_millis(5), Duration::from_millis(25)),
                processes: 4,
                sections: 500,
                renew_locks: 10_000,
                renew_hold: Duration::from_secs(10),
                renew_ttl: Duration::from_secs(3),
                python_n: 2_000,
                c_n: 5_000,
                churn: 20_000,
            }
        }
    }

    fn describe(&self) -> String {
        format!(
            "uncontended {} samples per row (in {} rounds; redlock {}), handoff {} samples \
             (comparisons {}; settle {}–{} ms), contended {} × {} sections, renew {} locks for {} s \
             (TTL {} s), Python {} samples per row",
            self.rounds * self.per_round,
            self.rounds,
            self.rounds * self.per_round_redlock,
            self.handoff,
            self.handoff_compare,
            self.settle.0.as_millis(),
            self.settle.1.as_millis(),
            self.processes,
            self.sections,
            thousands(self.renew_locks as u64),
            self.renew_hold.as_secs(),
            self.renew_ttl.as_secs(),
            self.python_n
        )
    }
}

fn main() {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    if let Some(code) = child::dispatch(&argv) {
        std::process::exit(code);
    }
    let args = match parse_args(&argv) {
        Ok(a) => a,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("redmutex-bench: {e}");
            }
            eprintln!("{USAGE}");
            std::process::exit(if e.is_empty() { 0 } else { 2 });
        }
    };
    if let Err(e) = run(&args) {
        eprintln!("redmutex-bench: {e}");
        std::process::exit(1);
    }
}

fn progress(what: &str) {
    eprintln!("redmutex-bench: {what}");
}

fn run(args: &Args) -> Result<(), String> {
    let started = Instant::now();
    let counts = Counts::new(args.quick);
    let root = external::repo_root();
    let load_start = report::loadavg();
    progress("starting 6 redis-servers on loopback");
    let one = RedisServer::start();
    let five = RedisServers::start(5);
    let url = one.url();
    let urls5 = five.urls();
    let redis_version = redis_version(&url)?;

    let mut notes: Vec<String> = Vec::new();
    let skip = |notes: &mut Vec<String>, what: &str, why: &str| {
        let line = format!("{what}: skipped — {}", scrub(why, root.as_deref()));
        progress(&line);
        notes.push(line);
    };

    let mut python = None;
    let mut c_prog = None;
    if args.compare {
        match external::python(root.as_deref()) {
            Ok(py) => python = Some(py),
            Err(e) => skip(&mut notes, "Python rows", &e),
        }
        progress("compiling the C binding's program");
        c_prog = Some(external::c_program(root.as_deref()));
    }
    let (c_name, c_label) = ("redmutex-c", "redmutex C binding");
    let mut py_chunks = external::Chunks::default();
    let mut c_chunks = external::Chunks::default();
    progress("uncontended rows and the PING baseline (interleaved, with the Python and C rows)");
    let unc = uncontended::run(
        &url,
        &urls5,
        &uncontended::Plan {
            rounds: counts.rounds,
            per_round: counts.per_round,
            per_round_redlock: counts.per_round_redlock,
            with_redlock: args.compare,
            between_every: counts.rounds / counts.chunks,
        },
        &mut || {
            if let Some(py) = python.as_mut() {
                py_chunks.add_all(py.uncontended(&url, counts.python_n / counts.chunks, 1));
            }
            if let Some(Ok(c)) = &c_prog {
                c_chunks.add(c_name, c_label, c.run(&url, counts.c_n / counts.chunks));
            }
            Ok(())
        },
    )?;
    let base = unc.ping.median();
    let server_time = uncontended::server_time(&url, counts.chunks * 100)?;
    let py_rows = py_chunks.finish();
    let c_row = match c_prog {
        None => None,
        Some(Err(e)) => Some(External {
            name: c_name.into(),
            label: c_label.into(),
            result: Err(e),
        }),
        Some(Ok(_)) => c_chunks.finish().pop(),
    };
    // The baseline again between the later phases, to show how much the machine drifted.
    let mut drift = vec![uncontended::ping_probe(&url, 200)?];

    let hplan = |n: usize| handoff::Plan {
        samples: n,
        warmup: (n / 20).clamp(3, 20),
        settle_min: counts.settle.0,
        settle_max: counts.settle.1,
    };
    let rust_child = |imp: &'static str, key: &'static str| {
        let url = url.clone();
        move |_: usize| Proc::this_exe(&[LOCK_CHILD.into(), imp.into(), url.clone(), key.into()])
    };
    progress("handoff: RPUSH → BLPOP wake-up floor");
    {
        let mut c = redis::Client::open(url.as_str())
            .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(5)))
            .map_err(|e| e.to_string())?;
        redis::pipe()
            .cmd("DEL")
            .arg("bench:handoff:blpop")
            .cmd("RPUSH")
            .arg("bench:handoff:blpop")
            .arg(1)
            .query::<()>(&mut c)
            .map_err(|e| e.to_string())?;
    }
    let h_blpop = handoff::run(
        "blpop",
        &url,
        &hplan(counts.handoff),
        &rust_child("blpop", "bench:handoff:blpop"),
    )?;
    drift.push(uncontended::ping_probe(&url, 200)?);
    progress("handoff: redmutex");
    let h_redmutex = handoff::run(
        "redmutex",
        &url,
        &hplan(counts.handoff),
        &rust_child("redmutex", "bench:handoff:redmutex"),
    )?;
    // (label, handoff) of every comparison that ran.
    let mut h_compare: Vec<(String, handoff::Handoff)> = Vec::new();
    if args.compare {
        progress("handoff: redlock");
        match handoff::run(
            "redlock",
            &url,
            &hplan(counts.handoff_compare),
            &rust_child("redlock", "bench:handoff:redlock"),
        ) {
            Ok(h) => h_compare.push(("redlock 2.0.0".into(), h)),
            Err(e) => skip(&mut notes, "redlock handoff", &e),
        }
        if let Some(py) = &python {
            for e in &py_rows {
                if e.name == "ping" {
                    continue;
                }
                if let Err(why) = &e.result {
                    skip(&mut notes, &format!("{} handoff", e.label), why);
                    continue;
                }
                drift.push(uncontended::ping_probe(&url, 200)?);
                progress(&format!("handoff: {}", e.label));
                let key = format!("bench:handoff:{}", e.name);
                let n = if e.name == "redmutex-py" {
                    counts.handoff_compare.max(counts.handoff / 4)
                } else {
                    counts.handoff_compare
                };
                match handoff::run(&e.label, &url, &hplan(n), &|_| {
                    Ok(py.child(&e.name, &url, &key))
                }) {
                    Ok(h) => h_compare.push((e.label.clone(), h)),
                    Err(why) => skip(&mut notes, &format!("{} handoff", e.label), &why),
                }
            }
        }
    }

    drift.push(uncontended::ping_probe(&url, 200)?);
    progress(&format!(
        "contended: {} processes × {} sections",
        counts.processes, counts.sections
    ));
    let cont = contended::run(&url, counts.processes, counts.sections)?;

    drift.push(uncontended::ping_probe(&url, 200)?);
    progress(&format!(
        "renew scale: {} locks for {} s",
        thousands(counts.renew_locks as u64),
        counts.renew_hold.as_secs()
    ));
    let ren = renew::run(
        &url,
        counts.renew_locks,
        counts.renew_hold,
        counts.renew_ttl,
    )?;
    progress(&format!(
        "lock churn: {} try_lock + unlock cycles",
        thousands(counts.churn as u64)
    ));
    let churn = renew::churn(&url, counts.churn)?;
    let load_end = report::loadavg();

    // ---- the table ----
    let mut rows: Vec<Row> = Vec::new();
    let mut summary: Vec<String> = Vec::new();
    let mut check = |row: Row, summary: &mut Vec<String>| {
        if row.mark != Mark::None {
            summary.push(format!(
                "{} **{}**: {} (target {})",
                match row.mark {
                    Mark::Pass => "PASS",
                    _ => "MISS",
                },
                row.name,
                [
                    row.samples
                        .as_ref()
                        .map(|s| {
                            format!(
                                "median {} = {}, p99 {} = {}",
                                fmt_ns(s.median()),
                                fmt_ratio(s.median() as f64 / base as f64),
                                fmt_ns(s.p99()),
                                fmt_ratio(s.p99() as f64 / base as f64)
                            )
                        })
                        .unwrap_or_default(),
                    row.result.clone(),
                ]
                .into_iter()
                .filter(|s| !s.is_empty())
                .collect::<Vec<_>>()
                .join("; "),
                row.target
            ));
        }
        rows.push(row);
    };
    let r = |x: u64| x as f64 / base.max(1) as f64;

    check(
        Row::latency("baseline: PING, 1 node (redis-rs)", unc.ping.clone()),
        &mut summary,
    );
    check(
        Row::latency("context: PING to 5 nodes at once", unc.ping5.clone())
            .result("floor of a 5-node round"),
        &mut summary,
    );
    check(
        Row::latency(
            "context: SET NX PX + compare-and-delete script",
            unc.floor1.clone(),
        )
        .result("floor of a lock with a safe release (redis-rs alone)"),
        &mut summary,
    );
    let u1 = r(unc.redmutex1.median());
    check(
        Row::latency(
            "uncontended, 1 node: try_lock + unlock",
            unc.redmutex1.clone(),
        )
        .result(format!(
            "{} that floor",
            fmt_ratio(unc.redmutex1.median() as f64 / unc.floor1.median().max(1) as f64)
        ))
        .target("median ≤ 2.3×", Mark::of(u1 <= 2.3)),
        &mut summary,
    );
    let u5 = unc.redmutex5.median() as f64 / unc.redmutex1.median().max(1) as f64;
    check(
        Row::latency(
            "uncontended, 5 nodes: try_lock + unlock",
            unc.redmutex5.clone(),
        )
        .result(format!(
            "{} the 1-node row; {} the 5-node PING",
            fmt_ratio(u5),
            fmt_ratio(unc.redmutex5.median() as f64 / unc.ping5.median().max(1) as f64)
        ))
        .target("≤ 1.3× the 1-node row", Mark::of(u5 <= 1.3)),
        &mut summary,
    );
    check(
        handoff_row("context: RPUSH → BLPOP wake-up (2 processes)", &h_blpop),
        &mut summary,
    );
    let hm = r(h_redmutex.samples.median());
    let hp = r(h_redmutex.samples.p99());
    check(
        Row::latency("handoff, 1 node (2 processes)", h_redmutex.samples.clone())
            .result(format!(
                "waiter blocked at release {:.0}%",
                100.0 * h_redmutex.blocked as f64 / h_redmutex.samples.len().max(1) as f64
            ))
            .target("median ≤ 3×, p99 ≤ 10×", Mark::of(hm <= 3.0 && hp <= 10.0)),
        &mut summary,
    );
    check(
        Row::latency(
            format!(
                "contended: wait in lock() ({} × {})",
                cont.processes, cont.per_process
            ),
            cont.wait.clone(),
        ),
        &mut summary,
    );
    let min_tp = 1e9 / (5.0 * base.max(1) as f64);
    check(
        Row::value(
            "contended: throughput",
            format!(
                "{} sections/s ({} in {})",
                thousands(cont.throughput.round() as u64),
                thousands((cont.processes * cont.per_process) as u64),
                fmt_ns(cont.elapsed_ns)
            ),
        )
        .target(
            format!(
                "≥ {}/s = 1/(5 × baseline)",
                thousands(min_tp.round() as u64)
            ),
            Mark::of(cont.throughput >= min_tp),
        ),
        &mut summary,
    );
    let total = cont.processes * cont.per_process;
    check(
        Row::value(
            "contended: owner switches",
            format!(
                "{} of {}",
                thousands(cont.owner_switches as u64),
                thousands(total.saturating_sub(1) as u64)
            ),
        ),
        &mut summary,
    );
    check(
        Row::value("contended: lost updates", cont.lost_updates.to_string())
            .target("= 0", Mark::of(cont.lost_updates == 0)),
        &mut summary,
    );
    let min_share = cont.shares.iter().copied().fold(f64::INFINITY, f64::min);
    check(
        Row::value(
            "contended: share per process",
            format!(
                "{} % of the first {} sections",
                cont.shares
                    .iter()
                    .map(|s| format!("{:.0}", s * 100.0))
                    .collect::<Vec<_>>()
                    .join(" / "),
                thousands(cont.window as u64)
            ),
        )
        .target("each ≥ 10%", Mark::of(min_share >= 0.10)),
        &mut summary,
    );
    let lost = ren.lost.max(ren.lost_redis);
    check(
        Row::value(
            format!(
                "renew scale: locks lost ({} × TTL {} s, {} s)",
                thousands(ren.locks),
                sig3(ren.ttl_ns as f64 / 1e9),
                sig3(ren.hold_ns as f64 / 1e9)
            ),
            format!(
                "{} (renewals per lock: min {}, median {}; least PTTL left {} ms)",
                lost, ren.min_renewals, ren.median_renewals, ren.min_pttl_ms
            ),
        )
        .target("= 0", Mark::of(lost == 0)),
        &mut summary,
    );
    check(
        Row::value(
            "renew scale: renew threads",
            format!(
                "{} (its CPU: {} in {})",
                ren.renew_threads,
                fmt_ns(ren.renew_cpu_ns),
                fmt_ns(ren.hold_ns)
            ),
        )
        .target("= 1", Mark::of(ren.renew_threads == 1)),
        &mut summary,
    );
    check(
        Row::value(
            "renew scale: resident memory growth",
            format!(
                "{:.1} MB (after release {:+.1} MB)",
                ren.rss_growth as f64 / 1e6,
                ren.rss_after_release as f64 / 1e6
            ),
        )
        .target("< 20 MB", Mark::of(ren.rss_growth < 20_000_000)),
        &mut summary,
    );
    let per_cycle = churn.growth.max(0) as f64 / churn.cycles.max(1) as f64;
    check(
        Row::value(
            "lock churn: memory kept per try_lock + unlock",
            format!(
                "{per_cycle:.0} B ({} cycles in {}: {:+.1} MB)",
                thousands(churn.cycles),
                fmt_ns(churn.elapsed_ns),
                churn.growth as f64 / 1e6
            ),
        )
        .target("< 100 B (DESIGN §6)", Mark::of(per_cycle < 100.0)),
        &mut summary,
    );
    notes.push(format!(
        "floors of this machine: one 5-node scatter/gather PING round is {} the 1-node PING \
         ({} CPUs for 5 servers and the client), so the 5-node row is {} its own floor against \
         {} for the 1-node row. A waiter that slept wakes in {} at best (RPUSH → BLPOP across \
         processes, median); redmutex's handoff is {} that floor (the waiter's acquire script \
         runs on the server right behind its BLPOP, and the release's own round trip adds the \
         rest).",
        fmt_ratio(unc.ping5.median() as f64 / base.max(1) as f64),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        fmt_ratio(unc.redmutex5.median() as f64 / unc.ping5.median().max(1) as f64),
        fmt_ratio(u1),
        fmt_ns(h_blpop.samples.median()),
        fmt_ratio(h_redmutex.samples.median() as f64 / h_blpop.samples.median().max(1) as f64),
    ));
    notes.push(format!(
        "a lock whose release is safe costs at least {} the PING here: SET NX PX, then a \
         compare-and-delete script, with redis-rs alone (Redis 7 has no compare-and-delete \
         command). redmutex's 1-node row is {} that floor: its acquire is a script too (the \
         hand-off window, the fence counter; see the server time below), and the client keeps \
         the guard, its renewal and the hand-off state.",
        fmt_ratio(unc.floor1.median() as f64 / base.max(1) as f64),
        fmt_ratio(unc.redmutex1.median() as f64 / unc.floor1.median().max(1) as f64),
    ));
    notes.push(format!(
        "PING median in short probes between the later phases (handoff, contended, renew): \
         {}–{} (the baseline row, interleaved with the uncontended rows: {}).",
        fmt_ns(drift.iter().copied().min().unwrap_or(0)),
        fmt_ns(drift.iter().copied().max().unwrap_or(0)),
        fmt_ns(base)
    ));
    notes.push(format!(
        "server time per call (INFO commandstats, 1 node): PING {:.2} µs; redmutex's acquire \
         and release scripts {:.2} µs on average, {:.1} of them per try_lock + unlock.",
        server_time.ping_us, server_time.script_us, server_time.scripts_per_op
    ));
    notes.push(format!(
        "renew scale: taking the {} locks one by one took {}, releasing them {}.",
        thousands(ren.locks),
        fmt_ns(ren.acquire_ns),
        fmt_ns(ren.release_ns)
    ));

    if args.compare {
        for (label, s) in [
            ("redlock 2.0.0: uncontended, 1 node", &unc.redlock1),
            ("redlock 2.0.0: uncontended, 5 nodes", &unc.redlock5),
        ] {
            if let Some(s) = s {
                rows.push(Row::latency(label, s.clone()));
            }
        }
        for (label, h) in h_compare.iter().filter(|(l, _)| l.starts_with("redlock")) {
            rows.push(handoff_row(label, h));
        }
        for e in &py_rows {
            match &e.result {
                Ok(s) if e.name == "ping" => rows.push(
                    Row::latency(format!("{}: PING (Python context)", e.label), s.clone())
                        .result("Python client's own round trip"),
                ),
                Ok(s) => rows.push(Row::latency(
                    format!("{}: uncontended, 1 node", e.label),
                    s.clone(),
                )),
                Err(why) => {
                    rows.push(Row::value(
                        format!("{}: uncontended", e.label),
                        "skipped (see notes)",
                    ));
                    skip(&mut notes, &format!("{} uncontended", e.label), why);
                }
            }
            if let Some((label, h)) = h_compare.iter().find(|(l, _)| *l == e.label) {
                rows.push(handoff_row(label, h));
            }
        }
        if let Some(c) = c_row {
            match c.result {
                Ok(s) => rows.push(Row::latency(format!("{}: uncontended, 1 node", c.label), s)),
                Err(why) => {
                    rows.push(Row::value(
                        format!("{}: uncontended", c.label),
                        "skipped (see notes)",
                    ));
                    skip(&mut notes, &format!("{} uncontended", c.label), &why);
                }
            }
        }
    }

    let table = report::table(&rows, base);
    println!();
    println!("{table}");
    for n in &notes {
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

    if let Some(path) = &args.write {
        if args.quick {
            println!("quick run: {} not written", path.display());
            return Ok(());
        }
        let mut machine =
            report::Machine::read(&redis_version, python.as_ref().map(|p| p.version.as_str()));
        machine.push(
            "load average (1 min)",
            format!("{load_start} at start, {load_end} at end"),
        );
        machine.push("date (UTC)", report::today());
        if let Some(c) = git_commit(root.as_deref()) {
            machine.push("commit", c);
        }
        machine.push("run time", format!("{:.0} s", elapsed.as_secs_f64()));
        let dir = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let svg_rel = "bench/benchmarks.svg";
        let mut series = vec![
            svg::Series {
                label: "RPUSH → BLPOP floor",
                samples: &h_blpop.samples,
            },
            svg::Series {
                label: "redmutex",
                samples: &h_redmutex.samples,
            },
        ];
        for (label, h) in &h_compare {
            series.push(svg::Series {
                label,
                samples: &h.samples,
            });
        }
        let plot = svg::Plot {
            handoff: series,
            baseline_ns: base,
            processes: cont
                .shares
                .iter()
                .zip(&cont.wait_by_process)
                .map(|(sh, w)| (*sh, w.median(), w.p99()))
                .collect(),
            title: &format!(
                "redmutex-bench {} — {} CPUs, redis {}",
                report::today(),
                std::thread::available_parallelism().map_or(0, |n| n.get()),
                redis_version
            ),
        };
        std::fs::create_dir_all(dir.join("bench")).map_err(|e| e.to_string())?;
        std::fs::write(dir.join(svg_rel), svg::render(&plot))
            .map_err(|e| format!("{svg_rel}: {e}"))?;
        let md = report::markdown(&report::Document {
            table: &table,
            notes: &notes,
            machine: &machine,
            summary: &summary,
            svg_rel,
            counts: &counts.describe(),
        });
        std::fs::write(path, md).map_err(|e| format!("{}: {e}", path.display()))?;
        println!("wrote {} and {svg_rel}", path.display());
    }
    Ok(())
}

fn handoff_row(label: &str, h: &handoff::Handoff) -> Row {
    let name = if label.starts_with("context") {
        label.to_owned()
    } else {
        format!("{label}: handoff, 1 node")
    };
    Row::latency(name, h.samples.clone()).result(format!(
        "waiter blocked at release {:.0}%",
        100.0 * h.blocked as f64 / h.samples.len().max(1) as f64
    ))
}

fn redis_version(url: &str) -> Result<String, String> {
    let mut c = redis::Client::open(url)
        .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(5)))
        .map_err(|e| e.to_string())?;
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query(&mut c)
        .map_err(|e| e.to_string())?;
    Ok(info
        .lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .unwrap_or("?")
        .trim()
        .to_owned())
}

fn git_commit(root: Option<&Path>) -> Option<String> {
    let root = root?;
    let out = std::process::Command::new("git")
        .arg("-C")
        .arg(root)
        .args(["rev-parse", "--short", "HEAD"])
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let hash = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let dirty = std::process::Command::new("git")
        .arg("-C")
        .arg(root)
        .args(["status", "--porcelain", "--untracked-files=no"])
        .output()
        .map(|o| !o.stdout.is_empty())
        .unwrap_or(false);
    Some(if dirty {
        format!("{hash} (with uncommitted changes)")
    } else {
        hash
    })
}

/// Removes machine paths from a note: the repository root becomes `.`, temp dirs `<tmp>`.
fn scrub(s: &str, root: Option<&Path>) -> String {
    let mut s = s.to_owned();
    if let Some(root) = root {
        s = s.replace(&root.display().to_string(), ".");
    }
    s.replace(&std::env::temp_dir().display().to_string(), "<tmp>")
}
