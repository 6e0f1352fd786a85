//! Pieces of the URL forms that name several servers (`redis+sentinel://`, `redis+cluster://`):
//! scheme, `host[:port]` lists, user-info and percent-escapes.

use redis::RedisConnectionInfo;

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

/// Percent-decoding (`%40` → `@`); the result must be UTF-8.
pub(crate) fn decode(s: &str) -> Result<String, String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or("a bad %-escape in the URL")?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| "a %-escape that is not UTF-8 in the URL".to_owned())
}
