//! Cluster mode against the real servers on this machine: the Postgres ledger (same trait,
//! same queries as SQLite) and, further down, replicas sharing Redis.
//!
//! Postgres: `LDP_TEST_POSTGRES` (default `postgres://postgres@127.0.0.1:5432`); each test
//! creates its own database and drops it. Redis: `LDP_TEST_REDIS` (default
//! `redis://127.0.0.1:6379`); each test uses its own key prefix.

use crate::support::ledger::{contract, postgres_outcomes};
use crate::support::process::{self, text, Serve};
use crate::support::stores::{cluster, pg_sql, redis_url, SharedBudget, TempDb};
use crate::support::{card, eventually, eventually_async, sim, Card, Client, Resp, TestGateway};
use ldp_gateway::config::{BudgetConfig, ClusterConfig, RateConfig, TenantConfig};
use ldp_gateway::provenance::{Backend, Durability, PostgresBackend, Query};
use ldp_gateway::sim::SimOptions;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

#[test]
fn postgres_ledger_stores_queries_and_prunes_like_sqlite() {
    let db = TempDb::new();
    let mut b =
        PostgresBackend::open(&db.url(), Durability::Commit, Duration::from_secs(5)).unwrap();
    contract::check(&mut b);
    // The database drops the connection (a restart, a failover): the backend reconnects.
    pg_sql(
        "postgres",
        format!(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
             WHERE datname = '{}' AND application_name = 'ldp-gateway'",
            db.name
        ),
    );
    let _ = b.insert(&[contract::row("lost?", "s", "anonymous", 2_000)]);
    assert!(b.healthy(), "reconnected");
    b.insert(&[contract::row("t10", "s", "anonymous", 2_001)])
        .unwrap();
    let t10 = Query {
        task_id: Some("t10".into()),
        ..Query::default()
    };
    assert_eq!(contract::ids(&mut b, t10), ["t10"]);
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

#[tokio::test]
async fn a_gateway_on_postgres_records_every_outcome_and_the_cli_reads_it() {
    let db = TempDb::new();
    let store = db.url();
    let gw = TestGateway::builder()
        .sim(echo())
        .config(|cfg| cfg.provenance.store = store)
        .spawn()
        .await;
    let (status, ready) = gw.ready().await;
    assert_eq!((status, &ready["ledger"]), (200, &json!(true)), "{ready}");
    let c = gw.client();
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
    let mut recorded: Vec<String> = gw
        .ledger(&format!("session_id={sid}"))
        .await
        .into_iter()
        .map(|r| r.task_id)
        .collect();
    recorded.sort();
    outcomes.sort();
    assert_eq!(recorded, outcomes, "one row per outcome the client saw");
    // The `provenance` command reads the config's Postgres store.
    let dir = tempfile::tempdir().unwrap();
    let cfg = TestGateway::builder()
        .config(|cfg| cfg.provenance.store = db.url())
        .config_file(dir.path())
        .await;
    let cfg = cfg.to_str().unwrap();
    let args = [
        "provenance",
        "--session",
        &sid,
        "--format",
        "csv",
        "--config",
        cfg,
    ];
    let out = process::run(&args, &[]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let csv = String::from_utf8(out.stdout).unwrap();
    assert_eq!(csv.lines().count(), 1 + outcomes.len(), "{csv}");
    gw.shutdown().await;
}

// ---------------------------------------------------------------------------------------
// Replicas sharing Redis
// ---------------------------------------------------------------------------------------

pub(crate) fn tenant(key: &str) -> TenantConfig {
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
) -> Vec<TestGateway> {
    let mut out = Vec::new();
    for _ in 0..n {
        let shared = shared.clone();
        out.push(
            TestGateway::builder()
                .delegates(urls)
                .tenant(tenant.clone())
                .config(move |cfg| cfg.cluster = shared)
                .spawn()
                .await,
        );
    }
    out
}

/// The tenant's client of `gw`: its key, one `from`.
fn tenant_client(gw: &TestGateway, key: &str) -> Client {
    gw.client()
        .with_key(Some(key))
        .with_from("ldp:client:cluster")
}

/// A session opened (SESSION_PROPOSE alone) through `c`.
async fn session(c: &Client) -> String {
    c.accepted(json!({})).await
}

/// An `echo` task through `c`; the answer's body.
async fn task(c: &Client, session: &str, input: &str) -> Value {
    c.task(session, "echo", json!(input), "text").await
}

/// A zero-latency delegate offering `echo`.
fn echo() -> SimOptions {
    SimOptions::new(card("a", "default", &[("echo", 0.9)], &["text"]))
}

/// A fresh API key.
pub(crate) fn new_key() -> String {
    format!("k-{}", uuid::Uuid::new_v4().simple())
}

/// A card offering `echo` at `price` USD per call.
fn priced_card(price: f64) -> ldp_gateway::ldp::IdentityCard {
    Card::new("spend").priced("echo", 0.9, price, 50).build()
}

fn hello() -> Value {
    json!({"type": "HELLO", "delegate_id": "ldp:client:c", "supported_modes": ["text"]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_replicas_admit_no_more_than_one_tenant_limit() {
    let d = sim(echo()).await;
    let key = new_key();
    let mut t = tenant(&key);
    let (rps, burst) = (20.0, 10u32);
    t.limits = Some(RateConfig {
        rps,
        burst: Some(burst),
    });
    let shared = cluster(&redis_url(), 3);
    let gws = replicas(3, &[d.url()], &shared, &t).await;
    let apis: Arc<Vec<Client>> = Arc::new(gws.iter().map(|g| tenant_client(g, &key)).collect());
    let admitted = Arc::new(AtomicUsize::new(0));
    let refused = Arc::new(AtomicUsize::new(0));
    let start = std::time::Instant::now();
    let run_for = Duration::from_millis(1500);
    let workers: Vec<_> = (0..12)
        .map(|w| {
            let (apis, admitted, refused) = (apis.clone(), admitted.clone(), refused.clone());
            tokio::spawn(async move {
                let mut i = w;
                while start.elapsed() < run_for {
                    let api = &apis[i % apis.len()];
                    i += 1;
                    let r = api.post_body("", hello()).await;
                    match r.status {
                        200 => admitted.fetch_add(1, Ordering::Relaxed),
                        429 => refused.fetch_add(1, Ordering::Relaxed),
                        other => panic!("HTTP {other}: {}", r.json),
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
    for gw in &gws {
        let m = gw.metrics().await;
        fallbacks += m.sum("ldp_gateway_rate_limit_local_fallbacks_total");
        assert_eq!(m.sum("ldp_gateway_redis_errors_total"), 0.0);
    }
    assert_eq!(fallbacks, 0.0);
    for gw in gws {
        gw.shutdown().await;
    }
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
    let gws = replicas(3, &[d.url()], &shared, &t).await;
    let apis: Vec<Client> = gws.iter().map(|g| tenant_client(g, &key)).collect();
    let mut sessions = Vec::new();
    for a in &apis {
        sessions.push(session(a).await);
    }
    let tasks: Vec<_> = (0..100)
        .map(|i| {
            let (api, sid) = (apis[i % 3].clone(), sessions[i % 3].clone());
            tokio::spawn(async move { task(&api, &sid, "spend").await })
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
    let spent = SharedBudget::open(&shared).spent_today("acme").await;
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
    for gw in gws {
        gw.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_session_opened_on_one_replica_is_served_and_closed_on_the_others() {
    let d = sim(echo()).await;
    let key = new_key();
    let shared = cluster(&redis_url(), 3);
    let gws = replicas(3, &[d.url()], &shared, &tenant(&key)).await;
    let apis: Vec<Client> = gws.iter().map(|g| tenant_client(g, &key)).collect();
    let sid = session(&apis[0]).await;
    let mut upstream = Vec::new();
    for (i, a) in apis.iter().enumerate() {
        let r = task(a, &sid, &format!("hello from replica {i}")).await;
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
    let r = apis[2]
        .post_body(&sid, json!({"type": "SESSION_CLOSE", "reason": "done"}))
        .await;
    assert_eq!(
        (r.status, &r.json["body"]["type"]),
        (200, &json!("SESSION_CLOSE")),
        "{}",
        r.json
    );
    for a in &apis[..2] {
        let r = task(a, &sid, "after close").await;
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
            process::signal(c.id(), sig);
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
    let api = tenant_client(&gw, &key);
    let sid = session(&api).await;
    assert_eq!(task(&api, &sid, "before").await["type"], "TASK_RESULT");
    assert_eq!(gw.ready().await.0, 200);

    // Frozen (SIGSTOP): every call still ends at its deadline (200 ms; the ceiling here is a
    // generous 10 s, against a call that would hang); limits fall back locally.
    redis.signal("-STOP");
    let r = tokio::time::timeout(Duration::from_secs(10), api.post_body("", hello()))
        .await
        .expect("a frozen Redis must not hang a HELLO");
    assert_eq!(
        r.status, 200,
        "a frozen Redis must not stop HELLO: {}",
        r.json
    );
    redis.signal("-CONT");

    // Stopped: budgets and sessions fail closed with a retryable error; limits fall back.
    redis.stop();
    let r = api.post_body("", hello()).await;
    assert_eq!(r.status, 200, "{}", r.json);
    let m = gw.metrics().await;
    assert!(
        m.sum("ldp_gateway_rate_limit_local_fallbacks_total") >= 2.0,
        "{m}"
    );
    assert_eq!(m.sum("ldp_gateway_redis_up"), 0.0);
    let r = task(&api, &sid, "during").await;
    assert_eq!(r["type"], "TASK_FAILED", "{r}");
    assert_eq!(r["error"]["code"], "SHARED_STATE_UNAVAILABLE", "{r}");
    assert_eq!(r["error"]["retryable"], true, "{r}");
    let Resp {
        status, json: v, ..
    } = api
        .post_body("", json!({"type": "SESSION_PROPOSE", "config": {}}))
        .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["body"]["type"], "SESSION_REJECT", "{v}");
    assert_eq!(
        v["body"]["error"]["code"], "SHARED_STATE_UNAVAILABLE",
        "{v}"
    );
    assert_eq!(v["body"]["error"]["retryable"], true, "{v}");
    let (status, v) = gw.ready().await;
    assert_eq!((status, &v["redis"]), (503, &json!(false)), "{v}");

    // Back (empty: it kept nothing): new sessions and tasks work again without a restart.
    redis.restart();
    let back = eventually_async(Duration::from_secs(10), || async {
        gw.ready().await.0 == 200
    })
    .await;
    assert!(back, "the gateway did not notice Redis return");
    let sid = session(&api).await;
    assert_eq!(task(&api, &sid, "after").await["type"], "TASK_RESULT");
    assert_eq!(gw.metrics().await.sum("ldp_gateway_redis_up"), 1.0);
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ledger_rows_across_replicas_equal_outcomes_and_survive_kill_9() {
    let db = TempDb::new();
    let mut opts = SimOptions::new(card("a", "default", &[("echo", 0.9)], &["text"]));
    opts.latency = Duration::from_millis(5);
    let d = sim(opts).await;
    let key = new_key();
    let dir = tempfile::tempdir().unwrap();
    let store = db.url();
    let config = TestGateway::builder()
        .delegate(&d.url())
        .tenant(tenant(&key))
        .config(|c| {
            c.provenance.store = store;
            c.cluster = ClusterConfig {
                redis_url: Some(redis_url()),
                key_prefix: format!("ldptest:{}", uuid::Uuid::new_v4().simple()),
                replicas: 2,
                ..ClusterConfig::default()
            };
        })
        .config_file(dir.path())
        .await;
    let a = Serve::new(&config).start().await;
    let b = Serve::new(&config).start().await;
    let clients =
        [a.client(), b.client()].map(|c| c.with_key(Some(&key)).with_from("ldp:client:cluster"));
    // An envelope answer, `None` if there was none (replica B is killed mid-run).
    let post = |c: Client, session: String, body: Value| async move {
        let r = c.try_post_body(&session, body, None).await.ok()?;
        serde_json::from_slice::<Value>(&r.raw).ok()
    };
    // Wait until the replicas see the delegate, then one session used through both.
    let mut sid = None;
    for _ in 0..200 {
        if let Some(v) = post(
            clients[0].clone(),
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
    // (task id, answer kind, error text if it failed)
    let acknowledged = Arc::new(std::sync::Mutex::new(Vec::<(String, String, String)>::new()));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let workers: Vec<_> = (0..8)
        .map(|w| {
            let (clients, sid, acknowledged, stop) =
                (clients.clone(), sid.clone(), acknowledged.clone(), stop.clone());
            tokio::spawn(async move {
                let mut i = 0usize;
                while !stop.load(Ordering::Relaxed) {
                    let task_id = format!("w{w}-{i}");
                    let c = clients[(w + i) % 2].clone();
                    i += 1;
                    let body = json!({"type": "TASK_SUBMIT", "task_id": task_id, "skill": "echo", "input": "x"});
                    if let Some(v) = post(c, sid.clone(), body).await {
                        let kind = v["body"]["type"].as_str().unwrap_or("").to_owned();
                        if kind == "TASK_RESULT" || kind == "TASK_FAILED" {
                            let error = v["body"]["error"].to_string();
                            acknowledged.lock().unwrap().push((task_id, kind, error));
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
    assert!(eventually(Duration::from_secs(20), || served(100)).await);
    b.kill().await;
    let after_kill = acknowledged.lock().unwrap().len();
    assert!(eventually(Duration::from_secs(20), || served(after_kill + 100)).await);
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.await.unwrap();
    }
    let acknowledged = acknowledged.lock().unwrap().clone();
    let results = acknowledged
        .iter()
        .filter(|(_, k, _)| k == "TASK_RESULT")
        .count();
    assert!(
        acknowledged.len() >= 200 && results > 0,
        "{results} results"
    );
    // What B acknowledged in its last milliseconds may be in its journal only: the replica
    // started in its place (the same journal folder) adopts that journal before it serves.
    // A, stopped, moves what it acknowledged last.
    Serve::new(&config).start().await.stop().await;
    a.stop().await;
    // Every acknowledged outcome has exactly one row, whichever replica answered it.
    let rows = postgres_outcomes(&db.url()).await;
    let mut by_task = std::collections::HashMap::new();
    for (t, o) in &rows {
        *by_task.entry(t.clone()).or_insert(0) += 1;
        let _ = o;
    }
    let missing: Vec<_> = acknowledged
        .iter()
        .filter(|(t, _, _)| !by_task.contains_key(t))
        .collect();
    assert!(
        missing.is_empty(),
        "acknowledged but not recorded: {missing:?}"
    );
    assert!(by_task.values().all(|n| *n == 1), "a task recorded twice");
    for (t, kind, _) in &acknowledged {
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
}

#[tokio::test]
async fn redis_round_trips_per_task_are_one_per_shared_check() {
    let d = sim(echo()).await;
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
    let mut per_task = Vec::new();
    for gw in [&plain, &limited] {
        let api = tenant_client(gw, &key);
        let sid = session(&api).await;
        assert_eq!(task(&api, &sid, "warm").await["type"], "TASK_RESULT");
        let before = gw.metrics().await.sum("ldp_gateway_redis_calls_total");
        for _ in 0..10 {
            assert_eq!(task(&api, &sid, "x").await["type"], "TASK_RESULT");
        }
        let after = gw.metrics().await.sum("ldp_gateway_redis_calls_total");
        per_task.push((after - before) / 10.0);
    }
    eprintln!(
        "redis round trips per task: {} (session only), {} (tenant limit, tenant × skill limit, daily budget)",
        per_task[0], per_task[1]
    );
    // The session touch and the task's status (running, then its answer, so that any
    // replica answers a status query); then + tenant limit + skill limit + budget reserve +
    // settle.
    assert_eq!(per_task, [3.0, 7.0]);
    plain.shutdown().await;
    limited.shutdown().await;
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
    let budget = SharedBudget::open(&shared);
    // Idempotent settle.
    let held = budget.hold("acme", "s1", 10.0, 0.5).await;
    budget.settle(&held, 0.25).await;
    budget.settle(&held, 0.25).await;
    assert!((budget.spent_today("acme").await - 0.25).abs() < 1e-9);
    // Tasks through the gateway add to it.
    let api = tenant_client(&gw, &key);
    let sid = session(&api).await;
    let mut charged = 0.0;
    for _ in 0..3 {
        let r = task(&api, &sid, "x").await;
        assert_eq!(r["type"], "TASK_RESULT", "{r}");
        charged += r["provenance"]["cost_usd"].as_f64().unwrap();
    }
    let before = budget.spent_today("acme").await;
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
    let r = task(&api, &sid, "x").await;
    assert_eq!(r["type"], "TASK_RESULT", "{r}");
    let last = r["provenance"]["cost_usd"].as_f64().unwrap();
    let after = budget.spent_today("acme").await;
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
    let gws = replicas(2, &[d.url()], &shared, &tenant(&key)).await;
    let apis: Vec<Client> = gws.iter().map(|g| tenant_client(g, &key)).collect();
    let sid = session(&apis[0]).await;
    // Both replicas open an upstream session for the same skill at once.
    let (a, b) = tokio::join!(task(&apis[0], &sid, "a"), task(&apis[1], &sid, "b"));
    assert_eq!(
        (a["type"].clone(), b["type"].clone()),
        (json!("TASK_RESULT"), json!("TASK_RESULT"))
    );
    // The first to publish its binding wins; the other replica closes its own and uses the
    // winner's, so later tasks on both share one upstream session.
    for api in &apis {
        assert_eq!(task(api, &sid, "c").await["type"], "TASK_RESULT");
    }
    let close = apis[1]
        .post_body(&sid, json!({"type": "SESSION_CLOSE", "reason": "done"}))
        .await;
    assert_eq!(close.status, 200);
    let closed_all = eventually(Duration::from_secs(10), || {
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
    for gw in gws {
        gw.shutdown().await;
    }
}

/// Two replicas in front of `upstream` (an entry, or `sim` delegate URLs), sharing `shared`.
pub(crate) async fn two_replicas(
    shared: &ClusterConfig,
    tenant: &TenantConfig,
    build: impl Fn() -> crate::support::gateway::Builder<'static>,
) -> Vec<TestGateway> {
    let mut out = Vec::new();
    for _ in 0..2 {
        let shared = shared.clone();
        out.push(
            build()
                .tenant(tenant.clone())
                .config(move |cfg| cfg.cluster = shared)
                .spawn()
                .await,
        );
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_reference_adapter_polls_the_replica_that_did_not_run_the_task() {
    use crate::ref_adapter::{adapter, completed, sim_opts, task, ME};
    use ldp_protocol::ProtocolAdapter as _;
    let d = sim(sim_opts()).await;
    let key = new_key();
    let shared = cluster(&redis_url(), 2);
    let url = d.url();
    let gws = two_replicas(&shared, &tenant(&key), || {
        TestGateway::builder().delegate(&url)
    })
    .await;
    let (one, two) = (gws[0].ldp_url(), gws[1].ldp_url());
    let a = adapter(ME, Some(&key));
    // Submitted on replica 1, polled on replica 2 (no affinity).
    let handle = a.invoke(&one, task()).await.expect("invoke");
    let output = completed(a.status(&two, &handle.task_id).await.expect("status"));
    assert_eq!(
        output["ldp_provenance"]["produced_by"], "ldp:delegate:ref-sim",
        "{output}"
    );
    // The same answer from the replica that ran it.
    let here = completed(a.status(&one, &handle.task_id).await.expect("status"));
    assert_eq!(here, output);
    // Still only the submitting client's.
    let other = adapter("ldp:client:someone-else", Some(&key));
    let theirs = other.status(&two, &handle.task_id).await.expect("status");
    assert!(
        matches!(&theirs, ldp_protocol::protocol::TaskStatus::Failed { error } if error.code == "TASK_NOT_FOUND"),
        "{theirs:?}"
    );
    for gw in gws {
        gw.shutdown().await;
    }
    d.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_two_turn_session_continues_its_conversation_on_another_replica() {
    use crate::support::openai::{declared, entry, start};
    use ldp_gateway::sim::openai::OpenAiOptions;
    let oa = start(OpenAiOptions::new("m")).await;
    let key = new_key();
    let shared = cluster(&redis_url(), 2);
    let url = oa.url();
    let gws = two_replicas(&shared, &tenant(&key), || {
        TestGateway::builder().entry(entry("mini", &url, "m", declared(&["chat"], 0.8)))
    })
    .await;
    let apis: Vec<Client> = gws.iter().map(|g| tenant_client(g, &key)).collect();
    let sid = apis[0]
        .accepted(json!({"preferred_payload_modes": ["text"]}))
        .await;
    let first = apis[0]
        .task(&sid, "chat", json!("my name is Ada"), "text")
        .await;
    assert_eq!(first["type"], "TASK_RESULT", "{first}");
    let second = apis[1]
        .task(&sid, "chat", json!("what is my name?"), "text")
        .await;
    assert_eq!(second["type"], "TASK_RESULT", "{second}");
    let requests = oa.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(
        requests[1]["messages"],
        json!([
            {"role": "user", "content": "my name is Ada"},
            {"role": "assistant", "content": first["output"]},
            {"role": "user", "content": "what is my name?"},
        ]),
        "the first turn, run on replica 1, is sent with the second, run on replica 2"
    );
    for gw in gws {
        gw.shutdown().await;
    }
    oa.shutdown().await;
}
