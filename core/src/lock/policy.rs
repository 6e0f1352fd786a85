//! What the servers must provide: a `maxmemory-policy` that never evicts a lock.
//!
//! Under any `allkeys-*` or `volatile-*` policy, memory pressure can evict a held lock key
//! (another client then takes it) or a fence counter (fences then go backwards). Each node's
//! policy is read (`INFO memory`) on its first connection: anything but `noeviction` is
//! reported once per server, or refused when the client was built to require `noeviction`.

use std::sync::Arc;

use redis::Value;

use crate::net::Probe;

/// Says a warning to the user (the log by default; the command line prints it, Python makes it
/// a `warnings.warn`).
pub(crate) type Warn = Arc<dyn Fn(&str) + Send + Sync>;

/// The probe of every node's eviction policy: each server that may evict is reported through
/// `warn` once, or refused when `require_noeviction`.
pub(crate) fn eviction_probe(require_noeviction: bool, warn: Warn) -> Probe {
    let mut cmd = redis::cmd("INFO");
    cmd.arg("memory");
    let check = move |server: &str, reply: &Value| -> Result<(), String> {
        let policy = match reply {
            Value::BulkString(b) => policy_of(&String::from_utf8_lossy(b)),
            Value::VerbatimString { text, .. } => policy_of(text),
            // Not allowed to ask (an ACL user without `info`): nothing to say.
            _ => {
                log::debug!("{server}: INFO memory was not answered: {reply:?}");
                return Ok(());
            }
        };
        let Some(policy) = policy.filter(|p| p != "noeviction") else {
            return Ok(());
        };
        let why = format!(
            "{server} has maxmemory-policy {policy}: under memory pressure Redis may evict a \
             held lock (and another client takes it) or a fence counter (fences go backwards); \
             set it to noeviction"
        );
        if require_noeviction {
            return Err(why);
        }
        warn(&why);
        Ok(())
    };
    Probe {
        cmd,
        check: Arc::new(check),
    }
}

/// The `maxmemory_policy` field of an `INFO memory` reply.
fn policy_of(info: &str) -> Option<String> {
    info.lines()
        .find_map(|l| l.strip_prefix("maxmemory_policy:"))
        .map(|p| p.trim().to_owned())
}

/// The default warning: the log.
pub(crate) fn log_warning() -> Warn {
    Arc::new(|why| log::warn!("redmutex: {why}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[test]
    fn only_noeviction_passes_silently() {
        let said = Arc::new(Mutex::new(Vec::new()));
        let s = Arc::clone(&said);
        let warn: Warn = Arc::new(move |w| s.lock().unwrap().push(w.to_owned()));
        let reply = |p: &str| {
            Value::BulkString(format!("# Memory\r\nmaxmemory_policy:{p}\r\n").into_bytes())
        };
        let probe = eviction_probe(false, Arc::clone(&warn));
        assert!((probe.check)("redis://a:1", &reply("noeviction")).is_ok());
        assert!(said.lock().unwrap().is_empty());
        assert!((probe.check)("redis://a:1", &reply("allkeys-lru")).is_ok());
        assert!(said.lock().unwrap()[0].contains("maxmemory-policy allkeys-lru"));
        let strict = eviction_probe(true, warn);
        let err = (strict.check)("redis://a:1", &reply("volatile-ttl")).unwrap_err();
        assert!(
            err.starts_with("redis://a:1 has maxmemory-policy volatile-ttl"),
            "{err}"
        );
        assert!((strict.check)("redis://a:1", &Value::Nil).is_ok());
    }
}
