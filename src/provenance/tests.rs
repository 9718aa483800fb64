//! The ledger's reads beside its writer: a slow read delays no commit and no readiness probe,
//! reads are bounded in number and time, see what was recorded before them, and follow the
//! rows into a new file when the old one was deleted.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests fail loudly")]

use super::readers::{
    Cancel, ReadScope, Readers, PER_SCOPE_ADMITTED, PER_SCOPE_RUNNING, READERS, READ_DEADLINE,
    READ_QUEUE, TENANTS_RUNNING,
};
use super::sqlite::tests::row;
use super::*;
use crate::telemetry::Metrics;
use rusqlite::{Connection, OpenFlags};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc as std_mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};

/// A generous bound for what must not wait at all (a loaded machine still makes it).
const GENEROUS: Duration = Duration::from_secs(30);

fn metrics() -> Arc<Metrics> {
    Arc::new(Metrics::new().unwrap())
}

fn everything() -> Query {
    Query {
        limit: Some(10_000),
        ..Query::default()
    }
}

fn temp_db(dir: &tempfile::TempDir) -> String {
    dir.path().join("p.db").display().to_string()
}

/// Holds reads until released (or their deadline fires), saying when each one is held.
struct Hold {
    waiting: Mutex<Vec<std_mpsc::Sender<()>>>,
    released: AtomicBool,
    entered: UnboundedSender<()>,
    /// Held reads stopped by their deadline.
    stopped: Arc<AtomicUsize>,
}

impl Hold {
    fn new() -> (Arc<Hold>, UnboundedReceiver<()>) {
        let (entered, rx) = unbounded_channel();
        let hold = Hold {
            waiting: Mutex::new(Vec::new()),
            released: AtomicBool::new(false),
            entered,
            stopped: Arc::default(),
        };
        (Arc::new(hold), rx)
    }

    /// Blocks the calling read.
    fn hold(&self, cancel: &Cancel) {
        let (tx, rx) = std_mpsc::channel();
        let (stop, stopped) = (tx.clone(), self.stopped.clone());
        cancel.on_cancel(move || {
            stopped.fetch_add(1, Ordering::SeqCst);
            let _ = stop.send(());
        });
        {
            let mut waiting = self.waiting.lock().unwrap();
            if self.released.load(Ordering::SeqCst) {
                return;
            }
            waiting.push(tx);
        }
        let _ = self.entered.send(());
        let _ = rx.recv();
        cancel.clear();
    }

    /// Lets every held read go, and every later one through.
    fn release(&self) {
        let mut waiting = self.waiting.lock().unwrap();
        self.released.store(true, Ordering::SeqCst);
        for tx in waiting.drain(..) {
            let _ = tx.send(());
        }
    }
}

/// Waits until `n` more reads are held.
async fn entered(rx: &mut UnboundedReceiver<()>, n: usize) {
    for _ in 0..n {
        rx.recv().await.unwrap();
    }
}

/// A reader that holds every read and then answers nothing.
struct Held(Arc<Hold>);

impl Reader for Held {
    fn query(&self, _: &Query, cancel: &Cancel) -> Result<Vec<LedgerRow>, LedgerError> {
        self.0.hold(cancel);
        Ok(Vec::new())
    }
    fn spend_since(&self, _: i64, cancel: &Cancel) -> Result<Vec<(String, f64)>, LedgerError> {
        self.0.hold(cancel);
        Ok(Vec::new())
    }
    fn spend_breakdown(&self, _: i64, cancel: &Cancel) -> Result<Vec<SpendRow>, LedgerError> {
        self.0.hold(cancel);
        Ok(Vec::new())
    }
    fn task_of(&self, _: &str, _: &str, cancel: &Cancel) -> Result<Option<RatedTask>, LedgerError> {
        self.0.hold(cancel);
        Ok(None)
    }
    fn feedback(&self, _: &str, cancel: &Cancel) -> Result<Vec<Feedback>, LedgerError> {
        self.0.hold(cancel);
        Ok(Vec::new())
    }
    fn evidence(&self, _: i64, _: u32, cancel: &Cancel) -> Result<Vec<Evidence>, LedgerError> {
        self.0.hold(cancel);
        Ok(Vec::new())
    }
    fn close(&self) {}
}

/// The ledger's own readers, each query first holding a read transaction open on the
/// database (a slow admin read) while it is held.
struct SlowReader {
    inner: Arc<dyn Reader>,
    path: String,
    hold: Arc<Hold>,
}

impl Reader for SlowReader {
    fn query(&self, q: &Query, cancel: &Cancel) -> Result<Vec<LedgerRow>, LedgerError> {
        let conn = Connection::open_with_flags(&self.path, OpenFlags::SQLITE_OPEN_READ_ONLY)?;
        conn.execute_batch("BEGIN")?;
        let count = || -> i64 {
            conn.query_row("SELECT count(*) FROM ledger", [], |r| r.get(0))
                .unwrap()
        };
        let seen = count();
        self.hold.hold(cancel);
        assert_eq!(count(), seen, "the read transaction kept its snapshot");
        conn.execute_batch("COMMIT")?;
        self.inner.query(q, cancel)
    }
    fn spend_since(
        &self,
        since_ms: i64,
        cancel: &Cancel,
    ) -> Result<Vec<(String, f64)>, LedgerError> {
        self.inner.spend_since(since_ms, cancel)
    }
    fn spend_breakdown(
        &self,
        since_ms: i64,
        cancel: &Cancel,
    ) -> Result<Vec<SpendRow>, LedgerError> {
        self.inner.spend_breakdown(since_ms, cancel)
    }
    fn task_of(
        &self,
        tenant: &str,
        task_id: &str,
        cancel: &Cancel,
    ) -> Result<Option<RatedTask>, LedgerError> {
        self.inner.task_of(tenant, task_id, cancel)
    }
    fn feedback(&self, task_id: &str, cancel: &Cancel) -> Result<Vec<Feedback>, LedgerError> {
        self.inner.feedback(task_id, cancel)
    }
    fn evidence(
        &self,
        since_ms: i64,
        limit: u32,
        cancel: &Cancel,
    ) -> Result<Vec<Evidence>, LedgerError> {
        self.inner.evidence(since_ms, limit, cancel)
    }
    fn close(&self) {
        self.inner.close();
    }
}

/// What a [`Wrapped`] ledger runs before each insert.
pub(crate) type InsertHook = Box<dyn FnMut(&[LedgerRow]) -> Result<(), LedgerError> + Send>;

/// A test ledger: SQLite with a hook run before each insert (a gate, a failure), one run
/// after each committed insert (a failure reported for a commit that happened) and,
/// optionally, a reader of its own; every other call goes to the SQLite ledger.
pub(crate) struct Wrapped {
    pub(crate) inner: SqliteBackend,
    pub(crate) before_insert: InsertHook,
    pub(crate) after_insert: InsertHook,
    pub(crate) reader: Option<Arc<dyn Reader>>,
}

impl Wrapped {
    /// `inner` with no hook and reads through the writer.
    pub(crate) fn new(inner: SqliteBackend) -> Wrapped {
        Wrapped {
            inner,
            before_insert: Box::new(|_| Ok(())),
            after_insert: Box::new(|_| Ok(())),
            reader: None,
        }
    }
}

impl Backend for Wrapped {
    fn insert(&mut self, rows: &[LedgerRow]) -> Result<(), LedgerError> {
        (self.before_insert)(rows)?;
        self.inner.insert(rows)?;
        (self.after_insert)(rows)
    }
    fn insert_marked(&mut self, rows: &[LedgerRow], mark: (&str, u64)) -> Result<(), LedgerError> {
        (self.before_insert)(rows)?;
        self.inner.insert_marked(rows, mark)?;
        (self.after_insert)(rows)
    }
    fn journal_mark(&mut self, journal: &str) -> Result<u64, LedgerError> {
        self.inner.journal_mark(journal)
    }
    fn forget_journal(&mut self, journal: &str) -> Result<(), LedgerError> {
        self.inner.forget_journal(journal)
    }
    fn query(&mut self, q: &Query) -> Result<Vec<LedgerRow>, LedgerError> {
        self.inner.query(q)
    }
    fn prune(&mut self, before_ms: i64) -> Result<u64, LedgerError> {
        self.inner.prune(before_ms)
    }
    fn spend_since(&mut self, since_ms: i64) -> Result<Vec<(String, f64)>, LedgerError> {
        self.inner.spend_since(since_ms)
    }
    fn spend_breakdown(&mut self, since_ms: i64) -> Result<Vec<SpendRow>, LedgerError> {
        self.inner.spend_breakdown(since_ms)
    }
    fn task_of(&mut self, tenant: &str, task_id: &str) -> Result<Option<RatedTask>, LedgerError> {
        self.inner.task_of(tenant, task_id)
    }
    fn feedback(&mut self, task_id: &str) -> Result<Vec<Feedback>, LedgerError> {
        self.inner.feedback(task_id)
    }
    fn evidence(&mut self, since_ms: i64, limit: u32) -> Result<Vec<Evidence>, LedgerError> {
        self.inner.evidence(since_ms, limit)
    }
    fn rate(&mut self, fb: &Feedback) -> Result<bool, LedgerError> {
        self.inner.rate(fb)
    }
    fn probe(&mut self) -> Result<(), LedgerError> {
        self.inner.probe()
    }
    fn finish(&mut self) -> Result<(), LedgerError> {
        self.inner.finish()
    }
    fn reader(&self) -> Option<Arc<dyn Reader>> {
        self.reader.clone()
    }
}

/// The point of reads beside the writer: while an admin read holds a read transaction open,
/// rows commit (clients under `durability = "commit"` get their answers) and `/readyz`
/// answers. Through the writer, the first record below would wait for the read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_read_delays_no_commit() {
    let dir = tempfile::tempdir().unwrap();
    let path = temp_db(&dir);
    let inner = SqliteBackend::open(&path, Durability::Commit).unwrap();
    let (hold, mut held) = Hold::new();
    let reader = Arc::new(SlowReader {
        inner: inner.reader().unwrap(),
        path,
        hold: hold.clone(),
    });
    let ledger = Ledger::start(
        Box::new(Wrapped {
            reader: Some(reader),
            ..Wrapped::new(inner)
        }),
        Durability::Commit,
        100,
        metrics(),
    );
    let h = ledger.handle();
    h.record(row("t0", "s", 0)).await.unwrap();
    let read = tokio::spawn({
        let h = h.clone();
        async move { h.query(everything()).await }
    });
    entered(&mut held, 1).await;
    for i in 1..=50 {
        tokio::time::timeout(GENEROUS, h.record(row(&format!("t{i}"), "s", i)))
            .await
            .expect("a commit waited for the read")
            .unwrap();
    }
    assert!(h.healthy(GENEROUS).await, "readiness waits for no read");
    assert!(!read.is_finished(), "the read is still in its transaction");
    hold.release();
    let rows = read.await.unwrap().unwrap();
    assert_eq!(rows.len(), 51, "the query itself ran after the commits");
    assert_eq!(ledger.close(GENEROUS).await, 0);
}

/// `READERS` reads run at once and `READ_QUEUE` more wait; the next is refused at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_are_bounded_in_number() {
    let (hold, mut held) = Hold::new();
    let readers = Arc::new(Readers::new(Arc::new(Held(hold.clone()))));
    // Each of another tenant, and the last the operator's (the tenants together run on one
    // reader fewer than there are): no scope's share is what bounds them here.
    let read = |i: usize| {
        let readers = readers.clone();
        tokio::spawn(async move {
            let scope = format!("t{i}");
            let scope = match i {
                0 => ReadScope::Operator,
                _ => ReadScope::Tenant(&scope),
            };
            readers.run(scope, |r, c| r.query(&everything(), c)).await
        })
    };
    let reads: Vec<_> = (0..READERS + READ_QUEUE).rev().map(read).collect();
    entered(&mut held, READERS).await;
    let deadline = std::time::Instant::now() + GENEROUS;
    while readers.admitted() < READERS + READ_QUEUE {
        assert!(std::time::Instant::now() < deadline, "reads not admitted");
        tokio::task::yield_now().await;
    }
    assert!(
        held.try_recv().is_err(),
        "no more than {READERS} run at once"
    );
    match readers
        .run(ReadScope::Operator, |r, c| r.query(&everything(), c))
        .await
    {
        Err(LedgerError::ReadsBusy(n)) => assert_eq!(n, READERS + READ_QUEUE),
        other => panic!("expected a refusal, got {other:?}"),
    }
    hold.release();
    for r in reads {
        r.await.unwrap().unwrap();
    }
    assert_eq!(readers.admitted(), 0);
}

/// A read past its deadline is answered with a timeout, stopped (its cancel hook runs), and
/// gives its reader back.
#[tokio::test(start_paused = true)]
async fn a_read_past_its_deadline_is_stopped() {
    let (hold, mut held) = Hold::new();
    let readers = Arc::new(Readers::new(Arc::new(Held(hold.clone()))));
    let late = tokio::spawn({
        let readers = readers.clone();
        async move {
            readers
                .run(ReadScope::Operator, |r, c| r.spend_since(0, c))
                .await
        }
    });
    entered(&mut held, 1).await;
    tokio::time::advance(READ_DEADLINE).await;
    match late.await.unwrap() {
        Err(LedgerError::ReadTimeout(d)) => assert_eq!(d, READ_DEADLINE),
        other => panic!("expected a timeout, got {other:?}"),
    }
    // Every reader serves again: the stopped read gave its own back.
    hold.release();
    let all: Vec<_> = (0..READERS)
        .map(|i| {
            let readers = readers.clone();
            tokio::spawn(async move {
                let scope = format!("t{i}");
                readers
                    .run(ReadScope::Tenant(&scope), |r, c| r.spend_since(0, c))
                    .await
            })
        })
        .collect();
    for r in all {
        r.await.unwrap().unwrap();
    }
}

/// One tenant's flood of slow reads takes at most its share: `PER_SCOPE_RUNNING` readers and
/// `PER_SCOPE_ADMITTED` places (the next of its reads is refused at once), while the
/// operator's read runs beside it and another tenant's is admitted and runs in its turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_scope_cannot_take_every_reader() {
    let (hold, mut held) = Hold::new();
    let readers = Arc::new(Readers::new(Arc::new(Held(hold.clone()))));
    let flood: Vec<_> = (0..PER_SCOPE_ADMITTED)
        .map(|_| {
            let readers = readers.clone();
            tokio::spawn(async move {
                readers
                    .run(ReadScope::Tenant("flood"), |r, c| r.spend_since(0, c))
                    .await
            })
        })
        .collect();
    entered(&mut held, PER_SCOPE_RUNNING).await;
    let deadline = std::time::Instant::now() + GENEROUS;
    while readers.admitted() < PER_SCOPE_ADMITTED {
        assert!(std::time::Instant::now() < deadline, "reads not admitted");
        tokio::task::yield_now().await;
    }
    match readers
        .run(ReadScope::Tenant("flood"), |r, c| r.spend_since(0, c))
        .await
    {
        Err(LedgerError::ReadsBusy(n)) => assert_eq!(n, PER_SCOPE_ADMITTED),
        other => panic!("expected a refusal, got {other:?}"),
    }
    // The operator gets the reader the flood leaves; another tenant's read waits for the
    // tenants' share, and runs once the flood's running read is done.
    let admin = tokio::spawn({
        let readers = readers.clone();
        async move {
            readers
                .run(ReadScope::Operator, |r, c| r.spend_since(0, c))
                .await
        }
    });
    entered(&mut held, READERS - PER_SCOPE_RUNNING).await;
    let other = tokio::spawn({
        let readers = readers.clone();
        async move {
            readers
                .run(ReadScope::Tenant("other"), |r, c| r.spend_since(0, c))
                .await
        }
    });
    hold.release();
    admin.await.unwrap().unwrap();
    other.await.unwrap().unwrap();
    for r in flood {
        r.await.unwrap().unwrap();
    }
    assert_eq!(readers.admitted(), 0);
}

/// A reader holding tenants' reads (a rating's task lookup) on one [`Hold`] and the
/// operator's (an admin query) on another, so each can be seen to run.
struct Split {
    tenants: Arc<Hold>,
    operator: Arc<Hold>,
}

impl Reader for Split {
    fn query(&self, _: &Query, cancel: &Cancel) -> Result<Vec<LedgerRow>, LedgerError> {
        self.operator.hold(cancel);
        Ok(Vec::new())
    }
    fn spend_since(&self, _: i64, _: &Cancel) -> Result<Vec<(String, f64)>, LedgerError> {
        Ok(Vec::new())
    }
    fn spend_breakdown(&self, _: i64, _: &Cancel) -> Result<Vec<SpendRow>, LedgerError> {
        Ok(Vec::new())
    }
    fn task_of(&self, _: &str, _: &str, cancel: &Cancel) -> Result<Option<RatedTask>, LedgerError> {
        self.tenants.hold(cancel);
        Ok(None)
    }
    fn feedback(&self, _: &str, _: &Cancel) -> Result<Vec<Feedback>, LedgerError> {
        Ok(Vec::new())
    }
    fn evidence(&self, _: i64, _: u32, _: &Cancel) -> Result<Vec<Evidence>, LedgerError> {
        Ok(Vec::new())
    }
    fn close(&self) {}
}

/// Issue 37 item 14a: two tenants flooding slow reads at once held both readers (each within
/// its own share of one), and the operator's admin read waited for a reader until its
/// deadline. The tenants together now run on at most `TENANTS_RUNNING` readers: the
/// operator's read gets the one left while every tenant's read is out, and theirs all finish.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_tenants_flooding_together_leave_the_operator_a_reader() {
    let (tenants, mut tenants_held) = Hold::new();
    let (operator, mut operator_held) = Hold::new();
    let split = Split {
        tenants: tenants.clone(),
        operator: operator.clone(),
    };
    let readers = Arc::new(Readers::new(Arc::new(split)));
    let flood: Vec<_> = ["alpha", "beta"]
        .into_iter()
        .flat_map(|t| std::iter::repeat_n(t, PER_SCOPE_ADMITTED))
        .map(|tenant| {
            let readers = readers.clone();
            tokio::spawn(async move {
                readers
                    .run(ReadScope::Tenant(tenant), move |r, c| {
                        r.task_of(tenant, "t", c)
                    })
                    .await
            })
        })
        .collect();
    // Every flooding read is admitted: each has asked for its reader.
    let deadline = std::time::Instant::now() + GENEROUS;
    while readers.admitted() < 2 * PER_SCOPE_ADMITTED {
        assert!(std::time::Instant::now() < deadline, "reads not admitted");
        tokio::task::yield_now().await;
    }
    entered(&mut tenants_held, TENANTS_RUNNING).await;
    let mut admin = tokio::spawn({
        let readers = readers.clone();
        async move {
            readers
                .run(ReadScope::Operator, |r, c| r.query(&everything(), c))
                .await
        }
    });
    // Whether the operator's read got a reader (it is held there) or ended without one.
    let ran = tokio::time::timeout(GENEROUS, async {
        tokio::select! {
            () = entered(&mut operator_held, 1) => None,
            r = &mut admin => Some(r),
        }
    })
    .await;
    let more = tenants_held.try_recv().is_ok();
    let stopped = tenants.stopped.load(Ordering::SeqCst);
    // Every read is let go before anything is asserted: a held read would outlive the test.
    operator.release();
    tenants.release();
    match ran {
        Ok(None) => admin.await.unwrap().unwrap(),
        Ok(Some(ended)) => panic!("the operator's read ended without a reader: {ended:?}"),
        Err(_) => panic!("the operator's read found no reader"),
    };
    assert_eq!(
        stopped, 0,
        "the operator's read got a reader only once the tenants' reads hit their deadline"
    );
    assert!(
        !more,
        "the tenants run on at most {TENANTS_RUNNING} of the {READERS} readers"
    );
    for r in flood {
        r.await.unwrap().unwrap();
    }
    assert_eq!(readers.admitted(), 0);
}

/// Under `async` a read beside the writer still sees every row recorded before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_reads_see_the_rows_recorded_before_them() {
    const N: i64 = 3_000;
    let dir = tempfile::tempdir().unwrap();
    let backend = SqliteBackend::open(&temp_db(&dir), Durability::Async).unwrap();
    let ledger = Ledger::start(Box::new(backend), Durability::Async, 10_000, metrics());
    let h = ledger.handle();
    for i in 0..N {
        h.record(row(&format!("t{i}"), "s", i)).await.unwrap();
    }
    assert_eq!(h.dropped(), 0);
    assert_eq!(h.query(everything()).await.unwrap().len(), N as usize);
    let spend = h.spend_since(0).await.unwrap();
    assert_eq!(spend.len(), 1);
    assert!((spend[0].1 - 0.0021 * N as f64).abs() < 1e-6, "{spend:?}");
    assert_eq!(ledger.close(GENEROUS).await, 0);
    assert!(matches!(
        h.query(everything()).await,
        Err(LedgerError::Closed)
    ));
    assert!(matches!(h.spend_since(0).await, Err(LedgerError::Closed)));
}

/// Deleting the files under a running ledger (the rescue in `sqlite/files.rs`): the readers,
/// on the old files until the rows are moved, then on the new file, see every row, and
/// their connections leave nothing at the path that the rescue would take for a foreign file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_follow_the_rows_into_a_new_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = temp_db(&dir);
    let backend = SqliteBackend::open(&path, Durability::Commit).unwrap();
    let ledger = Ledger::start(Box::new(backend), Durability::Commit, 100, metrics());
    let h = ledger.handle();
    let mut n = 0;
    for round in 0..3 {
        for _ in 0..10 {
            n += 1;
            h.record(row(&format!("t{n}"), "s", n)).await.unwrap();
        }
        // Both readers, at once.
        let (a, b) = tokio::join!(h.query(everything()), h.spend_since(0));
        assert_eq!(a.unwrap().len(), n as usize, "round {round}");
        assert_eq!(b.unwrap().len(), 1);
        for suffix in ["", "-wal", "-shm"] {
            std::fs::remove_file(format!("{path}{suffix}")).unwrap();
        }
        // Deleted and not noticed yet: the readers still read the old files.
        assert_eq!(h.query(everything()).await.unwrap().len(), n as usize);
    }
    n += 1;
    h.record(row(&format!("t{n}"), "s", n)).await.unwrap();
    assert_eq!(h.query(everything()).await.unwrap().len(), n as usize);
    assert!(h.healthy(GENEROUS).await);
    assert_eq!(ledger.close(GENEROUS).await, 0);
    for suffix in ["-wal", "-shm"] {
        let f = format!("{path}{suffix}");
        assert!(!std::path::Path::new(&f).exists(), "{f} left behind");
    }
    let stored: i64 = Connection::open(&path)
        .unwrap()
        .query_row("SELECT count(*) FROM ledger", [], |r| r.get(0))
        .unwrap();
    assert_eq!(stored, n);
}

/// `LedgerHandle::evidence` reads a recorded row's votes and the ratings, beside the writer
/// (a file's readers, under `async` once the rows before it are committed) and through it
/// (in memory).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evidence_is_read_beside_the_writer_or_through_it() {
    let dir = tempfile::tempdir().unwrap();
    for (store, durability) in [
        (temp_db(&dir), Durability::Async),
        (":memory:".to_owned(), Durability::Commit),
    ] {
        let backend = SqliteBackend::open(&store, durability).unwrap();
        let ledger = Ledger::start(Box::new(backend), durability, 100, metrics());
        let h = ledger.handle();
        let vote = Vote {
            round: 1,
            producer: "d0".into(),
            skill: "echo".into(),
            verifier: "v".into(),
            passed: false,
            confidence: None,
            weight: 0.5,
        };
        let voted = LedgerRow {
            votes: vec![vote],
            ..row("t1", "s", 1_000)
        };
        h.record(voted).await.unwrap();
        let rating = Feedback {
            task_id: "t1".into(),
            tenant: "anonymous".into(),
            score: 1.0,
            outcome: Given::Good,
            delegate: Some("d0".into()),
            skill: "echo".into(),
            created_at: "2026-01-01T00:00:02Z".into(),
            created_ms: 2_000,
        };
        assert!(h.rate(rating).await.unwrap());
        let sources: Vec<_> = h
            .evidence(0, 10)
            .await
            .unwrap()
            .into_iter()
            .map(|e| (e.at_ms, e.score, e.weight, e.source))
            .collect();
        assert_eq!(
            sources,
            [
                (1_000, 0.0, 1.0, EvidenceSource::Vote),
                (2_000, 1.0, 1.0, EvidenceSource::Feedback)
            ],
            "{store}"
        );
        assert_eq!(ledger.close(GENEROUS).await, 0);
        assert!(matches!(h.evidence(0, 10).await, Err(LedgerError::Closed)));
    }
}
