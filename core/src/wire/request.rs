//! What is sent to a node: requests known only as RESP bytes, a key slot and how to re-send
//! themselves; and the RESP pieces they are packed with. The lock protocol makes these; the
//! transport sends them.

use redis::Value;

/// One request of a round, as the transport sees it.
///
/// A request with a key slot is routed by it (to the cluster master that serves the slot);
/// one without keys (such as `WAIT`) goes to every master that got a keyed request before it
/// in the same round, and is sent again after any keyed request that had to be sent again, so
/// that it still follows the writes it is about.
pub trait Request: Sync {
    /// Appends the request, packed in RESP.
    fn write(&self, buf: &mut Vec<u8>);

    /// The cluster slot of the request's keys; `None` for a request without keys.
    fn slot(&self) -> Option<u16>;

    /// Another form of the request, when `reply` says the server needs one (a script the
    /// server does not have cached answers `NOSCRIPT`: the script's full text is sent).
    fn resend(&self, reply: &Value) -> Option<Vec<u8>>;
}

/// A reference to a request is the request: a round can be made of requests owned elsewhere.
impl<R: Request + ?Sized> Request for &R {
    fn write(&self, buf: &mut Vec<u8>) {
        (**self).write(buf);
    }

    fn slot(&self) -> Option<u16> {
        (**self).slot()
    }

    fn resend(&self, reply: &Value) -> Option<Vec<u8>> {
        (**self).resend(reply)
    }
}

/// A plain command (`WAIT`, `BLPOP`, …): sent as it is, never re-sent in another form.
pub struct Command {
    cmd: redis::Cmd,
    slot: Option<u16>,
}

impl Command {
    /// A command without keys.
    pub(crate) fn new(cmd: redis::Cmd) -> Command {
        Command { cmd, slot: None }
    }

    /// A command about a key in `slot`.
    pub(crate) fn keyed(cmd: redis::Cmd, slot: u16) -> Command {
        Command {
            cmd,
            slot: Some(slot),
        }
    }
}

impl Request for Command {
    fn write(&self, buf: &mut Vec<u8>) {
        self.cmd.write_packed_command(buf);
    }

    fn slot(&self) -> Option<u16> {
        self.slot
    }

    fn resend(&self, _reply: &Value) -> Option<Vec<u8>> {
        None
    }
}

/// Appends one RESP bulk string.
pub(crate) fn bulk(buf: &mut Vec<u8>, data: &[u8]) {
    let len = Decimal::new(data.len() as u64);
    buf.reserve(len.len() + data.len() + 5);
    buf.push(b'$');
    buf.extend_from_slice(&len);
    buf.extend_from_slice(b"\r\n");
    buf.extend_from_slice(data);
    buf.extend_from_slice(b"\r\n");
}

/// Appends the header of a RESP array of `n` items.
pub(crate) fn array(buf: &mut Vec<u8>, n: usize) {
    buf.push(b'*');
    buf.extend_from_slice(&Decimal::new(n as u64));
    buf.extend_from_slice(b"\r\n");
}

/// A number's decimal digits, on the stack: the requests of every round carry a few.
pub(crate) struct Decimal {
    digits: [u8; 20],
    at: usize,
}

impl Decimal {
    pub(crate) fn new(mut n: u64) -> Decimal {
        let mut d = Decimal {
            digits: [0; 20],
            at: 20,
        };
        loop {
            d.at -= 1;
            d.digits[d.at] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                return d;
            }
        }
    }
}

impl std::ops::Deref for Decimal {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.digits[self.at..]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimals_are_the_numbers_digits() {
        for n in [0, 7, 10, 99, 1_000_000, u64::MAX] {
            assert_eq!(&*Decimal::new(n), n.to_string().as_bytes());
        }
    }
}
