//! An LDP client. [`Adapter`] is seed `001_…`'s adapter: `discover`, `invoke` (sessions kept
//! inside it), `stream` with backpressure, `status` and `cancel`, provenance beside every
//! output. [`Transport`] under it carries every call to an LDP endpoint (cards, messages,
//! streams) with one connection pool, deadlines, size limits and one error classification;
//! the gateway uses it for its delegates.
//!
//! ```no_run
//! # async fn run() -> Result<(), ldp_client::Error> {
//! let adapter = ldp_client::Adapter::new(ldp_client::Config::default())?;
//! let task = ldp_client::Task::new("summarize", serde_json::json!({"text": "…"}));
//! let outcome = adapter.call("ldp://127.0.0.1:8080", task).await?;
//! println!("{}", outcome.output["ldp_provenance"]["produced_by"]);
//! # Ok(()) }
//! ```

pub mod adapter;
mod error;
mod secret;
pub mod transport;
mod url;

pub use adapter::{
    Adapter, Config, Discovery, Event, Outcome, Task, TaskHandle, TaskState, TaskStream,
};
pub use error::{
    code_shown, requests_own, status_reason, status_text, Error, ErrorKind, StatusText, Summary,
};
pub use ldp_wire;
pub use secret::Secret;
pub use transport::{
    CardLimits, Forward, Session, Transport, DEFAULT_MAX_RESPONSE_BYTES, HOPS_HEADER,
    STREAM_BYTES_PER_ANSWER_BYTE,
};
pub use url::{base_url, masked as masked_url, UrlError};
