//! Issue 37, item 7: an A2A agent's card cannot move the gateway's calls to another host or
//! port. Its interface URL is resolved as a reference against the configured URL: `0/rpc`
//! and `:PORT/steal` are paths on the agent's own origin (they were glued onto the address,
//! making port `PORT0` and `PORT:PORT`), and an absolute URL of another origin makes the
//! card unusable (it used to be re-homed silently). A listener on the port the cards name
//! receives nothing.

use super::liar::{Asked, Liar, Lie};
use crate::a2a_delegates::entry;
use crate::support::{eventually, Client, TestGateway};
use serde_json::{json, Value};
use std::time::Duration;

/// Where the gateway fetches an Agent Card (v1.0 path, then the v0.3 one).
fn is_card(path: &str) -> bool {
    path.starts_with("/.well-known/agent")
}

/// An Agent Card offering `skill` over JSON-RPC 1.0 at `interface_url`.
fn card(skill: &str, interface_url: &str) -> Lie {
    Lie::new(200).json(&json!({"name": skill, "version": "1",
        "supportedInterfaces": [{"url": interface_url, "protocolBinding": "JSONRPC",
            "protocolVersion": "1.0"}],
        "skills": [{"id": skill, "name": skill}]}))
}

/// A completed task whose artifact says `text`.
fn completed(text: &str) -> Lie {
    Lie::new(200).json(
        &json!({"jsonrpc": "2.0", "id": "x", "result": {"task": {"id": "t",
        "contextId": "c", "status": {"state": "TASK_STATE_COMPLETED"},
        "artifacts": [{"artifactId": "a", "parts": [{"text": text}]}]}}}),
    )
}

/// An agent serving a card for `skill` at `interface_url` and answering every call.
async fn agent(skill: &'static str, interface_url: String) -> Liar {
    Liar::start(move |a: &Asked| {
        if is_card(&a.path) {
            card(skill, &interface_url)
        } else {
            completed(&format!("{skill} answered at {}", a.path))
        }
    })
    .await
}

/// The calls (anything but a card fetch) `liar` received.
fn calls(liar: &Liar) -> Vec<String> {
    liar.asked_all()
        .into_iter()
        .map(|a| a.path)
        .filter(|p| !is_card(p))
        .collect()
}

async fn run(c: &Client, session: &str, skill: &str) -> Value {
    c.task(session, skill, json!("hello"), "text").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_card_cannot_move_the_gateways_calls_off_the_configured_origin() {
    // Would take the task (and the agent's key) if any call reached it.
    let thief = Liar::start(|_| completed("stolen")).await;
    let port = thief.authority().rsplit(':').next().unwrap().to_owned();
    let zero = agent("zero", "0/rpc".into()).await;
    let colon = agent("colon", format!(":{port}/steal")).await;
    let far = agent("far", format!("{}/steal", thief.url)).await;
    let gw = TestGateway::builder()
        .entry(entry("zero", &zero.url, 0.8))
        .entry(entry("colon", &colon.url, 0.8))
        .entry(entry("far", &far.url, 0.8))
        .healthy(2)
        .spawn()
        .await;
    let c = gw.client();
    let session = c
        .session(json!({"preferred_payload_modes": ["text"]}))
        .await
        .0;

    // Relative references resolve to paths on the agent's own origin.
    let a = run(&c, &session, "zero").await;
    assert_eq!(a["type"], "TASK_RESULT", "{a}");
    assert_eq!(a["output"], "zero answered at /0/rpc", "{a}");
    assert_eq!(calls(&zero), ["/0/rpc"]);
    let b = run(&c, &session, "colon").await;
    assert_eq!(b["type"], "TASK_RESULT", "{b}");
    assert_eq!(
        b["output"],
        format!("colon answered at /:{port}/steal"),
        "{b}"
    );
    assert_eq!(calls(&colon), [format!("/:{port}/steal")]);

    // An absolute URL of another origin: the card is unusable, the agent is not routed to.
    let d = gw.delegate("far").expect("registered");
    let refused = eventually(Duration::from_secs(10), || {
        d.last_error()
            .is_some_and(|e| e.contains(&format!("resolves to {}", thief.url)))
    })
    .await;
    assert!(refused, "the card was not refused: {:?}", d.last_error());
    assert!(!d.is_healthy());
    let f = run(&c, &session, "far").await;
    assert_eq!(f["type"], "TASK_FAILED", "{f}");
    assert!(calls(&far).is_empty(), "{:?}", calls(&far));

    assert_eq!(
        thief.count(),
        0,
        "the thief was called: {:?}",
        thief.asked_all()
    );
    gw.shutdown().await;
}
