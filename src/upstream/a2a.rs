//! A2A agents as delegates (`kind = "a2a"`): the LDP identity card built from an agent's
//! Agent Card and what the operator declared (`card.rs`), the calls to the agent, JSON-RPC in
//! A2A 1.0 (or 0.3 for an agent whose card speaks only that) through the gateway's one
//! transport (`agent.rs`), and the task's translation to a message and back.

pub mod agent;
pub mod card;

pub use agent::{A2aError, Agent, Endpoint, EndpointError, Outcome};
