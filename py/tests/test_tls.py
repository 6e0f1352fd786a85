"""TLS: Client(..., tls_ca_cert=...) against a redis-server that speaks only TLS, with a CA
and a server certificate made by openssl for the test. Skipped (with the reason shown in the
summary) only when openssl is missing or redis-server was built without TLS."""

from __future__ import annotations

import pathlib
import shutil
import subprocess
import time
from collections.abc import Iterator

import pytest

import redmutex
from conftest import free_port, stop

EC = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]


def openssl(cwd: pathlib.Path, *args: str) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_pki(d: pathlib.Path) -> None:
    for ca in ("ca", "other-ca"):
        openssl(d, "req", "-x509", *EC, "-days", "2", "-subj", f"/CN=redmutex test {ca}",
                "-addext", "basicConstraints=critical,CA:TRUE",
                "-addext", "keyUsage=critical,keyCertSign,cRLSign",
                "-keyout", f"{ca}.key", "-out", f"{ca}.crt")
    openssl(d, "req", *EC, "-subj", "/CN=localhost", "-keyout", "server.key",
            "-out", "server.csr")
    (d / "server.ext").write_text(
        "basicConstraints=critical,CA:FALSE\n"
        "keyUsage=critical,digitalSignature\n"
        "extendedKeyUsage=serverAuth\n"
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    openssl(d, "x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
            "-CAcreateserial", "-days", "2", "-extfile", "server.ext", "-out", "server.crt")


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, pathlib.Path]]:
    """(rediss:// URL of a TLS-only redis-server, directory holding ca.crt and other-ca.crt)."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl not found: the TLS test cannot make certificates")
    d = tmp_path_factory.mktemp("tls")
    make_pki(d)
    for _ in range(10):
        port = free_port()
        log = d / f"redis-{port}.log"
        stdio = d / f"redis-{port}.out"
        with stdio.open("wb") as out:
            proc = subprocess.Popen(
                ["redis-server", "--bind", "127.0.0.1", "--port", "0", "--tls-port", str(port),
                 "--tls-cert-file", str(d / "server.crt"), "--tls-key-file",
                 str(d / "server.key"), "--tls-ca-cert-file", str(d / "ca.crt"),
                 "--tls-auth-clients", "no", "--save", "", "--appendonly", "no",
                 "--daemonize", "no", "--dir", str(d), "--logfile", str(log)],
                stdout=out, stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 10
        while proc.poll() is None and time.monotonic() < deadline:
            if log.exists() and "Ready to accept connections" in log.read_text():
                try:
                    yield f"rediss://127.0.0.1:{port}", d
                finally:
                    stop(proc)
                return
            time.sleep(0.02)
        stop(proc)
        said = (log.read_text() if log.exists() else "") + stdio.read_text()
        if "Bad directive" in said and "tls" in said or "Missing implement" in said:
            pytest.skip(f"redis-server was built without TLS support: {said.strip()}")
        if "Address already in use" not in said:
            pytest.fail(f"the TLS redis-server did not start: {said}")
    pytest.fail("no free port for the TLS redis-server")


def test_lock_over_tls_with_a_ca_path_or_bytes(tls: tuple[str, pathlib.Path]) -> None:
    url, d = tls
    for ca in (str(d / "ca.crt"), d / "ca.crt", (d / "ca.crt").read_bytes()):
        lock = redmutex.Client(url, tls_ca_cert=ca).lock("py:tls", ttl=2.0)
        with lock:
            assert lock.owned()
            assert lock.fence is not None
        assert not lock.locked()


def test_a_wrong_ca_raises_a_connection_error_about_the_certificate(
    tls: tuple[str, pathlib.Path],
) -> None:
    url, d = tls
    lock = redmutex.Client(url, tls_ca_cert=d / "other-ca.crt",
                           connect_timeout=10.0).lock("py:tls")
    with pytest.raises(redmutex.LockConnectionError, match="certificate verification failed"):
        lock.acquire(blocking=False)
    # Waiting cannot fix a certificate: a blocking acquire raises at once too, without
    # retrying it for the 10 s connect timeout like an outage.
    started = time.monotonic()
    with pytest.raises(redmutex.LockConnectionError, match="certificate verification failed"):
        lock.acquire(timeout=30)
    assert time.monotonic() - started < 5


def test_insecure_must_be_asked_for_in_the_url(tls: tuple[str, pathlib.Path]) -> None:
    url, _ = tls
    with redmutex.Client(url + "/#insecure").lock("py:tls") as lock:
        assert lock.owned()


def test_bad_tls_ca_cert_arguments() -> None:
    url = "rediss://127.0.0.1:1"
    with pytest.raises(TypeError):
        redmutex.Client(url, tls_ca_cert=42)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="PEM"):
        redmutex.Client(url, tls_ca_cert=b"not a certificate")
    with pytest.raises(FileNotFoundError):
        redmutex.Client(url, tls_ca_cert="/nonexistent/ca.crt")
