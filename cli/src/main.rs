//! `redmutex`: a distributed lock for the command line, on Redis (flock for a fleet).
//!
//! ```text
//! 0 2 * * *  redmutex run --key invoice:nightly --ttl 30s --no-wait -- /opt/billing/send-invoices
//! ```

mod duration;
mod hold;
mod operate;
mod report;
mod run;
mod sys;

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use redmutex::{Client, MAX_PERMITS};

use report::{EXIT_CONFLICT, EXIT_LOST, EXIT_OSERR, EXIT_USAGE, fail};
use run::OnLost;

const EXAMPLES: &str = "\
Examples:
  # Exactly one of the servers sends tonight's invoices; the others exit 75.
  redmutex run --key invoice:nightly --ttl 30s --no-wait -- /opt/billing/send-invoices

  # Take turns: wait up to 10 minutes for the lock, on three Redis masters (Redlock).
  redmutex run --url redis://r1:6379 --url redis://r2:6379 --url redis://r3:6379 \\
      --key reports:build --wait 10m -- make reports

  # Who holds it?
  REDMUTEX_URL=redis://r1:6379 redmutex status invoice:nightly";

const RUN_HELP: &str = "\
The command gets the lock's fence number in REDMUTEX_FENCE: pass it to the resource you
protect, so that it can refuse writes from a holder that has lost the lock meanwhile.

--permits N lets up to N runs of the key hold it at once (a semaphore; each run gets its
permit's own fence). --shared runs share the key with each other but not with a plain run,
like flock -s and flock -x on one file.

Signals: SIGINT, SIGTERM and SIGHUP sent to redmutex are forwarded to the command; the lock
is released once the command has exited. Outside a terminal the command leads its own
process group, and signals go to the whole group.

Exit status:
  the command's      its exit status; 128+N when signal N killed it
  75                 not acquired within the wait (--conflict-exit-code)
  74                 the lock was lost while the command ran, so it was stopped
                     (--lost-exit-code; with --on-lost=ignore, the command's status)
  64                 bad arguments: a malformed duration or URL, no URL, a permit count
                     out of range or unlike that of the key's other holders
  69                 Redis unavailable: unreachable, no quorum, credentials refused
  126, 127           the command could not be run / was not found
  128+N              signal N arrived while waiting for the lock; the command was not run

Examples:
  redmutex run --key invoice:nightly --ttl 30s --no-wait -- /opt/billing/send-invoices
  redmutex run --key db:migrate --wait 5m --max-hold 1h -- ./migrate.sh
  redmutex run --key sync --on-lost=kill --kill-after 30s -- rsync -a src/ dst/
  redmutex run --key payments:provider --permits 3 -- ./charge-cards
  redmutex run --key cache:prices --shared -- ./read-prices";

/// What `redmutex --version` prints after the name: the version and the TLS support built in.
#[cfg(feature = "tls-rustls")]
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (TLS: rustls with the ring provider; rediss:// URLs supported)"
);
#[cfg(not(feature = "tls-rustls"))]
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (TLS: none; built without the tls-rustls feature)"
);

#[derive(Parser)]
#[command(
    name = "redmutex",
    version = VERSION,
    about = "A distributed lock on Redis for the command line: flock for a fleet.",
    after_help = EXAMPLES
)]
struct Cli {
    /// A Redis URL (redis://[user:password@]host:port[/db], rediss:// for TLS,
    /// redis+sentinel://[user:password@]s1:26379,s2:26379/mymaster[/db] for a master found
    /// by Sentinel, redis+cluster://[user:password@]host1:7000,host2:7000 for a Redis
    /// Cluster, rediss+sentinel:// and rediss+cluster:// for either over TLS); repeat it for
    /// Redlock, where a majority of independent masters must agree.
    /// Default: the comma-separated list in REDMUTEX_URL.
    #[arg(long = "url", value_name = "URL", global = true)]
    urls: Vec<String>,

    /// How long to keep trying while Redis cannot be reached before giving up; also how long
    /// opening the first connection to each node may take.
    #[arg(long, value_name = "DUR", global = true, default_value = "1s", value_parser = duration::parse)]
    connect_timeout: Duration,

    /// For TLS (rediss, rediss+cluster, rediss+sentinel URLs): a PEM file with the CA that the
    /// servers' certificates must chain to, instead of the system's roots. Certificates are
    /// always checked unless a URL ends in "#insecure".
    #[arg(long, value_name = "FILE", global = true)]
    tls_ca_cert: Option<PathBuf>,

    /// Refuse a Redis whose maxmemory-policy is not noeviction (under memory pressure it may
    /// evict a held lock or a fence counter). Without it, such a server is only warned of,
    /// once, on stderr.
    #[arg(long, global = true)]
    require_noeviction: bool,

    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run a command while holding a lock: acquire, renew while it runs, release.
    #[command(after_help = RUN_HELP)]
    Run(RunArgs),
    /// Show who holds a lock, for how long, and the last fence number (or "free"), then the
    /// shared (--shared) holds and the semaphore permits (--permits) of the key, if any.
    Status {
        /// The lock's name (its Redis key).
        key: String,
        /// Print one JSON object instead: name, held, holder, owner, ttl_ms, fence, shared
        /// and permits.holders (each a list of {holder, owner, ttl_ms}), permits.limit, and
        /// servers (a list of {node, server}); a missing value is null.
        #[arg(long)]
        json: bool,
    },
    /// List every lock held or waited for whose name matches PATTERN: one line each with
    /// its kind (exclusive, read, permit, or waited when nobody holds it), last fence,
    /// waiters, and holders with their time left ("on 2 of 3 nodes" when Redlock nodes
    /// disagree). Found by a SCAN (never KEYS) of every server, each master of a cluster.
    #[command(after_help = LIST_HELP)]
    List {
        /// A Redis glob pattern of lock names (*, ?, [a-z], \\x).
        #[arg(default_value = "*")]
        pattern: String,
        /// Print one JSON object per lock and line instead: name, kind, holds (each
        /// {kind, holder, owner, ttl_ms, nodes}), fence, waiters, nodes, disagree.
        #[arg(long)]
        json: bool,
    },
    /// Break a stuck lock: remove every hold of KEY, whoever has it (needs --force). The
    /// fence counter is kept, so later fences stay larger, and the waiters are woken. A
    /// holder still running learns of it only at its next renewal: until then two run at once.
    Unlock {
        /// The lock's name (its Redis key).
        key: String,
        /// Really remove the holds; without it nothing is changed.
        #[arg(long)]
        force: bool,
        /// Print one JSON object instead: name, and removed (each {kind, holder, owner,
        /// ttl_ms, nodes}).
        #[arg(long)]
        json: bool,
    },
}

const LIST_HELP: &str = "\
Example:
  $ redmutex list 'invoice:*'
  NAME             KIND                  FENCE  WAITERS  HOLDERS
  invoice:nightly  exclusive  1796520588806958        2  billing-1:4242 (27.3s)

A mutex with fencing off, held while nobody waits, leaves no key but its own: ask
`redmutex status NAME` for it.";

#[derive(Args)]
struct RunArgs {
    /// The lock's name (its Redis key), the same on every server.
    #[arg(long, value_name = "KEY")]
    key: String,

    /// The lease: how long the lock outlives a holder that stopped renewing (crashed,
    /// frozen, cut off). Renewed every TTL/3 while the command runs.
    #[arg(long, value_name = "DUR", default_value = "30s", value_parser = duration::parse)]
    ttl: Duration,

    /// Take one of N permits of a semaphore named KEY instead of the lock: at most N commands
    /// hold KEY at once (N is 1 to 1024, the same for every run of KEY). The command gets its
    /// permit's fence.
    #[arg(long, value_name = "N", value_parser = parse_permits, conflicts_with = "shared")]
    permits: Option<u32>,

    /// Take a shared (read) hold of KEY: any number of --shared runs of KEY at once, none
    /// while a plain run holds KEY, and a waiting plain run goes before new shared ones
    /// (like flock -s beside flock -x). The command gets the fence of the last plain run.
    #[arg(long)]
    shared: bool,

    /// Wait at most this long for the lock. Default: as long as it takes (like flock).
    #[arg(long, value_name = "DUR", value_parser = duration::parse, conflicts_with = "no_wait")]
    wait: Option<Duration>,

    /// Do not wait: exit at once (code 75) when someone else holds the lock.
    #[arg(long)]
    no_wait: bool,

    /// Stop renewing after this long: the lock then expires and counts as lost.
    #[arg(long, value_name = "DUR", value_parser = duration::parse)]
    max_hold: Option<Duration>,

    /// Replication safety: the lock counts as taken (and renewed) on a Redis only once N of
    /// its replicas acknowledged the write within DUR (Redis WAIT; default 1s, at most
    /// TTL/2). A failover to one of those replicas keeps the lock; other failovers may not.
    #[arg(long, value_name = "N[:DUR]", value_parser = parse_min_replicas)]
    min_replicas: Option<(u32, Option<Duration>)>,

    /// What to do with the command when the lock is lost while it runs.
    #[arg(long, value_enum, value_name = "ACTION", default_value_t = OnLost::Kill)]
    on_lost: OnLost,

    /// After a lost lock, how long the command has between SIGTERM and SIGKILL.
    #[arg(long, value_name = "DUR", default_value = "10s", value_parser = duration::parse)]
    kill_after: Duration,

    /// The exit code when the lock was not acquired.
    #[arg(long, value_name = "N", default_value_t = EXIT_CONFLICT)]
    conflict_exit_code: u8,

    /// The exit code when the lock was lost while the command ran (--on-lost=kill).
    #[arg(long, value_name = "N", default_value_t = EXIT_LOST)]
    lost_exit_code: u8,

    /// On exit, print what the run's lock calls did on stderr, as one line of key=value
    /// figures (the client's stats: acquired, refused, timed_out, interrupted, failed, lost
    /// and its reason, renewals, renewal_failures, and the seconds waited and held).
    #[arg(long)]
    stats: bool,

    /// The command and its arguments (after --).
    #[arg(value_name = "COMMAND", required = true, trailing_var_arg = true)]
    command: Vec<OsString>,
}

fn main() {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            std::process::exit(if e.use_stderr() { EXIT_USAGE } else { 0 });
        }
    };
    std::process::exit(dispatch(cli));
}

fn dispatch(cli: Cli) -> i32 {
    // Before any other thread exists, so that every thread inherits the signal mask.
    let events = match &cli.command {
        Cmd::Run(_) => match sys::Events::install() {
            Ok(e) => Some(e),
            Err(e) => {
                fail(format_args!("cannot set up signal handling: {e}"));
                return EXIT_OSERR;
            }
        },
        Cmd::Status { .. } | Cmd::List { .. } | Cmd::Unlock { .. } => None,
    };
    let urls = if cli.urls.is_empty() {
        from_env()
    } else {
        cli.urls
    };
    if urls.is_empty() {
        fail("no Redis URL: pass --url redis://host:6379 or set REDMUTEX_URL");
        return EXIT_USAGE;
    }
    let mut builder = Client::builder()
        .nodes(urls)
        .connect_timeout(cli.connect_timeout)
        .require_noeviction(cli.require_noeviction)
        .on_warning(|w| eprintln!("redmutex: warning: {w}"));
    if let Some(path) = &cli.tls_ca_cert {
        match std::fs::read(path) {
            Ok(pem) => builder = builder.tls_ca_cert(pem),
            Err(e) => {
                fail(format_args!(
                    "cannot read the TLS CA certificate {}: {e}",
                    path.display()
                ));
                return EXIT_USAGE;
            }
        }
    }
    let client = match builder.build() {
        Ok(c) => c,
        Err(e) => {
            fail(report::describe(&e));
            return report::exit_code(&e);
        }
    };
    match cli.command {
        Cmd::Run(a) => {
            let stats = a.stats;
            let code = run::run(
                events.as_ref().expect("installed for run"),
                &client,
                &run::Plan {
                    key: a.key,
                    kind: match (a.permits, a.shared) {
                        (Some(n), _) => hold::Kind::Permits(n),
                        (None, true) => hold::Kind::Shared,
                        (None, false) => hold::Kind::Exclusive,
                    },
                    ttl: a.ttl,
                    wait: if a.no_wait {
                        Some(Duration::ZERO)
                    } else {
                        a.wait
                    },
                    max_hold: a.max_hold,
                    min_replicas: a.min_replicas.map(|(n, timeout)| {
                        (
                            n,
                            timeout.unwrap_or_else(|| DEFAULT_REPLICA_WAIT.min(a.ttl / 2)),
                        )
                    }),
                    on_lost: a.on_lost,
                    kill_after: a.kill_after,
                    conflict_exit_code: a.conflict_exit_code.into(),
                    lost_exit_code: a.lost_exit_code.into(),
                    command: a.command,
                },
            );
            if stats {
                eprintln!("redmutex: {}", report::stats_line(&client.stats()));
            }
            code
        }
        Cmd::Status { key, json } => printed(if json {
            report::status_json(&client, &key).map(|line| line + "\n")
        } else {
            report::status_lines(&client, &key)
        }),
        Cmd::List { pattern, json } => printed(if json {
            operate::list_json(&client, &pattern)
        } else {
            operate::list_lines(&client, &pattern)
        }),
        Cmd::Unlock { key, force, json } => {
            if !force {
                fail(format!(
                    "not removing the holds of {}: add --force if its holder is gone for good \
                     (a holder still running would run beside the next one until its next \
                     renewal); `redmutex status` shows who holds it",
                    report::one_line(&key)
                ));
                return EXIT_USAGE;
            }
            printed(operate::unlock_lines(&client, &key, json))
        }
    }
}

/// Prints what a command found, or its error in one line; the exit code.
fn printed(text: Result<String, redmutex::Error>) -> i32 {
    match text {
        Ok(text) => {
            print!("{text}");
            0
        }
        Err(e) => {
            fail(report::describe(&e));
            report::exit_code(&e)
        }
    }
}

/// `--permits N`: 1 to MAX_PERMITS.
fn parse_permits(text: &str) -> Result<u32, String> {
    let n: u32 = text
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a number of permits (1 to {MAX_PERMITS})"))?;
    if n == 0 || n > MAX_PERMITS {
        return Err(format!(
            "a semaphore must have 1 to {MAX_PERMITS} permits, got {n}"
        ));
    }
    Ok(n)
}

/// How long `--min-replicas N` waits for the replicas when no DUR is given (capped at TTL/2).
const DEFAULT_REPLICA_WAIT: Duration = Duration::from_secs(1);

/// `--min-replicas N[:DUR]`: at least one replica, an optional positive wait.
fn parse_min_replicas(text: &str) -> Result<(u32, Option<Duration>), String> {
    let (n, timeout) = match text.split_once(':') {
        Some((n, d)) => (n, Some(duration::parse(d)?)),
        None => (text, None),
    };
    let n: u32 = n
        .trim()
        .parse()
        .map_err(|_| format!("{n:?} is not a number of replicas (e.g. 1 or 1:500ms)"))?;
    if n == 0 {
        return Err("at least 1 replica (leave the option out to turn it off)".into());
    }
    if timeout == Some(Duration::ZERO) {
        return Err("the wait for the replicas must be positive (e.g. 1:500ms)".into());
    }
    Ok((n, timeout))
}

/// `REDMUTEX_URL`: comma-separated URLs.
fn from_env() -> Vec<String> {
    split_urls(&std::env::var("REDMUTEX_URL").unwrap_or_default())
}

/// Splits comma-separated URLs. A piece without `://` continues the previous URL: the
/// sentinel list of `redis+sentinel://s1:26379,s2:26379/mymaster` and the seeds of
/// `redis+cluster://h1:7000,h2:7000` have commas too.
fn split_urls(list: &str) -> Vec<String> {
    let mut urls: Vec<String> = Vec::new();
    for piece in list.split(',').map(str::trim).filter(|u| !u.is_empty()) {
        match urls.last_mut() {
            Some(last) if !piece.contains("://") => {
                last.push(',');
                last.push_str(piece);
            }
            _ => urls.push(piece.to_owned()),
        }
    }
    urls
}

#[cfg(test)]
mod tests {
    #[test]
    fn min_replicas_takes_a_count_and_an_optional_wait() {
        use super::parse_min_replicas as p;
        use std::time::Duration;
        assert_eq!(p("1"), Ok((1, None)));
        assert_eq!(p("2:500ms"), Ok((2, Some(Duration::from_millis(500)))));
        for bad in ["0", "", "-1", "x", "1:", "1:0", "1:5", "0:1s", "1:1s:2"] {
            assert!(p(bad).is_err(), "{bad:?} was accepted");
        }
        use clap::Parser;
        let cli = super::Cli::try_parse_from([
            "redmutex",
            "run",
            "--key",
            "k",
            "--min-replicas",
            "1:200ms",
            "--",
            "true",
        ])
        .unwrap();
        let super::Cmd::Run(a) = cli.command else {
            panic!("not run")
        };
        assert_eq!(a.min_replicas, Some((1, Some(Duration::from_millis(200)))));
        assert!(
            super::Cli::try_parse_from([
                "redmutex",
                "run",
                "--key",
                "k",
                "--min-replicas",
                "0",
                "--",
                "true",
            ])
            .is_err()
        );
    }

    #[test]
    fn sentinel_and_cluster_urls_keep_their_commas() {
        assert_eq!(
            super::split_urls(
                " redis://a:1, redis+sentinel://s1:26379,s2,s3:26380/m/1 ,rediss://b:2,\
                 redis+cluster://h1:7000,h2:7001"
            ),
            [
                "redis://a:1",
                "redis+sentinel://s1:26379,s2,s3:26380/m/1",
                "rediss://b:2",
                "redis+cluster://h1:7000,h2:7001"
            ]
        );
    }
}
