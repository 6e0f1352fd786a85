//! TLS (`rediss://`) with rustls: a private CA, the crypto provider, and telling a certificate
//! that did not verify from any other failure.

use redis::{ConnectionInfo, RedisError};

/// A client for a `rediss://` server whose certificate must chain to the CA in `pem`, which
/// is checked first (see [`check_ca`]).
pub(crate) fn client_with_ca(info: ConnectionInfo, pem: &[u8]) -> Result<redis::Client, String> {
    check_ca(pem)?;
    build_with_ca(info, pem).map_err(|e| e.to_string())
}

/// [`client_with_ca`] for a CA already checked: the connections that redmutex opens itself
/// (cluster masters, sentinels and the masters they name).
#[cfg(feature = "tls-rustls")]
pub(crate) fn build_with_ca(info: ConnectionInfo, pem: &[u8]) -> redis::RedisResult<redis::Client> {
    let certs = redis::TlsCertificates {
        client_tls: None,
        root_cert: Some(pem.to_vec()),
    };
    redis::Client::build_with_tls(info, certs)
}

#[cfg(not(feature = "tls-rustls"))]
pub(crate) fn build_with_ca(
    _info: ConnectionInfo,
    _pem: &[u8],
) -> redis::RedisResult<redis::Client> {
    Err(RedisError::from((
        redis::ErrorKind::InvalidClientConfig,
        "redmutex was built without the tls-rustls feature",
    )))
}

/// Checks that `pem` holds at least one readable certificate: redis-rs silently ignores input
/// without one, which would make every connection fail verification later with a misleading
/// error.
#[cfg(feature = "tls-rustls")]
pub(crate) fn check_ca(pem: &[u8]) -> Result<(), String> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;

    let mut certs = 0;
    for cert in CertificateDer::pem_slice_iter(pem) {
        cert.map_err(|e| format!("unreadable TLS CA certificate PEM: {e}"))?;
        certs += 1;
    }
    if certs == 0 {
        return Err(
            "the TLS CA certificate holds no PEM certificate (-----BEGIN CERTIFICATE-----)".into(),
        );
    }
    Ok(())
}

#[cfg(not(feature = "tls-rustls"))]
pub(crate) fn check_ca(_pem: &[u8]) -> Result<(), String> {
    Err("redmutex was built without the tls-rustls feature".into())
}

/// Makes `ring` the process's rustls provider unless one was chosen already: rustls cannot
/// pick one by itself when another crate in the program also enables `aws-lc-rs`.
pub(crate) fn install_crypto_provider() {
    #[cfg(feature = "tls-rustls")]
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Whether `e` is a server certificate that did not verify (an unknown issuer, a name it is
/// not valid for, an expired certificate): rustls's own error, which redis-rs keeps inside the
/// I/O error of the handshake.
pub(crate) fn is_unverified(e: &RedisError) -> bool {
    #[cfg(feature = "tls-rustls")]
    {
        use std::error::Error;
        use std::sync::Arc;

        // redis-rs holds the I/O error in an `Arc`, and `io::Error::source` skips the error
        // it wraps: look through both by type.
        let io = std::error::Error::source(e).and_then(|s| {
            s.downcast_ref::<std::io::Error>().or_else(|| {
                s.downcast_ref::<Arc<dyn Error + Send + Sync>>()
                    .and_then(|a| a.downcast_ref::<std::io::Error>())
            })
        });
        io.and_then(std::io::Error::get_ref)
            .and_then(|inner| inner.downcast_ref::<rustls::Error>())
            .is_some_and(|tls| matches!(tls, rustls::Error::InvalidCertificate(_)))
    }
    #[cfg(not(feature = "tls-rustls"))]
    {
        let _ = e;
        false
    }
}
