//! The batching writer: a bounded queue in front of one thread that owns the backend and
//! commits rows in groups (group commit), acknowledging each row once its transaction commits.
//!
//! Only writes run on that thread, each short: the rows' commits, readiness probes (answered
//! by the next commit when rows are coming, else by one tiny write), and pruning in batches
//! of [`PRUNE_BATCH`]. Reads run beside it (`readers.rs`) where the store allows.
//!
//! With a journal (`journal.rs`), `commit` and `fsync` rows are acknowledged by the journal's
//! thread, and this one moves them into the store: nobody waits for those commits, so it
//! gathers rows for up to [`MOVE_LINGER`] into larger batches, and a batch that fails is
//! tried again (its rows were acknowledged) until it commits.

use super::journal::{Entry, Progress, Recovered, Stage};
use super::readers::{ReadScope, Readers, READ_DEADLINE};
use super::{Backend, Durability, Evidence, Feedback, LedgerError, LedgerRow, Query, RatedTask};
use crate::telemetry::Metrics;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// The writer's answer. One failed commit answers every row of its batch, hence shared.
type Ack<T> = oneshot::Sender<Result<T, Arc<LedgerError>>>;

enum Cmd {
    Insert(Box<LedgerRow>, Option<Ack<()>>),
    /// A row the journal acknowledged, with its sequence number there.
    Journaled(Box<LedgerRow>, u64),
    /// A read on the writer's connection: only for a store without readers (in memory).
    Query(Box<Query>, Ack<Vec<LedgerRow>>),
    /// Likewise.
    Spend(i64, Ack<Vec<(String, f64)>>),
    SpendBreakdown(i64, Ack<Vec<super::SpendRow>>),
    /// Likewise: the newest row of (tenant, task id).
    TaskOf {
        tenant: String,
        task_id: String,
        ack: Ack<Option<RatedTask>>,
    },
    /// Likewise: the ratings of a task id.
    Feedback(String, Ack<Vec<Feedback>>),
    /// Likewise: quality evidence since a time.
    Evidence {
        since_ms: i64,
        limit: u32,
        ack: Ack<Vec<Evidence>>,
    },
    /// Stores a rating (its own transaction, after the batch gathered so far).
    Rate(Box<Feedback>, Ack<bool>),
    /// Deletes at most `limit` rows finished before `before_ms`.
    Prune {
        before_ms: i64,
        limit: u64,
        ack: Ack<u64>,
    },
    /// Deletes a journal's mark (the journal is gone).
    Forget(String, Ack<()>),
    /// Answered once every row queued before it has been committed (or has failed): an
    /// `async` ledger's reads see the rows recorded before them.
    Sync(Ack<()>),
    /// A probe is waiting (`LedgerHandle::healthy`): an idle writer sleeps on this queue.
    Wake,
    Shutdown,
}

/// Longest a `commit`/`fsync` record waits for its commit.
const RECORD_DEADLINE: Duration = Duration::from_secs(30);

/// Largest group committed in one transaction.
pub(super) const BATCH_MAX: usize = 1024;

/// When the writer found several rows queued, it yields its core once before committing: the
/// producers that are about to record get to queue their rows, and one commit carries them
/// all (each commit rewrites every page it touches). It never sleeps: a timed wait here is
/// added to every row's latency, and with a closed-loop client that is lost throughput
/// (measured: a 200 µs wait cost 10% of the throughput at 16 connections and saved no CPU).
/// No yielding once a group is this large.
const LINGER_BELOW: usize = 64;

/// Rows deleted per prune transaction. Pruning runs on the writer, one batch at a time, and
/// each next batch is queued behind the rows recorded meanwhile, so a commit waits for at
/// most one batch. Why not on a connection of its own: SQLite takes one writer at a time, and
/// a commit that finds the pruner holding the lock sleeps in SQLite's busy handler (1, 2, 5,
/// 10 ms… steps), longer than the batch it waits for; on the writer the next commit starts
/// the moment a batch ends, and the deleted-file rescue stays in one place. Measured
/// (`benches/ledger.rs`, 200,000-row file): a batch takes 0.9 ms at 250 rows, 5 ms at 1,000,
/// 28 ms at 4,000, 124 ms at 16,000, deleting 100–130k rows/s at every size; pruning 100,000
/// rows in one transaction held every commit for 0.55 s, in 1,000-row batches the slowest
/// commit beside it took 26 ms. 250 keeps a commit's wait near a millisecond, and pruning
/// still outruns any insert rate (the writer's is 78k rows/s).
pub(super) const PRUNE_BATCH: u64 = 250;

/// Readiness probes waiting for the writer; more wait for room (within their deadline).
const PROBES: usize = 64;

/// How long the writer gathers journaled rows before it moves them into the store (fewer,
/// larger commits: nobody waits for them). Reads through the gateway wait for the rows
/// recorded before them anyway; a reader of the store itself (another replica, the
/// `provenance` command) sees a row this long plus one commit after it was acknowledged,
/// while the store keeps up.
pub(super) const MOVE_LINGER: Duration = Duration::from_millis(10);

/// Journaled rows that are moved at once, without gathering more.
const MOVE_AT_ONCE: usize = 256;

/// Waits before a failed batch of journaled rows is tried again: doubling up to the last.
const RETRY_FIRST: Duration = Duration::from_millis(50);
const RETRY_MAX: Duration = Duration::from_secs(1);

/// A rating for a task another replica acknowledged moments ago may find its row not yet in
/// the shared store: the lookup is tried again once after this long.
const SHARED_LOOKUP_AGAIN: Duration = Duration::from_millis(250);

/// A cheap, cloneable way to write to and read from the ledger.
#[derive(Clone)]
pub struct LedgerHandle {
    tx: mpsc::Sender<Cmd>,
    /// Readiness probes, looked at between batches (never queued behind rows).
    probes: mpsc::Sender<Ack<()>>,
    /// Reads beside the writer; `None`: reads go through the writer.
    readers: Option<Arc<Readers>>,
    /// The journal's queue, and how far the store got (none: rows go straight to the writer).
    journal: Option<(mpsc::Sender<Entry>, Arc<Progress>)>,
    /// Whether other gateways write to the same store (Postgres).
    shared: bool,
    durability: Durability,
    metrics: Arc<Metrics>,
    dropped: Arc<AtomicU64>,
}

/// The running writer; [`Ledger::close`] drains it.
pub struct Ledger {
    handle: LedgerHandle,
    thread: Option<std::thread::JoinHandle<()>>,
    /// The journal's thread; it ends with its journal's id once it deleted the journal.
    journal: Option<std::thread::JoinHandle<Option<String>>>,
}

/// A store opened for a ledger, with its journal recovered into it (`provenance::open`).
pub struct Opened {
    /// The store.
    pub backend: Box<dyn Backend>,
    /// The journal in front of it (none: `async`, or a store in memory).
    pub journal: Option<Recovered>,
    /// Whether other gateways write to the same store.
    pub shared: bool,
}

fn closed<T>(_: T) -> LedgerError {
    LedgerError::Closed
}

/// The writer's error as callers get it: the store's error as text ([`LedgerError::Write`]),
/// an overloaded ledger as such (its clients are told so).
fn failed(e: Arc<LedgerError>) -> LedgerError {
    match &*e {
        LedgerError::Write(text) => LedgerError::Write(text.clone()),
        LedgerError::Overloaded(backlog) => LedgerError::Overloaded(*backlog),
        other => LedgerError::Write(other.to_string()),
    }
}

impl Opened {
    /// The journal's limit in bytes (`provenance.journal_max_bytes`; no journal: nothing).
    pub fn with_journal_max(mut self, bytes: u64) -> Opened {
        if let Some(journal) = &mut self.journal {
            journal.set_max_bytes(bytes);
        }
        self
    }
}

impl Ledger {
    /// Starts the writer thread over `backend` with a queue of `capacity` rows, and its
    /// readers when the backend has them ([`Backend::reader`]); no journal.
    pub fn start(
        backend: Box<dyn Backend>,
        durability: Durability,
        capacity: usize,
        metrics: Arc<Metrics>,
    ) -> Ledger {
        let opened = Opened {
            backend,
            journal: None,
            shared: false,
        };
        Ledger::start_opened(opened, durability, capacity, metrics)
    }

    /// [`Ledger::start`] over an opened store, with the journal's thread in front of the
    /// writer when it has a journal (under `async` the journal is not used). The writer's
    /// queue holds `capacity` rows, the journal's as many.
    pub fn start_opened(
        opened: Opened,
        durability: Durability,
        capacity: usize,
        metrics: Arc<Metrics>,
    ) -> Ledger {
        let Opened {
            backend,
            journal: recovered,
            shared,
        } = opened;
        if let Some(r) = &recovered {
            metrics.journal_damaged.inc_by(r.damaged);
        }
        let recovered = recovered.filter(|_| durability != Durability::Async);
        let (tx, rx) = mpsc::channel(capacity.max(1));
        let (probes, probe_rx) = mpsc::channel(PROBES);
        let readers = backend.reader().map(|r| Arc::new(Readers::new(r)));
        let progress = recovered.as_ref().map(|_| Arc::new(Progress::default()));
        let journal_id = recovered.as_ref().map(Recovered::id);
        let m = metrics.clone();
        let closing = readers.clone();
        let mover = progress.clone().zip(journal_id);
        let thread = std::thread::Builder::new()
            .name("ldp-ledger".into())
            .spawn(move || Writer::new(backend, &m, mover).run(rx, probe_rx, closing))
            .ok();
        if thread.is_none() {
            tracing::error!("could not start the provenance writer thread");
        }
        let mut journal = None;
        let mut journal_thread = None;
        if let (Some(recovered), Some(progress)) = (recovered, progress) {
            let (jtx, jrx) = mpsc::channel(capacity.max(1));
            let (m, to_writer, p) = (metrics.clone(), tx.clone(), progress.clone());
            let sync = durability == Durability::Fsync;
            journal_thread = std::thread::Builder::new()
                .name("ldp-journal".into())
                .spawn(move || {
                    Stage::new(recovered, sync, p, &m).run(jrx, &to_writer, Cmd::Journaled)
                })
                .ok();
            if journal_thread.is_none() {
                tracing::error!("could not start the provenance journal thread");
            }
            journal = Some((jtx, progress));
        }
        Ledger {
            handle: LedgerHandle {
                tx,
                probes,
                readers,
                journal,
                shared,
                durability,
                metrics,
                dropped: Arc::new(AtomicU64::new(0)),
            },
            thread,
            journal: journal_thread,
        }
    }

    /// A handle for writers and readers.
    pub fn handle(&self) -> LedgerHandle {
        self.handle.clone()
    }

    /// Stops accepting rows, commits everything queued (waiting at most `deadline`), and
    /// reports rows lost: queued rows not committed by the deadline, plus `async` overflow drops.
    pub async fn close(mut self, deadline: Duration) -> u64 {
        // The journal first: it hands the writer what it has, waits for the store to hold
        // it and empties itself.
        if let (Some((journal, _)), Some(t)) = (&self.handle.journal, self.journal.take()) {
            // Every wait below is bounded: a store that is down keeps both queues full.
            let _ = tokio::time::timeout(deadline, journal.send(Entry::Stop)).await;
            let joined = tokio::task::spawn_blocking(move || t.join());
            match tokio::time::timeout(deadline, joined).await {
                Ok(Ok(Ok(Some(id)))) => {
                    let forgot =
                        tokio::time::timeout(deadline, self.handle.ask(|ack| Cmd::Forget(id, ack)))
                            .await;
                    if !matches!(forgot, Ok(Ok(_))) {
                        tracing::warn!("the journal's mark stays in the store");
                    }
                }
                Ok(_) => {}
                Err(_) => tracing::error!(
                    "the ledger journal did not stop in time; its rows are replayed at the next start"
                ),
            }
        }
        let _ = tokio::time::timeout(deadline, self.handle.tx.send(Cmd::Shutdown)).await;
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
    /// back-pressure, never a silent drop; with a journal, once it is journaled, or
    /// [`LedgerError::Overloaded`] when the store is too far behind to take it). `async`:
    /// returns at once; a full queue drops it.
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
                    let sent = match &self.journal {
                        Some((journal, _)) => {
                            journal.send(Entry::Row(Box::new(row), ack)).await.is_ok()
                        }
                        None => self
                            .tx
                            .send(Cmd::Insert(Box::new(row), Some(ack)))
                            .await
                            .is_ok(),
                    };
                    if !sent {
                        m.ledger_queue.dec();
                        return Err(LedgerError::Closed);
                    }
                    done.await.map_err(closed)?.map_err(failed)
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

    /// Sends the writer a command and waits for its answer.
    async fn ask<T>(&self, cmd: impl FnOnce(Ack<T>) -> Cmd) -> Result<T, LedgerError> {
        let (ack, done) = oneshot::channel();
        self.tx.send(cmd(ack)).await.map_err(closed)?;
        done.await.map_err(closed)?.map_err(failed)
    }

    /// Before a read beside the writer: an error once the writer has stopped, and under
    /// `async` or with a journal a wait until the rows recorded so far are committed (as a
    /// read through the writer would see them), within the read deadline.
    async fn caught_up(&self) -> Result<(), LedgerError> {
        if self.tx.is_closed() {
            return Err(LedgerError::Closed);
        }
        if self.durability == Durability::Async || self.journal.is_some() {
            tokio::time::timeout(READ_DEADLINE, self.ask(Cmd::Sync))
                .await
                .map_err(|_| LedgerError::ReadTimeout(READ_DEADLINE))??;
        }
        Ok(())
    }

    /// Rows matching `q`: beside the writer when the store has readers, never delaying a
    /// commit (a bounded number at once, each within a deadline).
    pub async fn query(&self, q: Query) -> Result<Vec<LedgerRow>, LedgerError> {
        let Some(readers) = &self.readers else {
            return self.ask(|ack| Cmd::Query(Box::new(q), ack)).await;
        };
        self.caught_up().await?;
        readers
            .run(ReadScope::Operator, move |r, cancel| r.query(&q, cancel))
            .await
    }

    /// Total cost per tenant of rows finished at or after `since_ms` (beside the writer, as
    /// [`LedgerHandle::query`]).
    pub async fn spend_since(&self, since_ms: i64) -> Result<Vec<(String, f64)>, LedgerError> {
        let Some(readers) = &self.readers else {
            return self.ask(|ack| Cmd::Spend(since_ms, ack)).await;
        };
        self.caught_up().await?;
        readers
            .run(ReadScope::Operator, move |r, cancel| {
                r.spend_since(since_ms, cancel)
            })
            .await
    }

    /// Tasks and cost per (tenant, policy, delegate) of rows finished at or after `since_ms`
    /// (beside the writer, as [`LedgerHandle::query`]).
    pub async fn spend_breakdown(
        &self,
        since_ms: i64,
    ) -> Result<Vec<super::SpendRow>, LedgerError> {
        let Some(readers) = &self.readers else {
            return self.ask(|ack| Cmd::SpendBreakdown(since_ms, ack)).await;
        };
        self.caught_up().await?;
        readers
            .run(ReadScope::Operator, move |r, cancel| {
                r.spend_breakdown(since_ms, cancel)
            })
            .await
    }

    /// The newest row of `tenant`'s task `task_id` (delegate and skill), beside the writer as
    /// [`LedgerHandle::query`]; none when this tenant ran no such task.
    pub async fn task_of(
        &self,
        tenant: &str,
        task_id: &str,
    ) -> Result<Option<RatedTask>, LedgerError> {
        let (tenant, task_id) = (tenant.to_owned(), task_id.to_owned());
        let Some(readers) = &self.readers else {
            return self
                .ask(|ack| Cmd::TaskOf {
                    tenant,
                    task_id,
                    ack,
                })
                .await;
        };
        self.caught_up().await?;
        let lookup = || {
            let (tenant, task_id) = (tenant.clone(), task_id.clone());
            move |r: &dyn super::Reader, cancel: &super::Cancel| {
                r.task_of(&tenant, &task_id, cancel)
            }
        };
        let found = readers.run(ReadScope::Tenant(&tenant), lookup()).await?;
        // Another replica's row may still be on its way from its journal to the store.
        if found.is_some() || !self.shared || self.journal.is_none() {
            return Ok(found);
        }
        tokio::time::sleep(SHARED_LOOKUP_AGAIN).await;
        readers.run(ReadScope::Tenant(&tenant), lookup()).await
    }

    /// The ratings of task id `task_id` (of any tenant), beside the writer.
    pub async fn feedback(&self, task_id: &str) -> Result<Vec<Feedback>, LedgerError> {
        let task_id = task_id.to_owned();
        let Some(readers) = &self.readers else {
            return self.ask(|ack| Cmd::Feedback(task_id, ack)).await;
        };
        self.caught_up().await?;
        readers
            .run(ReadScope::Operator, move |r, cancel| {
                r.feedback(&task_id, cancel)
            })
            .await
    }

    /// Quality evidence given at or after `since_ms`: the newest `limit` votes and the newest
    /// `limit` ratings naming a delegate, together oldest first (as [`Backend::evidence`]),
    /// beside the writer.
    pub async fn evidence(&self, since_ms: i64, limit: u32) -> Result<Vec<Evidence>, LedgerError> {
        let Some(readers) = &self.readers else {
            return self
                .ask(|ack| Cmd::Evidence {
                    since_ms,
                    limit,
                    ack,
                })
                .await;
        };
        self.caught_up().await?;
        readers
            .run(ReadScope::Operator, move |r, cancel| {
                r.evidence(since_ms, limit, cancel)
            })
            .await
    }

    /// Stores a rating, committed before this returns (whatever the durability: a rating
    /// is answered once, and a second one must find it); false when the task was rated
    /// already.
    pub async fn rate(&self, fb: Feedback) -> Result<bool, LedgerError> {
        let stored = self.ask(|ack| Cmd::Rate(Box::new(fb), ack));
        tokio::time::timeout(RECORD_DEADLINE, stored)
            .await
            .unwrap_or_else(|_| {
                Err(LedgerError::Write(format!(
                    "not committed within {RECORD_DEADLINE:?}"
                )))
            })
    }

    /// Whether the ledger can commit now (`/readyz`), answered by the writer between its
    /// batches within `deadline`: not while its last batch failed (for [`FAILURE_MEMORY`]:
    /// a nearly full disk still takes the probe's one page while batches fail), else whether
    /// the next commit goes through: the batch the writer commits next when rows are coming
    /// (no extra write), else a tiny write of its own ([`Backend::probe`]: a full disk,
    /// deleted files, a dead database). Probes wait for the current batch, never for the
    /// queue behind it. A writer stuck on a store reads as not ready too.
    pub async fn healthy(&self, deadline: Duration) -> bool {
        if let Some((_, progress)) = &self.journal {
            if progress.failing() {
                return false;
            }
        }
        let (ack, done) = oneshot::channel();
        let asked = async {
            self.probes.send(ack).await.ok()?;
            // A full queue means a busy writer, which looks at the probes between batches.
            if let Err(mpsc::error::TrySendError::Closed(_)) = self.tx.try_send(Cmd::Wake) {
                return None;
            }
            done.await.ok()?.ok()
        };
        matches!(tokio::time::timeout(deadline, asked).await, Ok(Some(())))
    }

    /// Deletes rows finished before `before_ms`, [`PRUNE_BATCH`] per transaction: each next
    /// batch is queued behind the rows recorded meanwhile.
    pub async fn prune(&self, before_ms: i64) -> Result<u64, LedgerError> {
        let mut total = 0;
        loop {
            let n = self
                .ask(|ack| Cmd::Prune {
                    before_ms,
                    limit: PRUNE_BATCH,
                    ack,
                })
                .await?;
            total += n;
            if n < PRUNE_BATCH {
                return Ok(total);
            }
        }
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
    last: Option<(std::time::Instant, Arc<LedgerError>)>,
}

impl Failing {
    /// Why the ledger is not ready, if its last batch failed recently.
    fn recent(&self) -> Option<LedgerError> {
        let (at, error) = self.last.as_ref()?;
        (at.elapsed() < FAILURE_MEMORY).then(|| LedgerError::LastBatchFailed(error.clone()))
    }
}

/// The writer thread's state.
struct Writer<'m> {
    backend: Box<dyn Backend>,
    m: &'m Metrics,
    /// The batch being gathered, and who waits for it.
    rows: Vec<LedgerRow>,
    acks: Vec<Ack<()>>,
    /// `Sync`s waiting for the batch being gathered.
    synced: Vec<Ack<()>>,
    failing: Failing,
    /// The last probe's answer, to log changes only.
    not_ready: bool,
    /// With a journal: how far the store got, and the journal's id.
    journal: Option<(Arc<Progress>, String)>,
    /// The highest journal sequence number in the batch (none: no journaled rows in it).
    mark: Option<u64>,
    /// Each row's journal sequence number (`None`: not journaled), index for index with
    /// `rows`: a retried batch leaves out the rows the store's mark says are in.
    seqs: Vec<Option<u64>>,
    /// A failed batch of journaled rows is kept and tried again at this time, after waiting
    /// this long.
    retry: Option<(std::time::Instant, Duration)>,
}

impl<'m> Writer<'m> {
    fn new(
        backend: Box<dyn Backend>,
        m: &'m Metrics,
        journal: Option<(Arc<Progress>, String)>,
    ) -> Writer<'m> {
        Writer {
            backend,
            m,
            rows: Vec::with_capacity(BATCH_MAX),
            acks: Vec::with_capacity(BATCH_MAX),
            synced: Vec::new(),
            failing: Failing::default(),
            not_ready: false,
            journal,
            mark: None,
            seqs: Vec::with_capacity(BATCH_MAX),
            retry: None,
        }
    }

    /// How long to wait before trying a failed batch of journaled rows again.
    fn retry_in(&self) -> Option<Duration> {
        self.retry
            .map(|(at, _)| at.saturating_duration_since(std::time::Instant::now()))
    }

    /// Commits the batch gathered so far and answers its rows; its result, `None` when
    /// there was nothing to commit.
    fn flush(&mut self) -> Option<Result<(), Arc<LedgerError>>> {
        let result = if self.rows.is_empty() {
            None
        } else {
            Some(self.commit())
        };
        for ack in self.synced.drain(..) {
            let _ = ack.send(Ok(()));
        }
        result
    }

    /// Commits the batch and answers its rows. A failed batch of journaled rows (already
    /// acknowledged) is kept, to be tried again after a wait.
    fn commit(&mut self) -> Result<(), Arc<LedgerError>> {
        let retried = self.retry.is_some();
        let journaled = self.mark.zip(self.journal.as_ref());
        let result = match journaled {
            Some((_, (_, id))) if retried => match self.backend.journal_mark(id) {
                // A commit that reported failure may have committed all the same (a
                // connection reset after COMMIT, a file check after it): the rows the store's
                // mark covers are not inserted again. No mark read, no insert.
                Ok(stored) => {
                    let mut keep = self.seqs.iter().map(|s| s.is_none_or(|s| s > stored));
                    self.rows.retain(|_| keep.next().unwrap_or(true));
                    let before = self.seqs.len();
                    self.seqs.retain(|s| s.is_none_or(|s| s > stored));
                    let stored_rows = (before - self.seqs.len()) as u64;
                    self.m.ledger_rows.inc_by(stored_rows);
                    self.m.ledger_queue.sub(stored_rows as i64);
                    Ok(())
                }
                Err(e) => Err(e),
            },
            _ => Ok(()),
        };
        let n = self.rows.len();
        let result = result
            .and_then(|()| match journaled {
                Some(_) if n == 0 => Ok(()),
                Some((seq, (_, id))) => self.backend.insert_marked(&self.rows, (id, seq)),
                None => self.backend.insert(&self.rows),
            })
            .map_err(Arc::new);
        let (m, failing) = (self.m, &mut self.failing);
        match &result {
            Ok(()) => {
                m.ledger_rows.inc_by(n as u64);
                m.ledger_batches.inc();
                if let Some((seq, (progress, _))) = journaled {
                    progress.stored(seq);
                }
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
                let what = if journaled.is_some() {
                    "moving journaled provenance rows into the store failed; trying again"
                } else {
                    "provenance batch failed; its results are withheld"
                };
                if failing.batches == 0 {
                    tracing::error!(rows = n, error = %e, "{what}");
                } else {
                    tracing::debug!(rows = n, error = %e, "{what}");
                }
                failing.batches += 1;
                failing.rows += n as u64;
                failing.last = Some((std::time::Instant::now(), e.clone()));
            }
        }
        if journaled.is_some() && result.is_err() {
            let wait = self
                .retry
                .map_or(RETRY_FIRST, |(_, w)| (w * 2).min(RETRY_MAX));
            self.retry = Some((std::time::Instant::now() + wait, wait));
            return result;
        }
        self.mark = None;
        self.retry = None;
        m.ledger_queue.sub(n as i64);
        for ack in self.acks.drain(..) {
            let _ = ack.send(result.clone());
        }
        self.rows.clear();
        self.seqs.clear();
        result
    }

    /// Answers the waiting probes: with `committed`, the commit that just ended (the same
    /// path a probe write takes), else with a probe write of their own (one for all).
    fn answer_probes(
        &mut self,
        probes: Vec<Ack<()>>,
        committed: Option<Result<(), Arc<LedgerError>>>,
    ) {
        let answer = match committed {
            Some(result) => result,
            None => match self.failing.recent() {
                Some(why) => Err(Arc::new(why)),
                None => self.backend.probe().map_err(Arc::new),
            },
        };
        // Logged when the answer changes, not at every `/readyz`.
        match (&answer, self.not_ready) {
            (Err(e), false) => tracing::warn!(error = %e, "ledger not ready"),
            (Ok(()), true) => tracing::info!("ledger ready again"),
            _ => {}
        }
        self.not_ready = answer.is_err();
        for ack in probes {
            let _ = ack.send(answer.clone());
        }
    }

    /// Takes one command into the batch being gathered, or runs it after committing the batch.
    /// Returns `false` for [`Cmd::Shutdown`].
    fn take(&mut self, cmd: Cmd) -> bool {
        match cmd {
            Cmd::Insert(row, ack) => {
                self.rows.push(*row);
                self.seqs.push(None);
                self.acks.extend(ack);
            }
            Cmd::Journaled(row, seq) => {
                self.rows.push(*row);
                self.seqs.push(Some(seq));
                self.mark = Some(self.mark.map_or(seq, |m| m.max(seq)));
            }
            Cmd::Query(q, ack) => {
                self.flush();
                let _ = ack.send(self.backend.query(&q).map_err(Arc::new));
            }
            Cmd::Spend(since, ack) => {
                self.flush();
                let _ = ack.send(self.backend.spend_since(since).map_err(Arc::new));
            }
            Cmd::SpendBreakdown(since, ack) => {
                self.flush();
                let _ = ack.send(self.backend.spend_breakdown(since).map_err(Arc::new));
            }
            Cmd::TaskOf {
                tenant,
                task_id,
                ack,
            } => {
                self.flush();
                let found = self.backend.task_of(&tenant, &task_id);
                let _ = ack.send(found.map_err(Arc::new));
            }
            Cmd::Feedback(task_id, ack) => {
                self.flush();
                let _ = ack.send(self.backend.feedback(&task_id).map_err(Arc::new));
            }
            Cmd::Evidence {
                since_ms,
                limit,
                ack,
            } => {
                self.flush();
                let found = self.backend.evidence(since_ms, limit);
                let _ = ack.send(found.map_err(Arc::new));
            }
            Cmd::Rate(fb, ack) => {
                self.flush();
                let _ = ack.send(self.backend.rate(&fb).map_err(Arc::new));
            }
            Cmd::Prune {
                before_ms,
                limit,
                ack,
            } => {
                self.flush();
                let pruned = self.backend.prune_batch(before_ms, limit);
                let _ = ack.send(pruned.map_err(Arc::new));
            }
            Cmd::Forget(id, ack) => {
                self.flush();
                let _ = ack.send(self.backend.forget_journal(&id).map_err(Arc::new));
            }
            Cmd::Sync(ack) => self.synced.push(ack),
            Cmd::Wake => {}
            Cmd::Shutdown => return false,
        }
        true
    }

    /// Until [`Cmd::Shutdown`] and the commands queued before it; then closes `readers`.
    fn run(
        mut self,
        mut rx: mpsc::Receiver<Cmd>,
        mut probe_rx: mpsc::Receiver<Ack<()>>,
        readers: Option<Arc<Readers>>,
    ) {
        let mut stopping = false;
        loop {
            let first = if stopping {
                rx.try_recv().ok()
            } else if let Some(wait) = self.retry_in() {
                std::thread::sleep(wait);
                rx.try_recv().ok()
            } else {
                rx.blocking_recv()
            };
            if first.is_none() {
                if self.rows.is_empty() {
                    break;
                }
                if stopping {
                    // Journaled rows the store still refuses: they stay in the journal,
                    // replayed at the next start.
                    if self.flush().is_some_and(|r| r.is_err()) {
                        tracing::error!(rows = self.rows.len(),
                            "stopping with provenance rows not in the store; the journal keeps them");
                    }
                    break;
                }
            }
            let mut next = first;
            let mut lingered = false;
            loop {
                // Take everything already queued (up to a batch) so it commits in one
                // transaction.
                while let Some(cmd) = next.take() {
                    if !self.take(cmd) {
                        stopping = true;
                        rx.close();
                    }
                    if self.rows.len() < BATCH_MAX {
                        next = rx.try_recv().ok();
                    }
                }
                let n = self.rows.len();
                if lingered || stopping || self.retry.is_some() {
                    break;
                }
                if self.mark.is_some() {
                    // Journaled rows: nobody waits for this commit but reads, so gather for
                    // a while into a larger one.
                    if n >= MOVE_AT_ONCE || !self.synced.is_empty() {
                        break;
                    }
                    std::thread::sleep(MOVE_LINGER);
                } else {
                    // Rows are queuing (more than one was waiting): yield once for the next
                    // few, so that one commit carries them all.
                    if !(2..LINGER_BELOW).contains(&n) {
                        break;
                    }
                    std::thread::yield_now();
                }
                lingered = true;
                next = rx.try_recv().ok();
                if next.is_none() {
                    break;
                }
            }
            // The probes that came meanwhile are answered by this commit.
            let mut probes = Vec::new();
            while let Ok(p) = probe_rx.try_recv() {
                probes.push(p);
            }
            let committed = self.flush();
            if !probes.is_empty() {
                self.answer_probes(probes, committed);
            }
        }
        // Before the writer's connection closes, so that it is the last one (SQLite then
        // checkpoints and removes its `-wal`).
        if let Some(r) = readers {
            r.close();
        }
        if let Err(e) = self.backend.finish() {
            tracing::error!(error = %e, "the ledger could not be closed cleanly");
        }
    }
}

#[cfg(test)]
mod tests;
