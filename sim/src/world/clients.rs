//! The clients' side of the world: handing them inputs (after their pauses, on their
//! clocks, on live connections only) and carrying out what they ask.

use super::net::Fate;
use super::view::WorldView;
use super::{Delivery, Event, Request, World};
use crate::client::{Input, Note, Now, Output, RequestId};

impl World {
    /// Hands an input to a client, unless it is stopped, its timer is early on its clock, or
    /// the connection the input came on has closed.
    pub(super) fn deliver(&mut self, d: Delivery) {
        let now = self.now;
        let slot = &self.clients[d.client];
        let later = if now < slot.busy_until {
            // Stopped or asleep: it sees this when it runs again.
            Some(slot.busy_until)
        } else {
            d.mono
                .filter(|target| slot.mono.at(now) < *target)
                .map(|target| slot.mono.when(target, now))
        };
        if let Some(at) = later {
            return self.push(at, Event::ToClient(d));
        }
        let Delivery {
            client,
            input,
            conn,
            ..
        } = d;
        if let Some((node, epoch)) = conn {
            if self.clients[client].epoch[node] != epoch {
                return; // the connection it came on is closed
            }
            if let Input::Reply { id, .. } = &input {
                self.inflight.remove(&(client, *id));
            }
        }
        self.log(|| format!("{now} c{client} <- {input}"));
        let slot = &mut self.clients[client];
        let clocks = Now {
            mono: slot.mono.at(now),
            boot: slot.boot.at(now),
        };
        let mut out = Vec::new();
        slot.client.handle(input, clocks, &mut slot.rng, &mut out);
        for o in out {
            self.output(client, o);
        }
    }

    /// Sends `request` over the network: lost (`lost` says what, in the trace), or delivered
    /// after the network's delay, in order on its connection.
    fn send_to_node(&mut self, request: Request, lost: impl FnOnce() -> String) {
        let faulty = self.faulty();
        match self.cfg.network.fate(&mut self.net_rng, faulty) {
            Fate::Lost => self.log(lost),
            Fate::After(d) => {
                let conn = (request.client, request.node, request.epoch, true);
                let at = self.in_order(conn, self.now + d);
                self.push(at, Event::ToNode(request));
            }
        }
    }

    pub(super) fn output(&mut self, client: usize, o: Output) {
        let now = self.now;
        match o {
            Output::Send {
                node,
                id,
                argv,
                after,
            } => {
                let epoch = self.clients[client].epoch[node];
                // The library writes a follow-up on the connection of the request it follows;
                // once that connection has closed, the write fails at once.
                if let Some(after) = after
                    && self.written_on.get(&(client, after)) != Some(&epoch)
                {
                    self.log(|| {
                        format!("{now} c{client}#{id} unwritten (#{after}'s connection closed)")
                    });
                    let input = Input::Unwritten { node, id };
                    return self.tell(now, client, input, None);
                }
                self.written_on.insert((client, id), epoch);
                let life = self.nodes[node].life;
                self.inflight.insert((client, id), (node, epoch));
                let request = Request {
                    node,
                    client,
                    epoch,
                    life,
                    id,
                    argv,
                };
                self.send_to_node(request, || format!("{now} c{client}#{id} lost"));
                let faulty = self.faulty();
                if self.cfg.network.cut_after_write(&mut self.net_rng, faulty) {
                    self.log(|| format!("{now} c{client}->n{node} cut after #{id}"));
                    self.cut(client, node, true);
                }
            }
            Output::Reconnect { node } => self.cut(client, node, false),
            Output::Unblock { node } => {
                let blocked = super::nodes::conn_id(client, self.clients[client].epoch[node]);
                let request = Request {
                    node,
                    client,
                    epoch: super::nodes::SIDE_EPOCH,
                    life: self.nodes[node].life,
                    id: RequestId::MAX,
                    argv: vec![
                        b"CLIENT".to_vec(),
                        b"UNBLOCK".to_vec(),
                        blocked.to_string().into_bytes(),
                        b"ERROR".to_vec(),
                    ],
                };
                self.send_to_node(request, || format!("{now} c{client} unblock n{node} lost"));
            }
            Output::WakeAt { mono, token } => {
                let at = self.clients[client].mono.when(mono, now);
                let input = Input::Wake { token };
                self.push(
                    at,
                    Event::ToClient(Delivery {
                        client,
                        input,
                        conn: None,
                        mono: Some(mono),
                    }),
                );
            }
            Output::Note(note) => {
                if matches!(
                    note,
                    Note::Attempt { .. } | Note::Extended { .. } | Note::Releasing
                ) {
                    self.lock_ops += 1;
                }
                self.log(|| format!("{now} c{client} {note}"));
                let mut view = WorldView {
                    nodes: &mut self.nodes,
                    clients: &self.clients,
                    holders: self.holders.as_deref(),
                };
                self.checker.note(client, &note, now, &mut view);
            }
        }
    }
}
