//! Rows measured by other processes: the Python locks (bench/python/locks.py) and the C
//! binding (bench/c/uncontended.c, compiled here). Each one that cannot run is skipped with a
//! note saying why, never failing the run.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::stats::Samples;

/// Collects the chunks of external rows measured round by round.
#[derive(Default)]
pub struct Chunks {
    /// (name, label, samples so far or why it is skipped), in first-seen order.
    rows: Vec<(String, String, Result<Vec<u64>, String>)>,
}

impl Chunks {
    pub fn add(&mut self, name: &str, label: &str, chunk: Result<Vec<u64>, String>) {
        let i = match self.rows.iter().position(|r| r.0 == name) {
            Some(i) => i,
            None => {
                self.rows
                    .push((name.to_owned(), label.to_owned(), Ok(Vec::new())));
                self.rows.len() - 1
            }
        };
        let row = &mut self.rows[i];
        row.1 = label.to_owned();
        match (&mut row.2, chunk) {
            (Ok(all), Ok(mut c)) => all.append(&mut c),
            (Ok(_), Err(e)) => row.2 = Err(e),
            (Err(_), _) => {}
        }
    }

    pub fn add_all(&mut self, rows: Vec<External>) {
        for e in rows {
            self.add(&e.name, &e.label, e.result.map(|s| s.sorted().to_vec()));
        }
    }

    pub fn finish(self) -> Vec<External> {
        self.rows
            .into_iter()
            .map(|(name, label, r)| External {
                name,
                label,
                result: r.map(Samples::new),
            })
            .collect()
    }
}

/// One implementation measured by an external process.
pub struct External {
    /// Short name: one of [`PYTHON_NAMES`], or `redmutex-c`.
    pub name: String,
    /// For the table: `redis-py Lock 8.1.0`.
    pub label: String,
    pub result: Result<Samples, String>,
}

/// The repository root: the nearest ancestor of the current directory (or of this crate's
/// source directory, for `cargo test`) that holds `bench/python/locks.py`.
pub fn repo_root() -> Option<PathBuf> {
    let from_cwd = std::env::current_dir().ok();
    let from_build = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf);
    [from_cwd, from_build]
        .into_iter()
        .flatten()
        .find_map(|start| {
            start
                .ancestors()
                .find(|d| d.join("bench/python/locks.py").is_file())
                .map(Path::to_path_buf)
        })
}

/// The implementations `locks.py` measures (its `IMPLS`); an asyncio one is named after its
/// blocking twin with `-asyncio` added.
pub const PYTHON_NAMES: [&str; 6] = [
    "ping",
    "python-redis-lock",
    "redis-py",
    "redis-py-asyncio",
    "redmutex-py",
    "redmutex-py-asyncio",
];

/// The blocking implementation whose asyncio twin `name` is.
pub fn blocking_twin(name: &str) -> Option<&str> {
    name.strip_suffix("-asyncio")
}

pub struct Python {
    pub interpreter: PathBuf,
    pub script: PathBuf,
    pub version: String,
}

/// The repository's virtualenv interpreter, or why there is none.
pub fn python(root: Option<&Path>) -> Result<Python, String> {
    let root = root.ok_or("the repository (bench/python/locks.py) was not found")?;
    let interpreter = root.join(".venv/bin/python");
    if !interpreter.is_file() {
        return Err("no .venv; run `make bench` (bench/python/setup.sh) to create it".into());
    }
    Ok(Python {
        interpreter,
        script: root.join("bench/python/locks.py"),
        version: String::new(),
    })
}

impl Python {
    /// The uncontended rows of every Python implementation, each measured in a process of
    /// its own: run after another library in the same process, a lock's calls met the heap
    /// that library left behind (after redis-py's PING loop, the redmutex binding's calls
    /// took 1.1 to 1.2 times as long as in a process of their own).
    pub fn uncontended(&mut self, url: &str, n: usize) -> Vec<External> {
        PYTHON_NAMES
            .iter()
            .flat_map(|name| self.uncontended_one(url, n, name))
            .collect()
    }

    /// The uncontended row of the Python implementation `name`, in a process of its own.
    fn uncontended_one(&mut self, url: &str, n: usize, name: &str) -> Vec<External> {
        let out = Command::new(&self.interpreter)
            .arg(&self.script)
            .args(["uncontended", "--url", url, "--impl", name])
            .args(["--n", &n.to_string(), "--rounds", "1"])
            .stderr(Stdio::inherit())
            .output();
        let parsed = out
            .map_err(|e| format!("cannot run {}: {e}", self.interpreter.display()))
            .and_then(|o| {
                if !o.status.success() {
                    return Err(format!("locks.py uncontended: {}", o.status));
                }
                serde_json::from_slice::<Value>(&o.stdout)
                    .map_err(|e| format!("locks.py printed no JSON: {e}"))
            });
        let v = match parsed {
            Ok(v) => v,
            Err(e) => {
                return vec![External {
                    name: name.to_owned(),
                    label: name.to_owned(),
                    result: Err(e),
                }];
            }
        };
        self.version = v["python"].as_str().unwrap_or("?").to_owned();
        let Some(impls) = v["impls"].as_object() else {
            return Vec::new();
        };
        impls
            .iter()
            .map(|(name, e)| {
                let label = format!(
                    "{} {}",
                    e["label"].as_str().unwrap_or(name),
                    e["version"].as_str().unwrap_or("?")
                );
                let result = match (e["skip"].as_str(), e["samples_ns"].as_array()) {
                    (Some(why), _) => Err(why.to_owned()),
                    (None, Some(s)) => {
                        Ok(Samples::new(s.iter().filter_map(Value::as_u64).collect()))
                    }
                    (None, None) => Err("no samples".to_owned()),
                };
                External {
                    name: name.clone(),
                    label,
                    result,
                }
            })
            .collect()
    }

    /// The command line of a waiter for the blocked-waiter row: waits 300 ms for the held
    /// lock `bench:waiters` with the Python binding, says "ready", and after a line on stdin
    /// waits `ms` ms more, then says "done".
    pub fn waiter(&self, url: &str, ms: u64) -> Command {
        let mut cmd = Command::new(&self.interpreter);
        cmd.arg("-c").arg(format!(
            "import sys, redmutex\n\
             lock = redmutex.Client({url:?}).lock('bench:waiters', ttl=30.0)\n\
             assert not lock.acquire(timeout=0.3)\n\
             assert not lock.acquire(timeout=0.05)\n\
             print('ready', flush=True)\n\
             sys.stdin.readline()\n\
             assert not lock.acquire(timeout={secs})\n\
             print('done', flush=True)\n",
            secs = ms as f64 / 1000.0
        ));
        cmd
    }

    /// The fleet case in Python (`locks.py fleet`): `threads` threads of one client waiting on
    /// `locks` held locks, Redis's counters over `window` after `settle`; the JSON it printed.
    pub fn fleet(
        &self,
        url: &str,
        threads: usize,
        locks: usize,
        settle: Duration,
        window: Duration,
    ) -> Result<Value, String> {
        let out = Command::new(&self.interpreter)
            .arg(&self.script)
            .args(["fleet", "--url", url])
            .args([
                "--threads",
                &threads.to_string(),
                "--locks",
                &locks.to_string(),
            ])
            .args(["--settle", &settle.as_secs_f64().to_string()])
            .args(["--window", &window.as_secs_f64().to_string()])
            .stderr(Stdio::inherit())
            .output()
            .map_err(|e| format!("cannot run {}: {e}", self.interpreter.display()))?;
        if !out.status.success() {
            return Err(format!("locks.py fleet: {}", out.status));
        }
        serde_json::from_slice(&out.stdout).map_err(|e| format!("locks.py printed no JSON: {e}"))
    }

    /// The command line of a handoff child running `imp`.
    pub fn child(&self, imp: &str, url: &str, key: &str) -> Command {
        let mut cmd = Command::new(&self.interpreter);
        cmd.arg(&self.script)
            .args(["child", "--impl", imp, "--url", url, "--key", key]);
        cmd
    }
}

/// The C binding's uncontended program, compiled once into a scratch directory.
pub struct CProgram {
    _dir: redmutex_tests::TempDir,
    prog: PathBuf,
}

impl CProgram {
    /// The program as a waiter for the blocked-waiter row (see bench/c/uncontended.c).
    pub fn waiter(&self, url: &str, ms: u64) -> Command {
        let mut cmd = Command::new(&self.prog);
        cmd.args([url, "wait", &ms.to_string()]);
        cmd
    }

    /// The program in its fleet mode (see bench/c/uncontended.c), its stdout piped.
    pub fn fleet(&self, url: &str, threads: usize, locks: usize, patience: Duration) -> Command {
        let mut cmd = Command::new(&self.prog);
        cmd.args([url, "fleet", &threads.to_string(), &locks.to_string()])
            .arg(patience.as_millis().to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        cmd
    }

    /// `n` samples from one run of the program.
    pub fn run(&self, url: &str, n: usize) -> Result<Vec<u64>, String> {
        let mut cmd = Command::new(&self.prog);
        cmd.args([url, &n.to_string()]);
        samples_of(cmd, "the C program")
    }
}

/// `n` samples of the C program's loop from Rust, in a process of its own (this binary as
/// its child, see `child::uncontended_child`); with `one_lock`, of the Python loop's (one
/// lock handle for every call).
pub fn rust_process(url: &str, n: usize, one_lock: bool) -> Result<Vec<u64>, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut cmd = Command::new(exe);
    cmd.args([crate::child::UNCONTENDED_CHILD, url, &n.to_string()]);
    if one_lock {
        cmd.arg(crate::child::ONE_LOCK);
    }
    samples_of(cmd, "the Rust process")
}

/// The samples a program prints as `{"samples_ns":[...]}`.
fn samples_of(mut cmd: Command, what: &str) -> Result<Vec<u64>, String> {
    let out = cmd
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run {what}: {e}"))?;
    if !out.status.success() {
        return Err(format!("{what} failed: {}", out.status));
    }
    let v: Value =
        serde_json::from_slice(&out.stdout).map_err(|e| format!("{what}'s output: {e}"))?;
    Ok(v["samples_ns"]
        .as_array()
        .ok_or_else(|| format!("{what} printed no samples"))?
        .iter()
        .filter_map(Value::as_u64)
        .collect())
}

/// Compiles bench/c/uncontended.c against include/redmutex.h and the libredmutex next to this
/// binary (built with the same profile: `cargo build --profile dist -p redmutex-ffi` for the
/// bench that `make bench` builds).
pub fn c_program(root: Option<&Path>) -> Result<CProgram, String> {
    let root = root.ok_or("the repository was not found")?;
    let header = root.join("include/redmutex.h");
    let text = std::fs::read_to_string(&header).map_err(|e| format!("include/redmutex.h: {e}"))?;
    // Skipped when the header does not declare the lock calls.
    for f in ["redmutex_client_new", "redmutex_lock", "redmutex_unlock"] {
        if !text.contains(&format!("{f}(")) {
            return Err(format!(
                "the C binding is not there yet (include/redmutex.h has no {f})"
            ));
        }
    }
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let libdir = exe
        .parent()
        .ok_or("no directory of the bench binary")?
        .to_path_buf();
    if !libdir.join("libredmutex.so").is_file() {
        return Err(format!(
            "libredmutex.so is not built next to the bench binary; run `cargo build --profile {} -p redmutex-ffi`",
            crate::report::build_profile()
        ));
    }
    let dir = redmutex_tests::TempDir::new("redmutex-bench-c");
    let prog = dir.path().join("uncontended");
    // The library's SONAME is libredmutex.so.0, which cargo does not make: the program finds
    // it through a link of that name beside it.
    std::os::unix::fs::symlink(
        libdir.join("libredmutex.so"),
        dir.path().join("libredmutex.so.0"),
    )
    .map_err(|e| format!("cannot link libredmutex.so.0: {e}"))?;
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = Command::new(&cc)
        .args(["-O2", "-std=c11", "-Wall", "-Wextra", "-pthread"])
        .arg("-I")
        .arg(root.join("include"))
        .arg(root.join("bench/c/uncontended.c"))
        .arg("-L")
        .arg(&libdir)
        .arg("-lredmutex")
        .arg(format!("-Wl,-rpath,{}", dir.path().display()))
        .arg("-o")
        .arg(&prog)
        .output()
        .map_err(|e| format!("cannot run {cc}: {e}"))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let first = err
            .lines()
            .find(|l| l.contains("undefined reference"))
            .or_else(|| err.lines().find(|l| l.contains("error")))
            .unwrap_or("")
            .trim();
        return Err(format!(
            "bench/c/uncontended.c did not build against include/redmutex.h and libredmutex (a stale library? `cargo build --profile {} -p redmutex-ffi`): {first}",
            crate::report::build_profile()
        ));
    }
    Ok(CProgram { _dir: dir, prog })
}
