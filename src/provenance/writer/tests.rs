//! The writer: group commit, `async` accounting, draining at close, readiness, retention.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests fail loudly")]

use super::*;
use crate::provenance::sqlite::tests::row;
use crate::provenance::tests::Wrapped;
use crate::provenance::SqliteBackend;
use std::sync::mpsc as std_mpsc;
use std::sync::Mutex;

struct Gate {
    entered: std_mpsc::Receiver<()>,
    open: std_mpsc::Sender<()>,
    batches: Arc<Mutex<Vec<usize>>>,
}

fn gated(path: &str) -> (Box<dyn Backend>, Gate) {
    let (entered_tx, entered) = std_mpsc::channel();
    let (open, gate) = std_mpsc::channel();
    let batches = Arc::new(Mutex::new(Vec::new()));
    // The first insert signals `entered` and waits until the gate's sender is used or
    // dropped; every batch size is recorded.
    let (mut entered_tx, mut gate, seen) = (Some(entered_tx), Some(gate), batches.clone());
    let backend = Wrapped {
        before_insert: Box::new(move |rows: &[LedgerRow]| {
            if let (Some(entered), Some(gate)) = (entered_tx.take(), gate.take()) {
                let _ = entered.send(());
                let _ = gate.recv();
            }
            seen.lock().unwrap().push(rows.len());
            Ok(())
        }),
        ..Wrapped::new(SqliteBackend::open(path, Durability::Commit).unwrap())
    };
    let g = Gate {
        entered,
        open,
        batches,
    };
    (Box::new(backend), g)
}

#[tokio::test]
async fn a_failed_batch_makes_the_ledger_not_ready_until_one_commits() {
    let fail = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let failing = fail.clone();
    let backend = Wrapped {
        before_insert: Box::new(move |_: &[LedgerRow]| {
            if failing.load(Ordering::SeqCst) {
                return Err(LedgerError::Write("disk full".into()));
            }
            Ok(())
        }),
        ..Wrapped::new(SqliteBackend::open(":memory:", Durability::Commit).unwrap())
    };
    let ledger = Ledger::start(Box::new(backend), Durability::Commit, 100, metrics());
    let h = ledger.handle();
    let ready = Duration::from_secs(10);
    h.record(row("t1", "s", 1)).await.unwrap();
    assert!(h.healthy(ready).await);
    fail.store(true, Ordering::SeqCst);
    assert!(h.record(row("t2", "s", 2)).await.is_err());
    // The probe alone would still commit: the failed batch is what answers.
    assert!(!h.healthy(ready).await);
    fail.store(false, Ordering::SeqCst);
    assert!(!h.healthy(ready).await, "until a batch commits again");
    h.record(row("t3", "s", 3)).await.unwrap();
    assert!(h.healthy(ready).await);
    assert_eq!(ledger.close(Duration::from_secs(10)).await, 0);
}

fn metrics() -> Arc<Metrics> {
    Arc::new(Metrics::new().unwrap())
}

fn everything() -> Query {
    Query {
        limit: Some(10_000),
        ..Query::default()
    }
}

/// Yields until the writer is inside its first, gated insert (queued work runs meanwhile).
async fn entered(gate: &Gate) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while gate.entered.try_recv().is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "the writer never reached its first insert"
        );
        tokio::task::yield_now().await;
    }
}

#[tokio::test]
async fn concurrent_records_commit_in_groups() {
    const N: usize = 500;
    let (backend, gate) = gated(":memory:");
    let m = metrics();
    let ledger = Ledger::start(backend, Durability::Commit, 10_000, m.clone());
    let h = ledger.handle();
    let tasks: Vec<_> = (0..N)
        .map(|i| {
            let h = h.clone();
            tokio::spawn(async move { h.record(row(&format!("t{i}"), "s", i as i64)).await })
        })
        .collect();
    entered(&gate).await;
    // Every record is queued (on this single-threaded runtime a task counts its row and
    // sends it in one poll) while the writer is held inside its first transaction.
    let mut spins = 0;
    while m.ledger_queue.get() != N as i64 {
        tokio::task::yield_now().await;
        spins += 1;
        assert!(spins < 100_000, "queue depth {}", m.ledger_queue.get());
    }
    for t in &tasks {
        assert!(
            !t.is_finished(),
            "nothing is acknowledged before it commits"
        );
    }
    gate.open.send(()).unwrap();
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    let batches = gate.batches.lock().unwrap().clone();
    assert_eq!(batches.iter().sum::<usize>(), N);
    assert!(batches.len() <= 2, "group commit: {batches:?}");
    assert_eq!(h.query(everything()).await.unwrap().len(), N);
    assert_eq!(m.ledger_rows.get(), N as u64);
    assert_eq!(m.ledger_queue.get(), 0);
    assert_eq!(ledger.close(Duration::from_secs(10)).await, 0);
    assert!(matches!(
        h.record(row("late", "s", 0)).await,
        Err(LedgerError::Closed)
    ));
}

#[tokio::test]
async fn async_overflow_drops_are_counted_exactly() {
    const SENT: u64 = 1000;
    let (backend, gate) = gated(":memory:");
    let m = metrics();
    let ledger = Ledger::start(backend, Durability::Async, 1, m.clone());
    let h = ledger.handle();
    h.record(row("t0", "s", 0)).await.unwrap();
    entered(&gate).await;
    // The writer holds t0; the queue (capacity 1) takes t1; the rest of the burst is dropped.
    for i in 1..SENT {
        h.record(row(&format!("t{i}"), "s", 0)).await.unwrap();
    }
    assert_eq!(h.dropped(), SENT - 2);
    assert_eq!(m.ledger_dropped.get(), SENT - 2);
    gate.open.send(()).unwrap();
    let stored = h.query(everything()).await.unwrap();
    let ids: Vec<&str> = stored.iter().map(|r| r.task_id.as_str()).collect();
    assert_eq!(ids, ["t1", "t0"]);
    assert_eq!(stored.len() as u64 + h.dropped(), SENT);
    assert_eq!(ledger.close(Duration::from_secs(10)).await, SENT - 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_accounting_holds_under_a_racing_writer() {
    const SENT: u64 = 20_000;
    let m = metrics();
    let backend = SqliteBackend::open(":memory:", Durability::Async).unwrap();
    let ledger = Ledger::start(Box::new(backend), Durability::Async, 16, m.clone());
    let h = ledger.handle();
    for i in 0..SENT {
        h.record(row(&format!("t{i}"), "s", 0)).await.unwrap();
    }
    // Page through: a query returns at most 10,000 rows, and more may be stored.
    let mut stored: u64 = 0;
    loop {
        let q = Query {
            offset: Some(stored as u32),
            ..everything()
        };
        let n = h.query(q).await.unwrap().len() as u64;
        stored += n;
        if n == 0 {
            break;
        }
    }
    assert_eq!(stored + h.dropped(), SENT, "stored {stored}");
    assert_eq!(m.ledger_dropped.get(), h.dropped());
    assert_eq!(m.ledger_rows.get(), stored);
}

#[tokio::test]
async fn close_commits_everything_queued() {
    const N: usize = 300;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.db").display().to_string();
    let (backend, gate) = gated(&path);
    let m = metrics();
    let ledger = Ledger::start(backend, Durability::Async, 1000, m.clone());
    let h = ledger.handle();
    h.record(row("t0", "s", 0)).await.unwrap();
    entered(&gate).await;
    // The writer holds t0; the rest waits in the queue.
    for i in 1..N {
        h.record(row(&format!("t{i}"), "s", 0)).await.unwrap();
    }
    assert_eq!(m.ledger_queue.get(), N as i64);
    // The shutdown is queued behind the rows before the writer may go on.
    let open = gate.open;
    let (lost, ()) = tokio::join!(
        ledger.close(Duration::from_secs(10)),
        async move { drop(open) }
    );
    assert_eq!(lost, 0);
    assert_eq!(m.ledger_queue.get(), 0);
    let mut b = SqliteBackend::open(&path, Durability::Commit).unwrap();
    assert_eq!(b.query(&everything()).unwrap().len(), N);
    assert!(matches!(
        h.query(everything()).await,
        Err(LedgerError::Closed)
    ));
}

/// Runs `f` on a blocking thread. Awaiting the writer thread directly would leave the
/// runtime idle, and a paused clock then jumps to the next timer (the pruner's tick);
/// a running blocking task holds the clock still.
async fn off_clock<T: Send + 'static>(
    f: impl std::future::Future<Output = T> + Send + 'static,
) -> T {
    let rt = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || rt.block_on(f))
        .await
        .unwrap()
}

async fn stored(h: &LedgerHandle) -> Vec<String> {
    let h = h.clone();
    let rows = off_clock(async move { h.query(everything()).await })
        .await
        .unwrap();
    let mut ids: Vec<String> = rows.into_iter().map(|r| r.task_id).collect();
    ids.sort();
    ids
}

/// Lets a pruner whose timer fired send its command; the writer answers in order, so a
/// query sent after it sees its effect.
async fn let_pruner_run() {
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
}

#[tokio::test(start_paused = true)]
async fn retention_prunes_old_rows_every_interval() {
    const DAY_MS: i64 = 24 * 3600 * 1000;
    const HOUR: Duration = Duration::from_secs(3600);
    let m = metrics();
    let backend = SqliteBackend::open(":memory:", Durability::Commit).unwrap();
    let ledger = Ledger::start(Box::new(backend), Durability::Commit, 100, m);
    let h = ledger.handle();
    let now = chrono::Utc::now().timestamp_millis();
    let put = |task: &'static str, finished_ms: i64| {
        let h = h.clone();
        off_clock(async move { h.record(row(task, "s", finished_ms)).await.unwrap() })
    };
    put("old", now - 40 * DAY_MS).await;
    put("recent", now - 29 * DAY_MS).await;
    put("new", now).await;
    let start = tokio::time::Instant::now();
    let (stop, shutdown) = tokio::sync::watch::channel(false);
    let pruner = h.spawn_pruner(Duration::from_secs(30 * 24 * 3600), HOUR, shutdown);

    // The first run is at once.
    let mut spins = 0;
    while stored(&h).await.contains(&"old".to_owned()) {
        let_pruner_run().await;
        spins += 1;
        assert!(spins < 1000, "the first prune never ran");
    }
    assert_eq!(stored(&h).await, ["new", "recent"]);
    assert_eq!(start.elapsed(), Duration::ZERO, "the clock stood still");

    // A row that ages past retention waits for the next run, an interval later.
    put("aged", now - 31 * DAY_MS).await;
    tokio::time::advance(HOUR - Duration::from_secs(60)).await;
    let_pruner_run().await;
    assert_eq!(stored(&h).await, ["aged", "new", "recent"]);
    tokio::time::advance(Duration::from_secs(120)).await;
    let mut spins = 0;
    while stored(&h).await.contains(&"aged".to_owned()) {
        let_pruner_run().await;
        spins += 1;
        assert!(spins < 1000, "the hourly prune never ran");
    }
    assert_eq!(stored(&h).await, ["new", "recent"]);
    assert_eq!(start.elapsed(), HOUR + Duration::from_secs(60));

    stop.send(true).unwrap();
    pruner.await.unwrap();
    assert_eq!(ledger.close(Duration::from_secs(10)).await, 0);
}

/// SQLite whose every write waits for a step from the test (none once the test drops its
/// sender), saying when it starts waiting and logging what it did.
struct Stepped {
    inner: SqliteBackend,
    steps: std_mpsc::Receiver<()>,
    waiting: tokio::sync::mpsc::UnboundedSender<()>,
    log: Arc<Mutex<Vec<String>>>,
}

struct Steps {
    step: std_mpsc::Sender<()>,
    waiting: tokio::sync::mpsc::UnboundedReceiver<()>,
    log: Arc<Mutex<Vec<String>>>,
}

impl Steps {
    fn log(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }
}

fn stepped(inner: SqliteBackend) -> (Box<dyn Backend>, Steps) {
    let (step, steps) = std_mpsc::channel();
    let (waiting_tx, waiting) = tokio::sync::mpsc::unbounded_channel();
    let log = Arc::new(Mutex::new(Vec::new()));
    let backend = Stepped {
        inner,
        steps,
        waiting: waiting_tx,
        log: log.clone(),
    };
    (Box::new(backend), Steps { step, waiting, log })
}

impl Stepped {
    fn wait(&self) {
        let _ = self.waiting.send(());
        let _ = self.steps.recv();
    }
}

impl Backend for Stepped {
    fn insert(&mut self, rows: &[LedgerRow]) -> Result<(), LedgerError> {
        self.wait();
        self.log
            .lock()
            .unwrap()
            .push(format!("insert {}", rows.len()));
        self.inner.insert(rows)
    }
    fn prune_batch(&mut self, before_ms: i64, limit: u64) -> Result<u64, LedgerError> {
        self.wait();
        let n = self.inner.prune_batch(before_ms, limit)?;
        self.log.lock().unwrap().push(format!("prune {n}"));
        Ok(n)
    }
    fn probe(&mut self) -> Result<(), LedgerError> {
        self.log.lock().unwrap().push("probe".into());
        self.inner.probe()
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
    fn spend_breakdown(
        &mut self,
        since_ms: i64,
    ) -> Result<Vec<crate::provenance::SpendRow>, LedgerError> {
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
}

/// `/readyz` while rows queue: the probe is answered by the writer's next commit (no write
/// of its own), not after the rows queued before it (three batches here).
#[tokio::test]
async fn a_probe_waits_for_the_next_commit_not_for_the_queue() {
    const QUEUED: usize = 3 * BATCH_MAX;
    let inner = SqliteBackend::open(":memory:", Durability::Commit).unwrap();
    let (backend, mut steps) = stepped(inner);
    let m = metrics();
    let ledger = Ledger::start(backend, Durability::Commit, 10_000, m.clone());
    let h = ledger.handle();
    let records: Vec<_> = (0..QUEUED)
        .map(|i| {
            let h = h.clone();
            tokio::spawn(async move { h.record(row(&format!("t{i}"), "s", 0)).await })
        })
        .collect();
    steps.waiting.recv().await.unwrap();
    while m.ledger_queue.get() != QUEUED as i64 {
        tokio::task::yield_now().await;
    }
    let probe = tokio::spawn({
        let h = h.clone();
        async move { h.healthy(Duration::from_secs(30)).await }
    });
    while h.probes.capacity() == PROBES {
        tokio::task::yield_now().await;
    }
    // The batch in progress, then the next one, which answers the probe.
    steps.step.send(()).unwrap();
    steps.waiting.recv().await.unwrap();
    steps.step.send(()).unwrap();
    assert!(tokio::time::timeout(Duration::from_secs(30), probe)
        .await
        .expect("the probe waited for more than the next commit")
        .unwrap());
    let log = steps.log();
    assert_eq!(log.len(), 2, "{log:?}");
    assert!(
        log.iter().all(|l| l.starts_with("insert")),
        "no probe write: {log:?}"
    );
    assert!(m.ledger_queue.get() > 0, "rows still queued behind it");
    drop(steps.step);
    for r in records {
        r.await.unwrap().unwrap();
    }
    // An idle writer answers with a probe write of its own.
    assert!(h.healthy(Duration::from_secs(30)).await);
    assert_eq!(steps.log.lock().unwrap().last().unwrap(), "probe");
    assert_eq!(ledger.close(Duration::from_secs(10)).await, 0);
}

/// A prune of many rows runs as batches of `PRUNE_BATCH`, and rows recorded meanwhile
/// commit between two batches, not after the whole prune.
#[tokio::test]
async fn pruning_runs_in_batches_between_commits() {
    let old = 2 * PRUNE_BATCH + PRUNE_BATCH / 2;
    let mut inner = SqliteBackend::open(":memory:", Durability::Commit).unwrap();
    let rows: Vec<LedgerRow> = (0..old).map(|i| row(&format!("old{i}"), "s", 1)).collect();
    inner.insert(&rows).unwrap();
    let (backend, mut steps) = stepped(inner);
    let m = metrics();
    let ledger = Ledger::start(backend, Durability::Commit, 100, m.clone());
    let h = ledger.handle();
    let prune = tokio::spawn({
        let h = h.clone();
        async move { h.prune(2).await }
    });
    steps.waiting.recv().await.unwrap();
    let record = tokio::spawn({
        let h = h.clone();
        async move { h.record(row("new", "s", 1_000)).await }
    });
    while m.ledger_queue.get() != 1 {
        tokio::task::yield_now().await;
    }
    drop(steps.step);
    assert_eq!(prune.await.unwrap().unwrap(), old);
    record.await.unwrap().unwrap();
    let b = PRUNE_BATCH;
    assert_eq!(
        *steps.log.lock().unwrap(),
        [
            format!("prune {b}"),
            "insert 1".into(),
            format!("prune {b}"),
            format!("prune {}", b / 2)
        ]
    );
    let left: Vec<String> = h
        .query(everything())
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.task_id)
        .collect();
    assert_eq!(left, ["new"]);
    assert_eq!(ledger.close(Duration::from_secs(10)).await, 0);
}
