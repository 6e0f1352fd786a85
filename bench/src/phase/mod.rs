//! The phases of a run, in the order they run. Each measures its part and returns its own
//! rows of the table (and the numbers later notes need); the caller assembles the report.
//!
//! - [`latency`]: the PING baseline, the uncontended rows and the external peers' uncontended
//!   rows, interleaved round by round;
//! - [`handoff`]: how fast a waiter takes over (the RPUSH → BLPOP floor, redmutex, peers);
//! - [`contended`]: processes taking one lock in a loop;
//! - [`renew`]: thousands of renewed locks, and memory kept by lock churn;
//! - [`waiters`]: connections a blocked waiter opens per second (Rust, C, Python);
//! - [`readers`]: Redis's commands per second while readers wait behind a writer;
//! - [`fleet`]: 1,000 threads waiting on one lock and on 1,000: Redis's commands and
//!   connections per waiting thread, then the hand-offs;
//! - [`peers`]: the rows of the locks users would pick instead, from what the others measured.

pub mod contended;
pub mod fleet;
pub mod handoff;
pub mod latency;
pub mod peers;
pub mod readers;
pub mod renew;
pub mod waiters;

use std::path::Path;

use crate::counts::Counts;
use crate::report::Row;
use crate::uncontended;

/// What every phase needs: the servers' URLs, the counts, whether peers are compared.
pub struct Ctx<'a> {
    /// The single node.
    pub url: String,
    /// The five Redlock nodes.
    pub urls5: Vec<String>,
    pub counts: &'a Counts,
    /// Measure the peers too (redlock, Python, C).
    pub compare: bool,
    pub root: Option<&'a Path>,
    /// The baseline (median PING, ns) once the latency phase measured it; 0 before.
    pub base: u64,
}

impl Ctx<'_> {
    /// A short PING probe between phases, to show how much the machine drifted.
    pub fn probe(&self, drift: &mut Vec<u64>) -> Result<(), String> {
        drift.push(uncontended::ping_probe(&self.url, 200)?);
        Ok(())
    }
}

/// The notes under the table, in the order they arise (skipped rows and why).
pub struct Notes {
    pub lines: Vec<String>,
    root: Option<std::path::PathBuf>,
}

impl Notes {
    pub fn new(root: Option<&Path>) -> Notes {
        Notes {
            lines: Vec::new(),
            root: root.map(Path::to_path_buf),
        }
    }

    /// Notes (and reports on stderr) that `what` was skipped, and why.
    pub fn skip(&mut self, what: &str, why: &str) {
        let line = format!("{what}: skipped — {}", scrub(why, self.root.as_deref()));
        progress(&line);
        self.lines.push(line);
    }

    pub fn push(&mut self, line: String) {
        self.lines.push(line);
    }
}

/// Says on stderr what the run is doing.
pub fn progress(what: &str) {
    eprintln!("redmutex-bench: {what}");
}

/// A phase's rows of the table (in order) and the measurements behind them.
pub struct Phase<T> {
    pub rows: Vec<Row>,
    pub data: T,
}

/// Removes machine paths from a note: the repository root becomes `.`, temp dirs `<tmp>`.
fn scrub(s: &str, root: Option<&Path>) -> String {
    let mut s = s.to_owned();
    if let Some(root) = root {
        s = s.replace(&root.display().to_string(), ".");
    }
    s.replace(&std::env::temp_dir().display().to_string(), "<tmp>")
}
