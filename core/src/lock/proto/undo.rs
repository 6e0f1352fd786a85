//! The undo of an acquisition round: the release of its token, where a quorum did not
//! grant it, queued behind the requests of nodes that did not answer in time.

use std::sync::OnceLock;
use std::time::Duration;

use redis::Value;

use super::spec::Spec;
use crate::lock::calls;
use crate::lock::scripts::Call;
use crate::wire::Request;

/// The release of a round's token, packed when it is first sent: most rounds never send it.
pub struct Undo {
    spec: Spec,
    token: Vec<u8>,
    /// A waited mutex round's announcement (its length and the waiter id), which its grant
    /// removed and the undo puts back: the caller still waits.
    rejoin: Option<(Duration, Vec<u8>)>,
    call: OnceLock<Call>,
}

impl Undo {
    pub(super) fn new(spec: &Spec, token: &[u8], rejoin: Option<(Duration, Vec<u8>)>) -> Undo {
        Undo {
            spec: spec.clone(),
            token: token.to_vec(),
            rejoin,
            call: OnceLock::new(),
        }
    }

    /// The release request.
    pub fn call(&self) -> &Call {
        self.call.get_or_init(|| match &self.rejoin {
            Some((announce, waiter)) => {
                calls::undo_call(&self.spec, &self.token, (*announce, waiter))
            }
            None => calls::release_call(&self.spec, &self.token, false),
        })
    }
}

impl Request for Undo {
    fn write(&self, buf: &mut Vec<u8>) {
        self.call().write(buf);
    }

    fn slot(&self) -> Option<u16> {
        self.call().slot()
    }

    fn resend(&self, reply: &Value) -> Option<Vec<u8>> {
        self.call().resend(reply)
    }
}
