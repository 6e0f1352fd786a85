//! A server that answers nonsense: every command gets the next of a few replies that no
//! script of the library returns for what it asked, or, from [`Nonsense::random`], a random
//! RESP value of a seeded sequence (see `tests/nonsense.rs`).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

/// The replies, in turn: a status, a negative integer, nil, an array, a string.
const REPLIES: [&[u8]; 5] = [
    b"+ok\r\n",
    b":-5\r\n",
    b"$-1\r\n",
    b"*2\r\n+a\r\n:1\r\n",
    b"$3\r\nabc\r\n",
];

/// A server on a free loopback port answering every command with the next of `REPLIES`
/// (one rotation for all its connections), or with random RESP values; it stops when dropped.
pub struct Nonsense {
    port: u16,
    stop: Arc<AtomicBool>,
}

impl Nonsense {
    /// Starts it, on a port of its own, answering with `REPLIES` in turn.
    pub fn start() -> Nonsense {
        Nonsense::serving(|n| REPLIES[n % REPLIES.len()].to_vec())
    }

    /// Starts one that answers the `n`th command (counted over all its connections) with a
    /// random RESP value drawn from `seed` and `n`: any RESP2 or RESP3 type, nested up to two
    /// levels, with the integers, strings and errors a script's reply is made of.
    pub fn random(seed: u64) -> Nonsense {
        Nonsense::serving(move |n| {
            let mut rng = Rng(seed ^ (n as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
            let mut out = Vec::new();
            value(&mut rng, 2, &mut out);
            out
        })
    }

    fn serving(reply: impl Fn(usize) -> Vec<u8> + Send + Sync + 'static) -> Nonsense {
        let reply = Arc::new(reply);
        let listener = TcpListener::bind(("127.0.0.1", 0)).unwrap();
        let port = listener.local_addr().unwrap().port();
        listener.set_nonblocking(true).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let next = Arc::new(AtomicUsize::new(0));
        let stopping = Arc::clone(&stop);
        std::thread::spawn(move || {
            while !stopping.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((conn, _)) => {
                        let (next, reply) = (Arc::clone(&next), Arc::clone(&reply));
                        std::thread::spawn(move || serve(conn, &next, &*reply));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Nonsense { port, stop }
    }

    /// Its `redis://` URL.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

impl Drop for Nonsense {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// Reads commands (RESP arrays of bulk strings) and answers the `n`th with `reply(n)`.
fn serve(conn: TcpStream, next: &AtomicUsize, reply: &dyn Fn(usize) -> Vec<u8>) {
    conn.set_nonblocking(false).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut out = conn.try_clone().unwrap();
    let mut input = BufReader::new(conn);
    let mut line = String::new();
    loop {
        line.clear();
        if input.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let Some(n) = line.trim_end().strip_prefix('*') else {
            return;
        };
        for _ in 0..n.parse::<usize>().unwrap_or(0) {
            line.clear();
            if input.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            let len: usize = line.trim_end()[1..].parse().unwrap_or(0);
            let mut arg = vec![0; len + 2];
            if input.read_exact(&mut arg).is_err() {
                return;
            }
        }
        let reply = reply(next.fetch_add(1, Ordering::SeqCst));
        if out.write_all(&reply).is_err() {
            return;
        }
    }
}

/// xorshift64: enough randomness for replies, reproducible from a seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn pick<'a>(&mut self, of: &[&'a str]) -> &'a str {
        of[self.below(of.len() as u64) as usize]
    }
}

/// Writes one random RESP value, with aggregates nested at most `depth` more levels.
fn value(rng: &mut Rng, depth: u32, out: &mut Vec<u8>) {
    const WORDS: [&str; 6] = ["OK", "ok", "QUEUED", "PONG", "1", "redmutex"];
    const ERRORS: [&str; 8] = [
        "ERR nonsense",
        "NOSCRIPT No matching script",
        "WRONGTYPE Operation against a key holding the wrong kind of value",
        "OOM command not allowed",
        "READONLY You can't write against a read only replica.",
        "NOPERM this user has no permissions",
        "BUSY Redis is busy running a script",
        "LOADING Redis is loading the dataset in memory",
    ];
    const INTEGERS: [i64; 9] = [-5, -2, -1, 0, 1, 2, 30_000, i64::MAX, i64::MIN];
    let kinds = if depth == 0 { 9 } else { 12 };
    match rng.below(kinds) {
        0 => out.extend_from_slice(format!("+{}\r\n", rng.pick(&WORDS)).as_bytes()),
        1 => out.extend_from_slice(format!("-{}\r\n", rng.pick(&ERRORS)).as_bytes()),
        2 | 3 => {
            let i = INTEGERS[rng.below(INTEGERS.len() as u64) as usize];
            out.extend_from_slice(format!(":{i}\r\n").as_bytes());
        }
        4 => {
            let len = rng.below(12) as usize;
            let bytes: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
            out.extend_from_slice(format!("${len}\r\n").as_bytes());
            out.extend_from_slice(&bytes);
            out.extend_from_slice(b"\r\n");
        }
        5 => {
            let word = rng.pick(&WORDS);
            out.extend_from_slice(format!("${}\r\n{word}\r\n", word.len()).as_bytes());
        }
        6 => out.extend_from_slice(rng.pick(&["$-1\r\n", "*-1\r\n", "_\r\n"]).as_bytes()),
        7 => out.extend_from_slice(
            rng.pick(&["#t\r\n", "#f\r\n", ",1.5\r\n", ",-inf\r\n"])
                .as_bytes(),
        ),
        8 => out.extend_from_slice(b"(12345678901234567890\r\n"),
        9 | 10 => {
            let n = rng.below(4);
            out.extend_from_slice(format!("*{n}\r\n").as_bytes());
            for _ in 0..n {
                value(rng, depth - 1, out);
            }
        }
        _ => {
            let n = rng.below(3);
            out.extend_from_slice(format!("%{n}\r\n").as_bytes());
            for _ in 0..2 * n {
                value(rng, depth - 1, out);
            }
        }
    }
}
