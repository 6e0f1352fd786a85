//! The voters of one client — its nodes and the quorum among them — and the services its
//! locks share: the timeouts, the owner label and the renew thread.

use std::sync::Arc;
use std::time::Duration;

use super::clock::{Boottime, Clock};
use super::counters::Counters;
use super::renew::Renewer;
use super::room::Rooms;
use super::tally::quorum;
use super::token;
use crate::net::Node;

/// What every lock of one client works with.
pub(crate) struct Voters {
    pub(crate) nodes: Vec<Arc<Node>>,
    pub(crate) quorum: usize,
    pub(crate) node_timeout: Option<Duration>,
    pub(crate) connect_timeout: Duration,
    pub(crate) owner: Option<String>,
    pub(crate) renewer: Renewer,
    /// The clock leases are counted on.
    pub(crate) clock: Arc<dyn Clock>,
    /// Where the client's threads that wait for the same lock take turns (one waits on
    /// Redis).
    pub(crate) rooms: Rooms,
    /// What the client's locks did, counted as they go (`Client::stats`).
    pub(crate) counters: Counters,
}

impl Voters {
    pub(crate) fn new(
        nodes: Vec<Arc<Node>>,
        node_timeout: Option<Duration>,
        connect_timeout: Duration,
        owner: Option<String>,
    ) -> Voters {
        Voters::with_clock(
            nodes,
            node_timeout,
            connect_timeout,
            owner,
            Arc::new(Boottime),
        )
    }

    /// The same with another lease clock (for tests).
    pub(crate) fn with_clock(
        nodes: Vec<Arc<Node>>,
        node_timeout: Option<Duration>,
        connect_timeout: Duration,
        owner: Option<String>,
        clock: Arc<dyn Clock>,
    ) -> Voters {
        Voters {
            quorum: quorum(nodes.len()),
            renewer: Renewer::new(nodes.clone(), Arc::clone(&clock)),
            clock,
            rooms: Rooms::new(),
            counters: Counters::default(),
            nodes,
            node_timeout,
            connect_timeout,
            owner,
        }
    }

    /// The same, counting acquisitions with a `prefix` label for the `metrics` facade (see
    /// `ClientBuilder::metrics_prefix_label`).
    pub(crate) fn with_prefix_label(mut self, separator: Option<u8>) -> Voters {
        self.counters = Counters::with_prefix_label(separator);
        self
    }

    /// The owner label of tokens made now (the default one includes the current pid).
    pub(crate) fn label(&self) -> &str {
        self.owner
            .as_deref()
            .unwrap_or_else(|| token::default_label())
    }
}

/// The client's last handle is gone (the client and every guard taken through it): its renew
/// thread stops, after the round it may be sending, and then its pools are closed here, on
/// the thread that let go, even while a thread opening a connection for it in the background
/// still holds one of its nodes (that thread closes what it opens).
impl Drop for Voters {
    fn drop(&mut self) {
        self.renewer.stop();
        for node in &self.nodes {
            node.close();
        }
    }
}
