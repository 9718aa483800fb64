//! The Postgres backend (cluster mode: every replica writes to one ledger). Same rows, same
//! queries and the same writer as SQLite; a group of rows is one `INSERT … SELECT FROM
//! UNNEST(…)` (one round trip per commit, whatever its size), and a group with votes one
//! statement inserting both (the rows in a `WITH`), so its votes commit with its rows.
//!
//! Durability maps onto `synchronous_commit`: `commit` and `async` use `off` (a committed row
//! survives any crash of the gateway; the database host losing power may lose its last
//! fraction of a second, as SQLite's `NORMAL`), `fsync` uses `on`.

use super::evidence::{self, any_votes, merge};
use super::readers::Cancel;
use super::TokenCounts;
use super::{
    Backend, Durability, Evidence, Feedback, Given, Ingress, JsonText, LedgerError, LedgerRow,
    Outcome, Query, RatedTask, Reader, Vote, FEEDBACK_PER_TASK,
};
use postgres::types::ToSql;
use postgres::{Client, NoTls};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// Schema migrations; `ldp_ledger_schema.version` records how many ran. Append only.
const MIGRATIONS: [&str; 8] = [
    "CREATE TABLE ledger (
        id BIGSERIAL PRIMARY KEY,
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
        score DOUBLE PRECISION,
        candidates BIGINT,
        attempts BIGINT NOT NULL,
        fallbacks TEXT NOT NULL,
        payload_mode TEXT,
        latency_ms DOUBLE PRECISION NOT NULL,
        upstream_ms DOUBLE PRECISION NOT NULL,
        cost_usd DOUBLE PRECISION,
        reported_cost_usd DOUBLE PRECISION,
        declared_cost_usd DOUBLE PRECISION,
        tokens BIGINT,
        confidence DOUBLE PRECISION,
        verification_status TEXT,
        started_at TEXT NOT NULL,
        finished_at TEXT NOT NULL,
        finished_ms BIGINT NOT NULL,
        output_sha256 TEXT,
        lineage TEXT NOT NULL,
        routing TEXT NOT NULL,
        payload TEXT
    );
    CREATE INDEX ledger_session ON ledger (session_id, id);
    CREATE INDEX ledger_task ON ledger (task_id);
    CREATE INDEX ledger_delegate_time ON ledger (delegate, finished_ms);
    CREATE INDEX ledger_tenant_time ON ledger (tenant, finished_ms);
    CREATE INDEX ledger_time ON ledger (finished_ms);",
    // 2: client feedback, one rating per (task id, tenant) (`feedback.rs` says why a table).
    "CREATE TABLE IF NOT EXISTS feedback (
        task_id TEXT NOT NULL,
        tenant TEXT NOT NULL,
        score DOUBLE PRECISION NOT NULL,
        outcome TEXT NOT NULL,
        delegate TEXT,
        skill TEXT NOT NULL,
        created_at TEXT NOT NULL,
        created_ms BIGINT NOT NULL,
        PRIMARY KEY (task_id, tenant)
    );
    CREATE INDEX IF NOT EXISTS feedback_time ON feedback (created_ms);",
    // 3: verifiers' votes, written with their task's row (`evidence.rs` says why a table).
    // `created_ms` is the row's `finished_ms`; `id` keeps the order they were written in.
    "CREATE TABLE IF NOT EXISTS votes (
        id BIGSERIAL PRIMARY KEY,
        task_id TEXT NOT NULL,
        tenant TEXT NOT NULL,
        round BIGINT NOT NULL,
        producer TEXT NOT NULL,
        skill TEXT NOT NULL,
        verifier TEXT NOT NULL,
        passed BOOLEAN NOT NULL,
        confidence DOUBLE PRECISION,
        weight DOUBLE PRECISION NOT NULL,
        created_ms BIGINT NOT NULL
    );
    CREATE INDEX IF NOT EXISTS votes_time ON votes (created_ms);",
    // 4: a rating finds its task by (tenant, task id) (`ledger_task` alone reads every
    // tenant's rows of a task id that clients reuse).
    "CREATE INDEX IF NOT EXISTS ledger_tenant_task ON ledger (tenant, task_id, finished_ms);",
    // 5: the front end a task came in through (`Ingress`); older rows came in over LDP.
    "ALTER TABLE ledger ADD COLUMN IF NOT EXISTS ingress TEXT NOT NULL DEFAULT 'ldp';",
    // 6: the trace a task ran in (tracing on), found by `?trace_id=`.
    "ALTER TABLE ledger ADD COLUMN IF NOT EXISTS trace_id TEXT;
    CREATE INDEX IF NOT EXISTS ledger_trace ON ledger (trace_id) WHERE trace_id IS NOT NULL;",
    // 7: how far each gateway's journal is in (`journal.rs`), written in each batch's
    // transaction: the rows after it are replayed at that gateway's start.
    "CREATE TABLE IF NOT EXISTS ledger_journal (
        journal_id TEXT PRIMARY KEY,
        stored_to BIGINT NOT NULL
    );",
    // 8: a chat delegate's token counts, each kind apart (the cache's apart from the input's).
    "ALTER TABLE ledger ADD COLUMN IF NOT EXISTS input_tokens BIGINT;
    ALTER TABLE ledger ADD COLUMN IF NOT EXISTS output_tokens BIGINT;
    ALTER TABLE ledger ADD COLUMN IF NOT EXISTS cache_read_tokens BIGINT;
    ALTER TABLE ledger ADD COLUMN IF NOT EXISTS cache_write_tokens BIGINT;",
];

/// Replicas starting together take this advisory lock around migrations.
const MIGRATION_LOCK: i64 = 0x4c44_5047_4c45_4447; // "LDPGLEDG"

/// Longest any one statement may run (every call to the database has a deadline); the
/// readers' deadline too (`readers::READ_DEADLINE`).
const STATEMENT_TIMEOUT: Duration = Duration::from_secs(10);

/// The columns, in insert and select order.
const COLUMNS: &str = "task_id, session_id, upstream_session_id, tenant, skill, policy, delegate,
    delegate_id, model_version, outcome, error_code, error_message, score, candidates, attempts,
    fallbacks, payload_mode, latency_ms, upstream_ms, cost_usd, reported_cost_usd,
    declared_cost_usd, tokens, confidence, verification_status, started_at, finished_at,
    finished_ms, output_sha256, lineage, routing, payload, ingress, trace_id, input_tokens,
    output_tokens, cache_read_tokens, cache_write_tokens";

/// The votes' columns, in insert order (`id` is the table's own).
const VOTE_COLUMNS: &str =
    "task_id, tenant, round, producer, skill, verifier, passed, confidence, weight, created_ms";

/// A ledger in a Postgres database.
pub struct PostgresBackend {
    client: Client,
    insert: Inserts,
    /// To reconnect after the database went away.
    config: postgres::Config,
    sync: &'static str,
}

impl PostgresBackend {
    /// Connects to `url` (`postgres://user@host:port/db`, libpq style) within `connect_timeout`
    /// and migrates the schema.
    pub fn open(
        url: &str,
        durability: Durability,
        connect_timeout: Duration,
    ) -> Result<PostgresBackend, LedgerError> {
        let mut config: postgres::Config = url.parse().map_err(|e| {
            LedgerError::BadStore(format!("{}: {e}", crate::secret::redact_url(url)))
        })?;
        config.connect_timeout(connect_timeout);
        config.application_name("ldp-gateway");
        // A database host that vanishes without resetting the connection is noticed within
        // seconds, not after the kernel's two-hour keepalive default.
        config.keepalives(true);
        config.keepalives_idle(Duration::from_secs(10));
        config.tcp_user_timeout(STATEMENT_TIMEOUT + Duration::from_secs(5));
        let sync = match durability {
            Durability::Fsync => "on",
            Durability::Commit | Durability::Async => "off",
        };
        let (client, insert) = connect(&config, sync, true)?;
        Ok(PostgresBackend {
            client,
            insert,
            config,
            sync,
        })
    }

    /// A new connection if the current one is gone (the database restarted); the next
    /// statement then runs on it.
    fn ensure_connected(&mut self) -> Result<(), LedgerError> {
        if !self.client.is_closed() {
            return Ok(());
        }
        let (client, insert) = connect(&self.config, self.sync, false)?;
        tracing::info!("provenance database reconnected");
        self.client = client;
        self.insert = insert;
        Ok(())
    }
}

/// The prepared inserts of a connection.
struct Inserts {
    /// Rows only (most groups: no row has votes).
    rows: postgres::Statement,
    /// Rows and their votes, in one statement.
    with_votes: postgres::Statement,
}

/// Connects, sets the session's durability and deadline, migrates (first time) and prepares
/// the inserts.
fn connect(
    config: &postgres::Config,
    sync: &str,
    migrate_schema: bool,
) -> Result<(Client, Inserts), LedgerError> {
    let mut client = config.connect(NoTls).map_err(pg)?;
    client
        .batch_execute(&format!(
            "SET synchronous_commit = {sync}; SET statement_timeout = {};",
            STATEMENT_TIMEOUT.as_millis()
        ))
        .map_err(pg)?;
    if migrate_schema {
        migrate(&mut client)?;
    }
    let rows = client.prepare(&insert_sql()).map_err(pg)?;
    let with_votes = client.prepare(&insert_with_votes_sql()).map_err(pg)?;
    Ok((client, Inserts { rows, with_votes }))
}

/// The rows' insert: a group of rows as one array per column.
fn insert_sql() -> String {
    format!(
        "INSERT INTO ledger ({COLUMNS}) SELECT * FROM UNNEST({})",
        unnest(&ROW_TYPES, 1)
    )
}

/// The rows' insert in a `WITH` (run whether read or not), then their votes' (one array per
/// column after the rows'): one statement, so one transaction.
fn insert_with_votes_sql() -> String {
    const VOTE_TYPES: [&str; 10] = [
        "text", "text", "int8", "text", "text", "text", "bool", "float8", "float8", "int8",
    ];
    format!(
        "WITH inserted_rows AS ({}) INSERT INTO votes ({VOTE_COLUMNS}) SELECT * FROM UNNEST({})",
        insert_sql(),
        unnest(&VOTE_TYPES, ROW_TYPES.len() + 1)
    )
}

/// `$first::type[], …`, one array parameter per column.
fn unnest(types: &[&str], first: usize) -> String {
    let params: Vec<String> = types
        .iter()
        .enumerate()
        .map(|(i, t)| format!("${}::{t}[]", first + i))
        .collect();
    params.join(", ")
}

/// The ledger's column types, in [`COLUMNS`] order.
const ROW_TYPES: [&str; 38] = [
    "text", "text", "text", "text", "text", "text", "text", "text", "text", "text", "text", "text",
    "float8", "int8", "int8", "text", "text", "float8", "float8", "float8", "float8", "float8",
    "int8", "float8", "text", "text", "text", "int8", "text", "text", "text", "text", "text",
    "text", "int8", "int8", "int8", "int8",
];

fn migrate(client: &mut Client) -> Result<(), LedgerError> {
    {
        let mut tx = client.transaction().map_err(pg)?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
            .map_err(pg)?;
        tx.batch_execute("CREATE TABLE IF NOT EXISTS ldp_ledger_schema (version BIGINT NOT NULL)")
            .map_err(pg)?;
        let version: i64 = match tx
            .query_opt("SELECT version FROM ldp_ledger_schema", &[])
            .map_err(pg)?
        {
            Some(r) => get(&r, 0)?,
            None => 0,
        };
        if version > MIGRATIONS.len() as i64 {
            return Err(LedgerError::SchemaTooNew {
                found: version,
                known: MIGRATIONS.len() as i64,
            });
        }
        for sql in MIGRATIONS.iter().skip(version.max(0) as usize) {
            tx.batch_execute(sql).map_err(pg)?;
        }
        tx.execute("DELETE FROM ldp_ledger_schema", &[])
            .map_err(pg)?;
        tx.execute(
            "INSERT INTO ldp_ledger_schema VALUES ($1)",
            &[&(MIGRATIONS.len() as i64)],
        )
        .map_err(pg)?;
        tx.commit().map_err(pg)
    }
}

fn pg(e: postgres::Error) -> LedgerError {
    LedgerError::Postgres(e.to_string())
}

/// Column `i` of `row` as a `T`: a value of another type (a hand-edited schema, a foreign
/// migration) is an error naming the column. `Row::get` would panic, and a panic ends the
/// writer thread and with it the ledger.
fn get<'a, T: postgres::types::FromSql<'a>>(
    row: &'a postgres::Row,
    i: usize,
) -> Result<T, LedgerError> {
    row.try_get(i).map_err(|e| {
        let name = row.columns().get(i).map_or("?", |c| c.name());
        LedgerError::Corrupt(format!("column {name}: {e}"))
    })
}

/// The votes of a group of rows, one array per column of `votes`.
struct VoteColumns {
    task_id: Vec<String>,
    tenant: Vec<String>,
    round: Vec<i64>,
    producer: Vec<String>,
    skill: Vec<String>,
    verifier: Vec<String>,
    passed: Vec<bool>,
    confidence: Vec<Option<f64>>,
    weight: Vec<f64>,
    created_ms: Vec<i64>,
}

impl VoteColumns {
    fn of(rows: &[LedgerRow]) -> VoteColumns {
        let n = rows.iter().map(|r| r.votes.len()).sum();
        let mut c = VoteColumns {
            task_id: Vec::with_capacity(n),
            tenant: Vec::with_capacity(n),
            round: Vec::with_capacity(n),
            producer: Vec::with_capacity(n),
            skill: Vec::with_capacity(n),
            verifier: Vec::with_capacity(n),
            passed: Vec::with_capacity(n),
            confidence: Vec::with_capacity(n),
            weight: Vec::with_capacity(n),
            created_ms: Vec::with_capacity(n),
        };
        for r in rows {
            for v in &r.votes {
                c.task_id.push(r.task_id.clone());
                c.tenant.push(r.tenant.clone());
                c.round.push(i64::from(v.round));
                c.producer.push(v.producer.clone());
                c.skill.push(v.skill.clone());
                c.verifier.push(v.verifier.clone());
                c.passed.push(v.passed);
                c.confidence.push(v.confidence);
                c.weight.push(v.weight);
                c.created_ms.push(r.finished_ms);
            }
        }
        c
    }

    /// In [`VOTE_COLUMNS`] order.
    fn params(&self) -> [&(dyn ToSql + Sync); 10] {
        [
            &self.task_id,
            &self.tenant,
            &self.round,
            &self.producer,
            &self.skill,
            &self.verifier,
            &self.passed,
            &self.confidence,
            &self.weight,
            &self.created_ms,
        ]
    }
}

/// One column of a group of rows, as a Postgres array parameter.
fn col<T>(rows: &[LedgerRow], f: impl Fn(&LedgerRow) -> T) -> Vec<T> {
    rows.iter().map(f).collect()
}

/// Records that the store holds a journal's rows up to a sequence number.
const SET_MARK: &str = "INSERT INTO ledger_journal (journal_id, stored_to) VALUES ($1, $2)
    ON CONFLICT (journal_id) DO UPDATE
    SET stored_to = GREATEST(ledger_journal.stored_to, excluded.stored_to)";

impl PostgresBackend {
    /// The rows (and their votes) in one statement; with a journal's mark, that statement
    /// and the mark's in one transaction.
    fn insert_with(
        &mut self,
        rows: &[LedgerRow],
        mark: Option<(&str, u64)>,
    ) -> Result<(), LedgerError> {
        if rows.is_empty() {
            return Ok(());
        }
        self.ensure_connected()?;
        let text = |f: fn(&LedgerRow) -> &str| col(rows, move |r| f(r).to_owned());
        let opt = |f: fn(&LedgerRow) -> Option<&str>| col(rows, move |r| f(r).map(str::to_owned));
        let task_id = text(|r| &r.task_id);
        let session_id = text(|r| &r.session_id);
        let upstream_session_id = opt(|r| r.upstream_session_id.as_deref());
        let tenant = text(|r| &r.tenant);
        let skill = text(|r| &r.skill);
        let policy = opt(|r| r.policy.as_deref());
        let delegate = opt(|r| r.delegate.as_deref());
        let delegate_id = opt(|r| r.delegate_id.as_deref());
        let model_version = opt(|r| r.model_version.as_deref());
        let outcome = text(|r| r.outcome.as_str());
        let error_code = opt(|r| r.error_code.as_deref());
        let error_message = opt(|r| r.error_message.as_deref());
        let score = col(rows, |r| r.score);
        let candidates = col(rows, |r| r.candidates.map(i64::from));
        let attempts = col(rows, |r| i64::from(r.attempts));
        let fallbacks = col(rows, |r| {
            serde_json::to_string(&r.fallbacks).unwrap_or_else(|_| "[]".into())
        });
        let payload_mode = opt(|r| r.payload_mode.as_deref());
        let latency_ms = col(rows, |r| r.latency_ms);
        let upstream_ms = col(rows, |r| r.upstream_ms);
        let cost_usd = col(rows, |r| r.cost_usd);
        let reported = col(rows, |r| r.reported_cost_usd);
        let declared = col(rows, |r| r.declared_cost_usd);
        let tokens = col(rows, |r| r.tokens.map(|t| t.min(i64::MAX as u64) as i64));
        let confidence = col(rows, |r| r.confidence);
        let verification = opt(|r| r.verification_status.as_deref());
        let started_at = text(|r| &r.started_at);
        let finished_at = text(|r| &r.finished_at);
        let finished_ms = col(rows, |r| r.finished_ms);
        let sha = opt(|r| r.output_sha256.as_deref());
        let lineage = text(|r| r.lineage.get());
        let routing = text(|r| r.routing.get());
        let payload = opt(|r| r.payload.as_ref().map(JsonText::get));
        let ingress = text(|r| r.ingress.as_str());
        let trace_id = opt(|r| r.trace_id.as_deref());
        let count = |f: fn(&TokenCounts) -> u64| {
            col(rows, move |r| {
                r.usage.as_ref().map(|u| f(u).min(i64::MAX as u64) as i64)
            })
        };
        let (input, output) = (count(|u| u.input), count(|u| u.output));
        let (cache_read, cache_write) = (count(|u| u.cache_read), count(|u| u.cache_write));
        let params: [&(dyn ToSql + Sync); 38] = [
            &task_id,
            &session_id,
            &upstream_session_id,
            &tenant,
            &skill,
            &policy,
            &delegate,
            &delegate_id,
            &model_version,
            &outcome,
            &error_code,
            &error_message,
            &score,
            &candidates,
            &attempts,
            &fallbacks,
            &payload_mode,
            &latency_ms,
            &upstream_ms,
            &cost_usd,
            &reported,
            &declared,
            &tokens,
            &confidence,
            &verification,
            &started_at,
            &finished_at,
            &finished_ms,
            &sha,
            &lineage,
            &routing,
            &payload,
            &ingress,
            &trace_id,
            &input,
            &output,
            &cache_read,
            &cache_write,
        ];
        // Most groups have no votes: then the rows' statement alone, as before votes.
        let votes = any_votes(rows).then(|| VoteColumns::of(rows));
        let (statement, all): (_, Vec<&(dyn ToSql + Sync)>) = match &votes {
            None => (&self.insert.rows, params.to_vec()),
            Some(votes) => (
                &self.insert.with_votes,
                params.iter().copied().chain(votes.params()).collect(),
            ),
        };
        let Some((journal, seq)) = mark else {
            self.client.execute(statement, &all).map_err(pg)?;
            return Ok(());
        };
        let seq = i64::try_from(seq).unwrap_or(i64::MAX);
        let mut tx = self.client.transaction().map_err(pg)?;
        tx.execute(statement, &all).map_err(pg)?;
        tx.execute(SET_MARK, &[&journal, &seq]).map_err(pg)?;
        tx.commit().map_err(pg)
    }
}

impl Backend for PostgresBackend {
    fn insert(&mut self, rows: &[LedgerRow]) -> Result<(), LedgerError> {
        self.insert_with(rows, None)
    }

    fn insert_marked(&mut self, rows: &[LedgerRow], mark: (&str, u64)) -> Result<(), LedgerError> {
        self.insert_with(rows, Some(mark))
    }

    fn forget_journal(&mut self, journal: &str) -> Result<(), LedgerError> {
        self.ensure_connected()?;
        self.client
            .execute(
                "DELETE FROM ledger_journal WHERE journal_id = $1",
                &[&journal],
            )
            .map_err(pg)?;
        Ok(())
    }

    fn journal_mark(&mut self, journal: &str) -> Result<u64, LedgerError> {
        self.ensure_connected()?;
        let row = self
            .client
            .query_opt(
                "SELECT stored_to FROM ledger_journal WHERE journal_id = $1",
                &[&journal],
            )
            .map_err(pg)?;
        let seq: i64 = match &row {
            Some(r) => get(r, 0)?,
            None => 0,
        };
        Ok(u64::try_from(seq).unwrap_or(0))
    }

    fn query(&mut self, q: &Query) -> Result<Vec<LedgerRow>, LedgerError> {
        self.ensure_connected()?;
        select(&mut self.client, q)
    }

    fn prune(&mut self, before_ms: i64) -> Result<u64, LedgerError> {
        self.ensure_connected()?;
        self.client
            .execute("DELETE FROM feedback WHERE created_ms < $1", &[&before_ms])
            .map_err(pg)?;
        self.client
            .execute("DELETE FROM votes WHERE created_ms < $1", &[&before_ms])
            .map_err(pg)?;
        self.client
            .execute("DELETE FROM ledger WHERE finished_ms < $1", &[&before_ms])
            .map_err(pg)
    }

    /// Oldest first, through the time index.
    fn prune_batch(&mut self, before_ms: i64, limit: u64) -> Result<u64, LedgerError> {
        self.ensure_connected()?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        // Ratings age with the rows they rate (they come after them); what a batch leaves
        // goes with the next one.
        self.client
            .execute(
                "DELETE FROM feedback WHERE (task_id, tenant) IN (SELECT task_id, tenant
                    FROM feedback WHERE created_ms < $1 ORDER BY created_ms LIMIT $2)",
                &[&before_ms, &limit],
            )
            .map_err(pg)?;
        // Votes go with their rows: those cast up to the newest row this batch deletes (so a
        // batch deletes the votes of at most `limit` rows, however many each has; once no row
        // is left before the cut-off, any vote before it).
        self.client
            .execute(
                "DELETE FROM votes WHERE created_ms < $1 AND created_ms <= COALESCE(
                    (SELECT max(finished_ms) FROM (SELECT finished_ms FROM ledger
                        WHERE finished_ms < $1 ORDER BY finished_ms, id LIMIT $2) AS batch), $1)",
                &[&before_ms, &limit],
            )
            .map_err(pg)?;
        self.client
            .execute(
                "DELETE FROM ledger WHERE id IN (SELECT id FROM ledger WHERE finished_ms < $1
                    ORDER BY finished_ms, id LIMIT $2)",
                &[&before_ms, &limit],
            )
            .map_err(pg)
    }

    fn spend_since(&mut self, since_ms: i64) -> Result<Vec<(String, f64)>, LedgerError> {
        self.ensure_connected()?;
        spend(&mut self.client, since_ms)
    }

    fn spend_breakdown(&mut self, since_ms: i64) -> Result<Vec<super::SpendRow>, LedgerError> {
        self.ensure_connected()?;
        spend_breakdown(&mut self.client, since_ms)
    }

    fn task_of(&mut self, tenant: &str, task_id: &str) -> Result<Option<RatedTask>, LedgerError> {
        self.ensure_connected()?;
        task_of(&mut self.client, tenant, task_id)
    }

    fn feedback(&mut self, task_id: &str) -> Result<Vec<Feedback>, LedgerError> {
        self.ensure_connected()?;
        feedback(&mut self.client, task_id)
    }

    fn evidence(&mut self, since_ms: i64, limit: u32) -> Result<Vec<Evidence>, LedgerError> {
        self.ensure_connected()?;
        evidence(&mut self.client, since_ms, limit)
    }

    /// The primary key decides between two replicas rating the same task at once.
    fn rate(&mut self, fb: &Feedback) -> Result<bool, LedgerError> {
        self.ensure_connected()?;
        let n = self
            .client
            .execute(
                "INSERT INTO feedback (task_id, tenant, score, outcome, delegate, skill,
                    created_at, created_ms) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
                 ON CONFLICT (task_id, tenant) DO NOTHING",
                &[
                    &fb.task_id,
                    &fb.tenant,
                    &fb.score,
                    &fb.outcome.as_str(),
                    &fb.delegate,
                    &fb.skill,
                    &fb.created_at,
                    &fb.created_ms,
                ],
            )
            .map_err(pg)?;
        Ok(n == 1)
    }

    fn reader(&self) -> Option<Arc<dyn Reader>> {
        Some(Arc::new(PostgresReader {
            config: self.config.clone(),
            idle: Mutex::new(Vec::new()),
            closed: AtomicBool::new(false),
        }))
    }

    /// Rewrites the schema-version row in its own transaction, which must commit: a read-only
    /// standby after a failover, a database that refuses writes or a lost connection fail it.
    /// (It reconnects first if the database went away.)
    fn probe(&mut self) -> Result<(), LedgerError> {
        self.ensure_connected()?;
        self.client
            .execute("UPDATE ldp_ledger_schema SET version = version", &[])
            .map_err(pg)?;
        Ok(())
    }
}

/// Rows matching `q`, newest first; by task id, with their votes.
fn select(client: &mut Client, q: &Query) -> Result<Vec<LedgerRow>, LedgerError> {
    let mut sql = format!("SELECT {COLUMNS} FROM ledger WHERE true");
    let mut text_args: Vec<String> = Vec::new();
    for (col, v) in q.text_filters() {
        text_args.push(v.to_owned());
        sql.push_str(&format!(" AND {col} = ${}", text_args.len()));
    }
    let since = q.since_ms.unwrap_or(i64::MIN);
    sql.push_str(&format!(
        " AND finished_ms >= ${} ORDER BY finished_ms DESC, id DESC LIMIT {} OFFSET {}",
        text_args.len() + 1,
        q.page(),
        q.offset.unwrap_or(0)
    ));
    let mut params: Vec<&(dyn ToSql + Sync)> =
        text_args.iter().map(|s| s as &(dyn ToSql + Sync)).collect();
    params.push(&since);
    let rows = client.query(&sql, &params).map_err(pg)?;
    let mut rows = rows.iter().map(read_row).collect::<Result<Vec<_>, _>>()?;
    if let Some(task_id) = &q.task_id {
        read_votes(client, task_id, &mut rows)?;
    }
    Ok(rows)
}

/// Fills the votes of `rows` (all of task id `task_id`), in the order they were written: one
/// query through the votes' time index (a vote's time is its row's).
fn read_votes(
    client: &mut Client,
    task_id: &str,
    rows: &mut [LedgerRow],
) -> Result<(), LedgerError> {
    if rows.is_empty() {
        return Ok(());
    }
    let times: Vec<i64> = rows.iter().map(|r| r.finished_ms).collect();
    let votes = client
        .query(
            "SELECT tenant, created_ms, round, producer, skill, verifier, passed, confidence,
                weight
             FROM votes WHERE task_id = $1 AND created_ms = ANY($2) ORDER BY id",
            &[&task_id, &times],
        )
        .map_err(pg)?;
    for v in &votes {
        let (tenant, at): (String, i64) = (get(v, 0)?, get(v, 1)?);
        let vote = Vote {
            round: get::<i64>(v, 2)?.clamp(0, u32::MAX as i64) as u32,
            producer: get(v, 3)?,
            skill: get(v, 4)?,
            verifier: get(v, 5)?,
            passed: get(v, 6)?,
            confidence: get(v, 7)?,
            weight: get(v, 8)?,
        };
        let owners = rows
            .iter_mut()
            .filter(|r| r.finished_ms == at && r.tenant == tenant);
        for row in owners {
            row.votes.push(vote.clone());
        }
    }
    Ok(())
}

/// Total `cost_usd` per tenant of rows finished at or after `since_ms`.
fn spend(client: &mut Client, since_ms: i64) -> Result<Vec<(String, f64)>, LedgerError> {
    let rows = client
        .query(
            "SELECT tenant, COALESCE(SUM(cost_usd), 0)::float8 FROM ledger
             WHERE finished_ms >= $1 GROUP BY tenant",
            &[&since_ms],
        )
        .map_err(pg)?;
    rows.iter().map(|r| Ok((get(r, 0)?, get(r, 1)?))).collect()
}

/// Tasks and cost per (tenant, policy, delegate) of rows finished at or after `since_ms`.
fn spend_breakdown(
    client: &mut Client,
    since_ms: i64,
) -> Result<Vec<super::SpendRow>, LedgerError> {
    let rows = client
        .query(
            "SELECT tenant, policy, delegate, COUNT(*)::int8, COALESCE(SUM(cost_usd), 0)::float8
             FROM ledger WHERE finished_ms >= $1 GROUP BY tenant, policy, delegate",
            &[&since_ms],
        )
        .map_err(pg)?;
    rows.iter()
        .map(|r| {
            Ok(super::SpendRow {
                tenant: get(r, 0)?,
                policy: get(r, 1)?,
                delegate: get(r, 2)?,
                tasks: get::<i64>(r, 3)?.max(0) as u64,
                cost_usd: get(r, 4)?,
            })
        })
        .collect()
}

/// The newest row of `tenant`'s task `task_id` (through the task-id index).
fn task_of(
    client: &mut Client,
    tenant: &str,
    task_id: &str,
) -> Result<Option<RatedTask>, LedgerError> {
    let row = client
        .query_opt(
            "SELECT delegate, skill FROM ledger WHERE task_id = $1 AND tenant = $2
             ORDER BY finished_ms DESC, id DESC LIMIT 1",
            &[&task_id, &tenant],
        )
        .map_err(pg)?;
    row.map(|r| {
        Ok(RatedTask {
            delegate: get(&r, 0)?,
            skill: get(&r, 1)?,
        })
    })
    .transpose()
}

/// The ratings of task id `task_id` (any tenant), through the primary key.
fn feedback(client: &mut Client, task_id: &str) -> Result<Vec<Feedback>, LedgerError> {
    let rows = client
        .query(
            "SELECT task_id, tenant, score, outcome, delegate, skill, created_at, created_ms
             FROM feedback WHERE task_id = $1 ORDER BY tenant LIMIT $2",
            &[&task_id, &i64::from(FEEDBACK_PER_TASK)],
        )
        .map_err(pg)?;
    rows.iter()
        .map(|r| {
            Ok(Feedback {
                task_id: get(r, 0)?,
                tenant: get(r, 1)?,
                score: get(r, 2)?,
                outcome: Given::parse(get(r, 3)?),
                delegate: get(r, 4)?,
                skill: get(r, 5)?,
                created_at: get(r, 6)?,
                created_ms: get(r, 7)?,
            })
        })
        .collect()
}

/// Quality evidence since `since_ms`: the newest `limit` votes, ratings naming a delegate and
/// calibration rounds, each through its table's time index, merged oldest first.
fn evidence(client: &mut Client, since_ms: i64, limit: u32) -> Result<Vec<Evidence>, LedgerError> {
    let limit = i64::from(limit);
    let votes = client
        .query(
            // The window runs over the newest `limit` votes only (found through the time
            // index), not over every vote since `since_ms`: a round cut by the limit weighs
            // its remaining votes a little more, once.
            "SELECT producer, skill, passed,
                    weight / SUM(weight) OVER (PARTITION BY task_id, tenant, round, created_ms),
                    created_ms
             FROM (SELECT id, task_id, tenant, round, producer, skill, passed, weight, created_ms
                   FROM votes WHERE created_ms >= $1
                   ORDER BY created_ms DESC, id DESC LIMIT $2) AS recent
             ORDER BY created_ms DESC, id DESC",
            &[&since_ms, &limit],
        )
        .map_err(pg)?;
    let votes = votes
        .iter()
        .map(|r| {
            Ok(evidence::of_vote(
                get(r, 0)?,
                get(r, 1)?,
                get(r, 2)?,
                get(r, 3)?,
                get(r, 4)?,
            ))
        })
        .collect::<Result<Vec<_>, LedgerError>>()?;
    let ratings = client
        .query(
            "SELECT delegate, skill, score, created_ms, tenant FROM feedback
             WHERE created_ms >= $1 AND delegate IS NOT NULL
             ORDER BY created_ms DESC, task_id DESC, tenant DESC LIMIT $2",
            &[&since_ms, &limit],
        )
        .map_err(pg)?;
    let ratings = ratings
        .iter()
        .map(|r| {
            Ok(evidence::of_rating(
                get(r, 0)?,
                get(r, 1)?,
                get(r, 2)?,
                get(r, 3)?,
                get(r, 4)?,
            ))
        })
        .collect::<Result<Vec<_>, LedgerError>>()?;
    // Tenant-less rows through the (tenant, time) index; the task id and the routing column
    // say which are calibration rounds and what each taught.
    let rounds = client
        .query(
            "SELECT delegate, skill, routing, finished_ms FROM ledger
             WHERE tenant = '' AND finished_ms >= $1 AND task_id LIKE $3
                   AND delegate IS NOT NULL
             ORDER BY finished_ms DESC, id DESC LIMIT $2",
            &[&since_ms, &limit, &evidence::CALIBRATION_TASK_LIKE],
        )
        .map_err(pg)?;
    let mut calibrations = Vec::new();
    for r in &rounds {
        let routing: String = get(r, 2)?;
        calibrations.extend(evidence::of_calibration(
            get(r, 0)?,
            get(r, 1)?,
            &routing,
            get(r, 3)?,
        ));
    }
    Ok(merge(votes, ratings, calibrations))
}

/// Reads beside the writer: clients of their own, connected when first needed (at most
/// `READERS`, as many as reads run at once), read-only, with the writer's statement timeout
/// as their deadline (`readers::READ_DEADLINE` is the same).
struct PostgresReader {
    config: postgres::Config,
    idle: Mutex<Vec<Client>>,
    closed: AtomicBool,
}

impl PostgresReader {
    /// Runs `read` on an idle client, or a new one; the client is kept unless it broke.
    fn with<T>(
        &self,
        read: impl FnOnce(&mut Client) -> Result<T, LedgerError>,
    ) -> Result<T, LedgerError> {
        if self.closed.load(Ordering::Acquire) {
            return Err(LedgerError::Closed);
        }
        let idle = self
            .idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop();
        let mut client = match idle.filter(|c| !c.is_closed()) {
            Some(c) => c,
            None => {
                let mut c = self.config.connect(NoTls).map_err(pg)?;
                c.batch_execute(&format!(
                    "SET statement_timeout = {}; SET default_transaction_read_only = on;",
                    STATEMENT_TIMEOUT.as_millis()
                ))
                .map_err(pg)?;
                c
            }
        };
        let out = read(&mut client);
        if !client.is_closed() && !self.closed.load(Ordering::Acquire) {
            self.idle
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(client);
        }
        out
    }
}

impl Reader for PostgresReader {
    /// The deadline is the server's `statement_timeout`: cancelling from here would take a
    /// connection of its own.
    fn query(&self, q: &Query, _: &Cancel) -> Result<Vec<LedgerRow>, LedgerError> {
        self.with(|c| select(c, q))
    }

    fn spend_since(&self, since_ms: i64, _: &Cancel) -> Result<Vec<(String, f64)>, LedgerError> {
        self.with(|c| spend(c, since_ms))
    }

    fn spend_breakdown(
        &self,
        since_ms: i64,
        _: &Cancel,
    ) -> Result<Vec<super::SpendRow>, LedgerError> {
        self.with(|c| spend_breakdown(c, since_ms))
    }

    fn task_of(
        &self,
        tenant: &str,
        task_id: &str,
        _: &Cancel,
    ) -> Result<Option<RatedTask>, LedgerError> {
        self.with(|c| task_of(c, tenant, task_id))
    }

    fn feedback(&self, task_id: &str, _: &Cancel) -> Result<Vec<Feedback>, LedgerError> {
        self.with(|c| feedback(c, task_id))
    }

    fn evidence(
        &self,
        since_ms: i64,
        limit: u32,
        _: &Cancel,
    ) -> Result<Vec<Evidence>, LedgerError> {
        self.with(|c| evidence(c, since_ms, limit))
    }

    fn close(&self) {
        self.closed.store(true, Ordering::Release);
        let idle = std::mem::take(&mut *self.idle.lock().unwrap_or_else(PoisonError::into_inner));
        drop(idle);
    }
}

fn read_row(r: &postgres::Row) -> Result<LedgerRow, LedgerError> {
    let corrupt = |e: serde_json::Error| LedgerError::Corrupt(e.to_string());
    let fallbacks: String = get(r, 15)?;
    let lineage: String = get(r, 29)?;
    let routing: String = get(r, 30)?;
    let payload: Option<String> = get(r, 31)?;
    let outcome: String = get(r, 9)?;
    let ingress: String = get(r, 32)?;
    let trace_id: Option<String> = get(r, 33)?;
    let counts: [Option<i64>; 4] = [get(r, 34)?, get(r, 35)?, get(r, 36)?, get(r, 37)?];
    Ok(LedgerRow {
        trace_id,
        usage: TokenCounts::read(counts),
        task_id: get(r, 0)?,
        ingress: Ingress::from_stored(&ingress),
        session_id: get(r, 1)?,
        upstream_session_id: get(r, 2)?,
        tenant: get(r, 3)?,
        skill: get(r, 4)?,
        policy: get(r, 5)?,
        delegate: get(r, 6)?,
        delegate_id: get(r, 7)?,
        model_version: get(r, 8)?,
        outcome: if outcome == "result" {
            Outcome::Result
        } else {
            Outcome::Failed
        },
        error_code: get(r, 10)?,
        error_message: get(r, 11)?,
        score: get(r, 12)?,
        candidates: get::<Option<i64>>(r, 13)?.map(|c| c.clamp(0, u32::MAX as i64) as u32),
        attempts: get::<i64>(r, 14)?.clamp(0, u32::MAX as i64) as u32,
        fallbacks: serde_json::from_str(&fallbacks).map_err(corrupt)?,
        payload_mode: get(r, 16)?,
        latency_ms: get(r, 17)?,
        upstream_ms: get(r, 18)?,
        cost_usd: get(r, 19)?,
        reported_cost_usd: get(r, 20)?,
        declared_cost_usd: get(r, 21)?,
        tokens: get::<Option<i64>>(r, 22)?.map(|t| t.max(0) as u64),
        confidence: get(r, 23)?,
        verification_status: get(r, 24)?,
        started_at: get(r, 25)?,
        finished_at: get(r, 26)?,
        finished_ms: get(r, 27)?,
        output_sha256: get(r, 28)?,
        lineage: JsonText::parse(&lineage).map_err(corrupt)?,
        routing: JsonText::parse(&routing).map_err(corrupt)?,
        payload: payload
            .map(|p| JsonText::parse(&p))
            .transpose()
            .map_err(corrupt)?,
        votes: Vec::new(),
    })
}
