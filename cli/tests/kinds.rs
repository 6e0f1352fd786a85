//! `redmutex run --permits N` (a semaphore) and `redmutex run --shared` (read holds beside
//! the plain run's exclusive one, like `flock -s` and `flock -x`), and what `status` shows of
//! them, against a real redis-server.

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use redmutex_tests::{RedisServer, TempDir, wait_until};

const BIN: &str = env!("CARGO_BIN_EXE_redmutex");
const BOUND: Duration = Duration::from_secs(10);

/// A command that logs `started <fence>` to `log` and runs until the file `go` exists.
const HOLD: &str = r#"echo "started $REDMUTEX_FENCE" >> log
while [ ! -e go ]; do sleep 0.02; done"#;

fn redmutex(dir: &Path, url: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.env_remove("REDMUTEX_URL")
        .current_dir(dir)
        .stdin(Stdio::null())
        .args(["--url", url])
        .args(args);
    cmd
}

/// Starts a run of `args` that holds until `go` exists, and waits until its command started.
fn hold(dir: &Path, url: &str, args: &[&str], started: usize) -> Child {
    let mut all = vec!["run"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--", "sh", "-c", HOLD]);
    let child = redmutex(dir, url, &all)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let log = dir.join("log");
    assert!(
        wait_until(BOUND, || starts(&log) >= started),
        "{started} holders never started: {:?}",
        std::fs::read_to_string(&log)
    );
    child
}

fn starts(log: &Path) -> usize {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .count()
}

/// Runs `args` to completion (`true` as the command of a `run`).
fn once(dir: &Path, url: &str, args: &[&str]) -> Output {
    let mut all: Vec<&str> = args.to_vec();
    if args[0] == "run" {
        all.extend_from_slice(&["--", "true"]);
    }
    redmutex(dir, url, &all).output().unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// What `status` printed about the lock: its stdout without the `server …` lines.
fn lock_status(out: &Output) -> String {
    stdout(out)
        .lines()
        .filter(|l| !l.starts_with("server "))
        .map(|l| format!("{l}\n"))
        .collect()
}

/// Lets the holders finish and checks that each exited 0.
fn release(dir: &Path, holders: Vec<Child>) {
    std::fs::write(dir.join("go"), "").unwrap();
    for mut h in holders {
        let mut code = None;
        assert!(wait_until(BOUND, || {
            code = h.try_wait().unwrap();
            code.is_some()
        }));
        assert_eq!(code.unwrap().code(), Some(0));
    }
    std::fs::remove_file(dir.join("go")).unwrap();
    std::fs::remove_file(dir.join("log")).unwrap();
}

#[test]
fn permits_admit_n_runs_and_a_third_gets_the_conflict_code() {
    let server = RedisServer::start();
    let dir = TempDir::new("redmutex-cli-kinds");
    let (dir, url) = (dir.path(), server.url());
    let holders = vec![
        hold(dir, &url, &["--key", "pay", "--permits", "2"], 1),
        hold(dir, &url, &["--key", "pay", "--permits", "2"], 2),
    ];
    let log = std::fs::read_to_string(dir.join("log")).unwrap();
    let fences: Vec<u64> = log
        .lines()
        .map(|l| l.strip_prefix("started ").unwrap().parse().unwrap())
        .collect();
    assert!(fences[0] >= 1 && fences[1] > fences[0], "{log}");

    let third = once(
        dir,
        &url,
        &["run", "--key", "pay", "--permits", "2", "--no-wait"],
    );
    assert_eq!(third.status.code(), Some(75), "{third:?}");
    assert!(
        stderr(&third).starts_with("redmutex: all 2 permits of pay are held (by "),
        "{third:?}"
    );
    let waited = once(
        dir,
        &url,
        &["run", "--key", "pay", "--permits", "2", "--wait", "200ms"],
    );
    assert_eq!(waited.status.code(), Some(75), "{waited:?}");
    assert!(
        stderr(&waited).contains("; gave up after 200ms"),
        "{waited:?}"
    );

    // Another count for a held name is refused as bad input, with both counts.
    let other = once(
        dir,
        &url,
        &["run", "--key", "pay", "--permits", "3", "--no-wait"],
    );
    assert_eq!(other.status.code(), Some(64), "{other:?}");
    assert!(
        stderr(&other).contains("is held with 2 permits, but this call asked for 3"),
        "{other:?}"
    );

    let st = once(dir, &url, &["status", "pay"]);
    let text = lock_status(&st);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4, "{text}");
    assert_eq!(lines[0], format!("free, last fence {}", fences[1]));
    assert_eq!(lines[1], "permits held: 2 of 2:");
    assert!(
        lines[2].starts_with("  ") && lines[2].contains(", expires in "),
        "{text}"
    );

    release(dir, holders);
    // Free again: a plain run and a semaphore of another count both go through.
    let plain = once(dir, &url, &["run", "--key", "pay", "--no-wait"]);
    assert_eq!(plain.status.code(), Some(0), "{plain:?}");
    let three = once(
        dir,
        &url,
        &["run", "--key", "pay", "--permits", "3", "--no-wait"],
    );
    assert_eq!(three.status.code(), Some(0), "{three:?}");
    assert_eq!(
        lock_status(&once(dir, &url, &["status", "pay"]))
            .lines()
            .count(),
        1
    );
}

#[test]
fn shared_runs_overlap_and_exclude_plain_runs_like_flock() {
    let server = RedisServer::start();
    let dir = TempDir::new("redmutex-cli-kinds");
    let (dir, url) = (dir.path(), server.url());

    // Two shared runs at once; a plain run is refused while they hold.
    let readers = vec![
        hold(dir, &url, &["--key", "cache", "--shared"], 1),
        hold(dir, &url, &["--shared", "--key", "cache"], 2),
    ];
    let plain = once(dir, &url, &["run", "--key", "cache", "--no-wait"]);
    assert_eq!(plain.status.code(), Some(75), "{plain:?}");
    assert_eq!(
        stderr(&plain),
        "redmutex: cache is held by 2 shared runs\n",
        "{plain:?}"
    );
    let st = lock_status(&once(dir, &url, &["status", "cache"]));
    let lines: Vec<&str> = st.lines().collect();
    assert_eq!(lines.len(), 4, "{st}");
    assert_eq!(lines[0], "free, last fence 0");
    assert_eq!(lines[1], "shared by 2:");
    release(dir, readers);

    // A plain run holds: a shared run is refused, and gets the plain run's fence after it.
    let writer = vec![hold(dir, &url, &["--key", "cache"], 1)];
    let shared = once(
        dir,
        &url,
        &["run", "--key", "cache", "--shared", "--no-wait"],
    );
    assert_eq!(shared.status.code(), Some(75), "{shared:?}");
    assert!(
        stderr(&shared).starts_with("redmutex: cache is held by "),
        "{shared:?}"
    );
    let st = lock_status(&once(dir, &url, &["status", "cache"]));
    assert!(
        st.starts_with("held by ") && st.lines().count() == 1,
        "{st}"
    );
    let fence = std::fs::read_to_string(dir.join("log")).unwrap();
    release(dir, writer);
    let after = redmutex(
        dir,
        &url,
        &[
            "run",
            "--key",
            "cache",
            "--shared",
            "--no-wait",
            "--",
            "sh",
            "-c",
        ],
    )
    .arg(r#"echo "started $REDMUTEX_FENCE""#)
    .output()
    .unwrap();
    assert_eq!(after.status.code(), Some(0), "{after:?}");
    assert_eq!(stdout(&after), fence);
}

#[test]
fn bad_permits_are_usage_errors() {
    let dir = TempDir::new("redmutex-cli-kinds");
    let url = "redis://127.0.0.1:1";
    for (n, want) in [
        ("0", "a semaphore must have 1 to 1024 permits, got 0"),
        ("1025", "a semaphore must have 1 to 1024 permits, got 1025"),
        ("-1", "is not a number of permits"),
        ("x", "is not a number of permits"),
    ] {
        let arg = format!("--permits={n}");
        let out = once(dir.path(), url, &["run", "--key", "k", &arg]);
        assert_eq!(out.status.code(), Some(64), "{n}: {out:?}");
        assert!(stderr(&out).contains(want), "{n}: {out:?}");
    }
    let out = once(
        dir.path(),
        url,
        &["run", "--key", "k", "--permits", "2", "--shared"],
    );
    assert_eq!(out.status.code(), Some(64), "{out:?}");
    assert!(stderr(&out).contains("cannot be used with"), "{out:?}");
}
