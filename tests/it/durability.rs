//! The durability promise of `[provenance] durability = "commit"`: `kill -9` the real gateway
//! binary while clients push tasks, then every task a client saw succeed has its ledger row.
//!
//! The writer commits within microseconds of a task's end, so a kill at an arbitrary moment
//! almost never lands between an answer and its commit, and even `async` would pass. The test
//! therefore holds SQLite's write lock from another connection before the kill and waits until
//! every client's latest task is queued for the writer (`ldp_gateway_ledger_queue_depth`): in
//! that state a gateway that answered before committing has answered rows the kill then loses.

use crate::support::ledger::sqlite_outcomes;
use crate::support::process::Serve;
use crate::support::{card, sim, Client, TestGateway};
use ldp_gateway::sim::SimOptions;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Successes seen before the write lock is taken and the gateway killed.
const KILL_AFTER: usize = 200;
/// Concurrent clients, each with its own session and connection pool.
const CLIENTS: usize = 8;

/// Posts a text-mode envelope with `body`; `None` once the gateway stopped answering.
async fn post(c: &Client, session: &str, body: Value) -> Option<Value> {
    let r = c.try_post_body(session, body, None).await.ok()?;
    // An answer cut off by the kill is no answer.
    serde_json::from_slice(&r.raw).ok()
}

/// `ldp_gateway_ledger_queue_depth` from the admin listener.
async fn queue_depth(admin: &Client) -> i64 {
    let scrape = admin.get("/metrics").await.text();
    scrape
        .lines()
        .find_map(|l| l.strip_prefix("ldp_gateway_ledger_queue_depth "))
        .expect("the queue depth is exported")
        .parse()
        .unwrap()
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
                if tally.count.fetch_add(1, Ordering::SeqCst) + 1 == KILL_AFTER {
                    tally.enough.notify_one();
                }
            }
            _ => {
                tally.failed_answers.fetch_add(1, Ordering::SeqCst);
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn commit_durability_survives_kill_9() {
    let delegate = sim(SimOptions::new(card(
        "a",
        "default",
        &[("echo", 0.9)],
        &["text"],
    )))
    .await;
    let dir = tempfile::tempdir().unwrap();
    let config = TestGateway::builder()
        .delegate(&delegate.url())
        .config(|c| c.provenance.durability = ldp_gateway::provenance::Durability::Commit)
        .config_file(dir.path())
        .await;
    let db = dir.path().join("ledger.db");
    let child = Serve::new(&config).start().await;

    let tally = Arc::new(Tally::default());
    let clients: Vec<_> = (0..CLIENTS)
        .map(|n| tokio::spawn(client(child.ldp.clone(), n, tally.clone())))
        .collect();
    let enough = tally.enough.notified();
    tokio::time::timeout(Duration::from_secs(60), enough)
        .await
        .expect("the clients reached the kill point");

    // Hold the write lock: commits now wait (up to the gateway's 5 s busy timeout).
    let path = db.clone();
    let lock = tokio::task::spawn_blocking(move || {
        let conn = rusqlite::Connection::open(path).unwrap();
        conn.busy_timeout(Duration::from_secs(5)).unwrap();
        conn.execute_batch("BEGIN IMMEDIATE").unwrap();
        conn
    })
    .await
    .unwrap();
    let seen_at_lock = tally.count.load(Ordering::SeqCst);
    let mut polls = 0;
    let admin = child.admin();
    while queue_depth(&admin).await < CLIENTS as i64 {
        polls += 1;
        assert!(polls < 5_000, "the clients' rows never queued up");
    }

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
    drop(lock);
    for c in clients {
        c.await.unwrap();
    }

    // SQLite recovers the WAL the dead process left on the first open.
    let rows = sqlite_outcomes(&db);
    let succeeded = tally.succeeded.lock().unwrap().clone();
    let missing: Vec<&String> = succeeded
        .iter()
        .filter(|t| rows.get(*t).map(String::as_str) != Some("result"))
        .collect();
    let unseen = rows.len() - (succeeded.len() - missing.len());
    eprintln!(
        "write lock after {seen_at_lock} successes, kill -9 after {seen_at_kill}: \
         {in_flight_at_kill} tasks in flight, {} successes seen in all, {} left unanswered, \
         {} ledger rows ({unseen} committed but never answered), {} missing",
        succeeded.len(),
        tally.unanswered.load(Ordering::SeqCst),
        rows.len(),
        missing.len()
    );
    assert!(succeeded.len() >= KILL_AFTER);
    assert_eq!(tally.failed_answers.load(Ordering::SeqCst), 0, "{stderr}");
    assert!(
        in_flight_at_kill > 0,
        "the kill landed while tasks were in flight"
    );
    assert!(
        missing.is_empty(),
        "{} of {} tasks the client saw succeed have no row: {missing:?}",
        missing.len(),
        succeeded.len()
    );
    delegate.shutdown().await;
}
