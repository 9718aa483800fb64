//! The batching writer: a bounded queue in front of one thread that owns the backend and
//! commits rows in groups (group commit), acknowledging each row once its transaction commits.

use super::{Backend, Durability, LedgerError, LedgerRow, Query};
use crate::telemetry::Metrics;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

type Ack<T> = oneshot::Sender<Result<T, String>>;

enum Cmd {
    Insert(Box<LedgerRow>, Option<Ack<()>>),
    Query(Box<Query>, Ack<Vec<LedgerRow>>),
    Prune(i64, Ack<u64>),
    Spend(i64, Ack<Vec<(String, f64)>>),
    Probe(Ack<()>),
    Shutdown,
}

/// Longest a `commit`/`fsync` record waits for its commit.
const RECORD_DEADLINE: Duration = Duration::from_secs(30);

/// Largest group committed in one transaction.
const BATCH_MAX: usize = 1024;

/// When the writer found several rows queued, it yields its core once before committing: the
/// producers that are about to record get to queue their rows, and one commit carries them
/// all (each commit rewrites every page it touches). It never sleeps: a timed wait here is
/// added to every row's latency, and with a closed-loop client that is lost throughput
/// (measured: a 200 µs wait cost 10% of the throughput at 16 connections and saved no CPU).
/// No yielding once a group is this large.
const LINGER_BELOW: usize = 64;

/// A cheap, cloneable way to write to and read from the ledger.
#[derive(Clone)]
pub struct LedgerHandle {
    tx: mpsc::Sender<Cmd>,
    durability: Durability,
    metrics: Arc<Metrics>,
    dropped: Arc<AtomicU64>,
}

/// The running writer; [`Ledger::close`] drains it.
pub struct Ledger {
    handle: LedgerHandle,
    thread: Option<std::thread::JoinHandle<()>>,
}

fn closed<T>(_: T) -> LedgerError {
    LedgerError::Closed
}

impl Ledger {
    /// Starts the writer thread over `backend` with a queue of `capacity` rows.
    pub fn start(
        backend: Box<dyn Backend>,
        durability: Durability,
        capacity: usize,
        metrics: Arc<Metrics>,
    ) -> Ledger {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        let m = metrics.clone();
        let thread = std::thread::Builder::new()
            .name("ldp-ledger".into())
            .spawn(move || run(backend, rx, &m))
            .ok();
        if thread.is_none() {
            tracing::error!("could not start the provenance writer thread");
        }
        Ledger {
            handle: LedgerHandle {
                tx,
                durability,
                metrics,
                dropped: Arc::new(AtomicU64::new(0)),
            },
            thread,
        }
    }

    /// A handle for writers and readers.
    pub fn handle(&self) -> LedgerHandle {
        self.handle.clone()
    }

    /// Stops accepting rows, commits everything queued (waiting at most `deadline`), and
    /// reports rows lost: queued rows not committed by the deadline, plus `async` overflow drops.
    pub async fn close(mut self, deadline: Duration) -> u64 {
        let _ = self.handle.tx.send(Cmd::Shutdown).await;
        let queued_before = self.handle.metrics.ledger_queue.get().max(0) as u64;
        if let Some(t) = self.thread.take() {
            let joined = tokio::task::spawn_blocking(move || t.join());
            if tokio::time::timeout(deadline, joined).await.is_err() {
                let lost = self.handle.metrics.ledger_queue.get().max(0) as u64;
                self.handle.metrics.ledger_dropped.inc_by(lost);
                self.handle.dropped.fetch_add(lost, Ordering::AcqRel);
                tracing::error!(
                    lost,
                    queued_before,
                    "provenance writer did not drain in time"
                );
            }
        }
        let dropped = self.handle.dropped.load(Ordering::Acquire);
        if dropped > 0 {
            tracing::warn!(dropped, "provenance rows were dropped (async durability)");
        }
        dropped
    }
}

impl LedgerHandle {
    /// The durability in force.
    pub fn durability(&self) -> Durability {
        self.durability
    }

    /// Rows dropped so far (`async` overflow).
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Acquire)
    }

    /// Records a row. `commit`/`fsync`: returns once it is committed (waiting for queue space:
    /// back-pressure, never a silent drop). `async`: returns at once; a full queue drops it.
    pub async fn record(&self, row: LedgerRow) -> Result<(), LedgerError> {
        let m = &self.metrics;
        match self.durability {
            Durability::Async => match self.tx.try_send(Cmd::Insert(Box::new(row), None)) {
                Ok(()) => {
                    m.ledger_queue.inc();
                    Ok(())
                }
                Err(mpsc::error::TrySendError::Full(_)) => {
                    m.ledger_dropped.inc();
                    let n = self.dropped.fetch_add(1, Ordering::AcqRel) + 1;
                    if n.is_power_of_two() {
                        tracing::warn!(
                            dropped = n,
                            "provenance queue full: row dropped (async durability)"
                        );
                    }
                    Ok(())
                }
                Err(mpsc::error::TrySendError::Closed(_)) => Err(LedgerError::Closed),
            },
            Durability::Commit | Durability::Fsync => {
                let (ack, done) = oneshot::channel();
                m.ledger_queue.inc();
                let committed = async {
                    if self
                        .tx
                        .send(Cmd::Insert(Box::new(row), Some(ack)))
                        .await
                        .is_err()
                    {
                        m.ledger_queue.dec();
                        return Err(LedgerError::Closed);
                    }
                    done.await.map_err(closed)?.map_err(LedgerError::Write)
                };
                // A store that stopped answering must not hold every task forever: the result
                // is then withheld (the row may still commit later).
                tokio::time::timeout(RECORD_DEADLINE, committed)
                    .await
                    .unwrap_or_else(|_| {
                        Err(LedgerError::Write(format!(
                            "not committed within {RECORD_DEADLINE:?}"
                        )))
                    })
            }
        }
    }

    /// Rows matching `q`.
    pub async fn query(&self, q: Query) -> Result<Vec<LedgerRow>, LedgerError> {
        let (ack, done) = oneshot::channel();
        self.tx
            .send(Cmd::Query(Box::new(q), ack))
            .await
            .map_err(closed)?;
        done.await.map_err(closed)?.map_err(LedgerError::Write)
    }

    /// Total cost per tenant of rows finished at or after `since_ms`.
    pub async fn spend_since(&self, since_ms: i64) -> Result<Vec<(String, f64)>, LedgerError> {
        let (ack, done) = oneshot::channel();
        self.tx
            .send(Cmd::Spend(since_ms, ack))
            .await
            .map_err(closed)?;
        done.await.map_err(closed)?.map_err(LedgerError::Write)
    }

    /// Whether the ledger can commit now (`/readyz`), answered by the writer between its
    /// batches within `deadline`: not while its last batch failed (for [`FAILURE_MEMORY`]:
    /// a nearly full disk still takes the probe's one page while batches fail), else whether
    /// a tiny write commits ([`Backend::probe`]: a full disk, deleted files, a dead database).
    /// A writer stuck on a store reads as not ready too.
    pub async fn healthy(&self, deadline: Duration) -> bool {
        let (ack, done) = oneshot::channel();
        let asked = async {
            self.tx.send(Cmd::Probe(ack)).await.ok()?;
            done.await.ok()?.ok()
        };
        matches!(tokio::time::timeout(deadline, asked).await, Ok(Some(())))
    }

    /// Deletes rows finished before `before_ms`.
    pub async fn prune(&self, before_ms: i64) -> Result<u64, LedgerError> {
        let (ack, done) = oneshot::channel();
        self.tx
            .send(Cmd::Prune(before_ms, ack))
            .await
            .map_err(closed)?;
        done.await.map_err(closed)?.map_err(LedgerError::Write)
    }

    /// Prunes rows older than `retention` every `every`, until `shutdown` fires.
    pub fn spawn_pruner(
        &self,
        retention: Duration,
        every: Duration,
        mut shutdown: tokio::sync::watch::Receiver<bool>,
    ) -> tokio::task::JoinHandle<()> {
        let handle = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = shutdown.changed() => return,
                }
                let cutoff = chrono::Utc::now().timestamp_millis() - retention.as_millis() as i64;
                match handle.prune(cutoff).await {
                    Ok(0) => {}
                    Ok(n) => tracing::info!(rows = n, "provenance retention pruned rows"),
                    Err(e) => tracing::warn!(error = %e, "provenance retention failed"),
                }
            }
        })
    }
}

/// How long a failed batch keeps the ledger not ready when no batch commits after it. Not
/// for ever: an instance that is not ready gets no traffic, so only the probe can tell it
/// that the store recovered.
const FAILURE_MEMORY: Duration = Duration::from_secs(5);

/// Batches that failed in a row: the first is logged at ERROR with its error, the rest
/// only counted until a batch commits again (a full disk fails thousands a second).
#[derive(Default)]
struct Failing {
    batches: u64,
    rows: u64,
    /// When the last one failed, and why.
    last: Option<(std::time::Instant, String)>,
}

impl Failing {
    /// Why the ledger is not ready, if its last batch failed recently.
    fn recent(&self) -> Option<String> {
        let (at, error) = self.last.as_ref()?;
        (at.elapsed() < FAILURE_MEMORY).then(|| format!("the last batch failed: {error}"))
    }
}

fn flush(
    backend: &mut dyn Backend,
    rows: &mut Vec<LedgerRow>,
    acks: &mut Vec<Ack<()>>,
    m: &Metrics,
    failing: &mut Failing,
) {
    if rows.is_empty() {
        return;
    }
    let n = rows.len();
    let result = backend.insert(rows).map_err(|e| e.to_string());
    match &result {
        Ok(()) => {
            m.ledger_rows.inc_by(n as u64);
            m.ledger_batches.inc();
            if failing.batches > 0 {
                tracing::warn!(
                    failed_batches = failing.batches,
                    failed_rows = failing.rows,
                    "provenance commits succeed again"
                );
                *failing = Failing::default();
            }
        }
        Err(e) => {
            if failing.batches == 0 {
                tracing::error!(rows = n, error = %e, "provenance batch failed; its results are withheld");
            } else {
                tracing::debug!(rows = n, error = %e, "provenance batch failed");
            }
            failing.batches += 1;
            failing.rows += n as u64;
            failing.last = Some((std::time::Instant::now(), e.clone()));
        }
    }
    m.ledger_queue.sub(n as i64);
    for ack in acks.drain(..) {
        let _ = ack.send(result.clone());
    }
    rows.clear();
}

fn run(mut backend: Box<dyn Backend>, mut rx: mpsc::Receiver<Cmd>, m: &Metrics) {
    let mut rows: Vec<LedgerRow> = Vec::with_capacity(BATCH_MAX);
    let mut acks: Vec<Ack<()>> = Vec::with_capacity(BATCH_MAX);
    let mut stopping = false;
    let mut failing = Failing::default();
    let mut not_ready = false;
    while let Some(first) = if stopping {
        rx.try_recv().ok()
    } else {
        rx.blocking_recv()
    } {
        let mut next = Some(first);
        let mut lingered = false;
        loop {
            // Take everything already queued (up to a batch) so it commits in one transaction.
            while let Some(cmd) = next.take() {
                match cmd {
                    Cmd::Insert(row, ack) => {
                        rows.push(*row);
                        acks.extend(ack);
                    }
                    Cmd::Query(q, ack) => {
                        flush(backend.as_mut(), &mut rows, &mut acks, m, &mut failing);
                        let _ = ack.send(backend.query(&q).map_err(|e| e.to_string()));
                    }
                    Cmd::Prune(before, ack) => {
                        flush(backend.as_mut(), &mut rows, &mut acks, m, &mut failing);
                        let _ = ack.send(backend.prune(before).map_err(|e| e.to_string()));
                    }
                    Cmd::Spend(since, ack) => {
                        flush(backend.as_mut(), &mut rows, &mut acks, m, &mut failing);
                        let _ = ack.send(backend.spend_since(since).map_err(|e| e.to_string()));
                    }
                    Cmd::Probe(ack) => {
                        let answer = match failing.recent() {
                            Some(why) => Err(why),
                            None => backend.probe().map_err(|e| e.to_string()),
                        };
                        // Logged when the answer changes, not at every `/readyz`.
                        match (&answer, not_ready) {
                            (Err(e), false) => tracing::warn!(error = %e, "ledger not ready"),
                            (Ok(()), true) => tracing::info!("ledger ready again"),
                            _ => {}
                        }
                        not_ready = answer.is_err();
                        let _ = ack.send(answer);
                    }
                    Cmd::Shutdown => {
                        stopping = true;
                        rx.close();
                    }
                }
                if rows.len() < BATCH_MAX {
                    next = rx.try_recv().ok();
                }
            }
            // Rows are queuing (more than one was waiting): yield once for the next few, so
            // that one commit carries them all.
            if lingered || stopping || rows.len() < 2 || rows.len() >= LINGER_BELOW {
                break;
            }
            lingered = true;
            std::thread::yield_now();
            next = rx.try_recv().ok();
            if next.is_none() {
                break;
            }
        }
        flush(backend.as_mut(), &mut rows, &mut acks, m, &mut failing);
    }
    if let Err(e) = backend.finish() {
        tracing::error!(error = %e, "the ledger could not be closed cleanly");
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests fail loudly")]

    use super::*;
    use crate::provenance::sqlite::tests::row;
    use crate::provenance::SqliteBackend;
    use std::sync::mpsc as std_mpsc;
    use std::sync::Mutex;

    /// SQLite behind a gate: the first insert signals `entered` and waits until the gate's
    /// sender is used or dropped; every batch size is recorded.
    struct Gated {
        inner: SqliteBackend,
        entered: Option<std_mpsc::Sender<()>>,
        gate: Option<std_mpsc::Receiver<()>>,
        batches: Arc<Mutex<Vec<usize>>>,
    }

    struct Gate {
        entered: std_mpsc::Receiver<()>,
        open: std_mpsc::Sender<()>,
        batches: Arc<Mutex<Vec<usize>>>,
    }

    fn gated(path: &str) -> (Box<dyn Backend>, Gate) {
        let (entered_tx, entered) = std_mpsc::channel();
        let (open, gate) = std_mpsc::channel();
        let batches = Arc::new(Mutex::new(Vec::new()));
        let backend = Gated {
            inner: SqliteBackend::open(path, Durability::Commit).unwrap(),
            entered: Some(entered_tx),
            gate: Some(gate),
            batches: batches.clone(),
        };
        let g = Gate {
            entered,
            open,
            batches,
        };
        (Box::new(backend), g)
    }

    impl Backend for Gated {
        fn insert(&mut self, rows: &[LedgerRow]) -> Result<(), LedgerError> {
            if let (Some(entered), Some(gate)) = (self.entered.take(), self.gate.take()) {
                let _ = entered.send(());
                let _ = gate.recv();
            }
            self.batches.lock().unwrap().push(rows.len());
            self.inner.insert(rows)
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
        fn probe(&mut self) -> Result<(), LedgerError> {
            self.inner.probe()
        }
    }

    /// SQLite whose inserts fail while `fail` is set.
    struct Flaky {
        inner: SqliteBackend,
        fail: Arc<std::sync::atomic::AtomicBool>,
    }

    impl Backend for Flaky {
        fn insert(&mut self, rows: &[LedgerRow]) -> Result<(), LedgerError> {
            if self.fail.load(Ordering::SeqCst) {
                return Err(LedgerError::Write("disk full".into()));
            }
            self.inner.insert(rows)
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
        fn probe(&mut self) -> Result<(), LedgerError> {
            self.inner.probe()
        }
    }

    #[tokio::test]
    async fn a_failed_batch_makes_the_ledger_not_ready_until_one_commits() {
        let fail = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let backend = Flaky {
            inner: SqliteBackend::open(":memory:", Durability::Commit).unwrap(),
            fail: fail.clone(),
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
}
