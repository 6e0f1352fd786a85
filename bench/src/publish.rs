//! `--write`: BENCHMARKS.md and its plot, with the machine and the commit they came from.

use std::path::Path;
use std::time::Duration;

use crate::counts::Counts;
use crate::phase::handoff::Handoffs;
use crate::{contended, report, svg};

/// Everything the written report shows.
pub struct Results<'a> {
    /// Where BENCHMARKS.md goes; the plot goes to `bench/benchmarks.svg` beside it.
    pub path: &'a Path,
    pub root: Option<&'a Path>,
    pub table: &'a str,
    pub notes: &'a [String],
    pub summary: &'a [String],
    pub counts: &'a Counts,
    pub redis_version: &'a str,
    pub python: Option<&'a str>,
    /// The load average at the start and at the end.
    pub load: (&'a str, &'a str),
    pub elapsed: Duration,
    pub handoff: &'a Handoffs,
    pub contended: &'a contended::Contended,
    pub base: u64,
}

pub fn write(r: &Results) -> Result<(), String> {
    let mut machine = report::Machine::read(r.redis_version, r.python);
    machine.push(
        "load average (1 min)",
        format!("{} at start, {} at end", r.load.0, r.load.1),
    );
    machine.push("date (UTC)", report::today());
    if let Some(c) = git_commit(r.root) {
        machine.push("commit", c);
    }
    machine.push("run time", format!("{:.0} s", r.elapsed.as_secs_f64()));
    let dir = r
        .path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let svg_rel = "bench/benchmarks.svg";
    let mut series = vec![
        svg::Series {
            label: "RPUSH → BLPOP floor",
            samples: &r.handoff.blpop.samples,
        },
        svg::Series {
            label: "script → BLPOP floor",
            samples: &r.handoff.blpop_script.samples,
        },
        svg::Series {
            label: "redmutex",
            samples: &r.handoff.redmutex.samples,
        },
    ];
    for (label, h) in &r.handoff.compare {
        series.push(svg::Series {
            label,
            samples: &h.samples,
        });
    }
    let plot = svg::Plot {
        handoff: series,
        baseline_ns: r.base,
        processes: r
            .contended
            .shares
            .iter()
            .zip(&r.contended.wait_by_process)
            .map(|(sh, w)| (*sh, w.median(), w.p99()))
            .collect(),
        title: &format!(
            "redmutex-bench {} — {} CPUs, redis {}",
            report::today(),
            crate::pin::current().machine,
            r.redis_version
        ),
    };
    std::fs::create_dir_all(dir.join("bench")).map_err(|e| e.to_string())?;
    std::fs::write(dir.join(svg_rel), svg::render(&plot)).map_err(|e| format!("{svg_rel}: {e}"))?;
    let md = report::markdown(&report::Document {
        table: r.table,
        notes: r.notes,
        machine: &machine,
        summary: r.summary,
        svg_rel,
        counts: &r.counts.describe(),
    });
    std::fs::write(r.path, md).map_err(|e| format!("{}: {e}", r.path.display()))?;
    println!("wrote {} and {svg_rel}", r.path.display());
    Ok(())
}

pub fn redis_version(url: &str) -> Result<String, String> {
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
