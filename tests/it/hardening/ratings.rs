//! Item 3: one tenant's ratings moved every tenant's routing. A tenant's ratings now move its
//! own routing only; shared learned quality (what every tenant routes on, and what weighs
//! verifiers' votes) learns from verifier votes and from tenants the operator marks
//! `trusted_rater`. Across a restart too: the split is rebuilt from the ledger.

use crate::support::{unique, Client, TestGateway};
use crate::verify::{card, question};
use ldp_gateway::config::{Config, TenantConfig};
use ldp_gateway::secret::hash_key;
use ldp_gateway::sim::SimOptions;
use serde_json::json;

/// Cost first, above a quality floor (as the shipped `cheapest`).
const CHEAP: &str = "name = \"cheap-floor\"\n[require]\nmin_quality = 0.6\n\
    [weights]\nquality = 0.2\ncost = 0.7\nlatency = 0.1\n[fallback]\nmax_attempts = 3\n";

fn tenant(name: &str, key: &str, trusted: bool) -> TenantConfig {
    TenantConfig {
        api_key_sha256: vec![hash_key(key)],
        trust_domains: vec!["default".into()],
        trusted_rater: trusted,
        ..TenantConfig::new(name)
    }
}

/// A `qa` producer declaring 0.9 at `price` a call, always right.
fn producer(id: &str, price: f64) -> SimOptions {
    SimOptions {
        accuracy: Some(1.0),
        ..SimOptions::new(card(id, id, &[("qa", 0.9, price)]))
    }
}

/// One task of `c`'s tenant in a fresh session (no affinity): its id and who answered it.
async fn routed(c: &Client, i: usize) -> (String, String) {
    let s = c.accepted(json!({"payload_mode": "text"})).await;
    let body = c.task(&s, "qa", question(i), "text").await;
    assert_eq!(body["type"], "TASK_RESULT", "{body}");
    let to = body["provenance"]["lineage"][0]["routed_to"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    (body["task_id"].as_str().unwrap().to_owned(), to)
}

async fn rate_bad(c: &Client, task: &str) {
    let r = c
        .post_json("/ldp/feedback", &json!({"task_id": task, "outcome": "bad"}))
        .await;
    assert_eq!(r.status, 200, "{}", r.json);
}

/// Five tasks of `c`'s tenant, each answered by d0, then each rated bad.
async fn rate_five_bad(c: &Client, from: usize) {
    let mut tasks = Vec::new();
    for i in from..from + 5 {
        let (task, to) = routed(c, i).await;
        assert_eq!(to, "d0");
        tasks.push(task);
    }
    for task in &tasks {
        rate_bad(c, task).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_tenants_ratings_do_not_move_another_tenants_routing() {
    let keys = (unique("key-a"), unique("key-b"), unique("key-qa"));
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite://{}", dir.path().join("ledger.db").display());
    let configure = |c: &mut Config| {
        c.tenants = vec![
            tenant("alpha", &keys.0, false),
            tenant("beta", &keys.1, false),
            tenant("qa-team", &keys.2, true),
        ];
        c.provenance.store = store.clone();
        c.policies.default = "cheap-floor".into();
    };
    // d0 is cheap, d1 ten times dearer; both declare 0.9.
    let start = || async {
        TestGateway::builder()
            .sim(producer("cheap", 0.001))
            .sim(producer("dear", 0.01))
            .policy("cheap-floor.toml", CHEAP)
            .config(configure)
            .spawn()
            .await
    };
    let gw = start().await;
    let (alpha, beta, qa) = (
        gw.client().with_key(Some(&keys.0)),
        gw.client().with_key(Some(&keys.1)),
        gw.client().with_key(Some(&keys.2)),
    );
    assert_eq!(routed(&beta, 0).await.1, "d0");
    // Alpha rates five of its own tasks (all the cheap delegate's) bad, as fast as it can.
    rate_five_bad(&alpha, 0).await;
    // Beta still gets the cheap delegate; alpha's own routing moved.
    for i in 0..3 {
        assert_eq!(
            routed(&beta, i).await.1,
            "d0",
            "beta moved by alpha's ratings"
        );
    }
    assert_eq!(
        routed(&alpha, 9).await.1,
        "d1",
        "alpha's own ratings steer alpha"
    );
    // The shared estimate (what verifier weights and the metrics read) has no evidence.
    let m = gw.metrics().await;
    assert_eq!(
        m.sum(r#"ldp_gateway_delegate_quality{delegate="d0",skill="qa",source="blended"}"#),
        0.9,
        "{m}"
    );
    gw.shutdown().await;

    // A new process on the same ledger: the split is rebuilt as it was learnt.
    let gw = start().await;
    let (alpha, beta, qa2) = (
        gw.client().with_key(Some(&keys.0)),
        gw.client().with_key(Some(&keys.1)),
        gw.client().with_key(Some(&keys.2)),
    );
    drop(qa);
    assert_eq!(routed(&beta, 20).await.1, "d0", "after a restart");
    assert_eq!(
        routed(&alpha, 21).await.1,
        "d1",
        "alpha's view survives a restart"
    );
    // A trusted rater's ratings are shared: they move everyone.
    rate_five_bad(&qa2, 30).await;
    assert_eq!(
        routed(&beta, 40).await.1,
        "d1",
        "a trusted rater moves everyone"
    );
    gw.shutdown().await;
}

/// Verifier weights share the path: a tenant that runs tasks on a verifier's skill and rates
/// them bad moved the verifier's learned quality, so its votes weighed less for everyone.
/// Now a verified task of another tenant still weighs that vote by the shared estimate (the
/// declared 0.9, no shared evidence).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_tenants_ratings_do_not_move_the_verifier_weights() {
    let keys = (unique("key-a"), unique("key-b"));
    let plain = "name = \"plain\"\n[weights]\nquality = 0.5\ncost = 0.5\nlatency = 0.0\n";
    let gw = TestGateway::builder()
        .sim(crate::verify::producer("p", "alpha", 0.9, 0.001, 1.0))
        .sim(crate::verify::verifier("v-beta", "beta", 1.0))
        .policy("plain.toml", plain)
        .policy("verified.toml", &crate::verify::policy(1, 1, 1.0))
        .config(|c: &mut Config| {
            c.tenants = vec![
                tenant("alpha", &keys.0, false),
                tenant("beta", &keys.1, false),
            ];
            c.policies.default = "verified".into();
        })
        .spawn()
        .await;
    let (alpha, beta) = (
        gw.client().with_key(Some(&keys.0)),
        gw.client().with_key(Some(&keys.1)),
    );
    // Alpha asks the verifier directly, five times, and rates every answer bad.
    let s = alpha
        .accepted(json!({"payload_mode": "text", "policy": "plain"}))
        .await;
    let mut tasks = Vec::new();
    for i in 0..5 {
        let asked = json!({"input": question(i), "output": {"answer": 2 * i}, "skill": "qa"});
        let body = alpha.task(&s, "verify", asked, "text").await;
        // Answered or refused, the task ran on the verifier: its row names it, and may be rated.
        let task = body["task_id"].as_str().unwrap().to_owned();
        assert_eq!(
            gw.ledger_row(&task).await.delegate.as_deref(),
            Some("d1"),
            "{body}"
        );
        tasks.push(task);
    }
    for task in &tasks {
        rate_bad(&alpha, task).await;
    }
    // Beta's verified task: the verifier's vote weighs its shared quality, as before.
    let s = beta.accepted(json!({"payload_mode": "text"})).await;
    let body = beta.task(&s, "qa", question(7), "text").await;
    assert_eq!(body["type"], "TASK_RESULT", "{body}");
    let vote = &body["provenance"]["evidence"][0];
    assert_eq!(vote["kind"], "peer_vote", "{body}");
    let weight = vote["weight"].as_f64().unwrap();
    eprintln!("the verifier's vote weighs {weight} after alpha's five bad ratings");
    assert!((weight - 0.9).abs() < 1e-6, "weight {weight}: {body}");
    gw.shutdown().await;
}
