//! Ledger reads beside the writer: a few connections of their own ([`Reader`]), used from
//! blocking threads, each read with a deadline, and a bounded number admitted at once.
//!
//! Reads are shared out by whom they serve (a tenant's rating looks up its task; the operator's
//! admin pages, spend and evidence reads are the gateway's own): each may run on at most
//! [`PER_SCOPE_RUNNING`] of the readers and have at most [`PER_SCOPE_ADMITTED`] admitted, so
//! one tenant's flood of slow reads leaves a reader, and room in the queue, to everyone else;
//! and the tenants together run on at most [`TENANTS_RUNNING`], so two tenants flooding at
//! once still leave the operator's reads (admin pages, spend at start, evidence) a reader.
//!
//! Why not on the writer: a client under `durability = "commit"` waits for its row's group
//! commit, so a read the writer ran between two commits (a 10,000-row admin page, a spend scan
//! over the whole ledger) was added to every answer queued behind it. SQLite in WAL mode lets
//! readers run beside the one writer, on their own snapshot; Postgres readers are plain clients.

use super::{LedgerError, Reader};
use std::collections::HashMap;
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

/// Readers one scope (a tenant, or the operator) may use at once: one fewer than there are,
/// so another scope always finds one free of it.
pub(super) const PER_SCOPE_RUNNING: usize = READERS - 1;

/// Readers every tenant together may use at once: one fewer than there are, so the operator's
/// reads always find one free of the tenants (each tenant still within its own share).
pub(super) const TENANTS_RUNNING: usize = READERS - 1;

/// Reads one scope may have running or waiting; more are refused at once
/// ([`LedgerError::ReadsBusy`]), leaving the rest of the queue to the others.
pub(super) const PER_SCOPE_ADMITTED: usize = 8;

/// Whom a read serves: its share of the readers is that scope's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadScope<'a> {
    /// A tenant's own request (a rating looking up its task).
    Tenant(&'a str),
    /// The operator's and the gateway's own reads (admin pages, spend, evidence).
    Operator,
}

/// One scope's reads admitted now, and its share of the readers.
struct Slot {
    admitted: usize,
    running: Arc<Semaphore>,
}

/// The scopes with reads admitted (at most [`READERS`] + [`READ_QUEUE`] of them).
#[derive(Default)]
struct Scopes(Mutex<HashMap<Option<String>, Slot>>);

impl Scopes {
    /// Admits one read of `scope`: its share of the readers, or `None` when it has
    /// [`PER_SCOPE_ADMITTED`] already.
    fn admit(self: &Arc<Self>, scope: ReadScope<'_>) -> Option<(ScopeGuard, Arc<Semaphore>)> {
        let key = match scope {
            ReadScope::Tenant(t) => Some(t.to_owned()),
            ReadScope::Operator => None,
        };
        let mut map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let slot = map.entry(key.clone()).or_insert_with(|| Slot {
            admitted: 0,
            running: Arc::new(Semaphore::new(PER_SCOPE_RUNNING)),
        });
        if slot.admitted >= PER_SCOPE_ADMITTED {
            return None;
        }
        slot.admitted += 1;
        let running = slot.running.clone();
        Some((
            ScopeGuard {
                scopes: self.clone(),
                key,
            },
            running,
        ))
    }
}

/// One admitted read of a scope; its slot goes when its last read ends.
struct ScopeGuard {
    scopes: Arc<Scopes>,
    key: Option<String>,
}

impl Drop for ScopeGuard {
    fn drop(&mut self) {
        let mut map = self.scopes.0.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(slot) = map.get_mut(&self.key) {
            slot.admitted = slot.admitted.saturating_sub(1);
            if slot.admitted == 0 {
                map.remove(&self.key);
            }
        }
    }
}

/// Longest a read may take, waiting for a reader included; then it is stopped. Postgres
/// readers' `statement_timeout` is the same (`postgres.rs`).
pub(super) const READ_DEADLINE: Duration = Duration::from_secs(10);

/// The readers of one ledger, shared by its handles.
pub(super) struct Readers {
    reader: Arc<dyn Reader>,
    /// One permit per read connection.
    running: Arc<Semaphore>,
    /// The tenants' part of them ([`TENANTS_RUNNING`]); the operator's reads skip it.
    tenants: Arc<Semaphore>,
    /// Running plus waiting reads.
    admitted: Semaphore,
    /// Each scope's share.
    scopes: Arc<Scopes>,
}

impl Readers {
    pub(super) fn new(reader: Arc<dyn Reader>) -> Readers {
        Readers {
            reader,
            running: Arc::new(Semaphore::new(READERS)),
            tenants: Arc::new(Semaphore::new(TENANTS_RUNNING)),
            admitted: Semaphore::new(READERS + READ_QUEUE),
            scopes: Arc::default(),
        }
    }

    /// Runs `read` for `scope` on a blocking thread once a reader is free (and the scope's
    /// share, and for a tenant the tenants' share, allows), within [`READ_DEADLINE`]. A read past its deadline is cancelled and
    /// keeps its reader until it has stopped, so no more than [`READERS`] ever run.
    pub(super) async fn run<T: Send + 'static>(
        &self,
        scope: ReadScope<'_>,
        read: impl FnOnce(&dyn Reader, &Cancel) -> Result<T, LedgerError> + Send + 'static,
    ) -> Result<T, LedgerError> {
        let _admitted = self
            .admitted
            .try_acquire()
            .map_err(|_| LedgerError::ReadsBusy(READERS + READ_QUEUE))?;
        let (_scope, share) = self
            .scopes
            .admit(scope)
            .ok_or(LedgerError::ReadsBusy(PER_SCOPE_ADMITTED))?;
        let deadline = tokio::time::Instant::now() + READ_DEADLINE;
        // Always in this order (own share, the tenants', a reader), so no two reads each
        // hold what the other waits for.
        let waited = async {
            let own = share.acquire_owned().await?;
            let tenants = match scope {
                ReadScope::Tenant(_) => Some(self.tenants.clone().acquire_owned().await?),
                ReadScope::Operator => None,
            };
            let any = self.running.clone().acquire_owned().await?;
            Ok::<_, tokio::sync::AcquireError>((own, tenants, any))
        };
        let permit = tokio::time::timeout_at(deadline, waited)
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

    /// Reads running or waiting: admitted into their scope (a read takes its place in the
    /// queue first, then its scope's, so one counted here holds both).
    #[cfg(test)]
    pub(super) fn admitted(&self) -> usize {
        let scopes = self.scopes.0.lock().unwrap_or_else(PoisonError::into_inner);
        scopes.values().map(|slot| slot.admitted).sum()
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
