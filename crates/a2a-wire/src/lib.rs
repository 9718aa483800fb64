//! A2A (Agent2Agent) wire types: protocol v1.0 and v0.3, JSON-RPC binding.
//!
//! - [`v1`]: the v1.0 ProtoJSON shapes (`Message`, `Part`, `Task`, events, `StreamResponse`,
//!   request params), [`v03`]: the v0.3 shapes with `kind`, and `From` conversions both ways
//!   ([`convert`], mirroring the reference SDK's compat layer).
//! - [`AgentCard`]: reads v1.0, v0.3 and merged cards; writes the card the SDK would serve.
//! - [`jsonrpc`]: request/response/error envelopes, [`ErrorCode`] with the A2A codes,
//!   [`IncomingRequest::parse`] with the SDK server's checks; [`Method`]: the method names of
//!   both versions; [`ProtocolVersion`]: the `A2A-Version` header; [`consts`]: well-known
//!   paths and header names.
//!
//! Pass-through: every object keeps the members it does not model in `rest` and writes them
//! back, so what we do not read is carried, not dropped. Only what a gateway reads is parsed
//! fully. Reading never panics; it bounds nothing (body limits are the caller's), but nests
//! no deeper than `serde_json`'s recursion limit.
//!
//! Facts come from the A2A specification (`a2aproject/A2A`: `docs/specification.md`,
//! `specification/a2a.proto`) and the Python SDK `a2a-sdk==1.3.0`; each item names its
//! source. This crate depends on nothing else of the workspace.

pub mod card;
pub mod consts;
pub mod convert;
pub mod jsonrpc;
pub mod method;
mod serde_util;
pub mod v03;
pub mod v1;
pub mod version;

pub use card::{AgentCard, AgentExtension, AgentInterface, AgentSkill, SecurityScheme};
pub use jsonrpc::{
    ErrorCode, ErrorObject, Id, IncomingRequest, ParamsError, Request, RequestError, Response,
};
pub use method::Method;
pub use serde_util::Map;
pub use version::{Dialect, ProtocolVersion};
