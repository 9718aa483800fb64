//! Learning, round two: verifiers are judged (calibration rounds against a reference, their
//! reliability the weight of their votes, a floor under which they are not chosen), the
//! unknown is explored, a producer pushed out by evidence gets probation, and a skill whose
//! every producer evidence excludes keeps answering, verified. Real gateways, simulated
//! delegates on loopback sockets.

use crate::support::{eventually_async, TestGateway};
use crate::verify::{card, producer, question, verifier};
use ldp_gateway::provenance::LedgerRow;
use ldp_gateway::sim::SimOptions;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(60);

/// The reference shipped with the policies: twelve `qa` items, half of them wrong.
pub(crate) fn shipped_reference() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("policies/calibration/qa.jsonl")
}

/// A verifier that passes everything, claiming 0.9 at 0.0001 USD a call.
pub(crate) fn rubber_stamp(id: &str, family: &str) -> SimOptions {
    SimOptions {
        accuracy: Some(0.9),
        rubber_stamp: true,
        ..SimOptions::new(card(id, family, &[("verify", 0.9, 0.0001)]))
    }
}

/// One `qa` task in `session`: (task id, answered right, verification status).
async fn ask(c: &crate::support::Client, session: &str, i: usize) -> (String, bool, String) {
    let body = c.task(session, "qa", question(i), "text").await;
    let right = body["type"] == "TASK_RESULT" && body["output"]["answer"] == json!(i * 2);
    let status = body["provenance"]["verification_status"]
        .as_str()
        .unwrap_or("")
        .to_owned();
    (body["task_id"].as_str().unwrap().to_owned(), right, status)
}

/// `ldp_gateway_verifier_reliability{delegate, skill="verify"}` now.
pub(crate) async fn reliability(gw: &TestGateway, delegate: &str) -> Option<f64> {
    let scrape = gw.metrics().await;
    let series =
        format!("ldp_gateway_verifier_reliability{{delegate=\"{delegate}\",skill=\"verify\"}}");
    let value = scrape
        .samples()
        .find_map(|l| l.strip_prefix(series.as_str()))
        .and_then(|v| v.trim().parse().ok());
    value
}

/// The calibration rows of `delegate` (tenant-less rows whose task id says so).
pub(crate) async fn calibration_rows(gw: &TestGateway, delegate: &str) -> Vec<LedgerRow> {
    gw.ledger(&format!("delegate={delegate}&limit=1000"))
        .await
        .into_iter()
        .filter(|r| r.task_id.starts_with("calibration-"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rubber_stamp_verifier_loses_its_weight_to_calibration() {
    // d0 the cheap liar (right half the time, claims 0.95), d1 an honest dearer producer;
    // d2 a rubber stamp, the cheapest verifier; d3 an honest verifier, ten times dearer.
    let dir = tempfile::tempdir().unwrap();
    let reference = dir.path().join("reference.jsonl");
    let policy = format!(
        "name = \"verified\"\n[require]\nmin_quality = 0.8\n\
         [weights]\nquality = 0.2\ncost = 0.8\nlatency = 0.0\n\
         [verify]\nverifiers = 1\nsample = 1.0\nmax_rounds = 3\nmin_reliability = 0.6\n\
         [verify.calibration]\nreference = {:?}\nevery = \"1s\"\nitems = 12\n",
        reference.display().to_string()
    );
    let honest_judge = SimOptions {
        card: card("v-judge", "gamma", &[("verify", 0.9, 0.001)]),
        ..verifier("v-judge", "gamma", 1.0)
    };
    let gw = TestGateway::builder()
        .sim(producer("p-liar", "alpha", 0.95, 0.001, 0.5))
        .sim(producer("p-honest", "delta", 0.9, 0.01, 1.0))
        .sim(rubber_stamp("v-stamp", "beta"))
        .sim(honest_judge)
        .policy("verified.toml", &policy)
        .config(|c| {
            c.policies.default = "verified".into();
            c.routing.explore = 0.0;
        })
        .spawn()
        .await;
    let c = gw.client();
    let s = c.accepted(json!({"payload_mode": "text"})).await;

    // Phase 1: no reference yet (its rounds are skipped): the stamp, the cheapest, judges
    // every task, and the liar's wrong answers go out labelled as verified.
    let mut stamped_wrong = 0;
    for i in 0..30 {
        let (id, right, status) = ask(&c, &s, i).await;
        let row = gw.ledger_row(&id).await;
        assert!(
            row.votes.iter().all(|v| v.verifier == "d2"),
            "{:?}",
            row.votes
        );
        stamped_wrong += usize::from(!right && status == "peer_verified");
    }
    assert!(
        stamped_wrong > 0,
        "a rubber stamp lets wrong answers through"
    );

    // The reference arrives: the next round scores the stamp as a coin (0.5), under the
    // floor, and the honest judge near 1.
    std::fs::copy(shipped_reference(), &reference).unwrap();
    let fell = eventually_async(WAIT, || async {
        reliability(&gw, "d2").await.is_some_and(|r| r < 0.6)
            && reliability(&gw, "d3").await.is_some_and(|r| r > 0.9)
    })
    .await;
    assert!(
        fell,
        "the stamp's reliability: {:?}",
        reliability(&gw, "d2").await
    );
    let rows = calibration_rows(&gw, "d2").await;
    let round = rows.first().expect("a calibration row for the stamp");
    assert_eq!(round.tenant, "", "never charged to a tenant");
    assert!(round.cost_usd.unwrap() > 0.0, "costed: {round:?}");
    let cal = &round.routing.to_value()["calibration"];
    assert_eq!(cal["score"], json!(0.5), "{cal}");
    assert!(cal["adjustment"].as_f64().unwrap() < 0.0, "{cal}");
    assert!(cal["reference_source"]
        .as_str()
        .unwrap()
        .ends_with("reference.jsonl"));

    // Phase 2: the stamp is no longer chosen; what goes out verified is right.
    let mut delivered = Vec::new();
    for i in 100..160 {
        let (id, right, status) = ask(&c, &s, i).await;
        let row = gw.ledger_row(&id).await;
        assert!(
            row.votes.iter().all(|v| v.verifier == "d3"),
            "only the honest judge votes now: {:?}",
            row.votes
        );
        if status == "peer_verified" {
            delivered.push(right);
        }
    }
    let last = &delivered[delivered.len() / 3..];
    assert!(
        last.len() >= 10,
        "too few delivered verified to judge: {}",
        last.len()
    );
    let right = last.iter().filter(|r| **r).count();
    assert!(
        right * 100 >= last.len() * 95,
        "{right} of {} delivered verified results right",
        last.len()
    );
    gw.shutdown().await;
}

/// A card of skill `qa` at 0.9 and 0.01 USD that declares no latency.
fn silent_card(id: &str) -> ldp_gateway::ldp::IdentityCard {
    serde_json::from_value(json!({
        "delegate_id": format!("ldp:delegate:{id}"), "name": id, "model_family": id,
        "model_version": "sim-1", "trust_domain": {"name": "default"}, "endpoint": "",
        "capabilities": [{"name": "qa", "quality": {"quality_score": 0.9,
                          "cost_per_call_usd": 0.01}}],
        "supported_payload_modes": ["semantic_frame", "text"]
    }))
    .unwrap()
}

/// Tasks, each in a session of its own (every one a routing decision), that `d2` served.
async fn served_by_silent(explore: f64) -> usize {
    let gw = TestGateway::builder()
        .sim(producer("p-a", "alpha", 0.9, 0.01, 1.0))
        .sim(producer("p-b", "beta", 0.9, 0.01, 1.0))
        .sim(SimOptions::new(silent_card("p-silent")))
        .policy(
            "fast.toml",
            "name = \"fast\"\n[weights]\nquality = 0.0\ncost = 0.0\nlatency = 1.0\n",
        )
        .config(move |c| {
            c.policies.default = "fast".into();
            c.routing.explore = explore;
        })
        .spawn()
        .await;
    let c = gw.client();
    let mut served = 0;
    let mut trials = 0;
    for i in 0..120 {
        let s = c.accepted(json!({"payload_mode": "text"})).await;
        let body = c.task(&s, "qa", question(i), "text").await;
        assert_eq!(body["type"], "TASK_RESULT", "{body}");
        if body["provenance"]["produced_by"] == "ldp:delegate:p-silent" {
            served += 1;
            let row = gw.ledger_row(body["task_id"].as_str().unwrap()).await;
            trials += usize::from(row.routing.to_value()["trial"] == "exploring");
        }
    }
    if served > 0 {
        assert!(trials >= 1, "its first task is an exploration");
    }
    gw.shutdown().await;
    served
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_delegate_without_a_latency_claim_is_explored_only_when_explore_allows() {
    assert_eq!(served_by_silent(0.0).await, 0, "never tried at explore = 0");
    assert!(served_by_silent(0.25).await > 0, "tried at explore = 0.25");
}

/// Rates a task `bad` (the built-in tenant of a gateway without tenants is a trusted rater).
async fn rate_bad(c: &crate::support::Client, task_id: &str) {
    let r = c
        .post_json(
            "/ldp/feedback",
            &json!({"task_id": task_id, "outcome": "bad"}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
}

/// `qa` under min_quality 0.8, cost-heavy, with `[verify]` (`sample`), honest verifier d2.
fn probation_policy(sample: f64) -> String {
    format!(
        "name = \"verified\"\n[require]\nmin_quality = 0.8\n\
         [weights]\nquality = 0.2\ncost = 0.8\nlatency = 0.0\n\
         [verify]\nverifiers = 1\nsample = {sample}\nmax_rounds = 3\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_producer_wrongly_voted_down_regains_traffic_through_probation() {
    // d0 cheap and always right, d1 dearer and always right; d2 a verifier that always
    // misjudges (cheapest), d3 an honest one.
    let gw = TestGateway::builder()
        .sim(producer("p-cheap", "alpha", 0.9, 0.001, 1.0))
        .sim(producer("p-dear", "delta", 0.9, 0.01, 1.0))
        .sim(SimOptions {
            card: card("v-wrong", "beta", &[("verify", 0.9, 0.0001)]),
            ..verifier("v-wrong", "beta", 0.0)
        })
        .sim(SimOptions {
            card: card("v-judge", "gamma", &[("verify", 0.9, 0.001)]),
            ..verifier("v-judge", "gamma", 1.0)
        })
        .policy("verified.toml", &probation_policy(1.0))
        .config(|c| {
            c.policies.default = "verified".into();
            c.routing.explore = 0.3;
        })
        .spawn()
        .await;
    let c = gw.client();
    let admin = gw.admin();
    let s = c.accepted(json!({"payload_mode": "text"})).await;
    // Early: the cheap producer's right answers are voted down until evidence excludes it.
    let mut i = 0;
    let excluded = eventually_async(WAIT, || {
        i += 1;
        let (c, s, admin, i) = (&c, &s, &admin, i);
        async move {
            let _ = ask(c, s, i).await;
            let x = admin
                .get("/admin/route?skill=qa&policy=verified")
                .await
                .json;
            let row = x["delegates"]
                .as_array()
                .and_then(|ds| ds.iter().find(|d| d["delegate"] == "d0").cloned())
                .unwrap_or_default();
            row["trial"] == "probation"
        }
    })
    .await;
    let x = admin
        .get("/admin/route?skill=qa&policy=verified")
        .await
        .json;
    assert!(
        excluded,
        "the cheap producer is excluded by evidence, on probation: {x:#}"
    );
    // The misjudging verifier leaves; the honest one judges from now on. Each task in a
    // session of its own: a routing decision each (affinity keeps a session's producer).
    assert_eq!(admin.delete("/admin/delegates/d2").await.status, 204);
    let mut by_cheap = Vec::new();
    for i in 1000..1120 {
        let s = c.accepted(json!({"payload_mode": "text"})).await;
        let body = c.task(&s, "qa", question(i), "text").await;
        assert_eq!(body["type"], "TASK_RESULT", "{body}");
        by_cheap.push(body["provenance"]["produced_by"] == "ldp:delegate:p-cheap");
    }
    let late = by_cheap[80..].iter().filter(|b| **b).count();
    assert!(
        late >= 30,
        "the cheap producer won its traffic back: {late} of the last 40"
    );
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn with_every_producer_excluded_by_evidence_the_skill_answers_verified() {
    // d0, d1 always right; a fifth of the tasks sampled. Trusted ratings of tasks each ran
    // under a policy that admits it alone push both out.
    let only = |name: &str, family: &str| {
        format!("name = \"{name}\"\n[require]\nmodel_families = [\"{family}\"]\n")
    };
    let gw = TestGateway::builder()
        .sim(producer("p-a", "alpha", 0.9, 0.001, 1.0))
        .sim(producer("p-b", "delta", 0.9, 0.01, 1.0))
        .sim(verifier("v-judge", "gamma", 1.0))
        .policy("verified.toml", &probation_policy(0.2))
        .policy("only-a.toml", &only("only-a", "alpha"))
        .policy("only-b.toml", &only("only-b", "delta"))
        .config(|c| {
            c.policies.default = "verified".into();
            c.routing.explore = 0.0;
        })
        .spawn()
        .await;
    let c = gw.client();
    // A session bound to its producer before evidence excludes it.
    let bound = c.accepted(json!({"payload_mode": "text"})).await;
    let body = c.task(&bound, "qa", question(499), "text").await;
    assert_eq!(body["type"], "TASK_RESULT", "{body}");
    for policy in ["only-a", "only-b"] {
        let s = c
            .accepted(json!({"payload_mode": "text", "policy": policy}))
            .await;
        for i in 0..8 {
            let body = c.task(&s, "qa", question(i), "text").await;
            assert_eq!(body["type"], "TASK_RESULT", "{body}");
            rate_bad(&c, body["task_id"].as_str().unwrap()).await;
        }
    }
    // Both are excluded now: every task is still answered, each one verified, by the
    // best-evidenced producer on probation, in a new session and in the bound one.
    let s = c.accepted(json!({"payload_mode": "text"})).await;
    for i in 500..512 {
        let session = if i % 2 == 0 { &s } else { &bound };
        let body = c.task(session, "qa", question(i), "text").await;
        assert_eq!(body["type"], "TASK_RESULT", "{body}");
        assert_eq!(
            body["provenance"]["verification_status"], "peer_verified",
            "{body}"
        );
        let row = gw.ledger_row(body["task_id"].as_str().unwrap()).await;
        let routing: Value = row.routing.to_value();
        assert_eq!(routing["trial"], "probation", "{routing}");
    }
    gw.shutdown().await;
}
