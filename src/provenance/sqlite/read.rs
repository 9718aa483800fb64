//! Reads of a SQLite ledger: the row query (with a task's votes), the spend sum, ratings and
//! quality evidence, on the writer's connection (an
//! in-memory ledger) or on read connections of their own ([`ReadConns`]).
//!
//! Why the writer opens the read connections (at open, and again each time it moved its rows
//! into a new file): a read-only connection opened while the files are deleted creates a new
//! `-wal` at the path, which the rescue (`files.rs`) must then take for someone else's file.
//! Opened by the writer at a moment it knows the files are its own, and used once at once
//! (which opens the `-wal` and `-shm`), a read connection keeps those files for its life.

use super::super::evidence::{self, merge};
use super::super::readers::{Cancel, READERS, READ_DEADLINE};
use super::super::{
    Evidence, Feedback, Given, Ingress, JsonText, LedgerError, LedgerRow, Outcome, Query,
    RatedTask, Reader, Vote, FEEDBACK_PER_TASK,
};
use super::checkpoint::Pacing;
use rusqlite::{params, Connection, OpenFlags};
use std::sync::{Arc, Mutex, PoisonError};

/// Rows matching `q`, newest first; by task id, with their votes.
pub(super) fn select(conn: &Connection, q: &Query) -> Result<Vec<LedgerRow>, LedgerError> {
    let mut sql = String::from(
        "SELECT task_id, session_id, upstream_session_id, tenant, skill, policy, delegate,
            delegate_id, model_version, outcome, error_code, error_message, score, candidates,
            attempts, fallbacks, payload_mode, latency_ms, upstream_ms, cost_usd, tokens,
            confidence, verification_status, started_at, finished_at, finished_ms,
            output_sha256, lineage, reported_cost_usd, declared_cost_usd, routing, payload, ",
    );
    // A file at an older schema (read without migrating) has only LDP rows.
    let at = schema(conn)?;
    let has_ingress = at >= super::INGRESS_SCHEMA;
    let has_trace = at >= super::TRACE_SCHEMA;
    sql.push_str(if has_ingress { "ingress, " } else { "'ldp', " });
    sql.push_str(if has_trace { "trace_id, " } else { "NULL, " });
    sql.push_str(if at >= super::USAGE_SCHEMA {
        "input_tokens, output_tokens, cache_read_tokens, cache_write_tokens FROM ledger WHERE 1 = 1"
    } else {
        "NULL, NULL, NULL, NULL FROM ledger WHERE 1 = 1"
    });
    let mut args: Vec<rusqlite::types::Value> = Vec::new();
    let text = |s: &str| rusqlite::types::Value::Text(s.to_owned());
    if let Some(session) = q
        .session_id
        .as_ref()
        .filter(|_| schema(conn).unwrap_or(0) >= 3)
    {
        // The merged index, plus the rows not merged yet.
        args.push(text(session));
        sql.push_str(&format!(
            " AND id IN (SELECT row_id FROM ledger_session_index WHERE session_id = ?{n}
                UNION ALL SELECT id FROM ledger
                WHERE id > (SELECT indexed_to FROM ledger_index_state))",
            n = args.len()
        ));
    }
    for (col, v) in q.text_filters() {
        let col = match col {
            "ingress" if !has_ingress => "'ldp'",
            "trace_id" if !has_trace => "NULL",
            col => col,
        };
        args.push(text(v));
        sql.push_str(&format!(" AND {col} = ?{}", args.len()));
    }
    if let Some(since) = q.since_ms {
        args.push(rusqlite::types::Value::Integer(since));
        sql.push_str(&format!(" AND finished_ms >= ?{}", args.len()));
    }
    sql.push_str(&format!(
        " ORDER BY finished_ms DESC, id DESC LIMIT {} OFFSET {}",
        q.page(),
        q.offset.unwrap_or(0)
    ));
    let mut stmt = conn.prepare(&sql)?;
    let rows = stmt.query_map(rusqlite::params_from_iter(args), |r| {
        let outcome: String = r.get(9)?;
        let fallbacks: String = r.get(15)?;
        let lineage: String = r.get(27)?;
        let routing: String = r.get(30)?;
        let payload: Option<String> = r.get(31)?;
        let tokens: Option<i64> = r.get(20)?;
        let ingress: String = r.get(32)?;
        let trace_id: Option<String> = r.get(33)?;
        let counts: [Option<i64>; 4] = [r.get(34)?, r.get(35)?, r.get(36)?, r.get(37)?];
        Ok((
            LedgerRow {
                trace_id,
                usage: super::super::TokenCounts::read(counts),
                task_id: r.get(0)?,
                ingress: Ingress::from_stored(&ingress),
                session_id: r.get(1)?,
                upstream_session_id: r.get(2)?,
                tenant: r.get(3)?,
                skill: r.get(4)?,
                policy: r.get(5)?,
                delegate: r.get(6)?,
                delegate_id: r.get(7)?,
                model_version: r.get(8)?,
                outcome: if outcome == "result" {
                    Outcome::Result
                } else {
                    Outcome::Failed
                },
                error_code: r.get(10)?,
                error_message: r.get(11)?,
                score: r.get(12)?,
                candidates: r.get(13)?,
                attempts: r.get(14)?,
                fallbacks: Vec::new(),
                payload_mode: r.get(16)?,
                latency_ms: r.get(17)?,
                upstream_ms: r.get(18)?,
                cost_usd: r.get(19)?,
                reported_cost_usd: r.get(28)?,
                declared_cost_usd: r.get(29)?,
                tokens: tokens.map(|t| t.max(0) as u64),
                confidence: r.get(21)?,
                verification_status: r.get(22)?,
                started_at: r.get(23)?,
                finished_at: r.get(24)?,
                finished_ms: r.get(25)?,
                output_sha256: r.get(26)?,
                lineage: JsonText::default(),
                routing: JsonText::default(),
                payload: None,
                votes: Vec::new(),
            },
            fallbacks,
            lineage,
            routing,
            payload,
        ))
    })?;
    let mut out = Vec::new();
    for row in rows {
        let (mut r, fallbacks, lineage, routing, payload) = row?;
        r.fallbacks =
            serde_json::from_str(&fallbacks).map_err(|e| LedgerError::Corrupt(e.to_string()))?;
        r.lineage = JsonText::parse(&lineage).map_err(|e| LedgerError::Corrupt(e.to_string()))?;
        r.routing = JsonText::parse(&routing).map_err(|e| LedgerError::Corrupt(e.to_string()))?;
        r.payload = payload
            .map(|p| JsonText::parse(&p))
            .transpose()
            .map_err(|e| LedgerError::Corrupt(e.to_string()))?;
        out.push(r);
    }
    // A task's rows are few: their votes are looked up one row at a time, through the
    // votes' time index (a vote's time is its row's).
    if q.task_id.is_some() && schema(conn)? >= 6 {
        read_votes(conn, &mut out)?;
    }
    Ok(out)
}

/// Fills each row's votes, in the order they were written.
fn read_votes(conn: &Connection, rows: &mut [LedgerRow]) -> Result<(), LedgerError> {
    let mut stmt = conn.prepare_cached(
        "SELECT round, producer, skill, verifier, passed, confidence, weight FROM votes
         WHERE created_ms = ?1 AND task_id = ?2 AND tenant = ?3 ORDER BY id",
    )?;
    for row in rows {
        let votes = stmt.query_map(params![row.finished_ms, row.task_id, row.tenant], |r| {
            Ok(Vote {
                round: r.get(0)?,
                producer: r.get(1)?,
                skill: r.get(2)?,
                verifier: r.get(3)?,
                passed: r.get(4)?,
                confidence: r.get(5)?,
                weight: r.get(6)?,
            })
        })?;
        row.votes = votes.collect::<Result<_, _>>()?;
    }
    Ok(())
}

/// Total `cost_usd` per tenant of rows finished at or after `since_ms`.
pub(super) fn spend(conn: &Connection, since_ms: i64) -> Result<Vec<(String, f64)>, LedgerError> {
    let mut stmt = conn.prepare(
        "SELECT tenant, COALESCE(SUM(cost_usd), 0) FROM ledger WHERE finished_ms >= ?1 GROUP BY tenant",
    )?;
    let rows = stmt.query_map(params![since_ms], |r| {
        Ok((r.get::<_, String>(0)?, r.get::<_, f64>(1)?))
    })?;
    Ok(rows.collect::<Result<Vec<_>, _>>()?)
}

/// Tasks and cost per (tenant, policy, delegate) of rows finished at or after `since_ms`
/// (through the time index).
pub(super) fn spend_breakdown(
    conn: &Connection,
    since_ms: i64,
) -> Result<Vec<crate::provenance::SpendRow>, LedgerError> {
    let mut stmt = conn.prepare(
        "SELECT tenant, policy, delegate, COUNT(*), COALESCE(SUM(cost_usd), 0) FROM ledger
         WHERE finished_ms >= ?1 GROUP BY tenant, policy, delegate",
    )?;
    let rows = stmt.query_map(params![since_ms], |r| {
        Ok(crate::provenance::SpendRow {
            tenant: r.get(0)?,
            policy: r.get(1)?,
            delegate: r.get(2)?,
            tasks: r.get::<_, i64>(3)?.max(0) as u64,
            cost_usd: r.get(4)?,
        })
    })?;
    Ok(rows.collect::<Result<Vec<_>, _>>()?)
}

/// [`task_of`]'s statement.
pub(super) const TASK_OF: &str =
    "SELECT delegate, skill FROM ledger WHERE tenant = ?1 AND task_id = ?2
     ORDER BY finished_ms DESC, id DESC LIMIT 1";

/// The newest row of `tenant`'s task `task_id`: through the (tenant, task id, time) index,
/// so an unknown task id costs one index probe, however many rows the tenant has.
pub(super) fn task_of(
    conn: &Connection,
    tenant: &str,
    task_id: &str,
) -> Result<Option<RatedTask>, LedgerError> {
    use rusqlite::OptionalExtension;
    Ok(conn
        .prepare_cached(TASK_OF)?
        .query_row(params![tenant, task_id], |r| {
            Ok(RatedTask {
                delegate: r.get(0)?,
                skill: r.get(1)?,
            })
        })
        .optional()?)
}

/// The ratings of task id `task_id` (any tenant), through the primary key.
pub(super) fn feedback(conn: &Connection, task_id: &str) -> Result<Vec<Feedback>, LedgerError> {
    let mut stmt = conn.prepare_cached(
        "SELECT task_id, tenant, score, outcome, delegate, skill, created_at, created_ms
         FROM feedback WHERE task_id = ?1 ORDER BY tenant LIMIT ?2",
    )?;
    let rows = stmt.query_map(params![task_id, FEEDBACK_PER_TASK], |r| {
        Ok(Feedback {
            task_id: r.get(0)?,
            tenant: r.get(1)?,
            score: r.get(2)?,
            outcome: Given::parse(&r.get::<_, String>(3)?),
            delegate: r.get(4)?,
            skill: r.get(5)?,
            created_at: r.get(6)?,
            created_ms: r.get(7)?,
        })
    })?;
    Ok(rows.collect::<Result<Vec<_>, _>>()?)
}

/// Quality evidence since `since_ms`: the newest `limit` votes, ratings naming a delegate and
/// calibration rounds, each through its table's time index, merged oldest first.
pub(super) fn evidence(
    conn: &Connection,
    since_ms: i64,
    limit: u32,
) -> Result<Vec<Evidence>, LedgerError> {
    let version = schema(conn)?;
    let mut votes = Vec::new();
    if version >= 6 {
        let mut stmt = conn.prepare_cached(
            // The window runs over the newest `limit` votes only (found through the time
            // index), not over every vote since `since_ms`: a round cut by the limit weighs
            // its remaining votes a little more, once.
            "SELECT producer, skill, passed,
                    weight / SUM(weight) OVER (PARTITION BY task_id, tenant, round, created_ms),
                    created_ms
             FROM (SELECT id, task_id, tenant, round, producer, skill, passed, weight, created_ms
                   FROM votes WHERE created_ms >= ?1
                   ORDER BY created_ms DESC, id DESC LIMIT ?2) AS recent
             ORDER BY created_ms DESC, id DESC",
        )?;
        let rows = stmt.query_map(params![since_ms, limit], |r| {
            Ok(evidence::of_vote(
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
            ))
        })?;
        votes = rows.collect::<Result<_, _>>()?;
    }
    let mut ratings = Vec::new();
    if version >= 5 {
        let mut stmt = conn.prepare_cached(
            "SELECT delegate, skill, score, created_ms, tenant FROM feedback
             WHERE created_ms >= ?1 AND delegate IS NOT NULL
             ORDER BY created_ms DESC, task_id DESC, tenant DESC LIMIT ?2",
        )?;
        let rows = stmt.query_map(params![since_ms, limit], |r| {
            Ok(evidence::of_rating(
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
            ))
        })?;
        ratings = rows.collect::<Result<_, _>>()?;
    }
    // Tenant-less rows through the (tenant, time) index; the task id and the routing column
    // (from version 2) say which are calibration rounds and what each taught.
    let mut rounds = Vec::new();
    if version >= 2 {
        let mut stmt = conn.prepare_cached(
            "SELECT delegate, skill, routing, finished_ms FROM ledger
             WHERE tenant = '' AND finished_ms >= ?1 AND task_id LIKE ?3
                   AND delegate IS NOT NULL
             ORDER BY finished_ms DESC, id DESC LIMIT ?2",
        )?;
        let rows = stmt.query_map(
            params![since_ms, limit, evidence::CALIBRATION_TASK_LIKE],
            |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, i64>(3)?,
                ))
            },
        )?;
        for row in rows {
            let (delegate, skill, routing, at_ms) = row?;
            rounds.extend(evidence::of_calibration(delegate, skill, &routing, at_ms));
        }
    }
    Ok(merge(votes, ratings, rounds))
}

/// The file's schema version: a read-only open of an older file (not migrated) lacks the
/// later tables (the session index from 3, feedback from 5, votes from 6).
pub(super) fn schema(conn: &Connection) -> Result<i64, LedgerError> {
    Ok(conn.pragma_query_value(None, "user_version", |r| r.get(0))?)
}

/// The read connections of one SQLite ledger, shared by its writer (which opens them) and its
/// readers.
#[derive(Default)]
pub(super) struct ReadConns {
    pool: Mutex<Pool>,
    pacing: Arc<Pacing>,
}

#[derive(Default)]
struct Pool {
    /// Which set of connections is current: one more each time the writer opened its file.
    generation: u64,
    idle: Vec<Connection>,
    closed: bool,
}

impl ReadConns {
    /// [`READERS`] read-only connections to `path`, each used once (see the module comment).
    pub(super) fn connect(path: &str) -> Result<Vec<Connection>, LedgerError> {
        (0..READERS)
            .map(|_| {
                let conn = Connection::open_with_flags(
                    path,
                    OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
                )?;
                // Reads in WAL mode wait for no writer; only recovery after a crash blocks them.
                conn.busy_timeout(std::time::Duration::from_secs(5))?;
                conn.query_row("SELECT count(*) FROM sqlite_master", [], |r| {
                    r.get::<_, i64>(0)
                })?;
                Ok(conn)
            })
            .collect()
    }

    /// Who may checkpoint, as reads come and go.
    pub(super) fn pacing(&self) -> Arc<Pacing> {
        self.pacing.clone()
    }

    fn pool(&self) -> std::sync::MutexGuard<'_, Pool> {
        self.pool.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Makes `conns` (the writer just opened its file) the current set: the old set still
    /// reads the old files, and is closed as its reads end.
    pub(super) fn adopt(&self, conns: Vec<Connection>) {
        let old = {
            let mut p = self.pool();
            p.generation += 1;
            std::mem::replace(&mut p.idle, conns)
        };
        drop(old);
    }

    /// Runs `read` on a current connection, interrupted when `cancel` fires.
    fn with<T>(
        &self,
        cancel: &Cancel,
        read: impl FnOnce(&Connection) -> Result<T, LedgerError>,
    ) -> Result<T, LedgerError> {
        let (generation, conn) = {
            let mut p = self.pool();
            if p.closed {
                return Err(LedgerError::Closed);
            }
            // At most `READERS` reads run at once and each set has `READERS` connections.
            match p.idle.pop() {
                Some(conn) => (p.generation, conn),
                None => return Err(LedgerError::Closed),
            }
        };
        let interrupt = conn.get_interrupt_handle();
        let out = if cancel.on_cancel(move || interrupt.interrupt()) {
            let reading = self.pacing.reading();
            let out = read(&conn);
            drop(reading);
            cancel.clear();
            out
        } else {
            Err(LedgerError::ReadTimeout(READ_DEADLINE))
        };
        let mut p = self.pool();
        if !p.closed && p.generation == generation {
            p.idle.push(conn);
        }
        out
    }
}

impl Reader for ReadConns {
    fn query(&self, q: &Query, cancel: &Cancel) -> Result<Vec<LedgerRow>, LedgerError> {
        self.with(cancel, |conn| select(conn, q))
    }

    fn spend_since(
        &self,
        since_ms: i64,
        cancel: &Cancel,
    ) -> Result<Vec<(String, f64)>, LedgerError> {
        self.with(cancel, |conn| spend(conn, since_ms))
    }
    fn spend_breakdown(
        &self,
        since_ms: i64,
        cancel: &Cancel,
    ) -> Result<Vec<crate::provenance::SpendRow>, LedgerError> {
        self.with(cancel, |conn| spend_breakdown(conn, since_ms))
    }

    fn task_of(
        &self,
        tenant: &str,
        task_id: &str,
        cancel: &Cancel,
    ) -> Result<Option<RatedTask>, LedgerError> {
        self.with(cancel, |conn| task_of(conn, tenant, task_id))
    }

    fn feedback(&self, task_id: &str, cancel: &Cancel) -> Result<Vec<Feedback>, LedgerError> {
        self.with(cancel, |conn| feedback(conn, task_id))
    }

    fn evidence(
        &self,
        since_ms: i64,
        limit: u32,
        cancel: &Cancel,
    ) -> Result<Vec<Evidence>, LedgerError> {
        self.with(cancel, |conn| evidence(conn, since_ms, limit))
    }

    fn close(&self) {
        let idle = {
            let mut p = self.pool();
            p.closed = true;
            std::mem::take(&mut p.idle)
        };
        drop(idle);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests fail loudly")]

    use super::super::tests::row;
    use super::super::SqliteBackend;
    use super::*;
    use crate::provenance::{Backend, Durability};
    use std::sync::atomic::{AtomicBool, Ordering};

    /// A ledger dropped on its own (no writer to close its readers first) leaves a clean
    /// file: its read connections close before its writing ones.
    #[test]
    fn a_closed_ledger_leaves_no_wal_behind() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.db").display().to_string();
        let mut b = SqliteBackend::open(&path, Durability::Commit).unwrap();
        b.insert(&[row("t1", "s", 1)]).unwrap();
        let reads = b.reads.clone().unwrap();
        assert_eq!(
            reads
                .query(&Query::default(), &Cancel::default())
                .unwrap()
                .len(),
            1
        );
        drop(reads);
        drop(b);
        for suffix in ["-wal", "-shm"] {
            let f = format!("{path}{suffix}");
            assert!(!std::path::Path::new(&f).exists(), "{f} left behind");
        }
    }

    /// A read whose deadline passed is interrupted inside SQLite, and its connection then
    /// serves the next read.
    #[test]
    fn a_cancelled_read_stops_and_its_connection_serves_the_next() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.db").display().to_string();
        let mut b = SqliteBackend::open(&path, Durability::Commit).unwrap();
        b.insert(&[row("t1", "s", 1)]).unwrap();
        let reads = b.reads.clone().unwrap();
        let cancel = Cancel::default();
        let done = AtomicBool::new(false);
        let endless = std::thread::scope(|s| {
            s.spawn(|| {
                // Fires once the read is registered, until it ends (an interrupt that lands
                // before the statement starts does nothing).
                while !done.load(Ordering::SeqCst) {
                    if cancel.armed() {
                        cancel.fire();
                    }
                    std::thread::yield_now();
                }
            });
            let endless = reads.with(&cancel, |conn| {
                Ok(conn.query_row(
                    "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n)
                     SELECT count(*) FROM n",
                    [],
                    |r| r.get::<_, i64>(0),
                )?)
            });
            done.store(true, Ordering::SeqCst);
            endless
        });
        match endless {
            Err(LedgerError::Sqlite(e)) => assert!(e.to_string().contains("interrupt"), "{e}"),
            other => panic!("expected an interrupted read, got {other:?}"),
        }
        for _ in 0..READERS {
            let rows = reads.query(&Query::default(), &Cancel::default()).unwrap();
            assert_eq!(rows.len(), 1);
        }
        reads.close();
        assert!(matches!(
            reads.spend_since(0, &Cancel::default()),
            Err(LedgerError::Closed)
        ));
    }
}
