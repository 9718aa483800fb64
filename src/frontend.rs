//! The front ends: each turns its protocol's request into the one task input
//! ([`crate::proxy::IngressTask`]) and the task's trip ([`crate::proxy::Trip`]) back into its
//! protocol. This layer stands between `server` (HTTP: routes, bodies, statuses) and `proxy`
//! (the one task pipeline): it imports `proxy`, and `proxy` never imports it.

pub mod a2a;
pub mod ladp;
pub mod llmcp;
pub mod llmx;
pub mod openai;
