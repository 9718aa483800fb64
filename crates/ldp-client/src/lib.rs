//! An LDP client: the [`Transport`] every call to an LDP endpoint goes through (cards,
//! messages, streams; one connection pool, deadlines, size limits, one error classification),
//! and on top of it the adapter of seed `001_…`, whose sessions live inside it.

mod error;
mod secret;
pub mod transport;

pub use error::Error;
pub use secret::Secret;
pub use transport::{CardLimits, Session, Transport, DEFAULT_MAX_RESPONSE_BYTES, HOPS_HEADER};
