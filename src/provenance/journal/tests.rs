//! The journal in front of the writer: acknowledged before the store has a row, replayed
//! once (the store's mark), read back by the readers that must see it, retried while the
//! store fails.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests fail loudly")]

use super::super::sqlite::tests::row;
use super::super::tests::Wrapped;
use super::*;
use crate::provenance::{open_journaled, Durability, Ledger, Query, SqliteBackend};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc as std_mpsc;

fn metrics() -> Arc<Metrics> {
    Arc::new(Metrics::new().unwrap())
}

/// The journals' place of the SQLite ledger `dir/p.db`.
fn place(dir: &Path) -> Place {
    Place {
        dir: dir.to_owned(),
        prefix: "p.db.".into(),
    }
}

/// The journal files in `dir`.
fn journals(dir: &Path) -> Vec<std::path::PathBuf> {
    place(dir).journals().unwrap()
}

/// Task ids in the SQLite ledger at `db`.
fn stored(db: &Path) -> Vec<String> {
    let conn = rusqlite::Connection::open(db).unwrap();
    let mut stmt = conn
        .prepare("SELECT task_id FROM ledger ORDER BY task_id")
        .unwrap();
    let ids = stmt.query_map([], |r| r.get(0)).unwrap();
    ids.map(Result::unwrap).collect()
}

/// While the store takes nothing (its first insert held at a gate), records are acknowledged
/// from the journal; a copy of the files taken then (what a `kill -9` leaves) holds every
/// acknowledged row once recovered, each once, and the recovered journal is empty.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_acknowledged_while_the_store_is_held_are_replayed_from_a_crash_copy() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("p.db");
    let (entered_tx, entered) = std_mpsc::channel::<()>();
    let (open_gate, gate) = std_mpsc::channel::<()>();
    let (mut entered_tx, mut gate) = (Some(entered_tx), Some(gate));
    let backend = Wrapped {
        before_insert: Box::new(move |_| {
            if let (Some(entered), Some(gate)) = (entered_tx.take(), gate.take()) {
                let _ = entered.send(());
                let _ = gate.recv();
            }
            Ok(())
        }),
        ..Wrapped::new(SqliteBackend::open(&db.display().to_string(), Durability::Commit).unwrap())
    };
    let opened = open_journaled(Box::new(backend), &place(dir.path()), false).unwrap();
    let ledger = Ledger::start_opened(opened, Durability::Commit, 1000, metrics());
    let h = ledger.handle();
    h.record(row("t000", "s", 1)).await.unwrap();
    tokio::task::spawn_blocking(move || entered.recv().unwrap())
        .await
        .unwrap();
    // The store is held inside its first insert: these are acknowledged by the journal alone.
    for i in 1..50 {
        h.record(row(&format!("t{i:03}"), "s", 1)).await.unwrap();
    }
    let crash = dir.path().join("crash");
    std::fs::create_dir(&crash).unwrap();
    let mut files = journals(dir.path());
    assert_eq!(files.len(), 1);
    files.extend(["p.db", "p.db-wal"].map(|f| dir.path().join(f)));
    for f in files {
        let _ = std::fs::copy(&f, crash.join(f.file_name().unwrap()));
    }
    assert!(
        stored(&crash.join("p.db")).is_empty(),
        "the store held nothing yet"
    );
    drop(open_gate);
    assert_eq!(ledger.close(Duration::from_secs(30)).await, 0);
    let all: Vec<String> = (0..50).map(|i| format!("t{i:03}")).collect();
    assert_eq!(stored(&db), all, "the running ledger moved every row");
    assert!(
        journals(dir.path()).is_empty(),
        "a clean stop deletes the journal"
    );

    // The copy: recovery replays the journal into the store, once.
    let copy = crash.join("p.db").display().to_string();
    for replayed in [50, 0] {
        let backend = SqliteBackend::open(&copy, Durability::Commit).unwrap();
        let opened = open_journaled(Box::new(backend), &place(&crash), false).unwrap();
        assert_eq!(opened.journal.as_ref().unwrap().replayed, replayed);
        drop(opened);
        assert_eq!(stored(&crash.join("p.db")), all);
        assert_eq!(journals(&crash).len(), 1, "the adopted journal is gone");
    }
}

/// The offset of record `seq` (numbered from 1) in journal `bytes`, walking the framing.
fn record_offset(bytes: &[u8], seq: usize) -> usize {
    let mut at = file::HEADER as usize;
    for _ in 1..seq {
        let len = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
        at += 16 + len;
    }
    at
}

/// Files in `dir` whose name starts with `start`.
fn named(dir: &Path, start: &str) -> Vec<std::path::PathBuf> {
    let mut found: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with(start))
        .collect();
    found.sort();
    found
}

/// A journal with one bit flipped in a middle record: every other row is replayed, the file
/// is renamed aside as found (never deleted, never adopted again), and the ledger counts the
/// damaged record. The old reader replayed the 10 rows before it and deleted the file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_journal_is_replayed_around_the_damage_and_kept_aside() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("p.db");
    let path = dir.path().join("p.db.earlier.journal");
    let mut j = JournalFile::create(&path, [7; 16]).unwrap();
    let rows: Vec<LedgerRow> = (1..=20).map(|i| row(&format!("t{i:02}"), "s", i)).collect();
    j.append(rows.iter(), 1, false).unwrap();
    drop(j);
    let mut bytes = std::fs::read(&path).unwrap();
    let at = record_offset(&bytes, 11);
    bytes[at + 40] ^= 0x08;
    std::fs::write(&path, &bytes).unwrap();

    let backend = SqliteBackend::open(&db.display().to_string(), Durability::Commit).unwrap();
    let opened = open_journaled(Box::new(backend), &place(dir.path()), false).unwrap();
    let recovered = opened.journal.as_ref().unwrap();
    assert_eq!((recovered.replayed, recovered.damaged), (19, 1));
    let m = metrics();
    let ledger = Ledger::start_opened(opened, Durability::Commit, 1000, m.clone());
    assert_eq!(m.journal_damaged.get(), 1);
    assert_eq!(ledger.close(Duration::from_secs(30)).await, 0);
    let want: Vec<String> = (1..=20)
        .filter(|i| *i != 11)
        .map(|i| format!("t{i:02}"))
        .collect();
    assert_eq!(stored(&db), want);
    assert!(!path.exists());
    let aside = named(dir.path(), "p.db.earlier.journal.damaged-");
    assert_eq!(aside.len(), 1, "kept aside: {aside:?}");
    assert_eq!(std::fs::read(&aside[0]).unwrap(), bytes, "as found");

    // Not a journal any more: the next start has nothing to adopt.
    let backend = SqliteBackend::open(&db.display().to_string(), Durability::Commit).unwrap();
    let opened = open_journaled(Box::new(backend), &place(dir.path()), false).unwrap();
    let recovered = opened.journal.as_ref().unwrap();
    assert_eq!((recovered.replayed, recovered.damaged), (0, 0));
    assert_eq!(named(dir.path(), "p.db.earlier.journal.damaged-"), aside);
}

/// A ledger whose store is held inside its first insert until `gate` is dropped, journaling
/// into `dir`; `entered` says the insert was reached.
fn held_ledger(
    dir: &Path,
    capacity: usize,
    journal_max: u64,
    m: &Arc<Metrics>,
) -> (Ledger, std_mpsc::Receiver<()>, std_mpsc::Sender<()>) {
    let db = dir.join("p.db");
    let (entered_tx, entered) = std_mpsc::channel::<()>();
    let (open_gate, gate) = std_mpsc::channel::<()>();
    let (mut entered_tx, mut gate) = (Some(entered_tx), Some(gate));
    let backend = Wrapped {
        before_insert: Box::new(move |_| {
            if let (Some(entered), Some(gate)) = (entered_tx.take(), gate.take()) {
                let _ = entered.send(());
                let _ = gate.recv();
            }
            Ok(())
        }),
        ..Wrapped::new(SqliteBackend::open(&db.display().to_string(), Durability::Commit).unwrap())
    };
    let opened = open_journaled(Box::new(backend), &place(dir), false)
        .unwrap()
        .with_journal_max(journal_max);
    let ledger = Ledger::start_opened(opened, Durability::Commit, capacity, m.clone());
    (ledger, entered, open_gate)
}

/// Records rows `from..` until one is refused: the rows acknowledged, and the refusal.
async fn record_until_refused(
    h: &crate::provenance::LedgerHandle,
    from: usize,
) -> (Vec<String>, LedgerError) {
    let mut acknowledged = Vec::new();
    for i in from..from + 100_000 {
        let task = format!("t{i:05}");
        match h.record(row(&task, "s", 1)).await {
            Ok(()) => acknowledged.push(task),
            Err(e) => return (acknowledged, e),
        }
    }
    panic!("never refused")
}

/// Overload with the store held: the journal takes rows up to its limit, then refuses the
/// next one (after waiting a moment for the store) and every one after it at once, with
/// `Overloaded(Journal)`, each counted; once the store moves, rows are taken again, and
/// every acknowledged row reaches the store. (The old journal waited 30 s per group at its
/// limit, and every client's record timed out meanwhile.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_journal_refuses_rows_until_the_store_catches_up() {
    const MAX: u64 = 64 << 10;
    let dir = tempfile::tempdir().unwrap();
    let m = metrics();
    let (ledger, entered, open_gate) = held_ledger(dir.path(), 1000, MAX, &m);
    let h = ledger.handle();
    h.record(row("t00000", "s", 1)).await.unwrap();
    tokio::task::spawn_blocking(move || entered.recv().unwrap())
        .await
        .unwrap();
    let (mut acknowledged, refused) = record_until_refused(&h, 1).await;
    assert!(
        matches!(refused, LedgerError::Overloaded(Backlog::Journal)),
        "{refused}"
    );
    assert!(acknowledged.len() > 20, "{} rows fit", acknowledged.len());
    let journal = journals(dir.path()).pop().unwrap();
    let size = std::fs::metadata(&journal).unwrap().len();
    assert!(
        (MAX..MAX + 4096).contains(&size),
        "{size} bytes: a row past the limit at most"
    );
    for i in 0..3 {
        let again = h.record(row(&format!("r{i}"), "s", 1)).await;
        assert!(
            matches!(again, Err(LedgerError::Overloaded(Backlog::Journal))),
            "{again:?}"
        );
    }
    let shed = |reason: &str| m.ledger_shed.with_label_values(&[reason]).get();
    assert_eq!((shed("journal_full"), shed("queue_full")), (4, 0));
    assert!(
        !h.healthy(Duration::from_secs(10)).await,
        "not ready while refusing"
    );

    drop(open_gate);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        match h.record(row("after", "s", 1)).await {
            Ok(()) => break,
            Err(LedgerError::Overloaded(_)) => {
                assert!(std::time::Instant::now() < deadline, "never taken again")
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(ledger.close(Duration::from_secs(30)).await, 0);
    acknowledged.extend(["t00000", "after"].map(String::from));
    acknowledged.sort();
    assert_eq!(stored(&dir.path().join("p.db")), acknowledged);
}

/// The writer's queue full (the store held inside a commit): the next row waits a moment
/// and is refused with `Overloaded(Queue)`, counted, instead of waiting for the record
/// deadline (the old journal thread blocked handing the row over, its clients for 30 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_writer_queue_refuses_rows() {
    let dir = tempfile::tempdir().unwrap();
    let m = metrics();
    let (ledger, entered, open_gate) = held_ledger(dir.path(), 4, super::JOURNAL_MAX, &m);
    let h = ledger.handle();
    h.record(row("t00000", "s", 1)).await.unwrap();
    tokio::task::spawn_blocking(move || entered.recv().unwrap())
        .await
        .unwrap();
    let (mut acknowledged, refused) = record_until_refused(&h, 1).await;
    assert!(
        matches!(refused, LedgerError::Overloaded(Backlog::Queue)),
        "{refused}"
    );
    assert!(
        acknowledged.len() >= 4,
        "the queue's 4 rows: {acknowledged:?}"
    );
    let shed = |reason: &str| m.ledger_shed.with_label_values(&[reason]).get();
    assert_eq!((shed("journal_full"), shed("queue_full")), (0, 1));
    drop(open_gate);
    assert_eq!(ledger.close(Duration::from_secs(30)).await, 0);
    acknowledged.push("t00000".into());
    acknowledged.sort();
    assert_eq!(stored(&dir.path().join("p.db")), acknowledged);
}

/// The shed reasons are the metric's known labels.
#[test]
fn shed_reasons_are_the_metric_labels() {
    let labels: Vec<&str> = Backlog::ALL.iter().map(|b| b.label()).collect();
    assert_eq!(labels, crate::telemetry::LEDGER_SHED_REASONS);
}

/// A crash after the store committed some of the journal's rows but before the journal was
/// emptied: only the rows after the store's mark are replayed.
#[test]
fn replay_skips_the_rows_the_store_has() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("p.db");
    let path = dir.path().join("p.db.earlier.journal");
    let mut j = JournalFile::create(&path, [7; 16]).unwrap();
    let rows: Vec<LedgerRow> = (1..=5).map(|i| row(&format!("t{i}"), "s", i)).collect();
    j.append(rows.iter(), 1, false).unwrap();
    let id = j.id();
    drop(j);
    // A live neighbour's journal (it holds the lock) is left alone.
    let live = dir.path().join("p.db.live.journal");
    let mut held = JournalFile::create(&live, [8; 16]).unwrap();
    held.append([row("live", "s", 1)].iter(), 1, false).unwrap();
    let mut backend = SqliteBackend::open(&db.display().to_string(), Durability::Commit).unwrap();
    backend.insert_marked(&rows[..3], (&id, 3)).unwrap();
    assert_eq!(backend.journal_mark(&id).unwrap(), 3);
    let recovered = recover(&place(dir.path()), &mut backend, 2).unwrap();
    assert_eq!((recovered.replayed, recovered.next_seq), (2, 1));
    assert_eq!(stored(&db), ["t1", "t2", "t3", "t4", "t5"]);
    assert!(!path.exists(), "the adopted journal is deleted");
    assert_eq!(backend.journal_mark(&id).unwrap(), 0, "and its mark");
    assert!(live.exists());
    drop(held);
}

/// A rating looks its task up right after the task's answer: the read waits for the writer
/// to move what was acknowledged before it (the writer gathers rows for a while first).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_sees_a_row_acknowledged_just_before_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("p.db").display().to_string();
    let backend = SqliteBackend::open(&db, Durability::Commit).unwrap();
    let opened = open_journaled(Box::new(backend), &place(dir.path()), false).unwrap();
    let ledger = Ledger::start_opened(opened, Durability::Commit, 1000, metrics());
    let h = ledger.handle();
    for i in 0..20 {
        let task = format!("t{i}");
        h.record(row(&task, "s", i)).await.unwrap();
        let found = h.task_of("anonymous", &task).await.unwrap();
        assert!(
            found.is_some(),
            "{task} not found right after it was recorded"
        );
        let q = Query {
            task_id: Some(task.clone()),
            ..Query::default()
        };
        assert_eq!(h.query(q).await.unwrap().len(), 1, "{task}");
    }
    assert_eq!(ledger.close(Duration::from_secs(30)).await, 0);
}

/// A store that fails: rows are still acknowledged (they are in the journal), the ledger
/// reads as not ready, and the batch is tried again until it commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_store_is_retried_and_reads_as_not_ready() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("p.db");
    let fail = Arc::new(AtomicBool::new(true));
    let failing = fail.clone();
    let backend = Wrapped {
        before_insert: Box::new(move |_| {
            if failing.load(Ordering::SeqCst) {
                return Err(LedgerError::Write("disk full".into()));
            }
            Ok(())
        }),
        ..Wrapped::new(SqliteBackend::open(&db.display().to_string(), Durability::Commit).unwrap())
    };
    let opened = open_journaled(Box::new(backend), &place(dir.path()), false).unwrap();
    let ledger = Ledger::start_opened(opened, Durability::Fsync, 1000, metrics());
    let h = ledger.handle();
    for i in 0..10 {
        h.record(row(&format!("t{i}"), "s", i)).await.unwrap();
    }
    assert!(
        !h.healthy(Duration::from_secs(10)).await,
        "ready while moves fail"
    );
    fail.store(false, Ordering::SeqCst);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !h.healthy(Duration::from_secs(10)).await {
        assert!(std::time::Instant::now() < deadline, "never ready again");
    }
    assert_eq!(ledger.close(Duration::from_secs(30)).await, 0);
    assert_eq!(stored(&db).len(), 10);
}

/// A commit reported as failed that did commit (a connection reset after COMMIT): the retry
/// inserts none of the rows the store's mark covers, so every row is in the store once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_reported_failed_that_committed_is_not_inserted_twice() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("p.db");
    let mut once = true;
    let backend = Wrapped {
        after_insert: Box::new(move |_| {
            if std::mem::take(&mut once) {
                return Err(LedgerError::Write("connection reset after COMMIT".into()));
            }
            Ok(())
        }),
        ..Wrapped::new(SqliteBackend::open(&db.display().to_string(), Durability::Commit).unwrap())
    };
    let opened = open_journaled(Box::new(backend), &place(dir.path()), false).unwrap();
    let ledger = Ledger::start_opened(opened, Durability::Commit, 1000, metrics());
    let h = ledger.handle();
    for i in 0..10 {
        h.record(row(&format!("t{i}"), "s", i)).await.unwrap();
    }
    // A read waits until the store holds every row acknowledged before it.
    h.query(Query::default()).await.unwrap();
    assert_eq!(ledger.close(Duration::from_secs(30)).await, 0);
    let ids = stored(&db);
    let mut unique = ids.clone();
    unique.dedup();
    assert_eq!(ids, unique, "a row inserted twice");
    assert_eq!(ids.len(), 10);
}

/// Next to a SQLite file; for Postgres in the configured folder, named by the store without
/// its password; none in memory or under `async`.
#[test]
fn where_journals_live() {
    use crate::provenance::journal_place;
    let sqlite = journal_place("sqlite://data/p.db", Durability::Commit, "j").unwrap();
    assert_eq!(
        (sqlite.dir.as_path(), sqlite.prefix.as_str()),
        (Path::new("data"), "p.db.")
    );
    let bare = journal_place("sqlite://p.db", Durability::Fsync, "j").unwrap();
    assert_eq!(bare.dir, Path::new("."));
    assert_eq!(
        journal_place("sqlite::memory:", Durability::Commit, "j"),
        None
    );
    assert_eq!(journal_place("sqlite://p.db", Durability::Async, "j"), None);
    let pg = journal_place("postgres://u:one@h/db", Durability::Commit, "j").unwrap();
    assert_eq!(pg.dir, Path::new("j"));
    assert!(
        pg.prefix.starts_with("ledger-") && pg.prefix.ends_with('-'),
        "{pg:?}"
    );
    let other_password = journal_place("postgres://u:two@h/db", Durability::Commit, "j");
    assert_eq!(other_password.as_ref(), Some(&pg));
    let other_db = journal_place("postgres://u:one@h/db2", Durability::Commit, "j").unwrap();
    assert_ne!(other_db.prefix, pg.prefix);
}
