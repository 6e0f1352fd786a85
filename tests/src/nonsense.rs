//! A server that answers nonsense: every command gets the next of a few replies that no
//! script of the library returns for what it asked (see `tests/nonsense.rs`).

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
/// (one rotation for all its connections); it stops when dropped.
pub struct Nonsense {
    port: u16,
    stop: Arc<AtomicBool>,
}

impl Nonsense {
    /// Starts it, on a port of its own.
    pub fn start() -> Nonsense {
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
                        let next = Arc::clone(&next);
                        std::thread::spawn(move || serve(conn, &next));
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

/// Reads commands (RESP arrays of bulk strings) and answers each with the next reply.
fn serve(conn: TcpStream, next: &AtomicUsize) {
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
        let reply = REPLIES[next.fetch_add(1, Ordering::SeqCst) % REPLIES.len()];
        if out.write_all(reply).is_err() {
            return;
        }
    }
}
