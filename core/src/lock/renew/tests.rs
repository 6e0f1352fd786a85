//! The renew thread's stop: a round under way is finished before a dropped client's
//! `Renewer` lets go (a program that frees its client and exits cuts nothing off).

use std::sync::atomic::AtomicBool;

use super::*;
use crate::lock::clock::Boottime;

/// A lease whose look-over takes a while, as a round sent to a slow node does.
struct Slow {
    entered: AtomicBool,
    finished: AtomicBool,
    gate: LocalMutex<()>,
}

impl Renewable for Slow {
    fn due(&self) -> (Duty, Vec<Callback>) {
        self.entered.store(true, Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(300));
        self.finished.store(true, Ordering::SeqCst);
        (Duty::Forget, Vec::new())
    }
    fn gate(&self) -> &LocalMutex<()> {
        &self.gate
    }
    fn extend_call(&self, _: Duration) -> Call {
        unreachable!("a forgotten lease is never renewed")
    }
    fn replica_wait(&self) -> Option<(u32, Duration)> {
        None
    }
    fn node_timeout(&self) -> Duration {
        Duration::from_millis(100)
    }
    fn apply_extend(&self, _: Stamp, _: Duration, _: &Tally) -> (Renewal, Vec<Callback>) {
        unreachable!("a forgotten lease is never renewed")
    }
    fn generation(&self) -> u64 {
        0
    }
}

#[test]
fn dropping_the_renewer_waits_for_the_round_under_way() {
    let renewer = Renewer::new(Vec::new(), Arc::new(Boottime));
    let slow = Arc::new(Slow {
        entered: AtomicBool::new(false),
        finished: AtomicBool::new(false),
        gate: LocalMutex::new(()),
    });
    let weak: Weak<dyn Renewable> = Arc::downgrade(&slow) as Weak<Slow>;
    renewer.schedule(Instant::now(), weak, 0);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !slow.entered.load(Ordering::SeqCst) {
        assert!(
            Instant::now() < deadline,
            "the renew thread never looked at the lease"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    drop(renewer);
    assert!(
        slow.finished.load(Ordering::SeqCst),
        "the renewer let go while its thread was still in a round"
    );
}
