//! Where requests end: the proxy delays, repeats and cuts whole commands, never half of one.
//!
//! Clients send commands as RESP arrays of bulk strings (`*2\r\n$3\r\nGET\r\n$1\r\nk\r\n`), or
//! inline (`PING\r\n`); a read from a socket may end anywhere inside one.

/// The length of the longest prefix of `buf` made of complete commands (0 if none is).
pub fn complete(buf: &[u8]) -> usize {
    let mut at = 0;
    while let Some(n) = command(&buf[at..]) {
        at += n;
    }
    at
}

/// The length of the complete command at the start of `buf`, if it is complete.
fn command(buf: &[u8]) -> Option<usize> {
    if buf.first() != Some(&b'*') {
        // Inline: one line.
        return buf.iter().position(|&b| b == b'\n').map(|i| i + 1);
    }
    let (count, mut at) = number(buf, 1)?;
    for _ in 0..count.max(0) {
        if at >= buf.len() {
            return None;
        }
        if buf[at] != b'$' {
            // Not a bulk string: not something a client sends; treat the rest as one command.
            return Some(buf.len());
        }
        let (len, next) = number(buf, at + 1)?;
        at = next + usize::try_from(len.max(0)).ok()? + 2;
        if at > buf.len() {
            return None;
        }
    }
    Some(at)
}

/// The decimal number starting at `from`, ended by `\r\n`, and the offset after it.
fn number(buf: &[u8], from: usize) -> Option<(i64, usize)> {
    let end = from + buf.get(from..)?.iter().position(|&b| b == b'\r')?;
    if buf.get(end + 1) != Some(&b'\n') {
        return None;
    }
    let n = std::str::from_utf8(&buf[from..end]).ok()?.parse().ok()?;
    Some((n, end + 2))
}

#[cfg(test)]
mod tests {
    use super::complete;

    #[test]
    fn finds_the_end_of_whole_commands_only() {
        let get = b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n";
        assert_eq!(complete(get), get.len());
        for cut in 0..get.len() {
            assert_eq!(complete(&get[..cut]), 0, "{cut}");
        }
        let two = [&get[..], &get[..], &get[..5]].concat();
        assert_eq!(complete(&two), 2 * get.len());
        assert_eq!(complete(b"PING\r\nPI"), 6);
        // Binary values with CR LF inside are counted by length.
        let set = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$4\r\n\r\n\r\n\r\n";
        assert_eq!(complete(set), set.len());
        assert_eq!(complete(b"*0\r\n"), 4);
    }
}
