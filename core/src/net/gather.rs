//! Putting a round's answers back together: a cluster node's legs, one per master, become
//! one answer in request order.

use std::sync::Arc;

use redis::Value;

use super::leg::{Leg, Raw, typed};
use super::node::Node;
use crate::wire::Answer;
use crate::wire::Request;
use crate::wire::{Failure, NetError};

/// Puts the legs' answers back together, one answer per node in call order. Where a command
/// without keys went to several masters, the smallest count (the weakest `WAIT`) or an error
/// stands. A cluster node none of whose legs could be asked failed as a whole.
pub(super) fn gather<R: Request>(
    nodes: &[Arc<Node>],
    calls: &[&[R]],
    legs: Vec<Leg>,
    answers: Vec<Raw>,
) -> Vec<Answer> {
    let mut out: Vec<Option<Answer>> = (0..nodes.len())
        .map(|i| calls[i].is_empty().then(|| Ok(Vec::new())))
        .collect();
    let mut parts: Vec<Parts> = calls
        .iter()
        .map(|c| Parts {
            values: vec![None; c.len()],
            error: None,
            answered: false,
        })
        .collect();
    // Legs that answered first, so that a failed leg's error does not stand for a command
    // that other legs answered.
    let mut legs: Vec<(Leg, Answer)> = legs
        .into_iter()
        .zip(answers.into_iter().map(typed))
        .collect();
    legs.sort_by_key(|(_, answer)| answer.is_err());
    for (leg, answer) in legs {
        let i = leg.node;
        if nodes[i].as_cluster().is_none() {
            out[i] = Some(answer);
            continue;
        }
        let p = &mut parts[i];
        match answer {
            Ok(values) => {
                p.answered = true;
                for (&k, v) in leg.picks.iter().zip(values) {
                    let keyless = calls[i][k].slot().is_none();
                    p.values[k] = Some(weakest(p.values[k].take(), v, keyless));
                }
            }
            Err(e) => {
                // The cluster's report names only the cluster: say which master failed.
                let e = match &leg.endpoint {
                    Ok(endpoint) if !matches!(e.failure(), Failure::Auth | Failure::Server) => {
                        e.at(endpoint.name())
                    }
                    _ => e,
                };
                // The leg's scripts failed; a command after them (a `WAIT`) keeps what the
                // legs that answered said, if any.
                for &k in &leg.picks {
                    if calls[i][k].slot().is_some() || p.values[k].is_none() {
                        p.values[k] = Some(Err(e.clone()));
                    }
                }
                p.error.get_or_insert(e);
            }
        }
    }
    for (i, p) in parts.into_iter().enumerate() {
        if out[i].is_some() || nodes[i].as_cluster().is_none() {
            continue;
        }
        out[i] = Some(match p.error {
            Some(e) if !p.answered => Err(e),
            _ => Ok(p
                .values
                .into_iter()
                .map(|v| v.unwrap_or_else(|| Err(NetError::timeout())))
                .collect()),
        });
    }
    out.into_iter()
        .map(|a| a.unwrap_or_else(|| Err(NetError::timeout())))
        .collect()
}

/// A cluster node's answer while its legs come in.
struct Parts {
    /// Each call's answer so far.
    values: Vec<Option<Result<Value, NetError>>>,
    /// The first leg that could not be asked.
    error: Option<NetError>,
    /// Some leg answered.
    answered: bool,
}

/// The answer that stands for a request after one more leg answered it: for a request
/// without keys sent to several masters (a `WAIT`), the smaller count or the first error; for
/// a keyed request (sent to one master), its answer.
fn weakest(
    old: Option<Result<Value, NetError>>,
    new: Result<Value, NetError>,
    keyless: bool,
) -> Result<Value, NetError> {
    match (old, new) {
        (Some(Ok(Value::Int(a))), Ok(Value::Int(b))) if keyless => Ok(Value::Int(a.min(b))),
        (Some(Err(e)), _) if keyless => Err(e),
        (_, new) => new,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::endpoint::Setup;
    use crate::wire::Command;
    use std::time::Duration;

    fn refused() -> NetError {
        NetError::from(redis::RedisError::from(std::io::Error::from(
            std::io::ErrorKind::ConnectionRefused,
        )))
    }

    /// A cluster node's round of two keyed requests on two masters and one `WAIT` after them.
    fn gathered(a: Raw, b: Raw) -> Answer {
        let setup = Setup {
            client_name: "t".into(),
            connect_timeout: Duration::from_secs(1),
            preload: Arc::new([]),
            probe: None,
        };
        let node = Node::open("redis+cluster://127.0.0.1:1", setup, None).unwrap();
        let keyed = |slot| Command::keyed(redis::cmd("GET"), slot);
        let calls = [keyed(1), keyed(2), Command::new(redis::cmd("WAIT"))];
        let leg = |picks| Leg {
            node: 0,
            endpoint: Err(refused()),
            picks,
            asking: false,
        };
        gather(
            &[Arc::new(node)],
            &[&calls[..]],
            vec![leg(vec![0, 2]), leg(vec![1, 2])],
            vec![a, b],
        )
        .pop()
        .unwrap()
    }

    fn ints(answer: &Answer) -> Vec<Option<i64>> {
        answer
            .as_ref()
            .unwrap()
            .iter()
            .map(|v| match v {
                Ok(Value::Int(i)) => Some(*i),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_cluster_round_is_put_back_in_call_order_with_the_weakest_wait() {
        let both = gathered(
            Ok(vec![Ok(Value::Int(1)), Ok(Value::Int(2))]),
            Ok(vec![Ok(Value::Int(0)), Ok(Value::Int(1))]),
        );
        assert_eq!(ints(&both), [Some(1), Some(0), Some(1)]);

        // A master that cannot be asked fails its own script, not the other master's WAIT,
        // whichever leg came first.
        for (a, b) in [
            (
                Ok(vec![Ok(Value::Int(1)), Ok(Value::Int(2))]),
                Err(refused()),
            ),
            (
                Err(refused()),
                Ok(vec![Ok(Value::Int(1)), Ok(Value::Int(2))]),
            ),
        ] {
            let first_failed = a.is_err();
            let answer = gathered(a, b);
            let expected = if first_failed {
                [None, Some(1), Some(2)]
            } else {
                [Some(1), None, Some(2)]
            };
            assert_eq!(ints(&answer), expected);
        }

        // No master answered: the node failed as a whole.
        assert!(gathered(Err(refused()), Err(refused())).is_err());
    }
}
