//! The `ldp-client` adapter against our simulated delegate and the gateway.

use crate::support::cards::{card, sim};
use crate::support::TestGateway;
use ldp_client::{Adapter, Config, Event, Task, TaskState};
use ldp_gateway::sim::SimOptions;
use serde_json::json;

fn adapter() -> Adapter {
    Adapter::new(Config::default()).expect("adapter")
}

#[tokio::test]
async fn smoke_invoke_stream_status_against_a_sim_and_the_gateway() {
    let d = sim(SimOptions::new(card(
        "a",
        "default",
        &[("echo", 0.9)],
        &["text"],
    )))
    .await;
    let a = adapter();
    let found = a.discover(&d.url()).await.expect("discover");
    assert_eq!(found.labels["ldp.delegate_id"], "ldp:delegate:a");
    for _ in 0..3 {
        let out = a
            .call(&d.url(), Task::new("echo", json!({"text": "hi"})))
            .await
            .expect("call");
        assert!(out.output.get("ldp_provenance").is_some(), "{}", out.output);
        assert_eq!(
            a.status(&out.task_id).expect("status"),
            TaskState::Completed
        );
    }
    assert_eq!(d.stats().accepted, 1, "{:?}", d.stats());
    let gw = TestGateway::builder()
        .sim(SimOptions::new(card(
            "b",
            "default",
            &[("echo", 0.9)],
            &["text"],
        )))
        .spawn()
        .await;
    let url = gw.client().url("").replace("http://", "ldp://");
    let out = a
        .call(&url, Task::new("echo", json!({"text": "via gateway"})))
        .await
        .expect("through the gateway");
    assert!(out.output.get("ldp_provenance").is_some(), "{}", out.output);
    let mut s = a
        .stream(&url, Task::new("echo", json!({"text": "streamed"})))
        .await
        .expect("stream");
    let mut last = None;
    while let Some(e) = s.next().await {
        last = Some(e);
    }
    assert!(matches!(last, Some(Event::Completed(_))), "{last:?}");
    gw.shutdown().await;
}

#[tokio::test]
async fn close_ends_every_cached_session_and_the_adapter_stays_usable() {
    let d = sim(SimOptions::new(card(
        "a",
        "default",
        &[("echo", 0.9)],
        &["text"],
    )))
    .await;
    let a = adapter();
    a.call(&d.url(), Task::new("echo", json!({"text": "one"})))
        .await
        .expect("call");
    assert_eq!(d.stats().active_sessions, 1);
    a.close().await;
    let stats = d.stats();
    assert_eq!((stats.closes, stats.active_sessions), (1, 0), "{stats:?}");
    a.call(&d.url(), Task::new("echo", json!({"text": "two"})))
        .await
        .expect("a new session after close");
    assert_eq!(d.stats().accepted, 2);
}
