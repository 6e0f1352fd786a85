//! Redis's own counters of what its clients cost it, read on one connection kept for them.

use std::time::Duration;

/// Reads `INFO` on a connection of its own, kept open (opening one per reading would add
/// connections and commands to what it measures).
pub struct Counters(pub redis::Connection);

impl Counters {
    /// (commands processed, connections received, connections open).
    pub fn read(&mut self) -> (u64, u64, u64) {
        let [commands, received, open] = self.fields([
            "total_commands_processed",
            "total_connections_received",
            "connected_clients",
        ]);
        (commands, received, open)
    }

    /// How many connections are blocked (`BLPOP`) now.
    pub fn blocked(&mut self) -> u64 {
        let [blocked] = self.fields(["blocked_clients"]);
        blocked
    }

    fn fields<const N: usize>(&mut self, names: [&str; N]) -> [u64; N] {
        let info: String = redis::cmd("INFO").query(&mut self.0).unwrap();
        names.map(|name| {
            info.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                .unwrap_or_else(|| panic!("no {name} in INFO"))
                .trim()
                .parse()
                .unwrap()
        })
    }

    /// Commands and new connections over `window`, less the two `INFO`s that measure them.
    pub fn over(&mut self, window: Duration) -> (u64, u64) {
        let (c0, n0, _) = self.read();
        std::thread::sleep(window);
        let (c1, n1, _) = self.read();
        (c1 - c0 - 1, n1 - n0)
    }
}
