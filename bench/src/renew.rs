//! The renew-scale row: one process holds many auto-renewed locks for a while.

use std::collections::HashMap;
use std::time::Duration;

use crate::child::{CHURN_CHILD, RENEW_CHILD};
use crate::proc::{Proc, num};
use crate::stats::ns;

pub struct Renew {
    pub locks: u64,
    pub hold_ns: u64,
    pub ttl_ns: u64,
    /// Guards that were not held at the end, or ever during the hold (sampled every 250 ms).
    pub lost: u64,
    /// Keys whose value in Redis was not the guard's token at the end.
    pub lost_redis: u64,
    pub renew_threads: u64,
    pub renew_cpu_ns: u64,
    /// Highest VmRSS during the hold minus VmRSS before the first lock.
    pub rss_growth: u64,
    /// VmRSS after every lock was released minus before.
    pub rss_after_release: i64,
    pub acquire_ns: u64,
    pub release_ns: u64,
    pub min_renewals: u64,
    pub median_renewals: u64,
    pub min_pttl_ms: i64,
}

pub fn run(url: &str, locks: usize, hold: Duration, ttl: Duration) -> Result<Renew, String> {
    let cmd = Proc::this_exe(&[
        RENEW_CHILD.to_owned(),
        url.to_owned(),
        locks.to_string(),
        hold.as_millis().to_string(),
        ttl.as_millis().to_string(),
    ])?;
    let mut child = Proc::spawn("renew child", cmd)?;
    child.expect("ready")?;
    let line = child.expect("result")?;
    child.finish()?;
    let kv: HashMap<&str, &str> = line
        .split_whitespace()
        .filter_map(|f| f.split_once('='))
        .collect();
    let get = |k: &str| -> Result<u64, String> {
        num(kv.get(k).ok_or_else(|| format!("renew child: no {k}"))?)
    };
    let geti = |k: &str| -> Result<i64, String> {
        kv.get(k)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| format!("renew child: no {k}"))
    };
    let rss_before = get("rss_before")?;
    Ok(Renew {
        locks: get("locks")?,
        hold_ns: get("hold_ns")?,
        ttl_ns: get("ttl_ns").unwrap_or(ns(ttl)),
        lost: get("lost_local")?.max(get("lost_seen")?),
        lost_redis: get("lost_redis")?,
        renew_threads: get("renew_threads")?,
        renew_cpu_ns: get("renew_cpu_ns")?,
        rss_growth: get("rss_max")?.saturating_sub(rss_before),
        rss_after_release: get("rss_after")? as i64 - rss_before as i64,
        acquire_ns: get("acquire_ns")?,
        release_ns: get("release_ns")?,
        min_renewals: get("min_renewals")?,
        median_renewals: get("median_renewals")?,
        min_pttl_ms: geti("min_pttl_ms")?,
    })
}

pub struct Churn {
    pub cycles: u64,
    pub elapsed_ns: u64,
    /// VmRSS after minus before the cycles.
    pub growth: i64,
}

/// Memory kept by N released locks (see `__churn-child`).
pub fn churn(url: &str, cycles: usize) -> Result<Churn, String> {
    let cmd = Proc::this_exe(&[CHURN_CHILD.to_owned(), url.to_owned(), cycles.to_string()])?;
    let mut child = Proc::spawn("churn child", cmd)?;
    let line = child.expect("result")?;
    child.finish()?;
    let kv: HashMap<&str, &str> = line
        .split_whitespace()
        .filter_map(|f| f.split_once('='))
        .collect();
    let get = |k: &str| -> Result<u64, String> {
        num(kv.get(k).ok_or_else(|| format!("churn child: no {k}"))?)
    };
    Ok(Churn {
        cycles: get("cycles")?,
        elapsed_ns: get("ns")?,
        growth: get("rss_after")? as i64 - get("rss_before")? as i64,
    })
}
