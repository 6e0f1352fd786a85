//! One lock as a simulated client uses it: the core's [`Spec`] of it, made from the world's
//! timings, with its nodes as seats; and the deliberately broken locks of the negative
//! controls.

use std::sync::Arc;

use redmutex::MutexOptions;
use redmutex::sim_support::{Keys, Kind, Spec, withdraw_calls};

use crate::translate::{Argv, Node, argv, dur, seats};

/// One lock as a simulated client uses it, on `n` nodes.
pub struct Lock {
    /// The lock as the core's machines see it.
    pub spec: Spec,
    /// Its nodes, as a tally names them.
    pub seats: Vec<Node>,
}

impl Lock {
    /// The lock `name` with TTL `ttl_us`, a per-request timeout, the longest wait for a
    /// release signal, the base pause between rounds, and the hand-off window.
    pub fn new(
        name: &[u8],
        n: usize,
        ttl_us: u64,
        node_timeout_us: u64,
        wait_cap_us: u64,
        retry_delay_us: u64,
        handoff_window_us: u64,
    ) -> Lock {
        let opts = MutexOptions::default()
            .with_ttl(dur(ttl_us))
            .with_wait_cap(dur(wait_cap_us))
            .with_retry_delay(dur(retry_delay_us))
            .with_handoff_window(dur(handoff_window_us));
        let spec = Spec::new(Arc::new(Keys::new(name)), opts, dur(node_timeout_us), n)
            .expect("the simulated lock's options are valid");
        Lock {
            spec,
            seats: seats(n),
        }
    }

    /// The same lock with fencing on (the default) or off; without it, a round that has not
    /// waited and will not wait asks with plain commands instead of the acquire script.
    pub fn fencing(mut self, on: bool) -> Lock {
        self.spec.opts.fencing = on;
        self
    }

    /// The same name as a counting semaphore of `permits` permits (its own waiters and
    /// wake-up list; see the core's `Keys::for_semaphore`). The simulator gives it one node,
    /// as the library does.
    pub fn semaphore(mut self, permits: u32) -> Lock {
        let name = self.spec.keys.lock.clone();
        self.spec.keys = Arc::new(Keys::for_semaphore(name));
        self.spec.kind = Kind::Semaphore(permits);
        self
    }

    /// The same name's read holds (a read-write lock's shared side; its write side is the
    /// mutex).
    pub fn read(mut self) -> Lock {
        self.spec.kind = Kind::Read;
        self
    }

    /// A deliberately broken lock for the simulator's negative controls: its acquire looks for
    /// read holds under another key, so that it takes the write side while readers hold.
    pub fn blind_to_readers(self) -> Lock {
        self.with_keys(|keys| keys.readers.extend_from_slice(b":elsewhere"))
    }

    /// A deliberately broken read lock for the negative controls: it looks for waiting
    /// writers (and announces itself) under another key, so that readers go before writers
    /// that wait.
    pub fn blind_to_writers(self) -> Lock {
        self.with_keys(|keys| keys.waiters.extend_from_slice(b":elsewhere"))
    }

    /// The same lock with the fence write-back's old rule plugged back in, for the negative
    /// controls: any answer counts as a confirmation, also one from a node that another
    /// round holds.
    pub fn fence_counts_refusing(mut self) -> Lock {
        self.spec.controls.fence_counts_refusing = true;
        self
    }

    /// The same lock with the release's old rule plugged back in, for the negative controls:
    /// every "missing" within the validity is read as our own earlier release.
    pub fn missing_is_released(mut self) -> Lock {
        self.spec.controls.missing_is_released = true;
        self
    }

    /// The same lock with the clean-up's old rule plugged back in, for the negative
    /// controls: a node that answers "another owner's" is done at once, also before the
    /// request cleaned up after can no longer arrive.
    pub fn another_owner_ends_cleanup(mut self) -> Lock {
        self.spec.controls.another_owner_ends_cleanup = true;
        self
    }

    /// The same lock with a wrong rule for renewing a waiter's announcement plugged in, for
    /// the negative controls: the standing announcement is counted to last long enough when
    /// it outlives the round's next wait, forgetting the wait the round runs behind.
    pub fn announcement_forgets_its_wait(mut self) -> Lock {
        self.spec.controls.announcement_forgets_its_wait = true;
        self
    }

    fn with_keys(mut self, change: impl FnOnce(&mut Keys)) -> Lock {
        let mut keys = Keys::new(&self.spec.keys.lock);
        change(&mut keys);
        self.spec.keys = Arc::new(keys);
        self
    }

    /// The sorted set that keeps this lock's holders, member by member (a semaphore's permits,
    /// a read lock's read holds); `None` for the mutex, whose holder is the value of its key.
    pub fn holders_key(&self) -> Option<&[u8]> {
        match self.spec.kind {
            Kind::Mutex => None,
            Kind::Semaphore(_) => Some(&self.spec.keys.holders),
            Kind::Read => Some(&self.spec.keys.readers),
        }
    }

    /// The requests that take the waiter announcement `id` back (the core's withdrawal).
    pub fn withdraw(&self, id: &[u8]) -> Vec<Argv> {
        withdraw_calls(&self.spec, id).iter().map(argv).collect()
    }
}
