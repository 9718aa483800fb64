//! `[cluster]`: the Redis shared by every replica, when there are several.

use super::checks::Checks;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// `[cluster]`: without `redis_url` the gateway is a single node with its embedded state.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClusterConfig {
    /// `redis://[:password@]host:port[/db]`: rate limits, budgets, client sessions and replay
    /// nonces shared by every replica.
    pub redis_url: Option<String>,
    /// Prefix of every key the gateway writes (several gateways may share one Redis).
    pub key_prefix: String,
    /// Deadline of every Redis call.
    #[serde(with = "humantime_serde")]
    pub redis_timeout: Duration,
    /// Replicas sharing the limits: while Redis is unreachable, each replica admits
    /// limit ÷ replicas locally.
    pub replicas: u32,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            redis_url: None,
            key_prefix: "ldp".into(),
            redis_timeout: Duration::from_millis(50),
            replicas: 1,
        }
    }
}

impl ClusterConfig {
    pub(super) fn check(&self, c: &mut Checks) {
        if let Some(url) = &self.redis_url {
            if !url.starts_with("redis://") {
                c.push(
                    "cluster.redis_url",
                    format!(
                        "must start with redis://, got '{}'",
                        crate::secret::redact_url(url)
                    ),
                );
            }
        }
        c.at_least("cluster.replicas", self.replicas as usize, 1);
        c.positive("cluster.redis_timeout", self.redis_timeout);
        if self.key_prefix.is_empty() || self.key_prefix.contains(char::is_whitespace) {
            c.push("cluster.key_prefix", "must be non-empty, without spaces");
        }
    }
}
