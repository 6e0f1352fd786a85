//! A Redis Cluster as one voter: every request about a lock goes to the master that serves
//! the lock's hash slot (all of a lock's keys share it, see `keys.rs`).
//!
//! ```text
//! redis+cluster://[[user]:password@]host[:port][,host2[:port2],...][/]
//! rediss+cluster://…same…[#insecure]
//! ```
//!
//! The hosts are seeds: any reachable one tells the slot map (`CLUSTER SLOTS`); the
//! credentials are those of every cluster node; a host without a port listens on 6379. With
//! `rediss+cluster://` every connection to the cluster is made over TLS.
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

use redis::{IntoConnectionInfo, RedisConnectionInfo, Value};

use super::conn::{remaining, set_timeouts};
use super::endpoint::{Endpoint, Setup};
use super::slots::{SLOTS, index_of, parse_slots, split_addr};
use super::url::{Schemes, Tls, host_port, parse_host, redact, tls_for, userinfo_settings};
use crate::sync::{LocalMutex, LocalRwLock};
use crate::wire::{Failure, NetError};

/// The URL schemes of a Redis Cluster.
pub(crate) const SCHEMES: Schemes = Schemes {
    plain: "redis+cluster://",
    tls: "rediss+cluster://",
};
/// The port of a seed given without one.
const DEFAULT_PORT: u16 = 6379;
/// No master is known for a slot.
const NONE: u16 = u16::MAX;
/// A stale map is asked for again at most this often, however many requests fail.
const REFRESH_EVERY: Duration = Duration::from_millis(20);

/// One Redis Cluster: its seeds, its credentials and what it last said about its slots.
pub(crate) struct Cluster {
    seeds: Vec<(String, u16)>,
    settings: RedisConnectionInfo,
    tls: Tls,
    setup: Setup,
    display: String,
    map: LocalRwLock<SlotMap>,
    /// Every master seen so far, with its pool; kept across map changes. `None` once the
    /// client is gone ([`Cluster::close`]).
    endpoints: LocalMutex<Option<Masters>>,
    /// Held while one thread asks the cluster for its slots.
    refreshing: LocalMutex<()>,
    /// Which candidate a refresh asks first.
    first: AtomicUsize,
}

/// The masters seen so far, by host and port.
type Masters = HashMap<(String, u16), Arc<Endpoint>>;

struct SlotMap {
    /// For each slot, an index into `masters`, or `NONE`.
    owners: Vec<u16>,
    masters: Vec<Arc<Endpoint>>,
    /// A request failed in a way that suggests the map is out of date.
    stale: bool,
    /// When the cluster was last asked.
    asked: Option<Instant>,
    /// Why the last time it was asked failed, for requests until the next time: a
    /// certificate that does not verify must read as one, not as a slot nobody serves.
    failed: Option<NetError>,
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
    /// Parses a `redis+cluster://` or `rediss+cluster://` URL; `ca` (PEM) is the CA that
    /// TLS certificates must chain to. The error message never contains the password.
    pub(crate) fn parse(url: &str, ca: Option<&[u8]>, setup: Setup) -> Result<Cluster, String> {
        let (rest, tls) = SCHEMES.split(url, ca, "a Redis Cluster URL")?;
        if rest.contains('?') {
            return Err("a Redis Cluster URL has no ?query".into());
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
        Ok(Cluster::new(seeds, settings, tls, setup))
    }

    /// A cluster from seed URLs (`redis://[[user]:password@]host:port`, or all `rediss://`
    /// for TLS), the form of `ClientBuilder::cluster`. Credentials, if any, must be the same
    /// in every seed.
    pub(crate) fn from_seeds(
        urls: &[String],
        ca: Option<&[u8]>,
        setup: Setup,
    ) -> Result<Cluster, String> {
        if urls.is_empty() {
            return Err("a cluster needs at least one seed URL".into());
        }
        let mut seeds = Vec::with_capacity(urls.len());
        let mut settings: Option<RedisConnectionInfo> = None;
        let mut tls_seen: Option<(bool, bool)> = None;
        for url in urls {
            let info = url
                .as_str()
                .into_connection_info()
                .map_err(|e| format!("malformed seed URL {}: {e}", redact(url)))?;
            let (host, port, tls) = match info.addr() {
                redis::ConnectionAddr::Tcp(host, port) => (host, port, (false, false)),
                redis::ConnectionAddr::TcpTls {
                    host,
                    port,
                    insecure,
                    ..
                } => (host, port, (true, *insecure)),
                _ => {
                    return Err(format!(
                        "cluster seeds are redis://host:port or rediss://host:port URLs, got {}",
                        redact(url)
                    ));
                }
            };
            if *tls_seen.get_or_insert(tls) != tls {
                return Err(
                    "every seed of a cluster must use the same scheme (redis:// or rediss://) \
                     and #insecure setting"
                        .into(),
                );
            }
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
        let (tls_on, insecure) = tls_seen.unwrap_or_default();
        let tls = tls_for(tls_on, insecure, ca, "the cluster seed URLs")?;
        Ok(Cluster::new(
            seeds,
            settings.unwrap_or_default(),
            tls,
            setup,
        ))
    }

    fn new(
        seeds: Vec<(String, u16)>,
        settings: RedisConnectionInfo,
        tls: Tls,
        setup: Setup,
    ) -> Cluster {
        let user = settings
            .username()
            .map(|u| format!("{u}@"))
            .unwrap_or_default();
        let hosts: Vec<String> = seeds.iter().map(|(h, p)| host_port(h, *p)).collect();
        let scheme = if tls.is_on() {
            SCHEMES.tls
        } else {
            SCHEMES.plain
        };
        Cluster {
            display: format!("{scheme}{user}{}", hosts.join(",")),
            seeds,
            settings,
            tls,
            setup,
            map: LocalRwLock::new(SlotMap {
                owners: vec![NONE; SLOTS],
                masters: Vec::new(),
                stale: true,
                asked: None,
                failed: None,
            }),
            endpoints: LocalMutex::new(Some(HashMap::new())),
            refreshing: LocalMutex::new(()),
            first: AtomicUsize::new(0),
        }
    }

    /// The URL without credentials.
    pub(crate) fn display(&self) -> &str {
        &self.display
    }

    /// How long opening a connection to one of its nodes may take.
    pub(crate) fn connect_timeout(&self) -> Duration {
        self.setup.connect_timeout
    }

    /// The master that serves `slot`, asking the cluster first when the map is missing or
    /// stale. A stale map that cannot be refreshed is still used: the master may answer.
    pub(crate) fn endpoint(&self, slot: u16, deadline: Instant) -> Result<Arc<Endpoint>, NetError> {
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
        let map = self.map.read();
        match map.owner(slot) {
            Some(e) => Ok(e),
            None => Err(refreshed
                .err()
                .or_else(|| map.failed.clone())
                .unwrap_or_else(|| {
                    NetError::new(
                        Failure::Io,
                        std::io::ErrorKind::NotConnected,
                        format!("no master of {} serves slot {slot}", self.display),
                    )
                })),
        }
    }

    /// One slot served by each master, asking the cluster first when the map is missing or
    /// stale: a request keyed to it reaches that master (a `SCAN` of every master's keys).
    pub(crate) fn master_slots(&self, deadline: Instant) -> Result<Vec<u16>, NetError> {
        let (known, due) = {
            let map = self.map.read();
            (!map.masters.is_empty(), map.stale || map.asked.is_none())
        };
        if !known || due {
            let refreshed = self.refresh(deadline);
            if !known {
                refreshed?;
            }
        }
        let map = self.map.read();
        let mut first: Vec<Option<u16>> = vec![None; map.masters.len()];
        for (slot, &at) in (0u16..).zip(&map.owners) {
            if let Some(f) = first.get_mut(usize::from(at)) {
                f.get_or_insert(slot);
            }
        }
        Ok(first.into_iter().flatten().collect())
    }

    /// Says that a request failed in a way that suggests the map is out of date.
    pub(crate) fn mark_stale(&self) {
        self.map.write().stale = true;
    }

    /// What to do about a `MOVED`, `ASK` or `TRYAGAIN` reply, or `None` for any other error.
    /// A `MOVED` updates the map at once (and marks it stale, so that the rest of it is asked
    /// for too).
    pub(crate) fn redirect(&self, e: &redis::RedisError) -> Option<Redirect> {
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
    fn master(&self, host: &str, port: u16) -> Result<Arc<Endpoint>, NetError> {
        let mut endpoints = self.endpoints.lock();
        let key = (host.to_owned(), port);
        if let Some(e) = endpoints.as_ref().and_then(|known| known.get(&key)) {
            return Ok(Arc::clone(e));
        }
        let e = Arc::new(Endpoint::cluster_master(
            host,
            port,
            &self.settings,
            &self.tls,
            &self.setup,
        )?);
        match endpoints.as_mut() {
            Some(known) => {
                known.insert(key, Arc::clone(&e));
            }
            // The client is gone (a connection still being opened for it learned of a new
            // master): nothing is pooled for it any more.
            None => e.close(),
        }
        Ok(e)
    }

    /// What the masters connected to so far said they are (see [`Endpoint::server`]), each
    /// different answer once, sorted.
    pub(crate) fn servers(&self) -> Vec<String> {
        let mut said: Vec<String> = self
            .endpoints
            .lock()
            .iter()
            .flat_map(|known| known.values())
            .filter_map(|e| e.server().map(str::to_owned))
            .collect();
        said.sort();
        said.dedup();
        said
    }

    /// Connections open now to every master seen so far.
    pub(crate) fn open_connections(&self) -> u64 {
        self.endpoints
            .lock()
            .iter()
            .flat_map(|known| known.values())
            .map(|e| e.open_connections())
            .sum()
    }

    /// Closes every master's pooled connections, and those of masters seen later (see
    /// [`Endpoint::close`]): the client is gone.
    pub(crate) fn close(&self) {
        let known = self.endpoints.lock().take();
        for e in known.into_iter().flat_map(HashMap::into_values) {
            e.close();
        }
    }

    /// Asks the known masters, then the seeds, for the slot map, until one answers or the
    /// deadline passes. One thread asks at a time; the others wait for its answer.
    fn refresh(&self, deadline: Instant) -> Result<(), NetError> {
        let left = remaining(deadline)?;
        let Some(_asking) = self.refreshing.try_lock_for(left) else {
            return Err(NetError::timeout());
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
                    if remaining(deadline).is_err() {
                        break;
                    }
                }
            }
        }
        let failed = last.unwrap_or_else(NetError::timeout);
        let mut map = self.map.write();
        map.asked = Some(Instant::now());
        map.failed = Some(failed.clone());
        Err(failed)
    }

    fn ask_slots(
        &self,
        host: &str,
        port: u16,
        deadline: Instant,
    ) -> Result<Vec<(u16, u16, String, u16)>, NetError> {
        let endpoint = self.master(host, port)?;
        let mut conn = endpoint.take_or_connect(deadline)?;
        set_timeouts(&conn, deadline)?;
        let reply: Value = redis::cmd("CLUSTER").arg("SLOTS").query(&mut conn)?;
        endpoint.put(conn);
        parse_slots(&reply, host).ok_or_else(|| {
            NetError::new(
                Failure::Io,
                std::io::ErrorKind::InvalidData,
                format!("{host}:{port} sent a CLUSTER SLOTS reply that could not be read"),
            )
        })
    }

    fn install(&self, ranges: &[(u16, u16, String, u16)]) -> Result<(), NetError> {
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
            failed: None,
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

#[cfg(test)]
mod tests;
