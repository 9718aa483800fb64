//! The durability promise of `[provenance] durability = "commit"`: `kill -9` the real gateway
//! binary while clients push tasks, then every task a client saw succeed has its ledger row,
//! on SQLite and on Postgres.
//!
//! A row is acknowledged once it is in the gateway's journal; the writer moves it into the
//! store a few milliseconds later. The test holds the store (SQLite's write lock, a Postgres
//! table lock) from another connection, waits until clients have had many answers that only
//! the journal holds, kills the gateway, checks that the store alone lacks those rows, then
//! starts the gateway again: it replays the journal, and every acknowledged task has exactly
//! one row.

use crate::support::ledger::postgres_outcomes;
use crate::support::process::Serve;
use crate::support::stores::TempDb;
use crate::support::{card, sim, Client, TestGateway};
use ldp_gateway::sim::SimOptions;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Successes seen before the store is locked.
const LOCK_AFTER: usize = 200;
/// Successes seen while the store is locked (only the journal holds them) before the kill.
const JOURNAL_ONLY: usize = 100;
/// Concurrent clients, each with its own session and connection pool.
const CLIENTS: usize = 8;

/// Posts a text-mode envelope with `body`; `None` once the gateway stopped answering.
async fn post(c: &Client, session: &str, body: Value) -> Option<Value> {
    let r = c.try_post_body(session, body, None).await.ok()?;
    // An answer cut off by the kill is no answer.
    serde_json::from_slice(&r.raw).ok()
}

/// What the clients saw.
#[derive(Default)]
struct Tally {
    succeeded: Mutex<Vec<String>>,
    count: AtomicUsize,
    in_flight: AtomicUsize,
    failed_answers: AtomicUsize,
    unanswered: AtomicUsize,
    killed: AtomicBool,
    /// `enough` is notified once this many successes were seen.
    notify_at: AtomicUsize,
    enough: tokio::sync::Notify,
}

/// Pushes tasks one after another until the gateway stops answering.
async fn client(base: String, n: usize, tally: Arc<Tally>) {
    let c = Client::new(&base).with_from("ldp:client:durability");
    let propose =
        json!({"type": "SESSION_PROPOSE", "config": {"preferred_payload_modes": ["text"]}});
    let Some(accept) = post(&c, "", propose).await else {
        assert!(tally.killed.load(Ordering::SeqCst), "no session");
        return;
    };
    assert_eq!(accept["body"]["type"], "SESSION_ACCEPT", "{accept}");
    let sid = accept["body"]["session_id"].as_str().unwrap().to_owned();
    for i in 0.. {
        let task_id = format!("c{n}-t{i}-{}", uuid::Uuid::new_v4());
        let submit = json!({"type": "TASK_SUBMIT", "task_id": task_id, "skill": "echo",
            "input": format!("task {i} of client {n}")});
        tally.in_flight.fetch_add(1, Ordering::SeqCst);
        let answer = post(&c, &sid, submit).await;
        tally.in_flight.fetch_sub(1, Ordering::SeqCst);
        let Some(answer) = answer else {
            assert!(
                tally.killed.load(Ordering::SeqCst),
                "the gateway stopped answering before it was killed"
            );
            tally.unanswered.fetch_add(1, Ordering::SeqCst);
            return;
        };
        match answer["body"]["type"].as_str() {
            Some("TASK_RESULT") => {
                assert_eq!(answer["body"]["task_id"], task_id.as_str());
                tally.succeeded.lock().unwrap().push(task_id);
                let seen = tally.count.fetch_add(1, Ordering::SeqCst) + 1;
                if seen >= tally.notify_at.load(Ordering::SeqCst) {
                    tally.enough.notify_one();
                }
            }
            _ => {
                tally.failed_answers.fetch_add(1, Ordering::SeqCst);
            }
        }
    }
}

/// The ledger's store, and a way to hold it.
enum Store {
    Sqlite,
    Postgres(TempDb),
}

/// A lock on the store from another connection: the gateway's writer waits for it (and
/// retries after its timeout) until it is dropped.
struct Held {
    release: std::sync::mpsc::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

impl Store {
    /// Holds the store: SQLite's write lock, or an exclusive lock on Postgres's `ledger`
    /// table (inserts wait; reads go on).
    async fn hold(&self, dir: &Path) -> Held {
        let (locked, is_locked) = std::sync::mpsc::channel();
        let (release, released) = std::sync::mpsc::channel::<()>();
        let (db, url) = match self {
            Store::Sqlite => (Some(dir.join("ledger.db")), None),
            Store::Postgres(db) => (None, Some(db.url())),
        };
        let thread = std::thread::spawn(move || {
            if let Some(db) = db {
                let conn = rusqlite::Connection::open(db).unwrap();
                conn.busy_timeout(Duration::from_secs(5)).unwrap();
                conn.execute_batch("BEGIN IMMEDIATE").unwrap();
                locked.send(()).unwrap();
                let _ = released.recv();
            } else if let Some(url) = url {
                let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
                let mut tx = c.transaction().unwrap();
                tx.batch_execute("LOCK TABLE ledger IN EXCLUSIVE MODE")
                    .unwrap();
                locked.send(()).unwrap();
                let _ = released.recv();
            }
        });
        tokio::task::spawn_blocking(move || is_locked.recv().unwrap())
            .await
            .unwrap();
        Held { release, thread }
    }

    /// `task id → outcomes` of every row in the store.
    async fn outcomes(&self, dir: &Path) -> BTreeMap<String, Vec<String>> {
        let rows = match self {
            Store::Sqlite => {
                let conn = rusqlite::Connection::open(dir.join("ledger.db")).unwrap();
                let mut stmt = conn.prepare("SELECT task_id, outcome FROM ledger").unwrap();
                let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?))).unwrap();
                rows.map(Result::unwrap).collect()
            }
            Store::Postgres(db) => postgres_outcomes(&db.url()).await,
        };
        let mut by_task: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (task, outcome) in rows {
            by_task.entry(task).or_default().push(outcome);
        }
        by_task
    }
}

impl Held {
    fn release(self) {
        drop(self.release);
        self.thread.join().unwrap();
    }
}

async fn commit_durability_survives_kill_9(store: Store) {
    let delegate = sim(SimOptions::new(card(
        "a",
        "default",
        &[("echo", 0.9)],
        &["text"],
    )))
    .await;
    let dir = tempfile::tempdir().unwrap();
    let url = match &store {
        Store::Sqlite => None,
        Store::Postgres(db) => Some(db.url()),
    };
    let config = TestGateway::builder()
        .delegate(&delegate.url())
        .config(move |c| {
            c.provenance.durability = ldp_gateway::provenance::Durability::Commit;
            if let Some(url) = url {
                c.provenance.store = url;
            }
        })
        .config_file(dir.path())
        .await;
    let child = Serve::new(&config).start().await;

    let tally = Arc::new(Tally::default());
    tally.notify_at.store(LOCK_AFTER, Ordering::SeqCst);
    let clients: Vec<_> = (0..CLIENTS)
        .map(|n| tokio::spawn(client(child.ldp.clone(), n, tally.clone())))
        .collect();
    let enough = tally.enough.notified();
    tokio::time::timeout(Duration::from_secs(60), enough)
        .await
        .expect("the clients reached the lock point");

    // Hold the store: from now on the rows the clients are told about are in the journal
    // only (the gateway's writer waits, then retries).
    let held = store.hold(dir.path()).await;
    let seen_at_lock = tally.count.load(Ordering::SeqCst);
    let target = seen_at_lock + JOURNAL_ONLY;
    tally.notify_at.store(target, Ordering::SeqCst);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while tally.count.load(Ordering::SeqCst) < target {
        let enough = tally.enough.notified();
        if tokio::time::timeout_at(deadline, enough).await.is_err() {
            break;
        }
    }
    assert!(
        tally.count.load(Ordering::SeqCst) >= target,
        "too few answers while the store was held: {} after {seen_at_lock}",
        tally.count.load(Ordering::SeqCst)
    );

    tally.killed.store(true, Ordering::SeqCst);
    let in_flight_at_kill = tally.in_flight.load(Ordering::SeqCst);
    let seen_at_kill = tally.count.load(Ordering::SeqCst);
    // SIGKILL: no handler, no drain, no ledger close.
    let (status, stderr) = child.kill().await;
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt as _;
        assert_eq!(status.signal(), Some(9), "killed by SIGKILL: {status}");
    }
    held.release();
    for c in clients {
        c.await.unwrap();
    }
    let succeeded = tally.succeeded.lock().unwrap().clone();
    assert!(succeeded.len() >= LOCK_AFTER + JOURNAL_ONLY);
    assert_eq!(tally.failed_answers.load(Ordering::SeqCst), 0, "{stderr}");
    assert!(
        in_flight_at_kill > 0,
        "the kill landed while tasks were in flight"
    );

    // The store alone (SQLite recovers the WAL the dead process left on this first open).
    let before = store.outcomes(dir.path()).await;
    let only_in_journal = succeeded
        .iter()
        .filter(|t| !before.contains_key(*t))
        .count();

    // Started again, the gateway replays its journal before it listens.
    let child = Serve::new(&config).start().await;
    let stderr = child.stop().await;
    let rows = store.outcomes(dir.path()).await;
    let missing: Vec<&String> = succeeded
        .iter()
        .filter(|t| rows.get(*t).map(Vec::as_slice) != Some(&["result".to_owned()][..]))
        .collect();
    let twice = rows.values().filter(|o| o.len() > 1).count();
    let unseen = rows.len() - (succeeded.len() - missing.len());
    eprintln!(
        "store held after {seen_at_lock} successes, kill -9 after {seen_at_kill}: \
         {in_flight_at_kill} tasks in flight, {} successes seen in all, {} left unanswered; \
         {only_in_journal} acknowledged rows were in the journal only; after the restart {} \
         ledger rows ({unseen} recorded but never answered), {} missing, {twice} twice",
        succeeded.len(),
        tally.unanswered.load(Ordering::SeqCst),
        rows.len(),
        missing.len()
    );
    // Each client may have had an answer on its way when the store was held: its row was in
    // the store already, though it is counted after the hold.
    assert!(
        only_in_journal >= JOURNAL_ONLY - CLIENTS,
        "answers given while the store was held are in the journal only: {only_in_journal}"
    );
    assert!(
        missing.is_empty(),
        "{} of {} tasks the client saw succeed have no row: {missing:?}\n{stderr}",
        missing.len(),
        succeeded.len()
    );
    assert_eq!(twice, 0, "a task recorded twice");
    delegate.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn commit_durability_survives_kill_9_on_sqlite() {
    commit_durability_survives_kill_9(Store::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn commit_durability_survives_kill_9_on_postgres() {
    commit_durability_survives_kill_9(Store::Postgres(TempDb::new())).await;
}
