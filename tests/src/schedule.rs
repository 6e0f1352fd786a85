//! A random fault schedule per seed, and its run: torture clients (`tests/src/bin/torture.rs`)
//! that lock, use, extend with random TTLs, unlock or drop, on nodes behind fault proxies; the
//! schedule stops (`SIGSTOP`) and kills clients, freezes nodes, restarts them (with their
//! append-only file, `appendfsync always`), kills their client connections, and switches each
//! node's proxy to a random [`Mode`] every few hundred milliseconds. One seed decides every
//! choice of the schedule, so a failing seed shows the same faults again (the machine's
//! timing still varies from run to run).
//!
//! ```no_run
//! use std::time::Duration;
//! use redmutex_tests::schedule::{self, Schedule};
//!
//! // In an integration test of this crate: env!("CARGO_BIN_EXE_torture").
//! let torture = "target/debug/torture";
//! let plan = Schedule::draw(7, Duration::from_secs(3));
//! let outcome = schedule::run(torture, &plan);
//! assert!(outcome.report.is_clean(), "{}", outcome.report);
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::time::{Duration, Instant};

use crate::RedisServers;
use crate::history::{self, Event, Report, Violation, mono_ns};
use crate::proxy::{FaultProxy, Mode};
use crate::torture::{Run, Summary, kill_library_connections};

/// splitmix64: a small deterministic generator.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator whose every draw follows from `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn bits(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `lo..=hi`.
    pub fn between(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.bits() % (hi - lo + 1)
    }

    /// True with probability `percent` %.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.bits() % 100 < percent
    }

    fn ms(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(self.between(lo, hi))
    }
}

/// One client of a schedule (a slot: a killed client is replaced by a new one in its slot).
#[derive(Debug, Clone)]
pub struct ClientPlan {
    /// The TTL of its locks.
    pub ttl_ms: u64,
    /// How long each section holds the lock, drawn per section from this range.
    pub hold_ms: (u64, u64),
    /// The TTL each section extends its lease to, drawn from this range.
    pub extend_ms: (u64, u64),
    /// `unlock`, `drop` or `mix`.
    pub release: &'static str,
    /// The seed of its own draws (hold times, extensions, releases).
    pub seed: u64,
}

/// One step of a schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// `SIGSTOP` the client in this slot.
    StopClient(usize),
    /// `SIGCONT` it.
    ResumeClient(usize),
    /// `SIGKILL` it, and start a new client in its slot for the rest of the schedule.
    KillClient(usize),
    /// `SIGSTOP` the node's `redis-server`.
    FreezeNode(usize),
    /// `SIGCONT` it.
    ThawNode(usize),
    /// Kill the node and start it again on its port, from its append-only file.
    RestartNode(usize),
    /// `CLIENT KILL` every connection of the library on the node.
    KillConnections(usize),
    /// Switch the node's proxy to this mode.
    Proxy(usize, Mode),
}

/// What happens in one run, decided by its seed.
#[derive(Debug, Clone)]
pub struct Schedule {
    /// The seed it was drawn from.
    pub seed: u64,
    /// Lock nodes (1, or 3 for Redlock).
    pub nodes: usize,
    /// The client slots.
    pub clients: Vec<ClientPlan>,
    /// How long clients start new sections.
    pub length: Duration,
    /// The steps, by time since the start.
    pub steps: Vec<(Duration, Action)>,
}

impl Schedule {
    /// Draws a schedule of about `length` from `seed`.
    pub fn draw(seed: u64, length: Duration) -> Schedule {
        let mut rng = Rng::new(seed ^ 0x5EED_5EED_5EED_5EED);
        let len = length.as_millis() as u64;
        let nodes = if rng.chance(50) { 1 } else { 3 };
        let clients: Vec<ClientPlan> = (0..rng.between(3, 5))
            .map(|_| {
                let ttl = rng.between(150, 600);
                ClientPlan {
                    ttl_ms: ttl,
                    hold_ms: (1, rng.between(20, 2 * ttl)),
                    extend_ms: (rng.between(100, 300), rng.between(300, 900)),
                    release: ["unlock", "drop", "mix"][rng.between(0, 2) as usize],
                    seed: rng.bits(),
                }
            })
            .collect();
        let max_ttl = clients.iter().map(|c| c.ttl_ms).max().unwrap_or(300);
        let mut steps = Vec::new();

        // Clients: a few stops and kills, never two at once in one slot.
        let mut busy = vec![Duration::ZERO; clients.len()];
        for _ in 0..rng.between(1, 4) {
            let slot = rng.between(0, clients.len() as u64 - 1) as usize;
            let at = rng.ms(200, len.saturating_sub(200).max(200));
            if at < busy[slot] {
                continue;
            }
            if rng.chance(60) {
                let pause = rng.ms(50, 3 * max_ttl);
                steps.push((at, Action::StopClient(slot)));
                steps.push((at + pause, Action::ResumeClient(slot)));
                busy[slot] = at + pause;
            } else {
                steps.push((at, Action::KillClient(slot)));
                busy[slot] = at;
            }
        }

        // Nodes: freezes, restarts and connection kills, one at a time per node.
        let mut busy = vec![Duration::ZERO; nodes];
        for _ in 0..rng.between(1, 3) {
            let node = rng.between(0, nodes as u64 - 1) as usize;
            let at = rng.ms(200, len.saturating_sub(200).max(200));
            if at < busy[node] {
                continue;
            }
            match rng.between(0, 2) {
                0 => {
                    let frozen = rng.ms(50, 2 * max_ttl);
                    steps.push((at, Action::FreezeNode(node)));
                    steps.push((at + frozen, Action::ThawNode(node)));
                    busy[node] = at + frozen;
                }
                1 => {
                    steps.push((at, Action::RestartNode(node)));
                    busy[node] = at + Duration::from_millis(100);
                }
                _ => {
                    // A burst: whatever reconnects within it is killed again.
                    let burst = rng.between(100, 500);
                    for t in (0..burst).step_by(20) {
                        steps.push((at + Duration::from_millis(t), Action::KillConnections(node)));
                    }
                    busy[node] = at + Duration::from_millis(burst);
                }
            }
        }

        // Each node's proxy: a new mode every 150–400 ms, back to Pass at the end.
        for node in 0..nodes {
            let mut at = Duration::ZERO;
            while at.as_millis() < u128::from(len) {
                // Pass for about 40 % of the time: the faults that fail a call (cut, dropped,
                // blackholed) are rarer than those a call survives (delays, duplicates).
                let mode = match rng.between(0, 19) {
                    0..=7 => Mode::Pass,
                    8..=9 => Mode::Delay(rng.ms(10, 100)),
                    10..=12 => Mode::DelayRequests(rng.ms(10, 250)),
                    13..=15 => Mode::Duplicate,
                    16..=17 => Mode::CutAfterRequest,
                    18 => Mode::DropReplies,
                    _ => Mode::Blackhole,
                };
                steps.push((at, Action::Proxy(node, mode)));
                at += rng.ms(150, 400);
            }
            steps.push((length, Action::Proxy(node, Mode::Pass)));
        }
        steps.sort_by_key(|(at, _)| *at);
        Schedule {
            seed,
            nodes,
            clients,
            length,
            steps,
        }
    }

    /// How many steps of each kind (proxy modes by name).
    pub fn counts(&self) -> BTreeMap<&'static str, usize> {
        let mut out = BTreeMap::new();
        for (_, a) in &self.steps {
            let name = match a {
                Action::StopClient(_) => "client stopped",
                Action::ResumeClient(_) => continue,
                Action::KillClient(_) => "client killed",
                Action::FreezeNode(_) => "node frozen",
                Action::ThawNode(_) => continue,
                Action::RestartNode(_) => "node restarted",
                Action::KillConnections(_) => "connection-kill pass",
                Action::Proxy(_, Mode::Pass) => continue,
                Action::Proxy(_, Mode::Delay(_)) => "proxy: delay replies",
                Action::Proxy(_, Mode::DelayRequests(_) | Mode::DelayRequestsWith(..)) => {
                    "proxy: delay requests"
                }
                Action::Proxy(_, Mode::Duplicate) => "proxy: duplicate",
                Action::Proxy(_, Mode::CutAfterRequest) => "proxy: cut after request",
                Action::Proxy(_, Mode::ResetAfterRequest) => "proxy: reset after request",
                Action::Proxy(_, Mode::CutThenBlackhole) => "proxy: cut, then blackhole",
                Action::Proxy(_, Mode::CutThenDelayRequests(_)) => "proxy: cut, then delay",
                Action::Proxy(_, Mode::DropReplies) => "proxy: drop replies",
                Action::Proxy(_, Mode::Blackhole) => "proxy: blackhole",
            };
            *out.entry(name).or_default() += 1;
        }
        out
    }
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "seed {}: {} node(s), {} clients (TTL {} ms), {:?}",
            self.seed,
            self.nodes,
            self.clients.len(),
            self.clients
                .iter()
                .map(|c| c.ttl_ms.to_string())
                .collect::<Vec<_>>()
                .join("/"),
            self.counts()
        )
    }
}

/// What a run of a schedule produced.
pub struct Outcome {
    /// The checker's verdict on every client's history.
    pub report: Report,
    /// Each client's summary (`None`: it was killed).
    pub summaries: Vec<(String, Option<Summary>)>,
    /// Requests the proxies duplicated, and connections they cut after a request.
    pub duplicated: usize,
    /// Connections the proxies cut after a request.
    pub cut: usize,
    /// Library connections killed with `CLIENT KILL`.
    pub killed_connections: usize,
    /// Every client's history.
    pub events: Vec<Event>,
    /// When the schedule started (`CLOCK_MONOTONIC` ns), and when each step was applied.
    pub started_ns: i64,
    /// `(time applied, step)`, in the order applied.
    pub applied: Vec<(i64, Action)>,
}

impl Outcome {
    /// For each violation: the events of the holds involved and every step applied between
    /// 1 s before the first of them and 1 s after the last, times in ms since the start.
    pub fn excerpt(&self) -> String {
        let ms = |t: i64| (t - self.started_ns) as f64 / 1e6;
        let mut out = String::new();
        for v in &self.report.violations {
            let tokens: Vec<&str> = match v {
                Violation::Overlap { first, second, .. } => vec![&first.token, &second.token],
                Violation::FenceNotIncreasing { previous, hold } => {
                    vec![&previous.token, &hold.token]
                }
                Violation::UseOutsideHold { event, .. } => vec![&event.token],
                Violation::ReleaseWithoutAcquire { event } => vec![&event.token],
            };
            let mine: Vec<&Event> = self
                .events
                .iter()
                .filter(|e| tokens.contains(&e.token.as_str()))
                .collect();
            let (Some(lo), Some(hi)) = (
                mine.iter().map(|e| e.t_ns).min(),
                mine.iter().map(|e| e.t_ns.max(e.validity_ns)).max(),
            ) else {
                continue;
            };
            out.push_str(&format!("{v}\n"));
            let mut lines: Vec<(i64, String)> = mine
                .iter()
                .map(|e| {
                    (
                        e.t_ns,
                        format!(
                            "{:9.1} {} {} fence {} valid to {:.1} token {}",
                            ms(e.t_ns),
                            e.client,
                            e.event.as_str(),
                            e.fence,
                            ms(e.validity_ns),
                            e.token
                        ),
                    )
                })
                .collect();
            for (t, a) in &self.applied {
                if (lo - 1_000_000_000..=hi + 1_000_000_000).contains(t) {
                    lines.push((*t, format!("{:9.1} step {a:?}", ms(*t))));
                }
            }
            lines.sort_by_key(|(t, _)| *t);
            for (_, l) in lines {
                out.push_str(&format!("  {l}\n"));
            }
        }
        out
    }
}

/// Runs `plan` with the torture driver at `exe`; every client's history goes through
/// [`history::check`]. Panics if a client fails or the run outlasts its bounds.
pub fn run(exe: &str, plan: &Schedule) -> Outcome {
    let mut servers = RedisServers::start_with(
        plan.nodes,
        &["--appendonly", "yes", "--appendfsync", "always"],
    );
    let proxies = FaultProxy::in_front_of(&servers);
    let urls: Vec<String> = proxies.iter().map(FaultProxy::url).collect();
    let mut run = Run::new(exe, "chaos:lock");
    let start = Instant::now();
    let started_ns = mono_ns();
    let mut applied = Vec::new();
    let spawn = |run: &mut Run, slot: usize, name: &str| {
        let c = &plan.clients[slot];
        let left = plan
            .length
            .saturating_sub(start.elapsed())
            .as_millis()
            .to_string();
        let (ttl, seed) = (c.ttl_ms.to_string(), c.seed.to_string());
        let hold = format!("{}:{}", c.hold_ms.0, c.hold_ms.1);
        let extend = format!("{}:{}", c.extend_ms.0, c.extend_ms.1);
        let args = [
            "--n",
            "1000000",
            "--for-ms",
            &left,
            "--ttl-ms",
            &ttl,
            "--hold-ms",
            &hold,
            "--extend-ms",
            &extend,
            "--release",
            c.release,
            "--seed",
            &seed,
            "--fenced",
            "--keep-going",
            "--node-timeout-ms",
            "50",
            "--connect-timeout-ms",
            "1000",
            "--wait-ms",
            "2000",
        ];
        run.spawn(name, &urls, &args);
    };
    let mut names: Vec<String> = (0..plan.clients.len()).map(|i| format!("c{i}")).collect();
    for (slot, name) in names.iter().enumerate() {
        spawn(&mut run, slot, name);
    }
    let mut killed_connections = 0;
    for (at, action) in &plan.steps {
        if let Some(wait) = at.checked_sub(start.elapsed()) {
            std::thread::sleep(wait);
        }
        applied.push((mono_ns(), *action));
        match *action {
            Action::StopClient(slot) => run.signal(&names[slot], libc::SIGSTOP),
            Action::ResumeClient(slot) => run.signal(&names[slot], libc::SIGCONT),
            Action::KillClient(slot) => {
                run.signal(&names[slot], libc::SIGKILL);
                let mut k = 1;
                while run.has(&format!("c{slot}r{k}")) {
                    k += 1;
                }
                names[slot] = format!("c{slot}r{k}");
                spawn(&mut run, slot, &names[slot]);
            }
            Action::FreezeNode(n) => servers[n].pause(),
            Action::ThawNode(n) => servers[n].resume(),
            Action::RestartNode(n) => servers[n].restart(),
            Action::KillConnections(n) => {
                killed_connections += kill_library_connections(&mut servers[n].conn(), "").0;
            }
            Action::Proxy(n, mode) => proxies[n].set_mode(mode),
        }
    }
    let summaries = run.finish();
    let events = run.events();
    Outcome {
        report: history::check(&events),
        events,
        started_ns,
        applied,
        summaries,
        duplicated: proxies.iter().map(FaultProxy::duplicated).sum(),
        cut: proxies.iter().map(FaultProxy::cut).sum(),
        killed_connections,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_decides_the_schedule() {
        let len = Duration::from_secs(3);
        let a = Schedule::draw(5, len);
        let b = Schedule::draw(5, len);
        assert_eq!(a.steps, b.steps);
        assert_eq!(a.nodes, b.nodes);
        let kinds: usize = (0..50)
            .map(|s| Schedule::draw(s, len).counts().len())
            .max()
            .unwrap();
        assert!(kinds >= 8, "schedules use few kinds of fault: {kinds}");
        for seed in 0..50 {
            let s = Schedule::draw(seed, len);
            // Every stop is followed by its resume, every freeze by its thaw.
            for (i, (at, a)) in s.steps.iter().enumerate() {
                let undo = match a {
                    Action::StopClient(c) => Action::ResumeClient(*c),
                    Action::FreezeNode(n) => Action::ThawNode(*n),
                    _ => continue,
                };
                assert!(
                    s.steps[i..].iter().any(|(t, b)| *b == undo && t >= at),
                    "{s}"
                );
            }
            // Each proxy ends in Pass.
            for n in 0..s.nodes {
                let last = s.steps.iter().rev().find_map(|(_, a)| match a {
                    Action::Proxy(m, mode) if *m == n => Some(*mode),
                    _ => None,
                });
                assert_eq!(last, Some(Mode::Pass));
            }
        }
    }
}
