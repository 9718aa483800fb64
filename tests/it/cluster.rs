//! Cluster mode against the real servers on this machine: the Postgres ledger (same trait,
//! same queries as SQLite) and, further down, replicas sharing Redis.
//!
//! Postgres: `LDP_TEST_POSTGRES` (default `postgres://postgres@127.0.0.1:5432`); each test
//! creates its own database and drops it. Redis: `LDP_TEST_REDIS` (default
//! `redis://127.0.0.1:6379`); each test uses its own key prefix.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests fail loudly")]

mod common;

use common::ledger_contract::{self, row};
use common::{card, gateway_with, sim, Client};
use ldp_gateway::provenance::{Backend, Durability, PostgresBackend, Query};
use ldp_gateway::server::Gateway;
use ldp_gateway::sim::SimOptions;
use serde_json::{json, Value};
use std::time::Duration;

fn postgres_base() -> String {
    std::env::var("LDP_TEST_POSTGRES")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432".into())
}

/// A database of its own for one test, dropped at the end. The blocking client runs on a
/// plain thread (it refuses to run inside the test's runtime).
struct TempDb {
    name: String,
}

fn admin_sql(sql: String) {
    std::thread::spawn(move || {
        let mut c =
            postgres::Client::connect(&format!("{}/postgres", postgres_base()), postgres::NoTls)
                .expect("Postgres at LDP_TEST_POSTGRES (default 127.0.0.1:5432) must be running");
        c.batch_execute(&sql).unwrap();
    })
    .join()
    .unwrap();
}

impl TempDb {
    fn new() -> TempDb {
        let name = format!("ldp_test_{}", uuid::Uuid::new_v4().simple());
        admin_sql(format!("CREATE DATABASE {name}"));
        TempDb { name }
    }

    fn url(&self) -> String {
        format!("{}/{}", postgres_base(), self.name)
    }
}

impl Drop for TempDb {
    fn drop(&mut self) {
        admin_sql(format!(
            "DROP DATABASE IF EXISTS {} WITH (FORCE)",
            self.name
        ));
    }
}

#[test]
fn postgres_ledger_stores_queries_and_prunes_like_sqlite() {
    let db = TempDb::new();
    let mut b =
        PostgresBackend::open(&db.url(), Durability::Commit, Duration::from_secs(5)).unwrap();
    ledger_contract::check(&mut b);
    // The database drops the connection (a restart, a failover): the backend reconnects.
    admin_sql(format!(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
         WHERE datname = '{}' AND application_name = 'ldp-gateway'",
        db.name
    ));
    let _ = b.insert(&[row("lost?", "s", "anonymous", 2_000)]);
    assert!(b.healthy(), "reconnected");
    b.insert(&[row("t10", "s", "anonymous", 2_001)]).unwrap();
    let t10 = Query {
        task_id: Some("t10".into()),
        ..Query::default()
    };
    assert_eq!(ledger_contract::ids(&mut b, t10), ["t10"]);
    drop(b);
    // Reopening (another replica starting) migrates nothing twice and sees the rows.
    let mut again =
        PostgresBackend::open(&db.url(), Durability::Fsync, Duration::from_secs(5)).unwrap();
    let n = again.query(&Query::default()).unwrap().len();
    assert!(
        n == 6 || n == 7,
        "{n} rows: five kept, t10, maybe the row sent as the link broke"
    );
}

#[test]
fn postgres_errors_never_show_the_password() {
    let err = PostgresBackend::open(
        "postgres://postgres:hunter2-secret@127.0.0.1:1/nope",
        Durability::Commit,
        Duration::from_millis(500),
    )
    .err()
    .expect("nothing listens on port 1");
    assert!(!err.to_string().contains("hunter2"), "{err}");
    let cfg_err = ldp_gateway::provenance::redact_url("postgres://u:hunter2@h:5/db");
    assert_eq!(cfg_err, "postgres://u:***@h:5/db");
    assert_eq!(
        ldp_gateway::provenance::redact_url("postgres://h/db?user=u&password=hunter2&sslmode=x"),
        "postgres://h/db?user=u&password=***&sslmode=x"
    );
    assert_eq!(
        ldp_gateway::provenance::redact_url("host=h password=hunter2 dbname=x"),
        "host=h password=*** dbname=x"
    );
}

async fn admin_json(gw: &Gateway, path: &str) -> (u16, Value) {
    let resp = reqwest::get(format!("{}{path}", gw.admin_url()))
        .await
        .unwrap();
    let status = resp.status().as_u16();
    (
        status,
        serde_json::from_str(&resp.text().await.unwrap()).unwrap(),
    )
}

#[tokio::test]
async fn a_gateway_on_postgres_records_every_outcome_and_the_cli_reads_it() {
    let db = TempDb::new();
    let d = echo_sim().await;
    let store = db.url();
    let gw = gateway_with(&[d.url()], 1, |cfg| cfg.provenance.store = store).await;
    let (status, ready) = admin_json(&gw, "/readyz").await;
    assert_eq!((status, &ready["ledger"]), (200, &json!(true)), "{ready}");
    let c = Client::new(&gw.ldp_url());
    let (sid, _) = c.session(json!({})).await;
    let mut outcomes = Vec::new();
    for i in 0..5 {
        let r = c
            .task(&sid, "echo", json!(format!("hello {i}")), "text")
            .await;
        assert_eq!(r["type"], "TASK_RESULT", "{r}");
        outcomes.push(r["task_id"].as_str().unwrap().to_owned());
    }
    let r = c.task(&sid, "nope", json!("x"), "text").await;
    assert_eq!(r["type"], "TASK_FAILED", "{r}");
    outcomes.push(r["task_id"].as_str().unwrap().to_owned());
    let (status, v) = admin_json(&gw, &format!("/admin/provenance?session_id={sid}")).await;
    assert_eq!(status, 200, "{v}");
    let mut recorded: Vec<String> = v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["task_id"].as_str().unwrap().to_owned())
        .collect();
    recorded.sort();
    outcomes.sort();
    assert_eq!(recorded, outcomes, "one row per outcome the client saw");
    // The `provenance` command reads the config's Postgres store.
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("gateway.toml");
    std::fs::write(
        &cfg,
        format!(
            "[policies]\ndir = \"{}/policies\"\n[provenance]\nstore = \"{}\"\n",
            env!("CARGO_MANIFEST_DIR"),
            db.url()
        ),
    )
    .unwrap();
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_ldp-gateway"))
        .args([
            "provenance",
            "--session",
            &sid,
            "--format",
            "csv",
            "--config",
        ])
        .arg(&cfg)
        .env("RUST_LOG", "warn")
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let csv = String::from_utf8(out.stdout).unwrap();
    assert_eq!(csv.lines().count(), 1 + outcomes.len(), "{csv}");
    gw.shutdown().await;
}

// ---------------------------------------------------------------------------------------
// Replicas sharing Redis
// ---------------------------------------------------------------------------------------

use ldp_gateway::config::{BudgetConfig, ClusterConfig, RateConfig, TenantConfig};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

fn redis_url() -> String {
    std::env::var("LDP_TEST_REDIS").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

/// A key prefix of its own per test, so tests sharing one Redis never meet.
fn cluster(url: &str, replicas: u32) -> ClusterConfig {
    ClusterConfig {
        redis_url: Some(url.to_owned()),
        key_prefix: format!("ldptest:{}", uuid::Uuid::new_v4().simple()),
        redis_timeout: Duration::from_millis(200),
        replicas,
    }
}

fn tenant(key: &str) -> TenantConfig {
    serde_json::from_value(json!({
        "name": "acme",
        "api_key_sha256": [ldp_gateway::secret::hash_key(key)],
        "trust_domains": ["default"],
    }))
    .unwrap()
}

/// `n` gateways in front of `urls`, sharing `shared` (one prefix) and `tenant`.
async fn replicas(
    n: usize,
    urls: &[String],
    shared: &ClusterConfig,
    tenant: &TenantConfig,
) -> Vec<Gateway> {
    let mut out = Vec::new();
    for _ in 0..n {
        let (shared, tenant) = (shared.clone(), tenant.clone());
        out.push(
            gateway_with(urls, urls.len(), move |cfg| {
                cfg.cluster = shared;
                cfg.tenants = vec![tenant];
            })
            .await,
        );
    }
    out
}

/// A tenant's client: `Authorization: Bearer`, raw JSON envelopes, one `from`.
#[derive(Clone)]
struct Api {
    http: reqwest::Client,
    key: String,
}

impl Api {
    fn new(key: &str) -> Api {
        Api {
            http: reqwest::Client::new(),
            key: key.to_owned(),
        }
    }

    async fn post(&self, gw: &Gateway, session: &str, body: Value) -> (u16, Value) {
        let env = json!({
            "message_id": uuid::Uuid::new_v4().to_string(), "session_id": session,
            "from": "ldp:client:cluster", "to": "ldp:delegate:gateway", "body": body,
            "payload_mode": "text", "timestamp": chrono::Utc::now().to_rfc3339(),
            "provenance": null,
        });
        let resp = self
            .http
            .post(format!("{}/ldp/messages", gw.ldp_url()))
            .header("authorization", format!("Bearer {}", self.key))
            .header("content-type", "application/json")
            .body(env.to_string())
            .send()
            .await
            .unwrap();
        let status = resp.status().as_u16();
        (
            status,
            serde_json::from_str(&resp.text().await.unwrap()).unwrap_or(Value::Null),
        )
    }

    async fn session(&self, gw: &Gateway) -> String {
        let (status, v) = self
            .post(gw, "", json!({"type": "SESSION_PROPOSE", "config": {}}))
            .await;
        assert_eq!(
            (status, &v["body"]["type"]),
            (200, &json!("SESSION_ACCEPT")),
            "{v}"
        );
        v["body"]["session_id"].as_str().unwrap().to_owned()
    }

    async fn task(&self, gw: &Gateway, session: &str, input: &str) -> Value {
        let (status, v) = self
            .post(
                gw,
                session,
                json!({"type": "TASK_SUBMIT", "task_id": uuid::Uuid::new_v4().to_string(),
                    "skill": "echo", "input": input}),
            )
            .await;
        assert_eq!(status, 200, "{v}");
        v["body"].clone()
    }
}

/// A zero-latency delegate offering `echo`.
async fn echo_sim() -> ldp_gateway::sim::SimHandle {
    sim(SimOptions::new(card(
        "a",
        "default",
        &[("echo", 0.9)],
        &["text"],
    )))
    .await
}

/// A fresh API key.
fn new_key() -> String {
    format!("k-{}", uuid::Uuid::new_v4().simple())
}

/// A card offering `echo` at `price` USD per call.
fn priced_card(price: f64) -> ldp_gateway::ldp::IdentityCard {
    serde_json::from_value(json!({
        "delegate_id": "ldp:delegate:spend", "name": "spend", "model_family": "sim",
        "model_version": "1", "trust_domain": "default", "context_window": 8192,
        "capabilities": [{"name": "echo", "quality": {"quality_score": 0.9,
            "cost_per_call_usd": price, "latency_p50_ms": 50}}],
        "supported_payload_modes": ["text"]
    }))
    .unwrap()
}

fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(name))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

async fn metrics(gw: &Gateway) -> String {
    reqwest::get(format!("{}/metrics", gw.admin_url()))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_replicas_admit_no_more_than_one_tenant_limit() {
    let d = echo_sim().await;
    let key = new_key();
    let mut t = tenant(&key);
    let (rps, burst) = (20.0, 10u32);
    t.limits = Some(RateConfig {
        rps,
        burst: Some(burst),
    });
    let shared = cluster(&redis_url(), 3);
    let gws = Arc::new(replicas(3, &[d.url()], &shared, &t).await);
    let api = Api::new(&key);
    let admitted = Arc::new(AtomicUsize::new(0));
    let refused = Arc::new(AtomicUsize::new(0));
    let start = std::time::Instant::now();
    let run_for = Duration::from_millis(1500);
    let workers: Vec<_> = (0..12)
        .map(|w| {
            let (gws, api, admitted, refused) =
                (gws.clone(), api.clone(), admitted.clone(), refused.clone());
            tokio::spawn(async move {
                let mut i = w;
                while start.elapsed() < run_for {
                    let gw = &gws[i % gws.len()];
                    i += 1;
                    let (status, v) = api
                        .post(
                            gw,
                            "",
                            json!({"type": "HELLO", "delegate_id": "ldp:client:c",
                            "supported_modes": ["text"]}),
                        )
                        .await;
                    match status {
                        200 => admitted.fetch_add(1, Ordering::Relaxed),
                        429 => refused.fetch_add(1, Ordering::Relaxed),
                        other => panic!("HTTP {other}: {v}"),
                    };
                }
            })
        })
        .collect();
    for w in workers {
        w.await.unwrap();
    }
    let elapsed = start.elapsed().as_secs_f64();
    let admitted = admitted.load(Ordering::Relaxed);
    let refused = refused.load(Ordering::Relaxed);
    // GCRA: at most the burst plus the rate over the time the requests spanned.
    let allowed = f64::from(burst) + rps * elapsed;
    let over = (admitted as f64 - allowed).max(0.0);
    eprintln!(
        "cluster rate limit: {admitted} admitted, {refused} refused over {elapsed:.2} s across 3 \
         replicas (limit {rps}/s, burst {burst}: at most {allowed:.1}); over-admission {over}"
    );
    assert!(refused > 0, "the load must exceed the limit");
    assert!(
        admitted as f64 >= rps * 1.0,
        "{admitted} admitted: the limit was not shared fairly"
    );
    assert_eq!(over, 0.0, "{admitted} admitted > {allowed:.1}");
    // Every decision was made in Redis, none locally.
    let mut fallbacks = 0.0;
    for gw in gws.iter() {
        let m = metrics(gw).await;
        fallbacks += metric(&m, "ldp_gateway_rate_limit_local_fallbacks_total");
        assert_eq!(metric(&m, "ldp_gateway_redis_errors_total"), 0.0);
    }
    assert_eq!(fallbacks, 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_budget_shared_by_three_replicas_is_not_overshot_by_100_concurrent_tasks() {
    const PRICE: f64 = 0.01;
    let mut opts = SimOptions::new(priced_card(PRICE));
    opts.latency = Duration::from_millis(30);
    let d = sim(opts).await;
    let key = new_key();
    let mut t = tenant(&key);
    let limit = 20.0 * PRICE;
    t.budget = BudgetConfig {
        usd_per_day: Some(limit),
        ..BudgetConfig::default()
    };
    let shared = cluster(&redis_url(), 3);
    let gws = Arc::new(replicas(3, &[d.url()], &shared, &t).await);
    let api = Api::new(&key);
    let mut sessions = Vec::new();
    for gw in gws.iter() {
        sessions.push(api.session(gw).await);
    }
    let tasks: Vec<_> = (0..100)
        .map(|i| {
            let (gws, api, sid) = (gws.clone(), api.clone(), sessions[i % 3].clone());
            tokio::spawn(async move { api.task(&gws[i % 3], &sid, "spend").await })
        })
        .collect();
    let mut results = 0;
    let mut charged = 0.0;
    for t in tasks {
        let b = t.await.unwrap();
        match b["type"].as_str() {
            Some("TASK_RESULT") => {
                results += 1;
                charged += b["provenance"]["cost_usd"].as_f64().unwrap_or(PRICE);
            }
            _ => assert_eq!(b["error"]["code"], "BUDGET_EXCEEDED", "{b}"),
        }
    }
    // The shared account, as Redis holds it.
    let metrics_c = Arc::new(ldp_gateway::telemetry::Metrics::new().unwrap());
    let c = ldp_gateway::cluster::Cluster::from_config(&shared, metrics_c)
        .unwrap()
        .unwrap();
    let (spent, _) = c.spent("acme").await.unwrap();
    let overshoot = (spent - limit).max(0.0);
    eprintln!(
        "cluster budget: 100 concurrent tasks over 3 replicas, usd_per_day {limit}: {results} \
         results, charged {charged:.4}, shared spend {spent:.4}; overshoot {overshoot}"
    );
    assert!(results > 0);
    assert!(
        (spent - charged).abs() < 1e-9,
        "spend {spent} != charged {charged}"
    );
    assert_eq!(overshoot, 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_session_opened_on_one_replica_is_served_and_closed_on_the_others() {
    let d = echo_sim().await;
    let key = new_key();
    let shared = cluster(&redis_url(), 3);
    let gws = replicas(3, &[d.url()], &shared, &tenant(&key)).await;
    let api = Api::new(&key);
    let sid = api.session(&gws[0]).await;
    let mut upstream = Vec::new();
    for (i, gw) in gws.iter().enumerate() {
        let r = api.task(gw, &sid, &format!("hello from replica {i}")).await;
        assert_eq!(r["type"], "TASK_RESULT", "replica {i}: {r}");
        assert_eq!(r["provenance"]["session_id"], json!(sid));
        upstream.push(r["provenance"]["lineage"][0]["routed_to"].clone());
    }
    // One upstream session, opened by the first task and reused by the other replicas.
    assert_eq!(
        d.stats().accepted,
        1,
        "the binding travels with the session"
    );
    // Closed from C: gone on A and B too.
    let (status, v) = api
        .post(
            &gws[2],
            &sid,
            json!({"type": "SESSION_CLOSE", "reason": "done"}),
        )
        .await;
    assert_eq!(
        (status, &v["body"]["type"]),
        (200, &json!("SESSION_CLOSE")),
        "{v}"
    );
    for gw in &gws[..2] {
        let r = api.task(gw, &sid, "after close").await;
        assert_eq!(r["type"], "TASK_FAILED", "{r}");
        assert_eq!(r["error"]["code"], "SESSION_NOT_FOUND", "{r}");
    }
    for gw in gws {
        gw.shutdown().await;
    }
}

/// A private `redis-server` on a free port, so the test may stop, freeze and restart it.
struct PrivateRedis {
    port: u16,
    child: Option<std::process::Child>,
}

impl PrivateRedis {
    fn start() -> PrivateRedis {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut r = PrivateRedis { port, child: None };
        r.restart();
        r
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    fn restart(&mut self) {
        let child = std::process::Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--port", &self.port.to_string()])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("redis-server (Debian package redis-server) must be installed");
        self.child = Some(child);
        // Ready when it answers PING.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let ping = redis::Client::open(self.url())
                .and_then(|c| c.get_connection())
                .and_then(|mut c| redis::cmd("PING").query::<String>(&mut c));
            if ping.is_ok() {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "private redis did not start"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn signal(&self, sig: &str) {
        if let Some(c) = &self.child {
            let ok = std::process::Command::new("kill")
                .args([sig, &c.id().to_string()])
                .status()
                .unwrap();
            assert!(ok.success());
        }
    }

    fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        self.signal("-CONT");
        self.stop();
    }
}

async fn ready(gw: &Gateway) -> (u16, Value) {
    admin_json(gw, "/readyz").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_stopped_mid_run_fails_closed_falls_back_and_recovers() {
    let d = sim(SimOptions::new(priced_card(0.001))).await;
    let mut redis = PrivateRedis::start();
    let key = new_key();
    let mut t = tenant(&key);
    t.limits = Some(RateConfig {
        rps: 1000.0,
        burst: Some(1000),
    });
    t.budget = BudgetConfig {
        usd_per_day: Some(1.0),
        ..BudgetConfig::default()
    };
    let shared = cluster(&redis.url(), 2);
    let gw = replicas(1, &[d.url()], &shared, &t).await.remove(0);
    let api = Api::new(&key);
    let sid = api.session(&gw).await;
    assert_eq!(api.task(&gw, &sid, "before").await["type"], "TASK_RESULT");
    assert_eq!(ready(&gw).await.0, 200);

    // Frozen (SIGSTOP): every call still ends at its deadline; limits fall back locally.
    redis.signal("-STOP");
    let hello =
        json!({"type": "HELLO", "delegate_id": "ldp:client:c", "supported_modes": ["text"]});
    let t0 = std::time::Instant::now();
    let (status, v) = api.post(&gw, "", hello.clone()).await;
    assert_eq!(status, 200, "a frozen Redis must not stop HELLO: {v}");
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    redis.signal("-CONT");

    // Stopped: budgets and sessions fail closed with a retryable error; limits fall back.
    redis.stop();
    let (status, v) = api.post(&gw, "", hello.clone()).await;
    assert_eq!(status, 200, "{v}");
    let m = metrics(&gw).await;
    assert!(
        metric(&m, "ldp_gateway_rate_limit_local_fallbacks_total") >= 2.0,
        "{m}"
    );
    assert_eq!(metric(&m, "ldp_gateway_redis_up"), 0.0);
    let r = api.task(&gw, &sid, "during").await;
    assert_eq!(r["type"], "TASK_FAILED", "{r}");
    assert_eq!(r["error"]["code"], "SHARED_STATE_UNAVAILABLE", "{r}");
    assert_eq!(r["error"]["retryable"], true, "{r}");
    let (status, v) = api
        .post(&gw, "", json!({"type": "SESSION_PROPOSE", "config": {}}))
        .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["body"]["type"], "SESSION_REJECT", "{v}");
    assert_eq!(
        v["body"]["error"]["code"], "SHARED_STATE_UNAVAILABLE",
        "{v}"
    );
    assert_eq!(v["body"]["error"]["retryable"], true, "{v}");
    let (status, v) = ready(&gw).await;
    assert_eq!((status, &v["redis"]), (503, &json!(false)), "{v}");

    // Back (empty: it kept nothing): new sessions and tasks work again without a restart.
    redis.restart();
    let mut back = false;
    for _ in 0..100 {
        if ready(&gw).await.0 == 200 {
            back = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(back, "the gateway did not notice Redis return");
    let sid = api.session(&gw).await;
    assert_eq!(api.task(&gw, &sid, "after").await["type"], "TASK_RESULT");
    assert_eq!(metric(&metrics(&gw).await, "ldp_gateway_redis_up"), 1.0);
    gw.shutdown().await;
}

/// A replica as its own process (`ldp-gateway serve`), killed on drop.
struct Replica {
    child: tokio::process::Child,
    ldp: String,
}

impl Replica {
    async fn spawn(dir: &std::path::Path, name: &str, config: &str) -> Replica {
        use tokio::io::AsyncBufReadExt;
        let path = dir.join(format!("{name}.toml"));
        std::fs::write(&path, config).unwrap();
        let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_ldp-gateway"))
            .args(["serve", "--config"])
            .arg(&path)
            .env("RUST_LOG", "warn")
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let ldp = tokio::time::timeout(Duration::from_secs(20), async {
            while let Some(line) = lines.next_line().await.unwrap() {
                if let Some(url) = line.strip_prefix("LDP endpoint:") {
                    return url.trim().to_owned();
                }
            }
            panic!("{name} exited before listening");
        })
        .await
        .expect("replica starts");
        // Keep reading: a closed pipe would kill the replica at its next line of output.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Replica { child, ldp }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ledger_rows_across_replicas_equal_outcomes_and_survive_kill_9() {
    let db = TempDb::new();
    let mut opts = SimOptions::new(card("a", "default", &[("echo", 0.9)], &["text"]));
    opts.latency = Duration::from_millis(5);
    let d = sim(opts).await;
    let key = new_key();
    let dir = tempfile::tempdir().unwrap();
    let prefix = format!("ldptest:{}", uuid::Uuid::new_v4().simple());
    let config = format!(
        r#"[server]
listen = "127.0.0.1:0"
[admin]
listen = "127.0.0.1:0"
[policies]
dir = "{policies}/policies"
[provenance]
store = "{store}"
[cluster]
redis_url = "{redis}"
key_prefix = "{prefix}"
replicas = 2
[[tenants]]
name = "acme"
api_key_sha256 = ["{hash}"]
trust_domains = ["default"]
[[delegates]]
url = "{delegate}"
name = "d0"
"#,
        policies = env!("CARGO_MANIFEST_DIR"),
        store = db.url(),
        redis = redis_url(),
        hash = ldp_gateway::secret::hash_key(&key),
        delegate = d.url(),
    );
    let a = Replica::spawn(dir.path(), "a", &config).await;
    let mut b = Replica::spawn(dir.path(), "b", &config).await;
    let urls = [a.ldp.clone(), b.ldp.clone()];
    let http = reqwest::Client::new();
    let key2 = key.clone();
    let post = move |base: String, session: String, body: Value| {
        let (http, key) = (http.clone(), key2.clone());
        async move {
            let env = json!({
                "message_id": uuid::Uuid::new_v4().to_string(), "session_id": session,
                "from": "ldp:client:cluster", "to": "ldp:delegate:gateway", "body": body,
                "payload_mode": "text", "timestamp": chrono::Utc::now().to_rfc3339(),
            });
            let resp = http
                .post(format!("{base}/ldp/messages"))
                .header("authorization", format!("Bearer {key}"))
                .header("content-type", "application/json")
                .body(env.to_string())
                .send()
                .await
                .ok()?;
            serde_json::from_str::<Value>(&resp.text().await.ok()?).ok()
        }
    };
    // Wait until both replicas see the delegate, then one session used through both.
    let mut sid = None;
    for _ in 0..200 {
        if let Some(v) = post(
            urls[0].clone(),
            String::new(),
            json!({"type": "SESSION_PROPOSE", "config": {}}),
        )
        .await
        {
            if v["body"]["type"] == "SESSION_ACCEPT" {
                sid = v["body"]["session_id"].as_str().map(str::to_owned);
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let sid = sid.expect("a session");
    let acknowledged = Arc::new(std::sync::Mutex::new(Vec::<(String, String)>::new()));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let workers: Vec<_> = (0..8)
        .map(|w| {
            let (urls, sid, acknowledged, stop, post) =
                (urls.clone(), sid.clone(), acknowledged.clone(), stop.clone(), post.clone());
            tokio::spawn(async move {
                let mut i = 0usize;
                while !stop.load(Ordering::Relaxed) {
                    let task_id = format!("w{w}-{i}");
                    let base = urls[(w + i) % 2].clone();
                    i += 1;
                    let body = json!({"type": "TASK_SUBMIT", "task_id": task_id, "skill": "echo", "input": "x"});
                    if let Some(v) = post(base, sid.clone(), body).await {
                        let kind = v["body"]["type"].as_str().unwrap_or("").to_owned();
                        if kind == "TASK_RESULT" || kind == "TASK_FAILED" {
                            acknowledged.lock().unwrap().push((task_id, kind));
                        } else {
                            eprintln!("unexpected answer: {v}");
                        }
                    }
                }
            })
        })
        .collect();
    // Let both replicas serve, then kill -9 replica B mid-run; A carries on.
    let served = |n: usize| acknowledged.lock().unwrap().len() >= n;
    assert!(common::eventually(Duration::from_secs(20), || served(100)).await);
    b.child.start_kill().unwrap();
    b.child.wait().await.unwrap();
    let after_kill = acknowledged.lock().unwrap().len();
    assert!(common::eventually(Duration::from_secs(20), || served(after_kill + 100)).await);
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.await.unwrap();
    }
    let acknowledged = acknowledged.lock().unwrap().clone();
    let results = acknowledged
        .iter()
        .filter(|(_, k)| k == "TASK_RESULT")
        .count();
    assert!(
        acknowledged.len() >= 200 && results > 0,
        "{results} results"
    );
    // Every acknowledged outcome has exactly one row, whichever replica answered it.
    let url = db.url();
    let rows: Vec<(String, String)> = tokio::task::spawn_blocking(move || {
        let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        c.query("SELECT task_id, outcome FROM ledger", &[])
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect()
    })
    .await
    .unwrap();
    let mut by_task = std::collections::HashMap::new();
    for (t, o) in &rows {
        *by_task.entry(t.clone()).or_insert(0) += 1;
        let _ = o;
    }
    let missing: Vec<&String> = acknowledged
        .iter()
        .map(|(t, _)| t)
        .filter(|t| !by_task.contains_key(*t))
        .collect();
    assert!(
        missing.is_empty(),
        "acknowledged but not recorded: {missing:?}"
    );
    assert!(by_task.values().all(|n| *n == 1), "a task recorded twice");
    for (t, kind) in &acknowledged {
        let outcome = rows.iter().find(|(id, _)| id == t).map(|(_, o)| o.as_str());
        let want = if kind == "TASK_RESULT" {
            "result"
        } else {
            "failed"
        };
        assert_eq!(outcome, Some(want), "{t}");
    }
    eprintln!(
        "postgres ledger across 2 replica processes, one killed with SIGKILL mid-run: {} \
         outcomes acknowledged, {} rows, none missing",
        acknowledged.len(),
        rows.len()
    );
    drop(a);
}

#[tokio::test]
async fn redis_round_trips_per_task_are_one_per_shared_check() {
    let d = echo_sim().await;
    let key = new_key();
    let mut t = tenant(&key);
    let plain = replicas(1, &[d.url()], &cluster(&redis_url(), 1), &t)
        .await
        .remove(0);
    t.limits = Some(RateConfig {
        rps: 1000.0,
        burst: Some(1000),
    });
    t.skill_limits = t.limits;
    t.budget = BudgetConfig {
        usd_per_day: Some(100.0),
        ..BudgetConfig::default()
    };
    let limited = replicas(1, &[d.url()], &cluster(&redis_url(), 1), &t)
        .await
        .remove(0);
    let api = Api::new(&key);
    let mut per_task = Vec::new();
    for gw in [&plain, &limited] {
        let sid = api.session(gw).await;
        assert_eq!(api.task(gw, &sid, "warm").await["type"], "TASK_RESULT");
        let before = metric(&metrics(gw).await, "ldp_gateway_redis_calls_total");
        for _ in 0..10 {
            assert_eq!(api.task(gw, &sid, "x").await["type"], "TASK_RESULT");
        }
        let after = metric(&metrics(gw).await, "ldp_gateway_redis_calls_total");
        per_task.push((after - before) / 10.0);
    }
    eprintln!(
        "redis round trips per task: {} (session only), {} (tenant limit, tenant × skill limit, daily budget)",
        per_task[0], per_task[1]
    );
    // The session touch; then + tenant limit + skill limit + budget reserve + settle.
    assert_eq!(per_task, [1.0, 5.0]);
}

#[tokio::test]
async fn settling_twice_charges_once_and_lost_accounts_are_seeded_from_the_ledger() {
    let d = sim(SimOptions::new(priced_card(0.01))).await;
    let key = new_key();
    let mut t = tenant(&key);
    t.budget = BudgetConfig {
        usd_per_day: Some(10.0),
        ..BudgetConfig::default()
    };
    let shared = cluster(&redis_url(), 1);
    let gw = replicas(1, &[d.url()], &shared, &t).await.remove(0);
    let c = ldp_gateway::cluster::Cluster::from_config(
        &shared,
        Arc::new(ldp_gateway::telemetry::Metrics::new().unwrap()),
    )
    .unwrap()
    .unwrap();
    // Idempotent settle.
    let limits = ldp_gateway::cluster::BudgetLimits {
        day: Some(10.0),
        month: None,
        session: None,
    };
    let held = c
        .reserve(
            "acme",
            "s1",
            Duration::from_secs(60),
            limits,
            0.5,
            Duration::from_secs(60),
        )
        .await
        .unwrap();
    let ldp_gateway::cluster::Reserved::Held(r) = held else {
        panic!("{held:?}")
    };
    c.settle(&r, 0.25).await.unwrap();
    c.settle(&r, 0.25).await.unwrap();
    assert!((c.spent("acme").await.unwrap().0 - 0.25).abs() < 1e-9);
    // Tasks through the gateway add to it.
    let api = Api::new(&key);
    let sid = api.session(&gw).await;
    let mut charged = 0.0;
    for _ in 0..3 {
        let r = api.task(&gw, &sid, "x").await;
        assert_eq!(r["type"], "TASK_RESULT", "{r}");
        charged += r["provenance"]["cost_usd"].as_f64().unwrap();
    }
    let before = c.spent("acme").await.unwrap().0;
    assert!((before - (0.25 + charged)).abs() < 1e-9, "{before}");
    // Redis loses the tenant's accounts: the next task seeds them from the ledger (the three
    // tasks' costs; the direct settle above never reached the ledger) instead of from zero.
    let day = chrono::Utc::now().timestamp().div_euclid(86_400);
    let mut conn = redis::Client::open(redis_url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let _: () = redis::cmd("DEL")
        .arg(format!("{}:budget:acme:day:{day}", shared.key_prefix))
        .query_async(&mut conn)
        .await
        .unwrap();
    let r = api.task(&gw, &sid, "x").await;
    assert_eq!(r["type"], "TASK_RESULT", "{r}");
    let last = r["provenance"]["cost_usd"].as_f64().unwrap();
    let after = c.spent("acme").await.unwrap().0;
    assert!(
        (after - (charged + last)).abs() < 1e-9,
        "seeded {charged} from the ledger + {last}: {after}"
    );
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_first_tasks_on_two_replicas_leave_no_upstream_session_open() {
    let mut opts = SimOptions::new(card("a", "default", &[("echo", 0.9)], &["text"]));
    opts.latency = Duration::from_millis(20);
    let d = sim(opts).await;
    let key = new_key();
    let shared = cluster(&redis_url(), 2);
    let gws = Arc::new(replicas(2, &[d.url()], &shared, &tenant(&key)).await);
    let api = Api::new(&key);
    let sid = api.session(&gws[0]).await;
    // Both replicas open an upstream session for the same skill at once.
    let (a, b) = tokio::join!(api.task(&gws[0], &sid, "a"), api.task(&gws[1], &sid, "b"));
    assert_eq!(
        (a["type"].clone(), b["type"].clone()),
        (json!("TASK_RESULT"), json!("TASK_RESULT"))
    );
    // The first to publish its binding wins; the other replica closes its own and uses the
    // winner's, so later tasks on both share one upstream session.
    for gw in gws.iter() {
        assert_eq!(api.task(gw, &sid, "c").await["type"], "TASK_RESULT");
    }
    let (status, _) = api
        .post(
            &gws[1],
            &sid,
            json!({"type": "SESSION_CLOSE", "reason": "done"}),
        )
        .await;
    assert_eq!(status, 200);
    let closed_all = common::eventually(Duration::from_secs(10), || {
        let s = d.stats();
        s.accepted == s.closes
    })
    .await;
    let s = d.stats();
    assert!(
        closed_all,
        "{} upstream sessions opened, {} closed",
        s.accepted, s.closes
    );
}
