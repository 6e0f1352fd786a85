//! The checker's window on the world.

use super::{Node, Slot};
use crate::checker::View;
use crate::client::model::LOCK;
use crate::redis::Data;

pub(super) struct WorldView<'a> {
    pub(super) nodes: &'a mut [Node],
    pub(super) clients: &'a [Slot],
}

impl View for WorldView<'_> {
    fn nodes(&self) -> usize {
        self.nodes.len()
    }

    fn is_down(&self, i: usize) -> bool {
        self.nodes[i].down
    }

    fn lock_key(&mut self, i: usize, t: u64) -> Option<(Vec<u8>, Option<u64>)> {
        let node = &self.nodes[i];
        let entry = node.server.peek(LOCK.as_bytes())?;
        let ms = node.clock.at(t) / 1000;
        if entry.expire_at.is_some_and(|e| ms > e) {
            return None;
        }
        let Data::Str(value) = entry.data else {
            return None;
        };
        // The key lives while the server's clock reads at most `e` ms.
        let until = entry
            .expire_at
            .map(|e| node.clock.when((e + 1) * 1000, t).saturating_sub(1));
        Some((value, until))
    }

    fn boot_to_true(&self, c: usize, boot: u64) -> u64 {
        self.clients[c].boot.when(boot, 0)
    }
}
