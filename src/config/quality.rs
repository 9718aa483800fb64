//! `[quality]`: how learned quality (verifier votes and client ratings) fades, is rebuilt
//! from the ledger and shared between replicas.

use super::checks::Checks;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// `[quality]`: learned quality.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct QualityConfig {
    /// Evidence halves in weight every `half_life`, so a delegate that improved can recover
    /// (its declared quality counts again as old evidence fades).
    #[serde(with = "humantime_serde")]
    pub half_life: Duration,
    /// How often a replica re-reads the evidence every replica wrote to the shared ledger
    /// (cluster mode, a Postgres ledger; a single node applies its own at once).
    #[serde(with = "humantime_serde")]
    pub refresh: Duration,
    /// Most votes, most ratings and most calibration rounds, each, read from the ledger when
    /// estimates are rebuilt (at start and at each refresh): the newest ones within eight
    /// half-lives.
    pub max_evidence: u32,
}

impl Default for QualityConfig {
    fn default() -> Self {
        QualityConfig {
            half_life: Duration::from_secs(3600),
            refresh: Duration::from_secs(10),
            max_evidence: 100_000,
        }
    }
}

impl QualityConfig {
    pub(super) fn check(&self, c: &mut Checks) {
        c.at_least_duration("quality.half_life", self.half_life, Duration::from_secs(1));
        c.at_least_duration("quality.refresh", self.refresh, Duration::from_millis(100));
        c.at_least("quality.max_evidence", self.max_evidence as usize, 1);
        if self.max_evidence > 10_000_000 {
            c.push(
                "quality.max_evidence",
                format!("must be at most 10000000, got {}", self.max_evidence),
            );
        }
    }

    /// From when (Unix ms) a rebuild at `now_ms` reads evidence: eight half-lives back (older
    /// evidence weighs under 0.4%).
    pub fn since_ms(&self, now_ms: i64) -> i64 {
        let horizon = self.half_life.saturating_mul(8).as_millis();
        now_ms.saturating_sub(i64::try_from(horizon).unwrap_or(i64::MAX))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unusable_values_are_named() {
        let mut c = Checks::default();
        QualityConfig {
            half_life: Duration::ZERO,
            refresh: Duration::from_millis(1),
            max_evidence: 0,
        }
        .check(&mut c);
        let keys: Vec<&str> = c.out.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            keys,
            [
                "quality.half_life",
                "quality.refresh",
                "quality.max_evidence"
            ]
        );
        let mut c = Checks::default();
        QualityConfig::default().check(&mut c);
        assert!(c.out.is_empty(), "{:?}", c.out);
    }
}
