//! TLS on a connection of our own ([`Plain`](super::plain::Plain)): the rustls client
//! configuration, made once per server or group of servers, and one connection's session,
//! which reads the socket one read at a time, so that a round can wait on a TLS socket
//! together with the others and read only what came.
//!
//! The configuration is redis-rs's (`create_rustls_config`): certificates checked against a
//! private CA or the system's roots, or not at all after `#insecure` (then without SNI), no
//! client certificate. redis-rs makes it again for every connection, loading the system's
//! roots each time; here it is made once.

use std::io;

use redis::RedisResult;

use super::socket::Socket;

#[cfg(feature = "tls-rustls")]
pub(crate) use imp::{Config, Session, config};

#[cfg(not(feature = "tls-rustls"))]
pub(crate) use off::{Config, Session, config};

#[cfg(feature = "tls-rustls")]
mod imp {
    use super::*;
    use std::io::{Read, Write};
    use std::sync::Arc;

    use redis::{ErrorKind, RedisError};

    use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
    use rustls::{ClientConfig, ClientConnection, DigitallySignedStruct, RootCertStore};

    /// A `rediss://` client configuration, shared by the connections it opens.
    pub(crate) type Config = Arc<ClientConfig>;

    /// The configuration for certificates that chain to `ca` (PEM) or, without one, to the
    /// system's roots; with `insecure`, certificates are not checked at all. An error when
    /// the roots cannot be read (redis-rs then fails every connection with it).
    pub(crate) fn config(insecure: bool, ca: Option<&[u8]>) -> Result<Config, String> {
        let mut roots = RootCertStore::empty();
        match ca {
            Some(pem) => {
                for cert in CertificateDer::pem_slice_iter(pem) {
                    let cert = cert.map_err(|e| e.to_string())?;
                    roots.add(cert).map_err(|e| e.to_string())?;
                }
            }
            None if insecure => {}
            None => {
                let found = rustls_native_certs::load_native_certs();
                if let Some(e) = found.errors.into_iter().next() {
                    return Err(e.to_string());
                }
                for cert in found.certs {
                    roots.add(cert).map_err(|e| e.to_string())?;
                }
            }
        }
        // The process's provider (see `tls::install_crypto_provider`), asked for explicitly:
        // `ClientConfig::builder` panics without one.
        let provider = rustls::crypto::CryptoProvider::get_default()
            .ok_or("no crypto provider available for rustls")?;
        let mut config = ClientConfig::builder_with_provider(Arc::clone(provider))
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots)
            .with_no_client_auth();
        if insecure {
            config.enable_sni = false;
            config
                .dangerous()
                .set_certificate_verifier(Arc::new(NoCertificateVerification {
                    supported: provider.signature_verification_algorithms,
                }));
        }
        Ok(Arc::new(config))
    }

    /// One connection's TLS session.
    pub(crate) struct Session(ClientConnection);

    impl Session {
        /// Runs the handshake with `host` on `sock`, within the socket's timeouts.
        pub(crate) fn start(config: &Config, host: &str, sock: &Socket) -> RedisResult<Session> {
            let name = ServerName::try_from(host.to_owned()).map_err(|e| {
                RedisError::from((
                    ErrorKind::InvalidClientConfig,
                    "invalid TLS server name",
                    e.to_string(),
                ))
            })?;
            let mut conn = ClientConnection::new(Arc::clone(config), name)?;
            let mut sock = sock;
            while conn.is_handshaking() {
                conn.complete_io(&mut sock)?;
            }
            Ok(Session(conn))
        }

        /// Encrypts `bytes` and writes them, with whatever else the session owes the server.
        pub(crate) fn write(&mut self, sock: &Socket, bytes: &[u8]) -> io::Result<()> {
            self.0.writer().write_all(bytes)?;
            self.flush(sock)
        }

        fn flush(&mut self, sock: &Socket) -> io::Result<()> {
            let mut sock = sock;
            while self.0.wants_write() {
                self.0.write_tls(&mut sock)?;
            }
            Ok(())
        }

        /// One read of the socket (waiting as its read timeout allows): how many bytes of
        /// plaintext it completed, for [`take`](Self::take). The end of the connection is an
        /// `UnexpectedEof` error.
        pub(crate) fn receive(&mut self, sock: &Socket) -> io::Result<usize> {
            if self.0.read_tls(&mut { sock })? == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
            let state = match self.0.process_new_packets() {
                Ok(state) => state,
                Err(e) => {
                    let _ = self.flush(sock); // the alert that tells the server why
                    return Err(io::Error::new(io::ErrorKind::InvalidData, e));
                }
            };
            // What the protocol asks to answer (a key update).
            self.flush(sock)?;
            match state.plaintext_bytes_to_read() {
                0 if state.peer_has_closed() => Err(io::ErrorKind::UnexpectedEof.into()),
                n => Ok(n),
            }
        }

        /// Moves the plaintext received into `buf`, as much as fits.
        pub(crate) fn take(&mut self, buf: &mut [u8]) -> usize {
            let mut got = 0;
            while got < buf.len() {
                match self.0.reader().read(&mut buf[got..]) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => got += n,
                }
            }
            got
        }
    }

    /// `#insecure`: every certificate is accepted (redis-rs's verifier of the same name).
    #[derive(Debug)]
    struct NoCertificateVerification {
        supported: rustls::crypto::WebPkiSupportedAlgorithms,
    }

    impl ServerCertVerifier for NoCertificateVerification {
        fn verify_server_cert(
            &self,
            _end_entity: &CertificateDer<'_>,
            _intermediates: &[CertificateDer<'_>],
            _server_name: &ServerName<'_>,
            _ocsp_response: &[u8],
            _now: UnixTime,
        ) -> Result<ServerCertVerified, rustls::Error> {
            Ok(ServerCertVerified::assertion())
        }

        fn verify_tls12_signature(
            &self,
            _message: &[u8],
            _cert: &CertificateDer<'_>,
            _dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            Ok(HandshakeSignatureValid::assertion())
        }

        fn verify_tls13_signature(
            &self,
            _message: &[u8],
            _cert: &CertificateDer<'_>,
            _dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            Ok(HandshakeSignatureValid::assertion())
        }

        fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
            self.supported.supported_schemes()
        }
    }
}

/// Without TLS support there is no configuration, so no session either: `rediss://` servers
/// keep redis-rs's connection, which reports the missing feature.
#[cfg(not(feature = "tls-rustls"))]
mod off {
    use super::*;

    #[derive(Clone)]
    pub(crate) enum Config {}
    pub(crate) enum Session {}

    pub(crate) fn config(_insecure: bool, _ca: Option<&[u8]>) -> Result<Config, String> {
        Err("redmutex was built without the tls-rustls feature".into())
    }

    impl Session {
        pub(crate) fn start(config: &Config, _: &str, _: &Socket) -> RedisResult<Session> {
            match *config {}
        }
        pub(crate) fn write(&mut self, _: &Socket, _: &[u8]) -> io::Result<()> {
            match *self {}
        }
        pub(crate) fn receive(&mut self, _: &Socket) -> io::Result<usize> {
            match *self {}
        }
        pub(crate) fn take(&mut self, _: &mut [u8]) -> usize {
            match *self {}
        }
    }
}
