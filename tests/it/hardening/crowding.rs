//! Issue 37 items 2–6 and 9: a table keyed by what clients send, bounded for the whole
//! process, let one tenant's volume evict another's entries. Each test runs a flooding tenant
//! (`beta`) beside a quiet one (`alpha`) through the real route, and checks that the quiet
//! tenant keeps what it had: its LADP agent's rate and running task, its A2A tasks, its
//! conversation, its task status, its LLMX sequence numbers.

use super::liar::{handshake, is_card, ldp_card, Liar, Lie};
use crate::bridge_a2a::{rpc, v1_message};
use crate::bridge_ladp::{send as ladp, task_init};
use crate::bridge_llmx::post as llmx;
use crate::support::openai::{declared, entry, start};
use crate::support::{card, TestGateway};
use futures_util::StreamExt as _;
use ldp_gateway::config::TenantConfig;
use ldp_gateway::sim::openai::OpenAiOptions;
use ldp_gateway::sim::SimOptions;
use serde_json::json;
use std::time::Duration;

const ALPHA: &str = "sk-alpha-quiet";
const BETA: &str = "sk-beta-flood";

fn tenant(name: &str, key: &str) -> TenantConfig {
    serde_json::from_value(json!({
        "name": name,
        "api_key_sha256": [ldp_gateway::secret::hash_key(key)],
        "trust_domains": ["default"],
        "max_sessions": 200,
    }))
    .expect("tenant")
}

/// An LDP delegate offering `chat` whose every result has an output of `bytes` bytes.
async fn big_answers(bytes: usize) -> Liar {
    Liar::start(move |a| {
        if is_card(&a.path) {
            return Lie::new(200).json(&ldp_card("big", "chat", 0.9, 0.0));
        }
        if let Some(lie) = handshake("big", a) {
            return lie;
        }
        let env: serde_json::Value = serde_json::from_str(&a.body).unwrap_or_default();
        let body = json!({"type": "TASK_RESULT", "task_id": env["body"]["task_id"],
            "output": "y".repeat(bytes),
            "provenance": {"produced_by": "ldp:delegate:big", "model_version": "v1",
                           "payload_mode_used": "text"}});
        Lie::new(200).json(&json!({
            "message_id": uuid::Uuid::new_v4().to_string(), "session_id": "big-session",
            "from": "ldp:delegate:big", "to": "ldp:delegate:gateway", "body": body,
            "payload_mode": "text", "timestamp": chrono::Utc::now().to_rfc3339()
        }))
    })
    .await
}

/// Runs `n` futures made by `f`, 16 at a time; their outputs in completion order.
async fn flood<F, T>(n: usize, f: impl Fn(usize) -> F) -> Vec<T>
where
    F: std::future::Future<Output = T>,
{
    futures_util::stream::iter((0..n).map(f))
        .buffer_unordered(16)
        .collect()
        .await
}

/// Item 2: beta's made-up LADP senders (more than the 16,384 rate keys the whole gateway
/// once had) fill beta's share of the rate table, refused with `Retry-After`; alpha's agent,
/// and a new agent of alpha's, are still admitted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_ladp_senders_does_not_lock_another_tenant_out() {
    let mut fast = SimOptions::new(card("solo", "default", &[("qa", 0.9)], &["text"]));
    fast.latency = Duration::ZERO;
    let gw = TestGateway::builder()
        .sim(fast)
        .tenant(tenant("alpha", ALPHA))
        .tenant(tenant("beta", BETA))
        .config(|c| c.ladp.max_rate_bytes = 64 * 1024)
        .spawn()
        .await;
    let first = ladp(&gw, Some(ALPHA), task_init("alpha-agent", 1, "hello", "")).await;
    assert_eq!(first.status, 200, "{}", first.text);
    let status = |i: usize| format!("(msg status-request made-up-{i} gateway {i} (data))");
    let answers = flood(16_500, |i| {
        let gw = &gw;
        let m = status(i);
        async move {
            let a = ladp(gw, Some(BETA), m).await;
            let wait = a
                .headers
                .get("retry-after")
                .map(|v| v.to_str().unwrap_or_default().to_owned());
            (a.status, wait)
        }
    })
    .await;
    for (sender, ms) in [("alpha-agent", 2), ("alpha-new-agent", 1)] {
        let a = ladp(&gw, Some(ALPHA), task_init(sender, ms, "again", "")).await;
        assert_eq!(a.status, 200, "{sender}: {}", a.text);
    }
    let refused: Vec<&(u16, Option<String>)> = answers.iter().filter(|(s, _)| *s == 429).collect();
    eprintln!(
        "16,500 made-up senders of beta's: {} refused with Retry-After; alpha's agents admitted",
        refused.len()
    );
    assert!(
        refused.len() > 10_000,
        "beta's share holds a few hundred agents: {} of 16,500 refused",
        refused.len()
    );
    for (_, wait) in &refused {
        let secs: u64 = wait
            .as_deref()
            .expect("Retry-After")
            .parse()
            .expect("seconds");
        assert!((1..=60).contains(&secs), "{secs}");
    }
    let scrape = gw.metrics().await;
    assert!(scrape.sum("ldp_gateway_table_refusals_total{table=\"ladp_rates\"}") >= 10_000.0);
    assert_eq!(
        scrape.sum(
            "ldp_gateway_table_evictions_total{table=\"ladp_rates\",tenant_class=\"within_share\"}"
        ),
        0.0
    );
    gw.shutdown().await;
}

/// Item 4: beta's cheap `task-init`s from made-up senders (more than the 4,096 agents the
/// whole gateway once remembered) leave alpha's running task findable: its status says
/// `running`, its `halt` cancels it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_ladp_agents_does_not_make_a_running_task_unstoppable() {
    let mut fast = SimOptions::new(card("solo", "default", &[("qa", 0.9)], &["text"]));
    fast.latency = Duration::ZERO;
    let mut slow = SimOptions::new(card("slow", "default", &[("ponder", 0.9)], &["text"]));
    slow.latency = Duration::from_secs(60);
    let gw = TestGateway::builder()
        .sim(fast)
        .sim(slow)
        .tenant(tenant("alpha", ALPHA))
        .tenant(tenant("beta", BETA))
        .config(|c| {
            c.ladp.max_book_bytes = 256 * 1024;
            // Alpha's agent asks more than four times a minute here.
            c.ladp.rate_per_minute = 600;
        })
        .spawn()
        .await;
    let slow_task =
        "(msg task-init alpha-agent gateway 1\n  (data (skill ponder) (task \"think\")))";
    let running = tokio::spawn({
        let url = gw.ldp_url();
        async move {
            reqwest::Client::new()
                .post(format!("{url}/ladp"))
                .bearer_auth(ALPHA)
                .header("content-type", "text/plain")
                .body(slow_task)
                .send()
                .await
                .expect("POST /ladp")
                .text()
                .await
                .unwrap_or_default()
        }
    });
    let slow = gw.sim(1);
    let started =
        crate::support::eventually(Duration::from_secs(30), || slow.stats().tasks >= 1).await;
    assert!(started, "alpha's task reached its delegate");
    let done = flood(4_200, |i| {
        let gw = &gw;
        async move {
            ladp(
                gw,
                Some(BETA),
                task_init(&format!("made-up-{i}"), 1, "x", ""),
            )
            .await
            .status
        }
    })
    .await;
    assert!(done.iter().all(|s| *s == 200), "beta's tasks ran");
    let s = ladp(
        &gw,
        Some(ALPHA),
        "(msg status-request alpha-agent gateway 3 (data))",
    )
    .await;
    assert!(s.text.contains("(phase running)"), "{}", s.text);
    let h = ladp(&gw, Some(ALPHA), "(msg halt alpha-agent gateway 4 (data))").await;
    assert!(h.text.contains("(cancelled 1)"), "{}", h.text);
    let answer = tokio::time::timeout(Duration::from_secs(30), running)
        .await
        .expect("the halted task ends")
        .expect("joined");
    assert!(answer.contains("CANCELLED"), "{answer}");
    gw.shutdown().await;
}

/// Item 3: A2A tasks are weighed: beta's tasks with ~300 KB outputs stay within the table's
/// bytes, and alpha's finished task is still there for `GetTask`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a2a_tasks_are_weighed_and_a_flood_keeps_to_its_share() {
    let big = big_answers(300_000).await;
    const BOUND: u64 = 2 << 20;
    let gw = TestGateway::builder()
        .delegate(&big.url)
        .tenant(tenant("alpha", ALPHA))
        .tenant(tenant("beta", BETA))
        .config(|c| {
            c.a2a.max_task_bytes = BOUND;
            c.a2a.default_skill = Some("chat".into());
        })
        .spawn()
        .await;
    let (alpha, beta) = (
        gw.client().with_key(Some(ALPHA)),
        gw.client().with_key(Some(BETA)),
    );
    let sent = rpc(
        &alpha,
        "SendMessage",
        v1_message("alpha's question", json!({})),
        Some("1.0"),
    )
    .await;
    let mine = sent.json["result"]["task"]["id"]
        .as_str()
        .expect("task id")
        .to_owned();
    let mut theirs = Vec::new();
    for i in 0..30 {
        let r = rpc(
            &beta,
            "SendMessage",
            v1_message(&format!("beta {i}"), json!({})),
            Some("1.0"),
        )
        .await;
        assert_eq!(
            r.json["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
            "{}",
            r.json
        );
        theirs.push(
            r.json["result"]["task"]["id"]
                .as_str()
                .expect("id")
                .to_owned(),
        );
    }
    let get =
        |c, id: String| async move { rpc(c, "GetTask", json!({"id": id}), Some("1.0")).await };
    let kept = get(&alpha, mine.clone()).await;
    assert_eq!(
        kept.json["result"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{}",
        kept.json
    );
    assert!(kept.raw.len() > 300_000, "with its output");
    let mut held = 0;
    for id in &theirs {
        let r = get(&beta, id.clone()).await;
        if r.json.get("result").is_some() {
            held += r.raw.len();
        }
    }
    eprintln!("30 tasks of ~300 KB under a {BOUND}-byte table: {held} bytes still answered");
    assert!(
        held as u64 <= BOUND,
        "{held} bytes of beta's tasks kept under {BOUND}"
    );
    assert!(held > 0, "beta keeps its newest");
    let scrape = gw.metrics().await;
    let bytes = scrape.sum("ldp_gateway_table_bytes{table=\"a2a_tasks\"");
    assert!(bytes > 0.0 && bytes <= BOUND as f64, "{bytes}");
    gw.shutdown().await;
}

/// Item 5: beta's many sessions with big turns leave alpha's live conversation whole: its
/// next turn reaches the model with its earlier turns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_sessions_does_not_wipe_another_tenants_conversation() {
    let oa = start(OpenAiOptions::new("m")).await;
    const BUDGET: u64 = 1 << 20;
    let gw = TestGateway::builder()
        .entry(entry("mini", &oa.url(), "m", declared(&["chat"], 0.8)))
        .tenant(tenant("alpha", ALPHA))
        .tenant(tenant("beta", BETA))
        .config(|c| c.openai.memory_bytes = BUDGET)
        .spawn()
        .await;
    let (alpha, beta) = (
        gw.client().with_key(Some(ALPHA)),
        gw.client().with_key(Some(BETA)),
    );
    let config = json!({"preferred_payload_modes": ["text"]});
    let (mine, _) = alpha.session(config.clone()).await;
    for t in 0..2 {
        let a = alpha
            .task(&mine, "chat", json!(format!("alpha turn {t}")), "text")
            .await;
        assert_eq!(a["type"], "TASK_RESULT", "{a}");
    }
    for s in 0..40 {
        let (sid, _) = beta.session(config.clone()).await;
        for t in 0..2 {
            let input = format!("beta {s} {t} {}", "x".repeat(20_000));
            let a = beta.task(&sid, "chat", json!(input), "text").await;
            assert_eq!(a["type"], "TASK_RESULT", "{a}");
        }
    }
    let a = alpha.task(&mine, "chat", json!("and then?"), "text").await;
    assert_eq!(a["type"], "TASK_RESULT", "{a}");
    let sent = oa.requests();
    let messages = sent.last().expect("a request")["messages"]
        .as_array()
        .expect("messages")
        .len();
    assert_eq!(messages, 5, "alpha's two turns and its question");
    let scrape = gw.metrics().await;
    assert!(scrape.sum("ldp_gateway_conversations_bytes") <= BUDGET as f64);
    assert!(scrape.sum("ldp_gateway_table_evictions_total{table=\"conversations\",tenant_class=\"over_share\"}") >= 10.0);
    gw.shutdown().await;
    oa.shutdown().await;
}

/// Item 6: beta's tasks with big answers leave alpha's just-finished task in the status
/// store: its status query answers its result well inside the TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn big_answers_of_one_tenant_do_not_evict_anothers_task_status() {
    let big = big_answers(300_000).await;
    const BOUND: u64 = 4 << 20;
    let gw = TestGateway::builder()
        .delegate(&big.url)
        .tenant(tenant("alpha", ALPHA))
        .tenant(tenant("beta", BETA))
        .config(|c| c.task_status.max_bytes = BOUND)
        .spawn()
        .await;
    let (alpha, beta) = (
        gw.client().with_key(Some(ALPHA)),
        gw.client().with_key(Some(BETA)),
    );
    let (mine, _) = alpha.session(json!({})).await;
    let a = alpha
        .task(&mine, "chat", json!("alpha's question"), "text")
        .await;
    assert_eq!(a["type"], "TASK_RESULT", "{a}");
    let task_id = a["task_id"].as_str().expect("task id").to_owned();
    let query = |id: &str| json!({"type": "TASK_UPDATE", "task_id": id, "message": "status_query"});
    let (theirs, _) = beta.session(json!({})).await;
    let mut ids = Vec::new();
    for i in 0..100 {
        let r = beta
            .task(&theirs, "chat", json!(format!("beta {i}")), "text")
            .await;
        assert_eq!(r["type"], "TASK_RESULT");
        ids.push(r["task_id"].as_str().expect("id").to_owned());
    }
    let r = alpha.post_body("", query(&task_id)).await;
    assert_eq!(r.json["body"]["type"], "TASK_RESULT", "{}", r.json);
    let newest = beta.post_body("", query(&ids[99])).await;
    assert_eq!(newest.json["body"]["type"], "TASK_RESULT");
    let oldest = beta.post_body("", query(&ids[0])).await;
    assert_eq!(oldest.json["body"]["error"]["code"], "TASK_NOT_FOUND");
    let scrape = gw.metrics().await;
    let bytes = scrape.sum("ldp_gateway_task_status_bytes");
    eprintln!(
        "100 answers of 300 KB of beta's under {BOUND}: alpha's status kept, {bytes} bytes held"
    );
    assert!(bytes > 0.0 && bytes <= BOUND as f64, "{bytes}");
    gw.shutdown().await;
}

/// Item 9: the gateway numbers its LLMX answers per tenant and recipient (alpha sees 1,
/// then 2, whatever beta sent between); and beta's made-up senders (more than the 10,000 the
/// whole gateway once remembered) do not make alpha's sender forgotten, so its old sequence
/// number is still refused as a replay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn llmx_numbers_and_replays_are_kept_per_tenant() {
    let mut fast = SimOptions::new(card("solo", "default", &[("summarize", 0.9)], &["text"]));
    fast.latency = Duration::ZERO;
    let gw = TestGateway::builder()
        .sim(fast)
        .tenant(tenant("alpha", ALPHA))
        .tenant(tenant("beta", BETA))
        .config(|c| c.llmx.max_sender_bytes = 256 * 1024)
        .spawn()
        .await;
    let msg = |f: &str, s: u64| {
        format!("HEADER:{{f:{f},t:g,s:{s}}}\nREQ:{{o:\"x\",pr:3,exp:[summarize]}}")
    };
    let seq = |a: &crate::bridge_llmx::Answer| a.message().header.seq;
    let first = llmx(&gw, Some(ALPHA), msg("Alpha", 5)).await;
    assert_eq!((first.status, seq(&first)), (200, 1), "{}", first.body);
    for s in 1..=37 {
        let a = llmx(&gw, Some(BETA), msg("Beta", s)).await;
        assert_eq!(a.status, 200, "{}", a.body);
    }
    let second = llmx(&gw, Some(ALPHA), msg("Alpha", 6)).await;
    assert_eq!((second.status, seq(&second)), (200, 2), "{}", second.body);
    // Made-up senders of beta's, each a REQ for a skill nobody offers (a BLK, no task).
    let nobody =
        |i: usize| format!("HEADER:{{f:MadeUp{i},t:g,s:1}}\nREQ:{{o:\"x\",pr:3,exp:[nothing]}}");
    let statuses = flood(10_050, |i| {
        let gw = &gw;
        let m = nobody(i);
        async move { llmx(gw, Some(BETA), m).await.status }
    })
    .await;
    assert!(
        statuses.iter().all(|s| *s == 200 || *s == 409 || *s == 404),
        "{statuses:?}"
    );
    let replay = llmx(&gw, Some(ALPHA), msg("Alpha", 6)).await;
    assert_eq!(replay.status, 409, "a replay of alpha's: {}", replay.body);
    let scrape = gw.metrics().await;
    assert!(
        scrape.sum(
            "ldp_gateway_table_evictions_total{table=\"llmx_senders\",tenant_class=\"over_share\"}"
        ) > 0.0
    );
    gw.shutdown().await;
}

/// Sessions (not in the list, the same mistake): a tenant without a session cap of
/// its own could take every one of the gateway's `[security] max_sessions` and lock every
/// other tenant out of new sessions until its idle TTL. Each is now held to its share.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_sessions_leaves_another_tenant_its_share_of_the_session_cap() {
    let uncapped = |name: &str, key: &str| -> TenantConfig {
        serde_json::from_value(json!({
            "name": name,
            "api_key_sha256": [ldp_gateway::secret::hash_key(key)],
            "trust_domains": ["default"],
        }))
        .expect("tenant")
    };
    let gw = TestGateway::builder()
        .sim(SimOptions::new(card(
            "solo",
            "default",
            &[("qa", 0.9)],
            &["text"],
        )))
        .tenant(uncapped("alpha", ALPHA))
        .tenant(uncapped("beta", BETA))
        .config(|c| c.security.max_sessions = 20)
        .spawn()
        .await;
    let (alpha, beta) = (
        gw.client().with_key(Some(ALPHA)),
        gw.client().with_key(Some(BETA)),
    );
    let mut accepted = 0;
    for _ in 0..20 {
        let b = beta.propose(json!({})).await;
        if b["type"] == "SESSION_ACCEPT" {
            accepted += 1;
        } else {
            assert_eq!(b["error"]["code"], "SESSION_LIMIT", "{b}");
        }
    }
    let a = alpha.propose(json!({})).await;
    assert_eq!(a["type"], "SESSION_ACCEPT", "alpha locked out: {a}");
    assert_eq!(accepted, 10, "beta held to half of the 20");
    gw.shutdown().await;
}
