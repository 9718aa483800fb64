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
