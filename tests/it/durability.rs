//! The durability promise of `[provenance] durability = "commit"`: `kill -9` the real gateway
//! binary while clients push tasks, then every task a client saw succeed has its ledger row.
//!
//! The writer commits within microseconds of a task's end, so a kill at an arbitrary moment
//! almost never lands between an answer and its commit, and even `async` would pass. The test
//! therefore holds SQLite's write lock from another connection before the kill and waits until
//! every client's latest task is queued for the writer (`ldp_gateway_ledger_queue_depth`): in
//! that state a gateway that answered before committing has answered rows the kill then loses.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests fail loudly")]

mod common;

use common::{card, sim};
use ldp_gateway::sim::SimOptions;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};

/// Successes seen before the write lock is taken and the gateway killed.
const KILL_AFTER: usize = 200;
/// Concurrent clients, each with its own session and connection pool.
const CLIENTS: usize = 8;

/// A running `ldp-gateway serve` child and the URLs it printed.
struct Child {
    process: tokio::process::Child,
    ldp: String,
    admin: String,
    stderr: tokio::task::JoinHandle<String>,
}

/// Starts `ldp-gateway serve --config FILE` and waits for the two URL lines it prints once
/// both listeners are bound (its readiness signal).
async fn serve(config: &std::path::Path) -> Child {
    let mut process = tokio::process::Command::new(env!("CARGO_BIN_EXE_ldp-gateway"))
        .args(["serve", "--config"])
        .arg(config)
        .env("RUST_LOG", "warn")
        .env_remove("LDP_ADMIN_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut err = process.stderr.take().unwrap();
    let stderr = tokio::spawn(async move {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s).await;
        s
    });
    let mut lines = BufReader::new(process.stdout.take().unwrap()).lines();
    let mut ldp = None;
    let mut admin = None;
    let ready = tokio::time::timeout(Duration::from_secs(30), async {
        while ldp.is_none() || admin.is_none() {
            let Some(line) = lines.next_line().await.unwrap() else {
                break;
            };
            if let Some(url) = line.strip_prefix("LDP endpoint:") {
                ldp = Some(url.trim().to_owned());
            } else if let Some(url) = line.strip_prefix("admin:") {
                admin = Some(url.trim().to_owned());
            }
        }
    })
    .await;
    if ready.is_err() || ldp.is_none() || admin.is_none() {
        let _ = process.start_kill();
        let _ = process.wait().await;
        panic!("gateway did not start:\n{}", stderr.await.unwrap());
    }
    // Keep draining stdout so the child never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Child {
        process,
        ldp: ldp.unwrap(),
        admin: admin.unwrap(),
        stderr,
    }
}

async fn post(http: &reqwest::Client, base: &str, session: &str, body: Value) -> Option<Value> {
    let env = json!({
        "message_id": uuid::Uuid::new_v4().to_string(), "session_id": session,
        "from": "ldp:client:durability", "to": "ldp:delegate:gateway", "body": body,
        "payload_mode": "text", "timestamp": "2026-01-01T00:00:00Z", "provenance": null
    });
    let resp = http
        .post(format!("{base}/ldp/messages"))
        .header("content-type", "application/json")
        .body(serde_json::to_vec(&env).unwrap())
        .send()
        .await
        .ok()?;
    serde_json::from_slice(&resp.bytes().await.ok()?).ok()
}

/// `ldp_gateway_ledger_queue_depth` from the admin listener.
async fn queue_depth(http: &reqwest::Client, admin: &str) -> i64 {
    let text = http
        .get(format!("{admin}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
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
    let http = reqwest::Client::new();
    let propose =
        json!({"type": "SESSION_PROPOSE", "config": {"preferred_payload_modes": ["text"]}});
    let Some(accept) = post(&http, &base, "", propose).await else {
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
        let answer = post(&http, &base, &sid, submit).await;
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
    let db = dir.path().join("p.db");
    let config = dir.path().join("gateway.toml");
    let policies = concat!(env!("CARGO_MANIFEST_DIR"), "/policies");
    std::fs::write(
        &config,
        format!(
            r#"
[server]
listen = "127.0.0.1:0"
[admin]
listen = "127.0.0.1:0"
[discovery]
poll_interval = "1h"
[policies]
dir = {policies:?}
[provenance]
store = {store:?}
durability = "commit"
[[delegates]]
url = {url:?}
name = "sim"
"#,
            store = format!("sqlite://{}", db.display()),
            url = delegate.url(),
        ),
    )
    .unwrap();
    let mut child = serve(&config).await;

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
    let http = reqwest::Client::new();
    let mut polls = 0;
    while queue_depth(&http, &child.admin).await < CLIENTS as i64 {
        polls += 1;
        assert!(polls < 5_000, "the clients' rows never queued up");
    }

    tally.killed.store(true, Ordering::SeqCst);
    let in_flight_at_kill = tally.in_flight.load(Ordering::SeqCst);
    let seen_at_kill = tally.count.load(Ordering::SeqCst);
    // tokio's `start_kill` is SIGKILL on Unix: no handler, no drain, no ledger close.
    child.process.start_kill().unwrap();
    let status = child.process.wait().await.unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt as _;
        assert_eq!(status.signal(), Some(9), "killed by SIGKILL: {status}");
    }
    drop(lock);
    for c in clients {
        c.await.unwrap();
    }
    let stderr = child.stderr.await.unwrap();

    // SQLite recovers the WAL the dead process left on the first open.
    let conn = rusqlite::Connection::open(&db).unwrap();
    let mut stmt = conn.prepare("SELECT task_id, outcome FROM ledger").unwrap();
    let rows: BTreeMap<String, String> = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
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
