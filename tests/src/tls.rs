//! A TLS-only `redis-server` and the certificates it needs, made by `openssl` for the test.
//!
//! If the `redis-server` on this machine was built without TLS, [`TlsServer::start`] prints a
//! "SKIPPED" note and returns `None`; set `REDMUTEX_REQUIRE_TLS=1` to make that a panic.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::server::spawn_orphan_safe;
use crate::{REDIS_SERVER_ENV, TempDir, free_port};

/// A certificate authority and, optionally, a server certificate it signed.
pub struct Pki {
    dir: TempDir,
}

impl Pki {
    /// Two CAs (`ca`, and `other-ca` that signed nothing) and a server certificate for
    /// `127.0.0.1` and `localhost` signed by `ca`. EC P-256 keys: fast to make. The
    /// certificate is good for clients too: the nodes of a TLS cluster present it to each
    /// other on the cluster bus, where Redis always asks for one.
    pub fn generate() -> Pki {
        let pki = Pki {
            dir: TempDir::new("redmutex-tls"),
        };
        for ca in ["ca", "other-ca"] {
            pki.openssl(&[
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-nodes",
                "-days",
                "2",
                "-subj",
                &format!("/CN=redmutex test {ca}"),
                "-addext",
                "basicConstraints=critical,CA:TRUE",
                "-addext",
                "keyUsage=critical,keyCertSign,cRLSign",
                "-keyout",
                &format!("{ca}.key"),
                "-out",
                &format!("{ca}.crt"),
            ]);
        }
        pki.openssl(&[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-subj",
            "/CN=localhost",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
        ]);
        fs::write(
            pki.path("server.ext"),
            "basicConstraints=critical,CA:FALSE\n\
             keyUsage=critical,digitalSignature\n\
             extendedKeyUsage=serverAuth,clientAuth\n\
             subjectAltName=IP:127.0.0.1,DNS:localhost\n",
        )
        .unwrap();
        pki.openssl(&[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            "server.ext",
            "-out",
            "server.crt",
        ]);
        pki
    }

    fn openssl(&self, args: &[&str]) {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(self.dir.path())
            .output()
            .unwrap_or_else(|e| panic!("cannot run openssl (needed by the TLS tests): {e}"));
        assert!(
            out.status.success(),
            "openssl {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// A file of the PKI: `ca.crt`, `other-ca.crt`, `server.crt`, `server.key`.
    pub fn path(&self, file: &str) -> PathBuf {
        self.dir.path().join(file)
    }

    /// The contents of [`Pki::path`].
    pub fn pem(&self, file: &str) -> Vec<u8> {
        fs::read(self.path(file)).unwrap()
    }
}

/// A redis-server listening only with TLS (`--port 0 --tls-port P`), killed on drop.
pub struct TlsServer {
    child: Child,
    port: u16,
    _dir: TempDir,
}

impl TlsServer {
    /// Starts one, or returns `None` (after printing why) when redis-server has no TLS.
    pub fn start(pki: &Pki) -> Option<TlsServer> {
        TlsServer::start_with(pki, &[])
    }

    /// Starts one with `extra` arguments (`--cluster-enabled yes`, …); `None` as
    /// [`TlsServer::start`]. The server is killed by the kernel if the test process dies.
    pub fn start_with(pki: &Pki, extra: &[String]) -> Option<TlsServer> {
        let bin = std::env::var(REDIS_SERVER_ENV).unwrap_or_else(|_| "redis-server".into());
        for _ in 0..20 {
            let dir = TempDir::new("redmutex-tls-server");
            let port = free_port();
            let log = dir.path().join("redis.log");
            let arg = |p: PathBuf| p.to_str().unwrap().to_owned();
            let mut cmd = Command::new(&bin);
            cmd.args(["--bind", "127.0.0.1", "--port", "0", "--tls-port"])
                .arg(port.to_string())
                .args(["--tls-cert-file", &arg(pki.path("server.crt"))])
                .args(["--tls-key-file", &arg(pki.path("server.key"))])
                .args(["--tls-ca-cert-file", &arg(pki.path("ca.crt"))])
                .args(["--tls-auth-clients", "no"])
                .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
                .args(["--dir", &arg(dir.path().to_owned())])
                .args(["--logfile", &arg(log.clone())])
                .args(extra)
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            let child = spawn_orphan_safe(cmd).unwrap_or_else(|e| panic!("cannot run {bin}: {e}"));
            let mut server = TlsServer {
                child,
                port,
                _dir: dir,
            };
            match server.wait_ready(&log) {
                Ok(()) => return Some(server),
                Err(text) if text.contains("Address already in use") => continue,
                Err(text) if lacks_tls(&text) => {
                    let note = format!(
                        "SKIPPED: {bin} was built without TLS support, so the TLS tests did \
                         not run:\n{text}"
                    );
                    if std::env::var_os("REDMUTEX_REQUIRE_TLS").is_some() {
                        panic!("{note}");
                    }
                    eprintln!("{note}");
                    return None;
                }
                Err(text) => panic!("the TLS redis-server did not start:\n{text}"),
            }
        }
        panic!("no free port for the TLS redis-server after 20 tries");
    }

    /// Waits for the server's "ready" log line; on exit, returns everything it said.
    fn wait_ready(&mut self, log: &Path) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let text = fs::read_to_string(log).unwrap_or_default();
            if text.contains("Ready to accept connections") {
                return Ok(());
            }
            if let Some(status) = self.child.try_wait().unwrap() {
                let out = self.child.wait_with_output_lossy();
                return Err(format!("{status}\n{text}{out}"));
            }
            assert!(
                Instant::now() < deadline,
                "the TLS redis-server is not ready after 10 s:\n{text}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The TLS port, on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `rediss://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("rediss://127.0.0.1:{}", self.port)
    }

    /// Pid of the process.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

/// What a redis-server built without TLS says about `--tls-port`: an unknown directive (up to
/// 7.0, where the TLS settings exist only in TLS builds) or a missing TLS connection type
/// (7.2 and later, where TLS may be a module that is not loaded).
fn lacks_tls(text: &str) -> bool {
    text.contains("Bad directive") && text.contains("tls") || text.contains("Missing implement")
}

trait OutputLossy {
    fn wait_with_output_lossy(&mut self) -> String;
}

impl OutputLossy for Child {
    fn wait_with_output_lossy(&mut self) -> String {
        use std::io::Read;
        let mut s = String::new();
        if let Some(out) = self.stdout.as_mut() {
            let _ = out.read_to_string(&mut s);
        }
        if let Some(err) = self.stderr.as_mut() {
            let _ = err.read_to_string(&mut s);
        }
        s
    }
}

impl Drop for TlsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A PKI and a TLS-only server using it, or `None` when redis-server has no TLS.
pub fn setup() -> Option<(Pki, TlsServer)> {
    let pki = Pki::generate();
    let server = TlsServer::start(&pki)?;
    Some((pki, server))
}
