//! RESP framing: where one whole reply ends in the bytes read so far, so that a connection
//! hands redis-rs's parser whole replies only, and knows whether a reply has all come without
//! reading the socket again.

use redis::{ErrorKind, RedisError, RedisResult};

/// The length of the first whole reply in `b`, `None` while it has not all come. Only the
/// framing: the reply itself is parsed by redis-rs.
pub(crate) fn frame(b: &[u8]) -> RedisResult<Option<usize>> {
    let malformed = || RedisError::from((ErrorKind::Parse, "malformed reply from the server"));
    let mut pos = 0;
    // Values still to read: the reply, and the elements of the aggregates met so far.
    let mut pending: usize = 1;
    while pending > 0 {
        let Some(nl) = b[pos..].windows(2).position(|w| w == b"\r\n") else {
            return Ok(None);
        };
        if nl == 0 {
            return Err(malformed());
        }
        let kind = b[pos];
        let line = &b[pos + 1..pos + nl];
        pos += nl + 2;
        pending -= 1;
        let len = || -> RedisResult<i64> {
            std::str::from_utf8(line)
                .ok()
                .and_then(|s| s.parse().ok())
                .ok_or_else(malformed)
        };
        match kind {
            b'+' | b'-' | b':' | b'_' | b',' | b'#' | b'(' => {}
            // Bulk strings, bulk errors, verbatim strings: `len` bytes and CRLF (-1: nil).
            b'$' | b'!' | b'=' => {
                if let Ok(n) = usize::try_from(len()?) {
                    if b.len() < pos + n + 2 {
                        return Ok(None);
                    }
                    pos += n + 2;
                }
            }
            // Arrays, sets, pushes: `len` values (-1: nil).
            b'*' | b'~' | b'>' => pending += usize::try_from(len()?).unwrap_or(0),
            // Maps: `len` pairs. Attributes: `len` pairs, then the value they describe.
            b'%' => pending += 2 * usize::try_from(len()?).unwrap_or(0),
            b'|' => pending += 2 * usize::try_from(len()?).unwrap_or(0) + 1,
            _ => return Err(malformed()),
        }
    }
    Ok(Some(pos))
}

#[cfg(test)]
mod tests {
    use super::frame;

    #[test]
    fn a_reply_is_framed_only_when_it_has_all_come() {
        let whole: &[&[u8]] = &[
            b"+OK\r\n",
            b"-ERR no\r\n",
            b":42\r\n",
            b"$-1\r\n",
            b"$5\r\nab\r\nc\r\n",
            b"*-1\r\n",
            b"*0\r\n",
            b"*2\r\n:1\r\n$3\r\nabc\r\n",
            b"*2\r\n*1\r\n+a\r\n$0\r\n\r\n",
            b"%1\r\n+k\r\n:1\r\n",
            b"|1\r\n+a\r\n+b\r\n:7\r\n",
            b"_\r\n",
        ];
        for reply in whole {
            assert_eq!(frame(reply).unwrap(), Some(reply.len()), "{reply:?}");
            let mut more = reply.to_vec();
            more.extend_from_slice(b":1\r\n");
            assert_eq!(
                frame(&more).unwrap(),
                Some(reply.len()),
                "{reply:?} then more"
            );
            for cut in 0..reply.len() {
                assert_eq!(
                    frame(&reply[..cut]).unwrap(),
                    None,
                    "{reply:?} cut at {cut}"
                );
            }
        }
        for bad in [&b"?x\r\n"[..], b"$x\r\n", b"\r\n"] {
            assert!(frame(bad).is_err(), "{bad:?}");
        }
    }
}
