//! Verified results (`[verify]`): producers answer, independent verifiers vote, a result
//! voted down is routed again, and every vote is learnt as the producer's delivered quality.
//! Simulated producers and verifiers with known accuracy, over real loopback sockets.

use crate::support::{Client, TestGateway};
use ldp_gateway::ldp::IdentityCard;
use ldp_gateway::sim::SimOptions;
use serde_json::{json, Value};

/// A card: `skills` (name, declared quality, price per call), of `family`.
pub(crate) fn card(id: &str, family: &str, skills: &[(&str, f64, f64)]) -> IdentityCard {
    let caps: Vec<Value> = skills
        .iter()
        .map(|(name, q, price)| {
            json!({"name": name, "quality": {"quality_score": q, "cost_per_call_usd": price,
                   "latency_p50_ms": 5}})
        })
        .collect();
    serde_json::from_value(json!({
        "delegate_id": format!("ldp:delegate:{id}"), "name": id, "model_family": family,
        "model_version": "sim-1", "trust_domain": {"name": "default"}, "endpoint": "",
        "capabilities": caps, "supported_payload_modes": ["semantic_frame", "text"]
    }))
    .expect("test card")
}

/// A producer of `qa` answering right with probability `accuracy`.
pub(crate) fn producer(
    id: &str,
    family: &str,
    quality: f64,
    price: f64,
    accuracy: f64,
) -> SimOptions {
    SimOptions {
        accuracy: Some(accuracy),
        ..SimOptions::new(card(id, family, &[("qa", quality, price)]))
    }
}

/// A verifier (skill `verify`) judging right with probability `accuracy`.
pub(crate) fn verifier(id: &str, family: &str, accuracy: f64) -> SimOptions {
    SimOptions {
        accuracy: Some(accuracy),
        verifier: true,
        ..SimOptions::new(card(id, family, &[("verify", 0.9, 0.0001)]))
    }
}

/// A policy verifying every `qa` task with `verifiers` votes and `rounds` rounds.
pub(crate) fn policy(verifiers: u32, rounds: u32, sample: f64) -> String {
    format!(
        "name = \"verified\"\n[weights]\nquality = 0.2\ncost = 0.8\nlatency = 0.0\n\
         [fallback]\nmax_attempts = 3\n\
         [verify]\nverifiers = {verifiers}\nmax_rounds = {rounds}\nsample = {sample}\n"
    )
}

/// A question whose right answer is `2i`.
pub(crate) fn question(i: usize) -> Value {
    json!({"instruction": format!("what is {i} + {i}?"), "expected": i * 2})
}

/// A gateway over simulated `delegates` (`d0`, `d1`, … in order) whose only and default
/// policy is `verified` (`policy_text`).
pub(crate) async fn fleet(policy_text: &str, delegates: Vec<SimOptions>) -> TestGateway {
    delegates
        .into_iter()
        .fold(TestGateway::builder(), |b, d| b.sim(d))
        .policy("verified.toml", policy_text)
        .config(|c| c.policies.default = "verified".into())
        .spawn()
        .await
}

async fn session(gw: &TestGateway) -> (Client, String) {
    let c = gw.client();
    let s = c.accepted(json!({"payload_mode": "text"})).await;
    (c, s)
}

#[tokio::test]
async fn a_passed_result_carries_peer_verified_and_the_votes() {
    let gw = fleet(
        &policy(2, 3, 1.0),
        vec![
            producer("p-good", "alpha", 0.9, 0.001, 1.0),
            verifier("v-beta", "beta", 1.0),
            verifier("v-gamma", "gamma", 1.0),
            verifier("v-alpha", "alpha", 1.0),
        ],
    )
    .await;
    let (c, s) = session(&gw).await;
    let body = c.task(&s, "qa", question(21), "text").await;
    assert_eq!(body["type"], "TASK_RESULT", "{body}");
    assert_eq!(body["output"]["answer"], 42);
    let p = &body["provenance"];
    assert_eq!(p["verification_status"], "peer_verified", "{p}");
    assert_eq!(p["verified"], true);
    let evidence = p["evidence"].as_array().expect("evidence");
    assert_eq!(evidence.len(), 2, "{p}");
    let mut judges: Vec<&str> = evidence
        .iter()
        .map(|e| e["source"].as_str().unwrap())
        .collect();
    judges.sort();
    // v-alpha shares the producer's model family: never a judge.
    assert_eq!(judges, ["ldp:delegate:v-beta", "ldp:delegate:v-gamma"]);
    for e in evidence {
        assert_eq!(e["kind"], "peer_vote");
        assert_eq!(e["decision"], "passed");
        assert!(e["weight"].as_f64().unwrap() > 0.5, "{e}");
        assert_eq!(e["confidence"], 1.0);
    }
    let lineage = p["lineage"].as_array().unwrap();
    assert_eq!(lineage[0]["step"], "verify", "{p}");
    assert_eq!(lineage[0]["verification_status"], "peer_verified");
    assert_eq!(lineage[1]["step"], "route");
    assert_eq!(
        gw.sim(3).stats().verdicts_passed,
        0,
        "same family never asked"
    );

    let row = gw.ledger_row(body["task_id"].as_str().unwrap()).await;
    assert_eq!(row.verification_status.as_deref(), Some("peer_verified"));
    let m = gw.metrics().await;
    assert_eq!(
        m.sum(r#"ldp_gateway_verifications_total{policy="verified",result="passed"}"#),
        1.0
    );
    // Two passed votes are evidence for the producer.
    let observed =
        m.sum(r#"ldp_gateway_delegate_quality{delegate="d0",skill="qa",source="observed"}"#);
    assert_eq!(observed, 1.0);
    gw.shutdown().await;
}

#[tokio::test]
async fn a_wrong_producer_is_routed_around_and_all_wrong_fails_after_max_rounds() {
    // The cheapest producer is always wrong; the dearer one always right.
    let gw = fleet(
        &policy(2, 3, 1.0),
        vec![
            producer("p-liar", "alpha", 0.95, 0.001, 0.0),
            producer("p-right", "delta", 0.9, 0.01, 1.0),
            verifier("v-beta", "beta", 1.0),
            verifier("v-gamma", "gamma", 1.0),
        ],
    )
    .await;
    let (c, s) = session(&gw).await;
    let body = c.task(&s, "qa", question(5), "text").await;
    assert_eq!(body["type"], "TASK_RESULT", "{body}");
    assert_eq!(body["output"]["answer"], 10, "the right producer's answer");
    assert_eq!(body["provenance"]["produced_by"], "ldp:delegate:p-right");
    let row = gw.ledger_row(body["task_id"].as_str().unwrap()).await;
    assert_eq!(row.delegate.as_deref(), Some("d1"));
    assert!(
        row.cost_usd.unwrap() > 0.01,
        "the voted-down result and the verifiers are paid for: {:?}",
        row.cost_usd
    );
    gw.shutdown().await;

    // Every producer wrong: VERIFICATION_FAILED after max_rounds, naming them.
    let gw = fleet(
        &policy(1, 2, 1.0),
        vec![
            producer("w1", "alpha", 0.9, 0.001, 0.0),
            producer("w2", "delta", 0.9, 0.002, 0.0),
            producer("w3", "eps", 0.9, 0.003, 0.0),
            verifier("v-beta", "beta", 1.0),
        ],
    )
    .await;
    let (c, s) = session(&gw).await;
    let body = c.task(&s, "qa", question(3), "text").await;
    assert_eq!(body["type"], "TASK_FAILED", "{body}");
    let e = &body["error"];
    assert_eq!(e["code"], "VERIFICATION_FAILED", "{e}");
    assert_eq!(e["category"], "quality");
    let msg = e["message"].as_str().unwrap();
    assert!(msg.contains("2 round(s)"), "{msg}");
    let asked: u64 = (0..3).map(|i| gw.sim(i).stats().wrong_answers).sum();
    assert_eq!(asked, 2, "max_rounds = 2: two producers tried");
    let m = gw.metrics().await;
    assert_eq!(
        m.sum(r#"ldp_gateway_verifications_total{policy="verified",result="failed"}"#),
        2.0
    );
    gw.shutdown().await;
}

#[tokio::test]
async fn without_an_independent_verifier_the_task_is_refused() {
    let gw = fleet(
        &policy(2, 3, 1.0),
        vec![
            producer("p", "alpha", 0.9, 0.001, 1.0),
            verifier("v-alpha", "alpha", 1.0),
        ],
    )
    .await;
    let (c, s) = session(&gw).await;
    let body = c.task(&s, "qa", question(1), "text").await;
    assert_eq!(body["type"], "TASK_FAILED", "{body}");
    assert_eq!(body["error"]["code"], "NO_ELIGIBLE_DELEGATE", "{body}");
    assert_eq!(gw.sim(1).stats().verdicts_passed, 0);
    gw.shutdown().await;
}

#[tokio::test]
async fn a_task_verified_only_to_measure_is_answered_when_nobody_can_vote() {
    // Sampling on, this task (almost surely) not drawn: verified only because its producer
    // is not yet measured; with no independent verifier it goes out unverified.
    let gw = fleet(
        &policy(2, 3, 0.000001),
        vec![
            producer("p", "alpha", 0.9, 0.001, 1.0),
            verifier("v-alpha", "alpha", 1.0),
        ],
    )
    .await;
    let (c, s) = session(&gw).await;
    let body = c.task(&s, "qa", question(1), "text").await;
    assert_eq!(body["type"], "TASK_RESULT", "{body}");
    assert_ne!(
        body["provenance"]["verification_status"], "peer_verified",
        "{body}"
    );
    gw.shutdown().await;
}

#[tokio::test]
async fn a_verified_task_streams_nothing_before_its_verdict() {
    // The cheapest producer is always wrong: its result is voted down, and nothing of its
    // run (not even the gateway's "routed to" note) may reach a streaming client.
    let gw = fleet(
        &policy(1, 3, 1.0),
        vec![
            producer("p-liar", "alpha", 0.95, 0.001, 0.0),
            producer("p-right", "delta", 0.9, 0.01, 1.0),
            verifier("v-beta", "beta", 1.0),
        ],
    )
    .await;
    let (c, s) = session(&gw).await;
    let env = c.envelope(&s, crate::support::client::submit_body("qa", question(4)));
    let (status, events) = c.stream(&env).await;
    assert_eq!(status, 200);
    assert_eq!(events.len(), 1, "only the answer: {events:?}");
    let answer = &events[0]["body"];
    assert_eq!(answer["type"], "TASK_RESULT", "{answer}");
    assert_eq!(answer["output"]["answer"], 8);
    assert_eq!(answer["provenance"]["verification_status"], "peer_verified");
    assert_eq!(
        gw.sim(0).stats().wrong_answers,
        1,
        "the liar was asked first"
    );
    gw.shutdown().await;
}

#[tokio::test]
async fn the_openai_ingress_answers_verified_results_whole_or_streamed() {
    use crate::support::openai::{chunks, declared, entry, start, streamed_text};
    use ldp_gateway::sim::openai::OpenAiOptions;
    let model = start(OpenAiOptions::new("sim-mini")).await;
    let gw = TestGateway::builder()
        .entry(entry(
            "oai",
            &model.url(),
            "sim-mini",
            declared(&["chat"], 0.9),
        ))
        .sim(verifier("v-beta", "beta", 1.0))
        .policy("verified.toml", &policy(1, 2, 1.0))
        .config(|c| c.policies.default = "verified".into())
        .spawn()
        .await;
    let c = gw.client();
    let ask = |stream: bool| {
        json!({"model": "chat@verified", "stream": stream,
               "messages": [{"role": "user", "content": "say hi"}]})
    };
    let r = c.post_json("/v1/chat/completions", &ask(false)).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let whole: Value = serde_json::from_str(&r.text()).unwrap();
    let content = whole["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(!content.is_empty(), "{whole}");
    let task = r.headers["x-ldp-task-id"].to_str().unwrap();
    let row = gw.ledger_row(task).await;
    assert_eq!(row.verification_status.as_deref(), Some("peer_verified"));
    assert_eq!(row.votes.len(), 1, "{row:?}");
    // Streamed: the verified answer comes whole, as a short stream ending in [DONE].
    let r = c.post_json("/v1/chat/completions", &ask(true)).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let (events, done) = chunks(&r);
    assert!(done, "{}", r.text());
    assert_eq!(streamed_text(&events), content, "the same answer");
    assert_eq!(gw.sim(0).stats().verdicts_passed, 2);
    gw.shutdown().await;
}
