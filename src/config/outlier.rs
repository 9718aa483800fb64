//! `[outlier]`: when a failing delegate is cut out and how it comes back (used by
//! `registry`, which re-exports it).

use super::checks::Checks;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// `[outlier]`: when a delegate is cut out and how it comes back.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OutlierConfig {
    /// Consecutive failures that eject.
    pub consecutive_failures: u32,
    /// Error rate over `window` that ejects (with at least `min_requests` in it).
    pub error_rate: f64,
    /// Requests needed in the window before the error rate counts.
    pub min_requests: u32,
    /// The rolling error window.
    #[serde(with = "humantime_serde")]
    pub window: Duration,
    /// First ejection period; each further ejection doubles it.
    #[serde(with = "humantime_serde")]
    pub base_ejection: Duration,
    /// Longest ejection period.
    #[serde(with = "humantime_serde")]
    pub max_ejection: Duration,
    /// After a successful probe, the share ramps from 10% to 100% over this.
    #[serde(with = "humantime_serde")]
    pub slow_start: Duration,
    /// Time constant of the latency EWMA: a sample this old weighs 1/e of a fresh one.
    #[serde(with = "humantime_serde")]
    pub latency_decay: Duration,
}

impl Default for OutlierConfig {
    fn default() -> Self {
        OutlierConfig {
            consecutive_failures: 5,
            error_rate: 0.5,
            min_requests: 10,
            window: Duration::from_secs(10),
            base_ejection: Duration::from_secs(5),
            max_ejection: Duration::from_secs(300),
            slow_start: Duration::from_secs(10),
            latency_decay: Duration::from_secs(10),
        }
    }
}

impl OutlierConfig {
    pub(super) fn check(&self, c: &mut Checks) {
        c.at_least(
            "outlier.consecutive_failures",
            self.consecutive_failures as usize,
            1,
        );
        if !(self.error_rate.is_finite() && self.error_rate > 0.0 && self.error_rate <= 1.0) {
            c.push(
                "outlier.error_rate",
                format!(
                    "must be greater than 0 and at most 1, got {}",
                    self.error_rate
                ),
            );
        }
        c.at_least("outlier.min_requests", self.min_requests as usize, 1);
        c.positive("outlier.window", self.window);
        c.positive("outlier.base_ejection", self.base_ejection);
        c.positive("outlier.max_ejection", self.max_ejection);
        c.no_longer(
            ("outlier.base_ejection", self.base_ejection),
            ("outlier.max_ejection", self.max_ejection),
        );
        c.bounded("outlier.slow_start", self.slow_start);
        c.positive("outlier.latency_decay", self.latency_decay);
    }
}
