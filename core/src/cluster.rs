//! A Redis Cluster as one voter: every request about a lock goes to the master that serves
//! the lock's hash slot (all of a lock's keys share it, see `keys.rs`).
//!
//! ```text
//! redis+cluster://[[user]:password@]host[:port][,host2[:port2],...][/]
//! ```
//!
//! The hosts are seeds: any reachable one tells the slot map (`CLUSTER SLOTS`); the
//! credentials are those of every cluster node; a host without a port listens on 6379.
//!
//! Requests are pipelined to each master as they are to a single server. A `MOVED` reply
//! (resharding, a failover) updates the map and sends the request again to the new owner; an
//! `ASK` reply sends it once, after `ASKING`, to the node that imports the slot; `TRYAGAIN`
//! (a lock's keys split between two nodes in the middle of a migration) is retried after a
//! short pause. All of that happens within the request's own deadline. A master that cannot
//! be reached, or that answers `READONLY` or `CLUSTERDOWN`, marks the map stale: the next
//! request asks the cluster again, and so finds a promoted replica.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use redis::{IntoConnectionInfo, RedisConnectionInfo, RedisError, Value};

use crate::node::{self, Endpoint};
use crate::sync::{Mutex, RwLock};
use crate::url::{has_scheme, host_port, parse_host, userinfo_settings};

/// The URL scheme of a Redis Cluster.
pub(crate) const SCHEME: &str = "redis+cluster://";
/// The TLS variant, recognised only to reject it clearly.
const TLS_SCHEME: &str = "rediss+cluster://";
/// The port of a seed given without one.
const DEFAULT_PORT: u16 = 6379;
/// Redis Cluster's number of hash slots.
const SLOTS: usize = 16384;
/// No master is known for a slot.
const NONE: u16 = u16::MAX;
/// A stale map is asked for again at most this often, however many requests fail.
const REFRESH_EVERY: Duration = Duration::from_millis(20);

/// Whether `url` is a cluster URL (either scheme, any case).
pub(crate) fn is_cluster_url(url: &str) -> bool {
    has_scheme(url, SCHEME) || has_scheme(url, TLS_SCHEME)
}

/// One Redis Cluster: its seeds, its credentials and what it last said about its slots.
pub(crate) struct Cluster {
    seeds: Vec<(String, u16)>,
    settings: RedisConnectionInfo,
    client_name: Arc<str>,
    connect_timeout: Duration,
    display: String,
    map: RwLock<SlotMap>,
    /// Every master seen so far, with its pool; kept across map changes.
    endpoints: Mutex<HashMap<(String, u16), Arc<Endpoint>>>,
    /// Held while one thread asks the cluster for its slots.
    refreshing: Mutex<()>,
    /// Which candidate a refresh asks first.
    first: AtomicUsize,
}

struct SlotMap {
    /// For each slot, an index into `masters`, or `NONE`.
    owners: Vec<u16>,
    masters: Vec<Arc<Endpoint>>,
    /// A request failed in a way that suggests the map is out of date.
    stale: bool,
    /// When the cluster was last asked.
    asked: Option<Instant>,
}

/// Where a redirected request goes next.
pub(crate) enum Redirect {
    /// Again, to the slot's (possibly new) owner.
    To(Arc<Endpoint>),
    /// Once, after `ASKING`, to a node importing the slot.
    Ask(Arc<Endpoint>),
    /// Again, to the same node, after a short pause.
    Retry,
}

impl Cluster {
    /// Parses a `redis+cluster://` URL. The error message never contains the password.
    pub(crate) fn parse(
        url: &str,
        client_name: &str,
        connect_timeout: Duration,
    ) -> Result<Cluster, String> {
        if has_scheme(url, TLS_SCHEME) {
            return Err("TLS to a Redis Cluster (rediss+cluster://) is not supported yet".into());
        }
        if !has_scheme(url, SCHEME) {
            return Err(format!("a Redis Cluster URL starts with {SCHEME}"));
        }
        let rest = &url[SCHEME.len()..];
        if rest.contains(['#', '?']) {
            return Err("a Redis Cluster URL has no ?query or #fragment".into());
        }
        let authority = match rest.split_once('/') {
            Some((a, "")) => a,
            Some(_) => {
                return Err(
                    "a Redis Cluster URL has no path (a cluster has only database 0)".into(),
                );
            }
            None => rest,
        };
        let (userinfo, hosts) = match authority.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, authority),
        };
        let seeds = hosts
            .split(',')
            .map(|h| parse_host(h, DEFAULT_PORT))
            .collect::<Result<Vec<_>, _>>()?;
        let settings = userinfo_settings(userinfo)?;
        Ok(Cluster::new(seeds, settings, client_name, connect_timeout))
    }

    /// A cluster from seed URLs (`redis://[[user]:password@]host:port`), the form of
    /// `ClientBuilder::cluster`. Credentials, if any, must be the same in every seed.
    pub(crate) fn from_seeds(
        urls: &[String],
        client_name: &str,
        connect_timeout: Duration,
    ) -> Result<Cluster, String> {
        if urls.is_empty() {
            return Err("a cluster needs at least one seed URL".into());
        }
        let mut seeds = Vec::with_capacity(urls.len());
        let mut settings: Option<RedisConnectionInfo> = None;
        for url in urls {
            let info = url
                .as_str()
                .into_connection_info()
                .map_err(|e| format!("malformed seed URL {}: {e}", node::redact(url)))?;
            let redis::ConnectionAddr::Tcp(host, port) = info.addr() else {
                return Err(format!(
                    "cluster seeds are redis://host:port URLs, got {}",
                    node::redact(url)
                ));
            };
            let s = info.redis_settings();
            if s.db() != 0 {
                return Err("a cluster has only database 0".into());
            }
            match &settings {
                None => settings = Some(s.clone()),
                Some(first)
                    if first.username() != s.username() || first.password() != s.password() =>
                {
                    return Err("every seed of a cluster must carry the same credentials".into());
                }
                Some(_) => {}
            }
            seeds.push((host.clone(), *port));
        }
        Ok(Cluster::new(
            seeds,
            settings.unwrap_or_default(),
            client_name,
            connect_timeout,
        ))
    }

    fn new(
        seeds: Vec<(String, u16)>,
        settings: RedisConnectionInfo,
        client_name: &str,
        connect_timeout: Duration,
    ) -> Cluster {
        let user = settings
            .username()
            .map(|u| format!("{u}@"))
            .unwrap_or_default();
        let hosts: Vec<String> = seeds.iter().map(|(h, p)| host_port(h, *p)).collect();
        Cluster {
            display: format!("{SCHEME}{user}{}", hosts.join(",")),
            seeds,
            settings,
            client_name: client_name.into(),
            connect_timeout,
            map: RwLock::new(SlotMap {
                owners: vec![NONE; SLOTS],
                masters: Vec::new(),
                stale: true,
                asked: None,
            }),
            endpoints: Mutex::new(HashMap::new()),
            refreshing: Mutex::new(()),
            first: AtomicUsize::new(0),
        }
    }

    /// The URL without credentials.
    pub(crate) fn display(&self) -> &str {
        &self.display
    }

    /// How long opening a connection to one of its nodes may take.
    pub(crate) fn connect_timeout(&self) -> Duration {
        self.connect_timeout
    }

    /// The master that serves `slot`, asking the cluster first when the map is missing or
    /// stale. A stale map that cannot be refreshed is still used: the master may answer.
    pub(crate) fn endpoint(
        &self,
        slot: u16,
        deadline: Instant,
    ) -> Result<Arc<Endpoint>, RedisError> {
        let known = {
            let map = self.map.read();
            let due = map.stale && map.asked.is_none_or(|t| t.elapsed() >= REFRESH_EVERY);
            match map.owner(slot) {
                Some(e) if !due => return Ok(e),
                known => known.is_some(),
            }
        };
        // With a master already known, the request keeps half its time for itself.
        let refresh_by = if known {
            let now = Instant::now();
            now + deadline.saturating_duration_since(now) / 2
        } else {
            deadline
        };
        let refreshed = self.refresh(refresh_by);
        match self.map.read().owner(slot) {
            Some(e) => Ok(e),
            None => Err(refreshed.err().unwrap_or_else(|| {
                RedisError::from((
                    redis::ErrorKind::Io,
                    "slot not served",
                    format!("no master of {} serves slot {slot}", self.display),
                ))
            })),
        }
    }

    /// Says that a request failed in a way that suggests the map is out of date.
    pub(crate) fn mark_stale(&self) {
        self.map.write().stale = true;
    }

    /// What to do about a `MOVED`, `ASK` or `TRYAGAIN` reply, or `None` for any other error.
    /// A `MOVED` updates the map at once (and marks it stale, so that the rest of it is asked
    /// for too).
    pub(crate) fn redirect(&self, e: &RedisError) -> Option<Redirect> {
        match e.code()? {
            "TRYAGAIN" => Some(Redirect::Retry),
            "MOVED" | "ASK" => {
                let (addr, slot) = e.redirect_node()?;
                let (host, port) = split_addr(addr)?;
                let endpoint = self.master(&host, port).ok()?;
                if e.code() == Some("ASK") {
                    return Some(Redirect::Ask(endpoint));
                }
                let mut map = self.map.write();
                let at = index_of(&mut map.masters, &endpoint);
                if let Some(owner) = map.owners.get_mut(usize::from(slot)) {
                    *owner = at;
                }
                map.stale = true;
                Some(Redirect::To(endpoint))
            }
            _ => None,
        }
    }

    /// The endpoint of the master at `host:port`, made on first sight.
    fn master(&self, host: &str, port: u16) -> Result<Arc<Endpoint>, RedisError> {
        let mut endpoints = self.endpoints.lock();
        if let Some(e) = endpoints.get(&(host.to_owned(), port)) {
            return Ok(Arc::clone(e));
        }
        let e = Arc::new(Endpoint::cluster_master(
            host,
            port,
            &self.settings,
            Arc::clone(&self.client_name),
            self.connect_timeout,
        )?);
        endpoints.insert((host.to_owned(), port), Arc::clone(&e));
        Ok(e)
    }

    /// Asks the known masters, then the seeds, for the slot map, until one answers or the
    /// deadline passes. One thread asks at a time; the others wait for its answer.
    fn refresh(&self, deadline: Instant) -> Result<(), RedisError> {
        let left = node::remaining(deadline)?;
        let Some(_asking) = self.refreshing.try_lock_for(left) else {
            return Err(node::timed_out());
        };
        let mut candidates: Vec<(String, u16)> = Vec::new();
        {
            let map = self.map.read();
            if map.asked.is_some_and(|t| t.elapsed() < REFRESH_EVERY) {
                // Another thread has just asked.
                return Ok(());
            }
            for m in &map.masters {
                if let Some(addr) = split_addr(m.name()) {
                    candidates.push(addr);
                }
            }
        }
        for s in &self.seeds {
            if !candidates.contains(s) {
                candidates.push(s.clone());
            }
        }
        // Start where the last refresh succeeded, or after the node that failed it: a frozen
        // master must not use up every refresh's deadline.
        let n = candidates.len();
        let start = self.first.load(Ordering::Relaxed) % n.max(1);
        let mut last = None;
        for k in 0..n {
            let at = (start + k) % n;
            let (host, port) = &candidates[at];
            match self.ask_slots(host, *port, deadline) {
                Ok(ranges) => {
                    self.first.store(at, Ordering::Relaxed);
                    self.install(&ranges)?;
                    return Ok(());
                }
                Err(e) => {
                    log::debug!("{host}:{port} did not tell the cluster's slots: {e}");
                    last = Some(e);
                    self.first.store(at + 1, Ordering::Relaxed);
                    if node::remaining(deadline).is_err() {
                        break;
                    }
                }
            }
        }
        self.map.write().asked = Some(Instant::now());
        Err(last.unwrap_or_else(node::timed_out))
    }

    fn ask_slots(
        &self,
        host: &str,
        port: u16,
        deadline: Instant,
    ) -> Result<Vec<(u16, u16, String, u16)>, RedisError> {
        let endpoint = self.master(host, port)?;
        let mut conn = endpoint.take_or_connect(deadline)?;
        node::set_timeouts(&conn, deadline)?;
        let reply: Value = redis::cmd("CLUSTER").arg("SLOTS").query(&mut conn)?;
        endpoint.put(conn);
        parse_slots(&reply, host).ok_or_else(|| {
            RedisError::from((
                redis::ErrorKind::UnexpectedReturnType,
                "unexpected CLUSTER SLOTS reply",
                format!("{reply:?}"),
            ))
        })
    }

    fn install(&self, ranges: &[(u16, u16, String, u16)]) -> Result<(), RedisError> {
        let mut owners = vec![NONE; SLOTS];
        let mut masters: Vec<Arc<Endpoint>> = Vec::new();
        for (start, end, host, port) in ranges {
            let at = index_of(&mut masters, &self.master(host, *port)?);
            for slot in *start..=*end {
                owners[usize::from(slot)] = at;
            }
        }
        *self.map.write() = SlotMap {
            owners,
            masters,
            stale: false,
            asked: Some(Instant::now()),
        };
        Ok(())
    }
}

impl SlotMap {
    fn owner(&self, slot: u16) -> Option<Arc<Endpoint>> {
        let at = *self.owners.get(usize::from(slot))?;
        self.masters.get(usize::from(at)).cloned()
    }
}

/// The index of `endpoint` in `masters`, where it is added if it is new.
fn index_of(masters: &mut Vec<Arc<Endpoint>>, endpoint: &Arc<Endpoint>) -> u16 {
    match masters.iter().position(|m| Arc::ptr_eq(m, endpoint)) {
        Some(at) => at as u16,
        None => {
            masters.push(Arc::clone(endpoint));
            (masters.len() - 1) as u16
        }
    }
}

/// `(start, end, master host, master port)` for each range of a `CLUSTER SLOTS` reply. An
/// empty host (a node that does not know its own address) means the node that was asked.
fn parse_slots(reply: &Value, asked: &str) -> Option<Vec<(u16, u16, String, u16)>> {
    let Value::Array(entries) = reply else {
        return None;
    };
    let mut ranges = Vec::with_capacity(entries.len());
    for entry in entries {
        let Value::Array(fields) = entry else {
            return None;
        };
        let [start, end, master, ..] = fields.as_slice() else {
            return None;
        };
        let Value::Array(master) = master else {
            return None;
        };
        let (host, port) = match master.as_slice() {
            [host, port, ..] => (text(host)?, int(port)?),
            _ => return None,
        };
        let host = if host.is_empty() || host == "?" {
            asked.to_owned()
        } else {
            host
        };
        let (start, end) = (int(start)?, int(end)?);
        if start > end || usize::from(end) >= SLOTS {
            return None;
        }
        ranges.push((start, end, host, port));
    }
    Some(ranges)
}

fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    }
}

fn int(v: &Value) -> Option<u16> {
    match v {
        Value::Int(i) => u16::try_from(*i).ok(),
        _ => None,
    }
}

/// `host:port` or `[v6]:port` (or a bare `v6:port`, as `MOVED` replies write it).
fn split_addr(addr: &str) -> Option<(String, u16)> {
    let (host, port) = addr.rsplit_once(':')?;
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    Some((host.to_owned(), port.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(url: &str) -> Result<Cluster, String> {
        Cluster::parse(url, "t", Duration::from_secs(1))
    }

    #[test]
    fn parses_the_documented_forms() {
        let c = parse("redis+cluster://h1:7000,h2,[::1]:7002").unwrap();
        assert_eq!(
            c.seeds,
            vec![
                ("h1".to_owned(), 7000),
                ("h2".to_owned(), 6379),
                ("::1".to_owned(), 7002)
            ]
        );
        assert_eq!(c.display(), "redis+cluster://h1:7000,h2:6379,[::1]:7002");

        let c = parse("REDIS+CLUSTER://alice:p%40ss@h:1/").unwrap();
        assert_eq!(c.settings.username(), Some("alice"));
        assert_eq!(c.settings.password(), Some("p@ss"));
        assert_eq!(c.display(), "redis+cluster://alice@h:1");

        let c = Cluster::from_seeds(
            &["redis://:pw@h1:7000".into(), "redis://:pw@h2:7001".into()],
            "t",
            Duration::from_secs(1),
        )
        .unwrap();
        assert_eq!(c.settings.password(), Some("pw"));
        assert_eq!(c.display(), "redis+cluster://h1:7000,h2:7001");
    }

    #[test]
    fn rejects_malformed_urls() {
        for url in [
            "redis+cluster://",
            "redis+cluster://h1,,h2",
            "redis+cluster://h:0",
            "redis+cluster://h:x",
            "redis+cluster://h/0",
            "redis+cluster://h?password=x",
            "redis+cluster://h#frag",
            "redis+cluster://:p%zz@h",
            "rediss+cluster://h",
        ] {
            assert!(parse(url).is_err(), "{url}");
        }
        for seeds in [
            vec![],
            vec!["redis://h:1/2".to_owned()],
            vec!["unix:///tmp/x.sock".to_owned()],
            vec!["redis://:a@h:1".to_owned(), "redis://:b@h:2".to_owned()],
            vec!["nonsense".to_owned()],
        ] {
            assert!(
                Cluster::from_seeds(&seeds, "t", Duration::from_secs(1)).is_err(),
                "{seeds:?}"
            );
        }
    }

    #[test]
    fn reads_cluster_slots_replies() {
        let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        let reply = Value::Array(vec![
            Value::Array(vec![
                Value::Int(0),
                Value::Int(5460),
                Value::Array(vec![bulk("10.0.0.1"), Value::Int(7000), bulk("id1")]),
                Value::Array(vec![bulk("10.0.0.4"), Value::Int(7003), bulk("id4")]),
            ]),
            Value::Array(vec![
                Value::Int(5461),
                Value::Int(16383),
                Value::Array(vec![bulk(""), Value::Int(7001)]),
            ]),
        ]);
        assert_eq!(
            parse_slots(&reply, "seed").unwrap(),
            vec![
                (0, 5460, "10.0.0.1".to_owned(), 7000),
                (5461, 16383, "seed".to_owned(), 7001)
            ]
        );
        assert!(parse_slots(&Value::Nil, "x").is_none());
        let bad = Value::Array(vec![Value::Array(vec![Value::Int(5), Value::Int(1)])]);
        assert!(parse_slots(&bad, "x").is_none());
        assert_eq!(split_addr("::1:7000"), Some(("::1".to_owned(), 7000)));
        assert_eq!(split_addr("[::1]:7000"), Some(("::1".to_owned(), 7000)));
        assert_eq!(split_addr("h"), None);
    }
}
