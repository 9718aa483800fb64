//! Cluster mode against the real servers on this machine: the Postgres ledger (same trait,
//! same queries as SQLite) and, further down, replicas sharing Redis.
//!
//! Postgres: `LDP_TEST_POSTGRES` (default `postgres://postgres@127.0.0.1:5432`); each test
//! creates its own database and drops it. Redis: `LDP_TEST_REDIS` (default
//! `redis://127.0.0.1:6379`); each test uses its own key prefix.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests fail loudly")]

mod common;

use common::{card, gateway_with, sim, Client};
use ldp_gateway::provenance::{Backend, Durability, LedgerRow, Outcome, PostgresBackend, Query};
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

fn row(task: &str, session: &str, tenant: &str, finished_ms: i64) -> LedgerRow {
    let lineage = ldp_gateway::provenance::JsonText::of(&json!([{"step": "route"}]));
    LedgerRow {
        task_id: task.into(),
        session_id: session.into(),
        upstream_session_id: Some(format!("up-{session}")),
        tenant: tenant.into(),
        skill: "echo".into(),
        policy: Some("balanced".into()),
        delegate: Some("d0".into()),
        delegate_id: Some("ldp:delegate:a".into()),
        model_version: Some("a-1".into()),
        outcome: Outcome::Result,
        error_code: None,
        error_message: None,
        score: Some(0.75),
        candidates: Some(2),
        attempts: 1,
        fallbacks: vec!["payload_mode".into()],
        payload_mode: Some("text".into()),
        latency_ms: 3.25,
        upstream_ms: 2.5,
        cost_usd: Some(0.002),
        reported_cost_usd: None,
        declared_cost_usd: Some(0.002),
        tokens: Some(12),
        confidence: Some(0.9),
        verification_status: Some("unverified".into()),
        started_at: "2026-01-01T00:00:00Z".into(),
        finished_at: "2026-01-01T00:00:01Z".into(),
        finished_ms,
        output_sha256: Some("ab".repeat(32)),
        lineage,
        routing: ldp_gateway::provenance::JsonText::of(&json!({"policy": "balanced"})),
        payload: None,
    }
}

#[test]
fn postgres_ledger_stores_queries_and_prunes_like_sqlite() {
    let db = TempDb::new();
    let mut b =
        PostgresBackend::open(&db.url(), Durability::Commit, Duration::from_secs(5)).unwrap();
    let rows: Vec<LedgerRow> = (0..10)
        .map(|i| {
            let mut r = row(
                &format!("t{i}"),
                if i % 2 == 0 { "even" } else { "odd" },
                if i == 3 { "acme" } else { "anonymous" },
                1_000 + i,
            );
            if i == 3 {
                r.outcome = Outcome::Failed;
                r.error_code = Some("UPSTREAM_FAILED".into());
                r.output_sha256 = None;
                r.tokens = None;
                r.cost_usd = None;
            }
            r
        })
        .collect();
    b.insert(&rows[..4]).unwrap();
    b.insert(&rows[4..]).unwrap();
    let ids = |b: &mut PostgresBackend, q: Query| -> Vec<String> {
        b.query(&q)
            .unwrap()
            .into_iter()
            .map(|r| r.task_id)
            .collect()
    };
    assert_eq!(
        ids(&mut b, Query::default()),
        (0..10).rev().map(|i| format!("t{i}")).collect::<Vec<_>>()
    );
    let q = |f: fn(&mut Query)| {
        let mut q = Query::default();
        f(&mut q);
        q
    };
    assert_eq!(
        ids(&mut b, q(|q| q.session_id = Some("odd".into()))).len(),
        5
    );
    assert_eq!(ids(&mut b, q(|q| q.task_id = Some("t4".into()))), ["t4"]);
    assert_eq!(ids(&mut b, q(|q| q.tenant = Some("acme".into()))), ["t3"]);
    assert_eq!(
        ids(&mut b, q(|q| q.since_ms = Some(1_007))),
        ["t9", "t8", "t7"]
    );
    assert_eq!(
        ids(
            &mut b,
            q(|q| {
                q.limit = Some(3);
                q.offset = Some(2);
            })
        ),
        ["t7", "t6", "t5"]
    );
    // Every field reads back as written.
    assert_eq!(
        b.query(&q(|q| q.task_id = Some("t3".into()))).unwrap(),
        vec![rows[3].clone()]
    );
    assert_eq!(
        b.query(&q(|q| q.task_id = Some("t4".into()))).unwrap(),
        vec![rows[4].clone()]
    );
    let mut spend = b.spend_since(0).unwrap();
    spend.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(spend.len(), 2, "{spend:?}");
    assert_eq!(
        spend[0],
        ("acme".to_owned(), 0.0),
        "its only row has no cost"
    );
    assert_eq!(spend[1].0, "anonymous");
    assert!((spend[1].1 - 0.018).abs() < 1e-9, "{spend:?}");
    assert!(b.healthy());
    assert_eq!(b.prune(1_005).unwrap(), 5);
    assert_eq!(b.prune(1_005).unwrap(), 0);
    drop(b);
    // Reopening (another replica starting) migrates nothing twice and sees the rows.
    let mut again =
        PostgresBackend::open(&db.url(), Durability::Fsync, Duration::from_secs(5)).unwrap();
    assert_eq!(again.query(&Query::default()).unwrap().len(), 5);
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
    let d = sim(SimOptions::new(card(
        "a",
        "default",
        &[("echo", 0.9)],
        &["text"],
    )))
    .await;
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
