//! `ldp-gateway provenance`: print ledger rows as JSON or CSV.

use ldp_gateway::config::Config;
use ldp_gateway::provenance::{
    is_postgres, query, Backend, Durability, Ingress, LedgerError, PostgresBackend, Query,
    SqliteBackend, CONNECT_TIMEOUT,
};
use std::path::{Path, PathBuf};

/// Flags of `ldp-gateway provenance`.
#[derive(clap::Args)]
pub struct ProvenanceArgs {
    /// Rows of this client task id.
    #[arg(long)]
    task: Option<String>,
    /// Rows of this client session id.
    #[arg(long)]
    session: Option<String>,
    /// Rows of this delegate (registry name).
    #[arg(long)]
    delegate: Option<String>,
    /// Rows of this tenant.
    #[arg(long)]
    tenant: Option<String>,
    /// Rows of tasks that came in through this front end: ldp, openai, llmcp, llmx, ladp, a2a.
    #[arg(long, value_parser = parse_ingress)]
    ingress: Option<Ingress>,
    /// Rows of tasks that ran in this OpenTelemetry trace (32 hex digits).
    #[arg(long)]
    trace_id: Option<String>,
    /// Rows since a duration ago (`1h`) or an RFC 3339 time.
    #[arg(long)]
    since: Option<String>,
    /// Most rows to print.
    #[arg(long, default_value_t = 100)]
    limit: u32,
    /// `json` or `csv`.
    #[arg(long, default_value = "json")]
    format: String,
    /// The SQLite file (default: `provenance.store` of the config).
    #[arg(long)]
    db: Option<PathBuf>,
    /// Config file (TOML).
    #[arg(long, default_value = "config/gateway.toml")]
    config: PathBuf,
}

/// Queries the ledger and prints the rows.
pub fn run(args: ProvenanceArgs) -> anyhow::Result<()> {
    let q = Query {
        session_id: args.session,
        task_id: args.task,
        delegate: args.delegate,
        tenant: args.tenant,
        ingress: args.ingress,
        trace_id: args.trace_id.map(|t| t.to_ascii_lowercase()),
        skill: None,
        policy: None,
        outcome: None,
        since_ms: None,
        limit: Some(args.limit),
        offset: None,
    };
    let out = print_from_file(
        args.db.as_deref(),
        &args.config,
        q,
        args.since.as_deref(),
        &args.format,
    )?;
    print!("{out}");
    Ok(())
}

/// An `--ingress` value.
fn parse_ingress(s: &str) -> Result<Ingress, String> {
    Ingress::parse(s).ok_or_else(|| {
        let names: Vec<&str> = Ingress::ALL.iter().map(|i| i.as_str()).collect();
        format!("expected one of {}", names.join(", "))
    })
}

/// The SQLite path of a `sqlite:` store URL.
fn sqlite_path(store: &str) -> Result<&str, LedgerError> {
    let rest = store
        .strip_prefix("sqlite:")
        .ok_or_else(|| LedgerError::BadStore(store.to_owned()))?;
    Ok(rest.strip_prefix("//").unwrap_or(rest))
}

/// The ledger at `store` opened for reading (a SQLite file read-only, or Postgres); none when
/// the SQLite file does not exist (no gateway has written there yet).
pub(crate) fn open_for_reading(store: &str) -> anyhow::Result<Option<Box<dyn Backend>>> {
    if is_postgres(store) {
        return Ok(Some(Box::new(PostgresBackend::open(
            store,
            Durability::Commit,
            CONNECT_TIMEOUT,
        )?)));
    }
    let path = sqlite_path(store)?;
    if !Path::new(path).exists() {
        return Ok(None);
    }
    Ok(Some(Box::new(SqliteBackend::open_read_only(path)?)))
}

/// Queries the ledger (the SQLite file `db` read-only, else the config's store, SQLite or
/// Postgres) and renders the rows as `json` or `csv`.
fn print_from_file(
    db: Option<&Path>,
    config: &Path,
    mut q: Query,
    since: Option<&str>,
    format: &str,
) -> anyhow::Result<String> {
    if let Some(s) = since {
        q.since_ms = Some(query::parse_since(
            s,
            chrono::Utc::now().timestamp_millis(),
        )?);
    }
    let store = match db {
        Some(p) => format!("sqlite://{}", p.display()),
        None => Config::load(config)?.provenance.store,
    };
    let Some(mut backend) = open_for_reading(&store)? else {
        anyhow::bail!("no provenance database at {}", sqlite_path(&store)?);
    };
    let rows = backend.query(&q)?;
    Ok(match format {
        "csv" => query::to_csv(&rows),
        "json" => format!("{}\n", serde_json::to_string_pretty(&rows)?),
        other => anyhow::bail!("--format must be json or csv, got '{other}'"),
    })
}
