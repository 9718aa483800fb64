//! A rate limit as configured (delegates, tenants); policies share its range rule.

use serde::{Deserialize, Serialize};

/// A rate: sustained requests per second and a burst.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateConfig {
    /// Sustained rate.
    pub rps: f64,
    /// Burst size (default: the rate rounded up).
    #[serde(default)]
    pub burst: Option<u32>,
}
