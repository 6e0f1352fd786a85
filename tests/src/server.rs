//! Real `redis-server` processes on free loopback ports.

use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::ops::{Deref, DerefMut};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use redis::IntoConnectionInfo;

use crate::TempDir;

/// Environment variable naming the `redis-server` binary to run. When unset, `redis-server` is
/// looked up on `PATH`.
pub const REDIS_SERVER_ENV: &str = "REDMUTEX_REDIS_SERVER";

/// The server binary the suites run: [`REDIS_SERVER_ENV`], else `redis-server` on `PATH`.
pub fn server_binary() -> PathBuf {
    std::env::var_os(REDIS_SERVER_ENV).map_or_else(|| "redis-server".into(), PathBuf::from)
}

/// The `(major, minor)` version of [`server_binary`], from its `--version` (`Redis server
/// v=6.2.14 …`, `Valkey server v=8.1.8 …`). Panics if it does not run or say.
pub fn server_version() -> (u32, u32) {
    static VERSION: std::sync::OnceLock<(u32, u32)> = std::sync::OnceLock::new();
    *VERSION.get_or_init(|| {
        let bin = server_binary();
        let out = Command::new(&bin)
            .arg("--version")
            .output()
            .unwrap_or_else(|e| panic!("cannot run {bin:?} --version: {e}"));
        let text = String::from_utf8_lossy(&out.stdout);
        text.split_whitespace()
            .find_map(|w| w.strip_prefix("v="))
            .and_then(|v| {
                let mut parts = v.split('.').map(|p| p.parse::<u32>().ok());
                Some((parts.next()??, parts.next()??))
            })
            .unwrap_or_else(|| panic!("{bin:?} --version says no version: {text}"))
    })
}

/// One of the servers `scripts/servers.sh` fetches (`redis-6.0`, `redis-6.2`, `redis-8.2`,
/// `valkey-8.1`), kept in the repository's `.tools/servers/`. Panics, saying how to fetch it,
/// when it is not there.
pub fn tool_server(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../.tools/servers")
        .join(name);
    ["redis-server", "valkey-server"]
        .iter()
        .map(|b| dir.join(b))
        .find(|b| b.is_file())
        .unwrap_or_else(|| {
            panic!(
                "no {name} server in {}: run scripts/servers.sh install (make deps does)",
                dir.display()
            )
        })
}

/// How long one start (or restart) may take before it is declared failed.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(10);
/// How many different ports a start tries when it loses the [`free_port`] race.
const MAX_PORT_ATTEMPTS: usize = 20;
/// Read/write timeout of the connections returned by [`RedisServer::conn`].
const CONN_TIMEOUT: Duration = Duration::from_secs(5);
/// The server's own log (`--logfile`), inside its temp dir.
const LOG_FILE: &str = "redis.log";
/// The server's stdout and stderr (config errors are printed there, before the log is open).
const STDIO_FILE: &str = "stdio.log";
/// Written by redis-server once its listening sockets are open.
const READY_LINE: &str = "Ready to accept connections";
/// Written by redis-server when `bind(2)` fails.
const ADDR_IN_USE_LINE: &str = "Address already in use";

/// Ask the OS for a free loopback TCP port: bind `127.0.0.1:0`, read the port, close.
///
/// There is a small race: the port is free when this returns, but another process may bind it
/// before the redis-server we start does. [`RedisServer::start`] detects that case (the server
/// logs "Address already in use" and exits) and retries with another port. The server's own log
/// is used to decide readiness, so a foreign process answering on the port is never mistaken
/// for ours. Never returns 6379, the default Redis port.
pub fn free_port() -> u16 {
    loop {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .unwrap_or_else(|e| panic!("cannot bind a loopback port: {e}"));
        let port = listener
            .local_addr()
            .unwrap_or_else(|e| panic!("cannot read the bound port: {e}"))
            .port();
        if port != 6379 {
            return port;
        }
    }
}

/// Poll `f` every few milliseconds until it returns `true` or `timeout` elapses; returns whether
/// it became `true`. `f` is always called at least once, and once more at the deadline.
pub fn wait_until(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if f() {
            return true;
        }
        let now = Instant::now();
        if now >= deadline {
            return false;
        }
        std::thread::sleep((deadline - now).min(Duration::from_millis(5)));
    }
}

/// What one poll of a starting server found.
enum Startup {
    /// Still booting.
    Starting,
    /// Our process logged that it is ready, and the port answers `PING`.
    Ready,
    /// The process exited because the port was taken.
    PortInUse,
    /// The process exited for another reason.
    Died,
}

/// One `redis-server` process, owned by the test; killed (by pid) and its temp dir removed on
/// drop, including when the test panics.
///
/// Every server is small and throw-away: it runs with `--save '' --appendonly no`, so it has no
/// persistence and a restart comes back empty. It listens on `127.0.0.1` only, on a port from
/// [`free_port`] (never 6379), and keeps its log and working files in its own [`TempDir`].
///
/// # Orphans
///
/// On Linux each server is started with `prctl(PR_SET_PDEATHSIG, SIGKILL)`, so it is killed by
/// the kernel if the test process dies without running `Drop` (SIGKILL, abort, `exit` from a
/// signal handler). The death signal fires when the *thread* that spawned the child exits, not
/// the process; to make that equal to "the process exits", all servers are spawned by one
/// private, never-ending helper thread. A `RedisServer` may therefore be started, moved and
/// dropped on any thread.
///
/// # Binary
///
/// `redis-server` is taken from `PATH`, or from the environment variable [`REDIS_SERVER_ENV`].
#[derive(Debug)]
pub struct RedisServer {
    port: u16,
    /// The binary; [`server_binary`] when `None`.
    bin: Option<PathBuf>,
    /// Extra command-line arguments, appended after the fixed ones (kept for `restart`).
    extra: Vec<String>,
    /// The `--requirepass` value among `extra`, used by [`RedisServer::conn`].
    password: Option<String>,
    /// Pid of the current (or, once killed, the most recent) process.
    pid: u32,
    /// Length of the log file when the current process was spawned: only what follows is its.
    log_offset: u64,
    /// The process; `None` once it has been reaped. Every reap happens under this lock, so a
    /// signal sent while holding it and after `try_wait` said "running" cannot hit a reused pid.
    child: Mutex<Option<Child>>,
    /// Dropped after `Drop::drop` has killed the process.
    dir: TempDir,
}

impl RedisServer {
    /// Start a redis-server on a free loopback port (never 6379) with
    /// `--bind 127.0.0.1 --port N --save '' --appendonly no --daemonize no --dir <temp dir>
    /// --logfile <temp dir>/redis.log`, and wait (at most 10 s) until it answers `PING`.
    ///
    /// Retries with another port if the chosen one was taken meanwhile. Panics, with the server
    /// log, if the server does not come up.
    pub fn start() -> RedisServer {
        Self::start_with(&[])
    }

    /// Like [`RedisServer::start`], with `extra` arguments appended to the command line, e.g.
    /// `["--requirepass", "x"]` or `["--maxmemory", "1mb"]`.
    ///
    /// If `extra` contains `--requirepass <pw>`, [`RedisServer::conn`] authenticates with `<pw>`
    /// (and [`RedisServer::url`] stays password-less).
    pub fn start_with(extra: &[&str]) -> RedisServer {
        launch(1, extra, None, &mut free_port)
            .pop()
            .expect("launch(1) returns one server")
    }

    /// Like [`RedisServer::start_with`], running `bin` rather than [`server_binary`] (one
    /// of the [`tool_server`]s, say).
    pub fn start_bin(bin: &Path, extra: &[&str]) -> RedisServer {
        launch(1, extra, Some(bin.to_owned()), &mut free_port)
            .pop()
            .expect("launch(1) returns one server")
    }

    /// Like [`RedisServer::start_with`], on a port that `port` picks (it is asked again when
    /// the port turns out to be taken).
    pub(crate) fn start_on(port: &mut dyn FnMut() -> u16, extra: &[&str]) -> RedisServer {
        launch(1, extra, None, port)
            .pop()
            .expect("launch(1) returns one server")
    }

    /// The TCP port the server listens on (on `127.0.0.1`). Stable across [`RedisServer::restart`].
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Pid of the current process (after [`RedisServer::kill`], of the most recent one).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// `redis://127.0.0.1:PORT` (no password, even with `--requirepass`).
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// `127.0.0.1:PORT`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The `--requirepass` password given to [`RedisServer::start_with`], if any.
    pub fn password(&self) -> Option<&str> {
        self.password.as_deref()
    }

    /// The server's scratch directory (its `--dir`, holding the log).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The server's log file followed by whatever it printed on stdout/stderr; for diagnostics.
    pub fn log(&self) -> String {
        format!(
            "--- {} ---\n{}\n--- stdout/stderr ---\n{}",
            LOG_FILE,
            read_lossy(&self.log_path()),
            read_lossy(&self.dir.path().join(STDIO_FILE)),
        )
    }

    /// A fresh raw `redis::Connection` for test assertions, with 5 s connect, read and write
    /// timeouts. Authenticates with the `--requirepass` password if one was given. Panics if the
    /// connection cannot be made (for example while the server is paused or killed).
    pub fn conn(&self) -> redis::Connection {
        let mut info = redis::ConnectionAddr::Tcp("127.0.0.1".to_owned(), self.port)
            .into_connection_info()
            .expect("a TCP address is a valid connection info");
        if let Some(pw) = &self.password {
            info = info.set_redis_settings(redis::RedisConnectionInfo::default().set_password(pw));
        }
        let client = redis::Client::open(info).expect("a TCP address is a valid client");
        let conn = client
            .get_connection_with_timeout(CONN_TIMEOUT)
            .unwrap_or_else(|e| panic!("cannot connect to redis-server at {}: {e}", self.addr()));
        conn.set_read_timeout(Some(CONN_TIMEOUT))
            .expect("set_read_timeout");
        conn.set_write_timeout(Some(CONN_TIMEOUT))
            .expect("set_write_timeout");
        conn
    }

    /// One field of `INFO section` (`blocked_clients` of `clients`, say), as the server
    /// wrote it; `None` when the server wrote no such field.
    pub fn info(&self, section: &str, field: &str) -> Option<String> {
        let info: String = redis::cmd("INFO")
            .arg(section)
            .query(&mut self.conn())
            .unwrap();
        info.lines()
            .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
            .map(|v| v.trim().to_owned())
    }

    /// `unix://` URL of the server's Unix socket; the server must have been started with
    /// `--unixsocket NAME` (a path relative to its directory, which keeps it short).
    pub fn unix_url(&self) -> String {
        let name = self
            .extra
            .iter()
            .position(|a| a == "--unixsocket")
            .and_then(|i| self.extra.get(i + 1))
            .expect("the server was started with --unixsocket");
        format!("unix://{}", self.dir.path().join(name).display())
    }

    /// Kill the process with `SIGKILL` and reap it. Idempotent; a no-op if it already exited.
    pub fn kill(&mut self) {
        kill_and_reap(&mut self.child());
    }

    /// Freeze the process with `SIGSTOP`: connections are still accepted by the kernel, but
    /// nothing is answered until [`RedisServer::resume`]. Panics if the server is not running.
    pub fn pause(&self) {
        self.signal(libc::SIGSTOP, "pause");
    }

    /// Continue a paused process with `SIGCONT`. Panics if the server is not running.
    pub fn resume(&self) {
        self.signal(libc::SIGCONT, "resume");
    }

    /// Kill the process (if running) and start a new one on the same port with the same
    /// arguments. The data is gone, since there is no persistence. Waits (at most 10 s) until
    /// the new process answers `PING`, retrying meanwhile if the port is still bound; panics
    /// with the log otherwise.
    pub fn restart(&mut self) {
        self.kill();
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        self.spawn();
        loop {
            match self.poll_start() {
                Startup::Ready => return,
                Startup::Starting => {}
                Startup::PortInUse if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(50));
                    self.spawn();
                    continue;
                }
                Startup::PortInUse => self.fail("port still in use after 10 s"),
                Startup::Died => self.fail("redis-server exited during restart"),
            }
            if Instant::now() >= deadline {
                self.fail("redis-server did not answer PING within 10 s of restart");
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Whether the process is alive (a paused process counts as running).
    pub fn is_running(&self) -> bool {
        running(&mut self.child()).is_some()
    }

    fn child(&self) -> MutexGuard<'_, Option<Child>> {
        self.child.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join(LOG_FILE)
    }

    fn signal(&self, sig: libc::c_int, what: &str) {
        let mut slot = self.child();
        let Some(child) = running(&mut slot) else {
            panic!("{what}: redis-server on port {} is not running", self.port);
        };
        let pid = child.id() as libc::pid_t;
        // SAFETY: plain syscall; `pid` is our unreaped child (checked under the lock).
        if unsafe { libc::kill(pid, sig) } != 0 {
            panic!("{what}: kill({pid}): {}", io::Error::last_os_error());
        }
    }

    /// Spawn a process on `self.port` (killing any previous one first).
    fn spawn(&mut self) {
        self.kill();
        let dir = self.dir.path();
        let log = dir.join(LOG_FILE);
        self.log_offset = std::fs::metadata(&log).map(|m| m.len()).unwrap_or(0);
        let stdio = OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join(STDIO_FILE))
            .unwrap_or_else(|e| panic!("cannot open {}: {e}", dir.join(STDIO_FILE).display()));
        let stderr = stdio.try_clone().expect("dup stdio log");
        let bin = self.bin.clone().unwrap_or_else(server_binary);
        let mut cmd = Command::new(&bin);
        cmd.arg("--port")
            .arg(self.port.to_string())
            .args(["--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .arg("--dir")
            .arg(dir)
            .arg("--logfile")
            .arg(&log)
            .args(&self.extra)
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(stdio)
            .stderr(stderr);
        let child = spawn_orphan_safe(cmd).unwrap_or_else(|e| {
            panic!(
                "cannot run {:?} (set {REDIS_SERVER_ENV} or put redis-server on PATH): {e}",
                bin
            )
        });
        self.pid = child.id();
        *self.child() = Some(child);
    }

    fn poll_start(&self) -> Startup {
        {
            let mut slot = self.child();
            if running(&mut slot).is_none() {
                // Exited: its last words are complete in the log (written with fclose per line).
                return if self.own_log_contains(ADDR_IN_USE_LINE) {
                    Startup::PortInUse
                } else {
                    Startup::Died
                };
            }
        }
        if self.own_log_contains(READY_LINE) && answers_ping(self.port) {
            Startup::Ready
        } else {
            Startup::Starting
        }
    }

    /// Whether a log line written by the current process contains `needle`.
    fn own_log_contains(&self, needle: &str) -> bool {
        let Ok(mut file) = File::open(self.log_path()) else {
            return false;
        };
        let mut bytes = Vec::new();
        if file.seek(SeekFrom::Start(self.log_offset)).is_err()
            || file.read_to_end(&mut bytes).is_err()
        {
            return false;
        }
        let prefix = format!("{}:", self.pid);
        String::from_utf8_lossy(&bytes)
            .lines()
            .any(|l| l.starts_with(&prefix) && l.contains(needle))
    }

    /// Kill the process and panic with `why` and the log.
    fn fail(&mut self, why: &str) -> ! {
        self.kill();
        panic!(
            "redis-server on port {} (pid {}): {why}\n{}",
            self.port,
            self.pid,
            self.log()
        );
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        // Never panics: a poisoned lock is recovered and every error ignored.
        kill_and_reap(&mut self.child());
        // `self.dir` is removed when the fields drop, after this.
    }
}

/// `Some(child)` if the child has not exited; reaps it (and sets `None`) if it has.
pub(crate) fn running(slot: &mut Option<Child>) -> Option<&mut Child> {
    match slot.as_mut().map(Child::try_wait) {
        Some(Ok(None)) => slot.as_mut(),
        _ => {
            *slot = None;
            None
        }
    }
}

pub(crate) fn kill_and_reap(slot: &mut Option<Child>) {
    if let Some(child) = running(slot) {
        // SAFETY: plain syscall on our unreaped child. SIGCONT first so a paused server is not
        // left stopped should the SIGKILL somehow fail.
        unsafe {
            libc::kill(child.id() as libc::pid_t, libc::SIGCONT);
        }
        let _ = child.kill();
        let _ = child.wait();
    }
    *slot = None;
}

/// Whether something on `127.0.0.1:port` answers an inline `PING` with a RESP reply (`+PONG`,
/// or an error such as `-NOAUTH` when a password is required).
pub(crate) fn answers_ping(port: u16) -> bool {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_millis(250)) else {
        return false;
    };
    let timeout = Some(Duration::from_millis(500));
    if s.set_read_timeout(timeout).is_err()
        || s.set_write_timeout(timeout).is_err()
        || s.write_all(b"PING\r\n").is_err()
    {
        return false;
    }
    let mut buf = [0u8; 64];
    matches!(s.read(&mut buf), Ok(n) if n > 0 && (buf[0] == b'+' || buf[0] == b'-'))
}

fn read_lossy(path: &Path) -> String {
    match std::fs::read(path) {
        Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        Err(e) => format!("<cannot read {}: {e}>", path.display()),
    }
}

/// Spawn `cmd` so that the child is SIGKILLed by the kernel when this process dies.
///
/// `PR_SET_PDEATHSIG` fires when the spawning *thread* exits (even if the process lives on), so
/// every spawn is delegated to one helper thread that lives as long as the process. The helper
/// never touches the children otherwise; waiting and signalling work from any thread.
#[cfg(target_os = "linux")]
pub(crate) fn spawn_orphan_safe(mut cmd: Command) -> io::Result<Child> {
    use std::os::unix::process::CommandExt;
    use std::sync::OnceLock;
    use std::sync::mpsc::{Sender, channel};

    type Request = (Command, Sender<io::Result<Child>>);
    static SPAWNER: OnceLock<Sender<Request>> = OnceLock::new();

    let parent = std::process::id() as libc::pid_t;
    // SAFETY: the hook runs in the forked child before exec and only makes async-signal-safe
    // syscalls (prctl, getppid); it allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
                return Err(io::Error::last_os_error());
            }
            // The parent may have died between fork and prctl: then nobody would kill us.
            if libc::getppid() != parent {
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
    let spawner = SPAWNER.get_or_init(|| {
        let (tx, rx) = channel::<Request>();
        std::thread::Builder::new()
            .name("redis-server-spawner".into())
            .spawn(move || {
                for (mut cmd, reply) in rx {
                    let _ = reply.send(cmd.spawn());
                }
            })
            .expect("cannot start the redis-server spawner thread");
        tx
    });
    let (tx, rx) = channel();
    spawner
        .send((cmd, tx))
        .map_err(|_| io::Error::other("redis-server spawner thread is gone"))?;
    rx.recv()
        .map_err(|_| io::Error::other("redis-server spawner thread is gone"))?
}

/// Spawn `cmd`. Without Linux's `PR_SET_PDEATHSIG`, orphans of a killed test process survive;
/// `Drop` still stops them whenever the process unwinds normally.
#[cfg(not(target_os = "linux"))]
pub(crate) fn spawn_orphan_safe(mut cmd: Command) -> io::Result<Child> {
    cmd.spawn()
}

/// Start `n` servers with `extra` arguments: all processes are spawned first, then awaited
/// together, so `n` servers take about as long as one.
fn launch(
    n: usize,
    extra: &[&str],
    bin: Option<PathBuf>,
    port: &mut dyn FnMut() -> u16,
) -> Vec<RedisServer> {
    let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
    let password = extra
        .iter()
        .position(|a| a == "--requirepass")
        .and_then(|i| extra.get(i + 1))
        .cloned();
    let mut used = HashSet::new();
    let mut fresh_port = move || loop {
        let port = port();
        if used.insert(port) {
            return port;
        }
    };

    struct Pending {
        server: RedisServer,
        deadline: Instant,
        attempts: usize,
        ready: bool,
    }
    let mut pending: Vec<Pending> = Vec::with_capacity(n);
    for _ in 0..n {
        let mut server = RedisServer {
            port: fresh_port(),
            bin: bin.clone(),
            extra: extra.clone(),
            password: password.clone(),
            pid: 0,
            log_offset: 0,
            child: Mutex::new(None),
            dir: TempDir::new("redmutex-redis"),
        };
        server.spawn();
        pending.push(Pending {
            server,
            deadline: Instant::now() + STARTUP_TIMEOUT,
            attempts: 1,
            ready: false,
        });
    }
    // A panic below drops `pending`, killing every process already spawned.
    loop {
        let mut all_ready = true;
        for p in pending.iter_mut().filter(|p| !p.ready) {
            match p.server.poll_start() {
                Startup::Ready => p.ready = true,
                Startup::Starting if Instant::now() >= p.deadline => p
                    .server
                    .fail("redis-server did not answer PING within 10 s"),
                Startup::Starting => all_ready = false,
                Startup::PortInUse if p.attempts < MAX_PORT_ATTEMPTS => {
                    p.server.port = fresh_port();
                    p.server.spawn();
                    p.attempts += 1;
                    p.deadline = Instant::now() + STARTUP_TIMEOUT;
                    all_ready = false;
                }
                Startup::PortInUse => p.server.fail("every port tried was already in use"),
                Startup::Died => p.server.fail("redis-server exited during startup"),
            }
        }
        if all_ready {
            return pending.into_iter().map(|p| p.server).collect();
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// `n` independent servers, for Redlock tests. Derefs to the `Vec`, so `servers[i]`,
/// `servers.len()` and `servers.iter()` work; all are stopped on drop.
#[derive(Debug)]
pub struct RedisServers(pub Vec<RedisServer>);

impl RedisServers {
    /// Start `n` servers, booting them concurrently (see [`RedisServer::start`]).
    pub fn start(n: usize) -> RedisServers {
        Self::start_with(n, &[])
    }

    /// Start `n` servers, each with `extra` arguments (see [`RedisServer::start_with`]).
    pub fn start_with(n: usize, extra: &[&str]) -> RedisServers {
        RedisServers(launch(n, extra, None, &mut free_port))
    }

    /// The servers' URLs, in order.
    pub fn urls(&self) -> Vec<String> {
        self.0.iter().map(RedisServer::url).collect()
    }
}

impl Deref for RedisServers {
    type Target = Vec<RedisServer>;

    fn deref(&self) -> &Vec<RedisServer> {
        &self.0
    }
}

impl DerefMut for RedisServers {
    fn deref_mut(&mut self) -> &mut Vec<RedisServer> {
        &mut self.0
    }
}
