//! `redmutex run`: take the lock, run the command, watch the lock, release it.

use std::ffi::OsString;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, ExitStatus};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use redmutex::{Client, ErrorKind, MutexOptions, TryLockError};

use crate::duration;
use crate::hold::{self, Held, Kind};
use crate::report::{self, EXIT_CANNOT_EXEC, EXIT_NOT_FOUND, fail};
use crate::sys::{self, Events};

/// What to do with the command when the lock is lost while it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OnLost {
    /// SIGTERM, then SIGKILL after --kill-after; exit with the lost code.
    Kill,
    /// Print a warning and let the command run on; exit with its status.
    Ignore,
}

/// Everything `run` was asked to do.
pub struct Plan {
    pub key: String,
    /// The lock, a semaphore's permit (`--permits`) or a read hold (`--shared`).
    pub kind: Kind,
    pub ttl: Duration,
    /// `None`: wait as long as it takes.
    pub wait: Option<Duration>,
    pub max_hold: Option<Duration>,
    /// `--min-replicas`: replicas and how long to wait for them.
    pub min_replicas: Option<(u32, Duration)>,
    pub on_lost: OnLost,
    pub kill_after: Duration,
    pub conflict_exit_code: i32,
    pub lost_exit_code: i32,
    pub command: Vec<OsString>,
}

/// Runs the plan and returns the exit code.
pub fn run(events: &Events, client: &Client, plan: &Plan) -> i32 {
    let opts = MutexOptions::default()
        .with_ttl(plan.ttl)
        .with_max_hold(plan.max_hold)
        .with_min_replicas(plan.min_replicas);
    let deadline = plan.wait.map(|w| Instant::now() + w);
    // A signal ends every wait of the lock call at once, a round to a server that does not
    // answer included (the self-pipe wakes it); a wake-up for anything else is emptied, or it
    // would end every wait.
    let mut stop = || {
        if sys::pending_signal().is_some() {
            return true;
        }
        events.drain();
        sys::pending_signal().is_some()
    };
    let take = || hold::take(client, &plan.key, plan.kind, opts, deadline, &mut stop);
    let taken = match events.drainer() {
        Ok(drain) => {
            let go_on = move || {
                if sys::pending_signal().is_some() {
                    return false;
                }
                drain();
                sys::pending_signal().is_none()
            };
            redmutex::wake_on_checked(events.fd(), go_on, take)
        }
        // No descriptor left to duplicate: the waits for a release still end at once.
        Err(_) => redmutex::wake_on(events.fd(), take),
    };
    let taken = taken.unwrap_or_else(|e| Err(e.into()));
    let guard = match taken {
        Ok(g) => g,
        Err(TryLockError::WouldBlock) => {
            fail(hold::conflict_line(client, &plan.key, plan.kind, plan.wait));
            return plan.conflict_exit_code;
        }
        Err(TryLockError::Error(e)) if e.kind() == ErrorKind::Interrupted => {
            return interrupted(&plan.key);
        }
        Err(TryLockError::Error(e)) => {
            fail(report::describe(&e));
            return report::exit_code(&e);
        }
        Err(e) => {
            fail(&e);
            return report::EXIT_UNAVAILABLE;
        }
    };
    if sys::pending_signal().is_some() {
        let _ = guard.unlock();
        return interrupted(&plan.key);
    }

    let lost = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&lost);
    guard.on_lost(move || {
        flag.store(true, Ordering::SeqCst);
        sys::wake();
    });

    // Outside a terminal the command leads its own process group, so that losing the lock
    // stops its children too; in a terminal it stays in ours, so it can read the terminal.
    let own_group = !sys::in_terminal_foreground();
    let mut cmd = Command::new(&plan.command[0]);
    cmd.args(&plan.command[1..])
        .env("REDMUTEX_FENCE", guard.fence().to_string());
    events.prepare(&mut cmd);
    if own_group {
        cmd.process_group(0);
    }
    if plan.on_lost == OnLost::Kill {
        sys::term_with_parent(&mut cmd);
    }
    let child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            let _ = guard.unlock();
            fail(format_args!(
                "cannot run {}: {e}",
                report::one_line(&plan.command[0].to_string_lossy())
            ));
            return if e.kind() == std::io::ErrorKind::NotFound {
                EXIT_NOT_FOUND
            } else {
                EXIT_CANNOT_EXEC
            };
        }
    };
    let pid = child.id() as i32;
    let target = if own_group { -pid } else { pid };
    let watch = Watch {
        plan,
        guard: &guard,
        lost: &lost,
        events,
        target,
        own_group,
    };
    let (status, lost_while_running) = watch.until_exit(child);
    let code = status_code(status);
    finish(plan, guard, code, lost_while_running)
}

/// Supervises the running command.
struct Watch<'a> {
    plan: &'a Plan,
    guard: &'a Held,
    lost: &'a AtomicBool,
    events: &'a Events,
    /// Where signals go: the command's pid, or minus its process group.
    target: i32,
    own_group: bool,
}

impl Watch<'_> {
    /// Forwards signals and acts on a lost lock until the command exits; returns its status
    /// and whether the lock was lost meanwhile.
    fn until_exit(&self, mut child: Child) -> (ExitStatus, bool) {
        let key = report::one_line(&self.plan.key);
        let mut lost_at: Option<Instant> = None;
        let mut killed = false;
        loop {
            match child.try_wait() {
                Ok(Some(status)) => return (status, lost_at.is_some()),
                Ok(None) => {}
                Err(e) => {
                    // Not expected for our own child; wait the blocking way rather than spin.
                    fail(format_args!("cannot watch the command: {e}"));
                    let status = child
                        .wait()
                        .unwrap_or_else(|_| ExitStatus::from_raw(1 << 8));
                    return (status, lost_at.is_some());
                }
            }
            // The command exists and is not reaped: its pid cannot have been reused.
            let signals = sys::take_signals();
            let forward = if self.own_group {
                signals.all
            } else {
                signals.sent
            };
            for sig in sys::each(forward) {
                sys::send(self.target, sig);
            }
            let now = Instant::now();
            if lost_at.is_none() && (self.lost.load(Ordering::SeqCst) || !self.guard.is_held()) {
                lost_at = Some(now);
                let why = match self.guard.check() {
                    Err(e) => report::one_line(e.message()),
                    Ok(()) => "renewal failed".to_owned(),
                };
                match self.plan.on_lost {
                    OnLost::Kill => {
                        fail(format_args!(
                            "lost the lock {key}: {why}; sending SIGTERM to the command"
                        ));
                        sys::send(self.target, libc::SIGTERM);
                    }
                    OnLost::Ignore => fail(format_args!(
                        "lost the lock {key}: {why}; the command runs on (--on-lost=ignore)"
                    )),
                }
            }
            let mut timeout = None;
            match lost_at {
                Some(t) if self.plan.on_lost == OnLost::Kill && !killed => {
                    let kill_at = t + self.plan.kill_after;
                    if now >= kill_at {
                        fail(format_args!(
                            "the command ignored SIGTERM for {}; sending SIGKILL",
                            duration::show(self.plan.kill_after)
                        ));
                        sys::send(self.target, libc::SIGKILL);
                        killed = true;
                    } else {
                        timeout = Some(kill_at - now);
                    }
                }
                Some(_) => {}
                // The renew thread reports a loss; look again at the validity deadline anyway.
                None => timeout = Some(self.guard.valid_until().saturating_duration_since(now)),
            }
            self.events.wait(timeout);
        }
    }
}

/// Releases the lock after the command exited with `code`, and picks the exit code.
fn finish(plan: &Plan, guard: Held, code: i32, lost_while_running: bool) -> i32 {
    let key = report::one_line(&plan.key);
    let kill = plan.on_lost == OnLost::Kill;
    if lost_while_running {
        drop(guard); // compare-and-delete: leaves a new owner's lock alone
        return if kill { plan.lost_exit_code } else { code };
    }
    match guard.unlock() {
        Ok(_) => code,
        // Lost without the renew thread noticing yet: the command ran partly unprotected.
        Err(e) if e.kind() == ErrorKind::Lost => {
            let why = report::describe(&e);
            if kill {
                fail(format_args!(
                    "lost the lock {key} before the command finished: {why}"
                ));
                plan.lost_exit_code
            } else {
                fail(format_args!(
                    "lost the lock {key} before the command finished (--on-lost=ignore): {why}"
                ));
                code
            }
        }
        // The command did its work under the lock; the lease ends by itself.
        Err(e) => {
            fail(format_args!(
                "could not release {key}, it expires within {}: {}",
                duration::show(plan.ttl),
                report::describe(&e)
            ));
            code
        }
    }
}

/// The exit code of a command: its status, or 128 + the signal that killed it (as shells do).
fn status_code(status: ExitStatus) -> i32 {
    status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(1)
}

fn interrupted(key: &str) -> i32 {
    let sig = sys::pending_signal().unwrap_or(libc::SIGINT);
    fail(format_args!(
        "interrupted by {} while waiting for {}; the command was not run",
        signal_name(sig),
        report::one_line(key)
    ));
    128 + sig
}

fn signal_name(sig: i32) -> String {
    match sig {
        libc::SIGINT => "SIGINT".into(),
        libc::SIGTERM => "SIGTERM".into(),
        libc::SIGHUP => "SIGHUP".into(),
        n => format!("signal {n}"),
    }
}
