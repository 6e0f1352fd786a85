//! Whole-world runs: the model client on 1, 3 and 5 simulated nodes with faults, every
//! property checked after every step.
//!
//! A failing run prints its seed; `SIM_SEED=<seed> cargo test --release -p redmutex-sim`
//! replays exactly that run, with its trace. `SIM_RUNS=<n>` changes how many seeds run.

use std::time::Instant;

use redmutex_sim::client::model::Controls;
use redmutex_sim::world::{Config, Outcome, run};

const RUNS: u64 = 120;
const BASE_SEED: u64 = 0xA11_0000;

fn seeds() -> Vec<u64> {
    match std::env::var("SIM_SEED") {
        Ok(s) => vec![s.parse().expect("SIM_SEED is a number")],
        Err(_) => {
            let n = std::env::var("SIM_RUNS").map_or(RUNS, |n| n.parse().expect("a count"));
            (0..n).map(|i| BASE_SEED + i).collect()
        }
    }
}

/// Runs one seed; on a violation, runs it again keeping the trace, and prints its tail.
fn run_seed(seed: u64, controls: Controls) -> Outcome {
    let out = run(Config::from_seed(seed, controls));
    if out.violation.is_some() && std::env::var("SIM_SEED").is_ok() {
        let mut cfg = Config::from_seed(seed, controls);
        cfg.keep_trace = true;
        let again = run(cfg);
        eprintln!("trace of seed {seed}:\n{}", again.trace.join("\n"));
    }
    out
}

#[test]
fn the_model_client_keeps_every_property_under_faults() {
    let started = Instant::now();
    let seeds = seeds();
    // Two threads: runs are independent, and each is deterministic on its own.
    let results: Vec<(u64, Outcome)> = std::thread::scope(|scope| {
        let handles: Vec<_> = seeds
            .chunks(seeds.len().div_ceil(2))
            .map(|chunk| {
                scope.spawn(move || {
                    chunk
                        .iter()
                        .map(|&s| (s, run_seed(s, Controls::default())))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("a run panicked"))
            .collect()
    });
    let (mut ops, mut grants, mut sim_us, mut events) = (0, 0, 0, 0);
    for (seed, out) in &results {
        if let Some(v) = &out.violation {
            panic!(
                "seed {seed} ({} nodes): at {} µs: {}\nreplay: SIM_SEED={seed} cargo test --release -p redmutex-sim",
                Config::from_seed(*seed, Controls::default()).nodes,
                v.at,
                v.what
            );
        }
        ops += out.lock_ops;
        grants += out.grants;
        sim_us += out.sim_time;
        events += out.events;
    }
    let secs = started.elapsed().as_secs_f64();
    eprintln!(
        "world: {} runs, {:.0} simulated s, {events} events, {grants} grants, {ops} lock operations in {secs:.1} s: {:.0} lock ops/s",
        seeds.len(),
        sim_us as f64 / 1e6,
        ops as f64 / secs
    );
    assert!(
        grants > 0,
        "the clients never got the lock: the run tests nothing"
    );
}

#[test]
fn one_seed_replays_the_identical_trace() {
    let seed = seeds()[0];
    let traces: Vec<Outcome> = (0..2)
        .map(|_| {
            let mut cfg = Config::from_seed(seed, Controls::default());
            cfg.keep_trace = true;
            run(cfg)
        })
        .collect();
    assert!(traces[0].trace.len() > 1000, "a run makes many events");
    assert_eq!(traces[0].trace, traces[1].trace, "seed {seed} ran two ways");
    assert_eq!(traces[0].trace_hash, traces[1].trace_hash);
}
