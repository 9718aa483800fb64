//! LDP Gateway: one LDP endpoint in front of many LLM delegates.
//!
//! The request path (see `docs/ARCHITECTURE.md`): `server` (HTTP, request-head deadline,
//! authentication → `tenant`, body limit, parse) → `proxy` (limits, signatures, session table,
//! policy, budgets) → `routing` (constraints, score, balance over the `registry`'s skill index)
//! → `upstream` (delegate client, upstream sessions, failover) → back through `proxy`
//! (provenance lineage, `provenance` ledger row, `telemetry` metrics) → `server` (answer).

pub mod chat;
pub mod cluster;
pub mod config;
pub mod console;
pub mod fair;
pub mod frontend;
/// The LDP wire types (the `ldp-wire` crate), under the name the gateway has always used.
pub use ldp_wire as ldp;
pub mod limits;
pub mod policy;
pub mod provenance;
pub mod proxy;
pub mod recent;
pub mod registry;
pub mod routing;
pub mod secret;
pub mod server;
pub mod session;
pub mod sim;
pub mod state;
pub mod telemetry;
pub mod tenant;
pub mod translate;
pub mod upstream;
