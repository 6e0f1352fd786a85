//! The simulated Redis against a real `redis-server`: random sequences of the project's
//! scripts and plain commands, on keys, tokens and arguments drawn from small pools so that
//! they collide (wrong types included), must give the same reply to every command and leave
//! every key with the same type, value and TTL.
//!
//! Time: the simulated server's clock is set to the wall clock (ms) before each command is
//! sent, so expiries are compared on the same time base. TTLs in the pools are either long
//! (≥ 100 s, and no two steps set the same one) or tiny (3 ms); a step that may set a tiny one
//! is followed by a 5 ms sleep, so no comparison ever falls on an expiry's edge. PTTL-sized integers (> 1000)
//! may differ by the few ms the command spends in flight; everything else must be equal.
//!
//! `SIM_SEED=<seed>` runs that one sequence (`SIM_SEED=<a>..<b>` a range); `SIM_DIFF_SEQUENCES=<n>` changes the count.

mod support;

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redmutex_sim::redis::{Reply, Server};
use redmutex_sim::rng::Rng;
use redmutex_tests::RedisServer;
use support::resp::Resp;

const SEQUENCES: u64 = 10_000;
const BASE_SEED: u64 = 0x5EED_0000;
/// How far a PTTL may move while the command is in flight.
const TTL_SLACK_MS: i64 = 250;
/// Above this, an integer is a Unix time in µs (a fence counter raised to the server's time).
const UNIX_US: i64 = 1_000_000_000_000_000;
const KEYS: &[&str] = &[
    "lock",
    "{lock}:fence",
    "{lock}:wake",
    "{lock}:waitq",
    "{lock}:handoff",
    "x",
    "{lock}:holders",
    "{lock}:permits",
    "{lock}:readers",
    "{lock}:readq",
];
/// "" is the value of a lock during a hand-off window.
const VALUES: &[&str] = &["t1", "t2", "5", "abc", "-2", ""];
/// Millisecond TTLs other than the long ones; "3" is the tiny one that must expire before the
/// next step.
const MS: &[&str] = &["3", "0", "-5", "abc"];
const TINY: &str = "3";
/// Second TTLs: never equal to a long millisecond TTL (see [`long_ms`]).
const SECS: &[&str] = &["150", "300", "0", "-1", "abc"];
/// Most generated steps in a sequence.
const MAX_STEPS: u64 = 30;

/// A long TTL in ms for step `step`: 100 s or 200 s plus 10 ms per step. Two steps never set
/// the same TTL, and a later one always ends later than an earlier one with the same base, so
/// `GT`/`LT` never compare two expiries that the command's few ms in flight could reorder.
fn long_ms(base: usize, step: u64) -> &'static str {
    static TABLE: std::sync::LazyLock<Vec<String>> = std::sync::LazyLock::new(|| {
        [100_000, 200_000]
            .iter()
            .flat_map(|b| (0..=MAX_STEPS).map(move |s| (b + 10 * s).to_string()))
            .collect()
    });
    &TABLE[base * (MAX_STEPS as usize + 1) + step as usize]
}
/// Small scripts of our own that probe Redis's Lua rules: number truncation, `false`/`true`,
/// arrays cut at the first nil, `{err=…}`/`{ok=…}`, `redis.call` raising with the line
/// number vs `redis.pcall` returning the error, status replies as tables, numbers passed as
/// arguments, commands a script may not call, and Lua's own errors.
const PROBES: &[&str] = &[
    "return 3.99",
    "return -3.7",
    "return {1, 2, nil, 3}",
    "return {err = 'boom'}",
    "return {ok = 'fine'}",
    "return false",
    "return true",
    "return nil",
    "return {1, {2, 'x'}, true, false, 'y'}",
    "return {'a', {err = 'inner'}}",
    "return redis.call('TYPE', KEYS[1])",
    "return redis.call('TYPE', KEYS[1]).ok",
    "return redis.pcall('INCR', KEYS[1])",
    "local x = 1\nreturn redis.call('INCR', KEYS[1])",
    "return redis.call('SET', KEYS[1], 1.5)",
    "return redis.call('GET', KEYS[1])",
    "return redis.pcall('LPOP', KEYS[1])",
    "local t = redis.pcall('LPOP', KEYS[1])\nif type(t) == 'table' then return t.err end\nreturn t",
    "error('x')",
    "return redis.call('NOPE')",
    "return redis.call('BLPOP', KEYS[1], 0)",
    "return redis.pcall()",
    "return redis.call('GET')",
    "return {redis.call('PTTL', KEYS[1]) > 0}",
    "return redis.call('ZADD', KEYS[1], 2.5, 'm')",
    "return redis.call('ZSCORE', KEYS[1], 'm')",
    "return redis.error_reply('My error')",
    "return redis.status_reply('PONG')",
    "return type(redis.call('GET', KEYS[1]))",
    "return redis.call('DEL', KEYS[1], KEYS[1])",
    "return redis.call('SET', KEYS[1], 'v', 'PX', 100000, 'GET')",
    "return {redis.pcall('SET', KEYS[1], 'v', 'PX', 0)}",
    "return tostring(redis.call('INCRBY', KEYS[1], 2^53))",
    "return redis.call('EXPIRE', KEYS[1], 400, 'GT')",
    "return redis.call('LRANGE', KEYS[1], 0, -1)",
];
const SCORES: &[&str] = &["1", "2.5", "0.1", "-3", "+inf", "abc", "(1"];

fn wall_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_millis() as u64
}

fn argv(words: &[&str]) -> Vec<Vec<u8>> {
    words.iter().map(|w| w.as_bytes().to_vec()).collect()
}

/// One step: a command on the main connection, a BLPOP on the second one, `CLIENT UNBLOCK`
/// of the second one from the main one, or a pause.
#[derive(Clone, Debug)]
enum Step {
    Cmd(Vec<Vec<u8>>),
    Blpop(Vec<Vec<u8>>),
    Unblock,
    Sleep(u64),
}

struct Gen {
    rng: Rng,
    /// How many steps were generated so far (for [`long_ms`]).
    step_no: u64,
    scripts: Vec<(&'static str, &'static str, String)>,
}

impl Gen {
    fn pick(&mut self, pool: &[&'static str]) -> &'static str {
        pool[self.rng.below(pool.len() as u64) as usize]
    }

    fn key(&mut self) -> &'static str {
        self.pick(KEYS)
    }

    /// A millisecond TTL; the tiny one rarely, since each costs a sleep.
    fn ms(&mut self) -> &'static str {
        if self.rng.chance(0.015) {
            TINY
        } else if self.rng.chance(0.85) {
            long_ms(self.rng.below(2) as usize, self.step_no)
        } else {
            self.pick(&MS[1..])
        }
    }

    /// The keys a script is meant to get, or (sometimes) any keys from the pool.
    fn script_keys(&mut self, name: &str) -> Vec<&'static str> {
        let canonical: &[&str] = match name {
            "acquire" => &[KEYS[0], KEYS[1], KEYS[8], KEYS[3]],
            "release" => &[KEYS[0], KEYS[2], KEYS[3]],
            "extend" => &[KEYS[0]],
            "fence_max" => &[KEYS[1], KEYS[0]],
            "sem_acquire" => &[KEYS[6], KEYS[7], KEYS[1], KEYS[3]],
            "read_acquire" => &[KEYS[0], KEYS[1], KEYS[3], KEYS[9], KEYS[8], KEYS[2]],
            "shared_extend" => &[KEYS[6], KEYS[7]],
            "shared_release" => &[KEYS[6], KEYS[2], KEYS[3], KEYS[0], KEYS[7]],
            "shared_status" => &[KEYS[6], KEYS[7], KEYS[1]],
            "pass_on" => &[KEYS[2], KEYS[3]],
            _ => &[KEYS[0], KEYS[1]],
        };
        if self.rng.chance(0.75) {
            canonical.to_vec()
        } else {
            (0..canonical.len()).map(|_| self.key()).collect()
        }
    }

    fn script_args(&mut self, name: &str) -> Vec<&'static str> {
        let token = self.pick(&["t1", "t2", "t3"]);
        let flag = |g: &mut Gen| g.pick(&["0", "1"]);
        match name {
            "acquire" => {
                let ttl = self.ms();
                let (f, w) = (flag(self), flag(self));
                // Never a tiny announcement: when it shares a key with the one whose PTTL the
                // script returns, Redis 7.0 reads that PTTL on a clock that may have moved a
                // millisecond since the SET (only the expiry decision is frozen in a script),
                // while the simulation runs a script in no time at all.
                let announce = match self.ms() {
                    TINY => "0",
                    ms if self.rng.chance(0.5) => ms,
                    _ => "0",
                };
                // The waiter's id: the announcement's member (its `PEXPIREAT` and the
                // release's signal follow from it).
                let waiter = self.pick(&["w1", "w2", "w1", ""]);
                vec![token, ttl, f, w, announce, waiter]
            }
            "release" => {
                let handoff = if self.rng.chance(0.5) { "0" } else { self.ms() };
                vec![token, self.ms(), handoff]
            }
            "extend" | "shared_extend" => vec![token, self.ms()],
            "fence_max" => vec![self.pick(&["0", "1", "2", "5", "abc"]), token],
            "sem_acquire" | "read_acquire" => {
                let mut args = self.script_args("acquire");
                if name == "sem_acquire" {
                    args.push(self.pick(&["1", "2", "3", "2"]));
                }
                args
            }
            "shared_release" => {
                let handoff = if self.rng.chance(0.5) { "0" } else { self.ms() };
                vec![token, handoff, self.pick(&["0", "1"])]
            }
            // Not `1`: the simulated server has no sharded pub/sub (no waits listen there).
            "pass_on" => vec!["0"],
            _ => vec![],
        }
    }

    fn script_step(&mut self) -> Step {
        let i = self.rng.below(self.scripts.len() as u64) as usize;
        let (name, source, sha) = self.scripts[i].clone();
        let mut keys = self.script_keys(name);
        let mut args = self.script_args(name);
        // A caller that has not waited and will not wait sends the acquire without the
        // waiters key and the three waiter arguments.
        if name == "acquire" && self.rng.chance(0.5) {
            keys.truncate(3);
            args.truncate(3);
        }
        let (verb, body) = if self.rng.chance(0.7) {
            ("EVALSHA", sha)
        } else {
            ("EVAL", source.to_string())
        };
        let mut words = vec![verb.to_string(), body, keys.len().to_string()];
        words.extend(keys.iter().chain(&args).map(|s| s.to_string()));
        Step::Cmd(words.into_iter().map(String::into_bytes).collect())
    }

    fn step(&mut self) -> Step {
        let k = self.key();
        let v = self.pick(VALUES);
        let words: Vec<&str> = match self.rng.below(30) {
            0..=8 => return self.script_step(),
            9 => {
                let body = self.pick(PROBES);
                let verb = self.pick(&["EVAL", "EVAL", "SCRIPT"]);
                if verb == "SCRIPT" {
                    vec!["SCRIPT", "LOAD", body]
                } else {
                    vec!["EVAL", body, "1", k]
                }
            }
            10 => vec!["SET", k, v, "NX", "PX", self.ms()],
            11 => {
                let mut w = vec!["SET", k, v];
                for opt in [["NX", "XX"], ["GET", "GET"], ["KEEPTTL", "EX"]] {
                    if self.rng.chance(0.4) {
                        w.push(self.pick(&opt));
                        if w.last() == Some(&"EX") {
                            w.push(self.pick(SECS));
                        }
                    }
                }
                w
            }
            12 => vec!["GET", k],
            13 => vec!["DEL", k, self.key()],
            14 => vec![self.pick(&["RPUSH", "LPUSH"]), k, v, self.pick(VALUES)],
            15 => vec!["LPOP", k],
            16 => vec![self.pick(&["LLEN", "EXISTS", "TYPE"]), k],
            17 => vec![
                self.pick(&["LRANGE", "LRANGE", "LTRIM"]),
                k,
                self.pick(&["0", "1", "-1"]),
                self.pick(&["-1", "0", "5"]),
            ],
            18 => {
                let cmd = self.pick(&["PEXPIRE", "EXPIRE"]);
                let t = if cmd == "PEXPIRE" {
                    self.ms()
                } else {
                    self.pick(SECS)
                };
                let mut w = vec![cmd, k, t];
                if self.rng.chance(0.6) {
                    w.push(self.pick(&["NX", "XX", "GT", "LT", "BAD"]));
                }
                if self.rng.chance(0.1) {
                    w.push(self.pick(&["NX", "XX", "GT", "LT"]));
                }
                w
            }
            19 => vec![self.pick(&["PTTL", "TTL"]), k],
            20 => vec!["INCR", k],
            21 => vec!["INCRBY", k, self.pick(&["7", "-3", "x"])],
            22 => vec![
                "ZADD",
                k,
                self.pick(&["NX", "XX", "GT", "CH", "1"]),
                self.pick(SCORES),
                v,
            ],
            23 => vec![self.pick(&["ZREM", "ZSCORE"]), k, v],
            24 => vec!["ZRANGE", k, "0", "-1", "WITHSCORES"],
            25 => vec!["ZREMRANGEBYSCORE", k, self.pick(SCORES), self.pick(SCORES)],
            26 => vec![self.pick(&["ZCARD", "GET"]), k],
            27 => {
                let i = self.rng.below(self.scripts.len() as u64) as usize;
                let src = self.scripts[i].1;
                if self.rng.chance(0.7) {
                    vec!["SCRIPT", "LOAD", src]
                } else {
                    vec!["SCRIPT", "FLUSH"]
                }
            }
            _ if self.rng.chance(0.25) => return Step::Unblock,
            _ => {
                let mut w = vec!["BLPOP", k];
                if self.rng.chance(0.3) {
                    w.push(self.key());
                }
                w.push(self.pick(&["0", "0", "0", "abc", "-1"]));
                return Step::Blpop(argv(&w));
            }
        };
        Step::Cmd(argv(&words))
    }

    fn sequence(&mut self) -> Vec<Step> {
        let n = self.rng.range(4, MAX_STEPS);
        let mut steps = Vec::new();
        for i in 0..n {
            self.step_no = i;
            let s = self.step();
            let tiny = matches!(&s, Step::Cmd(a) | Step::Blpop(a) if a.iter().any(|w| w == TINY.as_bytes()));
            steps.push(s);
            if tiny {
                steps.push(Step::Sleep(5));
            }
        }
        steps
    }
}

/// Equal, or both PTTL-sized and within the in-flight slack, or both Unix times in ms (a
/// waiter's announcement, scored by the server's `TIME`) within the same slack, or both Unix
/// times in µs (a fence counter raised to the server's `TIME`; the simulated server's clock
/// counts whole ms) within it too.
fn same(a: &Reply, b: &Reply) -> bool {
    let close = |x: i64, y: i64| {
        let slack = if x > UNIX_US && y > UNIX_US {
            TTL_SLACK_MS * 1000
        } else {
            TTL_SLACK_MS
        };
        (x - y).abs() <= slack
    };
    let unix = |b: &[u8]| {
        std::str::from_utf8(b)
            .ok()
            .and_then(|s| s.parse::<i64>().ok())
            .filter(|t| *t > 1_000_000_000_000)
    };
    match (a, b) {
        (Reply::Bulk(x), Reply::Bulk(y)) if x != y => match (unix(x), unix(y)) {
            (Some(x), Some(y)) => close(x, y),
            _ => false,
        },
        (Reply::Int(x), Reply::Int(y)) => x == y || (*x > 1000 && *y > 1000 && close(*x, *y)),
        (Reply::Array(x), Reply::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same(a, b))
        }
        _ => a == b,
    }
}

fn show(words: &[Vec<u8>], scripts: &[(&str, &str, String)]) -> String {
    words
        .iter()
        .map(|w| {
            let s = String::from_utf8_lossy(w);
            match scripts
                .iter()
                .find(|(_, src, sha)| s == *src || s == sha.as_str())
            {
                Some((name, src, _)) if s == *src => format!("<{name} source>"),
                Some((name, ..)) => format!("<{name} sha>"),
                None => s.into_owned(),
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Both sides of one comparison run: the real server's two connections and the simulator.
struct Pair {
    real: Resp,
    blocker: Resp,
    /// The real server's id of the second connection (`CLIENT ID`).
    blocker_id: String,
    /// How many `CLIENT UNBLOCK`s were sent: they alternate between the two ways to end.
    unblocks: u64,
    sim: Server,
    log: Vec<String>,
    ok: bool,
}

const MAIN: u64 = 1;
const BLOCKER: u64 = 2;

impl Pair {
    fn compare(&mut self, what: String, sim: &Reply, real: &Reply) {
        let mark = if same(sim, real) { "  " } else { "!!" };
        self.ok &= mark == "  ";
        self.log.push(format!(
            "{mark} {what}\n     sim:  {sim}\n     real: {real}"
        ));
    }

    /// Waits until the real server has the second connection blocked: its BLPOP travels on
    /// another socket, and the next command must not overtake it.
    fn wait_until_blocked(&mut self, seed: u64) {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let info = match self.real.call(&argv(&["INFO", "clients"])) {
                Reply::Bulk(b) => String::from_utf8_lossy(&b).into_owned(),
                other => panic!("INFO answered {other:?}"),
            };
            if info.contains("blocked_clients:1") {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "seed {seed}: redis-server never blocked the BLPOP"
            );
            std::thread::yield_now();
        }
    }

    /// Runs one command on both; reads the blocker's reply if the command served it.
    fn cmd(&mut self, words: &[Vec<u8>], label: String, blocked: &mut Option<Vec<u8>>) {
        self.both(words, words, label, blocked);
    }

    /// Ends the second connection's BLPOP, if it waits, as if it had timed out, or with the
    /// `UNBLOCKED` error as the library asks: `CLIENT UNBLOCK` by each side's own id for it.
    fn unblock(&mut self, blocked: &mut Option<Vec<u8>>) {
        let mode = if self.unblocks.is_multiple_of(2) {
            "ERROR"
        } else {
            "TIMEOUT"
        };
        self.unblocks += 1;
        let real = argv(&["CLIENT", "UNBLOCK", &self.blocker_id, mode]);
        let sim = argv(&["CLIENT", "UNBLOCK", &BLOCKER.to_string(), mode]);
        let label = "CLIENT UNBLOCK [second connection]".into();
        self.both(&real, &sim, label, blocked);
    }

    /// Runs `real` on the server and `sim` on the simulator (the same command, but for the
    /// ids each gives a connection); reads the blocker's reply if the command served it.
    fn both(
        &mut self,
        real: &[Vec<u8>],
        sim: &[Vec<u8>],
        label: String,
        blocked: &mut Option<Vec<u8>>,
    ) {
        self.sim.set_now(wall_ms());
        let real = self.real.call(real);
        let sim = self.sim.exec(MAIN, sim).expect("only BLPOP blocks");
        self.compare(label, &sim, &real);
        for (client, reply) in self.sim.take_served() {
            assert_eq!(client, BLOCKER);
            *blocked = None;
            let real = self.blocker.read();
            self.compare("   (blocked BLPOP served)".into(), &reply, &real);
        }
    }
}

fn run_sequence(pair: &mut Pair, seed: u64, scripts: &[(&'static str, &'static str, String)]) {
    let mut generator = Gen {
        rng: Rng::new(seed),
        step_no: 0,
        scripts: scripts.to_vec(),
    };
    let steps = generator.sequence();
    pair.real.call(&argv(&["FLUSHALL"]));
    pair.real.call(&argv(&["SCRIPT", "FLUSH"]));
    pair.sim.restart(false);
    pair.log.clear();
    pair.ok = true;
    // The first key the second connection's BLPOP waits on, while it waits.
    let mut blocked: Option<Vec<u8>> = None;
    for step in &steps {
        match step {
            Step::Sleep(ms) => {
                std::thread::sleep(Duration::from_millis(*ms));
                pair.log.push(format!("   (sleep {ms} ms)"));
            }
            Step::Cmd(w) => pair.cmd(w, show(w, scripts), &mut blocked),
            Step::Blpop(w) if blocked.is_none() => {
                pair.sim.set_now(wall_ms());
                pair.blocker.send(std::slice::from_ref(w));
                let label = format!("[second connection] {}", show(w, scripts));
                match pair.sim.exec(BLOCKER, w) {
                    Some(sim) => {
                        let real = pair.blocker.read();
                        pair.compare(label, &sim, &real);
                    }
                    None => {
                        pair.wait_until_blocked(seed);
                        blocked = Some(w[1].clone());
                        pair.log.push(format!("   {label}  (blocks)"));
                    }
                }
            }
            Step::Blpop(_) => {}
            Step::Unblock => pair.unblock(&mut blocked),
        }
    }
    if let Some(key) = blocked.clone() {
        // Wake the waiting BLPOP on both sides, through the first key it waits on.
        let key = String::from_utf8(key).expect("pool keys are text");
        for words in [argv(&["DEL", &key]), argv(&["RPUSH", &key, "wake"])] {
            pair.cmd(&words, show(&words, scripts), &mut blocked);
        }
        assert!(
            blocked.is_none(),
            "seed {seed}: the simulator did not serve its blocked BLPOP"
        );
    }
    // Every key's type, TTL and value, pipelined on the real side.
    let mut dump = Vec::new();
    for k in KEYS {
        for cmd in [
            &["TYPE", k][..],
            &["PTTL", k],
            &["GET", k],
            &["LRANGE", k, "0", "-1"],
            &["ZRANGE", k, "0", "-1", "WITHSCORES"],
        ] {
            dump.push(argv(cmd));
        }
    }
    pair.sim.set_now(wall_ms());
    pair.real.send(&dump);
    for words in &dump {
        let real = pair.real.read();
        let sim = pair.sim.exec(MAIN, words).expect("no blocking here");
        pair.compare(format!("(final) {}", show(words, scripts)), &sim, &real);
    }
    if !pair.ok {
        panic!(
            "the simulated Redis differs from redis-server; rerun with SIM_SEED={seed}\n{}",
            pair.log.join("\n")
        );
    }
}

#[test]
fn simulated_redis_matches_redis_server() {
    let scripts: Vec<_> = redmutex::sim_support::scripts()
        .into_iter()
        .map(|(name, src)| (name, src, redmutex_sim::redis::sha1_hex(src.as_bytes())))
        .collect();
    let seeds: Vec<u64> = match std::env::var("SIM_SEED") {
        Ok(s) => match s.split_once("..") {
            Some((a, b)) => (a.parse().expect("a seed")..b.parse().expect("a seed")).collect(),
            None => vec![s.parse().expect("SIM_SEED is a number")],
        },
        Err(_) => {
            let n = std::env::var("SIM_DIFF_SEQUENCES")
                .map_or(SEQUENCES, |n| n.parse().expect("a count"));
            (0..n).map(|i| BASE_SEED + i).collect()
        }
    };
    let started = Instant::now();
    // Two servers, two threads: the sequences are independent, and the round trips dominate.
    std::thread::scope(|scope| {
        for chunk in seeds.chunks(seeds.len().div_ceil(2)) {
            let scripts = &scripts;
            scope.spawn(move || {
                let server = RedisServer::start();
                let mut blocker = Resp::connect(server.port());
                let blocker_id = match blocker.call(&argv(&["CLIENT", "ID"])) {
                    Reply::Int(id) => id.to_string(),
                    other => panic!("CLIENT ID answered {other:?}"),
                };
                let mut pair = Pair {
                    real: Resp::connect(server.port()),
                    blocker,
                    blocker_id,
                    unblocks: 0,
                    sim: Server::new(),
                    log: Vec::new(),
                    ok: true,
                };
                for &seed in chunk {
                    run_sequence(&mut pair, seed, scripts);
                }
            });
        }
    });
    eprintln!(
        "differential: {} sequences in {:.1?}",
        seeds.len(),
        started.elapsed()
    );
}

/// A script's number that no 64-bit integer holds (±inf, NaN, 2^63 and beyond) reaches the
/// client as the server's C cast makes it on its machine. The random sequences meet one
/// through a read hold whose expiry is `+inf`: the acquire script returns its remaining time.
#[test]
fn numbers_beyond_the_integer_range_convert_as_on_the_server() {
    let server = RedisServer::start();
    let mut real = Resp::connect(server.port());
    let mut sim = Server::new();
    for expr in [
        "1/0", "-1/0", "0/0", "2^63", "-2^63", "2^64", "-2^64", "1e300", "2^62", "-2.5",
    ] {
        let words = argv(&["EVAL", &format!("return {expr}"), "0"]);
        let (real, sim) = (real.call(&words), sim.exec(MAIN, &words).expect("no block"));
        assert!(same(&sim, &real), "return {expr}: sim {sim}, real {real}");
    }
}
