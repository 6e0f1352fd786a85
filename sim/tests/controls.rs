//! Negative controls: each deliberate mistake in the model client must be caught by the
//! checker within a small budget of seeds, and its failing seed must replay the same failure.

use redmutex_sim::checker::Violation;
use redmutex_sim::client::model::Controls;
use redmutex_sim::world::{Config, run};

/// Seeds tried per control before the checker is declared blind to it.
const BUDGET: u64 = 150;
const BASE_SEED: u64 = 0xC7_0000;

/// The first seed (and its violation) at which the checker catches `controls`.
fn first_catch(controls: Controls) -> Option<(u64, Violation)> {
    (BASE_SEED..BASE_SEED + BUDGET).find_map(|seed| {
        run(Config::from_seed(seed, controls))
            .violation
            .map(|v| (seed, v))
    })
}

fn caught_and_replayed(name: &str, controls: Controls) {
    let Some((seed, v)) = first_catch(controls) else {
        panic!("the checker missed '{name}' in {BUDGET} seeds");
    };
    eprintln!(
        "{name}: caught at seed {seed} ({} nodes): {}",
        Config::from_seed(seed, controls).nodes,
        v.what
    );
    let again = run(Config::from_seed(seed, controls));
    assert_eq!(
        again.violation.as_ref(),
        Some(&v),
        "{name}: seed {seed} did not replay its failure"
    );
}

#[test]
fn release_with_plain_del_is_caught() {
    caught_and_replayed(
        "release with DEL",
        Controls {
            release_with_del: true,
            ..Controls::default()
        },
    );
}

#[test]
fn no_drift_allowance_is_caught() {
    caught_and_replayed(
        "no drift allowance",
        Controls {
            no_drift: true,
            ..Controls::default()
        },
    );
}

#[test]
fn unconditional_extend_is_caught() {
    caught_and_replayed(
        "unconditional PEXPIRE in extend",
        Controls {
            unconditional_extend: true,
            ..Controls::default()
        },
    );
}

#[test]
fn own_grant_counted_as_taken_is_caught() {
    caught_and_replayed(
        "own grant counted as taken",
        Controls {
            own_grant_taken: true,
            ..Controls::default()
        },
    );
}

#[test]
fn validity_from_the_reply_is_caught() {
    caught_and_replayed(
        "validity from the reply",
        Controls {
            validity_from_reply: true,
            ..Controls::default()
        },
    );
}
