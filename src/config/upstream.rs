//! `[upstream]`: deadlines of calls to delegates and the hop limit.

use super::checks::Checks;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// `[upstream]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct UpstreamConfig {
    /// TCP connect deadline.
    #[serde(with = "humantime_serde")]
    pub connect_timeout: Duration,
    /// Deadline of one upstream handshake message (HELLO, SESSION_PROPOSE, SESSION_CLOSE).
    #[serde(with = "humantime_serde")]
    pub handshake_timeout: Duration,
    /// Ceiling on one upstream task.
    #[serde(with = "humantime_serde")]
    pub task_timeout: Duration,
    /// Most gateways a task may pass through (the `x-ldp-hops` header counts them), so that
    /// gateways chained into a loop refuse the task instead of calling each other forever.
    pub max_hops: usize,
}

impl Default for UpstreamConfig {
    fn default() -> Self {
        UpstreamConfig {
            connect_timeout: Duration::from_secs(2),
            handshake_timeout: Duration::from_secs(5),
            task_timeout: Duration::from_secs(120),
            max_hops: 8,
        }
    }
}

impl UpstreamConfig {
    pub(super) fn check(&self, c: &mut Checks) {
        c.positive("upstream.connect_timeout", self.connect_timeout);
        c.positive("upstream.handshake_timeout", self.handshake_timeout);
        c.positive("upstream.task_timeout", self.task_timeout);
        c.at_least("upstream.max_hops", self.max_hops, 1);
    }
}
