//! The contended row: P processes × N read-modify-write critical sections on one lock.
//!
//! Every section reads the counter it increments, so the values read order the sections
//! globally: who owned value v is who held the lock for the v-th section. From that order
//! come the owner switches, the lost updates (a value read twice, or a final count short of
//! P × N), and each process's share of the sections completed while all P were still running.

use std::time::Duration;

use crate::child::CONTEND_CHILD;
use crate::proc::{Proc, num};
use crate::stats::Samples;

pub struct Contended {
    pub processes: usize,
    pub per_process: usize,
    /// Sections per second, from the first section's start to the last one's end.
    pub throughput: f64,
    pub elapsed_ns: u64,
    /// Time spent in `lock()` per section, all processes together.
    pub wait: Samples,
    /// Per process: the wait samples.
    pub wait_by_process: Vec<Samples>,
    pub owner_switches: usize,
    pub lost_updates: u64,
    /// Per process: its share of the sections completed while all processes were running.
    pub shares: Vec<f64>,
    /// How many sections that window held.
    pub window: usize,
}

pub fn run(url: &str, processes: usize, per_process: usize) -> Result<Contended, String> {
    let key = "bench:contended";
    let counter = "bench:contended:counter";
    let mut data = redis::Client::open(url)
        .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(5)))
        .map_err(|e| e.to_string())?;
    let _: () = redis::cmd("SET")
        .arg(counter)
        .arg(0)
        .query(&mut data)
        .map_err(|e| e.to_string())?;

    let mut children = Vec::new();
    for p in 0..processes {
        let cmd = Proc::this_exe(&[
            CONTEND_CHILD.to_owned(),
            url.to_owned(),
            key.to_owned(),
            counter.to_owned(),
            per_process.to_string(),
        ])?;
        children.push(Proc::spawn(&format!("contended child {p}"), cmd)?);
    }
    for c in children.iter_mut() {
        c.expect("ready")?;
    }
    for c in children.iter_mut() {
        c.send("go")?;
    }
    // (value read, process, wait, start, end) for every section.
    let mut sections: Vec<(u64, usize, u64, u64, u64)> = Vec::new();
    for (p, c) in children.iter_mut().enumerate() {
        loop {
            let line = c.next_line()?;
            if line == "done" {
                break;
            }
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() != 5 || f[0] != "s" {
                return Err(format!("contended child {p}: unexpected line {line:?}"));
            }
            sections.push((num(f[1])?, p, num(f[2])?, num(f[3])?, num(f[4])?));
        }
    }
    for c in children {
        c.finish()?;
    }
    let final_count: u64 = redis::cmd("GET")
        .arg(counter)
        .query(&mut data)
        .map_err(|e| e.to_string())?;

    let total = (processes * per_process) as u64;
    let start = sections.iter().map(|s| s.3).min().unwrap_or(0);
    let end = sections.iter().map(|s| s.4).max().unwrap_or(0);
    let elapsed_ns = end.saturating_sub(start).max(1);
    sections.sort_by_key(|s| s.0);
    let mut distinct = sections.iter().map(|s| s.0).collect::<Vec<_>>();
    distinct.dedup();
    let lost_updates = total.saturating_sub(final_count) + (sections.len() - distinct.len()) as u64;
    let owner_switches = sections.windows(2).filter(|w| w[0].1 != w[1].1).count();

    // The window while all were running: up to the section with which the first process
    // completed its last one.
    let mut done_at = usize::MAX;
    let mut count = vec![0usize; processes];
    for (i, s) in sections.iter().enumerate() {
        count[s.1] += 1;
        if count[s.1] == per_process {
            done_at = i + 1;
            break;
        }
    }
    let window = done_at.min(sections.len());
    let mut in_window = vec![0usize; processes];
    for s in &sections[..window] {
        in_window[s.1] += 1;
    }
    let shares = in_window
        .iter()
        .map(|&c| c as f64 / window.max(1) as f64)
        .collect();
    let wait_by_process = (0..processes)
        .map(|p| Samples::new(sections.iter().filter(|s| s.1 == p).map(|s| s.2).collect()))
        .collect();
    Ok(Contended {
        processes,
        per_process,
        throughput: total as f64 / (elapsed_ns as f64 / 1e9),
        elapsed_ns,
        wait: Samples::new(sections.iter().map(|s| s.2).collect()),
        wait_by_process,
        owner_switches,
        lost_updates,
        shares,
        window,
    })
}
