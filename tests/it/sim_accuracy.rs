//! The simulated delegate's right and wrong answers (`accuracy`, inputs carrying `expected`)
//! and its verifier of the `verify` skill, over real loopback sockets and through the binary.

use crate::support::process::{bin, run, text, Running};
use crate::support::{sim as start, Client};
use ldp_gateway::ldp::IdentityCard;
use ldp_gateway::sim::{SimHandle, SimOptions};
use serde_json::{json, Value};
use std::time::Duration;

/// Tasks per rate measurement: at p = 0.5 the count's standard deviation is 10.
const N: usize = 400;
/// Accepted counts out of [`N`] at p = 0.5: ±6 standard deviations.
const HALF: std::ops::RangeInclusive<u64> = 140..=260;

/// A card offering `qa` (quality 0.9) in text and semantic-frame modes.
fn card(id: &str) -> IdentityCard {
    serde_json::from_value(json!({
        "delegate_id": format!("ldp:delegate:{id}"), "name": id, "model_family": "sim",
        "model_version": "sim-1", "trust_domain": {"name": "default"}, "endpoint": "",
        "capabilities": [{"name": "qa", "quality": {"quality_score": 0.9}}],
        "supported_payload_modes": ["semantic_frame", "text"]
    }))
    .expect("test card")
}

fn opts(id: &str, accuracy: Option<f64>, seed: Option<u64>) -> SimOptions {
    SimOptions {
        accuracy,
        seed,
        ..SimOptions::new(card(id))
    }
}

fn verifier(id: &str, accuracy: Option<f64>, seed: Option<u64>) -> SimOptions {
    SimOptions {
        verifier: true,
        ..opts(id, accuracy, seed)
    }
}

/// A client with an open session on `h`.
async fn session(h: &SimHandle) -> (Client, String) {
    let c = Client::new(&h.url());
    let s = c.accepted(json!({})).await;
    (c, s)
}

/// The output of a task that must succeed.
async fn output(c: &Client, session: &str, skill: &str, input: Value) -> Value {
    let body = c.task(session, skill, input, "text").await;
    assert_eq!(body["type"], "TASK_RESULT", "{body}");
    body["output"].clone()
}

fn question(i: usize) -> Value {
    json!({"instruction": format!("what is {i} + {i}?"), "expected": i * 2})
}

/// The answers to [`N`] questions, each `true` if right.
async fn answers(h: &SimHandle) -> Vec<bool> {
    let (c, s) = session(h).await;
    let mut right = Vec::with_capacity(N);
    for i in 0..N {
        let out = output(&c, &s, "qa", question(i)).await;
        let answer = &out["answer"];
        assert!(!answer.is_null(), "an answer to an expected value: {out}");
        right.push(*answer == json!(i * 2));
    }
    right
}

fn count(right: &[bool]) -> u64 {
    right.iter().filter(|r| **r).count() as u64
}

#[tokio::test]
async fn accuracy_one_is_always_right_and_zero_always_wrong() {
    let always = start(opts("always", Some(1.0), None)).await;
    let never = start(opts("never", Some(0.0), None)).await;
    let (c, s) = session(&always).await;
    let out = output(&c, &s, "qa", json!({"expected": {"city": "Paris"}})).await;
    assert_eq!(out["answer"], json!({"city": "Paris"}));
    assert_eq!(out["text"], r#"always (qa): {"city":"Paris"}"#);
    assert_eq!(out["skill"], "qa", "the usual fields stay: {out}");
    let (c, s) = session(&never).await;
    let out = output(&c, &s, "qa", json!({"expected": "Paris"})).await;
    assert_eq!(out["answer"], json!({"wrong": "Paris"}));

    assert_eq!(count(&answers(&always).await), N as u64);
    assert_eq!(count(&answers(&never).await), 0);
    let (a, n) = (always.stats(), never.stats());
    assert_eq!((a.right_answers, a.wrong_answers), (N as u64 + 1, 0));
    assert_eq!((n.right_answers, n.wrong_answers), (0, N as u64 + 1));
    assert_eq!(a.verdicts_passed + a.verdicts_failed, 0, "not a verifier");
}

#[tokio::test]
async fn accuracy_one_half_is_right_about_half_the_time_and_a_seed_repeats_it() {
    let a = start(opts("half-a", Some(0.5), Some(7))).await;
    let b = start(opts("half-b", Some(0.5), Some(7))).await;
    let other = start(opts("half-c", Some(0.5), Some(8))).await;
    let right = answers(&a).await;
    let rights = count(&right);
    assert!(HALF.contains(&rights), "{rights} right of {N}");
    let stats = a.stats();
    assert_eq!(
        (stats.right_answers, stats.wrong_answers),
        (rights, N as u64 - rights)
    );
    assert_eq!(answers(&b).await, right, "the same seed, the same answers");
    assert_ne!(answers(&other).await, right, "another seed, other answers");
}

#[tokio::test]
async fn without_expected_or_accuracy_the_output_is_unchanged() {
    let plain = start(opts("same", None, None)).await;
    let accurate = start(opts("same", Some(0.0), None)).await;
    let (pc, ps) = session(&plain).await;
    let (ac, as_) = session(&accurate).await;
    for input in [
        json!({"instruction": "no expected here"}),
        json!("expected"),
        json!(["expected", 1]),
        json!(null),
    ] {
        let want = output(&pc, &ps, "qa", input.clone()).await;
        assert!(want.get("answer").is_none(), "{want}");
        assert_eq!(output(&ac, &as_, "qa", input).await, want);
    }
    // `expected` without accuracy is just another field of the input.
    let with = json!({"instruction": "hi", "expected": 1});
    let out = output(&pc, &ps, "qa", with.clone()).await;
    assert!(out.get("answer").is_none(), "{out}");
    assert_eq!(out["text"], "same (qa): hi");
    for s in [plain.stats(), accurate.stats()] {
        assert_eq!((s.right_answers, s.wrong_answers), (0, 0));
    }
}

/// The verification task for `output`, produced for `input` by skill `qa`.
fn verify_task(input: &Value, output: &Value) -> Value {
    json!({"input": input, "output": output, "skill": "qa"})
}

#[tokio::test]
async fn a_verifier_offers_verify_and_judges_right_and_wrong_outputs() {
    let judge = start(verifier("judge", None, None)).await;
    let cap = judge.state().card().capability("verify").expect("verify");
    assert_eq!(cap.hints.quality, None, "no accuracy, no quality hint");
    let served: IdentityCard = serde_json::from_value(
        Client::new(&judge.url())
            .get("/.well-known/ldp-identity")
            .await
            .json,
    )
    .expect("card");
    assert!(served.capability("verify").is_some() && served.capability("qa").is_some());

    let right = start(opts("right", Some(1.0), None)).await;
    let wrong = start(opts("wrong", Some(0.0), None)).await;
    let (rc, rs) = session(&right).await;
    let (wc, ws) = session(&wrong).await;
    let (jc, js) = session(&judge).await;
    for i in 0..20 {
        let q = question(i);
        let good = output(&rc, &rs, "qa", q.clone()).await;
        let bad = output(&wc, &ws, "qa", q.clone()).await;
        let v = output(&jc, &js, "verify", verify_task(&q, &good)).await;
        assert_eq!(v["passed"], true, "{v}");
        assert_eq!(v["confidence"], 1.0);
        assert!(
            v["reason"].as_str().is_some_and(|r| r.starts_with("qa: ")),
            "{v}"
        );
        let v = output(&jc, &js, "verify", verify_task(&q, &bad)).await;
        assert_eq!(v["passed"], false, "{v}");
    }
    // Nothing to check against: passes.
    let free = json!({"instruction": "write a poem"});
    let poem = output(&rc, &rs, "qa", free.clone()).await;
    let v = output(&jc, &js, "verify", verify_task(&free, &poem)).await;
    assert_eq!(v["passed"], true, "{v}");
    let s = judge.stats();
    assert_eq!((s.verdicts_passed, s.verdicts_failed), (21, 20));
    assert_eq!(s.verdicts_misjudged, 0);
    assert_eq!(
        (s.right_answers, s.wrong_answers),
        (0, 0),
        "judging is not answering"
    );
}

#[tokio::test]
async fn a_verifier_at_one_half_misjudges_about_half_the_time() {
    let judge = start(verifier("coin", Some(0.5), Some(11))).await;
    let cap = judge.state().card().capability("verify").expect("verify");
    assert_eq!(cap.hints.quality, Some(0.5));
    let (c, s) = session(&judge).await;
    let mut misjudged = 0;
    let mut passed = 0;
    for i in 0..N {
        let q = question(i);
        // Every other output is right.
        let truth = i % 2 == 0;
        let answer = if truth {
            json!(i * 2)
        } else {
            json!(i * 2 + 1)
        };
        let v = output(
            &c,
            &s,
            "verify",
            verify_task(&q, &json!({"answer": answer})),
        )
        .await;
        assert_eq!(v["confidence"], 0.5);
        let said = v["passed"].as_bool().expect("passed is a bool");
        passed += u64::from(said);
        misjudged += u64::from(said != truth);
    }
    assert!(HALF.contains(&misjudged), "{misjudged} misjudged of {N}");
    let st = judge.stats();
    assert_eq!(st.verdicts_misjudged, misjudged);
    assert_eq!(
        (st.verdicts_passed, st.verdicts_failed),
        (passed, N as u64 - passed)
    );
}

#[tokio::test]
async fn verification_tasks_are_checked_and_need_no_frame_fields() {
    let judge = start(verifier("strict", Some(1.0), None)).await;
    let (c, s) = session(&judge).await;
    let q = json!({"expected": "yes"});
    let body = c
        .task(
            &s,
            "verify",
            verify_task(&q, &json!({"answer": "yes"})),
            "semantic_frame",
        )
        .await;
    assert_eq!(body["type"], "TASK_RESULT", "{body}");
    assert_eq!(body["output"]["passed"], true);
    // Other skills keep the frame's required fields.
    let body = c.task(&s, "qa", q.clone(), "semantic_frame").await;
    assert_eq!(body["error"]["code"], "PAYLOAD_MODE_FAILED", "{body}");
    for bad in [
        json!("judge this"),
        json!({"input": q}),
        json!({"output": {}}),
    ] {
        let body = c.task(&s, "verify", bad, "text").await;
        assert_eq!(body["type"], "TASK_FAILED", "{body}");
        assert_eq!(body["error"]["code"], "INVALID_VERIFICATION_TASK", "{body}");
    }
    // A card that already offers `verify` keeps its own capability.
    let mut own = card("own");
    let mut cap = own.capability("qa").expect("qa").clone();
    cap.name = "verify".into();
    own.capabilities.push(cap);
    let h = start(SimOptions {
        verifier: true,
        accuracy: Some(0.3),
        ..SimOptions::new(own)
    })
    .await;
    let verifies: Vec<_> = h
        .state()
        .card()
        .capabilities
        .iter()
        .filter(|c| c.name == "verify")
        .collect();
    assert_eq!(verifies.len(), 1);
    assert_eq!(verifies[0].hints.quality, Some(0.9));
}

/// Starts `ldp-gateway delegate` with `extra` flags; the process and its URL.
async fn delegate(extra: &[&str]) -> (Running, String) {
    let mut cmd = bin();
    cmd.args([
        "delegate",
        "--card",
        "config/delegates/qwen-translate-apac.json",
        "--latency-ms",
        "0",
    ]);
    cmd.args(extra);
    let mut child = Running::spawn(cmd);
    let line = child
        .line(Duration::from_secs(30), |l| l.starts_with("listening on "))
        .await;
    let url = line.trim_start_matches("listening on ").trim().to_owned();
    (child, url)
}

#[tokio::test]
async fn the_cli_delegate_serves_a_verifier_with_its_accuracy() {
    let (child, url) = delegate(&["--accuracy", "0.7", "--verifier", "--seed", "3"]).await;
    let c = Client::new(&url);
    let card: IdentityCard =
        serde_json::from_value(c.get("/.well-known/ldp-identity").await.json).expect("card");
    let cap = card.capability("verify").expect("the card offers verify");
    assert_eq!(cap.hints.quality, Some(0.7));
    let s = c.accepted(json!({})).await;
    let q = json!({"expected": "ok"});
    let body = c
        .task(
            &s,
            "verify",
            verify_task(&q, &json!({"answer": "ok"})),
            "text",
        )
        .await;
    assert_eq!(body["type"], "TASK_RESULT", "{body}");
    assert_eq!(body["output"]["confidence"], 0.7);
    assert!(body["output"]["passed"].is_boolean(), "{body}");
    child.kill().await;

    // Without --verifier the shipped card does not offer it.
    let (child, url) = delegate(&["--accuracy", "0.7"]).await;
    let card: IdentityCard =
        serde_json::from_value(Client::new(&url).get("/ldp/identity").await.json).expect("card");
    assert!(card.capability("verify").is_none());
    child.kill().await;
}

#[tokio::test]
async fn the_cli_refuses_an_accuracy_outside_zero_to_one() {
    for bad in ["1.5", "-0.1", "NaN"] {
        let flag = format!("--accuracy={bad}");
        let card = "config/delegates/qwen-translate-apac.json";
        let out = run(&["delegate", "--card", card, &flag], &[]).await;
        let stderr = text(&out.stderr);
        assert!(!out.status.success(), "--accuracy {bad} was accepted");
        let want = format!("--accuracy must be between 0 and 1, got {bad}");
        assert!(stderr.contains(&want), "no `{want}` in:\n{stderr}");
    }
}
