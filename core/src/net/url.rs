//! URL forms: a single server (parsed by redis-rs), the pieces of the forms that name several
//! servers (`redis+sentinel://`, `redis+cluster://` and their `rediss+` TLS variants), and
//! addresses shown without passwords.

use std::sync::Arc;

use percent_encoding::percent_decode_str;
use redis::{ConnectionAddr, ConnectionInfo, IntoConnectionInfo, RedisConnectionInfo, RedisError};

use super::{tls, tls_session};

/// Whether `url` starts with `scheme`, in any case.
pub(crate) fn has_scheme(url: &str, scheme: &str) -> bool {
    url.get(..scheme.len())
        .is_some_and(|s| s.eq_ignore_ascii_case(scheme))
}

/// `host:port`, or `[v6]:port` for an IPv6 address.
pub(crate) fn host_port(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// `host[:port]` or `[v6]:port`; `default_port` when the port is left out.
pub(crate) fn parse_host(s: &str, default_port: u16) -> Result<(String, u16), String> {
    let (host, port) = if let Some(v6) = s.strip_prefix('[') {
        let (host, rest) = v6
            .split_once(']')
            .ok_or_else(|| format!("unclosed [ in address {s:?}"))?;
        match rest {
            "" => (host, None),
            _ => (
                host,
                Some(
                    rest.strip_prefix(':')
                        .ok_or_else(|| format!("expected :port after ] in address {s:?}"))?,
                ),
            ),
        }
    } else {
        match s.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (s, None),
        }
    };
    if host.is_empty() {
        return Err(format!("empty host in {s:?}"));
    }
    if host.contains(['/', '@', '[', ']', ' ']) || (!s.starts_with('[') && host.contains(':')) {
        return Err(format!("malformed address {s:?}"));
    }
    let port = match port {
        None => default_port,
        Some(p) => p
            .parse::<u16>()
            .ok()
            .filter(|p| *p != 0)
            .ok_or_else(|| format!("bad port in {s:?}"))?,
    };
    Ok((host.to_owned(), port))
}

/// The credentials of a URL's user-info (`user:password`, percent-encoded), if any.
pub(crate) fn userinfo_settings(userinfo: Option<&str>) -> Result<RedisConnectionInfo, String> {
    let mut settings = RedisConnectionInfo::default();
    let Some(userinfo) = userinfo else {
        return Ok(settings);
    };
    let (u, p) = match userinfo.split_once(':') {
        Some((u, p)) => (u, Some(p)),
        None => (userinfo, None),
    };
    if !u.is_empty() {
        settings = settings.set_username(decode(u)?);
    }
    if let Some(p) = p.filter(|p| !p.is_empty()) {
        settings = settings.set_password(decode(p)?);
    }
    Ok(settings)
}

/// Percent-decoding (`%40` → `@`); the result must be UTF-8, and every `%` must start an
/// escape.
pub(crate) fn decode(s: &str) -> Result<String, String> {
    let mut rest = s;
    while let Some(at) = rest.find('%') {
        let hex = rest.get(at + 1..at + 3);
        if !hex.is_some_and(|h| h.bytes().all(|b| b.is_ascii_hexdigit())) {
            return Err("a bad %-escape in the URL".into());
        }
        rest = &rest[at + 3..];
    }
    percent_decode_str(s)
        .decode_utf8()
        .map(|d| d.into_owned())
        .map_err(|_| "a %-escape that is not UTF-8 in the URL".to_owned())
}

/// The two schemes of a URL form that names several servers: plain and TLS.
pub(crate) struct Schemes {
    pub(crate) plain: &'static str,
    pub(crate) tls: &'static str,
}

impl Schemes {
    /// Whether `url` starts with either scheme, in any case.
    pub(crate) fn matches(&self, url: &str) -> bool {
        has_scheme(url, self.plain) || has_scheme(url, self.tls)
    }

    /// What follows the scheme (without an `#insecure` fragment), and the URL's TLS settings
    /// with `ca` (PEM): `what` names the form in the error of a URL of neither scheme.
    pub(crate) fn split<'u>(
        &self,
        url: &'u str,
        ca: Option<&[u8]>,
        what: &str,
    ) -> Result<(&'u str, Tls), String> {
        let tls_on = has_scheme(url, self.tls);
        if !tls_on && !has_scheme(url, self.plain) {
            return Err(format!("{what} starts with {}", self.plain));
        }
        let scheme = if tls_on { self.tls } else { self.plain };
        let (rest, insecure) = fragment(&url[scheme.len()..], tls_on)?;
        Ok((rest, tls_for(tls_on, insecure, ca, url)?))
    }
}

/// Splits off a URL's `#fragment`: only `#insecure`, and only with TLS.
pub(crate) fn fragment(rest: &str, tls_on: bool) -> Result<(&str, bool), String> {
    match rest.split_once('#') {
        None => Ok((rest, false)),
        Some((rest, "insecure")) if tls_on => Ok((rest, true)),
        Some(_) if tls_on => Err("the only #fragment is #insecure".into()),
        Some(_) => Err("#fragments are for TLS URLs only (#insecure)".into()),
    }
}

/// The TLS settings of a several-server URL: a CA only goes with TLS.
pub(crate) fn tls_for(
    tls_on: bool,
    insecure: bool,
    ca: Option<&[u8]>,
    what: &str,
) -> Result<Tls, String> {
    if ca.is_some() && !tls_on {
        return Err(format!(
            "a TLS CA certificate was given, but {} is not a rediss URL",
            redact(what)
        ));
    }
    Tls::new(tls_on, insecure, ca)
}

/// How the connections of a voter made of several servers (a cluster, a Sentinel group) are
/// secured: all of them over TLS or none, with the CA that certificates must chain to (the
/// system's roots without one), or with no checks at all after an explicit `#insecure`.
#[derive(Clone, Default)]
pub(crate) struct Tls {
    on: bool,
    insecure: bool,
    ca: Option<Arc<[u8]>>,
    /// What our own connections use (see [`Tls::config`]).
    config: Option<tls_session::Config>,
}

impl Tls {
    /// TLS off when `on` is false; otherwise TLS, checked against `ca` (PEM) or the system's
    /// roots unless `insecure`.
    pub(crate) fn new(on: bool, insecure: bool, ca: Option<&[u8]>) -> Result<Tls, String> {
        if !on {
            return Ok(Tls::default());
        }
        if let Some(pem) = ca {
            tls::check_ca(pem)?;
        }
        tls::install_crypto_provider();
        let config = tls_session::config(insecure, ca)
            .inspect_err(|e| log::debug!("TLS connections left to redis-rs: {e}"))
            .ok();
        Ok(Tls {
            on,
            insecure,
            ca: ca.map(Arc::from),
            config,
        })
    }

    /// The configuration of our own TLS connections, made once for every server these
    /// settings reach; `None` without TLS, or when it could not be made (the system's roots
    /// unreadable: redis-rs's connections then report why, connection by connection).
    pub(crate) fn config(&self) -> Option<&tls_session::Config> {
        self.config.as_ref()
    }

    pub(crate) fn is_on(&self) -> bool {
        self.on
    }

    /// A client for the server at `host:port` with `settings` (credentials, database).
    pub(crate) fn client(
        &self,
        host: &str,
        port: u16,
        settings: &RedisConnectionInfo,
    ) -> Result<redis::Client, RedisError> {
        let scheme = if self.on { "rediss" } else { "redis" };
        let fragment = if self.insecure { "#insecure" } else { "" };
        let info = without_setinfo(
            format!("{scheme}://{}/{fragment}", host_port(host, port))
                .as_str()
                .into_connection_info()?
                .set_redis_settings(settings.clone()),
        );
        match &self.ca {
            Some(pem) => tls::build_with_ca(info, pem),
            None => redis::Client::open(info),
        }
    }
}

/// `info` without redis-rs's `CLIENT SETINFO` handshake: each connection is named by the
/// endpoint's own setup, and each handshake reply would cost a frozen server the whole
/// connect budget again (see `conn::open`).
pub(crate) fn without_setinfo(info: ConnectionInfo) -> ConnectionInfo {
    let settings = info.redis_settings().clone().set_skip_set_lib_name();
    info.set_redis_settings(settings)
}

/// A client for a single-server URL (`redis://`, `rediss://`, `unix://`), with `ca` (PEM) for
/// a `rediss://` server whose certificate must chain to a private CA; its TLS settings; and its
/// display.
pub(crate) fn direct(url: &str, ca: Option<&[u8]>) -> Result<(redis::Client, Tls, String), String> {
    let info: ConnectionInfo = url
        .into_connection_info()
        .map(without_setinfo)
        .map_err(|e| format!("malformed Redis URL {}: {e}", redact(url)))?;
    let display = describe(&info);
    let insecure = match info.addr() {
        ConnectionAddr::TcpTls { insecure, .. } => Some(*insecure),
        _ => None,
    };
    let is_tls = insecure.is_some();
    let client = match ca {
        None => redis::Client::open(info).map_err(|e| e.to_string()),
        Some(_) if !is_tls => Err(format!(
            "a TLS CA certificate was given, but {display} is not a rediss:// URL"
        )),
        Some(pem) => tls::client_with_ca(info, pem),
    }
    .map_err(|e| format!("unusable Redis URL {display}: {e}"))?;
    let tls = match insecure {
        Some(insecure) => Tls::new(true, insecure, ca)?,
        None => Tls::default(),
    };
    Ok((client, tls, display))
}

/// `scheme://[user@]host:port/db`, never the password.
fn describe(info: &ConnectionInfo) -> String {
    let redis = info.redis_settings();
    let (scheme, addr) = match info.addr() {
        ConnectionAddr::Tcp(h, p) => ("redis", format!("{h}:{p}")),
        ConnectionAddr::TcpTls { host, port, .. } => ("rediss", format!("{host}:{port}")),
        ConnectionAddr::Unix(path) => ("unix", path.display().to_string()),
        _ => ("redis", info.addr().to_string()),
    };
    let user = redis
        .username()
        .map(|u| format!("{u}@"))
        .unwrap_or_default();
    let db = if redis.db() != 0 {
        format!("/{}", redis.db())
    } else {
        String::new()
    };
    format!("{scheme}://{user}{addr}{db}")
}

/// A URL with any password replaced, for error messages about URLs that did not parse: the
/// user-info password (`redis://user:***@host`) and a `pass=` query parameter (the form of
/// `unix:///run/redis.sock?pass=…` URLs).
pub(crate) fn redact(url: &str) -> String {
    let url = redact_query_password(url);
    let (head, rest) = match url.split_once("://") {
        Some((scheme, rest)) => (format!("{scheme}://"), rest),
        None => (String::new(), url.as_str()),
    };
    match rest.rsplit_once('@') {
        Some((creds, host)) => {
            let user = creds.split(':').next().unwrap_or("");
            format!("{head}{user}:***@{host}")
        }
        None => url,
    }
}

fn redact_query_password(url: &str) -> String {
    let Some((base, query)) = url.split_once('?') else {
        return url.to_owned();
    };
    let params: Vec<String> = query
        .split('&')
        .map(|p| match p.split_once('=') {
            Some((k, _)) if k.contains("pass") => format!("{k}=***"),
            _ => p.to_owned(),
        })
        .collect();
    format!("{base}?{}", params.join("&"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_escapes_and_refuses_bad_ones() {
        assert_eq!(decode("p%40ss%20x").unwrap(), "p@ss x");
        for bad in ["%", "%4", "%zz", "a%g0"] {
            assert!(decode(bad).is_err(), "{bad}");
        }
        assert!(decode("%ff").is_err());
        assert_eq!(redact("redis://:pw@h:1"), "redis://:***@h:1");
    }
}
