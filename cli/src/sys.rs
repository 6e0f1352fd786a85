//! What `run` needs from the OS, and the only unsafe code of the binary: a signal thread that
//! wakes a self-pipe, a bounded wait on that pipe, signalling the command, and whether we run
//! in a terminal's foreground.
//!
//! Signals are blocked in every thread and taken by one thread with `sigwaitinfo`, rather
//! than by handlers: no handler can interrupt a Redis read (sockets with timeouts are not
//! restarted after a handler), and nothing has to be async-signal-safe. The command gets
//! back the signal mask redmutex started with ([`Events::prepare`]).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::time::Duration;

/// The signals that are forwarded to the command (and that interrupt a wait for the lock).
pub const FORWARDED: [i32; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// The self-pipe's write end, for the signal thread and the on-lost callback (-1: none).
static WAKE_FD: AtomicI32 = AtomicI32::new(-1);
/// Bit `n` set: signal `n` arrived since the last [`take_signals`].
static RECEIVED: AtomicU64 = AtomicU64::new(0);
/// Bit `n` set: signal `n` arrived from a process (`kill`), not from the terminal driver.
static SENT: AtomicU64 = AtomicU64::new(0);

/// Signals that arrived, as bit masks (bit `n` is signal `n`).
#[derive(Debug, Clone, Copy, Default)]
pub struct Signals {
    /// Every signal that arrived.
    pub all: u64,
    /// Those sent by a process; a terminal's Ctrl-C reached our whole process group.
    pub sent: u64,
}

/// Signal numbers in a mask, lowest first.
pub fn each(mask: u64) -> impl Iterator<Item = i32> {
    (1..64).filter(move |n| mask & (1u64 << n) != 0)
}

/// The first forwarded signal that arrived so far, without consuming it.
pub fn pending_signal() -> Option<i32> {
    each(RECEIVED.load(Ordering::SeqCst)).next()
}

/// Takes the signals that arrived since the last call.
pub fn take_signals() -> Signals {
    Signals {
        all: RECEIVED.swap(0, Ordering::SeqCst),
        sent: SENT.swap(0, Ordering::SeqCst),
    }
}

/// Wakes [`Events::wait`]; callable from any thread.
pub fn wake() {
    let fd = WAKE_FD.load(Ordering::SeqCst);
    if fd >= 0 {
        // SAFETY: write(2) of one byte from a static buffer to our own non-blocking pipe,
        // which lives as long as the process. A full pipe (EAGAIN) already means a wake-up.
        unsafe {
            libc::write(fd, b"x".as_ptr().cast(), 1);
        }
    }
}

/// The self-pipe: waiting on it wakes for a signal, the command's exit or a lost lock,
/// without polling.
pub struct Events {
    read: OwnedFd,
    /// The signal mask redmutex started with, for the command.
    original_mask: libc::sigset_t,
}

impl Events {
    /// Blocks [`FORWARDED`] and `SIGCHLD` and starts the thread that takes them. Call once,
    /// before any other thread exists, so that every later thread inherits the mask. A signal
    /// that was ignored when redmutex started (`nohup`, `cmd &`) stays ignored, so the
    /// command inherits that, as it would without redmutex.
    pub fn install() -> io::Result<Events> {
        let mut fds = [0; 2];
        // SAFETY: pipe(2) fills the two descriptors, which we own from here on.
        if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: both descriptors were just created and are owned by nobody else.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        for fd in [&read, &write] {
            set_flags(fd.as_raw_fd())?;
        }
        // The write end stays open until the process exits.
        WAKE_FD.store(
            std::mem::ManuallyDrop::new(write).as_raw_fd(),
            Ordering::SeqCst,
        );

        // SAFETY: sigset and sigaction calls on local, initialized structs.
        let (set, original_mask) = unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            for sig in FORWARDED {
                let mut old: libc::sigaction = std::mem::zeroed();
                if libc::sigaction(sig, std::ptr::null(), &mut old) != 0 {
                    return Err(io::Error::last_os_error());
                }
                if old.sa_sigaction != libc::SIG_IGN {
                    libc::sigaddset(&mut set, sig);
                }
            }
            libc::sigaddset(&mut set, libc::SIGCHLD);
            let mut original: libc::sigset_t = std::mem::zeroed();
            let rc = libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut original);
            if rc != 0 {
                return Err(io::Error::from_raw_os_error(rc));
            }
            (set, original)
        };
        std::thread::Builder::new()
            .name("redmutex-signals".into())
            .spawn(move || {
                loop {
                    if let Some((sig, from_terminal)) = next_signal(&set) {
                        if sig != libc::SIGCHLD && (1..64).contains(&sig) {
                            RECEIVED.fetch_or(1 << sig, Ordering::SeqCst);
                            if !from_terminal {
                                SENT.fetch_or(1 << sig, Ordering::SeqCst);
                            }
                        }
                        wake();
                    }
                }
            })?;
        Ok(Events {
            read,
            original_mask,
        })
    }

    /// Gives the command the signal mask redmutex started with: a child inherits the mask,
    /// and one that blocks SIGTERM could not be stopped.
    pub fn prepare(&self, cmd: &mut Command) {
        let mask = self.original_mask;
        // SAFETY: runs in the forked child before exec; pthread_sigmask is async-signal-safe
        // and the closure allocates nothing.
        unsafe {
            cmd.pre_exec(move || {
                let rc = libc::pthread_sigmask(libc::SIG_SETMASK, &mask, std::ptr::null_mut());
                if rc != 0 {
                    return Err(io::Error::from_raw_os_error(rc));
                }
                Ok(())
            });
        }
    }

    /// The self-pipe's read end: readable once something was signalled, until emptied. A
    /// wait for the lock ends at once when it becomes readable (`redmutex::wake_on`).
    pub fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        std::os::fd::AsFd::as_fd(&self.read)
    }

    /// Empties the pipe without waiting.
    pub fn drain(&self) {
        self.wait(Some(Duration::ZERO));
    }

    /// Empties a duplicate of the pipe's read end, without waiting: for a check that must own
    /// what it uses (`redmutex::wake_on_checked`).
    pub fn drainer(&self) -> io::Result<impl Fn() + 'static> {
        let read = self.read.try_clone()?;
        Ok(move || drain_fd(read.as_raw_fd()))
    }

    /// Blocks until something was signalled or `timeout` (`None`: no bound) passed, then
    /// empties the pipe. The caller re-checks every condition afterwards.
    pub fn wait(&self, timeout: Option<Duration>) {
        let ms = timeout.map_or(-1, |d| {
            // Round up so that a wait of a few microseconds does not spin.
            i32::try_from(d.as_nanos().div_ceil(1_000_000)).unwrap_or(i32::MAX)
        });
        let mut pfd = libc::pollfd {
            fd: self.read.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: poll(2) on one valid pollfd.
        unsafe {
            libc::poll(&mut pfd, 1, ms);
        }
        drain_fd(self.read.as_raw_fd());
    }
}

/// Reads what the non-blocking pipe `fd` holds.
fn drain_fd(fd: i32) {
    let mut buf = [0u8; 64];
    loop {
        // SAFETY: read(2) into a local buffer of its size; the pipe is non-blocking.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        if n < buf.len() as isize {
            break;
        }
    }
}

fn set_flags(fd: i32) -> io::Result<()> {
    // SAFETY: fcntl(2) on a descriptor we own.
    unsafe {
        let fl = libc::fcntl(fd, libc::F_GETFL);
        let fd_fl = libc::fcntl(fd, libc::F_GETFD);
        if fl < 0
            || fd_fl < 0
            || libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK) != 0
            || libc::fcntl(fd, libc::F_SETFD, fd_fl | libc::FD_CLOEXEC) != 0
        {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The next signal of `set`, and whether the kernel (the terminal driver: Ctrl-C, hang-up)
/// sent it, to our whole foreground process group.
#[cfg(any(target_os = "linux", target_os = "android"))]
fn next_signal(set: &libc::sigset_t) -> Option<(i32, bool)> {
    // SAFETY: sigwaitinfo(2) on signals this thread blocks, filling a local siginfo.
    unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        let sig = libc::sigwaitinfo(set, &mut info);
        (sig > 0).then_some((sig, info.si_code == libc::SI_KERNEL))
    }
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn next_signal(set: &libc::sigset_t) -> Option<(i32, bool)> {
    let mut sig = 0;
    // SAFETY: sigwait(3) on signals this thread blocks.
    (unsafe { libc::sigwait(set, &mut sig) } == 0).then_some((sig, false))
}

/// Sends `sig` to `target` (a pid, or minus a process group id).
pub fn send(target: i32, sig: i32) {
    // SAFETY: kill(2). The caller signals only a child it has not reaped, so the pid (and the
    // process group it leads) cannot have been reused.
    unsafe {
        libc::kill(target, sig);
    }
}

/// Whether redmutex runs in the foreground of a terminal (one of stdin, stdout, stderr is a
/// terminal whose foreground process group is ours): then the command stays in our process
/// group, so that it can read the terminal and Ctrl-C and Ctrl-Z reach it directly.
pub fn in_terminal_foreground() -> bool {
    // SAFETY: isatty, tcgetpgrp and getpgrp only read process state.
    unsafe {
        let ours = libc::getpgrp();
        (0..3).any(|fd| libc::isatty(fd) == 1 && libc::tcgetpgrp(fd) == ours)
    }
}

/// Makes the command die (`SIGTERM`) if redmutex dies first, since nobody would renew its
/// lock any more (Linux only).
#[cfg(any(target_os = "linux", target_os = "android"))]
pub fn term_with_parent(cmd: &mut Command) {
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: runs in the forked child before exec and makes only async-signal-safe syscalls
    // (prctl, getppid); it allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM as libc::c_ulong) != 0 {
                return Err(io::Error::last_os_error());
            }
            // The parent may have died before prctl: then nobody would tell us.
            if libc::getppid() != parent {
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub fn term_with_parent(_: &mut Command) {}
