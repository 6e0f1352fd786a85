//! Internals that the project's own simulator (`redmutex-sim`) drives; not part of the API.
//!
//! The simulator runs the lock protocol's own I/O-free machines (`lock/proto`) in a
//! simulated world. This module only translates between their types and the simulator's:
//! requests as argument vectors, replies as `redis::Value`s, the lease clock as
//! microseconds. Every decision stays in the machines.

use std::sync::Arc;
use std::time::Duration;

use redis::Value;

use crate::lock::clock::Stamp;
use crate::lock::proto::Spec;
use crate::lock::proto::acquisition::{self, Acquisition as Calls, Then};
use crate::lock::{Keys, Kind};

mod lease;

use crate::lock::proto::round::{self, AcquireRound, Requests};
use crate::lock::scripts::Call;
use crate::lock::tally::{Seat, Tally};
use crate::lock::wait_server_block;
use crate::lock::{extend_call, release_call};
use crate::net::{Answer, Failure, NetError, Request};
use crate::options::MutexOptions;
pub use lease::{Due, Hold, Release, Renewal};

/// Each Lua script the lock sends, by name (`acquire`, `release`, …), with its exact
/// source text.
pub fn scripts() -> Vec<(&'static str, &'static str)> {
    crate::lock::script_sources()
}

/// A request as the words a server reads.
pub type Argv = Vec<Vec<u8>>;

/// What a node's reply to one request was: a value, or the text of an error reply.
pub type Reply = Result<Value, String>;

fn us(d: Duration) -> u64 {
    d.as_micros() as u64
}

fn dur(us: u64) -> Duration {
    Duration::from_micros(us)
}

fn argv(call: &Call) -> Argv {
    let mut buf = Vec::new();
    call.write(&mut buf);
    words(&buf)
}

fn words(packed: &[u8]) -> Argv {
    match redis::parse_redis_value(packed) {
        Ok(Value::Array(items)) => items
            .into_iter()
            .map(|v| match v {
                Value::BulkString(b) => b,
                other => format!("{other:?}").into_bytes(),
            })
            .collect(),
        other => panic!("a request packs as an array of words, not {other:?}"),
    }
}

/// The request to send again after `reply` to `sent`, when the server asked for another
/// form (`NOSCRIPT`: the script's text instead of its hash).
pub fn resend(sent: &Argv, reply: &Reply) -> Option<Argv> {
    let Err(text) = reply else {
        return None;
    };
    if !text.starts_with("NOSCRIPT") || sent.first().map(Vec::as_slice) != Some(b"EVALSHA") {
        return None;
    }
    let (_, source) = scripts()
        .into_iter()
        .find(|(_, s)| redis::Script::new(s).get_hash().as_bytes() == sent[1].as_slice())?;
    let mut again = sent.clone();
    again[0] = b"EVAL".to_vec();
    again[1] = source.as_bytes().to_vec();
    Some(again)
}

/// A node as the tally names it.
struct SimSeat(String);

impl Seat for SimSeat {
    fn name(&self) -> &str {
        &self.0
    }
    fn follows_failover(&self) -> bool {
        false
    }
}

fn answer(replies: Option<Vec<Reply>>) -> Answer {
    match replies {
        // The connection broke: the request may have run, and what followed it did not.
        None => Err(NetError::new(
            Failure::Dropped,
            std::io::ErrorKind::ConnectionReset,
            "the connection broke".into(),
        )),
        Some(replies) => Ok(replies
            .into_iter()
            .map(|r| {
                r.map_err(|text| {
                    let code = text.split(' ').next().unwrap_or("ERR").to_owned();
                    NetError::from(redis::RedisError::from((
                        redis::ErrorKind::Extension,
                        "server error",
                        format!("{code} {text}"),
                    )))
                })
            })
            .collect()),
    }
}

/// One lock as a simulated client uses it, on `n` nodes.
pub struct Lock {
    spec: Spec,
    seats: Vec<SimSeat>,
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
            seats: (0..n).map(|i| SimSeat(format!("n{i}"))).collect(),
        }
    }

    /// The same lock with fencing on (the default) or off; without it, a round that has not
    /// waited and will not wait asks with plain commands instead of the acquire script.
    pub fn fencing(mut self, on: bool) -> Lock {
        self.spec.opts.fencing = on;
        self
    }

    /// The same name as a counting semaphore of `permits` permits (its own waiters and
    /// wake-up list; see `Keys::for_semaphore`). The simulator gives it one node, as the
    /// library does.
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

    /// How many nodes must agree.
    pub fn quorum(&self) -> usize {
        self.spec.quorum
    }

    /// The extension of `token`'s lease to `ttl_us`.
    pub fn extend(&self, token: &[u8], ttl_us: u64) -> Argv {
        argv(&extend_call(&self.spec, token, dur(ttl_us)))
    }

    /// The release of `token`; `handoff` reserves the lock for waiters for a short window
    /// (a user's release), otherwise not (an undo, a clean-up).
    pub fn release(&self, token: &[u8], handoff: bool) -> Argv {
        argv(&release_call(&self.spec, token, handoff))
    }

    /// The wait for a release signal of at most `block_us`.
    pub fn blpop(&self, block_us: u64) -> Argv {
        let secs = format!(
            "{:.3}",
            wait_server_block(dur(block_us)).as_secs_f64().max(0.001)
        );
        vec![
            b"BLPOP".to_vec(),
            self.spec.keys.wake.clone(),
            secs.into_bytes(),
        ]
    }

    /// How many of `replies` (one per node, `None` for a node that did not answer) confirm
    /// an extension or a release, and how many refused.
    fn tally(&self, replies: &[Option<Vec<Reply>>]) -> Tally {
        let answers: Vec<Answer> = replies
            .iter()
            .map(|r| match r {
                Some(r) => answer(Some(r.clone())),
                None => Err(NetError::timeout()),
            })
            .collect();
        Tally::of_ints(&self.seats, &answers, 0, None)
    }
}

/// One acquisition round (the core's `AcquireRound`) and what it sends.
pub struct Round(AcquireRound, Requests);

/// A round's grant.
pub struct Grant {
    /// The token.
    pub token: Vec<u8>,
    /// The fence.
    pub fence: u64,
    /// When the round was sent (boot clock, µs).
    pub t0: u64,
    /// When the validity ends (boot clock, µs).
    pub valid_until: u64,
}

/// A refused round.
pub struct Refused {
    /// The undo request.
    pub undo: Argv,
    /// Nodes to send it to now.
    pub undo_on: Vec<usize>,
    /// Nodes to clean up on fresh connections, until the boot clock reads `clean_until`.
    pub clean_up: Vec<usize>,
    /// See `clean_up`.
    pub clean_until: u64,
    /// What the call does next.
    pub next: Next,
}

/// What a refused round's caller does next.
pub struct Next(round::Next);

impl Round {
    /// A round with `token` whose clock read `t0` (boot, µs).
    pub fn new(
        lock: &Lock,
        token: Vec<u8>,
        t0: u64,
        waited: bool,
        will_wait: bool,
        waiter: &[u8],
    ) -> Round {
        let announce = lock.spec.announce(will_wait);
        let (round, sent) = AcquireRound::new(
            &lock.spec,
            token,
            Stamp::from_micros(t0),
            waited,
            announce,
            if will_wait || waited { waiter } else { b"" },
        );
        Round(round, sent)
    }

    /// The round's token.
    pub fn token(&self) -> &[u8] {
        self.0.token()
    }

    /// What to send to every node.
    pub fn requests(&self) -> Vec<Argv> {
        self.1.calls.iter().map(argv).collect()
    }

    /// The undo queued behind the requests of a node that did not answer in time.
    pub fn undo(&self) -> Argv {
        argv(self.1.undo.call())
    }

    /// Node `i`'s replies; `None` when its connection broke.
    pub fn answer(&mut self, lock: &Lock, i: usize, replies: Option<Vec<Reply>>) {
        self.0.answer(i, &lock.seats[i], &answer(replies));
    }

    /// Node `i` did not answer in time.
    pub fn timed_out(&mut self, lock: &Lock, i: usize) {
        self.0.answer(i, &lock.seats[i], &Err(NetError::timeout()));
    }

    /// Notes that node `i`'s answer was not waited for: the round was decided without it.
    pub fn not_waited_for(&mut self, lock: &Lock, i: usize) {
        self.0.not_waited_for(i, &lock.seats[i]);
    }

    /// Whether the answers so far decide the round.
    pub fn decided(&self) -> bool {
        self.0.decided()
    }

    /// Whether a quorum granted.
    pub fn granted(&self) -> bool {
        self.0.granted()
    }

    /// The fence write-back, if one is needed: the request and the nodes to send it to.
    pub fn fence_raise(&mut self, lock: &Lock) -> Option<(Argv, Vec<usize>)> {
        self.0
            .fence_raise(&lock.spec)
            .map(|(call, behind)| (argv(&call), behind))
    }

    /// Node `i`'s reply to the write-back (`None`: it did not come).
    pub fn raised(&mut self, lock: &Lock, i: usize, reply: Option<Reply>) {
        self.0
            .raised(i, &answer(reply.map(|r| vec![r])), &lock.spec)
    }

    /// Whether the write-back's answers so far decide it (a quorum holds the fence, or
    /// cannot).
    pub fn raise_decided(&self) -> bool {
        self.0.raise_decided()
    }

    /// The verdict at `now` (boot, µs).
    pub fn finish(self, now: u64) -> Result<Grant, Box<Refused>> {
        match self.0.finish(Stamp::from_micros(now)) {
            Ok(g) => Ok(Grant {
                token: g.token,
                fence: g.fence,
                t0: g.t0.micros(),
                valid_until: g.valid_until.micros(),
            }),
            Err(r) => Err(Box::new(Refused {
                undo: argv(self.1.undo.call()),
                undo_on: r.undo_on,
                clean_up: r.clean_up,
                clean_until: r.clean_until.micros(),
                next: Next(r.next),
            })),
        }
    }
}

/// One call that takes the lock, across rounds.
pub struct Acquisition(Calls);

/// What to do after a refused round.
#[derive(Debug)]
pub enum Step {
    /// Give up, with this error.
    Fail(String),
    /// Wait for a release on `node` for `block` µs.
    Wait {
        /// The node.
        node: usize,
        /// µs.
        block: u64,
        /// Whether the call may wait again afterwards.
        will_wait: bool,
    },
    /// Pause this long (µs).
    Pause(u64),
    /// Go again now.
    Again,
}

impl Acquisition {
    /// A call that gives up `deadline` µs after it began (`None`: never), riding over
    /// outages for `connect_timeout` µs.
    pub fn new(lock: &Lock, deadline: Option<u64>, connect_timeout: u64) -> Acquisition {
        Acquisition(Calls::new(
            &lock.spec,
            deadline.map(dur),
            dur(connect_timeout),
        ))
    }

    /// Whether the call has waited for a release.
    pub fn waited(&self) -> bool {
        self.0.waited
    }

    /// Whether a round begun `now` µs into the call may be followed by a wait.
    pub fn will_wait(&self, now: u64) -> bool {
        self.0.will_wait(dur(now))
    }

    /// After a refused round begun at `started`, at `now` (µs into the call).
    pub fn after(&mut self, next: Next, started: u64, now: u64, random: u64) -> Step {
        match self.0.after(next.0, dur(started), dur(now), random) {
            Then::Fail(e) => Step::Fail(e.to_string()),
            Then::Wait {
                node,
                block,
                will_wait,
            } => Step::Wait {
                node,
                block: us(block),
                will_wait,
            },
            Then::Pause(d) => Step::Pause(us(d)),
            Then::Again => Step::Again,
        }
    }
}

/// A duration in `[base/2, base*3/2]` µs chosen by `random`.
pub fn jitter(base: u64, random: u64) -> u64 {
    us(acquisition::jitter(dur(base), random))
}
