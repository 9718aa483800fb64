//! Client feedback on a task: one rating per (tenant, task id), kept in a table beside the
//! ledger rows.
//!
//! Why a table of its own rather than columns on the task's row: ledger rows are appended in
//! group commits and never updated (an UPDATE would have to find the row, and SQLite's ledger
//! has no task-id index); the table's primary key (task id, tenant) makes "one rating per
//! task" the database's rule, so two replicas rating the same task at once cannot both
//! succeed; and a client may reuse a task id, leaving several rows, while the rating belongs
//! to the task id once. Task ids are the clients' own, so two tenants may share one: the key
//! carries the tenant. The rated row's delegate and skill are copied in, so the learned
//! quality can be rebuilt from this table alone.

use serde::Serialize;

/// How the client gave its rating; the `outcome` stored and the label of
/// `ldp_gateway_feedback_total{outcome}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Given {
    /// `"outcome": "good"` (score 1).
    Good,
    /// `"outcome": "bad"` (score 0).
    Bad,
    /// `"score": 0..1`.
    Score,
}

impl Given {
    /// Every value, for metrics pre-registered at zero.
    pub const ALL: [Given; 3] = [Given::Good, Given::Bad, Given::Score];

    /// The stored and exported value.
    pub fn as_str(self) -> &'static str {
        match self {
            Given::Good => "good",
            Given::Bad => "bad",
            Given::Score => "score",
        }
    }

    /// Reads a stored value (anything else reads as `score`: the score column is the truth).
    pub fn parse(s: &str) -> Given {
        match s {
            "good" => Given::Good,
            "bad" => Given::Bad,
            _ => Given::Score,
        }
    }
}

/// One stored rating.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Feedback {
    /// The client's task id.
    pub task_id: String,
    /// The tenant that ran the task and rated it.
    pub tenant: String,
    /// 0 (bad) … 1 (good).
    pub score: f64,
    /// How the rating was given.
    pub outcome: Given,
    /// The delegate that answered the task (none when it failed before one did).
    pub delegate: Option<String>,
    /// The task's skill.
    pub skill: String,
    /// When it was rated, RFC 3339.
    pub created_at: String,
    /// When it was rated, Unix ms (pruned with the ledger's retention).
    pub created_ms: i64,
}

/// What the ledger knows of a task a tenant rates: its newest row's delegate and skill.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RatedTask {
    /// The delegate that answered last (none when the task failed before any did).
    pub delegate: Option<String>,
    /// The skill.
    pub skill: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_metric_labels_are_the_stored_values() {
        let stored = Given::ALL.map(Given::as_str);
        assert_eq!(stored, crate::telemetry::FEEDBACK_OUTCOMES);
        for g in Given::ALL {
            assert_eq!(Given::parse(g.as_str()), g);
        }
    }
}
