//! Quality evidence read back from the ledger: verifiers' votes (the `votes` table, written
//! with their task's row) and clients' ratings (the `feedback` table), so that learned
//! quality can be rebuilt after a restart.
//!
//! Why votes have a table of their own: a verified task has several (one per verifier and
//! round), and rebuilding quality reads them by time across all tasks, through the table's
//! time index, without reading ledger rows. Each vote carries its task's id, tenant and the
//! row's `finished_ms` (its `created_ms`), so the row's votes can be found again, and it is
//! pruned with its row.
//!
//! A round of votes is one observation of the producer: each vote counts for its share of the
//! round's weight (a window over (task, tenant, round, time) in the query), as when it was
//! learnt live (`proxy/pipeline/verification.rs`). Both backends read the newest `limit` votes and the newest `limit` ratings that name a
//! delegate, each oldest first, and [`merge`] them.

use super::{Evidence, EvidenceSource, LedgerRow};

/// A vote on `producer`'s work at `skill`, cast at `at_ms`; `weight` is its share of its
/// round's total weight (the backends compute it), so a round counts as one observation.
pub(super) fn of_vote(
    producer: String,
    skill: String,
    passed: bool,
    weight: f64,
    at_ms: i64,
) -> Evidence {
    Evidence {
        delegate: producer,
        skill,
        score: if passed { 1.0 } else { 0.0 },
        weight,
        at_ms,
        source: EvidenceSource::Vote,
        rater: None,
    }
}

/// `tenant`'s rating of `delegate`'s work at `skill`, given at `at_ms`.
pub(super) fn of_rating(
    delegate: String,
    skill: String,
    score: f64,
    at_ms: i64,
    tenant: String,
) -> Evidence {
    Evidence {
        delegate,
        skill,
        score,
        weight: 1.0,
        at_ms,
        source: EvidenceSource::Feedback,
        rater: Some(tenant),
    }
}

/// Votes and ratings, each read newest first, as one list oldest first (at the same
/// millisecond: votes, then ratings, each in the order stored).
pub(super) fn merge(mut votes: Vec<Evidence>, mut ratings: Vec<Evidence>) -> Vec<Evidence> {
    votes.reverse();
    ratings.reverse();
    votes.append(&mut ratings);
    // Stable: each part is in order already.
    votes.sort_by_key(|e| e.at_ms);
    votes
}

/// Whether any row of a batch has votes (a batch without any writes no vote statement).
pub(super) fn any_votes(rows: &[LedgerRow]) -> bool {
    rows.iter().any(|r| !r.votes.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(at_ms: i64, source: EvidenceSource, delegate: &str) -> Evidence {
        Evidence {
            delegate: delegate.into(),
            skill: "echo".into(),
            score: 1.0,
            weight: 1.0,
            at_ms,
            source,
            rater: None,
        }
    }

    #[test]
    fn merged_evidence_is_oldest_first_votes_before_ratings() {
        use EvidenceSource::{Feedback, Vote};
        // As read: newest first.
        let votes = vec![e(5, Vote, "b"), e(3, Vote, "a2"), e(3, Vote, "a1")];
        let ratings = vec![e(4, Feedback, "r2"), e(3, Feedback, "r1")];
        let order: Vec<String> = merge(votes, ratings)
            .into_iter()
            .map(|e| e.delegate)
            .collect();
        assert_eq!(order, ["a1", "a2", "r1", "r2", "b"]);
    }
}
