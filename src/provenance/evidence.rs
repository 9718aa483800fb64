//! Quality evidence read back from the ledger: verifiers' votes (the `votes` table, written
//! with their task's row), clients' ratings (the `feedback` table) and verifiers' calibration
//! rounds (their tenant-less `calibration-…` rows, `routing.calibration`), so that learned
//! quality and verifiers' reliability can be rebuilt after a restart and, on a shared ledger,
//! by every replica from the rounds any one of them ran.
//!
//! Why votes have a table of their own: a verified task has several (one per verifier and
//! round), and rebuilding quality reads them by time across all tasks, through the table's
//! time index, without reading ledger rows. Each vote carries its task's id, tenant and the
//! row's `finished_ms` (its `created_ms`), so the row's votes can be found again, and it is
//! pruned with its row.
//!
//! A round of votes is one observation of the producer: each vote counts for its share of the
//! round's weight (a window over (task, tenant, round, time) in the query), as when it was
//! learnt live (`proxy/pipeline/verification.rs`). Both backends read the newest `limit` votes, the newest `limit` ratings that name a
//! delegate and the newest `limit` calibration rows, and [`merge`] them oldest first.

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

/// The task ids of calibration rows start so (`proxy/calibrate.rs` writes them).
pub const CALIBRATION_TASK_PREFIX: &str = "calibration-";

/// The `LIKE` pattern of [`CALIBRATION_TASK_PREFIX`] (no `_` or `%` in it to escape).
pub(super) const CALIBRATION_TASK_LIKE: &str = "calibration-%";

/// What a calibration row's `routing` says of the round as evidence.
#[derive(serde::Deserialize)]
struct Routing {
    calibration: Round,
}

#[derive(serde::Deserialize)]
struct Round {
    /// The score as evidence (none from a round answered in one class only, and absent from
    /// rows written before calibration was evidence in the ledger).
    #[serde(default)]
    evidence: Option<f64>,
    answered: u32,
}

/// The calibration round of verifier `delegate` at verify skill `skill` that a ledger row
/// finished at `at_ms` records in its `routing` column, weighing one observation per item
/// answered (as it was learnt live); none when the round taught nothing.
pub(super) fn of_calibration(
    delegate: String,
    skill: String,
    routing: &str,
    at_ms: i64,
) -> Option<Evidence> {
    let Routing { calibration } = serde_json::from_str(routing).ok()?;
    Some(Evidence {
        delegate,
        skill,
        score: calibration.evidence?,
        weight: f64::from(calibration.answered),
        at_ms,
        source: EvidenceSource::Calibration,
        rater: None,
    })
}

/// Votes, ratings and calibration rounds, each read newest first, as one list oldest first
/// (at the same millisecond: votes, then ratings, then rounds, each in the order stored).
pub(super) fn merge(
    mut votes: Vec<Evidence>,
    mut ratings: Vec<Evidence>,
    mut rounds: Vec<Evidence>,
) -> Vec<Evidence> {
    votes.reverse();
    ratings.reverse();
    rounds.reverse();
    votes.append(&mut ratings);
    votes.append(&mut rounds);
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
    fn merged_evidence_is_oldest_first_votes_before_ratings_before_rounds() {
        use EvidenceSource::{Calibration, Feedback, Vote};
        // As read: newest first.
        let votes = vec![e(5, Vote, "b"), e(3, Vote, "a2"), e(3, Vote, "a1")];
        let ratings = vec![e(4, Feedback, "r2"), e(3, Feedback, "r1")];
        let rounds = vec![e(6, Calibration, "c2"), e(3, Calibration, "c1")];
        let order: Vec<String> = merge(votes, ratings, rounds)
            .into_iter()
            .map(|e| e.delegate)
            .collect();
        assert_eq!(order, ["a1", "a2", "r1", "c1", "r2", "b", "c2"]);
    }

    #[test]
    fn a_calibration_row_is_evidence_only_when_its_round_taught_something() {
        let of = |routing: &str| of_calibration("v".into(), "verify".into(), routing, 7);
        let taught =
            r#"{"policy":"p","calibration":{"round":2,"answered":6,"score":0.5,"evidence":0.5}}"#;
        let e = of(taught).unwrap();
        assert_eq!((e.score, e.weight, e.at_ms), (0.5, 6.0, 7));
        assert_eq!((e.source, e.rater), (EvidenceSource::Calibration, None));
        // One class only, a row from before rounds were evidence, not a round at all.
        let one_class = r#"{"calibration":{"answered":3,"score":1.0,"evidence":null}}"#;
        let older = r#"{"calibration":{"answered":3,"score":1.0}}"#;
        for routing in [one_class, older, "{}", "not json"] {
            assert_eq!(of(routing), None, "{routing}");
        }
    }
}
