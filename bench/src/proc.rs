//! Child processes that speak a line protocol on stdin/stdout.
//!
//! Rust children are this binary re-executed with a hidden subcommand; Python children are
//! `bench/python/locks.py child`. Both answer the same commands, so every implementation is
//! measured by the same orchestration code.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::Duration;

/// How long any single answer of a child may take before the run is declared broken.
pub const ANSWER_TIMEOUT: Duration = Duration::from_secs(60);

pub struct Proc {
    name: String,
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
}

impl Proc {
    /// Starts `cmd` with piped stdin/stdout (stderr is inherited, so a child's error shows).
    pub fn spawn(name: &str, mut cmd: Command) -> Result<Proc, String> {
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("cannot start {name}: {e}"))?;
        let stdout = child.stdout.take().ok_or("no stdout pipe")?;
        let stdin = child.stdin.take();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Ok(Proc {
            name: name.to_owned(),
            child,
            stdin,
            lines: rx,
        })
    }

    /// This binary with a hidden subcommand.
    pub fn this_exe(args: &[String]) -> Result<Command, String> {
        let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
        let mut cmd = Command::new(exe);
        cmd.args(args);
        Ok(cmd)
    }

    pub fn send(&mut self, line: &str) -> Result<(), String> {
        let stdin = self.stdin.as_mut().ok_or("stdin closed")?;
        writeln!(stdin, "{line}")
            .and_then(|()| stdin.flush())
            .map_err(|e| format!("{}: cannot write {line:?}: {e}", self.name))
    }

    /// The next line, which must start with `word`; returns the rest of it.
    pub fn expect(&mut self, word: &str) -> Result<String, String> {
        let line = self.next_line()?;
        match line.split_once(' ') {
            Some((w, rest)) if w == word => Ok(rest.to_owned()),
            None if line == word => Ok(String::new()),
            _ => Err(format!("{}: expected {word:?}, got {line:?}", self.name)),
        }
    }

    pub fn next_line(&mut self) -> Result<String, String> {
        match self.lines.recv_timeout(ANSWER_TIMEOUT) {
            Ok(line) => {
                if let Some(msg) = line.strip_prefix("error ") {
                    return Err(format!("{}: {msg}", self.name));
                }
                Ok(line)
            }
            Err(RecvTimeoutError::Timeout) => {
                Err(format!("{}: no answer in {ANSWER_TIMEOUT:?}", self.name))
            }
            Err(RecvTimeoutError::Disconnected) => {
                let status = self.child.wait().map(|s| s.to_string()).unwrap_or_default();
                Err(format!("{}: exited ({status})", self.name))
            }
        }
    }

    /// Closes stdin (the child's signal to exit) and waits for it.
    pub fn finish(mut self) -> Result<(), String> {
        drop(self.stdin.take());
        let status = self
            .child
            .wait()
            .map_err(|e| format!("{}: wait: {e}", self.name))?;
        if status.success() {
            Ok(())
        } else {
            Err(format!("{}: {status}", self.name))
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        // Only on error paths: a child that is still running is ours to end.
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Parses one `u64` field of a child's answer.
pub fn num(s: &str) -> Result<u64, String> {
    s.trim()
        .parse()
        .map_err(|_| format!("expected a number, got {s:?}"))
}
