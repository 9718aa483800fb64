//! The ledger's promise under a store that stops working: a result acknowledged to a client
//! has its provenance committed. A full disk (item 10), the database files deleted under a
//! running gateway (item 11), and a Postgres column of an unexpected type (item 17).

use crate::support::ledger::{contract, sqlite_outcomes};
use crate::support::process::Serve;
use crate::support::stores::{pg_sql, TempDb};
use crate::support::{card, eventually_async, sim, Client, TestGateway};
use ldp_gateway::provenance::{Durability, Ledger, LedgerError, PostgresBackend, Query};
use ldp_gateway::sim::SimOptions;
use ldp_gateway::telemetry::Metrics;
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The message a client gets when its result is withheld because its row did not commit.
const LEDGER_UNAVAILABLE: &str = "the provenance ledger is unavailable";

async fn echo_delegate() -> ldp_gateway::sim::SimHandle {
    sim(SimOptions::new(card(
        "a",
        "default",
        &[("echo", 0.9)],
        &["text"],
    )))
    .await
}

/// `GET /readyz`: status and body.
async fn readyz(admin: &Client) -> (u16, Value) {
    let r = admin.get("/readyz").await;
    (r.status, r.json)
}

/// Polls `/readyz` until it answers `status` with `"ledger": ledger`, for at most `within`;
/// the last answer.
async fn readyz_until(admin: &Client, status: u16, ledger: bool, within: Duration) -> (u16, Value) {
    let last = Mutex::new((0, Value::Null));
    eventually_async(within, || async {
        let (s, body) = readyz(admin).await;
        let done = (s, &body["ledger"]) == (status, &json!(ledger));
        *last.lock().unwrap() = (s, body);
        done
    })
    .await;
    last.into_inner().unwrap()
}

/// Task ids with a `result` row in the SQLite ledger at `db`.
fn result_rows(db: &Path) -> BTreeSet<String> {
    sqlite_outcomes(db)
        .into_iter()
        .filter(|(_, outcome)| outcome == "result")
        .map(|(task, _)| task)
        .collect()
}

/// What clients saw.
#[derive(Default)]
struct Tally {
    acknowledged: Mutex<Vec<String>>,
    ledger_failures: AtomicUsize,
    other_failures: Mutex<Vec<Value>>,
    stop: AtomicBool,
}

/// One client: a session, then tasks one after another until `tally.stop`.
async fn push_tasks(c: Client, n: usize, tally: Arc<Tally>) {
    let c = c.with_from(&format!("ldp:client:ledger-{n}"));
    let (sid, _) = c
        .session(json!({"preferred_payload_modes": ["text"]}))
        .await;
    let mut i = 0;
    while !tally.stop.load(Ordering::SeqCst) {
        let body = c
            .task(&sid, "echo", json!(format!("task {i} of {n}")), "text")
            .await;
        i += 1;
        match body["type"].as_str() {
            Some("TASK_RESULT") => tally
                .acknowledged
                .lock()
                .unwrap()
                .push(body["task_id"].as_str().unwrap().to_owned()),
            Some("TASK_FAILED")
                if body["error"]["message"] == LEDGER_UNAVAILABLE
                    && body["error"]["code"] == "INTERNAL" =>
            {
                tally.ledger_failures.fetch_add(1, Ordering::SeqCst);
            }
            _ => tally.other_failures.lock().unwrap().push(body),
        }
    }
}

/// Item 10: on a disk that takes no more writes, `/readyz` said 200 `"ledger": true` while
/// every commit failed. Now it answers 503 `"ledger": false` while the ledger cannot commit,
/// clients get TASK_FAILED rather than results whose rows could be lost (with the journal:
/// once the journal cannot take a row either), and after a restart every acknowledged result
/// has its row.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn readyz_reports_a_ledger_that_cannot_commit() {
    const CLIENTS: usize = 4;
    let delegate = echo_delegate().await;
    let dir = tempfile::tempdir().unwrap();
    let config = TestGateway::builder()
        .delegate(&delegate.url())
        .config_file(dir.path())
        .await;
    let db = dir.path().join("ledger.db");
    // 512 KiB per file: the schema fits, a few hundred rows later the file is "full".
    let child = Serve::with_file_limit(&config, 512).start().await;
    let admin = child.admin();
    let (status, body) = readyz_until(&admin, 200, true, Duration::from_secs(10)).await;
    assert_eq!(status, 200, "ready before the disk fills: {body}");

    let tally = Arc::new(Tally::default());
    let clients: Vec<_> = (0..CLIENTS)
        .map(|n| tokio::spawn(push_tasks(child.client(), n, tally.clone())))
        .collect();
    let (status, body) = readyz_until(&admin, 503, false, Duration::from_secs(60)).await;
    tally.stop.store(true, Ordering::SeqCst);
    for c in clients {
        c.await.unwrap();
    }
    let mut acknowledged = tally.acknowledged.lock().unwrap().clone();
    let ledger_failures = tally.ledger_failures.load(Ordering::SeqCst);
    if status != 503 {
        let (_, stderr) = child.kill().await;
        panic!(
            "/readyz while commits fail: {status} {body}; {} results, {ledger_failures} \
             failures\n{stderr}",
            acknowledged.len()
        );
    }
    assert_eq!(body["ledger"], false, "{body}");
    assert!(
        body["healthy_delegates"].as_u64() > Some(0),
        "the ledger alone made it not ready: {body}"
    );
    assert!(!acknowledged.is_empty(), "tasks succeeded before the limit");
    // With the journal, results go on being acknowledged while the store fails (their rows
    // are in the journal, moved once the store takes them again); a client gets TASK_FAILED
    // only once the journal cannot take its row either (`ledger_failures`, often 0 here).
    assert!(
        tally.other_failures.lock().unwrap().is_empty(),
        "other answers: {:?}",
        tally.other_failures.lock().unwrap()
    );

    // The disk has room again (the limit lifted, soft limit up to the unlimited hard one):
    // ready again without a restart, and tasks succeed.
    let pid = child.process.pid().to_string();
    let lifted = std::process::Command::new("prlimit")
        .args(["--pid", &pid, "--fsize=unlimited"])
        .status()
        .unwrap();
    assert!(lifted.success(), "prlimit: {lifted}");
    let (status, body) = readyz_until(&admin, 200, true, Duration::from_secs(30)).await;
    assert_eq!(status, 200, "ready again once commits go through: {body}");
    let c = child.client();
    let (sid, _) = c
        .session(json!({"preferred_payload_modes": ["text"]}))
        .await;
    let b = c.task(&sid, "echo", json!("after"), "text").await;
    assert_eq!(b["type"], "TASK_RESULT", "{b}");
    acknowledged.push(b["task_id"].as_str().unwrap().to_owned());
    child.kill().await;

    // Restarted, the gateway is ready and nothing acknowledged is lost.
    let child = Serve::new(&config).start().await;
    let (status, body) = readyz_until(&child.admin(), 200, true, Duration::from_secs(30)).await;
    assert_eq!(status, 200, "ready once the ledger can commit: {body}");
    let (_, stderr) = child.kill().await;
    let rows = result_rows(&db);
    let missing: Vec<&String> = acknowledged.iter().filter(|t| !rows.contains(*t)).collect();
    eprintln!(
        "full disk: {} results acknowledged, {ledger_failures} withheld as TASK_FAILED, \
         /readyz {status_before}; after restart {} result rows, {} acknowledged missing",
        acknowledged.len(),
        rows.len(),
        missing.len(),
        status_before = 503,
    );
    assert!(
        missing.is_empty(),
        "acknowledged without a row: {missing:?}\n{stderr}"
    );
    delegate.shutdown().await;
}

/// Item 11: deleting the SQLite files under a running gateway lost every row: commits went to
/// the unlinked files and kept being acknowledged. Now the writer notices before it
/// acknowledges, moves every committed row into a new file at the same path, and stays ready;
/// after a restart every acknowledged result has its row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_the_ledger_files_loses_no_acknowledged_row() {
    const PER_ROUND: usize = 70;
    let delegate = echo_delegate().await;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("p.db");
    let store = format!("sqlite://{}", db.display());
    let with_store = |s: String| move |c: &mut ldp_gateway::config::Config| c.provenance.store = s;
    let gw = TestGateway::builder()
        .delegate(&delegate.url())
        .config(with_store(store.clone()))
        .spawn()
        .await;
    let c = gw.client();
    let (sid, _) = c
        .session(json!({"preferred_payload_modes": ["text"]}))
        .await;
    let mut acknowledged = Vec::new();
    tasks(&c, &sid, 0, PER_ROUND, &mut acknowledged).await;
    // Twice: the second time the files removed are the ones the gateway re-created.
    for round in 1..=2 {
        for suffix in ["", "-wal", "-shm"] {
            let f = format!("{}{suffix}", db.display());
            std::fs::remove_file(&f).unwrap_or_else(|e| panic!("{f}: {e}"));
        }
        tasks(&c, &sid, round, PER_ROUND, &mut acknowledged).await;
        let (status, body) = gw.ready().await;
        assert_eq!((status, &body["ledger"]), (200, &json!(true)), "{body}");
        assert!(db.exists(), "the ledger file is back at its path");
    }
    gw.shutdown().await;

    let gw = TestGateway::builder()
        .delegate(&delegate.url())
        .config(with_store(store))
        .spawn()
        .await;
    let (status, body) = gw.ready().await;
    assert_eq!(status, 200, "{body}");
    let rows = result_rows(&db);
    let kept = acknowledged.iter().filter(|t| rows.contains(*t)).count();
    eprintln!(
        "files deleted twice mid-run: {} results acknowledged, {kept} have their row after restart",
        acknowledged.len()
    );
    assert_eq!(acknowledged.len(), 3 * PER_ROUND);
    assert_eq!(
        kept,
        acknowledged.len(),
        "acknowledged results lost their rows"
    );
    gw.shutdown().await;
    delegate.shutdown().await;
}

/// The ledger's journals in `dir` (SQLite ledger `ledger.db`).
fn journals(dir: &Path) -> Vec<std::path::PathBuf> {
    let names = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path());
    names
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            name.starts_with("ledger.db.") && name.ends_with(".journal")
        })
        .collect()
}

/// The journal holds acknowledged rows the store may not have yet: deleted under a running
/// gateway, it is created anew at its path, and the answers of the group that noticed wait
/// until the store holds every row so far. A `kill -9` right after loses nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_the_journal_loses_no_acknowledged_row() {
    const PER_ROUND: usize = 40;
    let delegate = echo_delegate().await;
    let dir = tempfile::tempdir().unwrap();
    let config = TestGateway::builder()
        .delegate(&delegate.url())
        .config_file(dir.path())
        .await;
    let child = Serve::new(&config).start().await;
    let c = child.client();
    let (sid, _) = c
        .session(json!({"preferred_payload_modes": ["text"]}))
        .await;
    let mut acknowledged = Vec::new();
    // Twice (the second time the file removed is the one the gateway re-created): the
    // tasks of a round, the journal deleted, one task (its row is written to the deleted
    // file, which the gateway then notices), and the kill right after the last one.
    for round in 0..2 {
        tasks(&c, &sid, round, PER_ROUND, &mut acknowledged).await;
        let before = journals(dir.path());
        assert_eq!(before.len(), 1, "one journal: {before:?}");
        std::fs::remove_file(&before[0]).unwrap();
        tasks(&c, &sid, round + 10, 1, &mut acknowledged).await;
        assert_eq!(
            journals(dir.path()),
            before,
            "the journal is back at its path"
        );
    }
    let (_, stderr) = child.kill().await;
    assert!(stderr.contains("creating it anew"), "{stderr}");

    let child = Serve::new(&config).start().await;
    child.stop().await;
    let rows = result_rows(&dir.path().join("ledger.db"));
    let missing: Vec<&String> = acknowledged.iter().filter(|t| !rows.contains(*t)).collect();
    eprintln!(
        "journal deleted twice mid-run, kill -9 right after: {} results acknowledged, {} missing",
        acknowledged.len(),
        missing.len()
    );
    assert!(
        missing.is_empty(),
        "acknowledged without a row: {missing:?}"
    );
    delegate.shutdown().await;
}

/// `n` tasks in `session`, each of which must succeed; their ids go to `acknowledged`.
async fn tasks(c: &Client, session: &str, round: usize, n: usize, acknowledged: &mut Vec<String>) {
    for i in 0..n {
        let b = c
            .task(
                session,
                "echo",
                json!(format!("round {round} task {i}")),
                "text",
            )
            .await;
        assert_eq!(b["type"], "TASK_RESULT", "round {round}: {b}");
        acknowledged.push(b["task_id"].as_str().unwrap().to_owned());
    }
}

/// Item 17 (ledger part): `postgres::Row::get` panicked on a column of an unexpected type,
/// which ended the ledger's writer thread (every later record: "not running"). A mismatched
/// read is now an error for that query, and the writer goes on.
#[tokio::test]
async fn a_postgres_column_of_the_wrong_type_is_an_error_not_a_panic() {
    let db = TempDb::new();
    let url = db.url();
    let backend = tokio::task::spawn_blocking(move || {
        PostgresBackend::open(&url, Durability::Commit, Duration::from_secs(5))
    })
    .await
    .unwrap()
    .unwrap();
    let ledger = Ledger::start(
        Box::new(backend),
        Durability::Commit,
        100,
        Arc::new(Metrics::new().unwrap()),
    );
    let h = ledger.handle();
    let row = |t: &str| contract::row(t, "s", "anonymous", 1_000);
    h.record(row("t1")).await.unwrap();
    // A column the reader takes as BIGINT now holds text (a hand edit, a foreign migration).
    pg_sql(
        &db.name,
        "ALTER TABLE ledger ALTER COLUMN attempts TYPE text".into(),
    );
    let all = Query {
        limit: Some(100),
        ..Query::default()
    };
    match h.query(all.clone()).await {
        Err(LedgerError::Write(e)) => assert!(e.contains("attempts"), "names the column: {e}"),
        other => panic!("expected a read error, got {other:?}"),
    }
    // The writer is still running: it records and answers what it can read.
    h.record(row("t2")).await.unwrap();
    let spend = h.spend_since(0).await.unwrap();
    assert_eq!(spend.len(), 1, "{spend:?}");
    pg_sql(
        &db.name,
        "ALTER TABLE ledger ALTER COLUMN attempts TYPE bigint USING attempts::bigint".into(),
    );
    let ids: Vec<String> = h
        .query(all)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.task_id)
        .collect();
    assert_eq!(ids, ["t2", "t1"]);
    assert_eq!(ledger.close(Duration::from_secs(10)).await, 0);
}
