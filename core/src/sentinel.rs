//! A node behind Redis Sentinel: the `redis+sentinel://` URL form, and finding the current
//! master before each new connection.
//!
//! ```text
//! redis+sentinel://[[user]:password@]host[:port][,host2[:port2],...]/master-name[/db]
//!     [?sentinel_username=...&sentinel_password=...]
//! ```
//!
//! The same grammar as the `redis+sentinel://` URLs of redis-py helpers (Redis-Sentinel-Url,
//! Prefect, RedisVL): sentinels are comma-separated and default to port 26379, the path is the
//! master name and an optional database number, and the user-info credentials are those of the
//! master. The sentinels themselves are asked without credentials unless the
//! `sentinel_username` / `sentinel_password` query parameters are given.
//!
//! A new connection asks the sentinels in order (the one that answered last first), each
//! bounded by the caller's deadline, for `SENTINEL get-master-addr-by-name`, connects to that
//! address and checks with `ROLE` that it is a master: a just-demoted master is never used.
//! Pooled connections to a master that failed over break (or answer `READONLY`, and are then
//! dropped by the pool), so the next round resolves the new master.

use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use redis::{ConnectionAddr, IntoConnectionInfo, RedisConnectionInfo, RedisError, Value};

use crate::client::SentinelMaster;
use crate::node;
use crate::url::{decode, has_scheme, host_port, parse_host, userinfo_settings};

/// The URL scheme of a node behind Redis Sentinel.
pub(crate) const SCHEME: &str = "redis+sentinel://";
/// The TLS variant, recognised only to reject it clearly.
const TLS_SCHEME: &str = "rediss+sentinel://";
/// The port of a sentinel given without one.
pub(crate) const DEFAULT_PORT: u16 = 26379;

/// Whether `url` is a Sentinel URL (either scheme, any case).
pub(crate) fn is_sentinel_url(url: &str) -> bool {
    has_scheme(url, SCHEME) || has_scheme(url, TLS_SCHEME)
}

/// One master name watched by a group of sentinels.
pub(crate) struct Sentinel {
    sentinels: Vec<(String, u16)>,
    master_name: String,
    /// Credentials and database of the master.
    master: RedisConnectionInfo,
    /// Credentials of the sentinels.
    auth: RedisConnectionInfo,
    /// The sentinel that answered last, asked first next time.
    first: AtomicUsize,
    display: String,
}

impl Sentinel {
    /// Parses a `redis+sentinel://` URL. The error message never contains the password.
    pub(crate) fn parse(url: &str) -> Result<Sentinel, String> {
        if has_scheme(url, TLS_SCHEME) {
            return Err("TLS to Sentinel groups (rediss+sentinel://) is not supported yet".into());
        }
        if !has_scheme(url, SCHEME) {
            return Err(format!("a Sentinel URL starts with {SCHEME}"));
        }
        let rest = &url[SCHEME.len()..];
        if rest.contains('#') {
            return Err("a Sentinel URL has no #fragment".into());
        }
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

        Ok(Sentinel::new(sentinels, master_name, master, auth))
    }

    /// A group from sentinel URLs (`redis://[[user]:password@]host[:port]`, port 26379 when
    /// left out) and its master: the form of `ClientBuilder::sentinel`. Credentials in the
    /// URLs are the sentinels' and must be the same in all of them.
    pub(crate) fn from_parts(urls: &[String], master: &SentinelMaster) -> Result<Sentinel, String> {
        if urls.is_empty() {
            return Err("a Sentinel group needs at least one sentinel URL".into());
        }
        if master.name.is_empty() {
            return Err("the master name is empty".into());
        }
        if master.db < 0 {
            return Err(format!(
                "the database must not be negative, got {}",
                master.db
            ));
        }
        let mut sentinels = Vec::with_capacity(urls.len());
        let mut auth: Option<RedisConnectionInfo> = None;
        for url in urls {
            if !has_scheme(url, "redis://") {
                return Err(format!(
                    "sentinels are redis://host[:port] URLs, got {}",
                    node::redact(url)
                ));
            }
            let authority = url["redis://".len()..].trim_end_matches('/');
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
        let mut settings = RedisConnectionInfo::default().set_db(master.db);
        if let Some(u) = &master.username {
            settings = settings.set_username(u);
        }
        if let Some(p) = &master.password {
            settings = settings.set_password(p);
        }
        Ok(Sentinel::new(
            sentinels,
            master.name.clone(),
            settings,
            auth.unwrap_or_default(),
        ))
    }

    fn new(
        sentinels: Vec<(String, u16)>,
        master_name: String,
        master: RedisConnectionInfo,
        auth: RedisConnectionInfo,
    ) -> Sentinel {
        let hosts: Vec<String> = sentinels.iter().map(|(h, p)| host_port(h, *p)).collect();
        let display = format!(
            "{SCHEME}{}{}/{}{}",
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
    ) -> Result<redis::Connection, RedisError> {
        let (host, port) = self.master_addr(deadline, connect_timeout)?;
        let info = ConnectionAddr::Tcp(host, port)
            .into_connection_info()?
            .set_redis_settings(self.master.clone());
        let budget = node::remaining(deadline)?.min(connect_timeout);
        node::open_connection(&redis::Client::open(node::without_setinfo(info))?, budget)
    }

    /// The master's address according to the first sentinel that answers.
    fn master_addr(
        &self,
        deadline: Instant,
        connect_timeout: Duration,
    ) -> Result<(String, u16), RedisError> {
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
                    if node::remaining(deadline).is_err() {
                        break;
                    }
                }
            }
        }
        Err(last.unwrap_or_else(node::timed_out))
    }

    fn ask(
        &self,
        i: usize,
        deadline: Instant,
        connect_timeout: Duration,
    ) -> Result<(String, u16), RedisError> {
        let (host, port) = &self.sentinels[i];
        let info = ConnectionAddr::Tcp(host.clone(), *port)
            .into_connection_info()?
            .set_redis_settings(self.auth.clone());
        let budget = node::remaining(deadline)?.min(connect_timeout);
        let client = redis::Client::open(node::without_setinfo(info))?;
        let mut conn = node::open_connection(&client, budget)?;
        node::set_timeouts(&conn, deadline)?;
        let addr: Option<(String, u16)> = redis::cmd("SENTINEL")
            .arg("get-master-addr-by-name")
            .arg(&self.master_name)
            .query(&mut conn)?;
        addr.ok_or_else(|| {
            RedisError::from((
                redis::ErrorKind::MasterNameNotFoundBySentinel,
                "unknown master name",
                format!(
                    "sentinel {host}:{port} monitors no master named {:?}",
                    self.master_name
                ),
            ))
        })
    }
}

/// Fails unless `role` (the reply to `ROLE`) says master: a server that the sentinels still
/// name but that was demoted (or not yet promoted) must not take locks.
pub(crate) fn check_master(role: &Value, display: &str) -> Result<(), RedisError> {
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
        Err(RedisError::from(io::Error::new(
            io::ErrorKind::ConnectionAborted,
            format!("the master of {display} answers ROLE {role}: a failover is in progress"),
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_documented_forms() {
        let s = Sentinel::parse("redis+sentinel://s1,s2:26380,[::1]:26381/mymaster").unwrap();
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
        )
        .unwrap();
        assert_eq!(s.master.username(), Some("alice"));
        assert_eq!(s.master.password(), Some("p@ss"));
        assert_eq!(s.master.db(), 3);
        assert_eq!(s.auth.username(), Some("su"));
        assert_eq!(s.auth.password(), Some("sp"));
        assert_eq!(s.display(), "redis+sentinel://alice@h:1/m x/3");

        let s = Sentinel::parse("redis+sentinel://:pw@h/m/").unwrap();
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
            "rediss+sentinel://h/m",
        ] {
            assert!(Sentinel::parse(url).is_err(), "{url}");
        }
    }

    #[test]
    fn only_master_role_passes() {
        let master = Value::Array(vec![Value::BulkString(b"master".to_vec()), Value::Int(0)]);
        assert!(check_master(&master, "x").is_ok());
        let replica = Value::Array(vec![Value::BulkString(b"slave".to_vec())]);
        let err = check_master(&replica, "x").unwrap_err();
        assert!(err.is_io_error(), "{err}");
    }
}
