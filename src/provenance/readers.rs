//! Ledger reads beside the writer: a few connections of their own ([`Reader`]), used from
//! blocking threads, each read with a deadline, and a bounded number admitted at once.
//!
//! Why not on the writer: a client under `durability = "commit"` waits for its row's group
//! commit, so a read the writer ran between two commits (a 10,000-row admin page, a spend scan
//! over the whole ledger) was added to every answer queued behind it. SQLite in WAL mode lets
//! readers run beside the one writer, on their own snapshot; Postgres readers are plain clients.

use super::{LedgerError, Reader};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::sync::Semaphore;

/// Read connections, and so reads running at once. Two: the machine this is sized for has two
/// cores, and a reader scanning the ledger keeps one busy; more readers would take the
/// writer's core.
pub(super) const READERS: usize = 2;

/// Reads that may wait for a reader, beyond those running; more are refused at once
/// ([`LedgerError::ReadsBusy`]) rather than piling up behind a slow one.
pub(super) const READ_QUEUE: usize = 32;

/// Longest a read may take, waiting for a reader included; then it is stopped. Postgres
/// readers' `statement_timeout` is the same (`postgres.rs`).
pub(super) const READ_DEADLINE: Duration = Duration::from_secs(10);

/// The readers of one ledger, shared by its handles.
pub(super) struct Readers {
    reader: Arc<dyn Reader>,
    /// One permit per read connection.
    running: Arc<Semaphore>,
    /// Running plus waiting reads.
    admitted: Semaphore,
}

impl Readers {
    pub(super) fn new(reader: Arc<dyn Reader>) -> Readers {
        Readers {
            reader,
            running: Arc::new(Semaphore::new(READERS)),
            admitted: Semaphore::new(READERS + READ_QUEUE),
        }
    }

    /// Runs `read` on a blocking thread once a reader is free, within [`READ_DEADLINE`]. A
    /// read past its deadline is cancelled and keeps its reader until it has stopped, so no
    /// more than [`READERS`] ever run.
    pub(super) async fn run<T: Send + 'static>(
        &self,
        read: impl FnOnce(&dyn Reader, &Cancel) -> Result<T, LedgerError> + Send + 'static,
    ) -> Result<T, LedgerError> {
        let _admitted = self
            .admitted
            .try_acquire()
            .map_err(|_| LedgerError::ReadsBusy(READERS + READ_QUEUE))?;
        let deadline = tokio::time::Instant::now() + READ_DEADLINE;
        let permit = tokio::time::timeout_at(deadline, self.running.clone().acquire_owned())
            .await
            .map_err(|_| LedgerError::ReadTimeout(READ_DEADLINE))?
            .map_err(|_| LedgerError::Closed)?;
        let cancel = Cancel::default();
        let (reader, stop) = (self.reader.clone(), cancel.clone());
        let job = tokio::task::spawn_blocking(move || {
            let _permit = permit;
            read(reader.as_ref(), &stop)
        });
        match tokio::time::timeout_at(deadline, job).await {
            // The store's own error, as text (`LedgerError::Write`, as for a failed commit).
            Ok(Ok(read)) => read.map_err(|e| match e {
                LedgerError::Closed => LedgerError::Closed,
                other => LedgerError::Write(other.to_string()),
            }),
            Ok(Err(join)) => Err(LedgerError::Write(format!("the read stopped: {join}"))),
            Err(_) => {
                cancel.fire();
                Err(LedgerError::ReadTimeout(READ_DEADLINE))
            }
        }
    }

    /// Closes the idle read connections (the writer stopped).
    pub(super) fn close(&self) {
        self.reader.close();
    }

    /// Reads running or waiting.
    #[cfg(test)]
    pub(super) fn admitted(&self) -> usize {
        READERS + READ_QUEUE - self.admitted.available_permits()
    }
}

/// Stops a read from another thread when its deadline passes: the reader registers how
/// (SQLite: its connection's interrupt handle) for as long as the read runs.
#[derive(Clone, Default)]
pub struct Cancel(Arc<Mutex<CancelState>>);

#[derive(Default)]
struct CancelState {
    fired: bool,
    hook: Option<Box<dyn Fn() + Send>>,
}

impl Cancel {
    /// Runs `hook` if the deadline passes before [`Cancel::clear`]; false when it has passed
    /// already (the read should not start).
    pub fn on_cancel(&self, hook: impl Fn() + Send + 'static) -> bool {
        let mut s = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if s.fired {
            return false;
        }
        s.hook = Some(Box::new(hook));
        true
    }

    /// The read is over: a late deadline must not touch the connection, which may be serving
    /// another read by then.
    pub fn clear(&self) {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).hook = None;
    }

    /// Whether the deadline has passed.
    pub fn fired(&self) -> bool {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).fired
    }

    /// The deadline passed: stops the read in progress, if any.
    pub(super) fn fire(&self) {
        let mut s = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        s.fired = true;
        if let Some(hook) = &s.hook {
            hook();
        }
    }

    /// Whether a read is registered (tests: fire only once it runs).
    #[cfg(test)]
    pub(super) fn armed(&self) -> bool {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .hook
            .is_some()
    }
}
