//! `[provenance]`: the ledger's store, durability, retention and queue (used by
//! `provenance`, which re-exports [`Durability`] and [`is_postgres`]).

use super::checks::Checks;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// `[provenance]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProvenanceConfig {
    /// Store URL: `sqlite://PATH` (relative to the working directory), `sqlite:///ABS`,
    /// `sqlite::memory:`, or `postgres://user[:password]@host:port/db` (cluster mode).
    pub store: String,
    /// `commit` (answer after the row commits), `fsync` (and power-loss safe), `async`.
    pub durability: Durability,
    /// Store redacted previews of inputs and outputs.
    pub store_payloads: bool,
    /// Rows older than this are pruned in the background.
    #[serde(with = "humantime_serde")]
    pub retention: Duration,
    /// How often retention runs.
    #[serde(with = "humantime_serde")]
    pub prune_every: Duration,
    /// Rows the writer's queue holds before `commit` waits (back-pressure) or `async` drops.
    pub queue_capacity: usize,
    /// Reported and declared cost disagreeing by more than this factor count as a discrepancy.
    pub cost_discrepancy_ratio: f64,
}

impl Default for ProvenanceConfig {
    fn default() -> Self {
        ProvenanceConfig {
            store: "sqlite://data/provenance.db".into(),
            durability: Durability::Commit,
            store_payloads: false,
            retention: Duration::from_secs(30 * 24 * 3600),
            prune_every: Duration::from_secs(3600),
            queue_capacity: 10_000,
            cost_discrepancy_ratio: 2.0,
        }
    }
}

/// How hard the ledger tries not to lose a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Durability {
    /// Answer after commit (process-crash safe).
    #[default]
    Commit,
    /// Answer after an fsync'd commit (power-loss safe).
    Fsync,
    /// Answer at once; rows may be lost.
    Async,
}

/// Whether `store` names a Postgres ledger.
pub fn is_postgres(store: &str) -> bool {
    store.starts_with("postgres://") || store.starts_with("postgresql://")
}

impl ProvenanceConfig {
    /// The ledger writer's values; the store URL is [`ProvenanceConfig::check_store`]'s.
    pub(super) fn check(&self, c: &mut Checks) {
        c.at_least("provenance.queue_capacity", self.queue_capacity, 1);
        if !(self.cost_discrepancy_ratio.is_finite() && self.cost_discrepancy_ratio >= 1.0) {
            c.push(
                "provenance.cost_discrepancy_ratio",
                format!("must be at least 1, got {}", self.cost_discrepancy_ratio),
            );
        }
        c.positive("provenance.prune_every", self.prune_every);
        c.positive("provenance.retention", self.retention);
    }

    /// The store URL: a scheme the ledger opens, reported with its password redacted.
    pub(super) fn check_store(&self, c: &mut Checks) {
        if !self.store.starts_with("sqlite:") && !is_postgres(&self.store) {
            c.push(
                "provenance.store",
                format!(
                    "unsupported store '{}' (use sqlite://PATH or postgres://…)",
                    crate::secret::redact_url(&self.store)
                ),
            );
        }
    }
}
