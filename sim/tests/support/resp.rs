//! A minimal RESP2 client for the differential test: it keeps every reply exactly as the
//! server sent it (error text, nil bulk vs nil array), which a full client would normalise.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use redmutex_sim::redis::Reply;

/// One connection to a real server.
pub struct Resp {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl Resp {
    /// Connects to `127.0.0.1:port`; every read gives up after 5 s so that a test cannot hang.
    pub fn connect(port: u16) -> Resp {
        let s = TcpStream::connect(("127.0.0.1", port)).expect("the test server accepts");
        s.set_nodelay(true).expect("nodelay");
        s.set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        Resp {
            reader: BufReader::new(s.try_clone().expect("clone")),
            writer: s,
        }
    }

    /// Writes commands without reading (a pipeline, or a BLPOP that blocks).
    pub fn send(&mut self, cmds: &[Vec<Vec<u8>>]) {
        let mut buf = Vec::new();
        for argv in cmds {
            buf.extend_from_slice(format!("*{}\r\n", argv.len()).as_bytes());
            for a in argv {
                buf.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
                buf.extend_from_slice(a);
                buf.extend_from_slice(b"\r\n");
            }
        }
        self.writer
            .write_all(&buf)
            .expect("write to the test server");
    }

    /// Sends one command and reads its reply.
    pub fn call(&mut self, argv: &[Vec<u8>]) -> Reply {
        self.send(&[argv.to_vec()]);
        self.read()
    }

    /// Reads one reply.
    pub fn read(&mut self) -> Reply {
        let mut line = Vec::new();
        self.reader
            .read_until(b'\n', &mut line)
            .expect("a reply from the test server");
        let text = String::from_utf8_lossy(&line[1..line.len() - 2]).into_owned();
        let n = || text.parse::<i64>().expect("a length");
        match line[0] {
            b'+' => Reply::Status(text),
            b'-' => Reply::Error(text),
            b':' => Reply::Int(n()),
            b'$' if n() < 0 => Reply::Nil,
            b'$' => {
                let mut buf = vec![0; n() as usize + 2];
                self.reader.read_exact(&mut buf).expect("a bulk string");
                buf.truncate(buf.len() - 2);
                Reply::Bulk(buf)
            }
            b'*' if n() < 0 => Reply::NilArray,
            b'*' => Reply::Array((0..n()).map(|_| self.read()).collect()),
            other => panic!("not a RESP2 reply: {:?}", other as char),
        }
    }
}
