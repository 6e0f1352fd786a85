//! Owner labels, tokens and jitter, all from the OS CSPRNG.

use std::sync::LazyLock;
use std::time::Duration;

use crate::error::{Error, ErrorKind};

/// Random bytes in every token (hex-encoded, so twice as many characters).
const TOKEN_BYTES: usize = 16;

/// The default owner label: `hostname:pid`, so that `GET` on a lock tells an operator who holds
/// it. Taken at each acquisition, so a forked child labels its own locks with its own pid.
pub(crate) fn default_label() -> String {
    // Read once: the label is made at every acquisition, and the file reads cost more than
    // the rest of the attempt's local work.
    static HOSTNAME: LazyLock<String> = LazyLock::new(hostname);
    format!("{}:{}", *HOSTNAME, std::process::id())
}

fn hostname() -> String {
    ["/proc/sys/kernel/hostname", "/etc/hostname"]
        .iter()
        .find_map(|p| std::fs::read_to_string(p).ok())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_owned())
}

/// `label:` followed by 16 CSPRNG bytes in hex.
pub(crate) fn new_token(label: &str) -> Result<Vec<u8>, Error> {
    let mut raw = [0u8; TOKEN_BYTES];
    getrandom::fill(&mut raw).map_err(|e| {
        Error::new(
            ErrorKind::Server,
            format!("the OS random generator failed: {e}"),
        )
    })?;
    let mut token = Vec::with_capacity(label.len() + 1 + 2 * TOKEN_BYTES);
    token.extend_from_slice(label.as_bytes());
    token.push(b':');
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for b in raw {
        token.push(HEX[usize::from(b >> 4)]);
        token.push(HEX[usize::from(b & 15)]);
    }
    Ok(token)
}

/// A random number for the protocol's choices (`proto/` takes them as arguments).
pub(crate) fn random() -> u64 {
    getrandom::u64().unwrap_or(0x9e37_79b9_7f4a_7c15)
}

/// A random duration in `[base/2, base*3/2]`: retries from many clients spread out.
pub(crate) fn jitter(base: Duration) -> Duration {
    super::proto::acquisition::jitter(base, random())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_labelled_and_unique() {
        let a = new_token("host:1").unwrap();
        let b = new_token("host:1").unwrap();
        assert_ne!(a, b);
        assert!(a.starts_with(b"host:1:"));
        assert_eq!(a.len(), "host:1:".len() + 32);
    }

    #[test]
    fn jitter_stays_in_range() {
        for _ in 0..1000 {
            let j = jitter(Duration::from_millis(50));
            assert!(j >= Duration::from_millis(25) && j <= Duration::from_millis(75));
        }
    }
}
