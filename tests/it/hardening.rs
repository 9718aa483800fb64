//! Regression tests for the hardening issue: one test per hole an adversarial run of the
//! release binary found, each named after what it guards, on real sockets against
//! `Gateway::start` or the real binary. Bounds are generous ceilings, never timings.

mod addresses;
mod agent_card;
mod bounds;
mod cancel;
mod checks;
mod conn;
mod conversation_budget;
mod credentials;
mod crowding;
mod early_cancel;
mod feedback_index;
mod ingress;
mod journal;
mod ledger;
mod liar;
mod openai;
mod panics;
mod ratings;
mod sse_bytes;
mod status_bytes;
mod upstream;
mod verdicts;
