//! What the servers must provide: a version that runs the scripts, and a `maxmemory-policy`
//! that never evicts a lock.
//!
//! Each node is asked `INFO server` and `INFO memory` on its first connection (two commands:
//! Redis 6 answers one section per `INFO`). A server older than Redis 6.2 is refused, naming
//! its version: the scripts need `ZADD GT`, and would otherwise fail halfway through an
//! acquire. Under any `allkeys-*` or `volatile-*` policy, memory pressure can evict a held lock
//! key (another client then takes it) or a fence counter (fences then go backwards): anything
//! but `noeviction` is reported once per server, or refused when the client was built to
//! require `noeviction`. A server that will not answer `INFO` (an ACL user without it, as some
//! managed services have) is neither checked nor refused.

use std::sync::Arc;

use redis::Value;

use crate::net::Probe;

/// The oldest Redis whose commands the scripts use (`ZADD GT`).
const OLDEST: (u32, u32) = (6, 2);

/// Says a warning to the user (the log by default; the command line prints it, Python makes it
/// a `warnings.warn`).
pub(crate) type Warn = Arc<dyn Fn(&str) + Send + Sync>;

/// The probe of every node's version and eviction policy: a server older than Redis 6.2 is
/// refused; each server that may evict is reported through `warn` once, or refused when
/// `require_noeviction`. A server that passes is described by its software and version.
pub(crate) fn server_probe(require_noeviction: bool, warn: Warn) -> Probe {
    let mut server = redis::cmd("INFO");
    server.arg("server");
    let mut memory = redis::cmd("INFO");
    memory.arg("memory");
    let check = move |name: &str, replies: &[Value]| -> Result<Option<String>, String> {
        let [server, memory] = replies else {
            return Ok(None);
        };
        let software = info_text(name, "server", server).and_then(|i| Software::of(&i));
        if let Some(s) = &software {
            s.check(name)?;
        }
        let policy = info_text(name, "memory", memory).and_then(|i| field(&i, "maxmemory_policy"));
        if let Some(policy) = policy.filter(|p| p != "noeviction") {
            let why = format!(
                "{name} has maxmemory-policy {policy}: under memory pressure Redis may evict a \
                 held lock (and another client takes it) or a fence counter (fences go \
                 backwards); set it to noeviction"
            );
            if require_noeviction {
                return Err(why);
            }
            warn(&why);
        }
        Ok(software.map(|s| s.to_string()))
    };
    Probe {
        cmds: vec![server, memory],
        check: Arc::new(check),
    }
}

/// The text of an `INFO` reply; `None` when the server did not answer it (not allowed to ask).
fn info_text(name: &str, section: &str, reply: &Value) -> Option<String> {
    match reply {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::VerbatimString { text, .. } => Some(text.clone()),
        _ => {
            log::debug!("{name}: INFO {section} was not answered: {reply:?}");
            None
        }
    }
}

/// One field of an `INFO` reply.
fn field(info: &str, name: &str) -> Option<String> {
    info.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .map(|v| v.trim().to_owned())
}

/// What a server says it is in `INFO server`.
#[derive(Debug, PartialEq)]
struct Software {
    /// `Valkey`, or `Redis` when the server does not name itself (Redis does not).
    name: String,
    /// Its own version (Valkey's `valkey_version`, not the `redis_version` it also reports).
    version: String,
    /// The Redis version whose commands it has (`redis_version`).
    redis_version: Option<(u32, u32)>,
}

impl Software {
    fn of(info: &str) -> Option<Software> {
        let redis_version = field(info, "redis_version")?;
        let named = field(info, "server_name").filter(|n| !n.is_empty());
        let (name, version) = match named {
            Some(n) if n.eq_ignore_ascii_case("redis") => ("Redis".to_owned(), None),
            Some(n) if n.eq_ignore_ascii_case("valkey") => {
                ("Valkey".to_owned(), field(info, "valkey_version"))
            }
            Some(n) => {
                let version = field(info, &format!("{}_version", n.to_ascii_lowercase()));
                (n, version)
            }
            None => ("Redis".to_owned(), None),
        };
        Some(Software {
            name,
            version: version.unwrap_or_else(|| redis_version.clone()),
            redis_version: major_minor(&redis_version),
        })
    }

    /// Refuses a server older than [`OLDEST`], in one sentence naming it and its version.
    fn check(&self, node: &str) -> Result<(), String> {
        match self.redis_version {
            Some(v) if v < OLDEST => {
                let also = if self.name == "Redis" {
                    String::new()
                } else {
                    format!(" (the commands of Redis {}.{})", v.0, v.1)
                };
                Err(format!(
                    "{node} runs {self}{also}; redmutex needs Redis {}.{} or later, or Valkey",
                    OLDEST.0, OLDEST.1
                ))
            }
            _ => Ok(()),
        }
    }
}

impl std::fmt::Display for Software {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.name, self.version)
    }
}

/// `6.2` of `6.2.14`.
fn major_minor(version: &str) -> Option<(u32, u32)> {
    let mut parts = version.split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next().map_or(Some(0), |m| m.parse().ok())?;
    Some((major, minor))
}

/// The default warning: the log.
pub(crate) fn log_warning() -> Warn {
    Arc::new(|why| log::warn!("redmutex: {why}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    fn bulk(text: &str) -> Value {
        Value::BulkString(text.replace('\n', "\r\n").into_bytes())
    }

    fn server(version: &str) -> Value {
        bulk(&format!(
            "# Server\nredis_version:{version}\nredis_mode:standalone\n"
        ))
    }

    fn memory(policy: &str) -> Value {
        bulk(&format!("# Memory\nmaxmemory_policy:{policy}\n"))
    }

    #[test]
    fn only_noeviction_passes_silently() {
        let said = Arc::new(Mutex::new(Vec::new()));
        let s = Arc::clone(&said);
        let warn: Warn = Arc::new(move |w| s.lock().unwrap().push(w.to_owned()));
        let probe = server_probe(false, Arc::clone(&warn));
        let ok = (probe.check)("redis://a:1", &[server("7.0.15"), memory("noeviction")]);
        assert_eq!(ok, Ok(Some("Redis 7.0.15".to_owned())));
        assert!(said.lock().unwrap().is_empty());
        assert!((probe.check)("redis://a:1", &[server("7.0.15"), memory("allkeys-lru")]).is_ok());
        assert!(said.lock().unwrap()[0].contains("maxmemory-policy allkeys-lru"));
        let strict = server_probe(true, warn);
        let err =
            (strict.check)("redis://a:1", &[server("7.0.15"), memory("volatile-ttl")]).unwrap_err();
        assert!(
            err.starts_with("redis://a:1 has maxmemory-policy volatile-ttl"),
            "{err}"
        );
        // Not answered (an error reply in place of the text: the ACL denies INFO).
        assert_eq!(
            (strict.check)("redis://a:1", &[Value::Nil, Value::Nil]),
            Ok(None)
        );
    }

    #[test]
    fn servers_older_than_6_2_are_refused_naming_their_version() {
        let probe = server_probe(false, log_warning());
        let err =
            (probe.check)("redis://a:1", &[server("6.0.9"), memory("noeviction")]).unwrap_err();
        assert_eq!(
            err,
            "redis://a:1 runs Redis 6.0.9; redmutex needs Redis 6.2 or later, or Valkey"
        );
        for (version, said) in [("6.2.14", "Redis 6.2.14"), ("8.2.3", "Redis 8.2.3")] {
            let ok = (probe.check)("redis://a:1", &[server(version), memory("noeviction")]);
            assert_eq!(ok, Ok(Some(said.to_owned())));
        }
        let valkey =
            bulk("# Server\nredis_version:7.2.4\nserver_name:valkey\nvalkey_version:8.1.8\n");
        let ok = (probe.check)("redis://a:1", &[valkey, memory("noeviction")]);
        assert_eq!(ok, Ok(Some("Valkey 8.1.8".to_owned())));
        // Another server that names itself, with the commands of an old Redis.
        let other = bulk("# Server\nredis_version:6.0.16\nserver_name:other\nother_version:2.1\n");
        let err = (probe.check)("redis://a:1", &[other, memory("noeviction")]).unwrap_err();
        assert_eq!(
            err,
            "redis://a:1 runs other 2.1 (the commands of Redis 6.0); redmutex needs Redis 6.2 or \
             later, or Valkey"
        );
    }
}
