//! LDP Gateway: one LDP endpoint in front of many LLM delegates.
//!
//! The request path (see `docs/ARCHITECTURE.md`):
//! `server` (HTTP, body limit, parse) → `gateway` (session table, routing seam, payload
//! translation) → `routing` (pick) → `upstream` (delegate client, upstream sessions) →
//! back through `gateway` (provenance lineage) → `server` (answer).

pub mod config;
pub mod demo;
pub mod ldp;
pub mod limits;
pub mod policy;
pub mod provenance;
pub mod proxy;
pub mod registry;
pub mod routing;
pub mod secret;
pub mod server;
pub mod session;
pub mod sim;
pub mod telemetry;
pub mod tenant;
pub mod translate;
pub mod upstream;
