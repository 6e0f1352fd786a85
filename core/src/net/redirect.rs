//! A cluster node's requests in a round: split by the master that serves each request's key
//! slot, one leg per master, and the redirections in the legs' answers (`MOVED`, `ASK`,
//! `TRYAGAIN`) followed within the round's deadline.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::classify::is_read_only;
use super::cluster::{Cluster, Redirect};
use super::conn::remaining;
use super::leg::{Leg, Raw, connect_and_run};
use crate::wire::Request;

/// Splits a cluster node's requests by the master that serves each request's slot. A
/// request without keys (a `WAIT`) goes to every master that got a request before it.
pub(super) fn split<R: Request>(
    cluster: &Cluster,
    i: usize,
    requests: &[R],
    deadline: Instant,
    legs: &mut Vec<Leg>,
) {
    let first = legs.len();
    for (k, request) in requests.iter().enumerate() {
        match request.slot() {
            Some(slot) => {
                let endpoint = cluster.endpoint(slot, deadline);
                let same = legs[first..]
                    .iter_mut()
                    .find(|l| match (&l.endpoint, &endpoint) {
                        (Ok(a), Ok(b)) => Arc::ptr_eq(a, b),
                        _ => false,
                    });
                match same {
                    Some(leg) => leg.picks.push(k),
                    None => legs.push(Leg {
                        node: i,
                        endpoint,
                        picks: vec![k],
                        asking: false,
                    }),
                }
            }
            None => {
                for leg in &mut legs[first..] {
                    leg.picks.push(k);
                }
            }
        }
    }
}

/// Follows the redirections in a cluster leg's answer until none is left, the deadline
/// passes, or too many were followed. Marks the map stale when the answer suggests a
/// failover.
pub(super) fn follow<R: Request>(
    cluster: &Cluster,
    leg: &mut Leg,
    answer: &mut Raw,
    requests: &[R],
    deadline: Instant,
    on_timeout: Option<&dyn Request>,
) {
    for _ in 0..MAX_FOLLOW {
        let values = match answer {
            Ok(values) => values,
            Err(_) => {
                cluster.mark_stale();
                return;
            }
        };
        if values
            .iter()
            .any(|v| matches!(v, Err(e) if is_read_only(e) || e.code() == Some("CLUSTERDOWN")))
        {
            cluster.mark_stale();
        }
        // The first redirected request; it and every request after it are sent again, so
        // that a `WAIT` still follows the writes it waits for.
        let Some((at, redirect)) = values.iter().enumerate().find_map(|(at, v)| match v {
            Err(e) => cluster.redirect(e).map(|r| (at, r)),
            Ok(_) => None,
        }) else {
            return;
        };
        if remaining(deadline).is_err() {
            return;
        }
        let endpoint = match redirect {
            Redirect::To(e) => e,
            Redirect::Ask(e) => {
                leg.asking = true;
                e
            }
            Redirect::Retry => {
                let left = deadline.saturating_duration_since(Instant::now());
                std::thread::sleep(TRY_AGAIN_PAUSE.min(left / 2));
                match &leg.endpoint {
                    Ok(e) => Arc::clone(e),
                    Err(_) => return,
                }
            }
        };
        let again: Vec<&R> = leg.picks[at..].iter().map(|&k| &requests[k]).collect();
        match connect_and_run(&endpoint, &again, leg.asking, deadline, on_timeout) {
            Ok(redone) => {
                values.truncate(at);
                values.extend(redone);
            }
            Err(e) => {
                let e = e.into_redis();
                for v in &mut values[at..] {
                    *v = Err(e.clone());
                }
                cluster.mark_stale();
                return;
            }
        }
        // A slot that moved for good is asked for without `ASKING` next time.
        leg.endpoint = Ok(endpoint);
        leg.asking = false;
    }
}

/// The most redirections one cluster leg follows in a round.
const MAX_FOLLOW: usize = 5;
/// The pause before a request that got `TRYAGAIN` (a slot in the middle of a migration).
const TRY_AGAIN_PAUSE: Duration = Duration::from_millis(5);
