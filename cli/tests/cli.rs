//! The `redmutex` binary against real redis-server processes: the acceptance of the command line
//! (exclusion, waiting in turn, exit status, loss, signals, unreachable Redis), `status`,
//! bad input, Redlock and Redis Cluster.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use redmutex_tests::cluster::RedisCluster;
use redmutex_tests::{
    ClosedPort, Nonsense, RedisServer, RedisServers, TempDir, free_port, wait_until,
};

const BIN: &str = env!("CARGO_BIN_EXE_redmutex");
/// The bound on any single wait in these tests; far above what a healthy run needs.
const BOUND: Duration = Duration::from_secs(10);

/// `redmutex --url ... ARGS` with a clean environment: no REDMUTEX_URL, no terminal, the
/// forwarded signals at their defaults (a test runner started with `&` ignores SIGINT, and
/// an ignored signal stays ignored by design), and stdout/stderr captured in files.
struct Redmutex {
    cmd: Command,
    out: PathBuf,
    err: PathBuf,
}

impl Redmutex {
    fn new(dir: &Path, urls: &[String]) -> Redmutex {
        static SEQ: AtomicUsize = AtomicUsize::new(0);
        let id = SEQ.fetch_add(1, Ordering::Relaxed);
        let (out, err) = (dir.join(format!("out.{id}")), dir.join(format!("err.{id}")));
        let mut cmd = Command::new(BIN);
        cmd.env_remove("REDMUTEX_URL")
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&out).unwrap())
            .stderr(std::fs::File::create(&err).unwrap());
        for u in urls {
            cmd.arg("--url").arg(u);
        }
        // SAFETY: only signal(2), which is async-signal-safe, between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
                    libc::signal(sig, libc::SIG_DFL);
                }
                Ok(())
            });
        }
        Redmutex { cmd, out, err }
    }

    fn args<'a>(mut self, args: impl IntoIterator<Item = &'a str>) -> Redmutex {
        self.cmd.args(args);
        self
    }

    fn env(mut self, key: &str, value: &str) -> Redmutex {
        self.cmd.env(key, value);
        self
    }

    fn spawn(mut self) -> Running {
        Running {
            child: self.cmd.spawn().unwrap(),
            out: self.out,
            err: self.err,
        }
    }

    /// Runs to completion (bounded).
    fn run(self) -> Finished {
        self.spawn().finish()
    }
}

/// A running `redmutex`; killed if the test fails first.
struct Running {
    child: Child,
    out: PathBuf,
    err: PathBuf,
}

impl Running {
    fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    fn signal(&self, sig: i32) {
        // SAFETY: kill(2) on our own child, which is not reaped yet (we own `child`).
        assert_eq!(unsafe { libc::kill(self.pid(), sig) }, 0);
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.err).unwrap()
    }

    /// Waits (bounded) for the exit and returns the exit code and output.
    fn finish(mut self) -> Finished {
        let mut status = None;
        let exited = wait_until(BOUND, || {
            status = self.child.try_wait().unwrap();
            status.is_some()
        });
        assert!(exited, "redmutex did not exit within {BOUND:?}");
        let status = status.unwrap();
        Finished {
            code: status
                .code()
                .unwrap_or_else(|| panic!("redmutex died of a signal: {status:?}")),
            stdout: std::fs::read_to_string(&self.out).unwrap(),
            stderr: std::fs::read_to_string(&self.err).unwrap(),
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

#[derive(Debug)]
struct Finished {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Finished {
    /// What `status` printed about the lock: its stdout without the `server …` lines.
    fn lock_status(&self) -> String {
        self.stdout
            .lines()
            .filter(|l| !l.starts_with("server "))
            .map(|l| format!("{l}\n"))
            .collect()
    }

    /// The single stderr line, which must start with `redmutex: `.
    fn error_line(&self) -> &str {
        let lines: Vec<&str> = self.stderr.lines().collect();
        assert_eq!(
            lines.len(),
            1,
            "expected one stderr line: {:?}",
            self.stderr
        );
        assert!(lines[0].starts_with("redmutex: "), "{}", lines[0]);
        lines[0]
    }
}

fn get(server: &RedisServer, key: &str) -> Option<String> {
    redis::cmd("GET")
        .arg(key)
        .query(&mut server.conn())
        .unwrap()
}

fn set(server: &RedisServer, key: &str, value: &str, px: Option<u64>) {
    let mut cmd = redis::cmd("SET");
    cmd.arg(key).arg(value);
    if let Some(px) = px {
        cmd.arg("PX").arg(px);
    }
    let () = cmd.query(&mut server.conn()).unwrap();
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// Waits (bounded) until `path` contains `text`.
fn wait_for(path: &Path, text: &str) {
    assert!(
        wait_until(BOUND, || read(path).contains(text)),
        "{} never contained {text:?}: {:?}",
        path.display(),
        read(path)
    );
}

/// Whether a process runs (a zombie whose parent died does not count).
fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        !s.rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z')
    })
}

/// Whether `parent` has a child process named `comm` (Linux `/proc`).
fn has_child(parent: i32, comm: &str) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return false;
    };
    entries.flatten().any(|e| {
        let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
        // "pid (comm) state ppid ..."
        let Some((head, tail)) = stat.rsplit_once(") ") else {
            return false;
        };
        let ppid = tail.split(' ').nth(1);
        head.ends_with(&format!("({comm}")) && ppid == Some(parent.to_string().as_str())
    })
}

/// A shell command that reports its signals in `log` and otherwise runs until killed.
const TRAPPING: &str = r#"trap 'echo "got signal" >> log; exit 7' TERM INT HUP
echo started >> log
while :; do sleep 0.02; done"#;

#[test]
fn three_at_once_with_no_wait_exactly_one_runs() {
    let server = RedisServer::start();
    let dir = TempDir::new("redmutex-cli");
    let urls = [server.url()];
    let runs: Vec<Running> = (0..3)
        .map(|_| {
            Redmutex::new(dir.path(), &urls)
                .args(["run", "--key", "nightly", "--ttl", "5s", "--no-wait", "--"])
                .args(["sh", "-c", r#"echo "$REDMUTEX_FENCE" >> out.txt; sleep 1"#])
                .spawn()
        })
        .collect();
    let pids: Vec<i32> = runs.iter().map(Running::pid).collect();
    let results: Vec<Finished> = runs.into_iter().map(Running::finish).collect();

    let lines = read(&dir.path().join("out.txt"));
    assert_eq!(lines.lines().count(), 1, "{lines:?}");
    assert!(lines.trim().parse::<u64>().unwrap() >= 1, "fence {lines:?}");
    let winners: Vec<usize> = (0..3).filter(|i| results[*i].code == 0).collect();
    assert_eq!(winners.len(), 1, "{results:?}");
    let winner_pid = pids[winners[0]];
    for (i, r) in results.iter().enumerate() {
        if i == winners[0] {
            continue;
        }
        assert_eq!(r.code, 75, "{r:?}");
        // The conflict line names the holder (its owner label is host:pid) and its TTL.
        let line = r.error_line();
        assert!(
            line.starts_with("redmutex: nightly is held by ")
                && line.contains(&format!(":{winner_pid} (expires in ")),
            "{line}"
        );
    }
    assert_eq!(get(&server, "nightly"), None, "released after the command");
}

#[test]
fn with_wait_runs_take_turns() {
    let server = RedisServer::start();
    let dir = TempDir::new("redmutex-cli");
    let urls = [server.url()];
    let script = r#"echo "start $(date +%s%N) $REDMUTEX_FENCE" >> log
sleep 0.3
echo "end $(date +%s%N)" >> log"#;
    let runs: Vec<Running> = (0..3)
        .map(|_| {
            Redmutex::new(dir.path(), &urls)
                .args(["run", "--key", "turns", "--wait", "5s", "--", "sh", "-c"])
                .args([script])
                .spawn()
        })
        .collect();
    for r in runs {
        let r = r.finish();
        assert_eq!(r.code, 0, "{r:?}");
    }
    let log = read(&dir.path().join("log"));
    let lines: Vec<Vec<&str>> = log.lines().map(|l| l.split(' ').collect()).collect();
    assert_eq!(lines.len(), 6, "{log}");
    let mut last_end = 0u128;
    let mut last_fence = 0u64;
    for pair in lines.chunks(2) {
        assert_eq!((pair[0][0], pair[1][0]), ("start", "end"), "overlap: {log}");
        let (start, end): (u128, u128) = (pair[0][1].parse().unwrap(), pair[1][1].parse().unwrap());
        let fence: u64 = pair[0][2].parse().unwrap();
        assert!(start >= last_end && end > start, "overlap: {log}");
        assert!(fence > last_fence, "fences must increase: {log}");
        (last_end, last_fence) = (end, fence);
    }
}

#[test]
fn exit_status_is_the_commands_and_the_lock_is_released() {
    let server = RedisServer::start();
    let dir = TempDir::new("redmutex-cli");
    let urls = [server.url()];
    let run = |script: &str| {
        Redmutex::new(dir.path(), &urls)
            .args(["run", "--key", "status", "--", "sh", "-c", script])
            .run()
    };
    let r = run("exit 3");
    assert_eq!((r.code, r.stderr.as_str()), (3, ""));
    assert_eq!(get(&server, "status"), None);

    // Killed by a signal: 128 + N, as a shell reports it.
    let r = run("kill -KILL $$");
    assert_eq!(r.code, 128 + libc::SIGKILL, "{r:?}");
    assert_eq!(get(&server, "status"), None);

    let r = run(r#"echo "fence=$REDMUTEX_FENCE""#);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(fence_in(&r.stdout, "fence=") > 0, "{r:?}");

    // A command that cannot be run: 127, and the lock is not kept.
    let r = Redmutex::new(dir.path(), &urls)
        .args(["run", "--key", "status", "--", "./no-such-command"])
        .run();
    assert_eq!(r.code, 127, "{r:?}");
    assert!(
        r.error_line().contains("cannot run ./no-such-command"),
        "{r:?}"
    );
    assert_eq!(get(&server, "status"), None);
}

#[test]
fn an_overwritten_lock_stops_the_command_with_the_lost_code() {
    let server = RedisServer::start();
    let dir = TempDir::new("redmutex-cli");
    let log = dir.path().join("log");
    let ttl = Duration::from_millis(1500);
    let run = Redmutex::new(dir.path(), &[server.url()])
        .args([
            "run", "--key", "lost", "--ttl", "1500ms", "--", "sh", "-c", TRAPPING,
        ])
        .spawn();
    wait_for(&log, "started");
    set(&server, "lost", "someone-else", None);
    let overwritten = Instant::now();
    wait_for(&log, "got signal");
    let took = overwritten.elapsed();
    // Renewal every TTL/3 notices; the operation timeout is 2 % of the TTL (min 20 ms). The
    // slack covers process scheduling on a busy machine.
    let bound = ttl / 3 + Duration::from_millis(30) + Duration::from_millis(500);
    assert!(took <= bound, "SIGTERM came {took:?} after the overwrite");
    let r = run.finish();
    assert_eq!(r.code, 74, "{r:?}");
    // (The shell may add its own "Terminated" for its killed `sleep`.)
    assert!(
        r.stderr.starts_with(
            "redmutex: lost the lock lost: another owner has it (a renewal was refused); \
             sending SIGTERM to the command\n"
        ),
        "{r:?}"
    );
    assert_eq!(
        get(&server, "lost").as_deref(),
        Some("someone-else"),
        "the new owner's lock must be left alone"
    );
}

#[test]
fn a_command_that_ignores_sigterm_is_killed_with_its_children() {
    let server = RedisServer::start();
    let dir = TempDir::new("redmutex-cli");
    let log = dir.path().join("log");
    let script = r#"trap '' TERM
sleep 30 &
echo "started $!" >> log
wait"#;
    let run = Redmutex::new(dir.path(), &[server.url()])
        .args([
            "run",
            "--key",
            "stubborn",
            "--ttl",
            "600ms",
            "--kill-after",
            "300ms",
        ])
        .args(["--", "sh", "-c", script])
        .spawn();
    wait_for(&log, "started");
    let grandchild: i32 = read(&log)
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    assert!(alive(grandchild));
    set(&server, "stubborn", "someone-else", None);
    let r = run.finish();
    assert_eq!(r.code, 74, "{r:?}");
    assert!(r.stderr.contains("sending SIGTERM"), "{r:?}");
    assert!(
        r.stderr
            .contains("ignored SIGTERM for 300ms; sending SIGKILL"),
        "{r:?}"
    );
    assert!(
        wait_until(BOUND, || !alive(grandchild)),
        "the command's own children must be killed too"
    );
}

#[test]
fn on_lost_ignore_lets_the_command_finish() {
    let server = RedisServer::start();
    let dir = TempDir::new("redmutex-cli");
    let log = dir.path().join("log");
    let script = r#"echo started >> log
while [ ! -e go ]; do sleep 0.02; done
exit 5"#;
    let run = Redmutex::new(dir.path(), &[server.url()])
        .args([
            "run",
            "--key",
            "lenient",
            "--ttl",
            "600ms",
            "--on-lost=ignore",
        ])
        .args(["--", "sh", "-c", script])
        .spawn();
    wait_for(&log, "started");
    set(&server, "lenient", "someone-else", None);
    assert!(
        wait_until(BOUND, || run.stderr().contains("the command runs on")),
        "{}",
        run.stderr()
    );
    std::fs::write(dir.path().join("go"), "").unwrap();
    let r = run.finish();
    assert_eq!(r.code, 5, "{r:?}");
    assert_eq!(get(&server, "lenient").as_deref(), Some("someone-else"));
}

#[test]
fn signals_reach_the_command_and_the_lock_is_released_after_it_exits() {
    let server = RedisServer::start();
    for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
        let dir = TempDir::new("redmutex-cli");
        let log = dir.path().join("log");
        let run = Redmutex::new(dir.path(), &[server.url()])
            .args(["run", "--key", "forward", "--", "sh", "-c", TRAPPING])
            .spawn();
        wait_for(&log, "started");
        assert!(get(&server, "forward").is_some());
        run.signal(sig);
        let r = run.finish();
        assert_eq!(r.code, 7, "signal {sig}: {r:?}");
        assert!(read(&log).contains("got signal"), "signal {sig}");
        assert_eq!(get(&server, "forward"), None, "signal {sig}");
    }

    // A command that does not handle the signal dies of it (redmutex must not hand it a
    // mask that blocks it); the exit code says so, as a shell's would.
    let dir = TempDir::new("redmutex-cli");
    let run = Redmutex::new(dir.path(), &[server.url()])
        .args(["run", "--key", "forward", "--", "sleep", "30"])
        .spawn();
    assert!(wait_until(BOUND, || has_child(run.pid(), "sleep")));
    run.signal(libc::SIGTERM);
    let r = run.finish();
    assert_eq!((r.code, r.stderr.as_str()), (128 + libc::SIGTERM, ""));
    assert_eq!(get(&server, "forward"), None);
}

#[test]
fn a_signal_while_waiting_gives_up_without_running_the_command() {
    let server = RedisServer::start();
    let dir = TempDir::new("redmutex-cli");
    set(&server, "busy", "someone-else", Some(20_000));
    let run = Redmutex::new(dir.path(), &[server.url()])
        .args(["run", "--key", "busy", "--", "touch", "ran"])
        .spawn();
    // Its connections are named after it: it is waiting (its handlers come first).
    let pid = run.pid();
    assert!(wait_until(BOUND, || {
        let list: String = redis::cmd("CLIENT")
            .arg("LIST")
            .query(&mut server.conn())
            .unwrap();
        list.contains(&format!(":{pid} "))
    }));
    run.signal(libc::SIGINT);
    let r = run.finish();
    assert_eq!(r.code, 128 + libc::SIGINT, "{r:?}");
    assert!(r.error_line().contains("interrupted by SIGINT"), "{r:?}");
    assert!(!dir.path().join("ran").exists());
    assert_eq!(get(&server, "busy").as_deref(), Some("someone-else"));
}

/// Ctrl-C ends a wait for the lock at once: the signal wakes the wait itself (the wait cap,
/// 250 ms, is not waited out), and the lock stays the other holder's.
#[test]
fn a_signal_ends_the_wait_at_once() {
    let server = RedisServer::start();
    let dir = TempDir::new("redmutex-cli");
    set(&server, "busy", "someone-else", Some(20_000));
    let run = Redmutex::new(dir.path(), &[server.url()])
        .args(["run", "--key", "busy", "--", "touch", "ran"])
        .spawn();
    let pid = run.pid();
    // Blocked in a wait for the release.
    assert!(wait_until(BOUND, || {
        let list: String = redis::cmd("CLIENT")
            .arg("LIST")
            .query(&mut server.conn())
            .unwrap();
        list.lines()
            .any(|l| l.contains(&format!(":{pid} ")) && l.contains("cmd=blpop"))
    }));
    let sent = std::time::Instant::now();
    run.signal(libc::SIGINT);
    let r = run.finish();
    let took = sent.elapsed();
    assert_eq!(r.code, 128 + libc::SIGINT, "{r:?}");
    assert!(
        took < Duration::from_millis(150),
        "exited {took:?} after SIGINT"
    );
    assert!(!dir.path().join("ran").exists());
    assert_eq!(get(&server, "busy").as_deref(), Some("someone-else"));
}

/// Ctrl-C ends the lock call at once also while the server does not answer (here: frozen
/// during the first connection's handshake, with a 10 s connect timeout): every wait of the
/// call watches the signal pipe, not only the waits for a release.
#[test]
fn a_signal_ends_a_call_to_a_frozen_server_at_once() {
    let server = RedisServer::start();
    let dir = TempDir::new("redmutex-cli");
    server.pause();
    let run = Redmutex::new(dir.path(), &[server.url()])
        .args([
            "run",
            "--key",
            "frozen",
            "--connect-timeout",
            "10s",
            "--",
            "touch",
            "ran",
        ])
        .spawn();
    // Most likely inside the handshake by then; a signal that comes sooner ends the call
    // just as well, so the bound below holds either way.
    std::thread::sleep(Duration::from_millis(300));
    let sent = Instant::now();
    run.signal(libc::SIGINT);
    let r = run.finish();
    let took = sent.elapsed();
    server.resume();
    assert_eq!(r.code, 128 + libc::SIGINT, "{r:?}");
    assert!(r.error_line().contains("interrupted by SIGINT"), "{r:?}");
    assert!(
        took < Duration::from_secs(1),
        "exited {took:?} after SIGINT, toward the 10 s connect timeout"
    );
    assert!(!dir.path().join("ran").exists());
}

#[test]
fn an_unreachable_redis_fails_fast_in_one_line_without_running_the_command() {
    let dir = TempDir::new("redmutex-cli");
    let closed = ClosedPort::new();
    let url = closed.url();
    let started = Instant::now();
    let r = Redmutex::new(dir.path(), std::slice::from_ref(&url))
        .args([
            "run",
            "--key",
            "k",
            "--connect-timeout",
            "500ms",
            "--",
            "touch",
            "ran",
        ])
        .run();
    let took = started.elapsed();
    assert_eq!(r.code, 69, "{r:?}");
    assert_eq!(
        r.error_line(),
        format!("redmutex: cannot reach {url}: connection refused")
    );
    assert!(took < Duration::from_millis(500 + 1000), "took {took:?}");
    assert!(!dir.path().join("ran").exists());

    // A frozen server accepts the connection but never answers.
    let server = RedisServer::start();
    server.pause();
    let started = Instant::now();
    let r = Redmutex::new(dir.path(), &[server.url()])
        .args([
            "run",
            "--key",
            "k",
            "--connect-timeout",
            "500ms",
            "--",
            "touch",
            "ran",
        ])
        .run();
    let took = started.elapsed();
    server.resume();
    assert_eq!(r.code, 69, "{r:?}");
    assert_eq!(
        r.error_line(),
        format!("redmutex: cannot reach {}: timed out", server.url())
    );
    assert!(took < Duration::from_millis(500 + 1000), "took {took:?}");
    assert!(!dir.path().join("ran").exists());
}

#[test]
fn conflict_with_a_wait_and_a_custom_exit_code() {
    let server = RedisServer::start();
    let dir = TempDir::new("redmutex-cli");
    set(&server, "held", "cron on db-2", Some(20_000));
    let started = Instant::now();
    let r = Redmutex::new(dir.path(), &[server.url()])
        .args([
            "run",
            "--key",
            "held",
            "--wait",
            "300ms",
            "--conflict-exit-code",
            "9",
        ])
        .args(["--", "touch", "ran"])
        .run();
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert_eq!(r.code, 9, "{r:?}");
    let line = r.error_line();
    assert!(
        line.starts_with("redmutex: held is held by cron on db-2 (expires in ")
            && line.ends_with("; gave up after 300ms"),
        "{line}"
    );
    assert!(!dir.path().join("ran").exists());
}

#[test]
fn status_shows_holder_ttl_and_fence_or_free() {
    let server = RedisServer::start();
    let dir = TempDir::new("redmutex-cli");
    let urls = [server.url()];
    let status = || {
        Redmutex::new(dir.path(), &urls)
            .args(["status", "st"])
            .run()
    };

    let r = status();
    assert_eq!(
        (r.code, r.lock_status().as_str()),
        (0, "free, last fence 0\n")
    );
    // Last, what the server runs (`Redis 7.0.15`, `Valkey 8.1.8`).
    let (major, minor) = redmutex_tests::server_version();
    let said = r.stdout.lines().last().unwrap();
    assert!(
        said.starts_with(&format!("server {}: ", server.url()))
            && said.contains(&format!(" {major}.{minor}.")),
        "{r:?}"
    );

    let log = dir.path().join("log");
    let run = Redmutex::new(dir.path(), &urls)
        .args([
            "run", "--key", "st", "--ttl", "20s", "--", "sh", "-c", TRAPPING,
        ])
        .spawn();
    wait_for(&log, "started");
    let r = status();
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.starts_with("held by "), "{r:?}");
    assert!(
        r.stdout.contains(&format!(":{}, expires in ", run.pid())),
        "{r:?}"
    );
    let fence = fence_in(&r.lock_status(), "s, last fence ");
    assert!(fence > 0, "{r:?}");
    run.signal(libc::SIGTERM);
    assert_eq!(run.finish().code, 7);

    set(&server, "st", "someone-else", Some(20_000));
    let r = status();
    assert!(
        r.stdout.starts_with("held by someone-else, expires in ")
            && r.lock_status()
                .ends_with(&format!(", last fence {fence}\n")),
        "{r:?}"
    );
    let () = redis::cmd("DEL")
        .arg("st")
        .query(&mut server.conn())
        .unwrap();
    assert_eq!(
        status().lock_status(),
        format!("free, last fence {fence}\n")
    );

    let closed = ClosedPort::new();
    let r = Redmutex::new(dir.path(), &[closed.url()])
        .args(["status", "st"])
        .run();
    assert_eq!(r.code, 69, "{r:?}");
    assert!(r.error_line().contains("connection refused"), "{r:?}");
}

#[test]
fn bad_input_is_a_usage_error() {
    let dir = TempDir::new("redmutex-cli");
    let url = [String::from("redis://127.0.0.1:6379")];
    let usage = |urls: &[String], args: &[&str]| {
        let r = Redmutex::new(dir.path(), urls)
            .args(args.iter().copied())
            .run();
        assert_eq!(r.code, 64, "{args:?}: {r:?}");
        assert!(r.stdout.is_empty());
        r.stderr
    };
    let err = usage(&url, &["run", "--key", "k", "--ttl", "5x", "--", "true"]);
    assert!(
        err.contains("invalid value '5x' for '--ttl <DUR>'"),
        "{err}"
    );
    let err = usage(&url, &["run", "--key", "k", "--wait", "10", "--", "true"]);
    assert!(err.contains("has no unit"), "{err}");
    let err = usage(
        &url,
        &[
            "run",
            "--key",
            "k",
            "--wait",
            "1s",
            "--no-wait",
            "--",
            "true",
        ],
    );
    assert!(err.contains("cannot be used with"), "{err}");
    let err = usage(&url, &["run", "--key", "k"]);
    assert!(err.contains("<COMMAND>"), "{err}");

    // Errors found after parsing: one line.
    let r = Redmutex::new(dir.path(), &[])
        .args(["run", "--key", "k", "--", "true"])
        .run();
    assert_eq!(r.code, 64);
    assert_eq!(
        r.error_line(),
        "redmutex: no Redis URL: pass --url redis://host:6379 or set REDMUTEX_URL"
    );
    let r = Redmutex::new(dir.path(), &["localhost:6379".into()])
        .args(["status", "k"])
        .run();
    assert_eq!(r.code, 64);
    assert!(
        r.error_line()
            .starts_with("redmutex: malformed Redis URL localhost:6379"),
        "{r:?}"
    );
    let r = Redmutex::new(dir.path(), &url)
        .args(["run", "--key", "k", "--ttl", "5ms", "--", "true"])
        .run();
    assert_eq!(r.code, 64);
    assert!(r.error_line().contains("TTL must be between"), "{r:?}");

    let r = Redmutex::new(dir.path(), &[]).args(["run", "--help"]).run();
    assert_eq!(r.code, 0);
    assert!(
        r.stdout.contains("Examples:") && r.stdout.contains("Exit status:"),
        "{r:?}"
    );
}

#[test]
fn redlock_over_several_urls() {
    let mut servers = RedisServers::start(3);
    let dir = TempDir::new("redmutex-cli");
    let urls = servers.urls();
    let log = dir.path().join("log");
    let script = r#"echo "started $REDMUTEX_FENCE" >> log
while [ ! -e go ]; do sleep 0.02; done"#;
    let run = Redmutex::new(dir.path(), &urls)
        .args(["run", "--key", "red", "--", "sh", "-c", script])
        .spawn();
    wait_for(&log, "started ");
    let token = get(&servers[0], "red").unwrap();
    assert!(token.contains(&format!(":{}:", run.pid())), "{token}");
    for s in servers.iter() {
        assert_eq!(get(s, "red").as_ref(), Some(&token), "held on every node");
    }
    let r = Redmutex::new(dir.path(), &urls)
        .args(["status", "red"])
        .run();
    let first = fence_in(&r.lock_status(), ", last fence ");
    assert!(r.stdout.starts_with("held by ") && first > 0, "{r:?}");
    // The largest counter among the nodes: at least the run's fence (a node whose answer the
    // round did not wait for may have counted on).
    let log_text = read(&log);
    let given = fence_in(&log_text, "started ");
    assert!(given > 0 && first >= given, "{r:?} {log_text}");
    std::fs::write(dir.path().join("go"), "").unwrap();
    assert_eq!(run.finish().code, 0);
    for s in servers.iter() {
        assert_eq!(get(s, "red"), None, "released on every node");
    }

    // REDMUTEX_URL, comma-separated; a majority is enough.
    let env = urls.join(",");
    servers[2].kill();
    let r = Redmutex::new(dir.path(), &[])
        .env("REDMUTEX_URL", &env)
        .args([
            "run",
            "--key",
            "red",
            "--",
            "sh",
            "-c",
            "echo $REDMUTEX_FENCE",
        ])
        .run();
    assert_eq!(r.code, 0, "{r:?}");
    assert!(fence_in(&r.stdout, "") > given, "{r:?}");

    servers[1].kill();
    let r = Redmutex::new(dir.path(), &[])
        .env("REDMUTEX_URL", &env)
        .args([
            "run",
            "--key",
            "red",
            "--connect-timeout",
            "300ms",
            "--",
            "touch",
            "ran",
        ])
        .run();
    assert_eq!(r.code, 69, "{r:?}");
    let line = r.error_line();
    assert!(
        line.starts_with(
            "redmutex: no quorum: 1 of 3 Redis nodes answered, 2 needed; cannot reach "
        ) && line.contains("connection refused"),
        "{line}"
    );
    assert!(!dir.path().join("ran").exists());
}

#[test]
fn a_tls_ca_cert_file_is_read_and_checked() {
    let dir = TempDir::new("redmutex-cli");
    let ok = std::process::Command::new("openssl")
        .args(["req", "-x509", "-newkey", "ec", "-pkeyopt"])
        .args(["ec_paramgen_curve:P-256", "-nodes", "-days", "2"])
        .args(["-subj", "/CN=redmutex cli test CA", "-keyout", "ca.key"])
        .args(["-out", "ca.crt"])
        .current_dir(dir.path())
        .stderr(Stdio::null())
        .status()
        .expect("openssl, to make a CA certificate");
    assert!(ok.success());
    std::fs::write(dir.path().join("garbage.pem"), "not a certificate").unwrap();
    let status = |url: &str, ca: &str| {
        Redmutex::new(dir.path(), &[url.to_owned()])
            .args([
                "--tls-ca-cert",
                ca,
                "--connect-timeout",
                "300ms",
                "status",
                "k",
            ])
            .run()
    };
    let tls_url = format!("rediss://127.0.0.1:{}", free_port());

    let r = status(&tls_url, "missing.pem");
    assert_eq!(r.code, 64, "{r:?}");
    assert!(
        r.error_line()
            .starts_with("redmutex: cannot read the TLS CA certificate missing.pem:"),
        "{r:?}"
    );
    let r = status(&tls_url, "garbage.pem");
    assert_eq!(r.code, 64, "{r:?}");
    assert!(r.error_line().contains("PEM"), "{r:?}");
    let r = status("redis://127.0.0.1:6379", "ca.crt");
    assert_eq!(r.code, 64, "{r:?}");
    assert!(r.error_line().contains("not a rediss:// URL"), "{r:?}");
    // A good CA is taken; nothing listens there, so the lock's Redis is unavailable.
    let r = status(&tls_url, "ca.crt");
    assert_eq!(r.code, 69, "{r:?}");
    assert_eq!(
        r.error_line(),
        format!("redmutex: cannot reach {tls_url}: connection refused")
    );
}

/// A real TLS handshake: a TLS-only redis-server whose certificate the given CA signed runs
/// the command; a CA that signed nothing is refused with a certificate error.
#[test]
fn runs_over_tls_with_the_right_ca_and_refuses_another() {
    let Some((pki, server)) = redmutex_tests::tls::setup() else {
        return;
    };
    let dir = TempDir::new("redmutex-cli");
    let urls = [server.url()];
    let ca = |file: &str| pki.path(file).to_str().unwrap().to_owned();
    let r = Redmutex::new(dir.path(), &urls)
        .args(["--tls-ca-cert", &ca("ca.crt"), "run", "--key", "tls", "--"])
        .args(["sh", "-c", r#"echo "$REDMUTEX_FENCE""#])
        .run();
    assert_eq!(r.code, 0, "{r:?}");
    assert!(fence_in(&r.stdout, "") > 0, "{r:?}");
    let r = Redmutex::new(dir.path(), &urls)
        .args([
            "--tls-ca-cert",
            &ca("other-ca.crt"),
            "--connect-timeout",
            "300ms",
        ])
        .args(["status", "tls"])
        .run();
    assert_eq!(r.code, 69, "{r:?}");
    assert!(r.error_line().contains("certificate"), "{r:?}");
    refuses_a_wrong_ca_at_once(dir.path(), &urls, &ca("other-ca.crt"));
}

/// Without `--tls-ca-cert`, certificates are checked against the system's roots, which
/// `SSL_CERT_FILE` names (read once per server, not per connection): the test CA there runs
/// the command; a CA that signed nothing there is refused with a certificate error.
#[test]
fn the_system_roots_come_from_ssl_cert_file() {
    let Some((pki, server)) = redmutex_tests::tls::setup() else {
        return;
    };
    let dir = TempDir::new("redmutex-cli");
    let urls = [server.url()];
    let ca = |file: &str| pki.path(file).to_str().unwrap().to_owned();
    let r = Redmutex::new(dir.path(), &urls)
        .env("SSL_CERT_FILE", &ca("ca.crt"))
        .args(["run", "--key", "tls:roots", "--"])
        .args(["sh", "-c", r#"echo "$REDMUTEX_FENCE""#])
        .run();
    assert_eq!(r.code, 0, "{r:?}");
    assert!(fence_in(&r.stdout, "") > 0, "{r:?}");
    let r = Redmutex::new(dir.path(), &urls)
        .env("SSL_CERT_FILE", &ca("other-ca.crt"))
        .args(["status", "tls:roots"])
        .run();
    assert_eq!(r.code, 69, "{r:?}");
    assert!(r.error_line().contains("certificate"), "{r:?}");
}

/// `run` waits for the lock, but not for a certificate to change: with a CA that signed
/// nothing it fails at once, not after retrying for the 10 s connect timeout like an outage.
fn refuses_a_wrong_ca_at_once(dir: &Path, urls: &[String], other_ca: &str) {
    let started = Instant::now();
    let r = Redmutex::new(dir, urls)
        .args(["--tls-ca-cert", other_ca, "--connect-timeout", "10s"])
        .args(["run", "--key", "tls", "--", "true"])
        .run();
    assert_eq!(r.code, 69, "{urls:?}: {r:?}");
    assert!(r.error_line().contains("certificate"), "{urls:?}: {r:?}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{urls:?}: {r:?}"
    );
}

/// TLS to a Redis Cluster (`rediss+cluster://`) and to a Sentinel group
/// (`rediss+sentinel://`): the right CA runs the command on each; a CA that signed nothing is
/// refused with a certificate error at once.
#[test]
fn runs_over_tls_to_a_cluster_and_a_sentinel_group() {
    use redmutex_tests::tls_topology::{TlsCluster, TlsSentinel};
    let pki = redmutex_tests::tls::Pki::generate();
    let (Some(cluster), Some(group)) = (TlsCluster::start(&pki), TlsSentinel::start(&pki)) else {
        return;
    };
    let dir = TempDir::new("redmutex-cli");
    let ca = |file: &str| pki.path(file).to_str().unwrap().to_owned();
    for url in [cluster.url(), group.url()] {
        let urls = [url.clone()];
        let r = Redmutex::new(dir.path(), &urls)
            .args(["--tls-ca-cert", &ca("ca.crt"), "--connect-timeout", "10s"])
            .args(["run", "--key", "tls:topology", "--"])
            .args(["sh", "-c", r#"echo "$REDMUTEX_FENCE""#])
            .run();
        assert_eq!(r.code, 0, "{url}: {r:?}");
        assert!(fence_in(&r.stdout, "") > 0, "{url}: {r:?}");
        let started = Instant::now();
        let r = Redmutex::new(dir.path(), &urls)
            .args([
                "--tls-ca-cert",
                &ca("other-ca.crt"),
                "--connect-timeout",
                "10s",
            ])
            .args(["run", "--key", "tls:topology", "--", "true"])
            .run();
        assert_eq!(r.code, 69, "{url}: {r:?}");
        assert!(r.error_line().contains("certificate"), "{url}: {r:?}");
        assert!(started.elapsed() < Duration::from_secs(5), "{url}: {r:?}");
    }
}

/// A Redis whose maxmemory-policy may evict locks: `run` warns of it once on stderr and runs
/// the command; with `--require-noeviction` it refuses that server without running anything.
#[test]
fn an_evicting_redis_is_warned_of_or_refused() {
    let server = RedisServer::start_with(&["--maxmemory-policy", "allkeys-lru"]);
    let dir = TempDir::new("redmutex-cli");
    let urls = [server.url()];
    let r = Redmutex::new(dir.path(), &urls)
        .args(["run", "--key", "evict", "--", "echo", "ran"])
        .run();
    assert_eq!((r.code, r.stdout.as_str()), (0, "ran\n"), "{r:?}");
    let warnings: Vec<&str> = r
        .stderr
        .lines()
        .filter(|l| l.starts_with("redmutex: warning:"))
        .collect();
    assert_eq!(warnings.len(), 1, "{r:?}");
    assert!(
        warnings[0].contains("maxmemory-policy allkeys-lru"),
        "{r:?}"
    );

    let r = Redmutex::new(dir.path(), &urls)
        .args([
            "--require-noeviction",
            "run",
            "--key",
            "evict",
            "--",
            "echo",
            "ran",
        ])
        .run();
    assert_eq!((r.code, r.stdout.as_str()), (69, ""), "{r:?}");
    assert!(
        r.error_line().contains("maxmemory-policy allkeys-lru"),
        "{r:?}"
    );
}

/// A Redis Cluster given as one `redis+cluster://` URL, on the command line or in the
/// comma-separated REDMUTEX_URL: each master's locks run, conflict and show in `status` as on
/// one server, and the lock and its fence live on the master that serves the name's slot.
#[test]
fn a_redis_cluster_url_works_like_one_server() {
    let cluster = RedisCluster::start(3, 0);
    let dir = TempDir::new("redmutex-cli");
    let urls = [cluster.url()];
    // One name served by each master.
    let names: Vec<String> = cluster
        .masters()
        .into_iter()
        .map(|port| {
            (0..)
                .map(|i| format!("nightly:{i}"))
                .find(|n| cluster.master_of_key(n.as_bytes()) == port)
                .unwrap()
        })
        .collect();
    for name in &names {
        let r = Redmutex::new(dir.path(), &urls)
            .args(["run", "--key", name, "--ttl", "5s", "--no-wait", "--"])
            .args(["sh", "-c", r#"echo "$REDMUTEX_FENCE""#])
            .run();
        assert_eq!(r.code, 0, "{name}: {r:?}");
        let given = fence_in(&r.stdout, "");
        assert!(given > 0, "{name}: {r:?}");
        assert_eq!(cluster.get(name.as_bytes()), None, "{name} released");
        let fence = cluster.get(format!("{{{name}}}:fence").as_bytes());
        assert_eq!(
            fence.as_deref(),
            Some(given.to_string().as_bytes()),
            "{name}'s fence"
        );
    }

    // Held through the library; the CLI, given the URL by REDMUTEX_URL, sees the conflict.
    let client = redmutex::Client::open(&cluster.url()).unwrap();
    let guard = client.mutex(&names[1]).lock().unwrap();
    let r = Redmutex::new(dir.path(), &[])
        .env("REDMUTEX_URL", &cluster.url())
        .args(["run", "--key", &names[1], "--no-wait", "--", "true"])
        .run();
    assert_eq!(r.code, 75, "{r:?}");
    assert!(
        r.error_line()
            .starts_with(&format!("redmutex: {} is held by ", names[1])),
        "{r:?}"
    );
    let r = Redmutex::new(dir.path(), &[])
        .env("REDMUTEX_URL", &cluster.url())
        .args(["status", &names[1]])
        .run();
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout.starts_with("held by ")
            && r.lock_status()
                .ends_with(&format!(", last fence {}\n", guard.fence())),
        "{r:?}"
    );
    guard.unlock().unwrap();
}

#[test]
fn version_names_the_version_and_the_tls_support() {
    let out = Command::new(BIN).arg("--version").output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let line = String::from_utf8(out.stdout).unwrap();
    assert_eq!(
        line.trim_end(),
        format!(
            "redmutex {} (TLS: rustls with the ring provider; rediss:// URLs supported)",
            env!("CARGO_PKG_VERSION")
        )
    );
}

/// A round ends as soon as no majority can grant. Two of three nodes fail at once (their fence
/// counter holds no number) while the third, frozen (`SIGSTOP`) behind a connection the run
/// already holds, is not waited for: the line names it so, and does not call it unreachable.
///
/// The two failing nodes are databases 0 and 1 of one server, so that one transaction frees
/// both at once. A round that found one of them free (its error) and the other still held
/// would need the third node's answer to tell a busy lock from no quorum: it would wait for
/// the frozen node, and rightly call it unreachable after that. The transaction also reads
/// how many clients the server holds blocked: while the run's wait is blocked there, no round
/// of the run is half done (a wait begins once the round before it was decided, and the next
/// round's request waits behind it); otherwise the case is played again.
#[test]
fn no_quorum_names_a_node_not_waited_for_and_not_as_unreachable() {
    let shared = RedisServer::start();
    let third = RedisServer::start();
    let urls = [shared.url(), format!("{}/1", shared.url()), third.url()];
    let blocked = || shared.info("clients", "blocked_clients");
    for attempt in 0..5 {
        let key = format!("nw{attempt}");
        let dir = TempDir::new("redmutex-cli");
        // Held on both databases until the transaction frees them.
        on_both_databases(&shared, |p, _| {
            p.cmd("SET").arg(&key).arg("someone:1:x").ignore();
        });
        let run = Redmutex::new(dir.path(), &urls)
            .args(["run", "--key", &key, "--wait", "8s", "--", "touch", "ran"])
            .spawn();
        assert!(
            wait_until(BOUND, || blocked().as_deref() == Some("1")),
            "the run never waited"
        );
        on_both_databases(&shared, |p, _| {
            p.cmd("SET")
                .arg(format!("{{{key}}}:fence"))
                .arg("not a number")
                .ignore();
        });
        // The third node granted the first round, which the run undoes. Frozen before the
        // undo's reply, the node would cost the run that connection. Once the key is gone
        // there, the undo's reply went out with (or before) the reply to that GET.
        assert!(
            wait_until(BOUND, || get(&third, &key).is_none()),
            "the third node's grant was never undone"
        );
        third.pause();
        let replies = on_both_databases(&shared, |p, db| {
            if db == 0 {
                p.cmd("INFO").arg("clients");
            }
            p.cmd("DEL").arg(&key).ignore();
        });
        let info: String = redis::from_redis_value(replies[0].clone()).unwrap();
        let r = run.finish();
        third.resume();
        if !info.lines().any(|l| l.trim() == "blocked_clients:1") {
            continue;
        }
        assert_eq!(r.code, 69, "{r:?}");
        let line = r.error_line();
        assert!(
            line.starts_with("redmutex: no quorum: 0 of 3 Redis nodes answered, 2 needed; ")
                && line.ends_with("; 1 not waited for"),
            "{line}"
        );
        for u in &urls[..2] {
            assert!(
                line.contains(&format!("{u} answered with an error")),
                "{line}"
            );
        }
        assert!(
            !line.contains(&urls[2]) && !line.contains("cannot reach"),
            "{line}"
        );
        assert!(!dir.path().join("ran").exists());
        return;
    }
    panic!("the run's wait was never blocked when the transaction ran");
}

/// Runs, in one transaction on `server`, what `add` puts in a pipeline for database 0 and
/// then for database 1; returns the replies not ignored.
fn on_both_databases(
    server: &RedisServer,
    mut add: impl FnMut(&mut redis::Pipeline, u8),
) -> Vec<redis::Value> {
    let mut p = redis::pipe();
    p.atomic();
    for db in [0, 1] {
        p.cmd("SELECT").arg(db).ignore();
        add(&mut p, db);
    }
    p.query(&mut server.conn()).unwrap()
}

/// The fence that follows `after` on the last line of `out` (fences come from the server's
/// time in µs, so a test compares them rather than pinning one).
fn fence_in(out: &str, after: &str) -> u64 {
    let line = out.trim_end().lines().last().unwrap_or_default();
    let at = match after {
        "" => 0,
        _ => line.rfind(after).map_or(0, |i| i + after.len()),
    };
    line[at..].trim().parse().unwrap_or(0)
}

/// A key deleted behind the command's back while it ran (an operator's `DEL`, an eviction,
/// `FLUSHALL`) is a loss at the release, never a clean exit: 74 with one line that says so.
#[test]
fn a_key_that_vanished_while_the_command_ran_exits_with_the_lost_code() {
    let server = RedisServer::start();
    let dir = TempDir::new("redmutex-cli");
    let port = server.port().to_string();
    let r = Redmutex::new(dir.path(), &[server.url()])
        .args(["run", "--key", "vanished", "--ttl", "30s", "--"])
        .args(["redis-cli", "-p", &port, "DEL", "vanished"])
        .run();
    assert_eq!(r.code, 74, "{r:?}");
    assert!(r.error_line().contains("lost"), "{r:?}");
    assert!(r.error_line().ends_with(": not there]"), "{r:?}");
}

/// A server that answers every command with nonsense (`+ok`, `:-5`, nil, an array, a
/// string, in turn) never lets `run` start its command: no reply of it is a grant, and the
/// error is a sentence with no Rust debug text.
#[test]
fn run_never_starts_its_command_on_nonsense() {
    let server = Nonsense::start();
    let dir = TempDir::new("redmutex-cli");
    let urls = [server.url()];
    for _ in 0..5 {
        let r = Redmutex::new(dir.path(), &urls)
            .args([
                "run",
                "--connect-timeout",
                "300ms",
                "--key",
                "nonsense",
                "--",
                "touch",
                "ran",
            ])
            .run();
        assert_ne!(r.code, 0, "{r:?}");
        assert!(!dir.path().join("ran").exists(), "the command ran: {r:?}");
        for debug in ["Ok(", "Some(", "Err("] {
            assert!(!r.stderr.contains(debug), "{r:?}");
        }
    }
}

/// A `run --wait` behind a lock held for long: its waits grow from 250 ms to the 2 s cap while
/// nothing is released, so it costs Redis a round every 2 s (a handful of commands a second);
/// it still runs its command once the holder lets go.
#[test]
fn a_long_wait_costs_redis_a_handful_of_commands_a_second() {
    let server = RedisServer::start();
    let dir = TempDir::new("redmutex-cli");
    let urls = [server.url()];
    set(&server, "long", "foreign", Some(30_000));
    let waiting = Redmutex::new(dir.path(), &urls)
        .args([
            "run", "--key", "long", "--wait", "60s", "--", "touch", "ran",
        ])
        .spawn();
    let mut info = server.conn();
    let mut commands = || -> u64 {
        let text: String = redis::cmd("INFO").arg("stats").query(&mut info).unwrap();
        text.lines()
            .find_map(|l| l.strip_prefix("total_commands_processed:"))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    // 250 + 500 + 1000 ms of waits, then waits of the cap.
    std::thread::sleep(Duration::from_millis(1750));
    let before = commands();
    std::thread::sleep(Duration::from_secs(4));
    let spent = commands() - before - 1;
    eprintln!("a long wait: {:.1} commands/s", spent as f64 / 4.0);
    assert!(spent <= 24, "{spent} commands in 4 s");
    let _: () = redis::cmd("DEL")
        .arg("long")
        .query(&mut server.conn())
        .unwrap();
    let r = waiting.finish();
    assert_eq!(r.code, 0, "{r:?}");
    assert!(dir.path().join("ran").exists(), "{r:?}");
}

/// `--stats` prints the run's figures on stderr at exit: a grant and its hold, or a refusal.
#[test]
fn stats_prints_what_the_runs_lock_calls_did() {
    let server = RedisServer::start();
    let dir = TempDir::new("redmutex-cli");
    let urls = [server.url()];
    let r = Redmutex::new(dir.path(), &urls)
        .args(["run", "--stats", "--key", "stats", "--", "true"])
        .run();
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stderr.contains(
            "redmutex: stats acquired=1 refused=0 timed_out=0 interrupted=0 failed=0 lost=0 "
        ),
        "{r:?}"
    );
    assert!(r.stderr.contains(" held=0."), "{r:?}");
    assert!(r.stderr.contains(" handoffs=0 renewal_lag=0."), "{r:?}");

    set(&server, "stats", "foreign", Some(30_000));
    let r = Redmutex::new(dir.path(), &urls)
        .args([
            "run",
            "--stats",
            "--no-wait",
            "--key",
            "stats",
            "--",
            "true",
        ])
        .run();
    assert_eq!(r.code, 75, "{r:?}");
    assert!(r.stderr.contains("stats acquired=0 refused=1 "), "{r:?}");
}

/// `status --json`: one JSON object with the documented fields, for the free lock, a foreign
/// holder, and shared holds.
#[test]
fn status_json_prints_one_object_with_the_documented_fields() {
    let server = RedisServer::start();
    let dir = TempDir::new("redmutex-cli");
    let urls = [server.url()];
    let status = || {
        let r = Redmutex::new(dir.path(), &urls)
            .args(["status", "--json", "js"])
            .run();
        assert_eq!(r.code, 0, "{r:?}");
        assert_eq!(r.stdout.lines().count(), 1, "{r:?}");
        serde_json::from_str::<serde_json::Value>(&r.stdout).unwrap()
    };
    let free = status();
    assert_eq!(free["name"], "js");
    assert_eq!(free["held"], false);
    assert!(free["holder"].is_null() && free["owner"].is_null() && free["ttl_ms"].is_null());
    assert_eq!(free["fence"], 0);
    assert_eq!(free["shared"], serde_json::json!([]));
    assert_eq!(
        free["permits"],
        serde_json::json!({"limit": null, "holders": []})
    );
    assert_eq!(free["servers"][0]["node"], server.url().as_str());
    assert!(free["servers"][0]["server"].is_string(), "{free}");

    set(
        &server,
        "js",
        "cron on db-2:0123456789abcdef0123456789abcdef",
        Some(20_000),
    );
    let held = status();
    assert_eq!(held["held"], true);
    assert_eq!(
        held["holder"],
        "cron on db-2:0123456789abcdef0123456789abcdef"
    );
    assert_eq!(held["owner"], "cron on db-2");
    let ttl = held["ttl_ms"].as_u64().unwrap();
    assert!(ttl > 0 && ttl <= 20_000, "{held}");

    let () = redis::cmd("DEL")
        .arg("js")
        .query(&mut server.conn())
        .unwrap();
    let log = dir.path().join("log");
    let run = Redmutex::new(dir.path(), &urls)
        .args(["run", "--shared", "--key", "js", "--", "sh", "-c", TRAPPING])
        .spawn();
    wait_for(&log, "started");
    let shared = status();
    assert_eq!(shared["held"], false);
    let holds = shared["shared"].as_array().unwrap();
    assert_eq!(holds.len(), 1, "{shared}");
    assert!(
        holds[0]["owner"]
            .as_str()
            .unwrap()
            .ends_with(&format!(":{}", run.pid())),
        "{shared}"
    );
    assert!(holds[0]["ttl_ms"].as_u64().unwrap() > 0);
    run.signal(libc::SIGTERM);
    run.finish();
}
