//! Lock clients in processes of their own that write a history: the `sections` mode of the
//! `worker` binary (`tests/src/bin/worker.rs`), and [`Workers`], which starts and watches them.
//!
//! A worker takes the lock names of its [`Spec`] in turn; each critical section is
//!
//! 1. `lock()`, then an `acquire` event with the fence and validity;
//! 2. with counters, `GET` of the name's counter ([`counter_key`]), a pause of the hold time,
//!    `SET` of the value plus one (a deliberately non-atomic update only the lock keeps
//!    exact); otherwise just the pause;
//! 3. a `use` event if the guard is still held (a `lost` event if not);
//! 4. a `release` event, then `unlock()`.
//!
//! Every error returned is recorded and the worker goes on. It ends after its number of
//! sections, or, with 0, once the file `stop` exists in its directory (at the latest after
//! [`MAX_WORKER_RUN`]); then it writes `<client>.summary` there. Its history is
//! `<client>.jsonl`, for [`crate::history::check`].
//!
//! ```text
//! worker sections client=NAME dir=DIR data=SEED,… names=A,B,… offset=N sections=N
//!        ttl_ms=N hold_ms=N min_replicas=0|1 counters=0|1 (url=URL | seeds=URL,…)
//!        [connect_timeout_ms=N]
//! ```

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use redmutex::Client;

use crate::cluster::{ClusterConn, RedisCluster};
use crate::history::{self, Event, Kind, mono_ns};
use crate::{TempDir, wait_until};

/// A worker stops at this bound even if it was never told to stop.
pub const MAX_WORKER_RUN: Duration = Duration::from_secs(90);
/// The `WAIT` timeout of workers that use `min_replicas`.
pub const REPLICA_WAIT: Duration = Duration::from_millis(500);

/// The counter a critical section on `name` increments: in the lock's own slot (the hash tag
/// is the name), so it moves with the lock when the slot is resharded.
pub fn counter_key(name: &str) -> String {
    format!("{{{name}}}:count")
}

/// How a worker's client reaches the cluster.
#[derive(Clone, Debug)]
pub enum Connect {
    /// `Client::open("redis+cluster://…")`.
    Url(String),
    /// `Client::builder().cluster(seed URLs)`.
    Seeds(Vec<String>),
}

/// What one worker does.
#[derive(Clone, Debug)]
pub struct Spec {
    /// How the client reaches the cluster.
    pub connect: Connect,
    /// The lock names, taken in turn, starting at `offset`.
    pub names: Vec<String>,
    /// The index of the first name taken.
    pub offset: usize,
    /// How many critical sections; 0 for "until told to stop".
    pub sections: u64,
    /// The locks' TTL.
    pub ttl: Duration,
    /// How long each section lasts (between the counter's read and write, with `counters`).
    pub hold: Duration,
    /// `min_replicas(1, REPLICA_WAIT)`.
    pub min_replicas: bool,
    /// The client's connect timeout, if not the default.
    pub connect_timeout: Option<Duration>,
    /// Each section does a non-atomic read-modify-write of the name's counter.
    pub counters: bool,
}

impl Spec {
    /// Endless sections (until told to stop) of 1 ms on `names`, TTL 2 s, with counters.
    pub fn new(connect: Connect, names: &[String]) -> Spec {
        Spec {
            connect,
            names: names.to_vec(),
            offset: 0,
            sections: 0,
            ttl: Duration::from_secs(2),
            hold: Duration::from_millis(1),
            min_replicas: false,
            connect_timeout: None,
            counters: true,
        }
    }

    /// The worker's arguments after `sections`.
    fn args(&self, client: &str, dir: &Path, data: &[String]) -> Vec<String> {
        let mut args = vec![
            format!("client={client}"),
            format!("dir={}", dir.display()),
            format!("data={}", data.join(",")),
            format!("names={}", self.names.join(",")),
            format!("offset={}", self.offset),
            format!("sections={}", self.sections),
            format!("ttl_ms={}", self.ttl.as_millis()),
            format!("hold_ms={}", self.hold.as_millis()),
            format!("min_replicas={}", u8::from(self.min_replicas)),
            format!("counters={}", u8::from(self.counters)),
        ];
        args.push(match &self.connect {
            Connect::Url(url) => format!("url={url}"),
            Connect::Seeds(seeds) => format!("seeds={}", seeds.join(",")),
        });
        if let Some(t) = self.connect_timeout {
            args.push(format!("connect_timeout_ms={}", t.as_millis()));
        }
        args
    }
}

/// What a worker reports when it ends.
#[derive(Debug, Default)]
pub struct Summary {
    /// The worker's client name.
    pub client: String,
    /// Completed critical sections per lock name.
    pub sections: BTreeMap<String, u64>,
    /// Sections whose guard was no longer held at their end.
    pub lost: u64,
    /// Every error a lock, unlock or counter call returned.
    pub errors: Vec<String>,
}

impl Summary {
    /// Completed sections on every name.
    pub fn total(&self) -> u64 {
        self.sections.values().sum()
    }

    fn to_text(&self) -> String {
        let mut text = String::new();
        for (name, n) in &self.sections {
            text.push_str(&format!("sections {name} {n}\n"));
        }
        text.push_str(&format!("lost {}\n", self.lost));
        for e in &self.errors {
            text.push_str(&format!("error {}\n", e.replace('\n', " ")));
        }
        text
    }

    fn read(client: &str, path: &Path) -> Summary {
        let text = std::fs::read_to_string(path)
            .unwrap_or_else(|e| panic!("worker {client} left no summary: {e}"));
        let mut s = Summary {
            client: client.to_owned(),
            ..Summary::default()
        };
        for line in text.lines() {
            let (tag, rest) = line.split_once(' ').unwrap_or((line, ""));
            match tag {
                "sections" => {
                    let (name, n) = rest.rsplit_once(' ').expect("sections NAME N");
                    s.sections
                        .insert(name.to_owned(), n.parse().expect("a count"));
                }
                "lost" => s.lost = rest.parse().expect("a count"),
                "error" => s.errors.push(rest.to_owned()),
                _ => panic!("bad summary line {line:?}"),
            }
        }
        s
    }
}

/// The worker processes of one test; killed (by pid) if the test ends early.
pub struct Workers {
    exe: PathBuf,
    dir: TempDir,
    data_seeds: Vec<String>,
    procs: Vec<(String, Child)>,
}

impl Workers {
    /// Workers run by the `worker` binary at `exe` (a test has it as
    /// `env!("CARGO_BIN_EXE_worker")`), against `cluster`.
    pub fn new(exe: impl Into<PathBuf>, cluster: &RedisCluster) -> Workers {
        Workers {
            exe: exe.into(),
            dir: TempDir::new("redmutex-cluster-workers"),
            data_seeds: cluster.nodes().iter().map(|n| n.server().addr()).collect(),
            procs: Vec::new(),
        }
    }

    fn path(&self, client: &str, ext: &str) -> PathBuf {
        self.dir.path().join(format!("{client}.{ext}"))
    }

    /// Starts a worker named `client`.
    pub fn spawn(&mut self, client: &str, spec: &Spec) {
        let out = File::create(self.path(client, "out")).expect("create a worker's output file");
        let err = out.try_clone().expect("dup a worker's output file");
        let child = Command::new(&self.exe)
            .arg("sections")
            .args(spec.args(client, self.dir.path(), &self.data_seeds))
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .expect("spawn a worker process");
        self.procs.push((client.to_owned(), child));
    }

    /// Every worker's history so far, sorted by time.
    pub fn history(&self) -> Vec<Event> {
        let paths: Vec<PathBuf> = self
            .procs
            .iter()
            .map(|(c, _)| self.path(c, "jsonl"))
            .collect();
        history::read_histories(&paths).unwrap_or_else(|e| panic!("unreadable history: {e}"))
    }

    /// Completed sections (releases) per client so far.
    pub fn progress(&self) -> BTreeMap<String, usize> {
        let mut out: BTreeMap<String, usize> =
            self.procs.iter().map(|(c, _)| (c.clone(), 0)).collect();
        for e in self.history() {
            if e.event == Kind::Release {
                *out.entry(e.client).or_default() += 1;
            }
        }
        out
    }

    /// Waits until every worker has completed `more` sections beyond `since`.
    pub fn wait_progress(&self, since: &BTreeMap<String, usize>, more: usize, timeout: Duration) {
        let mut now = BTreeMap::new();
        let ok = wait_until(timeout, || {
            now = self.progress();
            let ok = now
                .iter()
                .all(|(c, n)| *n >= since.get(c).copied().unwrap_or(0) + more);
            if !ok {
                std::thread::sleep(Duration::from_millis(20));
            }
            ok
        });
        assert!(
            ok,
            "workers made no progress in {timeout:?}: {since:?} -> {now:?}\n{}",
            self.outputs()
        );
    }

    /// Tells every worker to stop after its current section.
    pub fn stop(&self) {
        File::create(self.dir.path().join("stop")).expect("create the stop file");
    }

    /// What every worker printed, for failure messages.
    pub fn outputs(&self) -> String {
        let mut out = String::new();
        for (c, _) in &self.procs {
            let text = std::fs::read_to_string(self.path(c, "out")).unwrap_or_default();
            out.push_str(&format!("--- worker {c} ---\n{text}\n"));
        }
        out
    }

    /// Waits (bounded) until every worker exited successfully; returns their summaries.
    pub fn wait(&mut self, timeout: Duration) -> Vec<Summary> {
        let exited = wait_until(timeout, || {
            let all = self
                .procs
                .iter_mut()
                .all(|(_, c)| c.try_wait().ok().flatten().is_some());
            if !all {
                std::thread::sleep(Duration::from_millis(20));
            }
            all
        });
        if !exited {
            self.kill();
            panic!(
                "workers still running after {timeout:?}\n{}",
                self.outputs()
            );
        }
        let mut summaries = Vec::new();
        for (c, child) in &mut self.procs {
            let status = child.wait().expect("reap a worker");
            assert!(status.success(), "worker {c} failed: {status}\n{}", {
                std::fs::read_to_string(self.dir.path().join(format!("{c}.out")))
                    .unwrap_or_default()
            });
            summaries.push(Summary::read(
                c,
                &self.dir.path().join(format!("{c}.summary")),
            ));
        }
        summaries
    }

    fn kill(&mut self) {
        for (_, child) in &mut self.procs {
            if child.try_wait().ok().flatten().is_none() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The `sections` mode of the worker binary: `args` are its `key=value` arguments (see the
/// module documentation). Panics on a bad argument.
pub fn run_sections(args: &[String]) {
    let kv: BTreeMap<&str, &str> = args
        .iter()
        .map(|a| {
            a.split_once('=')
                .unwrap_or_else(|| panic!("worker sections: {a:?} is not key=value"))
        })
        .collect();
    let get = |k: &str| {
        *kv.get(k)
            .unwrap_or_else(|| panic!("worker sections: {k}= is missing"))
    };
    let num = |k: &str| -> u64 { get(k).parse().unwrap_or_else(|e| panic!("{k}: {e}")) };
    let me = get("client");
    let dir = PathBuf::from(get("dir"));
    let names: Vec<String> = get("names").split(',').map(str::to_owned).collect();
    let offset = num("offset") as usize;
    let sections = num("sections");
    let ttl = Duration::from_millis(num("ttl_ms"));
    let hold = Duration::from_millis(num("hold_ms"));
    let min_replicas = num("min_replicas") == 1;
    let counters = num("counters") == 1;
    let connect_timeout = kv
        .contains_key("connect_timeout_ms")
        .then(|| Duration::from_millis(num("connect_timeout_ms")));

    let client = match (kv.get("url"), connect_timeout) {
        (Some(url), None) => Client::open(url),
        (Some(url), Some(t)) => Client::builder().node(*url).connect_timeout(t).build(),
        (None, t) => {
            let mut b = Client::builder().cluster(get("seeds").split(','));
            if let Some(t) = t {
                b = b.connect_timeout(t);
            }
            b.build()
        }
    }
    .expect("a cluster client");
    let mut data = ClusterConn::new(get("data").split(','));
    let mut history = OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(format!("{me}.jsonl")))
        .expect("open the history");
    let base = (Instant::now(), mono_ns());
    let ns = |i: Instant| match i.checked_duration_since(base.0) {
        Some(d) => base.1 + d.as_nanos() as i64,
        None => base.1 - (base.0 - i).as_nanos() as i64,
    };

    let stop = dir.join("stop");
    let end = Instant::now() + MAX_WORKER_RUN;
    let mut summary = Summary::default();
    let mut i = 0u64;
    loop {
        if (sections > 0 && i >= sections)
            || (sections == 0 && (stop.exists() || Instant::now() >= end))
        {
            break;
        }
        let name = &names[(i as usize + offset) % names.len()];
        i += 1;
        let mut mutex = client.mutex(name).ttl(ttl);
        if min_replicas {
            mutex = mutex.min_replicas(1, REPLICA_WAIT);
        }
        let guard = match mutex.lock() {
            Ok(g) => g,
            Err(e) => {
                summary.errors.push(format!("lock {name}: {e}"));
                continue;
            }
        };
        let mut emit = |event: Kind, t_ns: i64| {
            let e = Event {
                client: me.to_owned(),
                event,
                t_ns,
                key: name.clone(),
                token: String::from_utf8_lossy(guard.token()).into_owned(),
                fence: guard.fence(),
                validity_ns: ns(guard.valid_until()),
            };
            // One write per line on an O_APPEND file: a line is never torn by another's.
            history
                .write_all(format!("{}\n", e.to_json()).as_bytes())
                .expect("write the history");
        };
        emit(Kind::Acquire, mono_ns());
        let mut done = true;
        if counters {
            let key = counter_key(name);
            let updated = data.get_u64(key.as_bytes()).and_then(|v| {
                std::thread::sleep(hold);
                data.set(key.as_bytes(), v.unwrap_or(0) + 1)
            });
            if let Err(e) = updated {
                summary.errors.push(format!("counter {key}: {e}"));
                done = false;
            }
        } else {
            std::thread::sleep(hold);
        }
        let t = mono_ns();
        if guard.is_held() {
            emit(Kind::Use, t);
        } else {
            emit(Kind::Lost, t);
            summary.lost += 1;
        }
        emit(Kind::Release, mono_ns());
        if let Err(e) = guard.unlock() {
            summary.errors.push(format!("unlock {name}: {e}"));
        }
        if done {
            *summary.sections.entry(name.clone()).or_default() += 1;
        }
    }

    let tmp = dir.join(format!("{me}.summary.tmp"));
    std::fs::write(&tmp, summary.to_text()).expect("write the summary");
    std::fs::rename(&tmp, dir.join(format!("{me}.summary"))).expect("publish the summary");
}

/// Runs `n` copies of the worker `exe` with `args`, each printing one line per event, and
/// faults them mid-run: after 800 ms the first is killed (`SIGKILL`) and the second stopped
/// (`SIGSTOP`) for 700 ms, then all run 800 ms more and are killed. Returns each worker's
/// lines, as printed before it died.
pub fn lines_under_kill_and_stop(exe: &str, args: &[&str], n: usize) -> Vec<Vec<String>> {
    use std::io::{BufRead, BufReader};
    let mut workers: Vec<Child> = (0..n)
        .map(|_| {
            Command::new(exe)
                .args(args)
                .stdout(Stdio::piped())
                .spawn()
                .expect("the worker starts")
        })
        .collect();
    let readers: Vec<_> = workers
        .iter_mut()
        .map(|w| {
            let out = w.stdout.take().expect("the worker's stdout is piped");
            std::thread::spawn(move || {
                BufReader::new(out)
                    .lines()
                    .map_while(Result::ok)
                    .collect::<Vec<String>>()
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(800));
    let _ = workers[0].kill();
    let stopped = workers[1].id() as libc::pid_t;
    // SAFETY: plain syscalls on a child we started and have not reaped.
    unsafe { libc::kill(stopped, libc::SIGSTOP) };
    std::thread::sleep(Duration::from_millis(700));
    // SAFETY: as above.
    unsafe { libc::kill(stopped, libc::SIGCONT) };
    std::thread::sleep(Duration::from_millis(800));
    for w in &mut workers {
        let _ = w.kill();
        let _ = w.wait();
    }
    readers
        .into_iter()
        .map(|r| r.join().expect("a reader thread"))
        .collect()
}
