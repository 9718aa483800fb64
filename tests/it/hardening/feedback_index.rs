//! Item 12: rating an unknown task read every row of the tenant (0.2–0.5 s at 500k rows), so
//! 40 such ratings at once starved every tenant's ratings (503) and admin reads (500). The
//! lookup now has its index, reads are shared out per tenant (and the operator), and a busy
//! ledger is answered 503 wherever it is met. The ledger is filled through the store API
//! before the gateway opens it.

use crate::support::ledger::contract;
use crate::support::{card, unique, Client, TestGateway};
use ldp_gateway::config::{Config, TenantConfig};
use ldp_gateway::provenance::{Backend, Durability, SqliteBackend};
use ldp_gateway::secret::hash_key;
use ldp_gateway::sim::SimOptions;
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Instant;

/// Rows of the flooding tenant in the ledger.
const ROWS: usize = 200_000;
/// Ratings of unknown tasks it keeps in flight (more than the ledger's whole read queue).
const FLOOD: usize = 40;
/// Ratings of the other tenant's own tasks meanwhile.
const ROUNDS: usize = 3;

fn tenant(name: &str, key: &str) -> TenantConfig {
    TenantConfig {
        api_key_sha256: vec![hash_key(key)],
        trust_domains: vec!["default".into()],
        ..TenantConfig::new(name)
    }
}

/// `ROWS` rows of tenant `flood` in a new SQLite ledger at `path`: one written through the
/// store API, copied in SQL (the store's own inserts take a minute for this many in a debug
/// build), the session index brought up to date as its merges would.
fn fill(path: &str) {
    let started = Instant::now();
    let now = chrono::Utc::now().timestamp_millis();
    let mut b = SqliteBackend::open(path, Durability::Commit).unwrap();
    b.insert(&[contract::row("template", "s", "flood", now)])
        .unwrap();
    drop(b);
    let conn = rusqlite::Connection::open(path).unwrap();
    let columns: Vec<String> = conn
        .prepare("SELECT name FROM pragma_table_info('ledger') WHERE name != 'id'")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let values: Vec<String> = columns
        .iter()
        .map(|c| match c.as_str() {
            "task_id" => "'old-' || x".to_owned(),
            "finished_ms" => "t.finished_ms - x % 1000".to_owned(),
            other => format!("t.{other}"),
        })
        .collect();
    conn.execute_batch(&format!(
        "BEGIN;
         INSERT INTO ledger ({}) WITH RECURSIVE n(x) AS
             (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < {ROWS})
             SELECT {} FROM n, (SELECT * FROM ledger WHERE task_id = 'template') AS t;
         INSERT INTO ledger_session_index SELECT session_id, id FROM ledger
             WHERE id > (SELECT indexed_to FROM ledger_index_state);
         UPDATE ledger_index_state SET indexed_to = (SELECT max(id) FROM ledger);
         COMMIT;",
        columns.join(", "),
        values.join(", ")
    ))
    .unwrap();
    eprintln!("{ROWS} rows written in {:?}", started.elapsed());
}

/// Status → how many answers had it.
fn tally(statuses: impl IntoIterator<Item = u16>) -> BTreeMap<u16, usize> {
    let mut t = BTreeMap::new();
    for s in statuses {
        *t.entry(s).or_default() += 1;
    }
    t
}

/// Rates unknown tasks as `flood`, `FLOOD` at a time, until `stop`; every answer's status.
async fn flood_until(flood: &Client, answered: &AtomicUsize, stop: &AtomicBool) -> Vec<u16> {
    let workers = (0..FLOOD).map(|w| async move {
        let mut statuses = Vec::new();
        let mut i = 0;
        while !stop.load(Ordering::SeqCst) {
            let task = format!("never-{w}-{i}");
            let r = flood
                .post_json("/ldp/feedback", &json!({"task_id": task, "outcome": "bad"}))
                .await;
            statuses.push(r.status);
            answered.fetch_add(1, Ordering::SeqCst);
            i += 1;
        }
        statuses
    });
    futures_util::future::join_all(workers)
        .await
        .into_iter()
        .flatten()
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_tenant_flooding_unknown_ratings_starves_no_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.db").display().to_string();
    fill(&path);
    let keys = (unique("key-flood"), unique("key-other"));
    let store = format!("sqlite://{path}");
    let gw = TestGateway::builder()
        .sim(SimOptions::new(card(
            "echo",
            "default",
            &[("echo", 0.9)],
            &["text"],
        )))
        .config(|c: &mut Config| {
            c.tenants = vec![tenant("flood", &keys.0), tenant("other", &keys.1)];
            c.provenance.store = store.clone();
        })
        .spawn()
        .await;
    let (flood, other) = (
        gw.client().with_key(Some(&keys.0)),
        gw.client().with_key(Some(&keys.1)),
    );
    // The other tenant's tasks, to rate while the flood runs.
    let s = other.accepted(json!({})).await;
    let mut mine = Vec::new();
    for i in 0..ROUNDS {
        let r = other
            .task(&s, "echo", json!(format!("mine {i}")), "text")
            .await;
        assert_eq!(r["type"], "TASK_RESULT", "{r}");
        mine.push(r["task_id"].as_str().unwrap().to_owned());
    }
    let (answered, stop) = (AtomicUsize::new(0), AtomicBool::new(false));
    let started = Instant::now();
    let rate_mine = async {
        // The flood is under way: every worker has had an answer (on average).
        while answered.load(Ordering::SeqCst) < FLOOD {
            tokio::task::yield_now().await;
        }
        for task in &mine {
            let r = other
                .post_json(
                    "/ldp/feedback",
                    &json!({"task_id": task, "outcome": "good"}),
                )
                .await;
            assert_eq!(r.status, 200, "the other tenant's rating: {}", r.json);
        }
        stop.store(true, Ordering::SeqCst);
    };
    let (flooded, ()) = tokio::join!(flood_until(&flood, &answered, &stop), rate_mine);
    let took = started.elapsed();
    let flood_tally = tally(flooded);
    eprintln!(
        "{FLOOD} workers rating unknown tasks over {ROWS} rows for {took:?}: {flood_tally:?}; the other tenant's {ROUNDS} ratings all 200"
    );
    // Unknown (404) or, past its share, busy (503): never a 500.
    assert!(
        flood_tally.keys().all(|s| [404, 503].contains(s)),
        "{flood_tally:?}"
    );

    // The operator's reads, 40 pages of 1,000 rows at once: past its share they are busy,
    // and busy is 503, never 500.
    let admin = gw.admin();
    let pages = (0..FLOOD).map(|_| {
        let admin = admin.clone();
        async move {
            admin
                .get("/admin/provenance?tenant=flood&limit=1000")
                .await
                .status
        }
    });
    let admin_tally = tally(futures_util::future::join_all(pages).await);
    eprintln!("{FLOOD} admin pages at once: {admin_tally:?}");
    assert!(
        admin_tally.keys().all(|s| [200, 503].contains(s)),
        "{admin_tally:?}"
    );
    assert!(
        admin_tally.contains_key(&503),
        "some were busy: {admin_tally:?}"
    );
    gw.shutdown().await;
}
