//! Ending another connection's blocking command early, as if it had timed out.

use std::sync::Arc;
use std::time::Instant;

use super::conn::set_timeouts;
use super::endpoint::Endpoint;
use crate::wire::NetError;

/// Ends the blocking command of the connection with the server's id `id` as if it had timed
/// out (`CLIENT UNBLOCK id`), on another connection of `endpoint` (pooled, or opened once and
/// pooled after). `Some` with the server's answer when it was asked: 1 when the block was ended
/// now; 0 when the connection was not blocked (its block ended just before, and the reply is
/// on its way, or the server has yet to read it). Either way, for a block whose request the
/// server has read, the block is over.
///
/// A client id means something only on its own server: the other connection must reach the
/// blocked one's server (`peer`). During a failover the endpoint's new connections go to the
/// new master, where the same id may name an unrelated client whose block it would end; then
/// nothing is sent, and the blocked connection is dropped instead.
pub(super) fn unblock(
    endpoint: &Arc<Endpoint>,
    id: i64,
    peer: &str,
    deadline: Instant,
) -> Option<i64> {
    let Ok(mut other) = endpoint.take_or_connect(deadline) else {
        return None;
    };
    if other.peer().as_deref() != Some(peer) {
        endpoint.put(other);
        return None;
    }
    // `ERROR`, not the default `TIMEOUT`: a client whose command `CLIENT PAUSE` postponed
    // (the write pause of a `FAILOVER` or a cluster failover, an operator's) is blocked too,
    // and Redis and Valkey releases before their 2025 fixes (Redis 7.0.15 among them) crash
    // when such a client is unblocked as timed out (`Unknown btype in
    // replyToBlockedClientTimedOut()`); the torture suite's `CLIENT PAUSE WRITE` met it. With
    // `ERROR` the postponed command is answered `-UNBLOCKED` instead, and a real `BLPOP` too:
    // its reply is skipped either way.
    let mut cmd = redis::cmd("CLIENT");
    cmd.arg("UNBLOCK").arg(id).arg("ERROR");
    let reply: Result<i64, NetError> =
        set_timeouts(&other, deadline).and_then(|()| Ok(cmd.query(&mut other)?));
    match reply {
        Ok(n) => {
            endpoint.put(other);
            Some(n)
        }
        Err(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use super::*;
    use crate::net::endpoint::Setup;
    use crate::net::node::Node;
    use crate::net::testing::Server;

    /// `CLIENT UNBLOCK` names a client by its id on one server. On a connection that reaches
    /// another server (the endpoint moved to a new master in a failover), the same id can
    /// name an unrelated client: its block must not be ended.
    #[test]
    fn an_unblock_never_goes_to_another_server() {
        let (ours, other) = (Server::start(), Server::start());
        let setup = Setup {
            client_name: "unblock-test".into(),
            connect_timeout: Duration::from_secs(2),
            preload: Arc::new([]),
            probe: None,
        };
        let node = Node::open(&other.url, setup, None).unwrap();
        let by = Instant::now() + Duration::from_secs(2);
        let endpoint = node.endpoint(0, by).unwrap();
        // An unrelated client of the other server, blocked.
        let mut bystander = redis::Client::open(other.url.as_str())
            .unwrap()
            .get_connection()
            .unwrap();
        let id: i64 = redis::cmd("CLIENT")
            .arg("ID")
            .query(&mut bystander)
            .unwrap();
        let mut blpop = redis::cmd("BLPOP");
        blpop.arg("queue").arg(1);
        bystander
            .send_packed_command(&blpop.get_packed_command())
            .unwrap();
        let mut probe = redis::Client::open(other.url.as_str())
            .unwrap()
            .get_connection()
            .unwrap();
        let mut blocked = || -> i64 {
            let info: String = redis::cmd("INFO").arg("clients").query(&mut probe).unwrap();
            info.lines()
                .find_map(|l| l.strip_prefix("blocked_clients:"))
                .and_then(|n| n.trim().parse().ok())
                .unwrap_or(0)
        };
        let mut waited = Duration::ZERO;
        while blocked() == 0 && waited < Duration::from_secs(1) {
            std::thread::sleep(Duration::from_millis(5));
            waited += Duration::from_millis(5);
        }
        assert_eq!(blocked(), 1);
        // A block of ours on the first server, with the same id there.
        let peer = format!("127.0.0.1:{}", ours.port);
        assert!(unblock(&endpoint, id, &peer, by).is_none());
        assert_eq!(blocked(), 1, "the other server's client was unblocked");
    }
}
