//! Keys left behind: no token's key outlives its attempt or hold by more than one TTL, and in
//! worlds that lose no message, a refused attempt's token is undone far sooner.

use super::{Checker, View};

impl Checker {
    /// Fails at true time `t` for a token that a node keeps too long after its attempt or
    /// hold ended.
    pub(super) fn check_orphans(&mut self, t: u64, view: &mut dyn View) {
        let grace = self.limits.ttl + self.limits.max_delay + self.limits.drift + 2_000;
        for i in 0..view.nodes() {
            for (token, _) in view.holds(i, t) {
                if let Some(Some(end)) = self.ended.get(&token)
                    && t > end + grace
                {
                    let (token, end) = (String::from_utf8_lossy(&token).into_owned(), *end);
                    self.fail(
                        t,
                        format!("node {i} still has {token:?}, whose holder ended at {end} µs"),
                    );
                }
                if let Some(within) = self.limits.undone_within
                    && let Some(&end) = self.refused.get(&token)
                    && t > end + within
                {
                    let token = String::from_utf8_lossy(&token).into_owned();
                    let what = format!("node {i} still has {token:?}, whose attempt was refused");
                    self.fail(
                        t,
                        format!("{what} at {end} µs: not undone within {within} µs"),
                    );
                }
            }
        }
    }
}
