//! Runs of the torture driver (`tests/src/bin/torture.rs`): client processes on one lock, each
//! writing a history, and their summaries; plus faults that act on the library's connections.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::history::{self, Event, Kind};
use crate::{RedisServer, TempDir, wait_until};

/// Every run's processes must finish within this.
pub const RUN_TIMEOUT: Duration = Duration::from_secs(60);

/// One scenario: its scratch directory, data server and client processes.
pub struct Run {
    exe: PathBuf,
    dir: TempDir,
    data: RedisServer,
    key: String,
    procs: Vec<Proc>,
}

struct Proc {
    name: String,
    child: Child,
    history: PathBuf,
}

/// The summary line a driver prints.
#[derive(Debug, Default, Clone, Copy)]
pub struct Summary {
    /// Sections completed (their write went through).
    pub sections: u64,
    /// Acquires that had to wait.
    pub waits: u64,
    /// Grants that were lost (or whose release failed).
    pub lost: u64,
    /// Fenced accesses the data server refused.
    pub rejected: u64,
    /// Lock calls that failed (with `--keep-going`).
    pub errors: u64,
    /// The driver's wall clock at its end, in seconds since the epoch.
    pub wall: u64,
}

impl Run {
    /// A run of the driver at `exe` (a test has it as `env!("CARGO_BIN_EXE_torture")`) on
    /// the lock `key`, with a data server of its own.
    pub fn new(exe: impl Into<PathBuf>, key: &str) -> Run {
        Run {
            exe: exe.into(),
            dir: TempDir::new("redmutex-torture"),
            data: RedisServer::start(),
            key: key.to_owned(),
            procs: Vec::new(),
        }
    }

    /// Starts one client; `args` are the scenario-specific flags.
    pub fn spawn(&mut self, name: &str, urls: &[String], args: &[&str]) {
        self.spawn_under(name, urls, args, Command::new(&self.exe));
    }

    /// Like [`Run::spawn`], through `cmd`: the driver itself, or a wrapper (`faketime …`)
    /// that runs it.
    pub fn spawn_under(&mut self, name: &str, urls: &[String], args: &[&str], mut cmd: Command) {
        let history = self.dir.path().join(format!("{name}.jsonl"));
        let child = cmd
            .arg("--urls")
            .arg(urls.join(","))
            .args(["--key", &self.key, "--client", name])
            .arg("--history")
            .arg(&history)
            .arg("--data-url")
            .arg(self.data.url())
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn torture");
        self.procs.push(Proc {
            name: name.to_owned(),
            child,
            history,
        });
    }

    /// The run's scratch directory (histories live there).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Whether a client of this name was started.
    pub fn has(&self, name: &str) -> bool {
        self.procs.iter().any(|p| p.name == name)
    }

    fn proc(&mut self, name: &str) -> &mut Proc {
        self.procs.iter_mut().find(|p| p.name == name).unwrap()
    }

    /// The history `name` has written so far.
    pub fn history_of(&self, name: &str) -> Vec<Event> {
        let p = self.procs.iter().find(|p| p.name == name).unwrap();
        history::read_histories(&[&p.history]).unwrap()
    }

    /// Waits (bounded) until `name` holds the lock: its last event is an acquire or a use.
    pub fn wait_holding(&self, name: &str) {
        assert!(
            wait_until(Duration::from_secs(10), || {
                self.history_of(name)
                    .last()
                    .is_some_and(|e| matches!(e.event, Kind::Acquire | Kind::Use | Kind::Renew))
            }),
            "{name} never acquired"
        );
    }

    /// Waits (bounded) until one of `names` holds the lock by a grant later than `after_ns` (on
    /// [`history::mono_ns`]'s clock). A scenario that needs another holder at some moment acts
    /// right after this, at the start of a hold.
    pub fn wait_fresh_grant(&self, names: &[&str], after_ns: i64) {
        assert!(
            wait_until(Duration::from_secs(10), || {
                names.iter().any(|name| {
                    let history = self.history_of(name);
                    let holding = history.last().is_some_and(|e| {
                        matches!(e.event, Kind::Acquire | Kind::Use | Kind::Renew)
                    });
                    let granted = history.iter().rev().find(|e| e.event == Kind::Acquire);
                    holding && granted.is_some_and(|e| e.t_ns > after_ns)
                })
            }),
            "none of {names:?} was granted the lock after the mark"
        );
    }

    /// Sends `sig` to the client `name` (by pid).
    pub fn signal(&mut self, name: &str, sig: libc::c_int) {
        let pid = self.proc(name).child.id() as libc::pid_t;
        // SAFETY: plain syscall on our own, not yet reaped child.
        assert_eq!(unsafe { libc::kill(pid, sig) }, 0);
    }

    /// Waits (bounded) for every process; returns each one's summary (None: no summary, e.g.
    /// killed). Kills everything and panics on timeout or a failed client.
    pub fn finish(&mut self) -> Vec<(String, Option<Summary>)> {
        let deadline = Instant::now() + RUN_TIMEOUT;
        let mut out = Vec::new();
        for p in &mut self.procs {
            let status = loop {
                if let Some(s) = p.child.try_wait().unwrap() {
                    break s;
                }
                if Instant::now() >= deadline {
                    // `Drop` kills every process.
                    panic!("{} did not finish within {RUN_TIMEOUT:?}", p.name);
                }
                std::thread::sleep(Duration::from_millis(5));
            };
            let mut stdout = String::new();
            p.child
                .stdout
                .take()
                .unwrap()
                .read_to_string(&mut stdout)
                .unwrap();
            let summary = parse_summary(&stdout);
            if summary.is_none() {
                use std::os::unix::process::ExitStatusExt;
                assert_eq!(
                    status.signal(),
                    Some(libc::SIGKILL),
                    "{} failed: {status}",
                    p.name
                );
            }
            out.push((p.name.clone(), summary));
        }
        out
    }

    /// Every client's history, sorted by time.
    pub fn events(&self) -> Vec<Event> {
        let paths: Vec<&Path> = self.procs.iter().map(|p| p.history.as_path()).collect();
        history::read_histories(&paths).unwrap()
    }

    /// The counter the clients' sections increment.
    pub fn counter(&self) -> u64 {
        let v: Option<u64> = redis::cmd("GET")
            .arg(format!("{}:counter", self.key))
            .query(&mut self.data.conn())
            .unwrap();
        v.unwrap_or(0)
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        for p in &mut self.procs {
            // SAFETY: plain syscalls on our own children; a stopped one is continued first.
            unsafe {
                libc::kill(p.child.id() as libc::pid_t, libc::SIGCONT);
            }
            let _ = p.child.kill();
            let _ = p.child.wait();
        }
    }
}

fn parse_summary(stdout: &str) -> Option<Summary> {
    let line = stdout.lines().find(|l| l.starts_with("done "))?;
    let mut s = Summary::default();
    for kv in line.split_whitespace().skip(1) {
        let (k, v) = kv.split_once('=')?;
        let slot = match k {
            "sections" => &mut s.sections,
            "waits" => &mut s.waits,
            "lost" => &mut s.lost,
            "rejected" => &mut s.rejected,
            "errors" => &mut s.errors,
            "wall" => &mut s.wall,
            _ => continue,
        };
        *slot = v.parse().ok()?;
    }
    Some(s)
}

/// The sum of the summaries that exist.
pub fn total(summaries: &[(String, Option<Summary>)]) -> Summary {
    summaries
        .iter()
        .filter_map(|(_, s)| *s)
        .fold(Summary::default(), |a, s| Summary {
            sections: a.sections + s.sections,
            waits: a.waits + s.waits,
            lost: a.lost + s.lost,
            rejected: a.rejected + s.rejected,
            errors: a.errors + s.errors,
            wall: 0,
        })
}

/// The summary of `name`; panics if it has none.
pub fn summary_of(summaries: &[(String, Option<Summary>)], name: &str) -> Summary {
    summaries
        .iter()
        .find(|(n, _)| n == name)
        .and_then(|(_, s)| *s)
        .unwrap_or_else(|| panic!("no summary from {name}"))
}

/// Kills every connection of the library (named `redmutex:<owner>`) listed by `CLIENT LIST`;
/// returns how many were killed and how many of them belonged to `victim`.
pub fn kill_library_connections(conn: &mut redis::Connection, victim: &str) -> (usize, usize) {
    let list: String = redis::cmd("CLIENT").arg("LIST").query(conn).unwrap();
    let (mut killed, mut of_victim) = (0, 0);
    for line in list.lines() {
        let field = |name: &str| {
            line.split_whitespace()
                .find_map(|kv| kv.strip_prefix(name).and_then(|v| v.strip_prefix('=')))
        };
        let (Some(id), Some(name)) = (field("id"), field("name")) else {
            continue;
        };
        let Some(owner) = name.strip_prefix("redmutex:") else {
            continue;
        };
        // 0 when the connection closed meanwhile.
        let n: i64 = redis::cmd("CLIENT")
            .arg("KILL")
            .arg("ID")
            .arg(id)
            .query(conn)
            .unwrap();
        if n > 0 {
            killed += 1;
            of_victim += usize::from(owner == victim);
        }
    }
    (killed, of_victim)
}
