//! The ledger journal under damage and overload (issue 37): one damaged record lost every
//! row after it (item 1), and a journal that could take no more rows held every client until
//! its deadline (item 14). Both through the real binary, its store held from another
//! connection so that acknowledged rows are in the journal only.

use crate::support::ledger::sqlite_outcomes;
use crate::support::metrics::Scrape;
use crate::support::process::{Serve, Served};
use crate::support::{card, eventually_async, sim, Client, TestGateway};
use ldp_gateway::sim::SimOptions;
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What a client is told when its row is refused because the store is too far behind.
const OVERLOADED: &str = "the provenance ledger is overloaded (its store is behind); retry later";

async fn echo_delegate() -> ldp_gateway::sim::SimHandle {
    sim(SimOptions::new(card(
        "a",
        "default",
        &[("echo", 0.9)],
        &["text"],
    )))
    .await
}

/// SQLite's write lock on `db`, taken from another connection: the gateway's writer waits
/// (and retries) until it is released, so acknowledged rows stay in the journal only.
struct Held {
    release: std::sync::mpsc::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

impl Held {
    async fn take(db: PathBuf) -> Held {
        let (locked, is_locked) = std::sync::mpsc::channel();
        let (release, released) = std::sync::mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            let conn = rusqlite::Connection::open(db).unwrap();
            conn.busy_timeout(Duration::from_secs(5)).unwrap();
            conn.execute_batch("BEGIN IMMEDIATE").unwrap();
            locked.send(()).unwrap();
            let _ = released.recv();
        });
        tokio::task::spawn_blocking(move || is_locked.recv().unwrap())
            .await
            .unwrap();
        Held { release, thread }
    }

    fn release(self) {
        drop(self.release);
        self.thread.join().unwrap();
    }
}

/// Task ids with a `result` row in the SQLite ledger at `db`.
fn result_rows(db: &Path) -> BTreeSet<String> {
    sqlite_outcomes(db)
        .into_iter()
        .filter(|(_, outcome)| outcome == "result")
        .map(|(task, _)| task)
        .collect()
}

/// Files in `dir` whose name starts with `start` and ends with `end`.
fn files(dir: &Path, start: &str, end: &str) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            name.starts_with(start) && name.ends_with(end)
        })
        .collect();
    found.sort();
    found
}

/// One scrape of the gateway's `/metrics`.
async fn metrics(gw: &Served) -> Scrape {
    Scrape(gw.admin().get("/metrics").await.text())
}

/// Item 1: store held, 100 tasks acknowledged (in the journal only), `kill -9`, one bit
/// flipped in the length of record 11 (its framing lost). The old gateway replayed the 10
/// rows before it, called the rest "a torn record (a crash mid-write)" and deleted the file.
/// Now every row but the damaged one is in the ledger after the restart, the file is kept
/// aside and named in an ERROR line, the damaged record is counted, and the gateway is
/// ready (the lost row cannot be brought back by refusing traffic).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_journal_record_loses_that_row_only() {
    const TASKS: usize = 100;
    const DAMAGED: usize = 11;
    let delegate = echo_delegate().await;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("ledger.db");
    let config = TestGateway::builder()
        .delegate(&delegate.url())
        .config_file(dir.path())
        .await;
    let child = Serve::new(&config).start().await;
    let held = Held::take(db.clone()).await;
    let c = child.client();
    let (sid, _) = c
        .session(json!({"preferred_payload_modes": ["text"]}))
        .await;
    let mut acknowledged = Vec::new();
    for i in 0..TASKS {
        let b = c
            .task(&sid, "echo", json!(format!("task {i}")), "text")
            .await;
        assert_eq!(b["type"], "TASK_RESULT", "{b}");
        acknowledged.push(b["task_id"].as_str().unwrap().to_owned());
    }
    child.kill().await;
    held.release();
    let before = result_rows(&db);
    assert!(
        acknowledged.iter().all(|t| !before.contains(t)),
        "the store alone has none of them"
    );

    // One bit of record 11's length: the old reader stopped there.
    let journal = files(dir.path(), "ledger.db.", ".journal");
    assert_eq!(journal.len(), 1, "{journal:?}");
    let journal = journal[0].clone();
    let mut bytes = std::fs::read(&journal).unwrap();
    // After the 24-byte header: `length u32 | crc32 u32 | seq u64 | row JSON` per record.
    let (mut at, mut damaged_task) = (24, String::new());
    for n in 1..=DAMAGED {
        let len = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
        if n == DAMAGED {
            let row: Value = serde_json::from_slice(&bytes[at + 16..at + 16 + len]).unwrap();
            damaged_task = row["task_id"].as_str().unwrap().to_owned();
            bytes[at + 1] ^= 0x10;
        } else {
            at += 16 + len;
        }
    }
    assert!(acknowledged.contains(&damaged_task), "{damaged_task}");
    std::fs::write(&journal, &bytes).unwrap();

    let child = Serve::new(&config).start().await;
    let scrape = metrics(&child).await;
    let damaged = scrape.sum("ldp_gateway_journal_damaged_records_total");
    let ready = eventually_async(Duration::from_secs(30), || async {
        let r = child.admin().get("/readyz").await;
        r.status == 200 && r.json["ledger"] == json!(true)
    })
    .await;
    let stderr = child.stop().await;
    let rows = result_rows(&db);
    let recovered = acknowledged.iter().filter(|t| rows.contains(*t)).count();
    let missing: Vec<&String> = acknowledged.iter().filter(|t| !rows.contains(*t)).collect();
    let name = journal.file_name().unwrap().to_string_lossy().into_owned();
    let aside = files(dir.path(), &format!("{name}.damaged-"), "");
    eprintln!(
        "journal of {TASKS} acknowledged rows, record {DAMAGED}'s length damaged: {recovered} \
         rows recovered, missing {missing:?}, ldp_gateway_journal_damaged_records_total \
         {damaged}, kept aside {aside:?}, ready {ready}"
    );
    assert_eq!(
        missing,
        [&damaged_task],
        "every row but the damaged one\n{stderr}"
    );
    assert_eq!(recovered, TASKS - 1);
    assert_eq!(damaged, 1.0, "{scrape}");
    assert_eq!(aside.len(), 1, "the damaged journal is kept aside");
    assert_eq!(std::fs::read(&aside[0]).unwrap(), bytes, "as found");
    assert!(!journal.exists());
    assert!(
        stderr.contains("ERROR")
            && stderr.contains("a ledger journal was damaged")
            && stderr.contains(&*aside[0].to_string_lossy()),
        "an error names the kept file:\n{stderr}"
    );
    assert!(!stderr.contains("torn record"), "{stderr}");
    assert!(ready, "ready after recovering what could be");
    delegate.shutdown().await;
}

/// What the clients of the overload test saw.
#[derive(Default)]
struct Tally {
    acknowledged: Mutex<Vec<String>>,
    refused: Mutex<Vec<String>>,
    others: Mutex<Vec<Value>>,
    refusals: AtomicUsize,
    stop: AtomicBool,
}

/// One client: tasks one after another until `tally.stop`.
async fn push(c: Client, n: usize, tally: Arc<Tally>) {
    let c = c.with_from(&format!("ldp:client:journal-{n}"));
    let (sid, _) = c
        .session(json!({"preferred_payload_modes": ["text"]}))
        .await;
    let mut i = 0;
    while !tally.stop.load(Ordering::SeqCst) {
        let b = c
            .task(&sid, "echo", json!(format!("{n}/{i}")), "text")
            .await;
        i += 1;
        let task = b["task_id"].as_str().unwrap().to_owned();
        match b["type"].as_str() {
            Some("TASK_RESULT") => tally.acknowledged.lock().unwrap().push(task),
            Some("TASK_FAILED")
                if b["error"]["message"] == OVERLOADED
                    && b["error"]["code"] == "INTERNAL"
                    && b["error"]["retryable"] == true =>
            {
                tally.refused.lock().unwrap().push(task);
                tally.refusals.fetch_add(1, Ordering::SeqCst);
            }
            _ => tally.others.lock().unwrap().push(b),
        }
    }
}

/// Which of the store's backlogs the overload test fills.
#[derive(Clone, Copy, Debug)]
enum Fill {
    /// The journal, at a 64 KiB limit.
    Journal,
    /// The writer's queue, 16 rows.
    Queue,
}

/// Item 14 (the journal's part): the store held while clients keep sending. Once the
/// backlog is full each client is told at once, in its protocol, that the ledger is
/// overloaded (TASK_FAILED, retryable), and every refusal is counted; once the store moves
/// again rows are taken again; after a `kill -9` and a restart every acknowledged row is in
/// the ledger, and no refused one.
async fn overload_is_refused_clearly_and_loses_nothing(fill: Fill) {
    const CLIENTS: usize = 4;
    const REFUSALS: usize = 8;
    let delegate = echo_delegate().await;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("ledger.db");
    let config = TestGateway::builder()
        .delegate(&delegate.url())
        .config(move |c| match fill {
            Fill::Journal => c.provenance.journal_max_bytes = 64 << 10,
            Fill::Queue => c.provenance.queue_capacity = 16,
        })
        .config_file(dir.path())
        .await;
    let child = Serve::new(&config).start().await;
    let held = Held::take(db.clone()).await;
    let tally = Arc::new(Tally::default());
    let clients: Vec<_> = (0..CLIENTS)
        .map(|n| tokio::spawn(push(child.client(), n, tally.clone())))
        .collect();
    let refused_enough = eventually_async(Duration::from_secs(120), || async {
        tally.refusals.load(Ordering::SeqCst) >= REFUSALS
            || !tally.others.lock().unwrap().is_empty()
    })
    .await;
    tally.stop.store(true, Ordering::SeqCst);
    for c in clients {
        c.await.unwrap();
    }
    let scrape = metrics(&child).await;
    let mut acknowledged = tally.acknowledged.lock().unwrap().clone();
    let refused = tally.refused.lock().unwrap().clone();
    let others = tally.others.lock().unwrap().clone();
    assert!(others.is_empty(), "{fill:?}: other answers: {others:?}");
    assert!(
        refused_enough,
        "{fill:?}: {} refused, {} acknowledged",
        refused.len(),
        acknowledged.len()
    );
    let (full, not) = match fill {
        Fill::Journal => ("journal_full", "queue_full"),
        Fill::Queue => ("queue_full", "journal_full"),
    };
    let shed = |reason: &str| {
        scrape.sum(&format!(
            "ldp_gateway_ledger_shed_rows_total{{reason=\"{reason}\"}}"
        ))
    };
    let counted = (shed(full), shed(not));
    assert_eq!(counted, (refused.len() as f64, 0.0), "{fill:?}: {scrape}");

    // The store moves again: rows are taken again.
    held.release();
    let c = child.client();
    let (sid, _) = c
        .session(json!({"preferred_payload_modes": ["text"]}))
        .await;
    let taken = Mutex::new(None);
    let resumed = eventually_async(Duration::from_secs(60), || async {
        let b = c.task(&sid, "echo", json!("after"), "text").await;
        let ok = b["type"] == "TASK_RESULT";
        if ok {
            *taken.lock().unwrap() = Some(b["task_id"].as_str().unwrap().to_owned());
        }
        ok
    })
    .await;
    assert!(resumed, "{fill:?}: rows never taken again");
    acknowledged.extend(taken.into_inner().unwrap());

    // Nothing acknowledged is lost, nothing refused was recorded.
    child.kill().await;
    let child = Serve::new(&config).start().await;
    let stderr = child.stop().await;
    let rows = result_rows(&db);
    let missing: Vec<&String> = acknowledged.iter().filter(|t| !rows.contains(*t)).collect();
    let recorded_refused = refused.iter().filter(|t| rows.contains(*t)).count();
    eprintln!(
        "{fill:?} full: {} acknowledged, {} refused as overloaded \
         (ldp_gateway_ledger_shed_rows_total{{reason=\"{full}\"}} {}); after kill -9 and \
         restart {} missing, {recorded_refused} refused rows recorded",
        acknowledged.len(),
        refused.len(),
        counted.0,
        missing.len()
    );
    assert!(missing.is_empty(), "{fill:?}: lost {missing:?}\n{stderr}");
    assert_eq!(recorded_refused, 0, "{fill:?}");
    delegate.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_full_journal_is_refused_clearly_and_loses_nothing() {
    overload_is_refused_clearly_and_loses_nothing(Fill::Journal).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_full_ledger_queue_is_refused_clearly_and_loses_nothing() {
    overload_is_refused_clearly_and_loses_nothing(Fill::Queue).await;
}
