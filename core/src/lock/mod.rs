//! The lock protocol: the scripts and their replies, acquisition rounds and waiting, the lease
//! (renewal, extension, release, loss and its reason), the tally with the quorum rule, and the
//! renew thread. It talks to the servers only through the transport's fan-out
//! ([`crate::net`]).

mod acquire;
mod calls;
mod cleanup;
pub(crate) mod clock;
mod counters;
mod glob;
mod keys;
mod lease;
mod listing;
mod policy;
pub(crate) mod proto;
mod release;
mod renew;
mod reply;
mod room;
pub(crate) mod scripts;
mod status;
pub(crate) mod tally;
mod token;
mod voters;
mod wait;

pub(crate) use acquire::Plan;
pub(crate) use calls::preload;
#[cfg(feature = "sim-support")]
pub use calls::{extend_call, named as script_sources, release_call, withdraw_calls};
pub use keys::Keys;
pub(crate) use lease::Lease;
pub use listing::{HoldKind, ListedHold, ListedLock};
pub(crate) use policy::{Warn, log_warning, server_probe};
pub(crate) use proto::Kind;
pub use release::Released;
pub use status::{LockStatus, RwLockStatus, SemaphoreStatus};
pub(crate) use token::default_label;
pub(crate) use voters::Voters;
#[cfg(feature = "sim-support")]
pub use wait::wake_wait;
