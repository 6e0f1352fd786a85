//! `redmutex list` and `redmutex unlock --force` against one node, three Redlock nodes and
//! a Redis Cluster: a `run` killed while holding a lock with a 1 h lease is listed with its
//! waiter, `unlock` refuses without `--force`, and with it the hold is removed, the waiter
//! runs at once with a larger fence, and nothing is listed any more.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use redmutex_tests::cluster::RedisCluster;
use redmutex_tests::{RedisServer, RedisServers, TempDir, wait_until};

const BIN: &str = env!("CARGO_BIN_EXE_redmutex");
/// The bound on any single wait in these tests; far above what a healthy run needs.
const BOUND: Duration = Duration::from_secs(10);

fn redmutex(dir: &Path, urls: &[String], args: &[&str]) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.env_remove("REDMUTEX_URL")
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for u in urls {
        cmd.arg("--url").arg(u);
    }
    cmd.args(args);
    cmd
}

/// Runs to completion, bounded: the exit code, stdout and stderr.
fn finish(mut child: Child) -> (i32, String, String) {
    let mut status = None;
    assert!(
        wait_until(BOUND, || {
            status = child.try_wait().unwrap();
            status.is_some()
        }),
        "redmutex did not exit within {BOUND:?}"
    );
    let out = child.wait_with_output().unwrap();
    (
        status.unwrap().code().expect("exited"),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn once(dir: &Path, urls: &[String], args: &[&str]) -> (i32, String, String) {
    finish(redmutex(dir, urls, args).spawn().unwrap())
}

fn lines_of(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// The number after `word ` in `line`.
fn number_after(line: &str, word: &str) -> u64 {
    line.split(&format!("{word} "))
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no number after {word:?} in {line:?}"))
}

fn breaks_a_stuck_lock(urls: &[String], nodes: usize) {
    let dir = TempDir::new("redmutex-operate");
    let dir = dir.path();
    // A holder with a 1 h lease, killed without a chance to release.
    let mut stuck = redmutex(
        dir,
        urls,
        &[
            "run",
            "--key",
            "op:stuck",
            "--ttl",
            "1h",
            "--",
            "sh",
            "-c",
            "echo \"started $REDMUTEX_FENCE\" >> log; while [ ! -e go ]; do sleep 0.02; done",
        ],
    )
    .spawn()
    .unwrap();
    let log = dir.join("log");
    assert!(
        wait_until(BOUND, || !lines_of(&log).is_empty()),
        "never started"
    );
    let stuck_fence = number_after(&lines_of(&log)[0], "started");
    let waiter = redmutex(
        dir,
        urls,
        &[
            "run",
            "--key",
            "op:stuck",
            "--wait",
            "1m",
            "--",
            "sh",
            "-c",
            "echo \"got $REDMUTEX_FENCE\" >> log",
        ],
    )
    .spawn()
    .unwrap();
    assert!(
        wait_until(BOUND, || {
            let (_, out, _) = once(dir, urls, &["list", "--json", "op:*"]);
            out.contains("\"waiters\":1")
        }),
        "the waiter was never listed"
    );
    stuck.kill().unwrap();
    stuck.wait().unwrap();
    std::fs::write(dir.join("go"), "").unwrap();

    let (code, out, err) = once(dir, urls, &["list", "op:*"]);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out}");
    let header: Vec<&str> = lines[0].split_whitespace().collect();
    assert_eq!(header, ["NAME", "KIND", "FENCE", "WAITERS", "HOLDERS"]);
    let row: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!(
        [row[0], row[1], row[3]],
        ["op:stuck", "exclusive", "1"],
        "{out}"
    );
    // The last fence is the largest counter among the nodes: with several, a node whose grant
    // the round did not wait for may have counted on to its own clock's time.
    let listed: u64 = row[2].parse().unwrap();
    match nodes {
        1 => assert_eq!(listed, stuck_fence, "{out}"),
        _ => assert!(listed >= stuck_fence, "{out}"),
    }
    assert!(row[5].starts_with("(59m"), "a 1 h lease: {out}");

    let (code, out, err) = once(dir, urls, &["list", "--json", "op:stuck"]);
    assert_eq!(code, 0, "{err}");
    let object: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(object["name"], "op:stuck");
    assert_eq!(object["kind"], "exclusive");
    assert_eq!(object["fence"], listed);
    assert_eq!(object["waiters"], 1);
    assert_eq!(object["nodes"], nodes);
    assert_eq!(object["disagree"], false);
    let hold = &object["holds"][0];
    assert_eq!(
        (&hold["kind"], &hold["nodes"]),
        (&"exclusive".into(), &nodes.into())
    );
    assert!(hold["ttl_ms"].as_u64().unwrap() > 3_000_000, "{hold}");
    assert!(
        hold["holder"]
            .as_str()
            .unwrap()
            .starts_with(hold["owner"].as_str().unwrap()),
        "{hold}"
    );

    // `status --json` says the same of it, on every topology.
    let (code, out, err) = once(dir, urls, &["status", "--json", "op:stuck"]);
    assert_eq!((code, out.lines().count()), (0, 1), "{out}{err}");
    let status: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(
        (&status["name"], &status["held"], &status["holder"]),
        (&"op:stuck".into(), &true.into(), &hold["holder"]),
        "{status}"
    );
    assert_eq!(status["owner"], hold["owner"], "{status}");
    assert_eq!(status["fence"], listed, "{status}");
    assert!(status["ttl_ms"].as_u64().unwrap() > 3_000_000, "{status}");
    assert_eq!(
        status["servers"].as_array().unwrap().len(),
        nodes,
        "{status}"
    );

    let (code, _, err) = once(dir, urls, &["unlock", "op:stuck"]);
    assert_eq!(code, 64, "{err}");
    assert!(
        err.starts_with("redmutex: not removing the holds of op:stuck: add --force"),
        "{err}"
    );
    assert!(lines_of(&log).len() == 1, "the waiter ran without --force");

    let (code, out, err) = once(dir, urls, &["unlock", "--force", "op:stuck"]);
    assert_eq!(code, 0, "{err}");
    let of = if nodes > 1 {
        format!(" on {nodes} of {nodes} nodes")
    } else {
        String::new()
    };
    assert!(out.starts_with("removed the exclusive hold of "), "{out}");
    assert!(
        out.contains(&format!(" on op:stuck{of}, which had 59m")),
        "{out}"
    );
    // The waiter runs at once (the lease it waited behind had an hour left).
    assert_eq!(finish(waiter).0, 0);
    let got = number_after(&lines_of(&log)[1], "got");
    assert!(
        got > stuck_fence,
        "fences keep growing: {got} after {stuck_fence}"
    );

    assert_eq!(
        once(dir, urls, &["list", "op:*"]).1,
        "no lock matches op:*\n"
    );
    assert_eq!(
        once(dir, urls, &["unlock", "--force", "op:stuck"]).1,
        "op:stuck was not held: nothing removed\n"
    );
    let (code, out, _) = once(dir, urls, &["unlock", "--force", "--json", "op:stuck"]);
    assert_eq!(
        (code, out.as_str()),
        (0, "{\"name\":\"op:stuck\",\"removed\":[]}\n")
    );
}

#[test]
fn one_node() {
    let server = RedisServer::start();
    breaks_a_stuck_lock(&[server.url()], 1);
    let dir = TempDir::new("redmutex-operate");
    let (code, _, err) = once(dir.path(), &[server.url()], &["list", ""]);
    assert_eq!(code, 64, "{err}");
    assert!(
        err.starts_with("redmutex: ") && err.contains("pattern"),
        "{err}"
    );
}

#[test]
fn three_redlock_nodes() {
    let servers = RedisServers::start(3);
    breaks_a_stuck_lock(&servers.urls(), 3);
}

#[test]
fn a_cluster() {
    let cluster = RedisCluster::start(3, 0);
    breaks_a_stuck_lock(&[cluster.url()], 1);
}
