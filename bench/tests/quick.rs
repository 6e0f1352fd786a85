//! The benchmark command's quick mode runs end to end: servers, child processes, every row.
//! It asserts that the table is printed and the correctness rows hold; it never asserts a
//! timing: performance is reported by the benchmark, as ratios measured in the same run (a
//! timed assertion fails on a loaded machine and passes on a fast one).

use std::process::Command;
use std::time::Instant;

#[test]
fn quick_run_prints_the_table() {
    let started = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_redmutex-bench"))
        .arg("--quick")
        .output()
        .expect("run redmutex-bench --quick");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    for row in [
        "baseline: PING, 1 node",
        "context: SET NX PX + compare-and-delete script",
        "uncontended, 1 node",
        "uncontended, 5 nodes",
        "handoff, 1 node (2 processes)",
        "contended: throughput",
        "renew scale: renew threads",
    ] {
        assert!(stdout.contains(row), "no {row:?} row in:\n{stdout}");
    }
    // Correctness, not speed: these must hold on any machine.
    for pass in [
        "PASS contended: lost updates",
        "PASS renew scale: locks lost",
        "PASS renew scale: renew threads",
    ] {
        assert!(stdout.contains(pass), "expected {pass:?} in:\n{stdout}");
    }
    eprintln!("quick run took {:?}", started.elapsed());
}
