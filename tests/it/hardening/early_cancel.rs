//! Issue 37 item 14b: a cancel that came before its task was registered was lost. A task was
//! listed for cancels only once it ran in its session, after the front end's session was
//! opened, the session looked up, the task admitted and its status written (in cluster mode
//! each a Redis round trip). An LADP `halt` in between — the task already in the agent's book
//! — cancelled nothing, and the task ran to its end and was charged. Now a task is registered
//! when its route admits it, before anything awaits, and whatever runs it later joins that
//! registration.
//!
//! The window is held open at a real seam: the first LADP task of a tenant opens the
//! tenant's LADP session, and a relay in front of Redis holds that session's write until the
//! agent's `halt` has been answered.

use crate::support::redis_gate::RedisGate;
use crate::support::stores::{cluster, redis_url};
use crate::support::TestGateway;
use crate::verify::producer;
use ladp::{Meta, Msg};
use std::time::Duration;

/// A bound for what must happen at all (a loaded machine still makes it).
const GENEROUS: Duration = Duration::from_secs(30);

/// POSTs `body` to `/ladp`: the status and the answer's forms.
async fn ladp(url: &str, body: &str) -> (u16, Vec<Msg>, String) {
    let r = reqwest::Client::new()
        .post(format!("{url}/ladp"))
        .header("content-type", "text/plain")
        .body(body.to_owned())
        .send()
        .await
        .expect("POST /ladp");
    let status = r.status().as_u16();
    let text = r.text().await.expect("body");
    let forms = ladp::parse_with(&text, &ladp::Limits::default())
        .unwrap_or_else(|e| panic!("{e}: {text}"))
        .iter()
        .map(|f| Msg::from_sexp(f).unwrap_or_else(|e| panic!("{e}: {text}")))
        .collect();
    (status, forms, text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_halt_that_comes_before_its_task_is_registered_stops_it() {
    let mut gate = RedisGate::start(&redis_url()).await;
    let shared = ldp_gateway::config::ClusterConfig {
        // The held write must not end at its deadline: the test lets it go.
        redis_timeout: GENEROUS,
        ..cluster(&gate.url(), 1)
    };
    let gw = TestGateway::builder()
        .sim(producer("p-alpha", "alpha", 0.9, 0.001, 1.0))
        .config(move |c| {
            c.cluster = shared;
            c.ladp.rate_per_minute = 100;
        })
        .spawn()
        .await;
    let url = gw.ldp_url();
    // The tenant's first LADP task opens its LADP session: that session's write is held.
    gate.hold_next(":session:");
    let init = "(msg task-init agent gateway 1 (data (skill qa) (task \"2 + 2?\")))";
    let task = tokio::spawn({
        let url = url.clone();
        async move { ladp(&url, init).await }
    });
    let held = tokio::time::timeout(GENEROUS, gate.held())
        .await
        .expect("the task never reached its session's write");
    // The task is in the agent's book, not yet in any session.
    let (status, halted, text) = ladp(&url, "(msg halt agent gateway 2 (data))").await;
    gate.release();
    assert_eq!(status, 200, "{text}");
    let meta = Meta::from_sexp(&halted[0].data[0]).unwrap_or_else(|e| panic!("{e}: {text}"));
    let (answered, forms, answer) = tokio::time::timeout(GENEROUS, task)
        .await
        .expect("the task never answered")
        .expect("the task's request");
    eprintln!("held {held}; halt answered {text}; the task answered {answered}: {answer}");
    assert!(
        text.contains("(cancelled 1)"),
        "the halt found the task: {meta:?}"
    );
    let last = forms.last().expect("an answer");
    assert_eq!(last.kind, "error", "the task ran on: {answer}");
    let reason = last
        .value("reason")
        .ok()
        .flatten()
        .and_then(|v| v.as_name())
        .unwrap_or_default();
    assert!(reason.starts_with("CANCELLED"), "{answer}");
    assert_eq!(gw.sim(0).stats().tasks, 0, "the delegate was sent the task");
    gw.shutdown().await;
}
