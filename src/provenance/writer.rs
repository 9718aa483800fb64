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
    Shutdown,
}

/// Largest group committed in one transaction.
const BATCH_MAX: usize = 1024;

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

fn flush(
    backend: &mut dyn Backend,
    rows: &mut Vec<LedgerRow>,
    acks: &mut Vec<Ack<()>>,
    m: &Metrics,
) {
    if rows.is_empty() {
        return;
    }
    let n = rows.len();
    let result = backend.insert(rows).map_err(|e| e.to_string());
    match &result {
        Ok(()) => m.ledger_rows.inc_by(n as u64),
        Err(e) => tracing::error!(rows = n, error = %e, "provenance batch failed"),
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
    while let Some(first) = if stopping {
        rx.try_recv().ok()
    } else {
        rx.blocking_recv()
    } {
        let mut next = Some(first);
        // Take everything already queued (up to a batch) so it commits in one transaction.
        while let Some(cmd) = next.take() {
            match cmd {
                Cmd::Insert(row, ack) => {
                    rows.push(*row);
                    acks.extend(ack);
                }
                Cmd::Query(q, ack) => {
                    flush(backend.as_mut(), &mut rows, &mut acks, m);
                    let _ = ack.send(backend.query(&q).map_err(|e| e.to_string()));
                }
                Cmd::Prune(before, ack) => {
                    flush(backend.as_mut(), &mut rows, &mut acks, m);
                    let _ = ack.send(backend.prune(before).map_err(|e| e.to_string()));
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
        flush(backend.as_mut(), &mut rows, &mut acks, m);
    }
}
