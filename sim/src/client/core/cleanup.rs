//! Clean-ups, as the library's renew thread runs them: an undo or a withdrawal sent to some
//! nodes on new connections, try after try, each node until the core's clean-up machine
//! ([`Tries`]) says its reply ends its part, or until what it removes would have
//! expired anyway. A try ends when every node asked answered or at its per-node timeout; the
//! machine gives the pause before the next.

use redmutex::sim_support::Tries;

use super::{Cleanup, CoreClient, Purpose, Timer};
use crate::client::{Now, Output, RequestId};
use crate::rng::Rng;
use crate::translate::{self, Argv, dur, us};

impl CoreClient {
    /// Sends `argv` to `nodes` (on new connections when `fresh`, on the current ones when
    /// they did not break), again on new ones until each is done or `until`.
    pub(super) fn clean_up(
        &mut self,
        argv: Argv,
        nodes: Vec<usize>,
        until: u64,
        fresh: bool,
        now: Now,
        out: &mut Vec<Output>,
    ) {
        let no = self.fresh();
        let tries = Tries::of(&self.lock.spec);
        let c = Cleanup {
            argv,
            nodes,
            until,
            began: now.mono,
            tries,
            tri: 0,
            sent: now.mono,
            waiting: None,
        };
        self.cleanups.insert(no, c);
        self.cleanup_try(no, fresh, now, out);
    }

    /// Sends the next try of clean-up `no`.
    pub(super) fn cleanup_try(&mut self, no: u64, fresh: bool, now: Now, out: &mut Vec<Output>) {
        let Some(c) = self.cleanups.get_mut(&no) else {
            return;
        };
        c.tri += 1;
        c.sent = now.mono;
        c.waiting = Some(c.nodes.clone());
        let (argv, nodes, tri) = (c.argv.clone(), c.nodes.clone(), c.tri);
        let over = now.mono + us(c.tries.node_timeout());
        for node in nodes {
            if fresh {
                out.push(Output::Reconnect { node });
            }
            self.send(node, argv.clone(), Purpose::Cleanup(no, tri), out);
        }
        self.wake(over, Timer::CleanupTryOver(no, tri), out);
    }

    /// Node `node`'s reply to try `tri` of clean-up `no` (`None`: its connection broke).
    pub(super) fn cleanup_reply(
        &mut self,
        (no, tri): (u64, u64),
        node: usize,
        reply: Option<&translate::Reply>,
        now: Now,
        rng: &mut Rng,
        out: &mut Vec<Output>,
    ) {
        let Some(c) = self.cleanups.get_mut(&no) else {
            return;
        };
        let Some(waiting) = c.waiting.as_mut().filter(|_| c.tri == tri) else {
            return; // a try that is over: its late replies are not read
        };
        waiting.retain(|n| *n != node);
        let all_in = waiting.is_empty();
        // An error reply ends nothing, as no reply does.
        let value = reply.and_then(|r| r.clone().ok()).map(Ok);
        if c.tries.done(value.as_ref(), dur(c.sent - c.began)) {
            c.nodes.retain(|n| *n != node);
        }
        if all_in {
            self.cleanup_try_over(no, tri, now, rng, out);
        }
    }

    /// Try `tri` of clean-up `no` is over (every node asked answered, or its time is up):
    /// the next one after the machine's pause, unless every node is done or the key has
    /// expired by then.
    pub(super) fn cleanup_try_over(
        &mut self,
        no: u64,
        tri: u64,
        now: Now,
        rng: &mut Rng,
        out: &mut Vec<Output>,
    ) {
        let Some(c) = self.cleanups.get_mut(&no) else {
            return;
        };
        if c.tri != tri || c.waiting.take().is_none() {
            return;
        }
        let pause = us(c.tries.next_pause(rng.next_u64()));
        if c.nodes.is_empty() || now.boot + pause >= c.until {
            self.cleanups.remove(&no);
            return;
        }
        self.wake(now.mono + pause, Timer::Cleanup(no), out);
    }

    /// An undo that was to follow a request on its connection could not be written there
    /// (`Input::Unwritten`): as the library's fan-out reports it (a lost follow-up), the
    /// node goes to a clean-up until `until`. (`forgets_unwritten_undos`, a negative control,
    /// drops it, as the library once did.)
    pub(super) fn undo_unwritten(&mut self, id: RequestId, now: Now, out: &mut Vec<Output>) {
        let Some(p) = self.pending.remove(&id) else {
            return;
        };
        if let Purpose::Undo { until, .. } = p.purpose
            && !self.forgets_unwritten_undos
        {
            self.clean_up(p.argv, vec![p.node], until, true, now, out);
        }
    }
}
