//! The clients' side of the world: handing them inputs (after their pauses, on their
//! clocks, on live connections only) and carrying out what they ask.

use super::net::Fate;
use super::view::WorldView;
use super::{Event, World};
use crate::client::{Client, Input, Note, Now, Output};

impl World {
    pub(super) fn deliver(
        &mut self,
        client: usize,
        input: Input,
        conn: Option<(usize, u64)>,
        mono: Option<u64>,
    ) {
        let now = self.now;
        let slot = &self.clients[client];
        if now < slot.busy_until {
            // Stopped or asleep: it sees this when it runs again.
            let at = slot.busy_until;
            return self.push(
                at,
                Event::ToClient {
                    client,
                    input,
                    conn,
                    mono,
                },
            );
        }
        if let Some(target) = mono
            && slot.mono.at(now) < target
        {
            let at = slot.mono.when(target, now);
            return self.push(
                at,
                Event::ToClient {
                    client,
                    input,
                    conn,
                    mono,
                },
            );
        }
        if let Some((node, epoch)) = conn {
            if slot.epoch[node] != epoch {
                return; // the connection it came on is closed
            }
            if let Input::Reply { id, .. } = &input {
                self.inflight.remove(&(client, *id));
            }
        }
        self.log(|| format!("{now} c{client} <- {input:?}"));
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

    pub(super) fn output(&mut self, client: usize, o: Output) {
        let now = self.now;
        match o {
            Output::Send { node, id, argv } => {
                let epoch = self.clients[client].epoch[node];
                let life = self.nodes[node].life;
                self.inflight.insert((client, id), (node, epoch));
                let faulty = self.faulty();
                match self.cfg.network.fate(&mut self.net_rng, faulty) {
                    Fate::Lost => self.log(|| format!("{now} c{client}#{id} lost")),
                    Fate::After(d) => {
                        let at = self.in_order((client, node, epoch, true), now + d);
                        self.push(
                            at,
                            Event::ToNode {
                                node,
                                client,
                                epoch,
                                life,
                                id,
                                argv,
                            },
                        );
                    }
                }
                if self.cfg.network.cut_after_write(&mut self.net_rng, faulty) {
                    self.log(|| format!("{now} c{client}->n{node} cut after #{id}"));
                    self.cut(client, node, true);
                }
            }
            Output::Reconnect { node } => self.cut(client, node, false),
            Output::WakeAt { mono, token } => {
                let at = self.clients[client].mono.when(mono, now);
                let input = Input::Wake { token };
                self.push(
                    at,
                    Event::ToClient {
                        client,
                        input,
                        conn: None,
                        mono: Some(mono),
                    },
                );
            }
            Output::Note(note) => {
                if matches!(
                    note,
                    Note::Attempt { .. } | Note::Extended { .. } | Note::Releasing
                ) {
                    self.lock_ops += 1;
                }
                self.log(|| format!("{now} c{client} note {note:?}"));
                let mut view = WorldView {
                    nodes: &mut self.nodes,
                    clients: &self.clients,
                };
                self.checker.note(client, &note, now, &mut view);
            }
        }
    }
}
