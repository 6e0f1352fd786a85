//! Redis's own counters (`INFO`), read on a connection kept for it.

/// One `INFO` reply.
pub struct Info(String);

impl Info {
    /// `INFO section` (`"default"` for the default sections: stats and clients among them).
    pub fn read(conn: &mut redis::Connection, section: &str) -> Result<Info, String> {
        redis::cmd("INFO")
            .arg(section)
            .query(conn)
            .map(Info)
            .map_err(|e| e.to_string())
    }

    /// The number in field `name`.
    pub fn field(&self, name: &str) -> Result<u64, String> {
        self.0
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .and_then(|v| v.trim().parse().ok())
            .ok_or_else(|| format!("INFO has no {name}"))
    }
}
