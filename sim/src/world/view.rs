//! The checker's window on the world.

use super::{Node, Slot};
use crate::checker::View;
use crate::client::model::LOCK;
use crate::redis::Data;

pub(super) struct WorldView<'a> {
    pub(super) nodes: &'a mut [Node],
    pub(super) clients: &'a [Slot],
    /// The sorted set of the lock's shared holds (a semaphore's permits, a read-write lock's
    /// read holds); `None` for a mutex.
    pub(super) holders: Option<&'a [u8]>,
}

impl View for WorldView<'_> {
    fn nodes(&self) -> usize {
        self.nodes.len()
    }

    fn is_down(&self, i: usize) -> bool {
        self.nodes[i].down
    }

    fn holds(&mut self, i: usize, t: u64) -> Vec<(Vec<u8>, Option<u64>)> {
        let node = &self.nodes[i];
        let ms = node.clock.at(t) / 1000;
        // The last true time at which the server's clock reads below `ms` ms.
        let before = |ms: u64| node.clock.when(ms * 1000, t).saturating_sub(1);
        let live = |name: &[u8]| {
            node.server
                .peek(name)
                .filter(|e| e.expire_at.is_none_or(|e| ms <= e))
        };
        let mut holds = Vec::new();
        // A key lives while the server's clock reads at most its expiry (ms).
        if let Some(entry) = live(LOCK.as_bytes())
            && let Data::Str(value) = entry.data
        {
            holds.push((value, entry.expire_at.map(|e| before(e + 1))));
        }
        // A member lives while the server's clock reads below its score (the scripts drop a
        // member whose score is at most the time), and its set lives.
        if let Some(name) = self.holders
            && let Some(entry) = live(name)
            && let Data::ZSet(members) = entry.data
        {
            let set_until = entry.expire_at.map(|e| before(e + 1));
            for (token, score) in members {
                let score = score as u64;
                if ms < score {
                    let until = before(score);
                    holds.push((token, Some(set_until.map_or(until, |s| s.min(until)))));
                }
            }
        }
        holds
    }

    fn boot_to_true(&self, c: usize, boot: u64) -> u64 {
        self.clients[c].boot.when(boot, 0)
    }
}
