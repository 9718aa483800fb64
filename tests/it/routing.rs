//! Policy-driven routing through the running gateway: registration, polling, health, reload,
//! explain, dialect parity, observed latency.

use crate::support::{card, eventually, policy_dir, sim, Card, Client, Resp, TestGateway};
use ldp_gateway::ldp::IdentityCard;
use ldp_gateway::sim::SimOptions;
use serde_json::{json, Value};
use std::time::Duration;

const BALANCED: &str = "name = \"balanced\"\n";
const CHEAPEST: &str = "name = \"cheapest\"\n[weights]\nquality = 0.0\ncost = 1.0\nlatency = 0.0\n[balance]\ntolerance = 0.0\n";
const QUALITY: &str = "name = \"quality\"\n[weights]\nquality = 1.0\ncost = 0.0\nlatency = 0.0\n[balance]\ntolerance = 0.0\n";
const FAST: &str = "name = \"fast\"\n[weights]\nquality = 0.0\ncost = 0.0\nlatency = 1.0\n[balance]\ntolerance = 0.0\n";

fn priced(id: &str, q: f64, cost: f64, latency_ms: u64) -> IdentityCard {
    Card::new(id).priced("s", q, cost, latency_ms).build()
}

async fn produced_by(c: &Client, sid: &str) -> String {
    let r = c.task(sid, "s", json!("x"), "text").await;
    assert_eq!(r["type"], "TASK_RESULT", "{r}");
    r["provenance"]["produced_by"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn policies_pick_by_their_weights_and_are_named_three_ways() {
    let good = sim(SimOptions::new(priced("good", 0.95, 0.05, 400))).await;
    let cheap = sim(SimOptions::new(priced("cheap", 0.6, 0.001, 400))).await;
    let gw = TestGateway::builder()
        .delegate(&good.url())
        .delegate(&cheap.url())
        .policy("a.toml", BALANCED)
        .policy("b.toml", CHEAPEST)
        .policy("c.toml", QUALITY)
        .spawn()
        .await;
    let c = gw.client();

    let (sid, _) = c
        .session(json!({"policy": "cheapest", "preferred_payload_modes": ["text"]}))
        .await;
    assert_eq!(produced_by(&c, &sid).await, "ldp:delegate:cheap");
    let r = c.task(&sid, "s", json!("x"), "text").await;
    assert_eq!(r["provenance"]["lineage"][0]["policy"], "cheapest");

    let (sid, _) = c
        .session(json!({"policy": "quality", "preferred_payload_modes": ["text"]}))
        .await;
    assert_eq!(produced_by(&c, &sid).await, "ldp:delegate:good");

    // The x-ldp-policy header names the policy per request.
    let (sid, _) = c
        .session(json!({"preferred_payload_modes": ["text"]}))
        .await;
    let env = json!({"message_id": "m", "session_id": sid, "from": c.from, "to": "gw",
        "body": {"type": "TASK_SUBMIT", "task_id": "t", "skill": "s", "input": "x"},
        "payload_mode": "text", "timestamp": "2026-11-22T00:00:00Z"});
    let r = c
        .post_with(
            "/ldp/messages",
            serde_json::to_vec(&env).unwrap(),
            &[("x-ldp-policy", "cheapest")],
        )
        .await
        .json;
    assert_eq!(
        r["body"]["provenance"]["lineage"][0]["policy"], "cheapest",
        "{r}"
    );

    // An unknown policy is refused at proposal time.
    let b = c.open(json!({"policy": "nope"})).await;
    assert_eq!(b["type"], "SESSION_REJECT");
    assert_eq!(b["error"]["code"], "UNKNOWN_POLICY");

    let m = gw.metrics().await;
    assert!(
        m.text()
            .contains("ldp_gateway_routing_decisions_total{delegate=\"d1\",policy=\"cheapest\"}"),
        "{m}"
    );
    gw.shutdown().await;
}

#[tokio::test]
async fn rfc_and_reference_cards_are_routed_on_the_same_terms() {
    let rfc: IdentityCard = serde_json::from_value(json!({
        "delegate_id": "ldp:delegate:rfc", "name": "rfc", "model_family": "a", "model_version": "1",
        "trust_domain": {"name": "default", "allow_cross_domain": false, "trusted_peers": []},
        "context_window": 8192, "supported_payload_modes": ["text"],
        "capabilities": [{"name": "s", "quality_hint": 0.8, "latency_hint_ms_p50": 300, "cost_hint": "medium"}]
    }))
    .unwrap();
    let reference: IdentityCard = serde_json::from_value(json!({
        "delegate_id": "ldp:delegate:ref", "name": "ref", "model_family": "a", "model_version": "1",
        "trust_domain": {"name": "default", "allow_cross_domain": false, "trusted_peers": []},
        "context_window": 8192, "supported_payload_modes": ["text"],
        "capabilities": [{"name": "s", "quality": {"quality_score": 0.8, "latency_p50_ms": 300,
            "cost_per_call_usd": 0.01, "supports_streaming": false}}]
    }))
    .unwrap();
    let a = sim(SimOptions::new(rfc)).await;
    let b = sim(SimOptions::new(reference)).await;
    // Latency weight 0: once measured, the two would differ by a millisecond of noise.
    let qc = "name = \"qc\"\n[weights]\nquality = 0.5\ncost = 0.5\nlatency = 0.0\n";
    let gw = TestGateway::builder()
        .delegate(&a.url())
        .delegate(&b.url())
        .policy("a.toml", BALANCED)
        .policy("qc.toml", qc)
        .spawn()
        .await;
    let r = gw.admin().get("/admin/route?skill=s&policy=qc").await;
    let (status, x) = (r.status, r.json);
    assert_eq!(status, 200, "{x}");
    let rows = x["delegates"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    // medium tier = 0.01 USD: same figures, same score, both in the band.
    assert_eq!(
        rows[0]["figures"]["cost_usd"],
        rows[1]["figures"]["cost_usd"]
    );
    assert_eq!(rows[0]["figures"]["quality"], rows[1]["figures"]["quality"]);
    assert_eq!(rows[0]["score"], rows[1]["score"]);
    assert_eq!(x["band"].as_array().unwrap().len(), 2);
    // And the load is shared.
    let c = gw.client();
    let mut seen = std::collections::HashSet::new();
    for _ in 0..40 {
        let (sid, _) = c
            .session(json!({"policy": "qc", "preferred_payload_modes": ["text"]}))
            .await;
        seen.insert(produced_by(&c, &sid).await);
    }
    assert_eq!(seen.len(), 2, "{seen:?}");
    gw.shutdown().await;
}

#[tokio::test]
async fn explain_reports_every_constraint_and_the_pick() {
    let mut eu = card("eu", "default", &[("s", 0.9)], &["text"]);
    eu.jurisdiction = Some("eu-west".into());
    let mut us = card("us", "default", &[("s", 0.95)], &["text"]);
    us.jurisdiction = Some("us-east".into());
    let other = card("other", "default", &[("t", 0.9)], &["text"]);
    let (a, b, o) = (
        sim(SimOptions::new(eu)).await,
        sim(SimOptions::new(us)).await,
        sim(SimOptions::new(other)).await,
    );
    let eu_only = "name = \"eu\"\n[require]\njurisdictions = [\"eu-*\"]\nmin_quality = 0.5\n";
    let gw = TestGateway::builder()
        .delegates(&[a.url(), b.url(), o.url()])
        .policy("a.toml", BALANCED)
        .policy("eu.toml", eu_only)
        .spawn()
        .await;
    let admin = gw.admin();
    let r = admin.get("/admin/route?skill=s&policy=eu").await;
    let (status, x) = (r.status, r.json);
    assert_eq!(status, 200);
    assert_eq!(x["pick"]["Ok"], "d0", "{x}");
    let us_row = x["delegates"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["delegate"] == "d1")
        .unwrap();
    let j = us_row["constraints"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["constraint"] == "jurisdiction")
        .unwrap();
    assert_eq!(j["pass"], false);
    assert_eq!(j["detail"], "'us-east' allow [eu-*] deny []");
    assert!(us_row["score"].is_null());
    let o_row = x["delegates"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["delegate"] == "d2")
        .unwrap();
    assert_eq!(o_row["offers_skill"], false);
    let text = admin
        .get("/admin/route?skill=s&policy=eu&format=text")
        .await
        .text();
    assert!(text.contains("FAIL jurisdiction"), "{text}");
    assert!(text.contains("pick: d0"), "{text}");
    let r = admin.get("/admin/route?skill=s&policy=missing").await;
    assert_eq!(r.status, 403);
    assert_eq!(r.json["error"]["code"], "UNKNOWN_POLICY");
    assert_eq!(admin.get("/admin/route").await.status, 400);
    gw.shutdown().await;
}

#[tokio::test]
async fn admin_registration_and_removal() {
    let a = sim(SimOptions::new(card(
        "a",
        "default",
        &[("s", 0.5)],
        &["text"],
    )))
    .await;
    let b = sim(SimOptions::new(card(
        "b",
        "default",
        &[("s", 0.9)],
        &["text"],
    )))
    .await;
    let gw = TestGateway::builder().delegate(&a.url()).spawn().await;
    let admin = gw.admin();
    let d = admin
        .post_json(
            "/admin/delegates",
            &json!({"url": b.url(), "name": "late", "weight": 2.0, "labels": {"zone": "z1"}}),
        )
        .await;
    assert_eq!(d.status, 201, "{}", d.json);
    assert_eq!(d.json["health"], "healthy");
    assert_eq!(d.json["ldp_labels"]["ldp.delegate_id"], "ldp:delegate:b");
    let again = json!({"url": b.url(), "name": "late"});
    assert_eq!(
        admin.post_json("/admin/delegates", &again).await.status,
        409
    );
    let e = admin
        .post_json("/admin/delegates", &json!({"url": "ftp://x"}))
        .await;
    assert_eq!(e.status, 400);
    assert_eq!(e.json["error"]["code"], "BAD_REQUEST");
    let list = admin.get("/admin/delegates").await.json;
    assert_eq!(list["delegates"].as_array().unwrap().len(), 2);

    let c = gw.client();
    let (sid, _) = c
        .session(json!({"policy": "best-quality", "preferred_payload_modes": ["text"]}))
        .await;
    assert_eq!(
        produced_by(&c, &sid).await,
        "ldp:delegate:b",
        "the registered delegate serves"
    );

    assert_eq!(admin.delete("/admin/delegates/late").await.status, 204);
    assert_eq!(admin.delete("/admin/delegates/late").await.status, 404);
    let (sid, _) = c
        .session(json!({"policy": "best-quality", "preferred_payload_modes": ["text"]}))
        .await;
    assert_eq!(
        produced_by(&c, &sid).await,
        "ldp:delegate:a",
        "a removed delegate gets no new tasks"
    );
    gw.shutdown().await;
}

#[tokio::test]
async fn card_changes_and_outages_take_effect_at_the_next_poll() {
    let first = card("a", "default", &[("s", 0.9)], &["text"]);
    let a = sim(SimOptions::new(first)).await;
    let addr = a.addr();
    let b = sim(SimOptions::new(card(
        "b",
        "default",
        &[("s", 0.5)],
        &["text"],
    )))
    .await;
    let gw = TestGateway::builder()
        .delegate(&a.url())
        .delegate(&b.url())
        .config(|cfg| cfg.discovery.poll_interval = Duration::from_millis(200))
        .spawn()
        .await;
    let c = gw.client();
    let (sid, _) = c
        .session(json!({"policy": "best-quality", "preferred_payload_modes": ["text"]}))
        .await;
    assert_eq!(produced_by(&c, &sid).await, "ldp:delegate:a");

    // The delegate dies: within a poll it is down and tasks go elsewhere (even in a session
    // that was bound to it).
    a.shutdown().await;
    let d0 = gw.delegate("d0").unwrap();
    assert!(eventually(Duration::from_secs(10), || !d0.is_healthy()).await);
    assert_eq!(produced_by(&c, &sid).await, "ldp:delegate:b");

    // It comes back with a new model version and a new skill.
    let mut second = card("a", "default", &[("s", 0.9), ("new-skill", 0.8)], &["text"]);
    second.model_version = "a-2".into();
    let l = tokio::net::TcpListener::bind(addr).await.unwrap();
    let _a2 = ldp_gateway::sim::spawn(l, SimOptions::new(second))
        .await
        .unwrap();
    assert!(
        eventually(Duration::from_secs(15), || d0.is_healthy()
            && d0.card().is_some_and(|c| c.model_version == "a-2"))
        .await,
        "new card picked up"
    );
    let r = c.task(&sid, "new-skill", json!("x"), "text").await;
    assert_eq!(r["type"], "TASK_RESULT", "{r}");
    gw.shutdown().await;
}

#[tokio::test]
async fn reload_swaps_good_sets_and_keeps_the_old_one_on_errors() {
    let a = sim(SimOptions::new(priced("a", 0.9, 0.02, 100))).await;
    let dir = policy_dir(&[("a.toml", BALANCED)]);
    let gw = TestGateway::builder()
        .delegate(&a.url())
        .config(|cfg| cfg.policies.dir = dir.path().into())
        .spawn()
        .await;
    let admin = gw.admin();
    let names = |v: &Value| -> Vec<String> {
        v["policies"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["name"].as_str().unwrap().to_owned())
            .collect()
    };

    std::fs::write(dir.path().join("b.toml"), CHEAPEST).unwrap();
    let r = admin.post_json("/admin/reload", &json!({})).await;
    assert_eq!(r.status, 200, "{}", r.json);
    let p = admin.get("/admin/policies").await.json;
    assert_eq!(names(&p), vec!["balanced", "cheapest"]);

    std::fs::write(
        dir.path().join("c.toml"),
        "name = \"broken\"\n[weights]\nquality = 0.0\ncost = 0.0\nlatency = 0.0\nbogus = 1\n",
    )
    .unwrap();
    let Resp {
        status, json: r, ..
    } = admin.post_json("/admin/reload", &json!({})).await;
    assert_eq!(status, 422, "{r}");
    let problems = r["problems"].as_array().unwrap();
    assert!(problems.len() >= 2, "every problem is reported: {r}");
    assert!(
        problems
            .iter()
            .all(|p| p.as_str().unwrap().contains("c.toml:")),
        "{r}"
    );
    let p = admin.get("/admin/policies").await.json;
    assert_eq!(names(&p), vec!["balanced", "cheapest"], "the old set stays");
    let m = gw.metrics().await;
    assert!(
        m.text()
            .contains("ldp_gateway_policy_reload_failures_total 1"),
        "{m}"
    );

    // The watcher picks up a fixed file by itself.
    std::fs::write(dir.path().join("c.toml"), FAST).unwrap();
    assert!(
        eventually(Duration::from_secs(15), || gw.has_policy("fast")).await,
        "file change reloaded"
    );
    gw.shutdown().await;
}

#[tokio::test]
async fn observed_latency_overrides_a_lying_card() {
    // "liar" declares 10 ms but takes 300 ms; "honest" declares and takes 60 ms.
    let mut liar = SimOptions::new(priced("liar", 0.8, 0.01, 10));
    liar.latency = Duration::from_millis(300);
    let mut honest = SimOptions::new(priced("honest", 0.8, 0.01, 60));
    honest.latency = Duration::from_millis(60);
    let (l, h) = (sim(liar).await, sim(honest).await);
    let gw = TestGateway::builder()
        .delegate(&l.url())
        .delegate(&h.url())
        .policy("a.toml", BALANCED)
        .policy("fast.toml", FAST)
        .spawn()
        .await;
    let c = gw.client();
    let (sid, _) = c
        .session(json!({"policy": "fast", "preferred_payload_modes": ["text"]}))
        .await;
    assert_eq!(
        produced_by(&c, &sid).await,
        "ldp:delegate:liar",
        "the declared hint wins at first"
    );
    // New sessions re-route; once measured, the liar's EWMA is far above the honest hint.
    let mut last = String::new();
    for _ in 0..3 {
        let (sid, _) = c
            .session(json!({"policy": "fast", "preferred_payload_modes": ["text"]}))
            .await;
        last = produced_by(&c, &sid).await;
    }
    assert_eq!(last, "ldp:delegate:honest");
    let x = gw
        .admin()
        .get("/admin/route?skill=s&policy=fast")
        .await
        .json;
    let liar_row = x["delegates"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["delegate"] == "d0")
        .unwrap();
    assert_eq!(liar_row["figures"]["latency_source"], "observed");
    assert!(liar_row["figures"]["latency_ms"].as_f64().unwrap() >= 250.0);
    gw.shutdown().await;
}

/// Issue 25's example: two OpenAI-backed delegates for `chat`, "mini" (quality 0.8 at
/// 0.15/0.60 USD per Mtok, 200 ms) and "large" (0.95 at 2.5/10 USD, 900 ms). The shipped
/// `best-quality` policy sends every task to the 0.95 one: quality's spread counts as much
/// as the price's, and its weight (0.8) decides.
#[tokio::test]
async fn best_quality_picks_the_better_model_whatever_it_costs() {
    use crate::support::openai::{declared, entry, start};
    use ldp_gateway::sim::openai::OpenAiOptions;
    let card = |quality: f64, input: f64, output: f64, ms: u64| ldp_gateway::config::DeclaredCard {
        price_per_mtok_input: Some(input),
        price_per_mtok_output: Some(output),
        latency_p50_ms: Some(ms),
        ..declared(&["chat"], quality)
    };
    let (mini, large) = (
        start(OpenAiOptions::new("mini-model")).await,
        start(OpenAiOptions::new("large-model")).await,
    );
    // The shipped policies (no `.policy(…)`).
    let gw = TestGateway::builder()
        .entry(entry(
            "mini",
            &mini.url(),
            "mini-model",
            card(0.8, 0.15, 0.60, 200),
        ))
        .entry(entry(
            "large",
            &large.url(),
            "large-model",
            card(0.95, 2.5, 10.0, 900),
        ))
        .spawn()
        .await;
    let x = gw
        .admin()
        .get("/admin/route?skill=chat&policy=best-quality")
        .await
        .json;
    assert_eq!(x["pick"]["Ok"], "large", "{x:#}");
    assert_eq!(x["band"], json!(["large"]), "{x:#}");
    assert!(x["scoring"].as_str().unwrap().contains("error rate"), "{x}");
    let c = gw.client();
    for _ in 0..5 {
        let (sid, _) = c
            .session(json!({"policy": "best-quality", "preferred_payload_modes": ["text"]}))
            .await;
        let r = c.task(&sid, "chat", json!("hello"), "text").await;
        assert_eq!(r["type"], "TASK_RESULT", "{r}");
        assert_eq!(r["provenance"]["produced_by"], "ldp:delegate:large", "{r}");
    }
    // `cheapest` still takes the cheap one (both pass its quality floor).
    let x = gw
        .admin()
        .get("/admin/route?skill=chat&policy=cheapest")
        .await
        .json;
    assert_eq!(x["pick"]["Ok"], "mini", "{x:#}");
    gw.shutdown().await;
}
