//! `[discovery]`: how the delegates' cards are polled and how large they may be.

use super::checks::Checks;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// `[discovery]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DiscoveryConfig {
    /// How often every card is re-fetched.
    #[serde(with = "humantime_serde")]
    pub poll_interval: Duration,
    /// Deadline of one card fetch.
    #[serde(with = "humantime_serde")]
    pub fetch_timeout: Duration,
    /// Largest card read; a larger one is refused (the delegate is down until it shrinks).
    pub max_card_bytes: usize,
    /// Most capabilities a card may list; a card with more is refused.
    pub max_capabilities: usize,
    /// Most card fetches in flight at once during a poll.
    pub concurrency: usize,
}

impl Default for DiscoveryConfig {
    fn default() -> Self {
        DiscoveryConfig {
            poll_interval: Duration::from_secs(10),
            fetch_timeout: Duration::from_secs(2),
            max_card_bytes: 1024 * 1024,
            max_capabilities: 1024,
            concurrency: 16,
        }
    }
}

impl DiscoveryConfig {
    pub(super) fn check(&self, c: &mut Checks) {
        c.positive("discovery.poll_interval", self.poll_interval);
        c.positive("discovery.fetch_timeout", self.fetch_timeout);
        c.at_least("discovery.max_card_bytes", self.max_card_bytes, 1024);
        c.at_least("discovery.max_capabilities", self.max_capabilities, 1);
        c.at_least("discovery.concurrency", self.concurrency, 1);
    }
}
