//! The torture suite: several `torture` processes contend for one lock under
//! injected faults, each writes a history, and the checker (`redmutex_tests::history`) judges
//! them. Negative controls (a plain-`DEL` release, a client ignoring its validity, Redlock with
//! nodes restarted without persistence) must be flagged by the checker.
//!
//! Quick by default (one fixed seed per scenario, small N, TTLs of 200–500 ms). Set
//! `REDMUTEX_TORTURE_LONG=1` for the long sweep: more seeds and more sections per client, and
//! 200 random fault schedules (`redmutex_tests::schedule`); `REDMUTEX_TORTURE_SEED=N` replays
//! the schedule of one seed.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use redmutex_tests::history::{self, Kind, mono_ns};
use redmutex_tests::schedule::{self, Schedule};
use redmutex_tests::torture::{Run, kill_library_connections, summary_of, total};
use redmutex_tests::{RedisServer, RedisServers, wait_until};

const TORTURE: &str = env!("CARGO_BIN_EXE_torture");
const MS: i64 = 1_000_000;

fn long() -> bool {
    std::env::var_os("REDMUTEX_TORTURE_LONG").is_some_and(|v| v != "0" && !v.is_empty())
}

/// Seeds to run each scenario with: one quick, several in the long sweep.
fn seeds(base: u64) -> Vec<u64> {
    if long() {
        (0..5).map(|i| base + 1000 * i).collect()
    } else {
        vec![base]
    }
}

fn ms(ns: i64) -> f64 {
    ns as f64 / 1e6
}

/// No fault: 8 processes, N sections each, on `nodes` lock nodes.
fn no_fault(nodes: usize, seed: u64, fenced: bool) {
    let servers = RedisServers::start(nodes);
    let mut run = Run::new(TORTURE, &format!("none{nodes}:lock"));
    let n = if long() { "25" } else { "4" };
    for i in 0..8u64 {
        let seed = (seed + i).to_string();
        let mut args = vec![
            "--n",
            n,
            "--hold-ms",
            "1:8",
            "--ttl-ms",
            "500",
            "--seed",
            &seed,
        ];
        if fenced {
            args.push("--fenced");
        }
        run.spawn(&format!("c{i}"), &servers.urls(), &args);
    }
    let summaries = run.finish();
    let report = history::check(&run.events());
    let t = total(&summaries);
    eprintln!(
        "none/{nodes} nodes/seed {seed}: {report}; {} sections, {} waits, {} handovers",
        t.sections,
        t.waits,
        report.handovers()
    );
    assert!(report.is_clean(), "{report}");
    let n: u64 = n.parse().unwrap();
    assert_eq!(t.sections, 8 * n, "every section completes without faults");
    assert_eq!(run.counter(), t.sections, "counter == completed sections");
    assert_eq!((t.lost, t.rejected), (0, 0));
    assert_eq!(report.holds.len() as u64, 8 * n);
    // Contention really happened: acquires waited, and the lock changed hands often.
    assert!(t.waits >= 4, "only {} waits", t.waits);
    assert!(
        report.handovers() >= 8,
        "only {} handovers",
        report.handovers()
    );
}

#[test]
fn no_fault_8_processes_1_node() {
    for seed in seeds(11) {
        no_fault(1, seed, false);
    }
}

#[test]
fn no_fault_8_processes_5_nodes_fenced() {
    for seed in seeds(21) {
        no_fault(5, seed, true);
    }
}

/// A holder SIGKILLed mid-lease: the next acquire comes within TTL + 50 ms of the kill.
fn holder_killed(seed: u64) {
    const TTL: i64 = 400;
    let server = RedisServer::start();
    let urls = vec![server.url()];
    let mut run = Run::new(TORTURE, "kill:lock");
    let ttl = TTL.to_string();
    run.spawn(
        "victim",
        &urls,
        &[
            "--n",
            "1",
            "--hold-ms",
            "10000",
            "--ttl-ms",
            &ttl,
            "--seed",
            "1",
        ],
    );
    run.wait_holding("victim");
    for i in 0..3u64 {
        let seed = (seed + i).to_string();
        run.spawn(
            &format!("c{i}"),
            &urls,
            &[
                "--n",
                "2",
                "--hold-ms",
                "5:20",
                "--ttl-ms",
                &ttl,
                "--seed",
                &seed,
            ],
        );
    }
    // Let the victim renew at least once, so the kill lands mid-lease.
    assert!(wait_until(Duration::from_secs(5), || {
        run.history_of("victim")
            .iter()
            .any(|e| e.event == Kind::Renew)
    }));
    run.signal("victim", libc::SIGKILL);
    let kill_ns = mono_ns();
    let summaries = run.finish();
    let events = run.events();
    let report = history::check(&events);
    let recovery = history::recovery_ns(&events, "kill:lock", "victim", kill_ns).unwrap();
    let last = history::last_event_ns(&events, "victim").unwrap();
    let from_last = history::recovery_ns(&events, "kill:lock", "victim", last).unwrap();
    let t = total(&summaries);
    eprintln!(
        "kill/seed {seed}: {report}; recovery {:.1} ms after the kill ({:.1} ms after its last event), TTL {TTL} ms",
        ms(recovery),
        ms(from_last)
    );
    assert!(report.is_clean(), "{report}");
    assert!(
        t.waits >= 3,
        "the others must have waited for the victim: {t:?}"
    );
    assert!(
        recovery <= (TTL + 50) * MS,
        "next acquire {:.1} ms after the kill",
        ms(recovery)
    );
    assert_eq!(t.sections, 6);
    assert_eq!(run.counter(), t.sections, "the killed section never wrote");
}

#[test]
fn holder_sigkilled() {
    for seed in seeds(31) {
        holder_killed(seed);
    }
}

/// A holder SIGSTOPped for 3×TTL (and until another client's next grant) then resumed: it
/// learns of the loss within TTL/3 + node timeout of the resume, never uses after its
/// validity, its late release leaves the new holder's key alone, and the (fenced) counter is
/// exact.
fn holder_stopped(seed: u64) {
    const TTL: i64 = 400;
    const NODE_TIMEOUT: i64 = 20;
    let server = RedisServer::start();
    let urls = vec![server.url()];
    let mut run = Run::new(TORTURE, "stop:lock");
    let (ttl, nt) = (TTL.to_string(), NODE_TIMEOUT.to_string());
    let common = ["--ttl-ms", &ttl, "--node-timeout-ms", &nt, "--fenced"];
    let victim_args = [
        &["--n", "1", "--hold-ms", "600", "--seed", "1"][..],
        &common,
    ]
    .concat();
    run.spawn("victim", &urls, &victim_args);
    run.wait_holding("victim");
    for i in 0..3u64 {
        let seed = (seed + i).to_string();
        // Long holds, so that someone holds the lock when the victim's late release comes.
        let args = [
            &["--n", "3", "--hold-ms", "150:300", "--seed", &seed][..],
            &common,
        ]
        .concat();
        run.spawn(&format!("c{i}"), &urls, &args);
    }
    std::thread::sleep(Duration::from_millis(100));
    run.signal("victim", libc::SIGSTOP);
    let stop_ns = mono_ns();
    std::thread::sleep(Duration::from_millis(3 * TTL as u64));
    // Resume at the start of another client's hold (150 ms at least), so that the victim's
    // late release, a few milliseconds after the resume, always meets a holder's key: resumed
    // at a random moment, it fell now and then between two holds and checked nothing.
    run.wait_fresh_grant(&["c0", "c1", "c2"], mono_ns());
    let resume_ns = mono_ns();
    run.signal("victim", libc::SIGCONT);
    let summaries = run.finish();
    let events = run.events();
    let report = history::check(&events);
    let t = total(&summaries);
    let victim = summary_of(&summaries, "victim");
    let lost = events
        .iter()
        .find(|e| e.client == "victim" && e.event == Kind::Lost)
        .expect("the victim must report its loss");
    let detect = lost.t_ns - resume_ns;
    let release = events
        .iter()
        .find(|e| e.client == "victim" && e.event == Kind::Release)
        .unwrap();
    let took_over = report
        .holds
        .iter()
        .filter(|h| h.client != "victim" && h.start_ns > stop_ns && h.start_ns < resume_ns)
        .count();
    let held_at_late_release = report
        .holds
        .iter()
        .any(|h| h.client != "victim" && h.start_ns < release.t_ns && release.t_ns < h.end_ns);
    eprintln!(
        "stop/seed {seed}: {report}; loss reported {:.1} ms after the resume (bound {:.1} ms), \
         {took_over} grants while stopped, another holder at the late release: {held_at_late_release}",
        ms(detect),
        ms(TTL * MS / 3 + NODE_TIMEOUT * MS)
    );
    assert!(report.is_clean(), "{report}");
    assert!(
        took_over >= 1,
        "nobody took over while the victim was stopped"
    );
    assert!(
        detect <= TTL * MS / 3 + NODE_TIMEOUT * MS,
        "loss reported {:.1} ms after the resume",
        ms(detect)
    );
    assert!(
        held_at_late_release,
        "nobody held the lock at the victim's late release: the check proves nothing"
    );
    assert_eq!(victim.lost, 1);
    assert_eq!(victim.sections, 0);
    // Its late release left the new holder's key alone: every other client released normally.
    for (name, s) in &summaries {
        if name != "victim" {
            assert_eq!(s.unwrap().lost, 0, "{name} lost its lock");
        }
    }
    assert_eq!(t.sections, 9);
    assert_eq!(run.counter(), t.sections, "counter exact");
}

#[test]
fn holder_sigstopped_for_three_ttls() {
    for seed in seeds(41) {
        holder_stopped(seed);
    }
}

/// Negative control: a client that releases with a plain `DEL` after its lease ran out deletes
/// the next holder's lock, and its next grant overlaps that holder.
#[test]
fn negative_control_plain_del_is_flagged() {
    let server = RedisServer::start();
    let urls = vec![server.url()];
    let mut run = Run::new(TORTURE, "neg:del");
    run.spawn(
        "bad",
        &urls,
        &[
            "--n",
            "2",
            "--ttl-ms",
            "200",
            "--no-renew",
            "--mode",
            "plain-del",
            "--pause-after-acquire-ms",
            "500",
        ],
    );
    run.wait_holding("bad");
    run.spawn(
        "good",
        &urls,
        &[
            "--n",
            "1",
            "--ttl-ms",
            "3000",
            "--no-renew",
            "--hold-ms",
            "1000",
        ],
    );
    let summaries = run.finish();
    let report = history::check(&run.events());
    eprintln!("plain DEL: {report}");
    assert!(summary_of(&summaries, "good").waits >= 1);
    assert!(report.count("overlap") >= 1, "not flagged: {report}");
}

/// Negative control: a client that keeps using after a pause longer than its validity.
#[test]
fn negative_control_ignoring_validity_is_flagged() {
    let server = RedisServer::start();
    let urls = vec![server.url()];
    let mut run = Run::new(TORTURE, "neg:validity");
    run.spawn(
        "bad",
        &urls,
        &[
            "--n",
            "1",
            "--ttl-ms",
            "200",
            "--no-renew",
            "--mode",
            "ignore-validity",
            "--pause-after-acquire-ms",
            "400",
            "--hold-ms",
            "50",
        ],
    );
    run.wait_holding("bad");
    run.spawn(
        "good",
        &urls,
        &["--n", "2", "--ttl-ms", "200", "--hold-ms", "100"],
    );
    let summaries = run.finish();
    let report = history::check(&run.events());
    eprintln!("ignore validity: {report}");
    assert!(summary_of(&summaries, "good").waits >= 1);
    assert!(
        report.count("use-outside-hold") >= 1,
        "not flagged: {report}"
    );
}

/// Negative control: Redlock whose nodes lose the lock on restart (no persistence). A holds
/// nodes 0–2 (3 and 4 are down); 3 and 4 come back empty and node 2 restarts empty, so B
/// gets a quorum (2, 3, 4) while A still holds.
#[test]
fn negative_control_redlock_restart_without_persistence_is_flagged() {
    let mut servers = RedisServers::start(5);
    let urls = servers.urls();
    servers[3].kill();
    servers[4].kill();
    let mut run = Run::new(TORTURE, "neg:redlock");
    run.spawn(
        "a",
        &urls,
        &[
            "--n",
            "1",
            "--ttl-ms",
            "3000",
            "--no-renew",
            "--hold-ms",
            "1500",
            "--node-timeout-ms",
            "50",
        ],
    );
    run.wait_holding("a");
    servers[3].restart();
    servers[4].restart();
    servers[2].restart();
    run.spawn(
        "b",
        &urls,
        &[
            "--n",
            "1",
            "--ttl-ms",
            "3000",
            "--hold-ms",
            "100",
            "--node-timeout-ms",
            "50",
        ],
    );
    run.finish();
    let report = history::check(&run.events());
    eprintln!("redlock restart: {report}");
    assert!(report.count("overlap") >= 1, "not flagged: {report}");
}

/// A fault on the (single) lock node, injected while a victim holds the lock and three others
/// wait for it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum NodeFault {
    /// The redis-server process is SIGSTOPped for the fault's duration.
    Stop,
    /// `CLIENT PAUSE <ms> WRITE`: scripts block (and keys do not expire) for the duration.
    PauseWrite,
    /// Every connection named `redmutex:*` is `CLIENT KILL`ed as soon as it shows up in
    /// `CLIENT LIST`, for the fault's duration.
    KillConnections,
}

/// A node fault of 3×TTL while a victim holds the lock: the loss is reported once the victim
/// cannot renew within its validity (at the validity deadline, within one node timeout), no
/// two holds overlap, and every client — the victim included — locks again afterwards.
fn node_fault(fault: NodeFault, seed: u64) {
    const TTL: i64 = 300;
    const NODE_TIMEOUT: i64 = 50;
    const FAULT: i64 = 3 * TTL;
    let server = RedisServer::start();
    let urls = vec![server.url()];
    let key = format!("{fault:?}:lock");
    let mut run = Run::new(TORTURE, &key);
    let (ttl, nt) = (TTL.to_string(), NODE_TIMEOUT.to_string());
    // Waiters ride over the outage (no node reachable) instead of reporting it after 1 s.
    let common = [
        "--ttl-ms",
        &ttl,
        "--node-timeout-ms",
        &nt,
        "--connect-timeout-ms",
        "10000",
        "--fenced",
    ];
    let victim_args = [
        &[
            "--n",
            "2",
            "--first-hold-ms",
            "1500",
            "--hold-ms",
            "5",
            "--seed",
            "1",
        ][..],
        &common,
    ]
    .concat();
    run.spawn("victim", &urls, &victim_args);
    run.wait_holding("victim");
    for i in 0..3u64 {
        let seed = (seed + i).to_string();
        let args = [
            &["--n", "2", "--hold-ms", "5:20", "--seed", &seed][..],
            &common,
        ]
        .concat();
        run.spawn(&format!("c{i}"), &urls, &args);
    }
    // The victim renewed once: its renew connection is pooled, the fault hits a live lease.
    assert!(wait_until(Duration::from_secs(5), || {
        run.history_of("victim")
            .iter()
            .any(|e| e.event == Kind::Renew)
    }));
    let fault_ns = mono_ns();
    let (mut killed, mut victim_killed) = (0, 0);
    match fault {
        NodeFault::Stop => {
            server.pause();
            std::thread::sleep(Duration::from_millis(FAULT as u64));
            server.resume();
        }
        NodeFault::PauseWrite => {
            let _: () = redis::cmd("CLIENT")
                .arg("PAUSE")
                .arg(FAULT)
                .arg("WRITE")
                .query(&mut server.conn())
                .unwrap();
            std::thread::sleep(Duration::from_millis(FAULT as u64));
        }
        NodeFault::KillConnections => {
            let mut conn = server.conn();
            let end = Instant::now() + Duration::from_millis(FAULT as u64);
            while Instant::now() < end {
                let (k, v) = kill_library_connections(&mut conn, "victim");
                killed += k;
                victim_killed += v;
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
    let healed_ns = mono_ns();
    let summaries = run.finish();
    let events = run.events();
    let report = history::check(&events);
    let t = total(&summaries);
    let victim = summary_of(&summaries, "victim");
    let first = &report
        .holds
        .iter()
        .find(|h| h.client == "victim")
        .unwrap()
        .clone();
    let renewed_during = events
        .iter()
        .filter(|e| {
            e.client == "victim"
                && e.token == first.token
                && e.event == Kind::Renew
                && e.t_ns > fault_ns
                && e.t_ns < healed_ns
        })
        .count();
    let others_after = report
        .holds
        .iter()
        .filter(|h| h.client != "victim" && h.start_ns > fault_ns)
        .count();
    let detect = first.lost_ns.map(|l| l - first.validity_ns);
    eprintln!(
        "{fault:?}/seed {seed}: {report}; victim lost={} sections={}; loss reported {} after \
         the promised validity, {:.1} ms after the fault began; {renewed_during} renewals \
         during the fault; {killed} connections killed ({victim_killed} of the victim's); \
         {others_after} grants to others after the fault began; {} waits",
        victim.lost,
        victim.sections,
        detect.map_or("never".into(), |d| format!("{:.1} ms", ms(d))),
        first.lost_ns.map_or(f64::NAN, |l| ms(l - fault_ns)),
        t.waits,
    );
    assert!(report.is_clean(), "{report}");
    assert!(t.waits >= 3, "the others must have waited: {t:?}");
    assert!(others_after >= 3, "nobody took the lock after the fault");
    assert_eq!(run.counter(), t.sections, "counter exact");
    // Reconnect afterwards: everybody, the victim included, finished its later sections.
    assert_eq!(victim.sections + victim.lost, 2, "{victim:?}");
    for i in 0..3 {
        assert_eq!(summary_of(&summaries, &format!("c{i}")).sections, 2);
    }
    match fault {
        NodeFault::Stop | NodeFault::PauseWrite => {
            // The fault outlasts the lease: the victim cannot renew, and says so at the
            // validity deadline it promised (within one node timeout and some scheduling).
            assert_eq!(victim.lost, 1, "{victim:?}");
            assert_eq!(renewed_during, 0);
            let detect = detect.expect("the victim must report its loss");
            assert!(
                (0..=(NODE_TIMEOUT + 50) * MS).contains(&detect),
                "loss reported {:.1} ms after the promised validity",
                ms(detect)
            );
        }
        NodeFault::KillConnections => {
            assert!(victim_killed >= 1, "no connection of the victim was killed");
            // The key survives the kills and renewal reconnects, so the lease is usually
            // kept. A renewal whose fresh connection is killed too counts that node as down,
            // and with one node the core then reports the loss at once, before the validity
            // runs out: early is safe (the guard stops using), late would not be.
            assert!(renewed_during >= 1, "no renewal through a new connection");
            if let Some(d) = detect {
                assert!(
                    d <= (NODE_TIMEOUT + 50) * MS,
                    "loss reported {:.1} ms after the promised validity",
                    ms(d)
                );
            }
        }
    }
}

#[test]
fn redis_sigstopped_longer_than_the_ttl() {
    for seed in seeds(51) {
        node_fault(NodeFault::Stop, seed);
    }
}

#[test]
fn redis_client_pause_write() {
    for seed in seeds(61) {
        node_fault(NodeFault::PauseWrite, seed);
    }
}

#[test]
fn redis_client_kill_of_the_library_connections() {
    for seed in seeds(71) {
        node_fault(NodeFault::KillConnections, seed);
    }
}

/// libfaketime's preload library: `REDMUTEX_LIBFAKETIME`, or where distributions install it
/// (`<libdir>/faketime/` or `<libdir>/<multiarch>/faketime/`); `None` when missing.
fn libfaketime() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("REDMUTEX_LIBFAKETIME") {
        return Some(PathBuf::from(p));
    }
    let lib = Path::new("faketime").join("libfaketime.so.1");
    for base in ["/usr/lib", "/usr/lib64", "/usr/local/lib"] {
        let base = Path::new(base);
        if base.join(&lib).is_file() {
            return Some(base.join(&lib));
        }
        for dir in std::fs::read_dir(base).into_iter().flatten().flatten() {
            if dir.path().join(&lib).is_file() {
                return Some(dir.path().join(&lib));
            }
        }
    }
    None
}

/// The wall clock of every client jumped by ±1 h (libfaketime, `CLOCK_MONOTONIC` left alone):
/// the same verdict as without the jump — no violation, counter exact, contention — because
/// validity lives on the monotonic clock. Two clients run 1 h ahead, two 1 h behind, and two
/// jump mid-run (a timestamp file switched from +0 to +1 h and then to -1 h).
#[test]
fn wall_clock_jumped_by_an_hour() {
    let Some(lib) = libfaketime() else {
        eprintln!(
            "SKIPPED wall_clock_jumped_by_an_hour: libfaketime is not installed \
             (apt-get install faketime, or set REDMUTEX_LIBFAKETIME)"
        );
        return;
    };
    for seed in seeds(81) {
        clock_jump(&lib, seed);
    }
}

fn clock_jump(lib: &Path, seed: u64) {
    const HOUR: i64 = 3600;
    let server = RedisServer::start();
    let urls = vec![server.url()];
    let mut run = Run::new(TORTURE, "clock:lock");
    let jump_file = run.dir().join("jump");
    std::fs::write(&jump_file, "+0\n").unwrap();
    let n = if long() { "20" } else { "6" };
    let clients: [(&str, &str); 6] = [
        ("ahead0", "+1h"),
        ("ahead1", "+1h"),
        ("behind0", "-1h"),
        ("behind1", "-1h"),
        ("jump0", "file"),
        ("jump1", "file"),
    ];
    for (i, (name, offset)) in clients.iter().enumerate() {
        let mut cmd = Command::new(TORTURE);
        cmd.env("LD_PRELOAD", lib)
            .env("FAKETIME_DONT_FAKE_MONOTONIC", "1");
        if *offset == "file" {
            cmd.env("FAKETIME_TIMESTAMP_FILE", &jump_file)
                .env("FAKETIME_NO_CACHE", "1");
        } else {
            cmd.env("FAKETIME", offset);
        }
        let seed = (seed + i as u64).to_string();
        run.spawn_under(
            name,
            &urls,
            &[
                "--n",
                n,
                "--hold-ms",
                "5:30",
                "--ttl-ms",
                "300",
                "--seed",
                &seed,
                "--fenced",
            ],
            cmd,
        );
    }
    // Jump the clock of the last two mid-run, once they hold the lock at least once.
    assert!(wait_until(Duration::from_secs(10), || {
        run.history_of("jump0").len() + run.history_of("jump1").len() >= 2
    }));
    std::fs::write(&jump_file, "+1h\n").unwrap();
    assert!(wait_until(Duration::from_secs(10), || {
        run.history_of("jump0").len() + run.history_of("jump1").len() >= 12
    }));
    std::fs::write(&jump_file, "-1h\n").unwrap();
    let summaries = run.finish();
    let report = history::check(&run.events());
    let t = total(&summaries);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let skew = |name: &str| summary_of(&summaries, name).wall as i64 - now;
    eprintln!(
        "clock jump/seed {seed}: {report}; {} sections, {} waits, {} handovers; wall clock \
         skew at exit: ahead {} s, behind {} s, jumped {} s",
        t.sections,
        t.waits,
        report.handovers(),
        skew("ahead0"),
        skew("behind0"),
        skew("jump0")
    );
    // The fake clocks really were in effect (the last jump was to -1 h).
    for (name, want) in [("ahead0", HOUR), ("behind0", -HOUR), ("jump0", -HOUR)] {
        assert!(
            (skew(name) - want).abs() < 120,
            "{name}: skew {}",
            skew(name)
        );
    }
    assert!(report.is_clean(), "{report}");
    let n: u64 = n.parse().unwrap();
    assert_eq!(t.sections, 6 * n, "every section completes");
    assert_eq!(run.counter(), t.sections, "counter == completed sections");
    assert_eq!((t.lost, t.rejected), (0, 0));
    assert!(t.waits >= 3, "only {} waits", t.waits);
    assert!(
        report.handovers() >= 6,
        "only {} handovers",
        report.handovers()
    );
}

/// The quick run's schedules: fixed seeds, each a different mix of nodes and faults.
const QUICK_SCHEDULES: [u64; 4] = [1, 2, 3, 4];
/// How many schedules the long sweep runs.
const LONG_SCHEDULES: u64 = 200;
/// How long the clients of a schedule start sections.
const SCHEDULE_LENGTH: Duration = Duration::from_secs(4);

/// Random fault schedules (see `redmutex_tests::schedule`): clients that lock, use, extend
/// with random TTLs, unlock or drop, and get stopped or killed; nodes frozen, restarted from
/// their append-only file, their connections killed, behind proxies that delay, duplicate and
/// cut requests and drop or delay replies. Every history is clean: no overlap, fences
/// strictly increasing, no use outside a hold; and the lock is taken despite the faults.
#[test]
fn random_fault_schedules() {
    let seeds: Vec<u64> = match std::env::var("REDMUTEX_TORTURE_SEED") {
        Ok(s) => vec![s.parse().expect("REDMUTEX_TORTURE_SEED is a number")],
        Err(_) if long() => (1..=LONG_SCHEDULES).collect(),
        Err(_) => QUICK_SCHEDULES.to_vec(),
    };
    let started = Instant::now();
    let (mut failed, mut holds, mut lost, mut errors) = (Vec::new(), 0, 0, 0);
    for &seed in &seeds {
        let plan = Schedule::draw(seed, SCHEDULE_LENGTH);
        let out = schedule::run(TORTURE, &plan);
        let t = total(&out.summaries);
        let killed = out.summaries.iter().filter(|(_, s)| s.is_none()).count();
        eprintln!(
            "{plan}\n  -> {}; {} sections, {} lost, {} lock errors, {killed} killed; proxies \
             duplicated {} requests and cut {} connections; {} connections killed",
            out.report,
            t.sections,
            t.lost,
            t.errors,
            out.duplicated,
            out.cut,
            out.killed_connections
        );
        holds += out.report.holds.len();
        lost += t.lost;
        errors += t.errors;
        if !out.report.is_clean() {
            eprintln!("{}", out.excerpt());
            failed.push(format!("seed {seed}: {}", out.report));
        } else if out.report.holds.len() < 3 {
            failed.push(format!(
                "seed {seed}: only {} holds",
                out.report.holds.len()
            ));
        }
    }
    eprintln!(
        "{} schedules in {:.0} s: {holds} holds, {lost} lost, {errors} lock errors, {} failed",
        seeds.len(),
        started.elapsed().as_secs_f64(),
        failed.len()
    );
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

/// A renewal is in the history as soon as the library made it, through the guard's
/// `on_renewed` hook, while the process lives: the client is then killed. The lock's PTTL on
/// the server jumps back up when a renewal runs there; the client reads no `renewals()`
/// (`--hook-only`), so only the hook can bring that renewal into its history, and it must
/// carry the validity the renewal set, or the checker would judge a shorter promise than the
/// one the library made. (Killing the client a fixed 3 ms after the jump, as this test once
/// did, raced the renew thread on a loaded machine: the thread had not yet read its reply.)
#[test]
fn a_renewal_is_recorded_before_the_process_can_be_killed() {
    let server = RedisServer::start();
    // Renewals every ttl/3 = 103.3 ms drift against the driver's 10 ms poll, so that a poll
    // does not just happen to follow each one.
    let ttl_ms = 310i64;
    for round in 0..5 {
        let key = format!("renew-kill-{round}:lock");
        let mut run = Run::new(TORTURE, &key);
        run.spawn(
            "c",
            &[server.url()],
            &[
                "--n",
                "1",
                "--hold-ms",
                "5000:5000",
                "--ttl-ms",
                "300",
                "--seed",
                "7",
                "--hook-only",
            ],
        );
        run.wait_holding("c");
        let mut conn = server.conn();
        let pttl = |conn: &mut redis::Connection| -> i64 {
            redis::cmd("PTTL").arg(&key).query(conn).unwrap()
        };
        let mut last = pttl(&mut conn);
        let mut jump_ns = 0;
        // The round-th renewal, for a different phase against the poll each round.
        let mut jumps = 0;
        assert!(
            wait_until(Duration::from_secs(5), || {
                let now = pttl(&mut conn);
                if now > last + 50 {
                    jumps += 1;
                    jump_ns = mono_ns();
                }
                last = now;
                jumps > round
            }),
            "round {round}: no renewal seen on the server"
        );
        // This renewal promised about the jump plus the lease (less the drift and the
        // request's way there); the one before it, a third of the lease less. Halfway
        // between the two tells them apart on a loaded machine.
        let promised = jump_ns + ttl_ms * 5 / 6 * 1_000_000;
        let mut renewed = None;
        // Until just before the next renewal (a third of the lease on), which would promise
        // more: this one's entry, not the next one's.
        wait_until(Duration::from_millis(90), || {
            renewed = run
                .history_of("c")
                .iter()
                .filter(|e| e.event == Kind::Renew)
                .map(|e| e.validity_ns)
                .max();
            renewed.is_some_and(|v| v >= promised)
        });
        run.signal("c", libc::SIGKILL);
        assert!(
            renewed.is_some_and(|v| v >= promised),
            "round {round}: the history's last renewal promises {:?} ms, the renewal at {:.1} ms \\
             promised at least {:.1} ms",
            renewed.map(ms),
            ms(jump_ns),
            ms(promised)
        );
        let _ = run.finish();
    }
}
