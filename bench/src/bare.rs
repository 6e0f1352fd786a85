//! redmutex's own requests from a bare redis-rs connection: the scripts, keys and arguments
//! the library sends (made by the core's own protocol machines, through `sim_support`, as
//! the library makes each round), sent and read by redis-rs, without the library's
//! transport, lease, guard or renewal around them. Its rows tell, in the same run, how much
//! of a redmutex row is the requests themselves and how much the machinery around them; with
//! the floor's compare-and-delete in place of redmutex's release script
//! ([`BareRequests::with_floor_release`]), how much of the requests is the release's look for
//! waiters.

use std::sync::Arc;
use std::time::Duration;

use redis::Value;
use redmutex::MutexOptions;
use redmutex::sim_support::{AcquireRound, Keys, Spec, release_call, scripts, wake_wait};
use redmutex_sim::translate::{Argv, argv, stamp};

use crate::lockers::{Locker, TTL};

/// One node, one name, default options and the benchmark's TTL; one hold at a time.
pub struct BareRequests {
    conn: redis::Connection,
    /// The requests, made by the core once for a placeholder token and waiter id
    /// ([`Templates`]): a request is its template with those two words replaced, so that the
    /// rows time what is sent, not how the requests are made here (the core's packed request
    /// is read back into words, several microseconds a request).
    templates: Templates,
    /// Tokens are this prefix and a counter: unique within the benchmark's run.
    prefix: String,
    made: u64,
    held: Option<Vec<u8>>,
}

/// The core's requests for one lock, with [`TOKEN`] and [`WAITER`] where a call's token and
/// waiter id go.
struct Templates {
    /// `try_lock`'s acquire (has not waited, will not wait): a fenced lock's acquire script.
    try_acquire: Argv,
    /// `lock`'s first acquire (announces the caller).
    first: Argv,
    /// The acquire pipelined behind the wait (has waited, announces).
    after_wait: Argv,
    /// The wait for a release signal, as long as the library's default wait cap.
    blpop: Argv,
    release: Argv,
}

const TOKEN: &[u8] = b"bare-template-token";
const WAITER: &[u8] = b"bare-template-waiter";

impl Templates {
    fn new(spec: &Spec) -> Templates {
        // The first request of a round whose call has `waited` or not and may wait after it
        // (`will_wait`): the core's round, made at a clock reading that the request does not
        // carry.
        let acquire = |waited: bool, will_wait: bool| {
            let announce = spec.announce(will_wait);
            let t0 = stamp(0);
            let token = TOKEN.to_vec();
            let round = (waited, false);
            let (_, sent) = AcquireRound::new(spec, token, t0, round, (announce, announce), WAITER);
            argv(&sent.calls[0])
        };
        Templates {
            try_acquire: acquire(false, false),
            first: acquire(false, true),
            after_wait: acquire(true, true),
            blpop: argv(&wake_wait(spec, spec.opts.wait_cap)),
            release: argv(&release_call(spec, TOKEN, true)),
        }
    }
}

/// `template` as a command, with `token` and `waiter` in their places.
fn fill(template: &Argv, token: &[u8], waiter: &[u8]) -> redis::Cmd {
    let mut c = redis::Cmd::new();
    for word in template {
        c.arg(match word.as_slice() {
            TOKEN => token,
            WAITER => waiter,
            w => w,
        });
    }
    c
}

impl BareRequests {
    pub fn open(url: &str, key: &str) -> Result<BareRequests, String> {
        let mut conn = redis::Client::open(url)
            .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(5)))
            .map_err(|e| e.to_string())?;
        for (_, source) in scripts() {
            let _: String = redis::cmd("SCRIPT")
                .arg("LOAD")
                .arg(source)
                .query(&mut conn)
                .map_err(|e| e.to_string())?;
        }
        let opts = MutexOptions::default().with_ttl(TTL);
        let keys = Arc::new(Keys::new(key.as_bytes()));
        let node_timeout = redmutex::default_node_timeout(TTL);
        let spec = Spec::new(keys, opts, node_timeout, 1).map_err(|e| e.to_string())?;
        Ok(BareRequests {
            conn,
            templates: Templates::new(&spec),
            prefix: format!("bare:{}:", std::process::id()),
            made: 0,
            held: None,
        })
    }

    /// The same requests, but the release: the floor's compare-and-delete of `KEYS[1]` and
    /// `ARGV[1]`, sent by hash with redmutex's release keys and arguments, which reads only
    /// those it needs. `try_lock` + `unlock` only.
    pub fn with_floor_release(
        url: &str,
        key: &str,
        release: &redis::Script,
    ) -> Result<BareRequests, String> {
        let mut bare = BareRequests::open(url, key)?;
        release
            .prepare_invoke()
            .load(&mut bare.conn)
            .map_err(|e| e.to_string())?;
        bare.templates.release[1] = release.get_hash().as_bytes().to_vec();
        Ok(bare)
    }

    /// Holds `token` when `reply` (to its acquire request) granted it.
    fn take(&mut self, token: Vec<u8>, reply: Value) -> Result<bool, String> {
        let ok = granted(reply)?;
        if ok {
            self.held = Some(token);
        }
        Ok(ok)
    }

    fn token(&mut self) -> Vec<u8> {
        self.made += 1;
        format!("{}{}", self.prefix, self.made).into_bytes()
    }
}

/// A grant answers its fence, an integer; a refusal is an array.
fn granted(reply: Value) -> Result<bool, String> {
    match reply {
        Value::Int(_) => Ok(true),
        Value::Array(_) => Ok(false),
        other => Err(format!("unexpected acquire reply {other:?}")),
    }
}

impl Locker for BareRequests {
    /// As the library's `lock` on one node: a round that announces the caller; when refused,
    /// the wait for a release signal with the next round pipelined behind it, until granted.
    fn lock(&mut self) -> Result<(), String> {
        let token = self.token();
        let waiter = token.clone();
        let first = fill(&self.templates.first, &token, &waiter);
        let reply = first.query(&mut self.conn).map_err(|e| e.to_string())?;
        if self.take(token, reply)? {
            return Ok(());
        }
        loop {
            let token = self.token();
            let blpop = fill(&self.templates.blpop, b"", b"");
            let acquire = fill(&self.templates.after_wait, &token, &waiter);
            let (_, reply): (Value, Value) = redis::pipe()
                .add_command(blpop)
                .add_command(acquire)
                .query(&mut self.conn)
                .map_err(|e| e.to_string())?;
            if self.take(token, reply)? {
                return Ok(());
            }
        }
    }

    /// As the library's `try_lock` of a fenced lock: one round that does not announce.
    fn try_lock(&mut self) -> Result<bool, String> {
        let token = self.token();
        let acquire = fill(&self.templates.try_acquire, &token, b"");
        let reply = acquire.query(&mut self.conn).map_err(|e| e.to_string())?;
        self.take(token, reply)
    }

    fn unlock(&mut self) -> Result<(), String> {
        let token = self.held.take().ok_or("unlock without a lock")?;
        let released: i64 = fill(&self.templates.release, &token, b"")
            .query(&mut self.conn)
            .map_err(|e| e.to_string())?;
        match released {
            1 => Ok(()),
            other => Err(format!("release answered {other}")),
        }
    }
}
