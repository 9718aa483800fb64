//! `POST /ldp/stream` through the gateway on real sockets: the delegate's own updates relayed,
//! failover when an upstream stream breaks, and a vanished client's task cancelled upstream.

use crate::support::{eventually, sim, Card, Client, Events, TestGateway};
use ldp_gateway::ldp::IdentityCard;
use ldp_gateway::sim::SimOptions;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// A card offering skill `s` at `quality`, saying whether it streams.
fn streaming_card(id: &str, quality: f64, streams: bool) -> IdentityCard {
    Card::new(id)
        .capability(json!({"name": "s", "quality": {"quality_score": quality,
            "cost_per_call_usd": 0.002, "latency_p50_ms": 50, "supports_streaming": streams}}))
        .build()
}

/// A simulated delegate answering after `latency`.
async fn delegate(card: IdentityCard, latency: Duration) -> ldp_gateway::sim::SimHandle {
    let mut opts = SimOptions::new(card);
    opts.latency = latency;
    sim(opts).await
}

/// Submits task `task_id` of skill `s` in session `sid` to `/ldp/stream`.
async fn submit(c: &Client, sid: &str, task_id: &str) -> Events {
    let body =
        json!({"type": "TASK_SUBMIT", "task_id": task_id, "skill": "s", "input": "stream me"});
    c.open_stream(&c.envelope_json(sid, body, "text")).await
}

fn kind(v: &Value) -> &str {
    v["body"]["type"].as_str().unwrap_or("?")
}

fn message(v: &Value) -> &str {
    v["body"]["message"].as_str().unwrap_or("")
}

/// The messages of a run of events, for failure output.
fn summary(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| format!("{} {}", kind(e), message(e)))
        .collect()
}

async fn session(c: &Client) -> String {
    c.session(json!({"policy": "best-quality", "preferred_payload_modes": ["text"]}))
        .await
        .0
}

#[tokio::test]
async fn a_streaming_delegates_updates_are_relayed_between_routed_and_the_result() {
    let a = delegate(streaming_card("a", 0.9, true), Duration::from_millis(200)).await;
    let gw = TestGateway::builder().delegate(&a.url()).spawn().await;
    let c = gw.client();
    let sid = session(&c).await;
    let mut stream = submit(&c, &sid, "t-relay").await;
    let events = stream.rest().await;
    let seen = summary(&events);
    assert_eq!(
        seen,
        [
            "TASK_UPDATE routed to d0",
            "TASK_UPDATE started",
            "TASK_UPDATE working",
            "TASK_RESULT "
        ],
        "{events:#?}"
    );
    for e in &events {
        assert_eq!(e["body"]["task_id"], "t-relay", "{e}");
        assert_eq!(e["session_id"], sid.as_str(), "client's session id: {e}");
        assert_eq!(e["from"], "ldp:delegate:gateway", "{e}");
        assert_eq!(e["to"], c.from.as_str(), "{e}");
    }
    assert_eq!(events[2]["body"]["progress"], 0.5);
    assert_eq!(
        events[3]["body"]["provenance"]["produced_by"],
        "ldp:delegate:a"
    );
    assert_eq!((a.stats().tasks, a.stats().results), (1, 1));
    gw.shutdown().await;
}

#[tokio::test]
async fn a_non_streaming_delegate_gets_routed_then_the_final_with_heartbeats_between() {
    let a = delegate(streaming_card("a", 0.9, false), Duration::from_millis(1000)).await;
    let gw = TestGateway::builder().delegate(&a.url()).spawn().await;
    let c = gw.client();
    let sid = session(&c).await;
    let mut stream = submit(&c, &sid, "t-plain").await;
    let events = stream.rest().await;
    assert_eq!(
        summary(&events),
        ["TASK_UPDATE routed to d0", "TASK_RESULT "],
        "no delegate updates from a delegate that does not stream: {events:#?}"
    );
    // Heartbeats every 400 ms across a one-second task.
    assert!(stream.heartbeats >= 1, "heartbeats: {}", stream.heartbeats);
    gw.shutdown().await;
}

#[tokio::test]
async fn a_broken_upstream_stream_fails_over_to_another_streaming_delegate() {
    let broken = {
        let mut opts = SimOptions::new(streaming_card("broken", 0.9, true));
        opts.latency = Duration::from_millis(50);
        opts.break_stream = true;
        sim(opts).await
    };
    let good = delegate(streaming_card("good", 0.6, true), Duration::from_millis(50)).await;
    let gw = TestGateway::builder()
        .delegate(&broken.url())
        .delegate(&good.url())
        .spawn()
        .await;
    let c = gw.client();
    let sid = session(&c).await;
    let mut stream = submit(&c, &sid, "t-broken").await;
    let events = stream.rest().await;
    let seen = summary(&events);
    assert_eq!(
        seen,
        [
            "TASK_UPDATE routed to d0",
            "TASK_UPDATE started",
            "TASK_UPDATE working",
            "TASK_UPDATE delegate d0 failed (stream_broken); retrying on another delegate",
            "TASK_UPDATE routed to d1",
            "TASK_UPDATE started",
            "TASK_UPDATE working",
            "TASK_RESULT ",
        ],
        "{events:#?}"
    );
    let result = events.last().unwrap();
    assert_eq!(
        result["body"]["provenance"]["produced_by"],
        "ldp:delegate:good"
    );
    let note = result["body"]["provenance"]["lineage"][0]["note"]
        .as_str()
        .unwrap();
    assert!(note.contains("failover from d0 (stream_broken)"), "{note}");
    assert_eq!(broken.stats().tasks, 1);
    assert_eq!(good.stats().results, 1);
    gw.shutdown().await;
}

#[tokio::test]
async fn a_broken_stream_with_nowhere_to_go_ends_with_task_failed() {
    let broken = {
        let mut opts = SimOptions::new(streaming_card("broken", 0.9, true));
        opts.latency = Duration::from_millis(50);
        opts.break_stream = true;
        sim(opts).await
    };
    let gw = TestGateway::builder().delegate(&broken.url()).spawn().await;
    let c = gw.client();
    let sid = session(&c).await;
    let mut stream = submit(&c, &sid, "t-alone").await;
    let events = stream.rest().await;
    let last = events.last().expect("at least a final event");
    assert_eq!(kind(last), "TASK_FAILED", "{events:#?}");
    assert_eq!(last["body"]["error"]["code"], "UPSTREAM_FAILED", "{last}");
    assert!(
        last["body"]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("ended before its final message"),
        "{last}"
    );
    assert!(
        events.iter().all(|e| kind(e) != "TASK_RESULT"),
        "{events:#?}"
    );
    assert_eq!(kind(&events[0]), "TASK_UPDATE");
    assert_eq!(message(&events[0]), "routed to d0");
    assert_eq!(broken.stats().tasks, 1, "tried once: there is no other");
    gw.shutdown().await;
}

#[tokio::test]
async fn a_client_that_disconnects_gets_its_task_cancelled_upstream() {
    for streams in [false, true] {
        let slow = delegate(
            streaming_card("slow", 0.9, streams),
            Duration::from_secs(20),
        )
        .await;
        let gw = TestGateway::builder().delegate(&slow.url()).spawn().await;
        let c = gw.client();
        let sid = session(&c).await;
        let mut stream = submit(&c, &sid, "t-gone").await;
        let routed = stream.next().await.unwrap();
        assert_eq!(message(&routed), "routed to d0", "{routed}");
        assert!(
            eventually(Duration::from_secs(5), || slow.stats().in_flight == 1).await,
            "the task is running upstream"
        );
        let left = Instant::now();
        drop(stream);
        assert!(
            eventually(Duration::from_secs(3), || slow.stats().cancels == 1).await,
            "TASK_CANCEL reached the delegate (streams: {streams}): {:?}",
            slow.stats()
        );
        let took = left.elapsed();
        println!(
            "client gone → upstream cancel: {} ms (streams: {streams})",
            took.as_millis()
        );
        assert_eq!(slow.stats().in_flight, 0);
        assert_eq!(slow.stats().results, 0);
        gw.shutdown().await;
    }
}
