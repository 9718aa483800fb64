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
    /// `commit` (answer once the row is in the journal), `fsync` (and the journal synced:
    /// power-loss safe), `async`.
    pub durability: Durability,
    /// Store redacted previews of inputs and outputs.
    pub store_payloads: bool,
    /// Rows older than this are pruned in the background.
    #[serde(with = "humantime_serde")]
    pub retention: Duration,
    /// How often retention runs.
    #[serde(with = "humantime_serde")]
    pub prune_every: Duration,
    /// Rows the writer's queue holds: under `commit`/`fsync` a full queue refuses rows once
    /// it stayed full for a second (the store is behind); `async` drops them.
    pub queue_capacity: usize,
    /// Most bytes the journal holds of rows the store lacks: at the limit rows are refused
    /// once the store did not catch up within a second.
    pub journal_max_bytes: u64,
    /// Reported and declared cost disagreeing by more than this factor count as a discrepancy.
    pub cost_discrepancy_ratio: f64,
    /// Folder of a Postgres ledger's journal (default `data`, relative to the working
    /// directory); a SQLite ledger's journal is next to its file.
    pub journal_dir: Option<String>,
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
            journal_max_bytes: DEFAULT_JOURNAL_MAX_BYTES,
            cost_discrepancy_ratio: 2.0,
            journal_dir: None,
        }
    }
}

/// How hard the ledger tries not to lose a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Durability {
    /// Answer once the row is written to the journal (process-crash safe); in memory, once
    /// committed.
    #[default]
    Commit,
    /// Answer once the row is written and `fdatasync`ed (power-loss safe).
    Fsync,
    /// Answer at once; rows may be lost.
    Async,
}

/// The journal's limit when none is configured: 64 MiB.
pub const DEFAULT_JOURNAL_MAX_BYTES: u64 = 64 << 20;

/// The smallest journal limit: a few dozen rows (a smaller one refuses rows under any load).
pub const MIN_JOURNAL_BYTES: u64 = 64 * 1024;

/// A Postgres ledger's journal folder when none is configured.
pub const DEFAULT_JOURNAL_DIR: &str = "data";

/// Whether `store` names a Postgres ledger.
pub fn is_postgres(store: &str) -> bool {
    store.starts_with("postgres://") || store.starts_with("postgresql://")
}

impl ProvenanceConfig {
    /// The ledger writer's values; the store URL is [`ProvenanceConfig::check_store`]'s.
    pub(super) fn check(&self, c: &mut Checks) {
        c.at_least("provenance.queue_capacity", self.queue_capacity, 1);
        if self.journal_max_bytes < MIN_JOURNAL_BYTES {
            c.push(
                "provenance.journal_max_bytes",
                format!(
                    "must be at least {MIN_JOURNAL_BYTES}, got {}",
                    self.journal_max_bytes
                ),
            );
        }
        if !(self.cost_discrepancy_ratio.is_finite() && self.cost_discrepancy_ratio >= 1.0) {
            c.push(
                "provenance.cost_discrepancy_ratio",
                format!("must be at least 1, got {}", self.cost_discrepancy_ratio),
            );
        }
        c.positive("provenance.prune_every", self.prune_every);
        c.positive("provenance.retention", self.retention);
    }

    /// The journal's folder ([`DEFAULT_JOURNAL_DIR`] when not set).
    pub fn journal_dir(&self) -> &str {
        self.journal_dir.as_deref().unwrap_or(DEFAULT_JOURNAL_DIR)
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
        match self.journal_dir.as_deref() {
            Some("") => c.push("provenance.journal_dir", "must not be empty".to_owned()),
            Some(_) if !is_postgres(&self.store) => c.push(
                "provenance.journal_dir",
                "applies to a postgres:// store only (a SQLite ledger's journal is next to \
                 its file)"
                    .to_owned(),
            ),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    #[test]
    fn journal_dir_is_for_postgres_and_not_empty() {
        let mut c = Config::default();
        c.provenance.journal_dir = Some("journals".into());
        assert_eq!(
            c.problems("f.toml"),
            [
                "f.toml: provenance.journal_dir: applies to a postgres:// store only (a SQLite \
              ledger's journal is next to its file)"
            ]
        );
        c.provenance.store = "postgres://ldp@127.0.0.1/ldp".into();
        assert!(c.problems("f.toml").is_empty());
        assert_eq!(c.provenance.journal_dir(), "journals");
        c.provenance.journal_dir = Some(String::new());
        assert_eq!(
            c.problems("f.toml"),
            ["f.toml: provenance.journal_dir: must not be empty"]
        );
        c.provenance.journal_dir = None;
        assert_eq!(c.provenance.journal_dir(), "data");
    }

    #[test]
    fn the_journal_limit_takes_a_few_dozen_rows_at_least() {
        let mut c = Config::default();
        assert_eq!(c.provenance.journal_max_bytes, 64 << 20);
        c.provenance.journal_max_bytes = 1000;
        assert_eq!(
            c.problems("f.toml"),
            ["f.toml: provenance.journal_max_bytes: must be at least 65536, got 1000"]
        );
        c.provenance.journal_max_bytes = super::MIN_JOURNAL_BYTES;
        assert!(c.problems("f.toml").is_empty());
    }
}
