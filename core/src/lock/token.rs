//! Owner labels, tokens and jitter, all from the OS CSPRNG.

use std::sync::LazyLock;
use std::time::Duration;

use crate::error::{Error, ErrorKind};
use crate::process::{self, PerProcess};
use crate::sync::LocalMutex;

/// Random bytes in every token (hex-encoded, so twice as many characters).
const TOKEN_BYTES: usize = 16;

/// The default owner label: `hostname:pid`, so that `GET` on a lock tells an operator who holds
/// it. Made once per process (the hostname is a file read): a forked child makes its own, with
/// its own pid.
pub(crate) fn default_label() -> &'static str {
    static LABEL: LazyLock<PerProcess<String>> = LazyLock::new(|| PerProcess::new(label_here()));
    LABEL.get(|_| label_here())
}

fn label_here() -> String {
    format!("{}:{}", hostname(), process::id())
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
    os_random(&mut raw).map_err(|e| {
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

/// OS random bytes, fetched [`POOL_BYTES`] at a time: a `getrandom` call costs about as much
/// for 512 bytes as 4 calls for 16, and every acquisition round draws a token. Each byte is
/// handed out once; a forked child fetches its own (its parent's unused bytes are never its).
fn os_random(out: &mut [u8]) -> Result<(), getrandom::Error> {
    struct Pool {
        bytes: [u8; POOL_BYTES],
        at: usize,
    }
    static POOL: LazyLock<PerProcess<LocalMutex<Pool>>> =
        LazyLock::new(|| PerProcess::new(empty()));
    fn empty() -> LocalMutex<Pool> {
        LocalMutex::new(Pool {
            bytes: [0; POOL_BYTES],
            at: POOL_BYTES,
        })
    }
    let mut pool = POOL.get(|_| empty()).lock();
    if POOL_BYTES - pool.at < out.len() {
        getrandom::fill(&mut pool.bytes)?;
        pool.at = 0;
    }
    let at = pool.at;
    out.copy_from_slice(&pool.bytes[at..at + out.len()]);
    pool.at += out.len();
    Ok(())
}

const POOL_BYTES: usize = 512;

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
