//! A stand-in lock client that follows the Redlock protocol with the real scripts, until the
//! core's I/O-free state machines can be driven instead: acquire rounds with `t0` taken
//! before sending, validity `ttl − elapsed − drift(ttl)`, quorum `N/2 + 1`, undo on every
//! node when a round fails, a wait for the release signal (BLPOP, announced as a waiter) when
//! the lock was taken, renewal every `ttl/3` by the extend script, release by the release
//! script with a short hand-off to waiters. Its [`Controls`] each break one rule, so the checker can be shown to
//! catch that mistake.

use std::collections::BTreeMap;

use super::{Client, Input, Note, Now, Output, RequestId};
use crate::redis::{Reply, sha1_hex};
use crate::rng::Rng;

/// The lock's keys (the name and its companions, sharing one hash slot).
pub const LOCK: &str = "lock";
const FENCE: &str = "{lock}:fence";
const WAKE: &str = "{lock}:wake";
const WAITERS: &str = "{lock}:waitq";
/// Read holds on the lock's name: none in the simulated world, but the acquire script looks.
const READERS: &str = "{lock}:readers";

/// Deliberate mistakes, each off in a correct client.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Controls {
    /// Release (and undo) with a plain `DEL` instead of the compare-and-delete script.
    pub release_with_del: bool,
    /// Count validity as `ttl − elapsed`, with no allowance for clock drift.
    pub no_drift: bool,
    /// Extend with an unconditional `PEXPIRE` (the extend script's `PTTL` check removed), and
    /// with TTLs that vary between extensions, so a late extend can shorten the key.
    pub unconditional_extend: bool,
    /// A re-sent acquire that finds the key holding its own token counts the node as
    /// "taken" (the acquire script's own-token branch removed), and a failed round skips the
    /// undo on "taken" nodes.
    pub own_grant_taken: bool,
    /// Count validity from when the quorum's replies arrived, not from before sending.
    pub validity_from_reply: bool,
    /// The servers hand out fences with a plain `INCR` (the acquire scripts' floor at the
    /// server's time removed), so a node that lost its counter starts again from 1. Not a
    /// mistake of the client: the world's servers run the older scripts.
    pub plain_incr_fences: bool,
}

/// How the model client behaves.
#[derive(Clone, Debug)]
pub struct ModelOptions {
    /// Number of nodes (1, 3 or 5).
    pub nodes: usize,
    /// Lock TTL (ms).
    pub ttl_ms: u64,
    /// Per-round timeout (µs): far below the TTL.
    pub node_timeout: u64,
    /// Longest random pause between rounds (µs).
    pub retry_max: u64,
    /// Longest wait for a release signal (BLPOP) after a round found the lock taken (µs).
    pub wait_cap: u64,
    /// How long a release reserves the lock for waiters (µs).
    pub handoff_window: u64,
    /// Longest hold (µs) and longest pause between holds (µs).
    pub hold_max: u64,
    /// Longest pause between two holds (µs).
    pub think_max: u64,
    /// How often a holder acts on the protected resource (µs).
    pub use_every: u64,
    /// The mistakes to make.
    pub controls: Controls,
    /// The core's clients' rounds are interrupted at random (see `Config::interrupts`); the
    /// model client ignores it.
    pub interrupts: bool,
}

/// The design's drift allowance: 1% of the TTL plus 2 ms (µs).
pub fn drift_us(ttl_ms: u64) -> u64 {
    ttl_ms * 10 + 2_000
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Purpose {
    Acquire,
    FenceRead,
    Undo,
    FenceWrite,
    Extend,
    Release,
    Wait,
}

#[derive(Debug)]
struct Pending {
    node: usize,
    purpose: Purpose,
    argv: Vec<Vec<u8>>,
    /// The script's source, for re-sending with EVAL after NOSCRIPT.
    source: Option<&'static str>,
}

/// What a timer was for; a timer whose phase has passed is ignored.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Timer {
    Think,
    RoundDeadline(u64),
    Resend(u64),
    Retry,
    FenceDeadline(u64),
    Renew(u64),
    RenewDeadline(u64),
    Use(u64),
    HoldOver(u64),
    WaitOver(u64),
}

#[derive(Debug, Default)]
struct Round {
    no: u64,
    token: Vec<u8>,
    t0: u64,
    granted: BTreeMap<usize, u64>,
    taken: BTreeMap<usize, u64>,
    answered: Vec<usize>,
    resent: bool,
}

#[derive(Debug)]
struct Hold {
    no: u64,
    token: Vec<u8>,
    fence: u64,
    valid_until: u64,
    /// The renewal in flight: its start (boot µs), TTL (ms) and nodes that confirmed.
    renewal: Option<(u64, u64, Vec<usize>, usize)>,
}

#[derive(Debug)]
enum State {
    Idle,
    Acquiring(Round),
    /// Writing the fence back to the granted nodes that are behind (still unconfirmed).
    Fencing(Round, u64, Vec<usize>),
    Holding(Hold),
    /// Waiting in BLPOP on a node's wake-up list before the next round.
    Waiting {
        no: u64,
        node: usize,
    },
}

/// The model client.
pub struct ModelClient {
    id: usize,
    opts: ModelOptions,
    scripts: BTreeMap<&'static str, &'static str>,
    state: State,
    pending: BTreeMap<RequestId, Pending>,
    timers: BTreeMap<u64, Timer>,
    next: u64,
    /// Whether this acquisition has waited for a release (the acquire script lets only
    /// such callers in during a hand-off).
    waited: bool,
}

mod acquire;
mod hold;

impl ModelClient {
    /// A client numbered `id` (for its tokens' owner label).
    pub fn new(id: usize, opts: ModelOptions) -> ModelClient {
        let mut scripts: BTreeMap<_, _> = redmutex::sim_support::scripts().into_iter().collect();
        // The controls patch the scripts they break, and insist that the patch took.
        let mut patch = |name: &'static str, from: &str, to: &str| {
            let text = scripts[name].replace(from, to);
            assert_ne!(
                text, scripts[name],
                "the {name} script no longer has {from:?}"
            );
            scripts.insert(name, Box::leak(text.into_boxed_str()));
        };
        if opts.controls.unconditional_extend {
            patch(
                "extend",
                "redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2])",
                "true",
            );
        }
        if opts.controls.own_grant_taken {
            patch("acquire", "if holder == ARGV[1] then", "if false then");
        }
        ModelClient {
            id,
            opts,
            scripts,
            state: State::Idle,
            pending: BTreeMap::new(),
            timers: BTreeMap::new(),
            next: 0,
            waited: false,
        }
    }

    fn quorum(&self) -> usize {
        self.opts.nodes / 2 + 1
    }

    fn fresh(&mut self) -> u64 {
        self.next += 1;
        self.next
    }

    fn wake(&mut self, at: u64, t: Timer, out: &mut Vec<Output>) {
        let token = self.fresh();
        self.timers.insert(token, t);
        out.push(Output::WakeAt { mono: at, token });
    }

    /// Sends a script call (EVALSHA; EVAL again after NOSCRIPT) to `node`.
    fn script(
        &mut self,
        node: usize,
        name: &str,
        keys: &[&str],
        args: &[Vec<u8>],
        purpose: Purpose,
        out: &mut Vec<Output>,
    ) {
        let source = self.scripts[name];
        let mut argv = vec![
            b"EVALSHA".to_vec(),
            sha1_hex(source.as_bytes()).into_bytes(),
        ];
        argv.push(keys.len().to_string().into_bytes());
        argv.extend(keys.iter().map(|k| k.as_bytes().to_vec()));
        argv.extend(args.iter().cloned());
        self.send(node, argv, Some(source), purpose, out);
    }

    fn send(
        &mut self,
        node: usize,
        argv: Vec<Vec<u8>>,
        source: Option<&'static str>,
        purpose: Purpose,
        out: &mut Vec<Output>,
    ) {
        let id = self.fresh();
        out.push(Output::Send {
            node,
            id,
            argv: argv.clone(),
            after: None,
        });
        self.pending.insert(
            id,
            Pending {
                node,
                purpose,
                argv,
                source,
            },
        );
    }

    fn ms(v: u64) -> Vec<u8> {
        v.to_string().into_bytes()
    }

    fn release_on(&mut self, node: usize, token: &[u8], purpose: Purpose, out: &mut Vec<Output>) {
        if self.opts.controls.release_with_del {
            self.send(
                node,
                vec![b"DEL".to_vec(), LOCK.as_bytes().to_vec()],
                None,
                purpose,
                out,
            );
        } else {
            // Like the core: a release hands off to waiters for a short window; an undo
            // does not reserve anything.
            let window = match purpose {
                Purpose::Release => self.opts.handoff_window,
                _ => 0,
            };
            let args = [token.to_vec(), Self::ms(window / 1000)];
            self.script(node, "release", &[LOCK, WAKE, WAITERS], &args, purpose, out);
        }
    }

    fn validity(&self, t0: u64, now: Now, ttl_ms: u64) -> u64 {
        let start = if self.opts.controls.validity_from_reply {
            now.boot
        } else {
            t0
        };
        let drift = if self.opts.controls.no_drift {
            0
        } else {
            drift_us(ttl_ms)
        };
        (start + ttl_ms * 1000).saturating_sub(drift)
    }

    fn think(&mut self, now: Now, rng: &mut Rng, out: &mut Vec<Output>) {
        self.state = State::Idle;
        let at = now.mono + rng.below(self.opts.think_max + 1);
        self.wake(at, Timer::Think, out);
    }

    fn on_timer(&mut self, t: Timer, now: Now, rng: &mut Rng, out: &mut Vec<Output>) {
        let phase = match &self.state {
            State::Acquiring(r) | State::Fencing(r, ..) => r.no,
            State::Holding(h) => h.no,
            State::Waiting { no, .. } => *no,
            State::Idle => 0,
        };
        match t {
            Timer::Think if matches!(self.state, State::Idle) => {
                out.push(Output::Note(Note::Wants { shared: false }));
                self.waited = false;
                self.start_round(now, rng, out);
            }
            Timer::Retry if matches!(self.state, State::Idle) => self.start_round(now, rng, out),
            Timer::RoundDeadline(no)
                if no == phase && matches!(self.state, State::Acquiring(_)) =>
            {
                self.settle(now, rng, out)
            }
            Timer::Resend(no) if no == phase => self.resend(out),
            Timer::FenceDeadline(no) if no == phase && matches!(self.state, State::Fencing(..)) => {
                if let State::Fencing(round, ..) = std::mem::replace(&mut self.state, State::Idle) {
                    self.fail_round(round, now, rng, out);
                }
            }
            Timer::Renew(no) if no == phase => self.renew(now, rng, out),
            Timer::RenewDeadline(no) if no == phase => self.renewal_over(now, rng, out),
            Timer::Use(no) if no == phase => {
                if let State::Holding(h) = &self.state {
                    // Act only inside the validity, read on the boot clock.
                    if now.boot < h.valid_until {
                        out.push(Output::Note(Note::Use { fence: h.fence }));
                        self.wake(now.mono + self.opts.use_every, Timer::Use(no), out);
                    } else {
                        self.release(true, now, rng, out);
                    }
                }
            }
            Timer::HoldOver(no) if no == phase => self.release(false, now, rng, out),
            Timer::WaitOver(no) if no == phase => {
                // The server answers a timed-out BLPOP only on its cron tick: do not wait for
                // it; drop the connection with the BLPOP still pending, like the core.
                if let State::Waiting { node, .. } = self.state {
                    self.pending.retain(|_, p| p.purpose != Purpose::Wait);
                    out.push(Output::Reconnect { node });
                }
                self.waited = true;
                self.start_round(now, rng, out);
            }
            _ => {}
        }
    }
}

impl Client for ModelClient {
    fn handle(&mut self, input: Input, now: Now, rng: &mut Rng, out: &mut Vec<Output>) {
        match input {
            Input::Start => self.think(now, rng, out),
            Input::Wake { token } => {
                if let Some(t) = self.timers.remove(&token) {
                    self.on_timer(t, now, rng, out);
                }
            }
            Input::Reply { id, reply, .. } => self.on_reply(id, reply, now, rng, out),
            // A failed request is a silent node for this round; the timers move on.
            Input::Unwritten { .. } => {}
            Input::Failed { id, .. } => {
                self.pending.remove(&id);
            }
        }
    }
}
