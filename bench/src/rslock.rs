//! The `rslock` crate (Redlock on async redis-rs), measured in a child process of its own: it
//! needs a tokio runtime, and a current-thread one in its own process keeps that runtime off
//! the other rows' threads. The orchestrator asks for a batch of samples each round, so the
//! rows take turns with the in-process ones like the rest.
//!
//! ```text
//! __rslock-child URLS KEY    line protocol: `run N` → `samples T1,T2,...`; `quit` or EOF
//! ```
//! One sample is `lock` + `unlock` of a free lock (TTL 10 s) with the crate's defaults, timed
//! inside one `block_on`, as an async caller would see it.

use std::io::BufRead;
use std::time::{Duration, Instant};

use rslock::LockManager;

use crate::child::{arg, say, urls};
use crate::proc::{Proc, num};
use crate::stats::ns;

pub const CHILD: &str = "__rslock-child";
/// The version in Cargo.lock, for the rows' labels.
pub const VERSION: &str = "0.10.0";
/// The lease of every rslock lock here.
pub const TTL: Duration = Duration::from_secs(10);

/// The child process measuring rslock on one set of nodes.
pub struct RslockChild {
    proc: Option<Proc>,
}

impl RslockChild {
    /// Starts the child on `urls` and waits until it is warmed up.
    pub fn start(urls: &[String], key: &str) -> Result<RslockChild, String> {
        let cmd = Proc::this_exe(&[CHILD.to_owned(), urls.join(","), key.to_owned()])?;
        let mut proc = Proc::spawn(&format!("rslock child ({} nodes)", urls.len()), cmd)?;
        proc.expect("ready")?;
        Ok(RslockChild { proc: Some(proc) })
    }

    /// `n` samples, in nanoseconds.
    pub fn samples(&mut self, n: usize) -> Result<Vec<u64>, String> {
        let proc = self.proc.as_mut().ok_or("the rslock child has exited")?;
        proc.send(&format!("run {n}"))?;
        let line = proc.expect("samples")?;
        line.split(',').map(num).collect()
    }
}

impl Drop for RslockChild {
    fn drop(&mut self) {
        if let Some(mut p) = self.proc.take() {
            let _ = p.send("quit");
            let _ = p.finish();
        }
    }
}

/// The child's side (`__rslock-child URLS KEY`).
pub fn child(args: &[String]) -> Result<(), String> {
    let urls = urls(arg(args, 0, "URLS")?);
    let key = arg(args, 1, "KEY")?.to_owned();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("tokio runtime: {e}"))?;
    let manager = LockManager::new(urls);
    // Warm-up: the connections (opened on first use), the scripts, the caches.
    rt.block_on(run(&manager, &key, 50))?;
    say("ready");
    for line in std::io::stdin().lock().lines() {
        let line = line.map_err(|e| e.to_string())?;
        match line.trim().split_once(' ') {
            Some(("run", n)) => {
                let n: usize = n.parse().map_err(|_| format!("bad count {n:?}"))?;
                let samples = rt.block_on(run(&manager, &key, n))?;
                let text: Vec<String> = samples.iter().map(u64::to_string).collect();
                say(&format!("samples {}", text.join(",")));
            }
            _ if line.trim() == "quit" => break,
            _ => return Err(format!("unknown command {line:?}")),
        }
    }
    Ok(())
}

/// `n` timed cycles of `lock` + `unlock` of the free lock `key`.
async fn run(manager: &LockManager, key: &str, n: usize) -> Result<Vec<u64>, String> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let lock = manager.lock(key, TTL).await.map_err(|e| {
            format!("lock {key}: {e} (the lock should be free; another run on the same servers?)")
        })?;
        manager.unlock(&lock).await;
        out.push(ns(t.elapsed()));
    }
    Ok(out)
}
