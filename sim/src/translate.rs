//! The one place where the simulator's types meet those of the core's protocol machines
//! (`redmutex::sim_support`): a request as the words a server reads, a simulated server's
//! reply as the answer the machines read, the world's microseconds as their durations, and a
//! node as the seat a tally names. Nothing here decides: every rule of the protocol stays in
//! the machines. The test suites and the benchmark that drive the machines against real
//! servers translate here too.

use std::time::Duration;

use redis::Value;
use redmutex::sim_support::{Answer, Failure, NetError, Request, Seat, Stamp, Tally, scripts};

use crate::redis::Reply as SimReply;

/// A request as the words a server reads.
pub type Argv = Vec<Vec<u8>>;

/// What a node's reply to one request was: a value, or the text of an error reply.
pub type Reply = Result<Value, String>;

/// A duration in whole microseconds, the world's unit.
pub fn us(d: Duration) -> u64 {
    d.as_micros() as u64
}

/// `us` microseconds as a duration.
pub fn dur(us: u64) -> Duration {
    Duration::from_micros(us)
}

/// The lease clock's reading at `us` on a simulated client's boot clock.
pub fn stamp(us: u64) -> Stamp {
    Stamp::at(dur(us))
}

/// A lease clock's reading as the simulated client's boot clock's µs.
pub fn micros(stamp: Stamp) -> u64 {
    us(stamp.since(Stamp::at(Duration::ZERO)))
}

/// A machine's request as the words a server reads (the request packs itself in RESP, which
/// is read back here).
pub fn argv(request: &impl Request) -> Argv {
    let mut buf = Vec::new();
    request.write(&mut buf);
    match redis::parse_redis_value(&buf) {
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

/// A simulated server's reply as a client library reads it.
pub fn value(reply: SimReply) -> Reply {
    Ok(match reply {
        SimReply::Status(s) if s == "OK" => Value::Okay,
        SimReply::Status(s) => Value::SimpleString(s),
        SimReply::Error(e) => return Err(e),
        SimReply::Int(i) => Value::Int(i),
        SimReply::Bulk(b) => Value::BulkString(b),
        SimReply::Nil | SimReply::NilArray => Value::Nil,
        SimReply::Array(items) => Value::Array(
            items
                .into_iter()
                .map(|r| value(r).unwrap_or(Value::Nil))
                .collect(),
        ),
    })
}

/// A node's replies to its requests as the machines read them; `None`: its connection broke
/// (the request may have run, and what followed it did not).
pub fn answer(replies: Option<Vec<Reply>>) -> Answer {
    let Some(replies) = replies else {
        return Err(NetError::new(
            Failure::Dropped,
            std::io::ErrorKind::ConnectionReset,
            "the connection broke".into(),
        ));
    };
    Ok(replies
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
        .collect())
}

/// The answer of a node that did not answer in time.
pub fn timed_out() -> Answer {
    Err(NetError::timeout())
}

/// How many of `replies` (one per node, `None` for a node that did not answer) confirm an
/// extension, and how many refused.
pub fn tally(seats: &[Node], replies: &[Option<Vec<Reply>>]) -> Tally {
    let answers: Vec<Answer> = replies
        .iter()
        .map(|r| match r {
            Some(r) => answer(Some(r.clone())),
            None => timed_out(),
        })
        .collect();
    Tally::of_ints(seats, &answers, 0, None)
}

/// The request to send again after `reply` to `sent`, when the server asked for another
/// form (`NOSCRIPT`: the script's text instead of its hash), as the core's requests resend
/// themselves.
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

/// A node as a tally names it: `n0`, `n1`, …
pub struct Node(String);

impl Seat for Node {
    fn name(&self) -> &str {
        &self.0
    }
    fn follows_failover(&self) -> bool {
        false
    }
}

/// The seats of `n` nodes.
pub fn seats(n: usize) -> Vec<Node> {
    (0..n).map(|i| Node(format!("n{i}"))).collect()
}
