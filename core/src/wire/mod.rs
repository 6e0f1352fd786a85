//! The wire between the lock protocol and the transport: what is sent to a node (a
//! [`Request`], packed as RESP) and what comes back (an [`Answer`], with typed failures). The
//! protocol's machines make requests and read answers; the transport carries them. Neither
//! knows the other.

mod answer;
mod request;

pub use answer::{Answer, Failure, NetError};
pub use request::{Command, Request};
pub(crate) use request::{Decimal, array, bulk};
