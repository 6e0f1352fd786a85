//! The table, the machine it ran on, and BENCHMARKS.md.

use std::fmt::Write;

use crate::handoff::Handoff;
use crate::stats::{Samples, fmt_ns, fmt_ratio};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mark {
    Pass,
    Miss,
    /// No target (context or comparison rows).
    None,
}

impl Mark {
    pub fn of(ok: bool) -> Mark {
        if ok { Mark::Pass } else { Mark::Miss }
    }

    fn text(self) -> &'static str {
        match self {
            Mark::Pass => "PASS",
            Mark::Miss => "MISS",
            Mark::None => "",
        }
    }
}

/// One line of the table. Latency rows carry samples; the others a result text.
pub struct Row {
    pub name: String,
    pub samples: Option<Samples>,
    pub result: String,
    pub target: String,
    pub mark: Mark,
}

impl Row {
    pub fn latency(name: impl Into<String>, samples: Samples) -> Row {
        Row {
            name: name.into(),
            samples: Some(samples),
            result: String::new(),
            target: String::new(),
            mark: Mark::None,
        }
    }

    pub fn value(name: impl Into<String>, result: impl Into<String>) -> Row {
        Row {
            name: name.into(),
            samples: None,
            result: result.into(),
            target: String::new(),
            mark: Mark::None,
        }
    }

    pub fn result(mut self, r: impl Into<String>) -> Row {
        self.result = r.into();
        self
    }

    pub fn target(mut self, t: impl Into<String>, mark: Mark) -> Row {
        self.target = t.into();
        self.mark = mark;
        self
    }
}

/// A hand-off row of a context or a peer.
pub fn handoff_row(label: &str, h: &Handoff) -> Row {
    let name = if label.starts_with("context") {
        label.to_owned()
    } else {
        format!("{label}: handoff, 1 node")
    };
    Row::latency(name, h.samples.clone()).result(blocked_at_release(h))
}

/// How often the waiter was already blocked in the server when the holder released.
pub fn blocked_at_release(h: &Handoff) -> String {
    format!(
        "waiter blocked at release {:.0}%",
        100.0 * h.blocked as f64 / h.samples.len().max(1) as f64
    )
}

/// One line per row with a target, in table order: `PASS **name**: measured (target …)`.
pub fn summary(rows: &[Row], baseline_ns: u64) -> Vec<String> {
    rows.iter()
        .filter(|row| row.mark != Mark::None)
        .map(|row| {
            let measured = [
                row.samples
                    .as_ref()
                    .map(|s| {
                        format!(
                            "median {} = {}, p99 {} = {}",
                            fmt_ns(s.median()),
                            fmt_ratio(s.median() as f64 / baseline_ns as f64),
                            fmt_ns(s.p99()),
                            fmt_ratio(s.p99() as f64 / baseline_ns as f64)
                        )
                    })
                    .unwrap_or_default(),
                row.result.clone(),
            ]
            .into_iter()
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>()
            .join("; ");
            format!(
                "{} **{}**: {} (target {})",
                row.mark.text(),
                row.name,
                measured,
                row.target
            )
        })
        .collect()
}

/// The table as Markdown with padded columns, so it reads the same in a terminal.
/// Ratios are to the baseline's median: `median ×` = median / baseline, `p99 ×` = p99 / baseline.
pub fn table(rows: &[Row], baseline_ns: u64) -> String {
    let header = [
        "row",
        "n",
        "median",
        "p99",
        "median ×",
        "p99 ×",
        "result",
        "target",
        "",
    ];
    let mut cells: Vec<[String; 9]> = Vec::new();
    for r in rows {
        let (n, med, p99, rm, rp) = match &r.samples {
            Some(s) if !s.is_empty() => {
                let b = baseline_ns.max(1) as f64;
                (
                    s.len().to_string(),
                    fmt_ns(s.median()),
                    fmt_ns(s.p99()),
                    fmt_ratio(s.median() as f64 / b),
                    fmt_ratio(s.p99() as f64 / b),
                )
            }
            _ => Default::default(),
        };
        cells.push([
            r.name.clone(),
            n,
            med,
            p99,
            rm,
            rp,
            r.result.clone(),
            r.target.clone(),
            r.mark.text().to_owned(),
        ]);
    }
    let mut width = header.map(|h| h.chars().count());
    for c in &cells {
        for (i, v) in c.iter().enumerate() {
            width[i] = width[i].max(v.chars().count());
        }
    }
    // Numbers right-aligned, text left-aligned.
    let right = [false, true, true, true, true, true, false, false, false];
    let line = |vals: &[String]| {
        let mut s = String::from("|");
        for (i, v) in vals.iter().enumerate() {
            let pad = width[i] - v.chars().count();
            if right[i] {
                let _ = write!(s, " {}{} |", " ".repeat(pad), v);
            } else {
                let _ = write!(s, " {}{} |", v, " ".repeat(pad));
            }
        }
        s
    };
    let mut out = line(&header.map(str::to_owned));
    out.push('\n');
    out.push('|');
    for (i, w) in width.iter().enumerate() {
        let dashes = "-".repeat(*w + 1);
        if right[i] {
            let _ = write!(out, "{dashes}:|");
        } else {
            let _ = write!(out, ":{dashes}|");
        }
    }
    out.push('\n');
    for c in &cells {
        out.push_str(&line(c));
        out.push('\n');
    }
    out
}

/// Facts about the machine and the run, as (label, value).
pub struct Machine {
    pub facts: Vec<(String, String)>,
}

impl Machine {
    pub fn read(redis_version: &str, python: Option<&str>) -> Machine {
        let mut facts = Vec::new();
        let cpus = crate::pin::current();
        facts.push(("CPUs (nproc)".to_owned(), cpus.machine.to_string()));
        facts.push(("CPU placement".to_owned(), cpus.placement.clone()));
        let cpu = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("model name"))
                    .and_then(|l| l.split_once(':'))
                    .map(|(_, v)| v.trim().to_owned())
            })
            .unwrap_or_else(|| "?".into());
        facts.push(("CPU model".to_owned(), cpu));
        let mem = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("MemTotal:"))
                    .and_then(|l| l.split_whitespace().nth(1))
                    .and_then(|v| v.parse::<u64>().ok())
            })
            .map(|kb| format!("{:.1} GiB", kb as f64 / 1024.0 / 1024.0))
            .unwrap_or_else(|| "?".into());
        facts.push(("memory".to_owned(), mem));
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| format!("Linux {}", s.trim()))
            .unwrap_or_else(|_| "?".into());
        facts.push(("kernel".to_owned(), kernel));
        facts.push(("redis-server".to_owned(), redis_version.to_owned()));
        if let Some(py) = python {
            facts.push(("Python".to_owned(), py.to_owned()));
        }
        facts.push(("bench build".to_owned(), build_profile()));
        Machine { facts }
    }

    pub fn push(&mut self, label: &str, value: String) {
        self.facts.push((label.to_owned(), value));
    }
}

/// The 1-minute load average, to tell a quiet machine from a busy one.
pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "?".into())
}

/// Today's date (UTC) as YYYY-MM-DD, from the system clock.
pub fn today() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let days = (secs / 86_400) as i64;
    // Civil from days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

pub struct Document<'a> {
    pub table: &'a str,
    pub notes: &'a [String],
    pub machine: &'a Machine,
    pub summary: &'a [String],
    pub svg_rel: &'a str,
    pub counts: &'a str,
}

/// BENCHMARKS.md, entirely generated (rerun `make bench` to update it).
pub fn markdown(d: &Document) -> String {
    let mut s = String::new();
    s.push_str(
        "# Benchmarks\n\n\
         <!-- Generated by `make bench` (bench/, the redmutex-bench command); edits are overwritten. -->\n\n\
         `make bench` starts its own `redis-server`s on loopback, measures everything below in one \
         run, prints the table, and rewrites this file and the plot. Every ratio is to the \
         baseline measured in the same run — one `PING` round trip with redis-rs, the client \
         library redmutex uses — because the machines are shared and noisy: compare ratios, \
         not absolute times.\n\n",
    );
    s.push_str("## Latest run\n\n");
    s.push_str("| machine | |\n|:--|:--|\n");
    for (k, v) in &d.machine.facts {
        let _ = writeln!(s, "| {k} | {v} |");
    }
    let _ = writeln!(s, "\nCounts: {}.\n", d.counts);
    s.push_str(d.table);
    if !d.notes.is_empty() {
        s.push_str("\nNotes:\n\n");
        for n in d.notes {
            let _ = writeln!(s, "- {n}");
        }
    }
    if !d.summary.is_empty() {
        s.push_str("\nAgainst the targets:\n\n");
        for line in d.summary {
            let _ = writeln!(s, "- {line}");
        }
    }
    let _ = writeln!(
        s,
        "\n![Handoff latency CDF and contended shares/waits]({})\n",
        d.svg_rel
    );
    s.push_str(METHOD);
    s
}

const METHOD: &str = "## Method\n\n\
- **baseline**: `PING` on one node with redis-rs's blocking `Connection` (`query`), timed with \
`Instant`. The *5-node PING* context row writes `PING` to five connections, then reads the five \
replies: the floor of one scatter/gather round on this machine. The *until 3 answered* row \
writes `PING` to five raw sockets and stops the clock at the third reply (`poll(2)` on one \
thread; the two late replies are read after the clock stops): the floor of a quorum round. \
The *fenced floor on 5 nodes* row sends the fenced floor's two scripts the same way, each round \
done at its third reply and the next written at once, behind the replies the two slower nodes \
still owe (as redmutex's 5-node rounds are): the floor of a 5-node lock cycle on this machine, \
whose servers share one CPU, so a round's late scripts still take it from the next round. \
Its *read node by node* twin reads each round's replies with a blocking read per node, in node \
order, as a client must that cannot wait on every socket at once (redis-rs's blocking \
connections): the round then waits for the first three nodes rather than the first \
three replies.\n\
- **uncontended**: `try_lock()` + `unlock()` of a free lock with default options (TTL 30 s, \
auto-renew, fencing), one client, pooled connections. The baseline, 5-node PING, redmutex, \
redlock and rslock rows take turns in rounds of 10 samples each (500 rounds in a full run; each \
round in a new order, since a row measured right after another ran faster or slower for it), and every \
50 rounds a chunk of the Python and C rows runs in their own processes (each Python library in \
one of its own: after another library in the same process, a lock's calls met the heap that one \
left behind), with the same calls from Rust run the same way beside them, so load from \
elsewhere falls on all of them alike. Short PING probes between the later phases show how far \
the machine drifted. The redis-servers run pinned to the last CPU and every client process \
to the others, so that no round trip is served on its client's own CPU (left to the \
scheduler, a process whose server shares its CPU answers round trips several times faster, \
for seconds at a time, and rows measured in different processes did not compare); absolute \
times still differ between runs.\n\
- **handoff**: two processes (the bench binary re-executed, or the Python script) pass one lock \
back and forth. The waiter is told to `lock()` and blocks in its implementation's own wait; \
after a random settle delay the holder is told to unlock. One sample is the waiter's \
`CLOCK_MONOTONIC` timestamp when `lock()` returned minus the holder's timestamp just before it \
called unlock (both processes read the same clock). The orchestrating process is never on \
that path. *blocked* is how often the waiter was parked in a Redis blocking command \
(`blocked_clients` ≥ 1) at the release. The three wake-up floors (`RPUSH`; one script that \
hands the lock over; a script that leaves it for the waiters, which takes it with a second \
script behind its `BLPOP`) and redmutex's own hand-off \
rows run in 10 alternating blocks (each pair of processes started once), so that the ratios \
between them share the machine's drift; the peers run after them.\n\
- **contended**: 4 processes × N sections of lock, `GET` counter, `SET` counter + 1, unlock. \
The values read order the sections globally: owner switches, lost updates (duplicates or a \
short final count) and each process's share of the sections completed while all four were \
still running (up to the first process's last section) come from that order. Throughput is \
sections over the time from the first section's start to the last one's end.\n\
- **renew scale**: one process takes 10,000 auto-renewed locks (TTL 3 s) and holds them for \
10 s, sampling `is_held()` and VmRSS (`/proc/self/status`) every 250 ms; at the end it counts \
threads named `redmutex-renew` (`/proc/self/task/*/comm`) and checks every key in Redis \
still holds its token. Growth is the highest VmRSS during the hold minus VmRSS before the \
first lock (client, connection and renew thread already up).\n\
- **comparisons**: the `redlock` crate (its waiter retries 3 × with a random 0–200 ms sleep, \
then starts over; a new connection per node and call), the `rslock` crate (Redlock on async \
redis-rs, one multiplexed connection per node; `lock` + `unlock` with a 10 s TTL, timed \
inside a tokio current-thread runtime in a child process of its own, which takes turns with \
the other uncontended rows round by round), redis-py's `Lock` (polls every \
100 ms) and python-redis-lock (`BLPOP` on a signal list), all with default settings and a \
30 s TTL, measured by the same code paths; the Python ones by `bench/python/locks.py` in the \
repository's `.venv` (pins in `bench/python/requirements.txt`). The asyncio rows \
(redmutex.asyncio, whose calls run on a pool thread and are awaited, and redis-py's asyncio \
`Lock`, which polls every 100 ms too) are timed in one task on a running event loop; their \
hand-off children read their commands through the loop. The redmutex Python and C \
binding rows appear once those bindings exist; until then they are skipped with a note.\n\
- Quantiles are nearest-rank: the median and p99 are observed samples.\n\n\
## Running it\n\n\
```sh\n\
make bench                                             # full run (~2 min), rewrites this file\n\
cargo run --release -p redmutex-bench -- --quick       # < 30 s, prints the table only\n\
cargo run --release -p redmutex-bench -- --no-compare  # redmutex rows only\n\
```\n\n\
`make bench` first prepares `.venv` (`bench/python/setup.sh`: the pinned Python locks and a \
build of the Python binding as the wheel is built) and builds the C library and the bench \
with the `dist` profile (the release build optimized across crates, as shipped), then runs \
`redmutex-bench --write`. The bench never fails on a missed target: it reports. \
`cargo test -p redmutex-bench` runs the quick mode once.\n";

/// The cargo profile this bench was built with: the name of the directory its binary is in
/// (`target/dist/`, `target/release/`, `target/debug/`; a test binary's `deps/` is inside it).
pub fn build_profile() -> String {
    let exe = std::env::current_exe().ok();
    let mut dir = exe.as_deref().and_then(std::path::Path::parent);
    if dir.and_then(|d| d.file_name()).is_some_and(|n| n == "deps") {
        dir = dir.and_then(std::path::Path::parent);
    }
    dir.and_then(|d| d.file_name())
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| {
            if cfg!(debug_assertions) {
                "debug"
            } else {
                "release"
            }
            .to_owned()
        })
}
