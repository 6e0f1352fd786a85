//! A leg of a round: some of one node's requests, bound for one endpoint, and what it
//! answers.

use std::sync::Arc;

use redis::{RedisResult, Value};

use super::endpoint::Endpoint;
use super::error::NetError;

/// What one node answered: one reply per request, or why it could not be asked.
pub(crate) type Answer = Result<Vec<Result<Value, NetError>>, NetError>;

/// A leg's answer as read, before the replies are typed: a cluster's redirections are
/// followed on these.
pub(crate) type Raw = Result<Vec<RedisResult<Value>>, NetError>;

/// Some of one node's requests, bound for one endpoint.
pub(crate) struct Leg {
    pub(crate) node: usize,
    pub(crate) endpoint: Result<Arc<Endpoint>, NetError>,
    /// Indices into the node's requests, in order.
    pub(crate) picks: Vec<usize>,
    /// Each keyed request is preceded by `ASKING` (a slot being imported).
    pub(crate) asking: bool,
}

/// A raw answer with each reply typed.
pub(crate) fn typed(raw: Raw) -> Answer {
    raw.map(|values| {
        values
            .into_iter()
            .map(|v| v.map_err(NetError::from))
            .collect()
    })
}

/// The answers of a round that ended at its quorum, with each answer left to come counted
/// as a node that did not answer in time.
pub(crate) fn unread_as_timeouts(answers: Vec<Option<Answer>>) -> Vec<Answer> {
    answers
        .into_iter()
        .map(|a| a.unwrap_or_else(|| Err(NetError::timeout())))
        .collect()
}
