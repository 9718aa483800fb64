//! Cluster mode, every front end: a client sent to any replica on any request gets the answer
//! one gateway would give — a cancel reaches the replica running the task, an A2A task and
//! its context are read, followed and continued on another replica — on the real Redis and
//! the real clients.

use crate::cluster::{new_key, tenant, tenant_client, two_replicas};
use crate::support::stores::{cluster, redis_url};
use crate::support::{card, eventually, sim, TestGateway};
use ldp_gateway::sim::SimOptions;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

/// A delegate offering `echo` that takes 20 s a task, unless cancelled.
fn slow() -> SimOptions {
    let mut opts = SimOptions::new(card("slow", "default", &[("echo", 0.7)], &["text"]));
    opts.latency = Duration::from_secs(20);
    opts
}

/// LDP: a TASK_CANCEL sent to replica 2 stops the task replica 1 runs (its delegate is sent
/// TASK_CANCEL), and the task's own answer, on replica 1, is cut short.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_ldp_cancel_on_another_replica_stops_the_task() {
    let slow = sim(slow()).await;
    let key = new_key();
    let url = slow.url();
    let gws = two_replicas(&cluster(&redis_url(), 2), &tenant(&key), || {
        TestGateway::builder().delegate(&url)
    })
    .await;
    let one = Arc::new(tenant_client(&gws[0], &key));
    let two = tenant_client(&gws[1], &key);
    let (sid, _) = one
        .session(json!({"preferred_payload_modes": ["text"]}))
        .await;
    let submit = one.submit_behind(&sid, "long-1");
    assert!(
        eventually(Duration::from_secs(10), || slow.stats().tasks == 1).await,
        "task reached the delegate"
    );
    let ack = two.cancel(&sid, "long-1").await;
    assert_eq!(ack["body"]["type"], "TASK_UPDATE", "{ack}");
    assert_eq!(ack["body"]["message"], "cancelled", "{ack}");
    let done = submit.await.unwrap();
    assert_eq!(done["body"]["type"], "TASK_FAILED", "{done}");
    assert_eq!(slow.stats().cancels, 1, "the delegate was sent TASK_CANCEL");
    assert_eq!(slow.stats().results, 0, "cut short");
    // A task no replica runs: answered at once as not running (every replica said so).
    let ack = two.cancel(&sid, "never").await;
    assert_eq!(
        ack["body"]["message"], "task 'never' is not running",
        "{ack}"
    );
    for gw in gws {
        gw.shutdown().await;
    }
    slow.shutdown().await;
}

/// The A2A front end's fleet behind each replica: the slow LDP `sim-slow` (`ponder`, 20 s),
/// the fast LDP `sim-fast` (`summarize`) and the OpenAI-backed `mini` (`chat`) in front of
/// `oa`.
fn a2a_fleet(oa_url: &str) -> crate::support::gateway::Builder<'static> {
    use crate::support::openai::{declared, entry};
    let mut slow = SimOptions::new(card("sim-slow", "default", &[("ponder", 0.9)], &["text"]));
    slow.latency = Duration::from_secs(20);
    let fast = SimOptions::new(card(
        "sim-fast",
        "default",
        &[("summarize", 0.9)],
        &["text"],
    ));
    TestGateway::builder()
        .sim(slow)
        .sim(fast)
        .entry(entry("mini", oa_url, "m", declared(&["chat"], 0.8)))
        .healthy(3)
        .tenant(
            serde_json::from_value(json!({
                "name": "other",
                "api_key_sha256": [ldp_gateway::secret::hash_key(OTHER_KEY)],
                "trust_domains": ["default"],
            }))
            .unwrap(),
        )
}

/// The key of a second tenant of [`a2a_fleet`], `other`.
const OTHER_KEY: &str = "k-cluster-other-tenant";

/// A chat message in `context` through `c`, answered completed: its task id.
async fn chat_in_context(c: &crate::support::Client, context: &str, text: &str) -> String {
    let mut m = crate::bridge_a2a::v1_message(text, json!({"skill": "chat"}));
    m["message"]["contextId"] = json!(context);
    let r = crate::bridge_a2a::rpc(c, "SendMessage", m, Some("1.0")).await;
    let t = &r.json["result"]["task"];
    assert_eq!(t["status"]["state"], "TASK_STATE_COMPLETED", "{}", r.text());
    t["id"].as_str().unwrap().to_owned()
}

/// `GetTask` of `done` (a completed task) through `c` reads it as it ended.
async fn reads_completed(c: &crate::support::Client, done: &serde_json::Value) {
    let got = crate::bridge_a2a::rpc(c, "GetTask", json!({"id": done["id"]}), Some("1.0")).await;
    assert_eq!(
        got.json["result"]["artifacts"],
        done["artifacts"],
        "{}",
        got.text()
    );
    assert_eq!(
        got.json["result"]["status"]["state"],
        "TASK_STATE_COMPLETED"
    );
}

/// The OpenAI-compatible server behind the fleet, a fresh tenant key, two replicas of
/// [`a2a_fleet`] sharing a fresh prefix (`replicas` as `[cluster] replicas` says), and that
/// prefix's config (for more replicas).
async fn a2a_replicas(
    replicas: u32,
) -> (
    ldp_gateway::sim::openai::OpenAiHandle,
    String,
    Vec<TestGateway>,
    ldp_gateway::config::ClusterConfig,
) {
    let oa = crate::support::openai::start(ldp_gateway::sim::openai::OpenAiOptions::new("m")).await;
    let key = new_key();
    let url = oa.url();
    let shared = cluster(&redis_url(), replicas);
    let gws = two_replicas(&shared, &tenant(&key), || a2a_fleet(&url)).await;
    (oa, key, gws, shared)
}

/// How many messages each request to `oa` carried.
fn messages_per_request(oa: &ldp_gateway::sim::openai::OpenAiHandle) -> Vec<usize> {
    oa.requests()
        .iter()
        .map(|r| r["messages"].as_array().map_or(0, Vec::len))
        .collect()
}

/// Stops `gws`, then `oa`.
async fn stop(gws: Vec<TestGateway>, oa: ldp_gateway::sim::openai::OpenAiHandle) {
    for gw in gws {
        gw.shutdown().await;
    }
    oa.shutdown().await;
}

/// A2A by raw JSON-RPC: a task sent to replica 1 is read, followed and canceled on replica 2
/// (the delegate running it on replica 1 is sent TASK_CANCEL, and replica 1 answers it
/// canceled); a task that ended on replica 1 reads the same on replica 2; a context continued
/// on replica 2 stays in its session, with its conversation.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_a2a_task_and_its_context_follow_the_client_to_another_replica() {
    use crate::bridge_a2a::{rpc, v1_message};
    let (oa, key, gws, _) = a2a_replicas(2).await;
    let (one, two) = (tenant_client(&gws[0], &key), tenant_client(&gws[1], &key));
    let slow_sim = gws[0].sim(0);

    let mut slow = v1_message("slow", json!({"skill": "ponder"}));
    slow["configuration"] = json!({"returnImmediately": true});
    let r = rpc(&one, "SendMessage", slow, Some("1.0")).await;
    let id = r.json["result"]["task"]["id"].as_str().unwrap().to_owned();
    assert!(
        eventually(Duration::from_secs(10), || slow_sim.stats().tasks == 1).await,
        "the task reached the delegate"
    );
    let got = rpc(&two, "GetTask", json!({"id": id}), Some("1.0")).await;
    assert_eq!(
        got.json["result"]["status"]["state"],
        "TASK_STATE_WORKING",
        "{}",
        got.text()
    );
    // Followed on replica 2.
    let (mut sub, mut seen) = crate::bridge_a2a::subscribe(&two, &key, &id).await;
    assert!(seen.contains("TASK_STATE_WORKING"), "{seen}");
    // Canceled on replica 2.
    let cancel = rpc(&two, "CancelTask", json!({"id": id}), Some("1.0")).await;
    assert_eq!(
        cancel.json["result"]["status"]["state"],
        "TASK_STATE_CANCELED",
        "{}",
        cancel.text()
    );
    let last = crate::bridge_a2a::last_event(&mut sub, &mut seen).await;
    assert_eq!(
        last["result"]["statusUpdate"]["status"]["state"], "TASK_STATE_CANCELED",
        "{seen}"
    );
    assert!(
        eventually(Duration::from_secs(10), || slow_sim.stats().cancels == 1).await,
        "the delegate on replica 1 was sent TASK_CANCEL: {:?}",
        slow_sim.stats()
    );
    assert_eq!(slow_sim.stats().results, 0, "cut short");
    let on_one = rpc(&one, "GetTask", json!({"id": id}), Some("1.0")).await;
    assert_eq!(
        on_one.json["result"]["status"]["state"],
        "TASK_STATE_CANCELED",
        "{}",
        on_one.text()
    );
    let again = rpc(&one, "CancelTask", json!({"id": id}), Some("1.0")).await;
    assert_eq!(again.json["error"]["code"], -32002, "{}", again.text());

    // A task that ended on replica 1 reads the same on replica 2.
    let r = rpc(
        &one,
        "SendMessage",
        v1_message("hello", json!({"skill": "summarize"})),
        Some("1.0"),
    )
    .await;
    let done = &r.json["result"]["task"];
    assert_eq!(
        done["status"]["state"],
        "TASK_STATE_COMPLETED",
        "{}",
        r.text()
    );
    reads_completed(&two, done).await;
    // Another tenant finds nothing of it.
    let other = crate::cluster::tenant_client(&gws[1], OTHER_KEY);
    let theirs = rpc(&other, "GetTask", json!({"id": done["id"]}), Some("1.0")).await;
    assert_eq!(theirs.json["error"]["code"], -32001, "{}", theirs.text());

    // A context continued on replica 2: one session, one conversation.
    let t1 = chat_in_context(&one, "ctx-1", "my name is Ada").await;
    let t2 = chat_in_context(&two, "ctx-1", "what is my name?").await;
    let counts = messages_per_request(&oa);
    assert_eq!(
        counts,
        [1, 3],
        "the first turn is sent with the second: {:?}",
        oa.requests()
    );
    let (row1, row2) = (gws[0].ledger_row(&t1).await, gws[1].ledger_row(&t2).await);
    assert_eq!(
        row1.session_id, row2.session_id,
        "one session for the context"
    );
    stop(gws, oa).await;
}

/// Redis round trips per task, per front end, on one replica with no limits or budgets (the
/// LDP path's own, 3 and 7 with every shared check, are counted in
/// `cluster::redis_round_trips_per_task_are_one_per_shared_check`): what cluster mode costs
/// each front end, so a change that adds one shows here.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_round_trips_per_task_per_front_end() {
    use crate::bridge_a2a::{rpc, v1_message};
    let (oa, key, gws, _) = a2a_replicas(1).await;
    let gw = &gws[0];
    let c = tenant_client(gw, &key);
    let calls = || async { gw.metrics().await.sum("ldp_gateway_redis_calls_total") };
    let mut per_task = Vec::new();
    // A2A: a blocking SendMessage.
    let a2a = || async {
        let r = rpc(
            &c,
            "SendMessage",
            v1_message("hi", json!({"skill": "summarize"})),
            Some("1.0"),
        )
        .await;
        assert_eq!(
            r.json["result"]["task"]["status"]["state"],
            "TASK_STATE_COMPLETED",
            "{}",
            r.text()
        );
    };
    // OpenAI: a chat completion of the LDP delegate's skill.
    let openai = || async {
        let body = json!({"model": "summarize", "messages": [{"role": "user", "content": "hi"}]});
        let r = c.post_json("/v1/chat/completions", &body).await;
        assert_eq!(r.status, 200, "{}", r.text());
    };
    a2a().await;
    let before = calls().await;
    for _ in 0..10 {
        a2a().await;
    }
    per_task.push((calls().await - before) / 10.0);
    openai().await;
    let before = calls().await;
    for _ in 0..10 {
        openai().await;
    }
    per_task.push((calls().await - before) / 10.0);
    eprintln!(
        "redis round trips per task: A2A {}, OpenAI {}",
        per_task[0], per_task[1]
    );
    // A2A: the LDP path's 3, the tenant's A2A session for a message with no context yet (a
    // session per context: its create), the tenant's A2A session read (its upstream bindings
    // serve a context's first task: none of the context's own is written), and the task's
    // own: its context's session read, the task shared as submitted, the context's new
    // session, working, completed (the artifact with it). OpenAI: the LDP path's 3.
    assert_eq!(per_task, [11.0, 3.0]);
    stop(gws, oa).await;
}

/// The real `a2a-sdk` client across two replicas (`tests/interop/a2a_cluster_client.py`):
/// sending on one and getting, following and canceling on the other, a context continued on
/// the other in its session with its conversation.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_a2a_sdk_client_is_served_by_either_replica() {
    use crate::support::process::{output_within, py_script, text};
    let Some(py) = crate::bridge_a2a::a2a_python() else {
        return;
    };
    let (oa, key, gws, _) = a2a_replicas(2).await;
    let base = |gw: &TestGateway| {
        let u = tenant_client(gw, &key).url("");
        u.trim_end_matches('/').to_owned()
    };
    let mut cmd = py_script(&py, "a2a_cluster_client.py");
    cmd.args([
        &base(&gws[0]),
        &base(&gws[1]),
        &key,
        "ponder",
        "summarize",
        "chat",
    ]);
    let out = output_within(cmd, Duration::from_secs(180)).await;
    assert!(
        out.status.success(),
        "{}\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    let r: serde_json::Value = serde_json::from_str(text(&out.stdout).trim()).unwrap();
    assert_eq!(r["fast_sent"]["state"], "TASK_STATE_COMPLETED", "{r}");
    assert_eq!(r["fast_read_on_two"], r["fast_sent"], "{r}");
    assert_eq!(r["slow_submitted"], "TASK_STATE_SUBMITTED", "{r}");
    let read = r["slow_read_on_two"]["state"].as_str().unwrap();
    assert!(
        ["TASK_STATE_SUBMITTED", "TASK_STATE_WORKING"].contains(&read),
        "{r}"
    );
    assert_eq!(r["cancel_on_two"]["state"], "TASK_STATE_CANCELED", "{r}");
    let followed = r["followed_on_two"].as_array().unwrap();
    assert_eq!(followed[0][0], "task", "{r}");
    assert_eq!(
        followed.last().unwrap(),
        &json!(["status", "TASK_STATE_CANCELED"]),
        "{r}"
    );
    assert_eq!(r["slow_read_on_one"]["state"], "TASK_STATE_CANCELED", "{r}");
    assert_eq!(r["cancel_again_on_one"], "TaskNotCancelableError", "{r}");
    let slow = gws[0].sim(0);
    assert!(
        eventually(Duration::from_secs(10), || slow.stats().cancels == 1).await,
        "the delegate on replica 1 was sent TASK_CANCEL: {:?}",
        slow.stats()
    );
    let turns = r["context_turns"].as_array().unwrap();
    assert_eq!(turns.len(), 2, "{r}");
    assert!(
        turns
            .iter()
            .all(|t| t["state"] == "TASK_STATE_COMPLETED"
                && t["context_id"] == turns[0]["context_id"]),
        "{r}"
    );
    let counts = messages_per_request(&oa);
    assert_eq!(
        counts,
        [1, 3],
        "the first turn is sent with the second: {:?}",
        oa.requests()
    );
    let rows = (
        gws[0].ledger_row(turns[0]["id"].as_str().unwrap()).await,
        gws[1].ledger_row(turns[1]["id"].as_str().unwrap()).await,
    );
    assert_eq!(
        rows.0.session_id, rows.1.session_id,
        "one session for the context"
    );
    stop(gws, oa).await;
}

/// A replica restarted mid-run loses nothing it acknowledged: the A2A tasks it answered
/// are read on the other replica and on its successor (which holds nothing of them in
/// memory), a context it began continues there in its session, and every acknowledged task
/// has its ledger row. (The LDP path's kill -9 is `cluster::ledger_rows_across_replicas_…`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_restarted_replica_loses_no_acknowledged_a2a_task() {
    use crate::bridge_a2a::{rpc, v1_message};
    let (oa, key, mut gws, shared) = a2a_replicas(2).await;
    let url = oa.url();
    let one = tenant_client(&gws[0], &key);
    let mut acknowledged = Vec::new();
    for i in 0..20 {
        let r = rpc(
            &one,
            "SendMessage",
            v1_message(&format!("task {i}"), json!({"skill": "summarize"})),
            Some("1.0"),
        )
        .await;
        let t = r.json["result"]["task"].clone();
        assert_eq!(t["status"]["state"], "TASK_STATE_COMPLETED", "{}", r.text());
        acknowledged.push(t);
    }
    let first = chat_in_context(&one, "ctx-restart", "my name is Ada").await;
    let first_row = gws[0].ledger_row(&first).await;
    for t in &acknowledged {
        gws[0].ledger_row(t["id"].as_str().unwrap()).await;
    }
    // Replica 1 goes; its successor starts with nothing in memory.
    gws.remove(0).shutdown().await;
    let successor = two_replicas(&shared, &tenant(&key), || a2a_fleet(&url)).await;
    for gw in [&gws[0], &successor[0]] {
        let c = tenant_client(gw, &key);
        for t in &acknowledged {
            reads_completed(&c, t).await;
        }
    }
    let next = tenant_client(&successor[0], &key);
    let second = chat_in_context(&next, "ctx-restart", "what is my name?").await;
    assert_eq!(
        successor[0].ledger_row(&second).await.session_id,
        first_row.session_id,
        "the context's session outlived the replica that opened it"
    );
    let counts = messages_per_request(&oa);
    assert_eq!(counts, [1, 3], "{:?}", oa.requests());
    stop(gws.into_iter().chain(successor).collect(), oa).await;
}
