//! A node behind Redis Sentinel: the `redis+sentinel://` URL form, and finding the current
//! master before each new connection.
//!
//! ```text
//! redis+sentinel://[[user]:password@]host[:port][,host2[:port2],...]/master-name[/db]
//!     [?sentinel_username=...&sentinel_password=...]
//! rediss+sentinel://…same…[#insecure]
//! ```
//!
//! The same grammar as the `redis+sentinel://` URLs of redis-py helpers (Redis-Sentinel-Url,
//! Prefect, RedisVL): sentinels are comma-separated and default to port 26379, the path is the
//! master name and an optional database number, and the user-info credentials are those of the
//! master. The sentinels themselves are asked without credentials unless the
//! `sentinel_username` / `sentinel_password` query parameters are given. With `rediss+sentinel://`
//! every connection, to the sentinels and to the master, is made over TLS (checked against the
//! client's CA or the system's roots, or not at all after an explicit `#insecure`).
//!
//! A new connection asks the sentinels in order (the one that answered last first), each
//! bounded by the caller's deadline, for `SENTINEL get-master-addr-by-name`, connects to that
//! address and checks with `ROLE` that it is a master: a just-demoted master is never used.
//! Pooled connections to a master that failed over break (or answer `READONLY`, and are then
//! dropped by the pool), so the next round resolves the new master.

use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use redis::{RedisConnectionInfo, Value};

use super::conn::{self, Connection, remaining, set_timeouts};
use super::url::{
    Schemes, Tls, decode, fragment, has_scheme, host_port, parse_host, redact, tls_for,
    userinfo_settings,
};
use crate::wire::{Failure, NetError};

/// The URL schemes of a node behind Redis Sentinel.
pub(crate) const SCHEMES: Schemes = Schemes {
    plain: "redis+sentinel://",
    tls: "rediss+sentinel://",
};
/// The port of a sentinel given without one.
pub(crate) const DEFAULT_PORT: u16 = 26379;

/// One master name watched by a group of sentinels.
pub(crate) struct Sentinel {
    sentinels: Vec<(String, u16)>,
    master_name: String,
    /// Credentials and database of the master.
    master: RedisConnectionInfo,
    /// Credentials of the sentinels.
    auth: RedisConnectionInfo,
    /// TLS for the sentinels and the master alike.
    tls: Tls,
    /// The sentinel that answered last, asked first next time.
    first: AtomicUsize,
    display: String,
}

impl Sentinel {
    /// Parses a `redis+sentinel://` or `rediss+sentinel://` URL; `ca` (PEM) is the CA that
    /// TLS certificates must chain to. The error message never contains the password.
    pub(crate) fn parse(url: &str, ca: Option<&[u8]>) -> Result<Sentinel, String> {
        let (rest, tls) = SCHEMES.split(url, ca, "a Sentinel URL")?;
        let (rest, query) = match rest.split_once('?') {
            Some((r, q)) => (r, Some(q)),
            None => (rest, None),
        };
        let (authority, path) = rest
            .split_once('/')
            .ok_or("the master name is missing (…/mymaster)")?;
        let (userinfo, hosts) = match authority.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, authority),
        };

        let sentinels = hosts
            .split(',')
            .map(|h| parse_host(h, DEFAULT_PORT))
            .collect::<Result<Vec<_>, _>>()?;

        let mut segments = path.split('/');
        let master_name = decode(segments.next().unwrap_or(""))?;
        if master_name.is_empty() {
            return Err("the master name is missing (…/mymaster)".into());
        }
        let db = match segments.next() {
            None | Some("") => 0,
            Some(db) => db
                .parse::<i64>()
                .ok()
                .filter(|d| *d >= 0)
                .ok_or_else(|| format!("the database must be a number, got {db:?}"))?,
        };
        if segments.next().is_some() {
            return Err("the path is /master-name[/db]".into());
        }

        let master = userinfo_settings(userinfo)?.set_db(db);

        let mut auth = RedisConnectionInfo::default();
        for param in query.into_iter().flat_map(|q| q.split('&')) {
            match param.split_once('=') {
                Some(("sentinel_username", v)) => auth = auth.set_username(decode(v)?),
                Some(("sentinel_password", v)) => auth = auth.set_password(decode(v)?),
                _ => {
                    let key = param.split_once('=').map_or(param, |(k, _)| k);
                    return Err(format!(
                        "unknown parameter {key:?} (known: sentinel_username, sentinel_password)"
                    ));
                }
            }
        }

        Ok(Sentinel::new(sentinels, master_name, master, auth, tls))
    }

    /// A group from sentinel URLs (`redis://[[user]:password@]host[:port]`, port 26379 when
    /// left out, or all `rediss://` for TLS) and its master: the form of
    /// `ClientBuilder::sentinel`. Credentials in the URLs are the sentinels' and must be the
    /// same in all of them; `master` is the master's name, and its credentials and database.
    pub(crate) fn from_parts(
        urls: &[String],
        master: (&str, RedisConnectionInfo),
        ca: Option<&[u8]>,
    ) -> Result<Sentinel, String> {
        let (name, settings) = master;
        if urls.is_empty() {
            return Err("a Sentinel group needs at least one sentinel URL".into());
        }
        if name.is_empty() {
            return Err("the master name is empty".into());
        }
        let tls_on = urls.first().is_some_and(|u| has_scheme(u, "rediss://"));
        let mut insecure = None;
        let mut sentinels = Vec::with_capacity(urls.len());
        let mut auth: Option<RedisConnectionInfo> = None;
        for url in urls {
            let scheme = if tls_on { "rediss://" } else { "redis://" };
            if !has_scheme(url, scheme) {
                return Err(format!(
                    "sentinels are all redis://host[:port] or all rediss://host[:port] URLs, got {}",
                    redact(url)
                ));
            }
            let (rest, this_insecure) = fragment(&url[scheme.len()..], tls_on)?;
            if *insecure.get_or_insert(this_insecure) != this_insecure {
                return Err("#insecure must be on every sentinel URL or on none".into());
            }
            let authority = rest.trim_end_matches('/');
            let (userinfo, host) = match authority.rsplit_once('@') {
                Some((u, h)) => (Some(u), h),
                None => (None, authority),
            };
            sentinels.push(parse_host(host, DEFAULT_PORT)?);
            let creds = userinfo_settings(userinfo)?;
            match &auth {
                None => auth = Some(creds),
                Some(first)
                    if first.username() != creds.username()
                        || first.password() != creds.password() =>
                {
                    return Err("every sentinel URL must carry the same credentials".into());
                }
                Some(_) => {}
            }
        }
        let tls = tls_for(tls_on, insecure.unwrap_or(false), ca, "the sentinel URLs")?;
        Ok(Sentinel::new(
            sentinels,
            name.to_owned(),
            settings,
            auth.unwrap_or_default(),
            tls,
        ))
    }

    fn new(
        sentinels: Vec<(String, u16)>,
        master_name: String,
        master: RedisConnectionInfo,
        auth: RedisConnectionInfo,
        tls: Tls,
    ) -> Sentinel {
        let hosts: Vec<String> = sentinels.iter().map(|(h, p)| host_port(h, *p)).collect();
        let display = format!(
            "{}{}{}/{}{}",
            if tls.is_on() {
                SCHEMES.tls
            } else {
                SCHEMES.plain
            },
            master
                .username()
                .map(|u| format!("{u}@"))
                .unwrap_or_default(),
            hosts.join(","),
            master_name,
            if master.db() != 0 {
                format!("/{}", master.db())
            } else {
                String::new()
            },
        );
        Sentinel {
            sentinels,
            master_name,
            master,
            auth,
            tls,
            first: AtomicUsize::new(0),
            display,
        }
    }

    /// The URL without credentials: the sentinels, the master name and the database.
    pub(crate) fn display(&self) -> &str {
        &self.display
    }

    /// Asks the sentinels for the master and connects to it, all before `deadline`; each
    /// connection attempt is also bounded by `connect_timeout`. The caller checks `ROLE`.
    pub(crate) fn connect_master(
        &self,
        deadline: Instant,
        connect_timeout: Duration,
    ) -> Result<conn::Io, NetError> {
        let (host, port) = self.master_addr(deadline, connect_timeout)?;
        let client = self.tls.client(&host, port, &self.master)?;
        let budget = remaining(deadline)?.min(connect_timeout);
        conn::open(&client, self.tls.config(), budget)
    }

    /// The master's address according to the first sentinel that answers.
    fn master_addr(
        &self,
        deadline: Instant,
        connect_timeout: Duration,
    ) -> Result<(String, u16), NetError> {
        let n = self.sentinels.len();
        let start = self.first.load(Ordering::Relaxed) % n;
        let mut last = None;
        for k in 0..n {
            let i = (start + k) % n;
            match self.ask(i, deadline, connect_timeout) {
                Ok(addr) => {
                    self.first.store(i, Ordering::Relaxed);
                    return Ok(addr);
                }
                Err(e) => {
                    let (h, p) = &self.sentinels[i];
                    log::debug!("sentinel {h}:{p} did not tell the master: {e}");
                    last = Some(e);
                    if remaining(deadline).is_err() {
                        break;
                    }
                }
            }
        }
        Err(last.unwrap_or_else(NetError::timeout))
    }

    fn ask(
        &self,
        i: usize,
        deadline: Instant,
        connect_timeout: Duration,
    ) -> Result<(String, u16), NetError> {
        let (host, port) = &self.sentinels[i];
        let client = self.tls.client(host, *port, &self.auth)?;
        let budget = remaining(deadline)?.min(connect_timeout);
        let opened = conn::open(&client, self.tls.config(), budget)?;
        let mut conn = Connection::new(opened, None);
        set_timeouts(&conn, deadline)?;
        let addr: Option<(String, u16)> = redis::cmd("SENTINEL")
            .arg("get-master-addr-by-name")
            .arg(&self.master_name)
            .query(&mut conn)?;
        addr.ok_or_else(|| {
            NetError::from(redis::RedisError::from((
                redis::ErrorKind::MasterNameNotFoundBySentinel,
                "unknown master name",
                format!(
                    "sentinel {host}:{port} monitors no master named {:?}",
                    self.master_name
                ),
            )))
        })
    }
}

/// Fails unless `role` (the reply to `ROLE`) says master: a server that the sentinels still
/// name but that was demoted (or not yet promoted) must not take locks.
pub(crate) fn check_master(role: &Value, display: &str) -> Result<(), NetError> {
    let first = match role {
        Value::Array(items) => items.first(),
        _ => None,
    };
    let role = match first {
        Some(Value::BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
        Some(Value::SimpleString(s)) => s.clone(),
        _ => format!("{role:?}"),
    };
    if role == "master" {
        Ok(())
    } else {
        // An I/O error: the node counts as unreachable for this round, and the next round
        // asks the sentinels again.
        Err(NetError::new(
            Failure::Io,
            io::ErrorKind::ConnectionAborted,
            format!("the master of {display} answers ROLE {role}: a failover is in progress"),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_documented_forms() {
        let s = Sentinel::parse("redis+sentinel://s1,s2:26380,[::1]:26381/mymaster", None).unwrap();
        assert_eq!(
            s.sentinels,
            vec![
                ("s1".to_owned(), 26379),
                ("s2".to_owned(), 26380),
                ("::1".to_owned(), 26381)
            ]
        );
        assert_eq!(s.master_name, "mymaster");
        assert_eq!(s.master.db(), 0);
        assert_eq!(
            s.display(),
            "redis+sentinel://s1:26379,s2:26380,[::1]:26381/mymaster"
        );

        let s = Sentinel::parse(
            "REDIS+SENTINEL://alice:p%40ss@h:1/m%20x/3?sentinel_password=sp&sentinel_username=su",
            None,
        )
        .unwrap();
        assert_eq!(s.master.username(), Some("alice"));
        assert_eq!(s.master.password(), Some("p@ss"));
        assert_eq!(s.master.db(), 3);
        assert_eq!(s.auth.username(), Some("su"));
        assert_eq!(s.auth.password(), Some("sp"));
        assert_eq!(s.display(), "redis+sentinel://alice@h:1/m x/3");

        let s = Sentinel::parse("redis+sentinel://:pw@h/m/", None).unwrap();
        assert_eq!(s.master.username(), None);
        assert_eq!(s.master.password(), Some("pw"));
        assert_eq!(s.display(), "redis+sentinel://h:26379/m");
    }

    #[test]
    fn rejects_malformed_urls() {
        for url in [
            "redis+sentinel://",
            "redis+sentinel://h:26379",
            "redis+sentinel://h:26379/",
            "redis+sentinel:///m",
            "redis+sentinel://h1,,h2/m",
            "redis+sentinel://h:0/m",
            "redis+sentinel://h:x/m",
            "redis+sentinel://h:70000/m",
            "redis+sentinel://[::1/m",
            "redis+sentinel://[::1]x/m",
            "redis+sentinel://::1/m",
            "redis+sentinel://h/m/db",
            "redis+sentinel://h/m/-1",
            "redis+sentinel://h/m/1/2",
            "redis+sentinel://h/m?password=x",
            "redis+sentinel://h/m#frag",
            "redis+sentinel://:p%zz@h/m",
            "rediss+sentinel://h/m#verify",
        ] {
            assert!(Sentinel::parse(url, None).is_err(), "{url}");
        }
        // A CA goes with TLS only.
        assert!(Sentinel::parse("redis+sentinel://h/m", Some(b"pem")).is_err());
        let s = Sentinel::parse("rediss+sentinel://h/m#insecure", None).unwrap();
        assert_eq!(s.display(), "rediss+sentinel://h:26379/m");
    }

    #[test]
    fn only_master_role_passes() {
        let master = Value::Array(vec![Value::BulkString(b"master".to_vec()), Value::Int(0)]);
        assert!(check_master(&master, "x").is_ok());
        let replica = Value::Array(vec![Value::BulkString(b"slave".to_vec())]);
        let err = check_master(&replica, "x").unwrap_err();
        assert_eq!(err.failure(), Failure::Io, "{err}");
    }
}
