//! The simulated world: nodes, clients, a network and faults on one event queue of true
//! time (µs), every choice drawn from generators seeded by one number. Two runs of one seed
//! produce the same trace, event for event.

mod clients;
pub mod clock;
mod config;
pub mod faults;
pub mod net;
mod nodes;
mod view;

use std::collections::{BTreeMap, VecDeque};

use crate::checker::{Checker, Limits, Violation};
use crate::client::core::{CoreClient, holders_key};
use crate::client::model::{ModelClient, drift_us};
use crate::client::{Client, Input, RequestId};
use crate::redis::Server;
use crate::rng::Rng;
use clock::Clock;
use faults::{Fault, fault_len};
use view::WorldView;

pub use crate::checker::Shape;
pub use config::{Config, Driver, Outcome};

/// An input on its way to a client.
#[derive(Debug)]
struct Delivery {
    client: usize,
    input: Input,
    /// The connection a reply comes on: it is lost if that connection closed meanwhile.
    conn: Option<(usize, u64)>,
    /// The monotonic reading a timer waits for.
    mono: Option<u64>,
}

/// A request on its way to a node.
#[derive(Debug)]
struct Request {
    node: usize,
    client: usize,
    /// The client's connection it travels on.
    epoch: u64,
    /// The node's process it was written to.
    life: u64,
    id: RequestId,
    argv: Vec<Vec<u8>>,
}

#[derive(Debug)]
enum Event {
    ToClient(Delivery),
    ToNode(Request),
    Fault(Fault),
    NodeUp {
        node: usize,
    },
    NodeThaw {
        node: usize,
    },
    /// A node's cron tick that times out BLPOPs.
    BlockCheck {
        node: usize,
    },
    ClientGo {
        client: usize,
    },
}

pub(crate) struct Node {
    pub(crate) server: Server,
    pub(crate) clock: Clock,
    frozen: bool,
    pub(crate) down: bool,
    /// When the current freeze and downtime end (overlapping faults extend them).
    frozen_until: u64,
    down_until: u64,
    /// Incremented by each restart: a connection belongs to one life of the process.
    life: u64,
    backlog: VecDeque<Request>,
    /// BLPOPs waiting on this node: the server's connection id → (client, epoch, request).
    blocked: BTreeMap<u64, (usize, u64, RequestId)>,
    /// Requests that came on a connection while its BLPOP waited: Redis runs a client's
    /// commands in order, so they run once the BLPOP is answered (connection id → requests).
    held: BTreeMap<u64, VecDeque<Request>>,
    /// Connections closed while their BLPOP waited: Redis freed the client with what it had
    /// not run yet, so whatever else was written on them never runs.
    freed: std::collections::BTreeSet<u64>,
    /// Connections that loaded the scripts as they opened (with [`Config::preload`]).
    preloaded: std::collections::BTreeSet<u64>,
}

pub(crate) struct Slot {
    client: Box<dyn Client>,
    rng: Rng,
    mono: Clock,
    pub(crate) boot: Clock,
    busy_until: u64,
    suspended_until: u64,
    /// The current connection to each node; replies on an older one are lost.
    epoch: Vec<u64>,
}

/// One run of the world.
pub struct World {
    cfg: Config,
    now: u64,
    queue: BTreeMap<(u64, u64), Event>,
    seq: u64,
    net_rng: Rng,
    pub(crate) nodes: Vec<Node>,
    pub(crate) clients: Vec<Slot>,
    /// Requests in flight: (client, id) → (node, epoch).
    inflight: BTreeMap<(usize, RequestId), (usize, u64)>,
    /// The connection (epoch) each request was written on: a request that must follow
    /// another on its connection is not written once that one has closed.
    written_on: BTreeMap<(usize, RequestId), u64>,
    /// The last arrival per connection and direction, so each stays in order (TCP).
    last_arrival: BTreeMap<(usize, usize, u64, bool), u64>,
    checker: Checker,
    /// The sorted set of the lock's shared holds, for the checker (see [`WorldView`]).
    holders: Option<Vec<u8>>,
    trace: Vec<String>,
    hash: u64,
    events: u64,
    lock_ops: u64,
}

impl World {
    /// Builds the world that `cfg` describes, with the clients it names.
    pub fn new(cfg: Config) -> World {
        let (opts, fencing, shape) = (cfg.model(), cfg.fencing, cfg.shape);
        match cfg.driver {
            Driver::Core => World::with_clients(cfg, |i| {
                Box::new(CoreClient::new(i, opts.clone(), fencing, shape))
            }),
            Driver::Model => {
                World::with_clients(cfg, |i| Box::new(ModelClient::new(i, opts.clone())))
            }
        }
    }

    /// Builds the world that `cfg` describes, with the clients `make` returns for each index
    /// (the core's lock state machines plug in here).
    pub fn with_clients(cfg: Config, mut make: impl FnMut(usize) -> Box<dyn Client>) -> World {
        let mut rng = Rng::new(cfg.seed);
        let mut fault_rng = rng.fork();
        let net_rng = rng.fork();
        let nodes = (0..cfg.nodes)
            .map(|_| Node {
                server: server_of(&cfg),
                // Server clocks: unrelated offsets, rates within ±0.2%.
                clock: Clock::new(
                    1_700_000_000_000_000 + rng.below(1 << 40),
                    1.0 + (rng.below(4001) as f64 - 2000.0) * 1e-6,
                ),
                frozen: false,
                down: false,
                frozen_until: 0,
                down_until: 0,
                life: 0,
                backlog: VecDeque::new(),
                blocked: BTreeMap::new(),
                held: BTreeMap::new(),
                freed: Default::default(),
                preloaded: Default::default(),
            })
            .collect();
        let clients = (0..cfg.clients)
            .map(|c| {
                let rate = 1.0 + (rng.below(4001) as f64 - 2000.0) * 1e-6;
                let offset = rng.below(1 << 40);
                Slot {
                    client: make(c),
                    rng: rng.fork(),
                    mono: Clock::new(offset, rate),
                    boot: Clock::new(offset, rate),
                    busy_until: 0,
                    suspended_until: 0,
                    epoch: vec![0; cfg.nodes],
                }
            })
            .collect();
        let ttl = cfg.ttl_ms * 1000;
        let mut plan = faults::schedule(
            &mut fault_rng,
            cfg.nodes,
            cfg.clients,
            cfg.fault_phase,
            cfg.faults,
            ttl,
            cfg.network.late_max,
        );
        faults::add_flushes(
            &mut fault_rng,
            &mut plan,
            cfg.nodes,
            cfg.fault_phase,
            cfg.flushes,
        );
        let healed = plan
            .iter()
            .map(|(at, f)| at + fault_len(f))
            .max()
            .unwrap_or(0)
            .max(cfg.fault_phase);
        let limits = Limits {
            ttl,
            max_delay: cfg.network.late_max + faults::longest_freeze(&plan, cfg.nodes),
            drift: drift_us(cfg.ttl_ms),
            quiet_from: healed + ttl + cfg.network.late_max + drift_us(cfg.ttl_ms),
            liveness: ttl / 2,
            announced_after: cfg.model().node_timeout + 2 * cfg.network.quiet_max,
            undone_within: cfg.undone_within,
        };
        let mut checker = Checker::new(cfg.nodes, cfg.shape, limits);
        checker.fences_kept = cfg.fencing;
        let mut world = World {
            now: 0,
            queue: BTreeMap::new(),
            seq: 0,
            net_rng,
            nodes,
            clients,
            inflight: BTreeMap::new(),
            written_on: BTreeMap::new(),
            last_arrival: BTreeMap::new(),
            checker,
            holders: holders_key(&cfg.model(), cfg.shape),
            trace: Vec::new(),
            hash: if cfg.keep_trace {
                0xcbf2_9ce4_8422_2325
            } else {
                0
            },
            events: 0,
            lock_ops: 0,
            cfg,
        };
        for (at, f) in plan {
            world.push(at, Event::Fault(f));
        }
        for client in 0..world.clients.len() {
            world.tell(0, client, Input::Start, None);
        }
        world
    }

    /// Schedules an input for a client (a reply on connection `conn`, a failure, the start).
    fn tell(&mut self, at: u64, client: usize, input: Input, conn: Option<(usize, u64)>) {
        let d = Delivery {
            client,
            input,
            conn,
            mono: None,
        };
        self.push(at, Event::ToClient(d));
    }

    fn push(&mut self, at: u64, e: Event) {
        self.seq += 1;
        self.queue.insert((at.max(self.now), self.seq), e);
    }

    /// Records a trace line; only built when the trace is kept (formatting costs more than
    /// the simulation itself).
    fn log(&mut self, line: impl FnOnce() -> String) {
        if !self.cfg.keep_trace {
            return;
        }
        let line = line();
        for b in line.bytes().chain([b'\n']) {
            self.hash = (self.hash ^ b as u64).wrapping_mul(0x0100_0000_01b3);
        }
        self.trace.push(line);
    }

    fn faulty(&self) -> bool {
        self.now < self.cfg.fault_phase
    }

    /// Runs to the end (or to the first violation) and reports.
    pub fn run(mut self) -> Outcome {
        let end = self.checker_quiet_from() + self.cfg.quiet_phase;
        while let Some(((at, _), event)) = self.queue.pop_first() {
            if at > end {
                break;
            }
            self.now = at;
            self.events += 1;
            self.step(event);
            let now = self.now;
            let mut view = WorldView {
                nodes: &mut self.nodes,
                clients: &self.clients,
                holders: self.holders.as_deref(),
            };
            self.checker.after_step(now, &mut view);
            if self.checker.violation.is_some() {
                break;
            }
        }
        // Every client always has something scheduled (a pause, a timer, a request): a world
        // that runs out of events before its end has a client that stopped for good.
        if self.cfg.endless
            && self.checker.violation.is_none()
            && self.queue.is_empty()
            && self.now < end
        {
            self.checker.violation = Some(Violation {
                at: self.now,
                what: "the clients stopped: nothing was left to happen before the run's end".into(),
                liveness: true,
            });
        }
        Outcome {
            violation: self.checker.violation.clone(),
            trace_hash: self.hash,
            trace: self.trace,
            events: self.events,
            lock_ops: self.lock_ops,
            grants: self.checker.grants,
            shared_grants: self.checker.shared_grants,
            most_holders: self.checker.most_holders,
            sim_time: self.now,
        }
    }

    fn checker_quiet_from(&self) -> u64 {
        self.checker.quiet_from()
    }

    fn step(&mut self, event: Event) {
        match event {
            Event::ToClient(d) => self.deliver(d),
            Event::ToNode(r) => {
                let Request {
                    node, client, id, ..
                } = r;
                let n = &mut self.nodes[node];
                if n.life != r.life {
                    return; // written on a connection that died with the old process
                }
                if n.down {
                    let now = self.now;
                    self.log(|| format!("{now} n{node} refused c{client}#{id}"));
                    return self.fail_request(client, id, node);
                }
                if n.frozen {
                    n.backlog.push_back(r);
                    return;
                }
                self.execute(r);
            }
            Event::Fault(f) => self.fault(f),
            Event::NodeUp { node } if self.now >= self.nodes[node].down_until => {
                let now = self.now;
                self.log(|| format!("{now} n{node} up"));
                self.nodes[node].down = false;
            }
            Event::NodeThaw { node } if self.now >= self.nodes[node].frozen_until => {
                let now = self.now;
                self.log(|| format!("{now} n{node} thaws"));
                self.nodes[node].frozen = false;
                let backlog = std::mem::take(&mut self.nodes[node].backlog);
                for e in backlog {
                    self.execute(e);
                }
                self.check_blocked(node);
            }
            Event::BlockCheck { node } => self.check_blocked(node),
            Event::ClientGo { client } if self.now >= self.clients[client].suspended_until => {
                let now = self.now;
                self.log(|| format!("{now} c{client} wakes"));
                self.clients[client].mono.start(self.now);
            }
            Event::NodeUp { .. } | Event::NodeThaw { .. } | Event::ClientGo { .. } => {}
        }
    }

    fn in_order(&mut self, conn: (usize, usize, u64, bool), at: u64) -> u64 {
        let last = self.last_arrival.entry(conn).or_insert(0);
        *last = (*last).max(at);
        *last
    }

    /// Tells the client that a request in flight failed (refused or reset), once.
    fn fail_request(&mut self, client: usize, id: RequestId, node: usize) {
        if self.inflight.remove(&(client, id)).is_some() {
            let at = self.now + self.net_rng.range(100, 2_000);
            self.tell(at, client, Input::Failed { node, id }, None);
        }
    }

    /// Closes `client`'s connection to `node`; with `tell`, its requests in flight fail.
    fn cut(&mut self, client: usize, node: usize, tell: bool) {
        let old = self.clients[client].epoch[node];
        self.clients[client].epoch[node] += 1;
        let conn = nodes::conn_id(client, old);
        let n = &mut self.nodes[node];
        n.server.disconnect(conn);
        if n.blocked.remove(&conn).is_some() {
            n.held.remove(&conn);
            n.freed.insert(conn);
        }
        let lost: Vec<RequestId> = self
            .inflight
            .iter()
            .filter(|(k, v)| k.0 == client && **v == (node, old))
            .map(|(k, _)| k.1)
            .collect();
        for id in lost {
            if tell {
                self.fail_request(client, id, node);
            } else {
                self.inflight.remove(&(client, id));
            }
        }
    }
}

/// A command for the trace: a script's text or SHA is left out, its keys and arguments kept.
fn describe(argv: &[Vec<u8>]) -> String {
    let script = argv.first().is_some_and(|a| a.starts_with(b"EVAL"));
    argv.iter()
        .enumerate()
        .map(|(i, a)| {
            if script && i == 1 {
                "…".into()
            } else {
                String::from_utf8_lossy(a).into_owned()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Runs the world that `cfg` describes.
pub fn run(cfg: Config) -> Outcome {
    World::new(cfg).run()
}

/// A node's server: the real scripts, or for a negative control their older version.
fn server_of(cfg: &Config) -> Server {
    let mut server = Server::new();
    if cfg.controls.plain_incr_fences {
        server.rewrite_scripts(
            "local function fence_next(key)",
            "local function fence_next(key) do return redis.call('INCR', key) end",
        );
    }
    server
}
