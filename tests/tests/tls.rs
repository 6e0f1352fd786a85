//! TLS (issue 8 §3): `rediss://` against a redis-server that speaks only TLS, with a CA and a
//! server certificate made by `openssl` for the test. Certificates are checked unless the URL
//! says `#insecure`; a wrong CA fails with a clear error.
//!
//! If the `redis-server` on this machine was built without TLS, every test here prints a
//! "SKIPPED" note and returns; set `REDMUTEX_REQUIRE_TLS=1` to make that a failure instead.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use redmutex::{Client, ErrorKind, TryLockError};
use redmutex_tests::{REDIS_SERVER_ENV, TempDir, free_port};

/// A certificate authority and, optionally, a server certificate it signed.
struct Pki {
    dir: TempDir,
}

impl Pki {
    /// Two CAs (`ca`, and `other-ca` that signed nothing) and a server certificate for
    /// `127.0.0.1` and `localhost` signed by `ca`. EC P-256 keys: fast to make.
    fn new() -> Pki {
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
             extendedKeyUsage=serverAuth\n\
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

    fn path(&self, file: &str) -> PathBuf {
        self.dir.path().join(file)
    }

    fn pem(&self, file: &str) -> Vec<u8> {
        fs::read(self.path(file)).unwrap()
    }
}

/// A redis-server listening only with TLS (`--port 0 --tls-port P`), killed on drop.
struct TlsServer {
    child: Child,
    port: u16,
    _dir: TempDir,
}

impl TlsServer {
    /// Starts one, or returns `None` (after printing why) when redis-server has no TLS.
    fn start(pki: &Pki) -> Option<TlsServer> {
        let bin = std::env::var(REDIS_SERVER_ENV).unwrap_or_else(|_| "redis-server".into());
        for _ in 0..20 {
            let dir = TempDir::new("redmutex-tls-server");
            let port = free_port();
            let log = dir.path().join("redis.log");
            let arg = |p: PathBuf| p.to_str().unwrap().to_owned();
            let child = Command::new(&bin)
                .args(["--bind", "127.0.0.1", "--port", "0", "--tls-port"])
                .arg(port.to_string())
                .args(["--tls-cert-file", &arg(pki.path("server.crt"))])
                .args(["--tls-key-file", &arg(pki.path("server.key"))])
                .args(["--tls-ca-cert-file", &arg(pki.path("ca.crt"))])
                .args(["--tls-auth-clients", "no"])
                .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
                .args(["--dir", &arg(dir.path().to_owned())])
                .args(["--logfile", &arg(log.clone())])
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap_or_else(|e| panic!("cannot run {bin}: {e}"));
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

    fn url(&self) -> String {
        format!("rediss://127.0.0.1:{}", self.port)
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

fn setup() -> Option<(Pki, TlsServer)> {
    let pki = Pki::new();
    let server = TlsServer::start(&pki)?;
    Some((pki, server))
}

#[test]
fn lock_and_unlock_over_tls_with_the_right_ca() {
    let Some((pki, server)) = setup() else { return };
    let client = Client::builder()
        .node(server.url())
        .tls_ca_cert(pki.pem("ca.crt"))
        .build()
        .unwrap();
    let mutex = client.mutex("tls:lock").ttl(Duration::from_secs(2));
    let guard = mutex.lock().unwrap();
    assert_eq!(guard.fence(), 1);
    assert!(matches!(mutex.try_lock(), Err(TryLockError::WouldBlock)));
    guard.extend(Duration::from_secs(3)).unwrap();
    guard.unlock().unwrap();
    assert!(!mutex.is_locked().unwrap());
    assert_eq!(mutex.lock().unwrap().fence(), 2);

    // The same CA also works by host name (the certificate names both).
    let by_name = Client::builder()
        .node(format!("rediss://localhost:{}", server.port))
        .tls_ca_cert(pki.pem("ca.crt"))
        .build()
        .unwrap();
    assert!(by_name.mutex("tls:lock").is_locked().is_ok());
}

fn assert_certificate_error(err: &redmutex::Error) {
    assert_eq!(err.kind(), ErrorKind::Connection, "{err}");
    let text = err.to_string().to_lowercase();
    assert!(
        text.contains("certificate verification failed") && text.contains("rediss://127.0.0.1"),
        "the error should say it is about the certificate: {err}"
    );
}

#[test]
fn a_wrong_ca_fails_with_a_clear_certificate_error() {
    let Some((pki, server)) = setup() else { return };
    let client = Client::builder()
        .node(server.url())
        .tls_ca_cert(pki.pem("other-ca.crt"))
        .connect_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let started = Instant::now();
    let err = match client.mutex("tls:lock").try_lock() {
        Err(TryLockError::Error(e)) => e,
        other => panic!("a wrong CA must fail, got {other:?}"),
    };
    assert_certificate_error(&err);
    assert!(started.elapsed() < Duration::from_secs(5));
    // `lock` reports the same, within the connect timeout's retrying.
    assert_certificate_error(&client.mutex("tls:lock").lock().unwrap_err());
}

#[test]
fn certificates_are_checked_by_default_and_insecure_must_be_asked_for() {
    let Some((_pki, server)) = setup() else {
        return;
    };
    // No CA given: the system's roots do not know the test CA.
    let checked = Client::builder()
        .node(server.url())
        .connect_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    match checked.mutex("tls:lock").try_lock() {
        Err(TryLockError::Error(e)) => assert_certificate_error(&e),
        other => panic!("an unknown CA must be refused by default, got {other:?}"),
    }

    let insecure = Client::open(&format!("{}/#insecure", server.url())).unwrap();
    let guard = insecure.mutex("tls:lock").try_lock().unwrap();
    assert_eq!(guard.fence(), 1);
    guard.unlock().unwrap();
}

#[test]
fn a_ca_that_is_no_certificate_or_a_plain_url_is_an_invalid_argument() {
    // No server needed: these are refused before any I/O.
    let pki = Pki::new();
    for pem in [
        b"".to_vec(),
        b"not a certificate".to_vec(),
        pki.pem("ca.key"),
        b"-----BEGIN CERTIFICATE-----\n%%%%\n-----END CERTIFICATE-----\n".to_vec(),
    ] {
        let err = Client::builder()
            .node("rediss://127.0.0.1:1")
            .tls_ca_cert(pem.clone())
            .build()
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
    }
    let err = Client::builder()
        .node("redis://127.0.0.1:1")
        .tls_ca_cert(pki.pem("ca.crt"))
        .build()
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
    assert!(err.to_string().contains("rediss://"), "{err}");
}
