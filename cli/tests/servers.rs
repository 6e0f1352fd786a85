//! `redmutex` against servers other than the distribution's: a server too old for the
//! scripts (Redis 6.0) is refused in one line naming its version, with exit status 69, before
//! the command runs; `status` says which server and version each node runs.

use std::process::{Command, Output, Stdio};

use redmutex_tests::{RedisServer, TempDir, tool_server};

const BIN: &str = env!("CARGO_BIN_EXE_redmutex");

fn redmutex(dir: &TempDir, urls: &[String], args: &[&str]) -> Output {
    let mut cmd = Command::new(BIN);
    cmd.env_remove("REDMUTEX_URL")
        .current_dir(dir.path())
        .stdin(Stdio::null());
    for u in urls {
        cmd.arg("--url").arg(u);
    }
    // The command's own bound: the connect timeout, far below the test's patience.
    cmd.args(["--connect-timeout", "3s"]).args(args);
    cmd.output().unwrap()
}

#[test]
fn a_server_older_than_6_2_exits_69_with_one_line_naming_its_version() {
    let old = RedisServer::start_bin(&tool_server("redis-6.0"), &[]);
    let dir = TempDir::new("redmutex-cli-servers");
    let ran = dir.path().join("ran");
    let out = redmutex(
        &dir,
        &[old.url()],
        &["run", "--key", "old", "--", "touch", ran.to_str().unwrap()],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(69), "{out:?}");
    assert_eq!(
        stderr,
        format!(
            "redmutex: {} answered with an error: {} runs Redis 6.0.9; redmutex needs Redis 6.2 \
             or later, or Valkey\n",
            old.url(),
            old.url()
        ),
        "{out:?}"
    );
    assert!(!ran.exists(), "the command ran");

    let out = redmutex(&dir, &[old.url()], &["status", "old"]);
    assert_eq!(out.status.code(), Some(69), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("runs Redis 6.0.9"),
        "{out:?}"
    );
}

#[test]
fn status_says_what_each_node_runs() {
    let servers = [
        RedisServer::start(),
        RedisServer::start_bin(&tool_server("valkey-8.1"), &[]),
        RedisServer::start_bin(&tool_server("redis-8.2"), &[]),
    ];
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let dir = TempDir::new("redmutex-cli-servers");
    let out = redmutex(&dir, &urls, &["status", "mixed"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 4, "{stdout}");
    assert_eq!(lines[0], "free, last fence 0");
    assert!(
        lines[1].starts_with(&format!("server {}: ", urls[0])),
        "{stdout}"
    );
    assert_eq!(lines[2], format!("server {}: Valkey 8.1.8", urls[1]));
    assert_eq!(lines[3], format!("server {}: Redis 8.2.3", urls[2]));
}
