//! The reference Rust crate's own `LdpAdapter` (`ldp-protocol` 0.2.0) as the client, against
//! the gateway in front of a simulated delegate and against the simulated delegate directly.
//!
//! The adapter discards the answer to its TASK_SUBMIT and polls: `status` and `stream` send
//! TASK_UPDATE `status_query` with an empty session id, `cancel` a TASK_CANCEL with an empty
//! session id. Each must get an HTTP 200 envelope, and only the client (tenant and `from`)
//! that submitted a task may read it.

use crate::support::client::GATEWAY_ID;
use crate::support::{eventually_async, sim, Card, Client, TestGateway};
use futures_util::StreamExt as _;
use ldp_gateway::config::TenantConfig;
use ldp_gateway::secret::hash_key;
use ldp_gateway::sim::{SimHandle, SimOptions};
use ldp_protocol::protocol::{TaskEvent, TaskStatus};
use ldp_protocol::types::trust::TrustDomain;
use ldp_protocol::{LdpAdapter, LdpAdapterConfig, LdpClient, ProtocolAdapter, TaskRequest};
use serde_json::{json, Value};
use std::time::Duration;

pub(crate) const ME: &str = "ldp:client:ref-adapter";
pub(crate) const SKILL: &str = "summarize";

/// A reference adapter sending as `from`, with `key` as its bearer token if given.
pub(crate) fn adapter(from: &str, key: Option<&str>) -> LdpAdapter {
    let config = LdpAdapterConfig {
        delegate_id: from.into(),
        trust_domain: TrustDomain::new("default"),
        ..LdpAdapterConfig::default()
    };
    let mut headers = reqwest011::header::HeaderMap::new();
    if let Some(key) = key {
        let value = format!("Bearer {key}").parse().expect("header value");
        headers.insert(reqwest011::header::AUTHORIZATION, value);
    }
    let http = reqwest011::Client::builder()
        .default_headers(headers)
        .build()
        .expect("http client");
    LdpAdapter::with_client(config, LdpClient::with_http_client(http))
}

pub(crate) fn task() -> TaskRequest {
    TaskRequest {
        skill: SKILL.into(),
        input: json!({"task_type": "summarization", "instruction": "Summarize",
                      "input": "status queries are answered from a store"}),
        contract: None,
    }
}

pub(crate) fn sim_opts() -> SimOptions {
    SimOptions::new(Card::new("ref-sim").skill(SKILL, 0.8).build())
}

pub(crate) fn completed(status: TaskStatus) -> Value {
    match status {
        TaskStatus::Completed { output } => output,
        other => panic!("expected Completed, got {other:?}"),
    }
}

fn failed_code(status: TaskStatus) -> String {
    match status {
        TaskStatus::Failed { error } => error.code,
        other => panic!("expected Failed, got {other:?}"),
    }
}

/// Discover, invoke + status, stream, cancel after the end, and unknown / other-sender tasks,
/// all through the reference adapter against `url`; `produced_by` is whose provenance the
/// answer carries. The id of the invoked task.
async fn lifecycle(url: &str, produced_by: &str) -> String {
    let a = adapter(ME, None);
    let caps = a.discover(url).await.expect("discover");
    assert!(caps.skills.iter().any(|s| s.name == SKILL), "{caps:?}");

    let handle = a.invoke(url, task()).await.expect("invoke");
    let output = completed(a.status(url, &handle.task_id).await.expect("status"));
    let provenance = &output["ldp_provenance"];
    assert_eq!(provenance["produced_by"], produced_by, "{output}");
    // Asked twice, the same answer: it is kept, not consumed.
    let again = completed(a.status(url, &handle.task_id).await.expect("status"));
    assert_eq!(again, output);

    let mut events = a.stream(url, task()).await.expect("stream");
    let mut seen = Vec::new();
    let last = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(ev) = events.next().await {
            match ev {
                TaskEvent::Progress { message, .. } => seen.push(message),
                done => return done,
            }
        }
        panic!("the stream ended without a final event after {seen:?}")
    })
    .await
    .expect("stream ends");
    let TaskEvent::Completed { output } = last else {
        panic!("expected Completed, got {last:?}")
    };
    assert_eq!(output["ldp_provenance"]["produced_by"], produced_by);

    a.cancel(url, &handle.task_id)
        .await
        .expect("cancel of a finished task");

    let unknown = a.status(url, "no-such-task").await.expect("status");
    assert_eq!(failed_code(unknown), "TASK_NOT_FOUND");
    let other = adapter("ldp:client:someone-else", None);
    let theirs = other.status(url, &handle.task_id).await.expect("status");
    assert_eq!(
        failed_code(theirs),
        "TASK_NOT_FOUND",
        "another from reads nothing"
    );
    other
        .cancel(url, &handle.task_id)
        .await
        .expect("cancel of someone else's task is answered");
    handle.task_id
}

#[tokio::test]
async fn reference_adapter_through_the_gateway() {
    let gw = TestGateway::builder().sim(sim_opts()).spawn().await;
    let url = gw.ldp_url();
    let task_id = lifecycle(&url, "ldp:delegate:ref-sim").await;
    // The gateway's own route step is in the lineage it returned.
    let a = adapter(ME, None);
    let output = completed(a.status(&url, &task_id).await.expect("status"));
    let lineage = output["ldp_provenance"]["lineage"]
        .as_array()
        .expect("lineage");
    assert!(
        lineage
            .iter()
            .any(|e| e["step"] == "route" && e["delegate_id"] == GATEWAY_ID),
        "{lineage:?}"
    );
    // Any other TASK_UPDATE from a client is still refused.
    let c = gw.client().with_from(ME);
    let r = c
        .post_body(
            "",
            json!({"type": "TASK_UPDATE", "task_id": task_id, "message": "hi"}),
        )
        .await;
    assert_eq!(r.status, 400, "{}", r.json);
    gw.shutdown().await;
}

#[tokio::test]
async fn reference_adapter_against_the_simulated_delegate() {
    let s = sim(sim_opts()).await;
    lifecycle(&s.url(), "ldp:delegate:ref-sim").await;
    s.shutdown().await;
}

#[tokio::test]
async fn only_the_submitting_tenant_reads_its_task() {
    let tenant = |name: &str, key: &str| TenantConfig {
        api_key_sha256: vec![hash_key(key)],
        trust_domains: vec!["default".into()],
        ..TenantConfig::new(name)
    };
    let gw = TestGateway::builder()
        .tenant(tenant("acme", "acme-key"))
        .tenant(tenant("globex", "globex-key"))
        .sim(sim_opts())
        .spawn()
        .await;
    let url = gw.ldp_url();
    let acme = adapter(ME, Some("acme-key"));
    let handle = acme.invoke(&url, task()).await.expect("invoke");
    completed(acme.status(&url, &handle.task_id).await.expect("status"));
    // The same `from` under another tenant's key.
    let globex = adapter(ME, Some("globex-key"));
    let theirs = globex.status(&url, &handle.task_id).await.expect("status");
    assert_eq!(failed_code(theirs), "TASK_NOT_FOUND");
    // No key: a status query is authenticated like everything else.
    let anonymous = adapter(ME, None);
    let refused = anonymous.status(&url, &handle.task_id).await;
    assert!(
        refused.as_ref().is_err_and(|e| e.contains("401")),
        "{refused:?}"
    );
    gw.shutdown().await;
}

/// A task submitted in a session by `ME` (the raw client) is `Working` to the adapter while
/// it runs; the adapter's sessionless cancel stops it; its status is then the failure.
async fn cancelled_while_running(url: &str, delegate: &SimHandle) {
    let c = Client::new(url).with_from(ME);
    let (sid, _) = c
        .session(json!({"preferred_payload_modes": ["text"]}))
        .await;
    let submit = tokio::spawn(async move {
        c.send(
            &sid,
            json!({"type": "TASK_SUBMIT", "task_id": "long-1", "skill": SKILL, "input": "x"}),
            "text",
        )
        .await
    });
    let a = &adapter(ME, None);
    let working = eventually_async(Duration::from_secs(10), || async move {
        matches!(a.status(url, "long-1").await, Ok(TaskStatus::Working))
            && delegate.stats().in_flight == 1
    })
    .await;
    assert!(working, "the running task reads as Working");
    a.cancel(url, "long-1").await.expect("cancel");
    let done = tokio::time::timeout(Duration::from_secs(10), submit)
        .await
        .expect("the task ends at once")
        .expect("joined");
    assert_eq!(done["body"]["type"], "TASK_FAILED", "{done}");
    assert_eq!(done["body"]["error"]["code"], "CANCELLED", "{done}");
    assert_eq!(delegate.stats().cancels, 1);
    let status = a.status(url, "long-1").await.expect("status");
    assert_eq!(failed_code(status), "CANCELLED");
}

fn slow_sim() -> SimOptions {
    SimOptions {
        latency: Duration::from_secs(30),
        ..sim_opts()
    }
}

#[tokio::test]
async fn sessionless_cancel_stops_a_running_task_through_the_gateway() {
    let gw = TestGateway::builder().sim(slow_sim()).spawn().await;
    cancelled_while_running(&gw.ldp_url(), gw.sim(0)).await;
    gw.shutdown().await;
}

#[tokio::test]
async fn sessionless_cancel_stops_a_running_task_on_the_simulated_delegate() {
    let s = sim(slow_sim()).await;
    cancelled_while_running(&s.url(), &s).await;
    s.shutdown().await;
}
