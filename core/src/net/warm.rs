//! Opening a fresh client's first connections before its first round, in parallel, so that
//! the round's time (and a lease's validity) does not include them.

use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use super::node::Node;
use super::wake;

/// Opens the first connection of each fresh node `i` for which `slot(i)` names the key slot
/// its requests are about, in parallel, within the connect timeout (see [`Node::warm_up`]).
/// Returns once a quorum (a majority) of the nodes is ready, so that a node that hangs (a
/// host that is gone without a reset, a frozen server) costs only its own connect timeout,
/// finished in the background, not every caller's. Returns how long that took: zero when it
/// opened none (no node was fresh, as for every round after a client's first, or other
/// callers are opening them), with no clock read in the common case.
pub(crate) fn warm_up(nodes: &[Arc<Node>], slot: impl Fn(usize) -> Option<u16>) -> Duration {
    let fresh = nodes.iter().filter(|n| n.is_fresh()).count();
    if fresh == 0 {
        return Duration::ZERO;
    }
    let started = Instant::now();
    let claimed: Vec<(usize, u16)> = (0..nodes.len())
        .filter_map(|i| slot(i).map(|s| (i, s)))
        .filter(|&(i, _)| nodes[i].claim_warm_up())
        .collect();
    match claimed.as_slice() {
        [] => return Duration::ZERO,
        &[(i, slot)] if nodes.len() == 1 => {
            nodes[i].warm_up(slot);
            return started.elapsed();
        }
        _ => {}
    }
    let (tx, rx) = mpsc::channel();
    // Threads that connect for a call whose waits may stop stop with it.
    let stop = wake::for_helper();
    for &(i, slot) in &claimed {
        let (node, done, stop) = (Arc::clone(&nodes[i]), tx.clone(), stop.clone());
        let opening = move || {
            let _ = done.send(wake::helping(stop, || node.warm_up(slot)));
        };
        if let Err(e) = std::thread::Builder::new()
            .name("redmutex-connect".into())
            .spawn(opening)
        {
            log::debug!("no thread to connect on ({e}); connecting in turn");
            let _ = tx.send(nodes[i].warm_up(slot));
        }
    }
    drop(tx);
    // Nodes that were connected (or tried) before count as ready; the round asks them anyway.
    let majority = nodes.len() / 2 + 1;
    let mut ready = nodes.len() - fresh;
    let mut pending = claimed.len();
    while pending > 0 && ready < majority {
        match wake::recv(&rx) {
            Some(opened) => {
                pending -= 1;
                ready += usize::from(opened);
            }
            None => break,
        }
    }
    started.elapsed()
}
