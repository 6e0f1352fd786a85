//! The nodes' side of the world: running requests, answering BLPOPs when a push serves
//! them or their timeout passes on the node's cron tick.

use super::net::Fate;
use super::{Event, Request, World};
use crate::client::{Input, RequestId};
use crate::redis::Reply;

/// The server's name for one of a client's connections: a new connection is a new client
/// to Redis (its BLPOP ends with the old one).
pub(super) fn conn_id(client: usize, epoch: u64) -> u64 {
    ((client as u64) << 32) | epoch
}

/// The epoch of a client's side connection to a node, for `CLIENT UNBLOCK`: never one of
/// its own connections' epochs, so no reply on it reaches the client.
pub(super) const SIDE_EPOCH: u64 = u32::MAX as u64;

impl World {
    /// Runs a request on its node (up, not frozen), then answers it and any BLPOP it served.
    /// A request behind a waiting BLPOP on its connection waits for it; one on a connection
    /// that was closed while its BLPOP waited never runs.
    pub(super) fn execute(&mut self, r: Request) {
        let now = self.now;
        let conn = conn_id(r.client, r.epoch);
        let n = &mut self.nodes[r.node];
        if n.freed.contains(&conn) {
            let (node, client, id) = (r.node, r.client, r.id);
            self.log(|| format!("{now} n{node} dropped c{client}#{id} (its client was freed)"));
            return;
        }
        if n.blocked.contains_key(&conn) {
            n.held.entry(conn).or_default().push_back(r);
            return;
        }
        let Request {
            node,
            client,
            epoch,
            id,
            argv,
            ..
        } = r;
        n.server.set_now_us(n.clock.at(now));
        // A new connection of the library loads the scripts before its first request.
        if self.cfg.preload && n.preloaded.insert(conn) {
            for (_, source) in redmutex::sim_support::scripts() {
                let load = [
                    b"SCRIPT".to_vec(),
                    b"LOAD".to_vec(),
                    source.as_bytes().to_vec(),
                ];
                n.server.exec(conn, &load);
            }
        }
        let reply = n.server.exec(conn, &argv);
        if reply.is_none() {
            if self.clients[client].epoch[node] == epoch {
                n.blocked.insert(conn, (client, epoch, id));
            } else {
                // Its connection was closed after it was written: Redis reads the close
                // right after it and frees the client.
                n.server.disconnect(conn);
                n.freed.insert(conn);
            }
        }
        self.log(|| {
            let answer = reply.as_ref().map_or("(blocks)".into(), |r| r.to_string());
            let command = super::describe(&argv);
            format!("{now} n{node} ran c{client}#{id} {command} -> {answer}")
        });
        if let Some(reply) = reply {
            self.answer(node, client, epoch, id, reply);
        }
        let served = self.nodes[node].server.take_served();
        self.answer_blocked(node, served);
        self.schedule_block_check(node);
    }

    /// Sends a reply back over the network.
    fn answer(&mut self, node: usize, client: usize, epoch: u64, id: RequestId, reply: Reply) {
        let faulty = self.faulty();
        if let Fate::After(d) = self.cfg.network.fate(&mut self.net_rng, faulty) {
            let at = self.in_order((client, node, epoch, false), self.now + d);
            self.tell(
                at,
                client,
                Input::Reply { node, id, reply },
                Some((node, epoch)),
            );
        }
    }

    /// Answers BLPOPs that a push served or whose time ran out, then runs what waited behind
    /// each on its connection.
    fn answer_blocked(&mut self, node: usize, replies: Vec<(u64, Reply)>) {
        for (conn, reply) in replies {
            if let Some((client, epoch, id)) = self.nodes[node].blocked.remove(&conn) {
                let now = self.now;
                self.log(|| format!("{now} n{node} answers c{client}#{id} -> {reply}"));
                self.answer(node, client, epoch, id, reply);
                let behind = self.nodes[node].held.remove(&conn).unwrap_or_default();
                for r in behind {
                    self.execute(r);
                }
            }
        }
    }

    /// Times out the node's BLPOPs whose deadline passed (a running node only).
    pub(super) fn check_blocked(&mut self, node: usize) {
        let n = &mut self.nodes[node];
        if n.down || n.frozen {
            return;
        }
        n.server.set_now_us(n.clock.at(self.now));
        let expired = n.server.expire_blocked();
        self.answer_blocked(node, expired);
        self.schedule_block_check(node);
    }

    fn schedule_block_check(&mut self, node: usize) {
        let n = &self.nodes[node];
        if let Some(ms) = n.server.next_block_check() {
            let at = n.clock.when(ms * 1000, self.now);
            self.push(at, Event::BlockCheck { node });
        }
    }
}
