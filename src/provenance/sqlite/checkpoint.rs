//! WAL checkpoints: a background thread copies committed pages into the database file, and
//! [`Pacing`] tells the writer when it may run SQLite's own auto-checkpoint after a commit.
//!
//! Why the writer sometimes may not: a read transaction pins its snapshot, and no checkpoint
//! copies frames past it, so while an admin read runs the WAL grows by every commit. When the
//! read ends, the next auto-checkpoint (run by the writer right after a commit) copies that
//! whole backlog and fsyncs the file before the writer goes on: measured 470–610 ms for that
//! one commit, beside whole-ledger scans and 8 producers recording back to back
//! (`benches/ledger.rs`), while every other commit took under 10 ms. So from a read's start
//! until the background thread has caught up again, the writer leaves checkpoints to it: the
//! slowest commit in the same run then took 47 ms.

use super::super::LedgerError;
use rusqlite::Connection;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex, PoisonError};

/// How often the background checkpointer copies committed WAL pages into the database.
pub(super) const CHECKPOINT_EVERY: std::time::Duration = std::time::Duration::from_millis(100);

/// SQLite's default auto-checkpoint threshold, in WAL pages.
pub(super) const WAL_AUTOCHECKPOINT: i64 = 1000;

/// WAL frames a background checkpoint may leave uncopied for the writer to take over again
/// (what its next auto-checkpoint then copies: about a megabyte).
const CAUGHT_UP: i64 = 256;

/// Background checkpoints without reads after which the writer takes over anyway: a disk
/// that cannot keep up with the commits would otherwise let the WAL grow without end.
const GIVE_UP_AFTER: u32 = 10;

/// Who may checkpoint: shared by the writer, its readers and the background checkpointer.
#[derive(Default)]
pub(super) struct Pacing {
    /// Reads in progress.
    reads: AtomicUsize,
    /// Frames piled up behind a read that the background thread has not copied yet.
    backlog: AtomicBool,
    /// Wakes the background checkpointer (a read ended).
    nudge: Mutex<Option<mpsc::Sender<Tick>>>,
}

/// One read in progress; the background checkpointer is woken when it ends.
pub(super) struct Reading(Arc<Pacing>);

impl Drop for Reading {
    fn drop(&mut self) {
        self.0.reads.fetch_sub(1, Ordering::SeqCst);
        let nudge = self.0.nudge.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(n) = nudge.as_ref() {
            let _ = n.send(Tick::Now);
        }
    }
}

impl Pacing {
    /// A read starts: frames will pile up behind its snapshot.
    pub(super) fn reading(self: &Arc<Pacing>) -> Reading {
        self.reads.fetch_add(1, Ordering::SeqCst);
        self.backlog.store(true, Ordering::SeqCst);
        Reading(self.clone())
    }

    /// Whether the writer's auto-checkpoint would find only a few pages to copy.
    pub(super) fn writer_may_checkpoint(&self) -> bool {
        !self.backlog.load(Ordering::SeqCst)
    }

    /// A background checkpoint left `left` frames uncopied; `idle_runs` counts the runs
    /// without reads since the backlog began.
    fn checkpointed(&self, left: i64, idle_runs: &mut u32) {
        if !self.backlog.load(Ordering::SeqCst) {
            return;
        }
        if self.reads.load(Ordering::SeqCst) > 0 {
            *idle_runs = 0;
            return;
        }
        *idle_runs += 1;
        if left <= CAUGHT_UP || *idle_runs >= GIVE_UP_AFTER {
            self.backlog.store(false, Ordering::SeqCst);
            // A read that started meanwhile keeps it.
            if self.reads.load(Ordering::SeqCst) > 0 {
                self.backlog.store(true, Ordering::SeqCst);
            }
            *idle_runs = 0;
        }
    }
}

enum Tick {
    Now,
    Stop,
}

/// A thread with its own connection that checkpoints the WAL every [`CHECKPOINT_EVERY`], and
/// at once when a read ends (`PASSIVE`: it never waits for, nor blocks, the writer).
///
/// A checkpoint copies pages into the database file and fsyncs it, which takes milliseconds
/// to tens of milliseconds; run by the writer itself (SQLite's auto-checkpoint after a
/// commit), every row queued behind it would wait that long. Here the writer keeps the
/// auto-checkpoint as the last step: by the time the WAL reaches its 1,000 pages, nearly every
/// page is already copied and flushed, so the writer's own checkpoint is short, and it is the
/// one that lets SQLite start the WAL over (a checkpoint that caught up with the last commit).
pub(super) struct Checkpointer {
    tick: mpsc::Sender<Tick>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Checkpointer {
    pub(super) fn start(path: &str, pacing: Arc<Pacing>) -> Result<Checkpointer, LedgerError> {
        let conn = Connection::open(path)?;
        let (tick, ticks) = mpsc::channel::<Tick>();
        *pacing.nudge.lock().unwrap_or_else(PoisonError::into_inner) = Some(tick.clone());
        let thread = std::thread::Builder::new()
            .name("ldp-checkpoint".into())
            .spawn(move || {
                let mut idle_runs = 0;
                loop {
                    match ticks.recv_timeout(CHECKPOINT_EVERY) {
                        Ok(Tick::Now) | Err(RecvTimeoutError::Timeout) => {}
                        Ok(Tick::Stop) | Err(RecvTimeoutError::Disconnected) => return,
                    }
                    // (busy, WAL frames, frames checkpointed); failures are retried.
                    let done = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| {
                        Ok((r.get::<_, i64>(1)?, r.get::<_, i64>(2)?))
                    });
                    match done {
                        Ok((frames, copied)) => {
                            pacing.checkpointed(frames - copied, &mut idle_runs);
                        }
                        Err(e) => tracing::debug!(error = %e, "background checkpoint failed"),
                    }
                }
            })
            .map_err(|source| LedgerError::Io {
                path: path.to_owned(),
                source,
            })?;
        Ok(Checkpointer {
            tick,
            thread: Some(thread),
        })
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        let _ = self.tick.send(Tick::Stop);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests fail loudly")]

    use super::super::tests::row;
    use super::super::SqliteBackend;
    use super::*;
    use crate::provenance::{Backend, Durability};

    fn autocheckpoint(b: &SqliteBackend) -> i64 {
        b.connection()
            .pragma_query_value(None, "wal_autocheckpoint", |r| r.get(0))
            .unwrap()
    }

    /// The writer's auto-checkpoint is off from a read's start until the background thread
    /// has copied what piled up behind it, then on again.
    #[test]
    fn the_writer_leaves_checkpoints_to_the_background_while_reads_pin_the_wal() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.db").display().to_string();
        let mut b = SqliteBackend::open(&path, Durability::Commit).unwrap();
        b.insert(&[row("t0", "s", 0)]).unwrap();
        assert_eq!(autocheckpoint(&b), WAL_AUTOCHECKPOINT);
        let pacing = b.reads.as_ref().unwrap().pacing();
        let reading = pacing.reading();
        for i in 1..=100 {
            b.insert(&[row(&format!("t{i}"), "s", i)]).unwrap();
        }
        assert_eq!(autocheckpoint(&b), 0, "off while a read runs");
        drop(reading);
        // The read's end wakes the background checkpointer, which catches up.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while !pacing.writer_may_checkpoint() {
            assert!(std::time::Instant::now() < deadline, "never caught up");
            std::thread::sleep(CHECKPOINT_EVERY / 10);
        }
        b.insert(&[row("t101", "s", 101)]).unwrap();
        assert_eq!(autocheckpoint(&b), WAL_AUTOCHECKPOINT, "on again");
    }

    /// Without reads, a backlog the background thread cannot clear is handed back to the
    /// writer after a while (the WAL must not grow without end).
    #[test]
    fn a_backlog_goes_back_to_the_writer_after_idle_runs() {
        let pacing = Arc::new(Pacing::default());
        drop(pacing.reading());
        let mut idle = 0;
        for _ in 1..GIVE_UP_AFTER {
            pacing.checkpointed(CAUGHT_UP + 1, &mut idle);
            assert!(!pacing.writer_may_checkpoint());
        }
        pacing.checkpointed(CAUGHT_UP + 1, &mut idle);
        assert!(pacing.writer_may_checkpoint());
        // A read in progress keeps the backlog whatever is left.
        let _reading = pacing.reading();
        for _ in 0..2 * GIVE_UP_AFTER {
            pacing.checkpointed(0, &mut idle);
        }
        assert!(!pacing.writer_may_checkpoint());
    }
}
