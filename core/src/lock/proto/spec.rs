//! One lock as its calls see it ([`Spec`]): its keys, kind and options, checked once; and the
//! rules the simulator's negative controls may replace ([`Controls`]).

use std::sync::Arc;
use std::time::Duration;

use crate::error::Error;
use crate::lock::keys::Keys;
use crate::lock::tally::quorum;
use crate::options::{MAX_NAME_LEN, MIN_TTL, MutexOptions};

/// Which kind of lease a lock hands out; each kind has its own scripts (see `lock/calls.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// The mutex, which is also the write side of a read-write lock: the lock key itself.
    Mutex,
    /// One of this many permits of a counting semaphore.
    Semaphore(u32),
    /// A shared (read) hold of a read-write lock.
    Read,
}

impl Kind {
    /// Its name in the client's figures: `mutex`, `semaphore`, `read`.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::Mutex => "mutex",
            Kind::Semaphore(_) => "semaphore",
            Kind::Read => "read",
        }
    }
}

/// Rules that the simulator's negative controls replace with an old or a wrong one, to show
/// that its checker catches the difference. The library never sets one: every field is
/// `false` outside the simulator's controls ([`Controls::RIGHT`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Controls {
    /// The fence write-back counts a confirmation from any node, also one that refused the
    /// round (see `proto/fence.rs`).
    pub fence_counts_refusing: bool,
    /// The release reads every "missing" within the validity as its own earlier release,
    /// also a first answer (see `proto/release.rs`).
    pub missing_is_released: bool,
    /// A clean-up believes "another owner's" at once, before the request it cleans up after
    /// can no longer arrive (see `proto/cleanup.rs`).
    pub another_owner_ends_cleanup: bool,
    /// A round skips renewing the call's announcement when it lasts through the round's
    /// next wait only, forgetting the wait the round itself is sent behind (see
    /// `ANNOUNCE_WAITS` in `call.rs`).
    pub announcement_forgets_its_wait: bool,
}

impl Controls {
    /// The rules as they are.
    pub const RIGHT: Controls = Controls {
        fence_counts_refusing: false,
        missing_is_released: false,
        another_owner_ends_cleanup: false,
        announcement_forgets_its_wait: false,
    };
}

/// One lock as its calls use it: its keys and options, checked once, and the number of nodes.
#[derive(Clone)]
pub struct Spec {
    /// Its keys.
    pub keys: Arc<Keys>,
    /// The kind of lease (the mutex unless a semaphore or read lock says otherwise).
    pub kind: Kind,
    /// Its options, checked.
    pub opts: MutexOptions,
    /// Each request's time limit.
    pub node_timeout: Duration,
    /// How many nodes.
    pub n: usize,
    /// How many of them must agree.
    pub quorum: usize,
    /// Always [`Controls::RIGHT`] but in the simulator's negative controls.
    pub controls: Controls,
    /// The scripts announce each wake-up signal they push on the list's sharded channel
    /// (`SPUBLISH`), where a Redis Cluster client's waits listen (see `net/listen.rs`): on
    /// a Cluster only, so that a server elsewhere (and its ACL rule) sees no new command.
    pub announce: bool,
}

impl Spec {
    /// Checks the name and the options.
    pub fn new(
        keys: Arc<Keys>,
        opts: MutexOptions,
        node_timeout: Duration,
        n: usize,
    ) -> Result<Spec, Error> {
        let name = &keys.lock;
        if name.is_empty() || name.len() > MAX_NAME_LEN {
            return Err(Error::invalid(format!(
                "a lock name must be 1 to {MAX_NAME_LEN} bytes, got {}",
                name.len()
            )));
        }
        opts.validate()?;
        Ok(Spec {
            keys,
            kind: Kind::Mutex,
            opts,
            node_timeout,
            n,
            quorum: quorum(n),
            controls: Controls::RIGHT,
            announce: false,
        })
    }

    /// The lease of a grant: the TTL, shortened so it ends with `max_hold`.
    pub(crate) fn grant_ttl(&self) -> Duration {
        match self.opts.max_hold {
            Some(h) => self.opts.ttl.min(h.max(MIN_TTL)),
            None => self.opts.ttl,
        }
    }

    /// How long a round announces its caller as a waiter, when the longest wait it may do
    /// before its next round is `block`: past that wait and the round after it.
    pub(crate) fn announce_for(&self, block: Duration) -> Duration {
        block + self.node_timeout + Duration::from_millis(10)
    }

    /// How long a round announces its caller for at most (zero when it will not wait).
    pub fn announce(&self, will_wait: bool) -> Duration {
        if will_wait {
            self.announce_for(self.opts.wait_cap)
        } else {
            Duration::ZERO
        }
    }
}
