//! `[sessions]`: client session lifetimes and their sweep.

use super::checks::Checks;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// `[sessions]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SessionsConfig {
    /// Idle TTL when the proposal names none (RFC default 3600 s).
    #[serde(with = "humantime_serde")]
    pub default_ttl: Duration,
    /// Ceiling on any proposed TTL.
    #[serde(with = "humantime_serde")]
    pub max_ttl: Duration,
    /// How often expired sessions are swept (and their upstream sessions closed).
    #[serde(with = "humantime_serde")]
    pub sweep_interval: Duration,
}

impl Default for SessionsConfig {
    fn default() -> Self {
        SessionsConfig {
            default_ttl: Duration::from_secs(3600),
            max_ttl: Duration::from_secs(24 * 3600),
            sweep_interval: Duration::from_secs(1),
        }
    }
}

impl SessionsConfig {
    pub(super) fn check(&self, c: &mut Checks) {
        c.at_least_duration(
            "sessions.default_ttl",
            self.default_ttl,
            Duration::from_secs(1),
        );
        c.at_least_duration("sessions.max_ttl", self.max_ttl, Duration::from_secs(1));
        c.no_longer(
            ("sessions.default_ttl", self.default_ttl),
            ("sessions.max_ttl", self.max_ttl),
        );
        c.positive("sessions.sweep_interval", self.sweep_interval);
    }
}
