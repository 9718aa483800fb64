//! The harness every integration test uses: simulated delegates and their cards, a gateway
//! built and started on ephemeral loopback ports (in process, or as the real binary), one LDP
//! client, one ledger reader, one child-process helper, the external stores, and upstreams
//! that record what they are sent and answer fixed bytes (the golden tests').
//!
//! Library paths that other work may move are named here and nowhere else where possible
//! (`ldp_gateway::cluster` in [`stores`], the proxy's accessors in [`gateway`]).

pub mod anthropic;
pub mod cards;
pub mod client;
pub mod gateway;
pub mod ledger;
pub mod metrics;
pub mod openai;
pub mod process;
pub mod recorder;
pub mod redis_gate;
pub mod rogue;
pub mod stores;
mod toml;

pub use cards::{card, sim, Card};
pub use client::{Client, Events, Resp};
pub use gateway::TestGateway;

use std::future::Future;
use std::time::Duration;

/// Polls `check` every 20 ms until it is true or `within` passes; the last answer.
pub async fn eventually(within: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + within;
    while tokio::time::Instant::now() < deadline {
        if check() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    check()
}

/// [`eventually`] for a check that has to await (an HTTP call).
pub async fn eventually_async<F: Future<Output = bool>>(
    within: Duration,
    mut check: impl FnMut() -> F,
) -> bool {
    let deadline = tokio::time::Instant::now() + within;
    while tokio::time::Instant::now() < deadline {
        if check().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    check().await
}

/// A unique name (keys, secrets, environment variables).
pub fn unique(prefix: &str) -> String {
    format!("{prefix}_{}", uuid::Uuid::new_v4().simple())
}

/// A policies directory holding the given `(file, toml)` pairs; removed when dropped.
pub fn policy_dir(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("policy dir");
    for (name, text) in files {
        std::fs::write(dir.path().join(name), text).expect("write policy");
    }
    dir
}

/// Whether `needle` occurs in `haystack`.
pub fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}
