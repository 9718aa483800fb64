//! A2A agents as delegates: the LDP identity card built from an agent's Agent Card and what
//! the operator declared (`card.rs`), and the calls to the agent, JSON-RPC in A2A 1.0 (or 0.3
//! for an agent whose card speaks only that) through the gateway's one transport
//! (`upstream.rs`). The proxy's room for a task sent to one is `proxy/a2a.rs`.

pub mod card;
pub mod upstream;

pub use upstream::{A2aCallError, Agent, Endpoint, EndpointError, Outcome};
