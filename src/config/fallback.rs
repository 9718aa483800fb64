//! `[fallback]`: the retry budget, how much extra load failover may add.

use super::checks::Checks;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// `[fallback]`: how much extra load failover may add.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FallbackConfig {
    /// Retries allowed as a fraction of recent tasks.
    pub retry_ratio: f64,
    /// Retries always allowed per window, however few tasks there were.
    pub retry_floor: u32,
    /// The window the budget counts over.
    #[serde(with = "humantime_serde")]
    pub window: Duration,
}

impl Default for FallbackConfig {
    fn default() -> Self {
        FallbackConfig {
            retry_ratio: 0.2,
            retry_floor: 10,
            window: Duration::from_secs(10),
        }
    }
}

impl FallbackConfig {
    pub(super) fn check(&self, c: &mut Checks) {
        if !(self.retry_ratio.is_finite() && (0.0..=1000.0).contains(&self.retry_ratio)) {
            c.push(
                "fallback.retry_ratio",
                format!("must be between 0 and 1000, got {}", self.retry_ratio),
            );
        }
        c.positive("fallback.window", self.window);
    }
}
