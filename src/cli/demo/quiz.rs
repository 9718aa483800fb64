//! The quiz: learned quality against a card that lies. Quiz tasks carry their expected answer
//! (read only by the simulated delegates); the same tasks go through the gateway in batches,
//! first under the `unverified` policy (the cards taken at their word), then under `verified`
//! (the same plus `[verify]`). After each batch, the liar's quality as routing blends it (the
//! registry's, as `GET /admin/route` shows it) and what the ledger charged for the batch.

use super::fleet::{QUIZ, QUIZ_LIAR, QUIZ_SKILL};
use super::report::{QualityRow, QuizBatch};
use super::traffic::{self, Target, Task};
use ldp_gateway::ldp::IdentityCard;
use ldp_gateway::provenance::{LedgerRow, Query};
use ldp_gateway::server::Gateway;
use ldp_gateway::upstream::UpstreamClient;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The demo's own policies (beside the shipped ones in its temporary policy directory): the
/// quiz's, without and with `[verify]`.
pub const POLICIES: [(&str, &str); 2] = [
    ("unverified", include_str!("policies/unverified.toml")),
    ("verified", include_str!("policies/verified.toml")),
];

/// The calibration reference the `verified` policy names (`calibration/quiz.jsonl` beside it).
pub const REFERENCE: (&str, &str) = (
    "calibration/quiz.jsonl",
    include_str!("policies/calibration/quiz.jsonl"),
);

/// The policy that trusts the cards.
pub const UNVERIFIED: &str = "unverified";
/// The policy that verifies a sample of the results.
pub const VERIFIED: &str = "verified";

/// Tasks per batch: the liar's quality is read after each.
pub const BATCH: usize = 20;

/// One policy's run of the quiz.
pub struct Phase {
    /// The policy.
    pub policy: &'static str,
    /// Its batches, in order.
    pub batches: Vec<QuizBatch>,
    /// How long it took.
    pub took: Duration,
}

/// Sends `n` quiz tasks under `unverified`, then the same under `verified`, in batches of
/// [`BATCH`] with `concurrency` in flight. The unverified run goes first: learned quality is
/// the gateway's, not a policy's, so verified evidence would otherwise reach it too.
pub async fn run(gateway: &Gateway, n: usize, concurrency: usize) -> (Phase, Phase) {
    let client = UpstreamClient::new(
        "ldp:client:demo-quiz",
        Duration::from_secs(2),
        Duration::from_secs(10),
    );
    let card = Arc::new(gateway.proxy().identity_card(Some(gateway.ldp_url())));
    let tasks = traffic::quiz_tasks(n);
    let unverified = phase(gateway, &client, &card, UNVERIFIED, &tasks, concurrency).await;
    let verified = phase(gateway, &client, &card, VERIFIED, &tasks, concurrency).await;
    (unverified, verified)
}

/// One policy's batches.
async fn phase(
    gateway: &Gateway,
    client: &UpstreamClient,
    card: &Arc<IdentityCard>,
    policy: &'static str,
    tasks: &[Task],
    concurrency: usize,
) -> Phase {
    let started = Instant::now();
    let target = Target::Gateway {
        url: gateway.ldp_url(),
        card: card.clone(),
        policy: policy.to_owned(),
    };
    let ledger = gateway.ledger();
    let registry = gateway.registry();
    // Ledger rows already counted (a batch's rows are read by time; the clock's ms may be
    // shared with the batch before).
    let mut seen: HashSet<String> = HashSet::new();
    let mut batches = Vec::new();
    for (i, chunk) in tasks.chunks(BATCH).enumerate() {
        let since_ms = chrono::Utc::now().timestamp_millis();
        let chunk = Arc::new(chunk.to_vec());
        let outcomes = traffic::drive(client, &target, &chunk, concurrency).await;
        let q = Query {
            since_ms: Some(since_ms),
            limit: Some(10_000),
            ..Query::default()
        };
        let rows = match ledger.query(q).await {
            Ok(rows) => rows,
            Err(e) => {
                tracing::warn!(error = %e, "the demo could not read the quiz's ledger rows");
                Vec::new()
            }
        };
        let charged = rows
            .iter()
            .filter(|r| r.policy.as_deref() == Some(policy) && r.skill == QUIZ_SKILL)
            .filter(|r| seen.insert(r.task_id.clone()))
            .map(charged);
        let liar = registry.quality_of(QUIZ_LIAR, QUIZ_SKILL);
        let mut batch = QuizBatch::new(
            i * BATCH,
            &outcomes,
            charged,
            QUIZ_LIAR,
            liar.as_ref().and_then(|q| q.blended),
            liar.as_ref()
                .and_then(|q| q.observed)
                .map_or(0.0, |o| o.count),
        );
        batch.liar_plausible = liar.as_ref().and_then(|q| q.plausible);
        batches.push(batch);
    }
    Phase {
        policy,
        batches,
        took: started.elapsed(),
    }
}

/// A ledger row's cost and whether its answer passed verification.
fn charged(row: &LedgerRow) -> (f64, bool) {
    let verified = row.verification_status.as_deref() == Some("peer_verified");
    (row.cost_usd.unwrap_or(0.0), verified)
}

/// Every quiz delegate's quality at its skill now, in fleet order.
pub fn quality_rows(gateway: &Gateway) -> Vec<QualityRow> {
    let registry = gateway.registry();
    QUIZ.iter()
        .map(|q| {
            let view = registry.quality_of(q.name, q.skill());
            QualityRow {
                delegate: q.name.to_owned(),
                skill: q.skill().to_owned(),
                declared: view.as_ref().and_then(|v| v.declared),
                accuracy: q.accuracy,
                observed: view
                    .as_ref()
                    .and_then(|v| v.observed)
                    .map(|o| (o.mean, o.count)),
                blended: view.as_ref().and_then(|v| v.blended),
                plausible: view.as_ref().and_then(|v| v.plausible),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use ldp_gateway::policy::{load_dir, parse_str};

    #[test]
    fn the_two_policies_differ_only_by_verify_and_match() {
        let [(u_name, u_text), (v_name, v_text)] = POLICIES;
        let u = parse_str("unverified.toml", u_text).unwrap();
        let v = parse_str("verified.toml", v_text).unwrap();
        assert_eq!((u.name.0.as_str(), v.name.0.as_str()), (u_name, v_name));
        assert_eq!((u_name, v_name), (UNVERIFIED, VERIFIED));
        assert_eq!(u.require, v.require);
        assert_eq!(u.weights, v.weights);
        assert_eq!(
            (u.tolerance, u.max_attempts, &u.limits),
            (v.tolerance, v.max_attempts, &v.limits)
        );
        assert_eq!(u.require.min_quality, Some(0.8));
        assert!(v.weights.cost > v.weights.quality + v.weights.latency);
        assert_eq!((&u.verify, &u.matcher), (&None, &None));
        let verify = v.verify.as_ref().unwrap();
        assert_eq!(verify.skill, super::super::fleet::VERIFY_SKILL);
        assert_eq!((verify.verifiers, verify.sample), (2, 0.2));
        assert!(verify.independent);
        // Its [match] claims the quiz skill and nothing the rest of the demo sends.
        let m = v.matcher.as_ref().unwrap();
        assert!(m.skills.iter().any(|g| g.matches(QUIZ_SKILL)));
        for skill in traffic::SKILLS {
            assert!(!m.skills.iter().any(|g| g.matches(skill)), "{skill}");
        }
    }

    #[test]
    fn the_demo_policy_directory_compiles_as_a_whole() {
        // What the demo writes: the shipped policies and its own, with the demo's default.
        let dir = std::env::temp_dir().join(format!(
            "ldp-gateway-demo-policies-test-{}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        for (name, text) in super::super::POLICIES.iter().chain(POLICIES.iter()) {
            std::fs::write(dir.join(format!("{name}.toml")), text).unwrap();
        }
        let set = load_dir(&dir, "balanced");
        std::fs::remove_dir_all(&dir).unwrap();
        let set = set.unwrap_or_else(|ps| panic!("{ps:#?}"));
        assert!(set.get(UNVERIFIED).is_some() && set.get(VERIFIED).is_some());
        // A quiz task naming no policy is verified; the rest of the demo's traffic is not.
        let (quiz, _) = set.select(None, None, QUIZ_SKILL, "anonymous").unwrap();
        assert_eq!(quiz.name.0, VERIFIED);
        for skill in traffic::SKILLS {
            let (p, _) = set.select(None, None, skill, "anonymous").unwrap();
            assert_ne!(p.name.0, VERIFIED, "{skill}");
        }
    }

    #[test]
    fn the_quiz_reference_reads_and_is_half_wrong() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("quiz.jsonl");
        std::fs::write(&file, REFERENCE.1).unwrap();
        let items = ldp_gateway::proxy::load_reference(&file).unwrap();
        assert_eq!(items.len(), 12);
        assert_eq!(items.iter().filter(|i| i.correct).count(), 6);
        assert!(items.iter().all(|i| i.skill == QUIZ_SKILL));
        let v = parse_str("verified.toml", POLICIES[1].1)
            .unwrap()
            .verify
            .unwrap();
        let cal = v.calibration.unwrap();
        assert!(cal.reference.ends_with(REFERENCE.0), "{:?}", cal.reference);
    }
}
