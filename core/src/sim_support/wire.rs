//! Translation between the machines' types and the simulator's: requests as argument
//! vectors, replies as `redis::Value`s, durations as microseconds.

use std::time::Duration;

use redis::Value;

use crate::lock::scripts::Call;
use crate::lock::tally::Seat;
use crate::wire::{Answer, Failure, NetError, Request};

/// Each Lua script the lock sends, by name (`acquire`, `release`, …), with its exact
/// source text.
pub fn scripts() -> Vec<(&'static str, &'static str)> {
    crate::lock::script_sources()
}

/// A request as the words a server reads.
pub type Argv = Vec<Vec<u8>>;

/// What a node's reply to one request was: a value, or the text of an error reply.
pub type Reply = Result<Value, String>;

pub(super) fn us(d: Duration) -> u64 {
    d.as_micros() as u64
}

pub(super) fn dur(us: u64) -> Duration {
    Duration::from_micros(us)
}

pub(super) fn argv(call: &Call) -> Argv {
    let mut buf = Vec::new();
    call.write(&mut buf);
    words(&buf)
}

pub(super) fn words(packed: &[u8]) -> Argv {
    match redis::parse_redis_value(packed) {
        Ok(Value::Array(items)) => items
            .into_iter()
            .map(|v| match v {
                Value::BulkString(b) => b,
                other => format!("{other:?}").into_bytes(),
            })
            .collect(),
        other => panic!("a request packs as an array of words, not {other:?}"),
    }
}

/// The request to send again after `reply` to `sent`, when the server asked for another
/// form (`NOSCRIPT`: the script's text instead of its hash).
pub fn resend(sent: &Argv, reply: &Reply) -> Option<Argv> {
    let Err(text) = reply else {
        return None;
    };
    if !text.starts_with("NOSCRIPT") || sent.first().map(Vec::as_slice) != Some(b"EVALSHA") {
        return None;
    }
    let (_, source) = scripts()
        .into_iter()
        .find(|(_, s)| redis::Script::new(s).get_hash().as_bytes() == sent[1].as_slice())?;
    let mut again = sent.clone();
    again[0] = b"EVAL".to_vec();
    again[1] = source.as_bytes().to_vec();
    Some(again)
}

/// A node as the tally names it.
pub(super) struct SimSeat(pub(super) String);

impl Seat for SimSeat {
    fn name(&self) -> &str {
        &self.0
    }
    fn follows_failover(&self) -> bool {
        false
    }
}

pub(super) fn answer(replies: Option<Vec<Reply>>) -> Answer {
    match replies {
        // The connection broke: the request may have run, and what followed it did not.
        None => Err(NetError::new(
            Failure::Dropped,
            std::io::ErrorKind::ConnectionReset,
            "the connection broke".into(),
        )),
        Some(replies) => Ok(replies
            .into_iter()
            .map(|r| {
                r.map_err(|text| {
                    let code = text.split(' ').next().unwrap_or("ERR").to_owned();
                    NetError::from(redis::RedisError::from((
                        redis::ErrorKind::Extension,
                        "server error",
                        format!("{code} {text}"),
                    )))
                })
            })
            .collect()),
    }
}
