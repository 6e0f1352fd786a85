//! What decides a run, and what it produced.

use super::net::Network;
use crate::checker::{Shape, Violation};
use crate::client::model::{Controls, ModelOptions};
use crate::rng::Rng;

/// Which lock client runs in the world.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Driver {
    /// The core's own protocol machines ([`crate::client::core`]).
    Core,
    /// The model client ([`crate::client::model`]), which can make the controls' mistakes.
    Model,
}

/// Everything a run is decided by; [`Config::from_seed`] derives one from a seed.
#[derive(Clone, Debug)]
pub struct Config {
    /// The seed of every choice.
    pub seed: u64,
    /// Number of nodes: 1, 3 or 5.
    pub nodes: usize,
    /// Number of clients contending for the lock.
    pub clients: usize,
    /// Lock TTL (ms).
    pub ttl_ms: u64,
    /// How long faults are injected (µs).
    pub fault_phase: u64,
    /// How long the healed world runs afterwards (µs), for liveness.
    pub quiet_phase: u64,
    /// How many node and client faults.
    pub faults: usize,
    /// The network's behaviour.
    pub network: Network,
    /// Which client drives the lock.
    pub driver: Driver,
    /// What the clients share (the model client only runs the mutex).
    pub shape: Shape,
    /// Whether the lock fences (the core's clients; the model client always does). Without
    /// fencing a `try_lock` asks with plain commands instead of the acquire script, and the
    /// checker judges no fence order.
    pub fencing: bool,
    /// The model client's deliberate mistakes (none in a correct run).
    pub controls: Controls,
    /// Whether the clients keep going to the run's end (lock clients do; a scripted client
    /// in a test may stop).
    pub endless: bool,
    /// Keep every trace line (for printing and comparing), not only their hash.
    pub keep_trace: bool,
    /// How many times someone outside the lock empties a node's keyspace during the fault
    /// phase (see [`Fault::Flush`](super::faults::Fault::Flush)).
    pub flushes: usize,
    /// Short holds and pauses between them (tens of ms instead of up to 1.5 s): a holder
    /// releases while another client's round is still in flight.
    pub short_holds: bool,
    /// How soon a refused attempt's token must be gone from every node (µs), in worlds
    /// where no message is lost (see [`Config::cutting`]); `None`: one TTL, as for any
    /// orphan.
    pub undone_within: Option<u64>,
    /// Whether the core's clients' calls are interrupted at random points of their rounds:
    /// a signal whose check says stop (`redmutex::wake_on_checked`) ends the round as its
    /// deadline would, and the call gives up after it.
    pub interrupts: bool,
    /// Whether each new connection loads the scripts before its first request, as the
    /// library's do (otherwise a script's first call on each node answers `NOSCRIPT`, and
    /// the client sends its text).
    pub preload: bool,
}

impl Config {
    /// The run that `seed` decides: 1, 3 or 5 nodes, three clients, a 1 s TTL. The clients
    /// are the core's own machines, or the model client when a control asks for a mistake.
    /// The core's clients share a mutex in half the worlds, a read-write lock in a quarter,
    /// and in the last quarter a semaphore of 2 permits among four clients on one node.
    pub fn from_seed(seed: u64, controls: Controls) -> Config {
        let driver = if controls == Controls::default() {
            Driver::Core
        } else {
            Driver::Model
        };
        Config::with_driver(seed, controls, driver)
    }

    /// The run that `seed` decides, with the clients `driver` names (the model client shares
    /// a mutex: its world is the one a control's mistake runs in).
    pub fn with_driver(seed: u64, controls: Controls, driver: Driver) -> Config {
        let mut rng = Rng::new(seed ^ 0xC0FF_EE00);
        let mut nodes = *rng.pick(&[1, 3, 5]);
        let faults = rng.range(2, 10) as usize;
        let fencing = driver == Driver::Model || rng.chance(0.5);
        let shape = match driver {
            Driver::Model => Shape::Mutex,
            Driver::Core => match rng.below(4) {
                0 => Shape::RwLock,
                1 => Shape::Semaphore(2),
                _ => Shape::Mutex,
            },
        };
        let mut clients = 3;
        if let Shape::Semaphore(permits) = shape {
            nodes = 1;
            clients = permits as usize + 2;
        }
        Config {
            seed,
            nodes,
            clients,
            ttl_ms: 1_000,
            fault_phase: 15_000_000,
            quiet_phase: 6_000_000,
            faults,
            network: Network {
                quiet_max: 12_000,
                late_max: 600_000,
                loss: 0.01,
                late: 0.03,
                cut: 0.01,
            },
            driver,
            shape,
            fencing,
            controls,
            endless: true,
            keep_trace: false,
            flushes: 0,
            short_holds: false,
            undone_within: None,
            interrupts: false,
            preload: false,
        }
    }

    /// A world where someone outside the lock empties a node's keyspace while the lock is
    /// held: one, three or five nodes, three clients on a mutex, a few flushes and the usual
    /// faults. A holder whose key vanished on too many nodes has lost the lock: it must learn
    /// it (its renewal or its release says so), never be told that it released cleanly.
    pub fn vanishing(seed: u64) -> Config {
        let mut rng = Rng::new(seed ^ 0x7A15_4ED0);
        let mut cfg = Config::with_driver(seed, Controls::default(), Driver::Core);
        cfg.shape = Shape::Mutex;
        cfg.clients = 3;
        cfg.nodes = *rng.pick(&[1, 1, 3, 5]);
        cfg.flushes = rng.range(2, 6) as usize;
        cfg.short_holds = rng.chance(0.5);
        cfg
    }

    /// A world made for rounds of several contenders that overlap: three or five nodes whose
    /// fence counters differ (their clocks do), three clients on a fenced mutex that hold for
    /// a few ms, and a network during the fault phase that delays many requests by up to just
    /// under the node timeout and loses a few single messages (the connection stays). A round
    /// can then be granted by some nodes while another client's requests to the others are
    /// still on their way, and be granted there after that client's release; a fence
    /// write-back can be lost on one connection while another node confirms it. No node or
    /// client faults: the interleavings come from the network alone.
    pub fn overlapping(seed: u64) -> Config {
        let mut rng = Rng::new(seed ^ 0x0BE7_1A95);
        let mut cfg = Config::with_driver(seed, Controls::default(), Driver::Core);
        cfg.nodes = *rng.pick(&[3, 5]);
        cfg.clients = 3;
        cfg.shape = Shape::Mutex;
        cfg.fencing = true;
        cfg.faults = 0;
        cfg.fault_phase = 4_000_000;
        cfg.quiet_phase = 2_000_000;
        let node_timeout = cfg.model().node_timeout;
        cfg.network = Network {
            quiet_max: 3_000,
            late_max: node_timeout - 2_000,
            loss: 0.03,
            late: 0.3,
            cut: 0.0,
        };
        cfg.short_holds = true;
        cfg
    }

    /// A world made for follow-ups that cannot be written: three or five nodes, three clients
    /// on a mutex that hold for a few ms, and a network during the fault phase that delays
    /// many requests by up to just under the node timeout (rounds are decided with some
    /// nodes unread) and cuts connections right after a write, but loses no message. An undo
    /// then often finds the connection of the request it must follow closed: it must reach
    /// the node another way, so that a late grant there is gone within a few node timeouts
    /// ([`Config::undone_within`]), not a TTL later.
    pub fn cutting(seed: u64) -> Config {
        let mut rng = Rng::new(seed ^ 0x00C7_7E11);
        let mut cfg = Config::overlapping(seed);
        cfg.nodes = *rng.pick(&[3, 5]);
        cfg.fencing = rng.chance(0.5);
        let node_timeout = cfg.model().node_timeout;
        cfg.network.loss = 0.0;
        cfg.network.cut = 0.05;
        // The last try that can meet a "missing" the late grant did not yet store is sent
        // a node timeout after the attempt ended; the next comes within a node timeout
        // (the try) and a pause (under a node timeout), and runs within the longest delay.
        cfg.undone_within = Some(4 * node_timeout + cfg.network.late_max + 5_000);
        cfg.preload = true;
        // An interrupted round leaves its unread nodes as a round at its deadline does: the
        // bound above holds for them too.
        cfg.interrupts = true;
        cfg
    }

    /// The clients' timings and the model client's mistakes.
    pub fn model(&self) -> ModelOptions {
        ModelOptions {
            nodes: self.nodes,
            ttl_ms: self.ttl_ms,
            node_timeout: 40_000,
            retry_max: 30_000,
            wait_cap: 250_000,
            handoff_window: 20_000,
            hold_max: if self.short_holds { 10_000 } else { 1_500_000 },
            think_max: if self.short_holds { 10_000 } else { 300_000 },
            use_every: 50_000,
            controls: self.controls,
            interrupts: self.interrupts,
        }
    }
}

/// What a run produced.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// The first property that failed, if any.
    pub violation: Option<Violation>,
    /// A hash of every trace line (with [`Config::keep_trace`]; 0 otherwise).
    pub trace_hash: u64,
    /// The trace lines, with [`Config::keep_trace`].
    pub trace: Vec<String>,
    /// Events processed.
    pub events: u64,
    /// Lock operations the clients made (acquire rounds, extends, releases).
    pub lock_ops: u64,
    /// Grants the checker saw.
    pub grants: u64,
    /// Of those, grants of shared holds (a semaphore's permits, read holds).
    pub shared_grants: u64,
    /// The most holders live at once.
    pub most_holders: usize,
    /// Simulated time (µs).
    pub sim_time: u64,
}
