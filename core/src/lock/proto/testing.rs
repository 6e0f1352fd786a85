//! What the machines' unit tests share: a node by name.

use crate::lock::tally::Seat;

/// A node named by its text, that does not follow a failover.
pub(crate) struct N(pub(crate) &'static str);

impl Seat for N {
    fn name(&self) -> &str {
        self.0
    }
    fn follows_failover(&self) -> bool {
        false
    }
}
