//! The provenance ledger: one row per task outcome, written by a batching writer (group
//! commit) behind a bounded queue, to SQLite by default.
//!
//! Durability (`[provenance] durability`):
//! - `commit` (default): a result is answered only after its row is in the journal
//!   (`journal.rs`: one `write` per group of rows; survives a crash of the gateway process),
//!   from where the writer moves it into the store (SQLite WAL, `synchronous = NORMAL`);
//! - `fsync`: the same with an `fdatasync` of the journal per group, and the store at
//!   `synchronous = FULL` (survives power loss too, at a cost);
//! - `async`: rows are queued and the answer does not wait; a full queue drops the row
//!   (counted in `ldp_gateway_ledger_dropped_rows_total` and logged), and a crash may lose
//!   what was still queued.
//!
//! A store in memory has no journal: `commit` and `fsync` then wait for the commit itself.
//!
//! Backends implement [`Backend`] (blocking, run on the writer's own thread): SQLite here,
//! Postgres in cluster mode. Reads (admin queries, past spend) run beside the writer, on
//! connections of their own ([`Reader`], `readers.rs`), so a slow read never delays a commit;
//! pruning runs on the writer in small batches between commits (`writer.rs` says why).

pub mod bounds;
mod evidence;
mod feedback;
mod journal;
mod postgres;
pub mod query;
mod readers;
mod row;
mod sqlite;
#[cfg(test)]
mod tests;
mod writer;

pub use evidence::CALIBRATION_TASK_PREFIX;
pub use feedback::{Feedback, Given, RatedTask};
pub use journal::{Place, Recovered};
pub use postgres::PostgresBackend;
pub use query::{Format, Query, SpendRow};
pub use readers::Cancel;
pub use row::{
    digest, redact_preview, Evidence, EvidenceSource, Ingress, JsonText, LedgerRow, Outcome,
    TokenCounts, Vote,
};
pub use sqlite::SqliteBackend;
pub use writer::{Ledger, LedgerHandle, Opened};

// Owned by config (the `[provenance]` section's types), re-exported where the ledger is used.
pub use crate::config::{is_postgres, Durability};
pub use crate::secret::redact_url;
use sha2::Digest as _;

/// Why the ledger could not do something.
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    /// The store URL is not understood.
    #[error("unsupported provenance store '{0}' (use sqlite://PATH or postgres://…)")]
    BadStore(String),
    /// Postgres failed (its message; the URL's password is never in it).
    #[error("postgres: {0}")]
    Postgres(String),
    /// SQLite failed.
    #[error("sqlite: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// Creating the database's folder failed.
    #[error("cannot create {path}: {source}")]
    Io {
        /// The folder.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The store failed a commit or a read (its error as text: one failed commit answers
    /// every row of its batch). Kept as text for callers that match on it.
    #[error("provenance write failed: {0}")]
    Write(String),
    /// The last batch failed moments ago ([`LedgerHandle::healthy`]: not ready meanwhile).
    #[error("the last batch failed: {0}")]
    LastBatchFailed(std::sync::Arc<LedgerError>),
    /// As many reads as the ledger takes are already running or waiting.
    #[error("too many ledger reads at once (at most {0} running or waiting)")]
    ReadsBusy(usize),
    /// A read did not finish within its deadline (it is stopped).
    #[error("the ledger read did not finish within {0:?}")]
    ReadTimeout(std::time::Duration),
    /// The writer has stopped (shutdown) or its queue is gone.
    #[error("the provenance writer is not running")]
    Closed,
    /// A stored value could not be read back.
    #[error("corrupt row: {0}")]
    Corrupt(String),
    /// The SQLite file was deleted or replaced under the open ledger and its rows could not
    /// be moved to a new file at its path yet: nothing is acknowledged meanwhile.
    #[error("ledger file {path} was deleted or replaced while open: {reason}")]
    Detached {
        /// The database path.
        path: String,
        /// What is wrong, or why moving the rows failed.
        reason: String,
    },
    /// The database has a newer schema than this build knows.
    #[error("database schema version {found} is newer than this build's {known}")]
    SchemaTooNew {
        /// In the file.
        found: i64,
        /// Known here.
        known: i64,
    },
    /// The journal could not be opened, written or checked.
    #[error("ledger journal {path}: {reason}")]
    Journal {
        /// The journal's path.
        path: String,
        /// What went wrong.
        reason: String,
    },
    /// The store is too far behind to take another row (`journal.rs`, overload): the row
    /// was not journaled, and its result is withheld; worth retrying.
    #[error("the provenance ledger is overloaded: {}", .0.what())]
    Overloaded(Backlog),
}

impl LedgerError {
    /// What a client whose result is withheld for this error is told (the cause stays in
    /// the log): an overloaded ledger says so, every other failure is "unavailable".
    pub fn client_message(&self) -> &'static str {
        match self {
            LedgerError::Overloaded(_) => {
                "the provenance ledger is overloaded (its store is behind); retry later"
            }
            LedgerError::BadStore(_)
            | LedgerError::Postgres(_)
            | LedgerError::Sqlite(_)
            | LedgerError::Io { .. }
            | LedgerError::Write(_)
            | LedgerError::LastBatchFailed(_)
            | LedgerError::ReadsBusy(_)
            | LedgerError::ReadTimeout(_)
            | LedgerError::Closed
            | LedgerError::Corrupt(_)
            | LedgerError::Detached { .. }
            | LedgerError::SchemaTooNew { .. }
            | LedgerError::Journal { .. } => "the provenance ledger is unavailable",
        }
    }
}

/// What was full when the ledger refused a row ([`LedgerError::Overloaded`]; the `reason`
/// of `ldp_gateway_ledger_shed_rows_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backlog {
    /// The journal reached its limit (`journal_max_bytes`) with rows the store lacks.
    Journal,
    /// The writer's queue (`queue_capacity`) is full.
    Queue,
}

impl Backlog {
    /// Every kind, for the metric's labels.
    pub const ALL: [Backlog; 2] = [Backlog::Journal, Backlog::Queue];

    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            Backlog::Journal => "journal_full",
            Backlog::Queue => "queue_full",
        }
    }

    /// Said in the error.
    fn what(self) -> &'static str {
        match self {
            Backlog::Journal => "its journal is full and the store has not caught up",
            Backlog::Queue => "the queue to its store is full and the store has not caught up",
        }
    }
}

/// A ledger store. Calls are blocking; the writer runs them on its own thread.
pub trait Backend: Send + 'static {
    /// Inserts `rows`, and their votes, in one transaction.
    fn insert(&mut self, rows: &[LedgerRow]) -> Result<(), LedgerError>;
    /// [`Backend::insert`], also recording in the same transaction that the store holds the
    /// rows of journal `mark.0` up to sequence number `mark.1` (see [`Backend::journal_mark`]).
    /// The default records nothing: a replay then inserts the journal's rows again.
    fn insert_marked(&mut self, rows: &[LedgerRow], mark: (&str, u64)) -> Result<(), LedgerError> {
        let _ = mark;
        self.insert(rows)
    }
    /// The highest sequence number of journal `journal` whose row the store holds (0: none):
    /// rows after it are replayed from the journal at start.
    fn journal_mark(&mut self, journal: &str) -> Result<u64, LedgerError> {
        let _ = journal;
        Ok(0)
    }
    /// Deletes journal `journal`'s mark (the journal is gone).
    fn forget_journal(&mut self, journal: &str) -> Result<(), LedgerError> {
        let _ = journal;
        Ok(())
    }
    /// Rows matching `q`, newest first; a query by task id reads each row's votes back too.
    fn query(&mut self, q: &Query) -> Result<Vec<LedgerRow>, LedgerError>;
    /// Deletes rows finished before `before_ms` (Unix ms), and the ratings and votes given
    /// before it; returns how many rows.
    fn prune(&mut self, before_ms: i64) -> Result<u64, LedgerError>;
    /// Deletes at most `limit` of the rows finished before `before_ms`, oldest first; returns
    /// how many. The writer prunes in such batches between commits. The default deletes them
    /// all at once.
    fn prune_batch(&mut self, before_ms: i64, limit: u64) -> Result<u64, LedgerError> {
        let _ = limit;
        self.prune(before_ms)
    }
    /// Total `cost_usd` per tenant of rows finished at or after `since_ms`.
    fn spend_since(&mut self, since_ms: i64) -> Result<Vec<(String, f64)>, LedgerError>;
    /// Tasks and cost per (tenant, policy, delegate) of rows finished at or after `since_ms`.
    fn spend_breakdown(&mut self, since_ms: i64) -> Result<Vec<SpendRow>, LedgerError>;
    /// The newest row of `tenant`'s task `task_id`, as feedback needs it (none: no such task
    /// of this tenant).
    fn task_of(&mut self, tenant: &str, task_id: &str) -> Result<Option<RatedTask>, LedgerError>;
    /// The ratings of task id `task_id` (of any tenant; at most [`FEEDBACK_PER_TASK`]).
    fn feedback(&mut self, task_id: &str) -> Result<Vec<Feedback>, LedgerError>;
    /// Quality evidence given at or after `since_ms` (Unix ms): the newest `limit` votes, the
    /// newest `limit` ratings that name a delegate and the newest `limit` calibration rounds
    /// that taught something, together oldest first (at the same millisecond, votes, then
    /// ratings, then rounds).
    fn evidence(&mut self, since_ms: i64, limit: u32) -> Result<Vec<Evidence>, LedgerError>;
    /// Stores `fb` in its own transaction; false when the task was rated already (nothing
    /// changed).
    fn rate(&mut self, fb: &Feedback) -> Result<bool, LedgerError>;
    /// Commits a tiny write now (`/readyz`): the same path a batch takes (a write, a commit, an
    /// fsync under `fsync`), so a full disk, a read-only store or a deleted file fails it.
    fn probe(&mut self) -> Result<(), LedgerError>;
    /// Whether [`Backend::probe`] commits.
    fn healthy(&mut self) -> bool {
        self.probe().is_ok()
    }
    /// Called once when the writer stops, after its last commit: makes sure what was
    /// acknowledged is where the store will be opened next time (SQLite: its file).
    fn finish(&mut self) -> Result<(), LedgerError> {
        Ok(())
    }
    /// Reads on connections of their own, beside this one; `None` (the default, and an
    /// in-memory SQLite database, which only its one connection sees) sends reads through
    /// the writer.
    fn reader(&self) -> Option<std::sync::Arc<dyn Reader>> {
        None
    }
}

/// Reads beside the writer (admin queries, past spend), on connections of their own, so a
/// slow read never holds a commit up. Calls are blocking; the ledger runs them on blocking
/// threads, a few at a time, each with a deadline that fires `cancel`.
pub trait Reader: Send + Sync + 'static {
    /// Rows matching `q`, newest first.
    fn query(&self, q: &Query, cancel: &Cancel) -> Result<Vec<LedgerRow>, LedgerError>;
    /// Total `cost_usd` per tenant of rows finished at or after `since_ms`.
    fn spend_since(
        &self,
        since_ms: i64,
        cancel: &Cancel,
    ) -> Result<Vec<(String, f64)>, LedgerError>;
    /// As [`Backend::spend_breakdown`].
    fn spend_breakdown(&self, since_ms: i64, cancel: &Cancel)
        -> Result<Vec<SpendRow>, LedgerError>;
    /// As [`Backend::task_of`].
    fn task_of(
        &self,
        tenant: &str,
        task_id: &str,
        cancel: &Cancel,
    ) -> Result<Option<RatedTask>, LedgerError>;
    /// As [`Backend::feedback`].
    fn feedback(&self, task_id: &str, cancel: &Cancel) -> Result<Vec<Feedback>, LedgerError>;
    /// As [`Backend::evidence`].
    fn evidence(
        &self,
        since_ms: i64,
        limit: u32,
        cancel: &Cancel,
    ) -> Result<Vec<Evidence>, LedgerError>;
    /// Closes the idle connections (the writer stopped); reads after it fail.
    fn close(&self);
}

/// Most ratings one read of a task id returns (task ids are the clients' own: tenants may
/// share one).
pub const FEEDBACK_PER_TASK: u32 = 100;

/// How long opening a Postgres ledger may take to connect.
pub const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Where the journals of a ledger in `store` live ([`Place`]): next to a SQLite file
/// (`PATH.ID.journal`), or for Postgres in `journal_dir` as `ledger-HASH-ID.journal` (HASH:
/// of the store's URL without its password, so that gateways writing to different databases
/// never adopt each other's). None for a store in memory and under `async`.
pub fn journal_place(store: &str, durability: Durability, journal_dir: &str) -> Option<Place> {
    if durability == Durability::Async {
        return None;
    }
    if let Some(rest) = store.strip_prefix("sqlite:") {
        let path = std::path::Path::new(rest.strip_prefix("//").unwrap_or(rest));
        let name = path.file_name()?.to_string_lossy();
        if rest == ":memory:" {
            return None;
        }
        let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
        return Some(Place {
            dir: dir.unwrap_or(std::path::Path::new(".")).to_owned(),
            prefix: format!("{name}."),
        });
    }
    let hash = hex::encode(&sha2::Sha256::digest(redact_url(store).as_bytes())[..6]);
    Some(Place {
        dir: journal_dir.into(),
        prefix: format!("ledger-{hash}-"),
    })
}

/// Opens the store and, where it has one ([`journal_place`]), a journal in front of it,
/// first replaying into the store the rows earlier journals hold and the store lacks
/// (blocking).
pub fn open(store: &str, durability: Durability, journal_dir: &str) -> Result<Opened, LedgerError> {
    let backend = open_backend(store, durability)?;
    let shared = is_postgres(store);
    match journal_place(store, durability, journal_dir) {
        Some(place) => open_journaled(backend, &place, shared),
        None => Ok(Opened {
            backend,
            journal: None,
            shared,
        }),
    }
}

/// `backend` with a new journal in `place` in front of it, the earlier journals there that
/// no process holds replayed into it; `shared` when other gateways write to the same store.
pub fn open_journaled(
    mut backend: Box<dyn Backend>,
    place: &Place,
    shared: bool,
) -> Result<Opened, LedgerError> {
    let journal = journal::recover(place, backend.as_mut(), writer::BATCH_MAX)?;
    Ok(Opened {
        backend,
        journal: Some(journal),
        shared,
    })
}

/// Opens the backend a store URL names: `sqlite://relative/path.db`, `sqlite:///abs/path.db`,
/// `sqlite::memory:`, or `postgres://user@host:port/db` (also `postgresql://`).
pub fn open_backend(store: &str, durability: Durability) -> Result<Box<dyn Backend>, LedgerError> {
    if let Some(rest) = store.strip_prefix("sqlite:") {
        let path = rest.strip_prefix("//").unwrap_or(rest);
        return Ok(Box::new(SqliteBackend::open(path, durability)?));
    }
    if is_postgres(store) {
        return Ok(Box::new(PostgresBackend::open(
            store,
            durability,
            CONNECT_TIMEOUT,
        )?));
    }
    Err(LedgerError::BadStore(redact_url(store)))
}
