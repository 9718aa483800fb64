//! The SQLite backend: WAL, embedded migrations, indexes on (delegate, time), (tenant, time),
//! (tenant, task id) and time, and a session index maintained in merges (below).
//!
//! Why the session index is merged rather than kept per row: sessions run side by side, so
//! each committed group of rows lands on as many index pages as it has sessions, and every
//! one of those pages is written to the WAL again at every commit (measured: half of the
//! ledger's writes). `ledger_session_index` instead receives the rows since its last merge
//! in key order, at most every [`MERGE_ROWS`] rows or [`MERGE_EVERY`], inside the commit of
//! the batch that triggers it. Queries by session read the index plus the unmerged tail
//! (`id > indexed_to`), so they always see every committed row.
//!
//! Deleting the files under a running ledger (`files.rs`) is noticed after the next commit,
//! before it is acknowledged: every committed row is copied out of the still-open old files
//! into a new file at the same path, and only then acknowledged.
//!
//! Reads run beside the writer on read-only connections the writer opens (`read.rs`); WAL
//! checkpoints run on a thread of their own, and on the writer only when cheap
//! (`checkpoint.rs`).

mod checkpoint;
pub(super) mod files;
mod read;

use super::evidence::any_votes;
use super::{
    Backend, Durability, Evidence, Feedback, JsonText, LedgerError, LedgerRow, Query, RatedTask,
    Reader,
};
use checkpoint::{Checkpointer, WAL_AUTOCHECKPOINT};
use files::{io, Files};
use read::ReadConns;
use rusqlite::{params, Connection, OptionalExtension as _};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Schema migrations; `PRAGMA user_version` records how many ran. Append only.
pub const MIGRATIONS: [&str; 12] = [
    // 1: the ledger as first shipped.
    "CREATE TABLE ledger (
        id INTEGER PRIMARY KEY,
        task_id TEXT NOT NULL,
        session_id TEXT NOT NULL,
        upstream_session_id TEXT,
        tenant TEXT NOT NULL,
        skill TEXT NOT NULL,
        policy TEXT,
        delegate TEXT,
        delegate_id TEXT,
        model_version TEXT,
        outcome TEXT NOT NULL,
        error_code TEXT,
        error_message TEXT,
        score REAL,
        candidates INTEGER,
        attempts INTEGER NOT NULL,
        fallbacks TEXT NOT NULL,
        payload_mode TEXT,
        latency_ms REAL NOT NULL,
        upstream_ms REAL NOT NULL,
        cost_usd REAL,
        tokens INTEGER,
        confidence REAL,
        verification_status TEXT,
        started_at TEXT NOT NULL,
        finished_at TEXT NOT NULL,
        finished_ms INTEGER NOT NULL,
        output_sha256 TEXT,
        lineage TEXT NOT NULL
    );
    CREATE INDEX ledger_session_task ON ledger (session_id, task_id);
    CREATE INDEX ledger_delegate_time ON ledger (delegate, finished_ms);
    CREATE INDEX ledger_tenant_time ON ledger (tenant, finished_ms);",
    // 2: cost discrepancy, routing summary, payload previews.
    "ALTER TABLE ledger ADD COLUMN reported_cost_usd REAL;
    ALTER TABLE ledger ADD COLUMN declared_cost_usd REAL;
    ALTER TABLE ledger ADD COLUMN routing TEXT NOT NULL DEFAULT '{}';
    ALTER TABLE ledger ADD COLUMN payload TEXT;
    CREATE INDEX ledger_time ON ledger (finished_ms);",
    // 3: the session index moves to a table filled by merges (see the module comment).
    // Keyed (session, row id): a merge appends at the end of each session's range.
    "CREATE TABLE ledger_session_index (
        session_id TEXT NOT NULL,
        row_id INTEGER NOT NULL,
        PRIMARY KEY (session_id, row_id)
    ) WITHOUT ROWID;
    INSERT INTO ledger_session_index SELECT session_id, id FROM ledger;
    CREATE TABLE ledger_index_state (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        indexed_to INTEGER NOT NULL
    );
    INSERT INTO ledger_index_state VALUES (1, COALESCE((SELECT max(id) FROM ledger), 0));
    DROP INDEX ledger_session_task;",
    // 4: the readiness probe's row (`Backend::probe`): a write must change a value, SQLite
    // skips rewriting a row that stays the same.
    "CREATE TABLE ledger_probe (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        commits INTEGER NOT NULL
    );
    INSERT INTO ledger_probe VALUES (1, 0);",
    // 5: client feedback, one rating per (task id, tenant) (`feedback.rs` says why a table).
    // `IF NOT EXISTS`: a file a newer build touched and an older one migrates stays whole.
    "CREATE TABLE IF NOT EXISTS feedback (
        task_id TEXT NOT NULL,
        tenant TEXT NOT NULL,
        score REAL NOT NULL,
        outcome TEXT NOT NULL,
        delegate TEXT,
        skill TEXT NOT NULL,
        created_at TEXT NOT NULL,
        created_ms INTEGER NOT NULL,
        PRIMARY KEY (task_id, tenant)
    ) WITHOUT ROWID;
    CREATE INDEX IF NOT EXISTS feedback_time ON feedback (created_ms);",
    // 6: verifiers' votes, written with their task's row (`evidence.rs` says why a table).
    // `created_ms` is the row's `finished_ms`; `id` keeps the order they were written in.
    "CREATE TABLE IF NOT EXISTS votes (
        id INTEGER PRIMARY KEY,
        task_id TEXT NOT NULL,
        tenant TEXT NOT NULL,
        round INTEGER NOT NULL,
        producer TEXT NOT NULL,
        skill TEXT NOT NULL,
        verifier TEXT NOT NULL,
        passed INTEGER NOT NULL,
        confidence REAL,
        weight REAL NOT NULL,
        created_ms INTEGER NOT NULL
    );
    CREATE INDEX IF NOT EXISTS votes_time ON votes (created_ms);",
    // 7: a rating finds its task by (tenant, task id): through the (tenant, time) index an
    // unknown task id read every row of the tenant (0.2–0.5 s at 500k rows).
    "CREATE INDEX IF NOT EXISTS ledger_tenant_task ON ledger (tenant, task_id, finished_ms);",
    // 8: the front end a task came in through (`Ingress`); older rows came in over LDP.
    "ALTER TABLE ledger ADD COLUMN ingress TEXT NOT NULL DEFAULT 'ldp';",
    // 9: the trace a task ran in (tracing on), found by `?trace_id=`.
    "ALTER TABLE ledger ADD COLUMN trace_id TEXT;
    CREATE INDEX IF NOT EXISTS ledger_trace ON ledger (trace_id) WHERE trace_id IS NOT NULL;",
    // 10: how far each journal's rows are in (`journal.rs`), written in each batch's
    // transaction: the rows after it are replayed at start.
    "CREATE TABLE IF NOT EXISTS ledger_journal (
        journal_id TEXT PRIMARY KEY,
        stored_to INTEGER NOT NULL
    ) WITHOUT ROWID;",
    // 11: a chat delegate's token counts, each kind apart (the cache's apart from the input's).
    "ALTER TABLE ledger ADD COLUMN input_tokens INTEGER;
    ALTER TABLE ledger ADD COLUMN output_tokens INTEGER;
    ALTER TABLE ledger ADD COLUMN cache_read_tokens INTEGER;
    ALTER TABLE ledger ADD COLUMN cache_write_tokens INTEGER;",
    // 12: a task's rows by its id alone (the console's task page, `?task_id=`): no index
    // served it, so it read every row (0.7 s at 1M rows).
    "CREATE INDEX IF NOT EXISTS ledger_task ON ledger (task_id);",
];

/// Most rows left out of the session index before a merge.
const MERGE_ROWS: u64 = 1024;
/// Longest time rows are left out of the session index before a merge.
const MERGE_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// How long a ledger whose rows could not be moved to a new file waits before trying again
/// (a try copies the whole database); it refuses rows meanwhile.
const RETRY_REHOME: Duration = Duration::from_secs(1);

/// A ledger in one SQLite file.
pub struct SqliteBackend {
    /// Read connections beside this one (none in memory or read-only). First, so that they
    /// close first: the last connection to close removes the `-wal`, and a read-only one
    /// cannot.
    reads: Option<Arc<ReadConns>>,
    conn: Connection,
    /// Rows inserted since the last session-index merge.
    unmerged: u64,
    last_merge: Instant,
    durability: Durability,
    /// The files and the identities they had at open (none in memory or read-only).
    files: Option<Files>,
    /// Set while the files at the path are not the ones holding the rows.
    detached: Option<Detached>,
    /// Dropping it stops the background checkpointer.
    _checkpointer: Option<Checkpointer>,
    /// Whether SQLite's auto-checkpoint runs after this connection's commits now.
    auto_checkpoint: bool,
}

/// A ledger whose files were deleted or replaced, and how far moving its rows got.
struct Detached {
    step: Step,
    reason: String,
    attempts: u32,
    retry_at: Instant,
}

/// The steps of moving the rows to a new file at the path; a failed step is tried again.
enum Step {
    /// The old files are open: copy every row out of them.
    Copy,
    /// The rows are in this file and the old files are closed: put it at the path.
    Place(PathBuf),
    /// The file at the path holds the rows: open it.
    Reopen,
}

impl SqliteBackend {
    /// Opens (creating folders and file as needed) and migrates `path` (`:memory:` works).
    pub fn open(path: &str, durability: Durability) -> Result<SqliteBackend, LedgerError> {
        SqliteBackend::open_with(path, durability, None)
    }

    /// [`SqliteBackend::open`], its read connections handed to `reads` when given (a reopen:
    /// the readers keep theirs until their reads end).
    fn open_with(
        path: &str,
        durability: Durability,
        reads: Option<Arc<ReadConns>>,
    ) -> Result<SqliteBackend, LedgerError> {
        if path != ":memory:" {
            if let Some(dir) = std::path::Path::new(path)
                .parent()
                .filter(|d| !d.as_os_str().is_empty())
            {
                std::fs::create_dir_all(dir).map_err(|source| LedgerError::Io {
                    path: dir.display().to_string(),
                    source,
                })?;
            }
        }
        let conn = Connection::open(path)?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        let sync = match durability {
            Durability::Fsync => "FULL",
            Durability::Commit | Durability::Async => "NORMAL",
        };
        conn.pragma_update(None, "synchronous", sync)?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        let mut backend = SqliteBackend::wrap(conn);
        backend.migrate(MIGRATIONS.len())?;
        // Rows a crash left unmerged.
        let tx = backend.conn.transaction()?;
        merge_session_index(&tx)?;
        tx.commit()?;
        backend.durability = durability;
        if path != ":memory:" {
            let conns = ReadConns::connect(path)?;
            let reads = reads.unwrap_or_else(|| Arc::new(ReadConns::default()));
            backend._checkpointer = Some(Checkpointer::start(path, reads.pacing())?);
            backend.files = Some(Files::opened(path));
            reads.adopt(conns);
            backend.reads = Some(reads);
        }
        Ok(backend)
    }

    /// Opens `path` read-only for queries (the `provenance` command), without migrating.
    pub fn open_read_only(path: &str) -> Result<SqliteBackend, LedgerError> {
        let conn = Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        Ok(SqliteBackend::wrap(conn))
    }

    fn wrap(conn: Connection) -> SqliteBackend {
        SqliteBackend {
            conn,
            unmerged: 0,
            last_merge: Instant::now(),
            durability: Durability::Commit,
            files: None,
            detached: None,
            _checkpointer: None,
            auto_checkpoint: true,
            reads: None,
        }
    }

    /// Turns SQLite's auto-checkpoint after this connection's commits off while reads have
    /// WAL frames piled up behind them, on again once the background checkpointer has copied
    /// them (`checkpoint.rs`).
    fn pace_checkpoints(&mut self) -> Result<(), LedgerError> {
        let on = self
            .reads
            .as_ref()
            .is_none_or(|r| r.pacing().writer_may_checkpoint());
        if on != self.auto_checkpoint {
            let pages = if on { WAL_AUTOCHECKPOINT } else { 0 };
            self.conn.pragma_update(None, "wal_autocheckpoint", pages)?;
            self.auto_checkpoint = on;
        }
        Ok(())
    }

    /// Runs `write` in one transaction (BEGIN/COMMIT as cached statements: a group commit
    /// runs many times a second, and `Connection::transaction` would parse both each time).
    fn in_transaction(
        &mut self,
        write: impl FnOnce(&Connection) -> Result<(), LedgerError>,
    ) -> Result<(), LedgerError> {
        // A transaction an earlier failure left open (its ROLLBACK failed too) is ended first.
        if !self.conn.is_autocommit() {
            self.conn.execute_batch("ROLLBACK")?;
        }
        self.conn.prepare_cached("BEGIN")?.execute([])?;
        let written = write(&self.conn).and_then(|()| {
            self.conn.prepare_cached("COMMIT")?.execute([])?;
            Ok(())
        });
        if written.is_err() && !self.conn.is_autocommit() {
            let _ = self.conn.execute_batch("ROLLBACK");
        }
        written
    }

    /// After a commit, before it is acknowledged: if the database or its WAL at the path is no
    /// longer the file this ledger writes to, moves every row into a new file at the path.
    fn verify_files(&mut self) -> Result<(), LedgerError> {
        let Some(files) = self.files.as_mut() else {
            return Ok(());
        };
        let Some(reason) = files.moved() else {
            return Ok(());
        };
        tracing::error!(
            path = %files.db,
            reason,
            "the ledger's file was deleted or replaced while open; moving its rows into a new file"
        );
        self.detached = Some(Detached {
            step: Step::Copy,
            reason,
            attempts: 0,
            retry_at: Instant::now(),
        });
        self.reattach(true)
    }

    /// While detached: goes on moving the rows (at once when `now`, else at most every
    /// [`RETRY_REHOME`]); an error while they are not at the path yet.
    ///
    /// Why move rather than refuse: the old files are still open, so every row acknowledged
    /// so far can be copied out (`VACUUM INTO`, a consistent snapshot), and refusing alone
    /// would lose those rows at the next restart. Only when that fails (a foreign file at the
    /// path, a full disk) are rows refused, until a later try succeeds.
    fn reattach(&mut self, now: bool) -> Result<(), LedgerError> {
        let Some(mut d) = self.detached.take() else {
            return Ok(());
        };
        let path = self
            .files
            .as_ref()
            .map(|f| f.db.clone())
            .unwrap_or_default();
        if !now && Instant::now() < d.retry_at {
            let reason = d.reason.clone();
            self.detached = Some(d);
            return Err(LedgerError::Detached { path, reason });
        }
        match self.rehome(d.step) {
            Ok(rows) => {
                tracing::warn!(
                    path,
                    rows,
                    "the ledger is back at its path with every committed row"
                );
                Ok(())
            }
            Err((step, e)) => {
                d.attempts += 1;
                // Logged at the first failure and then rarely: rows are refused meanwhile,
                // and each refusal reaches its client.
                if d.attempts.is_power_of_two() {
                    tracing::error!(
                        path,
                        attempts = d.attempts,
                        error = %e,
                        "could not move the ledger's rows into a new file; refusing rows"
                    );
                }
                let reason = match e {
                    LedgerError::Detached { reason, .. } => reason,
                    other => other.to_string(),
                };
                d.step = step;
                d.reason.clone_from(&reason);
                d.retry_at = Instant::now() + RETRY_REHOME;
                self.detached = Some(d);
                Err(LedgerError::Detached { path, reason })
            }
        }
    }

    /// Runs the steps from `step`; the rows now in the file at the path, or the step that
    /// failed and why.
    fn rehome(&mut self, mut step: Step) -> Result<i64, (Step, LedgerError)> {
        loop {
            step = match step {
                Step::Copy => match self.copy_out() {
                    Ok(rescue) => Step::Place(rescue),
                    Err(e) => return Err((Step::Copy, e)),
                },
                Step::Place(rescue) => match self.files.as_ref().map(|f| f.place(&rescue)) {
                    Some(Ok(())) => Step::Reopen,
                    Some(Err(e)) => return Err((Step::Place(rescue), e)),
                    None => return Err((Step::Place(rescue), LedgerError::Closed)),
                },
                Step::Reopen => {
                    let db = self
                        .files
                        .as_ref()
                        .map(|f| f.db.clone())
                        .unwrap_or_default();
                    // The readers keep this ledger's read connections, now the new file's.
                    let fresh =
                        match SqliteBackend::open_with(&db, self.durability, self.reads.clone()) {
                            Ok(b) => b,
                            Err(e) => return Err((Step::Reopen, e)),
                        };
                    let rows = fresh
                        .conn
                        .query_row("SELECT count(*) FROM ledger", [], |r| r.get(0))
                        .unwrap_or(-1);
                    *self = fresh;
                    return Ok(rows);
                }
            }
        }
    }

    /// Copies every committed row out of the open old files into a new file next to the
    /// path, then closes the old files; returns the new file.
    fn copy_out(&mut self) -> Result<PathBuf, LedgerError> {
        let Some(files) = self.files.as_ref() else {
            return Err(LedgerError::Closed);
        };
        files.create_folder()?;
        let rescue = files.rescue_path();
        // The checkpointer's connection goes first, so that the writer's is the last one open
        // on the old files (SQLite checkpoints and cleans up at the last close).
        drop(self._checkpointer.take());
        let copied = self
            .conn
            .execute("VACUUM INTO ?1", [rescue.display().to_string()])
            .map_err(LedgerError::from)
            .and_then(|_| {
                std::fs::File::open(&rescue)
                    .and_then(|f| f.sync_all())
                    .map_err(|e| io(&rescue, e))
            });
        if let Err(e) = copied {
            // A partial copy (a full disk) would pile up at every try.
            let _ = std::fs::remove_file(&rescue);
            return Err(e);
        }
        // The last connection to close deletes the `-wal` and `-shm` *by name*: with someone
        // else's files at those names now, the old connection is left open instead (leaked;
        // a rare, logged event).
        let foreign = files.foreign(&[1, 2]);
        let old = std::mem::replace(&mut self.conn, Connection::open_in_memory()?);
        match foreign {
            Some(reason) => {
                tracing::warn!(reason, "leaving the deleted ledger files open");
                std::mem::forget(old);
            }
            None => {
                if let Err((old, e)) = old.close() {
                    tracing::warn!(error = %e, "closing the deleted ledger files failed");
                    std::mem::forget(old);
                }
            }
        }
        Ok(rescue)
    }

    /// Runs migrations up to `target` (tests use fewer to build an old-schema file).
    pub fn migrate(&mut self, target: usize) -> Result<(), LedgerError> {
        let version: i64 = self
            .conn
            .pragma_query_value(None, "user_version", |r| r.get(0))?;
        if version > MIGRATIONS.len() as i64 {
            return Err(LedgerError::SchemaTooNew {
                found: version,
                known: MIGRATIONS.len() as i64,
            });
        }
        for (i, sql) in MIGRATIONS
            .iter()
            .enumerate()
            .take(target)
            .skip(version.max(0) as usize)
        {
            let tx = self.conn.transaction()?;
            tx.execute_batch(sql)?;
            tx.pragma_update(None, "user_version", (i + 1) as i64)?;
            tx.commit()?;
            tracing::info!(version = i + 1, "provenance schema migrated");
        }
        Ok(())
    }

    /// The schema version of the open file.
    pub fn schema_version(&self) -> Result<i64, LedgerError> {
        Ok(self
            .conn
            .pragma_query_value(None, "user_version", |r| r.get(0))?)
    }

    /// The raw connection (tests).
    pub fn connection(&self) -> &Connection {
        &self.conn
    }
}

/// The schema whose rows have an `ingress` column.
pub(super) const INGRESS_SCHEMA: i64 = 8;
/// The schema whose rows have a `trace_id` column.
pub(super) const TRACE_SCHEMA: i64 = 9;
/// The schema whose rows have the token counts' columns.
pub(super) const USAGE_SCHEMA: i64 = 11;

/// The ledger's `INSERT` with the first 32 columns and then `$columns`, bound to `$marks`
/// (built once at compile time, not per batch).
macro_rules! insert_sql {
    ($columns:literal, $marks:literal) => {
        concat!(
            "INSERT INTO ledger (task_id, session_id, upstream_session_id, tenant, skill, policy,
            delegate, delegate_id, model_version, outcome, error_code, error_message, score,
            candidates, attempts, fallbacks, payload_mode, latency_ms, upstream_ms, cost_usd,
            tokens, confidence, verification_status, started_at, finished_at, finished_ms,
            output_sha256, lineage, reported_cost_usd, declared_cost_usd, routing, payload",
            $columns,
            ")
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17,
            ?18, ?19, ?20, ?21, ?22, ?23, ?24, ?25, ?26, ?27, ?28, ?29, ?30, ?31, ?32",
            $marks,
            ")"
        )
    };
}
/// The insert of a file before [`INGRESS_SCHEMA`].
const INSERT_32: &str = insert_sql!("", "");
/// The insert of a file before [`TRACE_SCHEMA`].
const INSERT_33: &str = insert_sql!(", ingress", ", ?33");
/// The insert of a file before [`USAGE_SCHEMA`].
const INSERT_34: &str = insert_sql!(", ingress, trace_id", ", ?33, ?34");
/// The insert of a file at [`USAGE_SCHEMA`] or later.
const INSERT_38: &str = insert_sql!(
    ", ingress, trace_id, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens",
    ", ?33, ?34, ?35, ?36, ?37, ?38"
);

/// Inserts `rows` with the cached statement, inside the caller's transaction. A file still at
/// an older schema (opened without migrating, as the migration tests build them) gets its
/// rows without the columns it lacks (`ingress`, `trace_id`): the caller reads the schema before
/// its transaction, whose first statement must be a write (a read first would make it a
/// read transaction, which SQLite refuses to upgrade at once, not waiting, while another
/// connection writes).
fn insert_rows(conn: &Connection, rows: &[LedgerRow], schema: i64) -> Result<(), LedgerError> {
    // The columns this file has: the first 32 always, then `ingress`, then `trace_id`, then
    // the token counts.
    let (n, sql) = match schema {
        s if s >= USAGE_SCHEMA => (38, INSERT_38),
        s if s >= TRACE_SCHEMA => (34, INSERT_34),
        s if s >= INGRESS_SCHEMA => (33, INSERT_33),
        _ => (32, INSERT_32),
    };
    let mut stmt = conn.prepare_cached(sql)?;
    // SQLite integers are i64: a larger count is stored as the largest, never wrapped.
    let count = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    for r in rows {
        let u = r.usage;
        let fallbacks = serde_json::to_string(&r.fallbacks).unwrap_or_else(|_| "[]".into());
        let values = params![
            r.task_id,
            r.session_id,
            r.upstream_session_id,
            r.tenant,
            r.skill,
            r.policy,
            r.delegate,
            r.delegate_id,
            r.model_version,
            r.outcome.as_str(),
            r.error_code,
            r.error_message,
            r.score,
            r.candidates,
            r.attempts,
            fallbacks,
            r.payload_mode,
            r.latency_ms,
            r.upstream_ms,
            r.cost_usd,
            // SQLite integers are i64: a larger count is stored as the largest, never wrapped.
            r.tokens.map(|t| i64::try_from(t).unwrap_or(i64::MAX)),
            r.confidence,
            r.verification_status,
            r.started_at,
            r.finished_at,
            r.finished_ms,
            r.output_sha256,
            r.lineage.get(),
            r.reported_cost_usd,
            r.declared_cost_usd,
            r.routing.get(),
            r.payload.as_ref().map(JsonText::get),
            r.ingress.as_str(),
            r.trace_id,
            u.map(|u| count(u.input)),
            u.map(|u| count(u.output)),
            u.map(|u| count(u.cache_read)),
            u.map(|u| count(u.cache_write)),
        ];
        stmt.execute(&values[..n])?;
    }
    Ok(())
}

/// Inserts the votes of `rows`, inside the caller's transaction (each row's `finished_ms` is
/// its votes' `created_ms`).
fn insert_votes(conn: &Connection, rows: &[LedgerRow]) -> Result<(), LedgerError> {
    let mut stmt = conn.prepare_cached(
        "INSERT INTO votes (task_id, tenant, round, producer, skill, verifier, passed,
            confidence, weight, created_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
    )?;
    for r in rows {
        for v in &r.votes {
            stmt.execute(params![
                r.task_id,
                r.tenant,
                v.round,
                v.producer,
                v.skill,
                v.verifier,
                v.passed,
                v.confidence,
                v.weight,
                r.finished_ms,
            ])?;
        }
    }
    Ok(())
}

/// Adds the rows after `indexed_to` to the session index, in key order, and moves the mark.
fn merge_session_index(conn: &Connection) -> Result<(), LedgerError> {
    conn.prepare_cached(
        "INSERT INTO ledger_session_index
            SELECT session_id, id FROM ledger
            WHERE id > (SELECT indexed_to FROM ledger_index_state)
            ORDER BY session_id, id",
    )?
    .execute([])?;
    conn.prepare_cached(
        "UPDATE ledger_index_state
            SET indexed_to = COALESCE((SELECT max(id) FROM ledger), indexed_to)",
    )?
    .execute([])?;
    Ok(())
}

/// Records that the store holds journal `mark.0`'s rows up to `mark.1`, inside the caller's
/// transaction.
fn set_mark(conn: &Connection, (journal, seq): (&str, u64)) -> Result<(), LedgerError> {
    conn.prepare_cached(
        "INSERT INTO ledger_journal (journal_id, stored_to) VALUES (?1, ?2)
         ON CONFLICT (journal_id) DO UPDATE SET stored_to = max(stored_to, excluded.stored_to)",
    )?
    .execute(params![journal, i64::try_from(seq).unwrap_or(i64::MAX)])?;
    Ok(())
}

impl SqliteBackend {
    /// The rows (and their votes) in one transaction, with the journal's mark when given.
    fn insert_with(
        &mut self,
        rows: &[LedgerRow],
        mark: Option<(&str, u64)>,
    ) -> Result<(), LedgerError> {
        self.reattach(false)?;
        self.unmerged += rows.len() as u64;
        let merge = self.unmerged >= MERGE_ROWS || self.last_merge.elapsed() >= MERGE_EVERY;
        self.pace_checkpoints()?;
        // Most batches have no votes: then no vote statement runs at all.
        let votes = any_votes(rows);
        let schema = read::schema(&self.conn)?;
        self.in_transaction(|conn| {
            insert_rows(conn, rows, schema)?;
            if votes {
                insert_votes(conn, rows)?;
            }
            if merge {
                merge_session_index(conn)?;
            }
            if let Some(mark) = mark {
                set_mark(conn, mark)?;
            }
            Ok(())
        })?;
        if merge {
            self.unmerged = 0;
            self.last_merge = Instant::now();
        }
        self.verify_files()
    }
}

impl Backend for SqliteBackend {
    fn insert(&mut self, rows: &[LedgerRow]) -> Result<(), LedgerError> {
        self.insert_with(rows, None)
    }

    fn insert_marked(&mut self, rows: &[LedgerRow], mark: (&str, u64)) -> Result<(), LedgerError> {
        self.insert_with(rows, Some(mark))
    }

    fn forget_journal(&mut self, journal: &str) -> Result<(), LedgerError> {
        self.reattach(false)?;
        self.in_transaction(|conn| {
            conn.execute(
                "DELETE FROM ledger_journal WHERE journal_id = ?1",
                [journal],
            )?;
            Ok(())
        })?;
        self.verify_files()
    }

    fn journal_mark(&mut self, journal: &str) -> Result<u64, LedgerError> {
        self.reattach(false)?;
        let seq: Option<i64> = self
            .conn
            .query_row(
                "SELECT stored_to FROM ledger_journal WHERE journal_id = ?1",
                [journal],
                |r| r.get(0),
            )
            .optional()?;
        Ok(seq.map_or(0, |s| u64::try_from(s).unwrap_or(0)))
    }

    /// Counts one more commit in the one-row probe table, in a transaction that must commit:
    /// a WAL append and a commit like a batch's, so it fails when batches would (full disk,
    /// read-only file), and it notices deleted files when no rows are coming.
    fn probe(&mut self) -> Result<(), LedgerError> {
        self.reattach(false)?;
        self.pace_checkpoints()?;
        self.in_transaction(|conn| {
            conn.prepare_cached("UPDATE ledger_probe SET commits = commits + 1")?
                .execute([])?;
            Ok(())
        })?;
        self.verify_files()
    }

    /// Rows acknowledged into files deleted since the last commit are moved now, before the
    /// files are closed for good.
    fn finish(&mut self) -> Result<(), LedgerError> {
        if self.detached.is_some() {
            return self.reattach(true);
        }
        self.verify_files()
    }

    fn query(&mut self, q: &Query) -> Result<Vec<LedgerRow>, LedgerError> {
        self.reattach(false)?;
        read::select(&self.conn, q)
    }

    fn spend_since(&mut self, since_ms: i64) -> Result<Vec<(String, f64)>, LedgerError> {
        self.reattach(false)?;
        read::spend(&self.conn, since_ms)
    }

    fn spend_breakdown(&mut self, since_ms: i64) -> Result<Vec<super::SpendRow>, LedgerError> {
        self.reattach(false)?;
        read::spend_breakdown(&self.conn, since_ms)
    }

    fn task_of(&mut self, tenant: &str, task_id: &str) -> Result<Option<RatedTask>, LedgerError> {
        self.reattach(false)?;
        read::task_of(&self.conn, tenant, task_id)
    }

    fn feedback(&mut self, task_id: &str) -> Result<Vec<Feedback>, LedgerError> {
        self.reattach(false)?;
        read::feedback(&self.conn, task_id)
    }

    fn evidence(&mut self, since_ms: i64, limit: u32) -> Result<Vec<Evidence>, LedgerError> {
        self.reattach(false)?;
        read::evidence(&self.conn, since_ms, limit)
    }

    /// One small transaction of its own, checked for moved files like a batch.
    fn rate(&mut self, fb: &Feedback) -> Result<bool, LedgerError> {
        self.reattach(false)?;
        self.pace_checkpoints()?;
        let mut stored = false;
        self.in_transaction(|conn| {
            let n = conn
                .prepare_cached(
                    "INSERT INTO feedback (task_id, tenant, score, outcome, delegate, skill,
                        created_at, created_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
                     ON CONFLICT (task_id, tenant) DO NOTHING",
                )?
                .execute(params![
                    fb.task_id,
                    fb.tenant,
                    fb.score,
                    fb.outcome.as_str(),
                    fb.delegate,
                    fb.skill,
                    fb.created_at,
                    fb.created_ms,
                ])?;
            stored = n == 1;
            Ok(())
        })?;
        self.verify_files()?;
        Ok(stored)
    }

    fn prune(&mut self, before_ms: i64) -> Result<u64, LedgerError> {
        self.reattach(false)?;
        let tx = self.conn.transaction()?;
        tx.execute(
            "DELETE FROM ledger_session_index WHERE (session_id, row_id) IN
                (SELECT session_id, id FROM ledger WHERE finished_ms < ?1)",
            params![before_ms],
        )?;
        let n = tx.execute(
            "DELETE FROM ledger WHERE finished_ms < ?1",
            params![before_ms],
        )?;
        tx.execute(
            "DELETE FROM feedback WHERE created_ms < ?1",
            params![before_ms],
        )?;
        tx.execute(
            "DELETE FROM votes WHERE created_ms < ?1",
            params![before_ms],
        )?;
        tx.commit()?;
        Ok(n as u64)
    }

    /// Oldest first, through the time index: a batch reads only the rows it deletes.
    fn prune_batch(&mut self, before_ms: i64, limit: u64) -> Result<u64, LedgerError> {
        self.reattach(false)?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let mut n = 0;
        self.pace_checkpoints()?;
        self.in_transaction(|conn| {
            conn.prepare_cached(
                "DELETE FROM ledger_session_index WHERE (session_id, row_id) IN
                    (SELECT session_id, id FROM ledger WHERE finished_ms < ?1
                     ORDER BY finished_ms, id LIMIT ?2)",
            )?
            .execute(params![before_ms, limit])?;
            // Votes go with their rows: those cast up to the newest row this batch deletes
            // (so a batch deletes the votes of at most `limit` rows, however many each has;
            // once no row is left before the cut-off, any vote before it).
            conn.prepare_cached(
                "DELETE FROM votes WHERE created_ms < ?1 AND created_ms <= COALESCE(
                    (SELECT max(finished_ms) FROM (SELECT finished_ms FROM ledger
                        WHERE finished_ms < ?1 ORDER BY finished_ms, id LIMIT ?2)), ?1)",
            )?
            .execute(params![before_ms, limit])?;
            n = conn
                .prepare_cached(
                    "DELETE FROM ledger WHERE id IN
                        (SELECT id FROM ledger WHERE finished_ms < ?1
                         ORDER BY finished_ms, id LIMIT ?2)",
                )?
                .execute(params![before_ms, limit])?;
            // Ratings age with the rows they rate (they come after them); what a batch
            // leaves goes with the next one.
            conn.prepare_cached(
                "DELETE FROM feedback WHERE (task_id, tenant) IN
                    (SELECT task_id, tenant FROM feedback WHERE created_ms < ?1
                     ORDER BY created_ms LIMIT ?2)",
            )?
            .execute(params![before_ms, limit])?;
            Ok(())
        })?;
        Ok(n as u64)
    }

    fn reader(&self) -> Option<Arc<dyn Reader>> {
        self.reads.clone().map(|r| r as Arc<dyn Reader>)
    }
}

#[cfg(test)]
pub(super) mod tests;
