//! `[task_status]`: how long and how much of recent task outcomes are kept for status queries.

use super::checks::Checks;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// `[task_status]`: the store that answers status queries (TASK_UPDATE `status_query`, the
/// reference Rust adapter's polling).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TaskStatusConfig {
    /// How long a task's entry is kept after its last change (admission, then its answer).
    #[serde(with = "humantime_serde")]
    pub ttl: Duration,
    /// Most bytes the entries may weigh together (each its whole answer: output, provenance,
    /// error, partial output);
    /// the least recently changed go first.
    pub max_bytes: u64,
}

impl Default for TaskStatusConfig {
    fn default() -> Self {
        TaskStatusConfig {
            ttl: Duration::from_secs(600),
            max_bytes: 64 * 1024 * 1024,
        }
    }
}

impl TaskStatusConfig {
    pub(super) fn check(&self, c: &mut Checks) {
        c.positive("task_status.ttl", self.ttl);
        let min = 64 * 1024;
        if self.max_bytes < min {
            c.push(
                "task_status.max_bytes",
                format!("must be at least {min}, got {}", self.max_bytes),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unusable_values_are_named() {
        let mut c = Checks::default();
        TaskStatusConfig {
            ttl: Duration::ZERO,
            max_bytes: 1000,
        }
        .check(&mut c);
        assert_eq!(
            c.out,
            [
                ("task_status.ttl".into(), "must be longer than 0s".into()),
                (
                    "task_status.max_bytes".into(),
                    "must be at least 65536, got 1000".into()
                ),
            ]
        );
        let mut c = Checks::default();
        TaskStatusConfig::default().check(&mut c);
        assert!(c.out.is_empty(), "{:?}", c.out);
    }
}
