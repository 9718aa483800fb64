//! The ledger journal: under `durability = "commit"` or `"fsync"` a row is acknowledged once
//! it is in an append-only file (one `write` per group of rows; `fsync` adds an `fdatasync`),
//! and the writer (`writer.rs`) moves the rows into the store behind it, in large batches.
//!
//! Why: a store commit (SQLite's WAL append and commit, a Postgres round trip) costs far more
//! than a `write` to a file, and every task waited for one. The journal keeps the promise
//! (a result acknowledged to a client survives `kill -9`: the kernel holds what was written)
//! at the price of a `write`.
//!
//! The journal's thread takes the rows queued for it, writes them as one group, hands them to
//! the writer, and only then acknowledges them (so a read that waits for the writer to pass
//! what was queued before it sees them). Each row has a sequence number; the store records,
//! in the transaction of each batch, the highest number it holds of this journal (its
//! *mark*, keyed by the journal's id). While running, the journal is emptied once the store
//! has every row in it and it is over [`TRUNCATE_ABOVE`].
//!
//! Overload: the journal holds at most its limit ([`JOURNAL_MAX`] unless configured) and the
//! writer's queue at most its capacity of rows the store does not have yet. A group that
//! finds either full waits up to [`ROOM_WAIT`] for the store to catch up, then is refused
//! ([`LedgerError::Overloaded`], counted in `ldp_gateway_ledger_shed_rows_total{reason}`),
//! and while the store stays behind every next group is refused at once: its clients get a
//! clear, retryable error instead of waiting for a deadline, and nothing acknowledged is
//! touched (a refused row was never journaled, never acknowledged). Why refuse rather than
//! roll over to a second file: under sustained overload the store falls further behind with
//! every file, so a second file only postpones the same decision by one file's worth of
//! rows, doubles what a crash leaves to replay, and on the disk a SQLite store shares it
//! brings the disk-full failure of both closer; while the store keeps up, the one file is
//! emptied within a commit of reaching its limit (the writer's backlog is one batch). A
//! clean stop deletes it.
//!
//! Each gateway process writes a journal of its own, `PREFIX<id>.journal` in its place
//! ([`Place`]), locked while it runs. At start a gateway adopts every journal in its place
//! that nobody holds (its own from before a crash, or a dead neighbour's: replicas on one
//! host may share a place): it inserts the rows after the store's mark (no row twice),
//! deletes the file and then the mark. A damaged journal (a bad record with valid ones after
//! it, `file.rs`) has every valid record replayed the same way, and is then renamed aside,
//! never deleted, and logged at ERROR with its new path; its damaged records are counted in
//! `ldp_gateway_journal_damaged_records_total`.
//!
//! Like the SQLite files (`sqlite/files.rs`), the journal's path is compared with the open
//! file after each write: a journal deleted or replaced under the gateway is created anew,
//! and the group that noticed it is acknowledged only once the store holds every row so far
//! (the old file's rows are then safe without it).

mod file;

use super::{Backend, Backlog, LedgerError, LedgerRow};
use crate::telemetry::Metrics;
pub(super) use file::JournalFile;
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot};

/// Largest group written in one `write`.
const GROUP_MAX: usize = 1024;

/// A group this small when several rows were waiting gets one yield of the core first, as in
/// the writer (`writer.rs`, `LINGER_BELOW`): the producers about to record join the group.
const YIELD_BELOW: usize = 64;

/// Above this size, the journal is emptied whenever the store holds all its rows.
pub(super) const TRUNCATE_ABOVE: u64 = 1 << 20;

/// The journal's limit unless configured (`provenance.journal_max_bytes`): at this size it
/// takes no more rows until the store holds all it has (then it is emptied).
pub(super) const JOURNAL_MAX: u64 = crate::config::DEFAULT_JOURNAL_MAX_BYTES;

/// How long a group waits for room (the journal at its limit, the writer's queue full) before
/// it is refused: a store that keeps up makes room within a commit or two; a store that does
/// not, does not within this either, and the clients are better told at once.
const ROOM_WAIT: Duration = Duration::from_secs(1);

/// Longest a group waits for the store after its journal was recreated, and a stopping
/// journal for the store to hold every row.
const STORE_WAIT: Duration = Duration::from_secs(30);

/// How long a failed journal write keeps the ledger not ready.
const FAILURE_MEMORY: Duration = Duration::from_secs(5);

/// The answer to a row's producer.
pub(super) type Ack = oneshot::Sender<Result<(), Arc<LedgerError>>>;

/// What the journal's thread is sent.
pub(super) enum Entry {
    /// A row to journal, and who waits for it.
    Row(Box<LedgerRow>, Ack),
    /// Write what is queued, wait for the store to hold it, empty the journal and stop.
    Stop,
}

/// How far the store got, shared by the writer (which moves it) and the journal.
#[derive(Default)]
pub(super) struct Progress {
    /// The highest sequence number the store holds.
    stored: Mutex<u64>,
    moved: Condvar,
    /// When a journal write last failed.
    failed_at: Mutex<Option<Instant>>,
}

impl Progress {
    /// The store now holds every row up to `seq` (the writer, after a commit).
    pub(super) fn stored(&self, seq: u64) {
        let mut stored = self.stored.lock().unwrap_or_else(PoisonError::into_inner);
        *stored = (*stored).max(seq);
        self.moved.notify_all();
    }

    /// The highest sequence number the store holds.
    fn stored_to(&self) -> u64 {
        *self.stored.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits until the store moves past `from`, at most `within`.
    fn wait_moved(&self, from: u64, within: Duration) {
        let stored = self.stored.lock().unwrap_or_else(PoisonError::into_inner);
        let _ = self
            .moved
            .wait_timeout_while(stored, within, |s| *s == from)
            .unwrap_or_else(PoisonError::into_inner);
    }

    /// Waits until the store holds `seq`, at most `within`; whether it does.
    fn wait_stored(&self, seq: u64, within: Duration) -> bool {
        let stored = self.stored.lock().unwrap_or_else(PoisonError::into_inner);
        let (stored, _) = self
            .moved
            .wait_timeout_while(stored, within, |s| *s < seq)
            .unwrap_or_else(PoisonError::into_inner);
        *stored >= seq
    }

    /// Whether a journal write failed in the last [`FAILURE_MEMORY`] (`/readyz`).
    pub(super) fn failing(&self) -> bool {
        let at = self
            .failed_at
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        at.is_some_and(|t| t.elapsed() < FAILURE_MEMORY)
    }

    fn failed(&self) {
        *self
            .failed_at
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(Instant::now());
    }
}

/// Where a ledger's journals live: a folder, and how their names start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    /// The folder.
    pub dir: PathBuf,
    /// The start of each journal's name (then its id and `.journal`).
    pub prefix: String,
}

impl Place {
    /// The journals in the place now.
    fn journals(&self) -> Result<Vec<PathBuf>, LedgerError> {
        let failed = |e: std::io::Error| LedgerError::Journal {
            path: self.dir.display().to_string(),
            reason: e.to_string(),
        };
        std::fs::create_dir_all(&self.dir).map_err(failed)?;
        let mut found = Vec::new();
        for entry in std::fs::read_dir(&self.dir).map_err(failed)? {
            let name = entry.map_err(failed)?.file_name();
            let name = name.to_string_lossy();
            if name.starts_with(&self.prefix) && name.ends_with(".journal") {
                found.push(self.dir.join(&*name));
            }
        }
        found.sort();
        Ok(found)
    }
}

/// A new journal, the rows of every earlier one already in the store.
pub struct Recovered {
    pub(super) file: JournalFile,
    /// The next row's sequence number.
    pub(super) next_seq: u64,
    /// Rows replayed from adopted journals.
    pub replayed: u64,
    /// Records found damaged in adopted journals (counted once the ledger starts).
    pub damaged: u64,
    /// The journal's limit in bytes ([`JOURNAL_MAX`] unless set).
    pub(super) max_bytes: u64,
}

impl Recovered {
    /// The journal's id: the key of its mark in the store.
    pub(super) fn id(&self) -> String {
        self.file.id()
    }

    /// The journal's limit (`provenance.journal_max_bytes`).
    pub fn set_max_bytes(&mut self, bytes: u64) {
        self.max_bytes = bytes;
    }
}

/// What adopting one journal did.
struct Adopted {
    replayed: u64,
    damaged: u64,
}

/// Adopts every journal in `place` that no process holds (inserting into `backend` the rows
/// after the store's mark for it, in batches of `batch`, then deleting it and its mark),
/// and starts a new one.
pub(super) fn recover(
    place: &Place,
    backend: &mut dyn Backend,
    batch: usize,
) -> Result<Recovered, LedgerError> {
    let (mut replayed, mut damaged) = (0, 0);
    for path in place.journals()? {
        match JournalFile::try_open(&path) {
            Ok(Some((file, contents))) => {
                let adopted = adopt(file, contents, backend, batch)?;
                replayed += adopted.replayed;
                damaged += adopted.damaged;
            }
            Ok(None) => {}
            // Not a journal after all, or unreadable: left alone, and said.
            Err(e) => tracing::error!(error = %e, "a ledger journal could not be adopted"),
        }
    }
    let id = *uuid::Uuid::new_v4().as_bytes();
    let path = place
        .dir
        .join(format!("{}{}.journal", place.prefix, hex::encode(id)));
    Ok(Recovered {
        file: JournalFile::create(&path, id)?,
        next_seq: 1,
        replayed,
        damaged,
        max_bytes: JOURNAL_MAX,
    })
}

/// Moves an earlier journal's rows that the store lacks into it, then deletes the journal
/// (a damaged one is renamed aside instead) and its mark, in that order: a crash between
/// leaves a harmless mark.
fn adopt(
    file: JournalFile,
    contents: file::Contents,
    backend: &mut dyn Backend,
    batch: usize,
) -> Result<Adopted, LedgerError> {
    let path = file.path().display().to_string();
    let damage = contents.damage;
    if contents.torn_bytes > 0 && !damage.any() {
        tracing::warn!(
            path,
            bytes = contents.torn_bytes,
            "a ledger journal ended in a torn record (a crash mid-write); ignored"
        );
    }
    let id = file.id();
    let mark = backend.journal_mark(&id)?;
    let (seqs, rows): (Vec<u64>, Vec<LedgerRow>) =
        contents.rows.into_iter().filter(|(s, _)| *s > mark).unzip();
    for (seqs, rows) in seqs.chunks(batch.max(1)).zip(rows.chunks(batch.max(1))) {
        let last = seqs.last().copied().unwrap_or(mark);
        backend.insert_marked(rows, (&id, last))?;
    }
    if !rows.is_empty() || contents.unreadable > 0 {
        tracing::warn!(
            path,
            replayed = rows.len(),
            unreadable = contents.unreadable,
            "ledger rows replayed from a journal"
        );
    }
    if damage.any() {
        let kept = file.keep_aside()?;
        tracing::error!(
            path,
            kept = %kept.display(),
            damaged_records = damage.records,
            lost_rows = damage.lost,
            duplicates = damage.duplicates,
            damaged_bytes = damage.bytes,
            replayed = rows.len(),
            "a ledger journal was damaged: every valid record in it was replayed, the damaged \
             ones are lost; the file is kept aside"
        );
    } else {
        file.remove()?;
    }
    backend.forget_journal(&id)?;
    Ok(Adopted {
        replayed: rows.len() as u64,
        damaged: damage.records,
    })
}

/// The journal's thread.
pub(super) struct Stage<'m> {
    journal: JournalFile,
    next_seq: u64,
    /// The journal's limit in bytes.
    max_bytes: u64,
    /// `fdatasync` after each write (`durability = "fsync"`).
    sync: bool,
    progress: Arc<Progress>,
    m: &'m Metrics,
    /// Rows refused since the store fell behind (none: taking rows).
    refusing: Option<u64>,
}

/// Room for a group in the writer's queue, taken before the group is journaled: handing the
/// rows over then never waits.
type Room<'s, T> = mpsc::PermitIterator<'s, T>;

impl<'m> Stage<'m> {
    pub(super) fn new(
        recovered: Recovered,
        sync: bool,
        progress: Arc<Progress>,
        m: &'m Metrics,
    ) -> Stage<'m> {
        Stage {
            journal: recovered.file,
            next_seq: recovered.next_seq,
            max_bytes: recovered.max_bytes,
            sync,
            progress,
            m,
            refusing: None,
        }
    }

    /// Until [`Entry::Stop`] or the last sender is gone: journals groups of rows, hands each
    /// row to the writer on `to_writer` (as `wrap` makes it), then acknowledges them; a group
    /// for which there is no room is refused ([`Stage::room`]). At the end, once the store
    /// holds every row, deletes the journal: then its id, whose mark the store may forget.
    pub(super) fn run<T>(
        mut self,
        mut rx: mpsc::Receiver<Entry>,
        to_writer: &mpsc::Sender<T>,
        wrap: impl Fn(Box<LedgerRow>, u64) -> T,
    ) -> Option<String> {
        // A group is handed over whole, so it never needs more room than the queue has.
        let group_max = GROUP_MAX.min(to_writer.max_capacity());
        let mut rows: Vec<Box<LedgerRow>> = Vec::with_capacity(group_max);
        let mut acks: Vec<Ack> = Vec::with_capacity(group_max);
        let mut stopping = false;
        while !stopping {
            let Some(first) = rx.blocking_recv() else {
                break;
            };
            let mut next = Some(first);
            let mut yielded = false;
            loop {
                while let Some(entry) = next.take() {
                    match entry {
                        Entry::Row(row, ack) => {
                            rows.push(row);
                            acks.push(ack);
                        }
                        Entry::Stop => {
                            stopping = true;
                            rx.close();
                        }
                    }
                    if rows.len() < group_max {
                        next = rx.try_recv().ok();
                    }
                }
                if yielded || stopping || !(2..YIELD_BELOW).contains(&rows.len()) {
                    break;
                }
                yielded = true;
                std::thread::yield_now();
                next = rx.try_recv().ok();
                if next.is_none() {
                    break;
                }
            }
            if rows.is_empty() {
                continue;
            }
            let n = rows.len() as u64;
            let answer = match self.room(to_writer, rows.len()) {
                Ok(room) => match self.write(&rows) {
                    Ok((first_seq, recreated)) => {
                        for ((row, seq), permit) in rows.drain(..).zip(first_seq..).zip(room) {
                            permit.send(wrap(row, seq));
                        }
                        self.wait_if_recreated(recreated, first_seq + n - 1)
                    }
                    Err(e) => {
                        self.progress.failed();
                        Err(Arc::new(e))
                    }
                },
                Err(e) => Err(e),
            };
            if !rows.is_empty() {
                // Not handed to the writer (not journaled, or no writer): no longer waiting
                // for the store.
                self.m.ledger_queue.sub(n as i64);
                rows.clear();
            }
            if let Err(e) = &answer {
                if let LedgerError::Overloaded(backlog) = **e {
                    self.refused(backlog, n);
                }
            }
            for ack in acks.drain(..) {
                let _ = ack.send(answer.clone());
            }
            if self.journal.len() > TRUNCATE_ABOVE.min(self.max_bytes / 2)
                && self.progress.stored_to() + 1 >= self.next_seq
            {
                self.empty();
            }
        }
        // Stopping: the writer is still running; once the store holds every row, the
        // journal goes (a clean stop leaves nothing to replay).
        if !self.progress.wait_stored(self.next_seq - 1, STORE_WAIT) {
            return None;
        }
        let id = self.journal.id();
        match self.journal.remove() {
            Ok(()) => Some(id),
            Err(e) => {
                tracing::warn!(error = %e, "could not delete the ledger journal");
                None
            }
        }
    }

    /// A group written to a journal that had to be recreated is safe only once the store
    /// holds it (up to `last`): waits for that.
    fn wait_if_recreated(&self, recreated: bool, last: u64) -> Result<(), Arc<LedgerError>> {
        if recreated && !self.progress.wait_stored(last, STORE_WAIT) {
            return Err(Arc::new(LedgerError::Write(format!(
                "the journal was recreated and the store did not take its rows within \
                 {STORE_WAIT:?}"
            ))));
        }
        Ok(())
    }

    /// Room for a group of `n` rows: in the journal (emptied first if it is at its limit and
    /// the store holds all it has) and in the writer's queue. Waits for the store to move at
    /// most [`ROOM_WAIT`] in all, and not at all while refusing already (the store is behind:
    /// each group is told at once, until there is room again).
    fn room<'s, T>(
        &mut self,
        to_writer: &'s mpsc::Sender<T>,
        n: usize,
    ) -> Result<Room<'s, T>, Arc<LedgerError>> {
        let wait = if self.refusing.is_some() {
            Duration::ZERO
        } else {
            ROOM_WAIT
        };
        let deadline = Instant::now() + wait;
        loop {
            let stored = self.progress.stored_to();
            let has_room = self.journal.len() < self.max_bytes
                || (stored + 1 >= self.next_seq && self.empty());
            let full = if has_room {
                None
            } else {
                Some(Backlog::Journal)
            };
            let full = match full {
                Some(backlog) => backlog,
                None => match to_writer.try_reserve_many(n) {
                    Ok(room) => {
                        if let Some(refused) = self.refusing.take() {
                            tracing::warn!(
                                refused,
                                "the ledger's store caught up: rows are taken again"
                            );
                        }
                        return Ok(room);
                    }
                    Err(mpsc::error::TrySendError::Full(())) => Backlog::Queue,
                    Err(mpsc::error::TrySendError::Closed(())) => {
                        return Err(Arc::new(LedgerError::Closed))
                    }
                },
            };
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Arc::new(LedgerError::Overloaded(full)));
            }
            self.progress.wait_moved(stored, left);
        }
    }

    /// `n` rows were refused for want of room in `backlog`: counted, the first of a run
    /// logged, and the ledger not ready meanwhile.
    fn refused(&mut self, backlog: Backlog, n: u64) {
        self.m
            .ledger_shed
            .with_label_values(&[backlog.label()])
            .inc_by(n);
        self.progress.failed();
        match &mut self.refusing {
            Some(refused) => *refused += n,
            None => {
                tracing::error!(
                    reason = backlog.label(),
                    journal_bytes = self.journal.len(),
                    journal_max_bytes = self.max_bytes,
                    "the ledger's store is too far behind: rows are refused (their results \
                     withheld) until it catches up"
                );
                self.refusing = Some(n);
            }
        }
    }

    /// Journals `rows`: the first one's sequence number, and whether the journal had to be
    /// recreated (then the rows are safe only once the store has them).
    fn write(&mut self, rows: &[Box<LedgerRow>]) -> Result<(u64, bool), LedgerError> {
        let first = self.next_seq;
        self.journal
            .append(rows.iter().map(|r| &**r), first, self.sync)?;
        self.next_seq += rows.len() as u64;
        let Some(reason) = self.journal.moved() else {
            return Ok((first, false));
        };
        tracing::error!(path = %self.journal.path().display(), reason,
            "the ledger journal was deleted or replaced while open; creating it anew");
        self.journal.recreate()?;
        Ok((first, true))
    }

    /// Empties the journal (the store holds all its rows); whether it is empty.
    fn empty(&mut self) -> bool {
        match self.journal.truncate() {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(error = %e, "could not empty the ledger journal");
                false
            }
        }
    }
}

#[cfg(test)]
mod tests;
