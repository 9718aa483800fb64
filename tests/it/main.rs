//! The integration tests, in one binary: linking the whole crate once instead of once per
//! file is most of `cargo test`'s time on a small machine.
//!
//! Each module is one area (and was once a binary of its own), so a failure reads as
//! `security::signatures_are_checked_and_replays_refused`; `cargo test --test it security::`
//! runs one area. Every test goes through the harness in [`support`]: a gateway from
//! `TestGateway::builder()`, simulated delegates, one client, one child-process helper. No
//! test changes the process environment (secrets reach a gateway process through its own),
//! time bounds are generous ceilings only, and temporary files live in removed directories.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests fail loudly")]

mod support;

mod a2a_delegates;
mod a2a_wire;
mod adapter;
mod anthropic_ingress;
mod anthropic_upstream;
mod architecture;
mod bridge_a2a;
mod bridge_ladp;
mod bridge_llmcp;
mod bridge_llmx;
mod call;
mod cli;
mod cluster;
mod cluster_bridges;
mod cluster_calibration;
mod cluster_frontends;
mod console;
mod dashboards;
mod dialects;
mod docs;
mod durability;
mod feedback;
mod fuzz_corpus;
mod gateway;
mod golden;
mod hardening;
mod interop;
mod learning;
mod ledger;
mod openai_ingress;
mod openai_sim;
mod openai_upstream;
mod ref_adapter;
mod resilience;
mod routing;
mod security;
mod signing;
mod sim;
mod sim_accuracy;
mod streaming;
mod traces;
mod verifiers;
mod verify;
