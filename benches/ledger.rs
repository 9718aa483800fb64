//! The provenance ledger's cost, in one run: (b, measured first) the per-task latency through
//! a real gateway with `durability = "commit"`, `"fsync"` and `"async"`, interleaved, and what
//! commit adds over async; (a) the sustained insert rate of the batching writer (commit, fsync,
//! async) and of raw `Backend::insert` batches, against a temp-file SQLite.
//! `cargo bench --bench ledger [-- ROWS [TASKS]]`.

use ldp_gateway::config::{Config, DelegateConfig};
use ldp_gateway::ldp::{Body, Envelope, IdentityCard, PayloadMode, SessionConfig};
use ldp_gateway::provenance::{
    Backend, Durability, JsonText, Ledger, LedgerRow, Outcome, SqliteBackend,
};
use ldp_gateway::server::Gateway;
use ldp_gateway::sim::{self, SimOptions};
use ldp_gateway::telemetry::Metrics;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Concurrent producers calling `record` in the commit and fsync runs.
const PRODUCERS: usize = 256;
/// Rows per raw `Backend::insert` call (the writer's largest group).
const RAW_BATCH: usize = 1024;
/// Rounds the latency measurement is split into, alternating the modes.
const ROUNDS: usize = 5;

/// A row the size of a real one: ids, a two-entry lineage, a routing summary.
fn row(i: usize) -> LedgerRow {
    let now = chrono::Utc::now();
    LedgerRow {
        task_id: format!("{:032x}", i),
        session_id: "6f0c1f7e-8a55-4b9e-9f5e-1d2c3b4a5e6f".into(),
        upstream_session_id: Some("1b2c3d4e-5f60-4718-9a2b-3c4d5e6f7a8b".into()),
        tenant: "anonymous".into(),
        skill: "summarize".into(),
        policy: Some("balanced".into()),
        delegate: Some("qwen-eu".into()),
        delegate_id: Some("ldp:delegate:qwen-eu".into()),
        model_version: Some("qwen3-32b-2026-01".into()),
        outcome: Outcome::Result,
        error_code: None,
        error_message: None,
        score: Some(0.8123),
        candidates: Some(4),
        attempts: 1,
        fallbacks: Vec::new(),
        payload_mode: Some("semantic_frame".into()),
        latency_ms: 812.25,
        upstream_ms: 811.5,
        cost_usd: Some(0.00213),
        reported_cost_usd: Some(0.00213),
        declared_cost_usd: Some(0.002),
        tokens: Some(412),
        confidence: Some(0.87),
        verification_status: Some("self_verified".into()),
        started_at: now.to_rfc3339(),
        finished_at: now.to_rfc3339(),
        finished_ms: now.timestamp_millis(),
        output_sha256: Some("9f".repeat(32)),
        lineage: JsonText::of(&serde_json::json!([
            {"delegate_id": "ldp:delegate:gateway", "model_version": "0.1.0", "step": "route",
             "timestamp": now.to_rfc3339(), "verification_status": "unverified",
             "policy": "balanced", "routed_to": "qwen-eu", "attempts": 1},
            {"delegate_id": "ldp:delegate:qwen-eu", "model_version": "qwen3-32b-2026-01",
             "step": "summarize", "timestamp": now.to_rfc3339(),
             "verification_status": "self_verified"}
        ])),
        routing: JsonText::of(
            &serde_json::json!({"policy": "balanced", "reused_binding": false, "band": 2,
            "excluded": {"jurisdiction": 1}}),
        ),
        payload: None,
    }
}

fn sqlite(dir: &tempfile::TempDir, name: &str, d: Durability) -> anyhow::Result<SqliteBackend> {
    let path = dir.path().join(name).display().to_string();
    Ok(SqliteBackend::open(&path, d)?)
}

/// `rows` rows through the writer: `PRODUCERS` concurrent callers (commit, fsync), or one
/// caller and a queue that holds them all (async: the writer's drain rate, nothing dropped).
/// Returns the time until every row is committed, and the rows dropped.
async fn writer_run(
    dir: &tempfile::TempDir,
    d: Durability,
    rows: usize,
) -> anyhow::Result<(Duration, u64)> {
    let backend = sqlite(dir, &format!("writer-{d:?}.db"), d)?;
    let metrics = Arc::new(Metrics::new()?);
    let capacity = if d == Durability::Async { rows } else { 10_000 };
    let ledger = Ledger::start(Box::new(backend), d, capacity, metrics.clone());
    let h = ledger.handle();
    let t = Instant::now();
    if d == Durability::Async {
        for i in 0..rows {
            h.record(row(i)).await?;
        }
    } else {
        let producers: Vec<_> = (0..PRODUCERS)
            .map(|p| {
                let h = h.clone();
                tokio::spawn(async move {
                    for i in (p..rows).step_by(PRODUCERS) {
                        h.record(row(i)).await?;
                    }
                    anyhow::Ok(())
                })
            })
            .collect();
        for p in producers {
            p.await??;
        }
    }
    let dropped = ledger.close(Duration::from_secs(600)).await;
    let took = t.elapsed();
    let committed = metrics.ledger_rows.get();
    anyhow::ensure!(
        committed + dropped == rows as u64,
        "committed {committed} + dropped {dropped} != {rows}"
    );
    Ok((took, dropped))
}

/// `rows` rows straight into `Backend::insert`, `RAW_BATCH` per transaction, into a file or
/// (`dir` absent) an in-memory database: SQLite's own cost without the disk.
fn raw_run(dir: Option<&tempfile::TempDir>, rows: usize) -> anyhow::Result<Duration> {
    let mut b = match dir {
        Some(dir) => sqlite(dir, "raw.db", Durability::Commit)?,
        None => SqliteBackend::open(":memory:", Durability::Commit)?,
    };
    let all: Vec<LedgerRow> = (0..rows).map(row).collect();
    let t = Instant::now();
    for chunk in all.chunks(RAW_BATCH) {
        b.insert(chunk)?;
    }
    Ok(t.elapsed())
}

async fn post(http: &reqwest::Client, base: &str, env: &Envelope) -> anyhow::Result<Envelope> {
    let bytes = http
        .post(format!("{base}/ldp/messages"))
        .header("content-type", "application/json")
        .body(env.to_vec()?)
        .send()
        .await?
        .bytes()
        .await?;
    Ok(Envelope::from_slice(&bytes)?)
}

/// One gateway with its own ledger file and a session over a keep-alive connection.
struct Lane {
    name: &'static str,
    gw: Gateway,
    http: reqwest::Client,
    session: String,
    next: usize,
    took: Vec<Duration>,
}

impl Lane {
    async fn start(
        name: &'static str,
        d: Durability,
        delegate: &str,
        dir: &tempfile::TempDir,
    ) -> anyhow::Result<Lane> {
        let mut cfg = Config::default();
        cfg.server.listen = "127.0.0.1:0".parse()?;
        cfg.admin.listen = "127.0.0.1:0".parse()?;
        cfg.discovery.poll_interval = Duration::from_secs(3600);
        cfg.policies.dir = concat!(env!("CARGO_MANIFEST_DIR"), "/policies").into();
        cfg.provenance.store = format!("sqlite://{}", dir.path().join(name).display());
        cfg.provenance.durability = d;
        cfg.delegates = vec![DelegateConfig::new(delegate.to_owned())];
        let gw = Gateway::start(cfg).await?;
        let http = reqwest::Client::builder().tcp_nodelay(true).build()?;
        let config = SessionConfig {
            preferred_payload_modes: Some(vec![PayloadMode::Text]),
            ..SessionConfig::default()
        };
        let propose = Envelope::new(
            "",
            "ldp:client:bench",
            "x",
            Body::SessionPropose { config },
            PayloadMode::Text,
        );
        let session = match post(&http, &gw.ldp_url(), &propose).await?.body {
            Body::SessionAccept { session_id, .. } => session_id,
            other => anyhow::bail!("no session: {other:?}"),
        };
        Ok(Lane {
            name,
            gw,
            http,
            session,
            next: 0,
            took: Vec::new(),
        })
    }

    /// `n` sequential tasks; their latencies are kept when `keep`.
    async fn run(&mut self, n: usize, keep: bool) -> anyhow::Result<()> {
        let base = self.gw.ldp_url();
        for _ in 0..n {
            self.next += 1;
            let env = Envelope::new(
                self.session.as_str(),
                "ldp:client:bench",
                "x",
                Body::TaskSubmit {
                    task_id: format!("t{}", self.next).into(),
                    skill: "echo".into(),
                    input: serde_json::json!("hello").into(),
                    contract: None,
                },
                PayloadMode::Text,
            );
            let t = Instant::now();
            let reply = post(&self.http, &base, &env).await?;
            let took = t.elapsed();
            if !matches!(reply.body, Body::TaskResult { .. }) {
                anyhow::bail!("task failed: {:?}", reply.body);
            }
            if keep {
                self.took.push(took);
            }
        }
        Ok(())
    }
}

fn pct(v: &[Duration], p: f64) -> Duration {
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

fn rate(rows: usize, took: Duration) -> String {
    format!("{:>12.0}", rows as f64 / took.as_secs_f64())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 4)]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1).filter_map(|a| a.parse().ok());
    let rows: usize = args.next().unwrap_or(200_000);
    let tasks: usize = args.next().unwrap_or(2_000);
    let dir = tempfile::tempdir()?;

    // (b) Per-task latency through the gateway, the three durabilities interleaved.
    let card: IdentityCard = serde_json::from_value(serde_json::json!({
        "delegate_id": "ldp:delegate:fast", "name": "fast", "model_family": "sim", "model_version": "1",
        "trust_domain": "default", "context_window": 8192, "supported_payload_modes": ["text"],
        "capabilities": [{"name": "echo", "quality": {"quality_score": 0.9, "supports_streaming": false}}]
    }))?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let delegate = sim::spawn(listener, SimOptions::new(card)).await?;
    let mut lanes = Vec::new();
    for (name, d) in [
        ("commit", Durability::Commit),
        ("fsync", Durability::Fsync),
        ("async", Durability::Async),
    ] {
        lanes.push(Lane::start(name, d, &delegate.url(), &dir).await?);
    }
    for lane in &mut lanes {
        lane.run(tasks / 10, false).await?; // warm the connection pools and the files
    }
    for _ in 0..ROUNDS {
        for lane in &mut lanes {
            lane.run(tasks / ROUNDS, true).await?;
        }
    }
    println!(
        "per-task latency through the gateway: {tasks} sequential tasks per durability \
         (interleaved in {ROUNDS} rounds), 1 keep-alive connection, zero-latency delegate"
    );
    println!(
        "{:<10} {:>10} {:>10} {:>10}",
        "durability", "p50", "p99", "p99.9"
    );
    for lane in &mut lanes {
        lane.took.sort();
        let v = &lane.took;
        println!(
            "{:<10} {:>10.1?} {:>10.1?} {:>10.1?}",
            lane.name,
            pct(v, 0.5),
            pct(v, 0.99),
            pct(v, 0.999)
        );
    }
    let p50 = |name: &str| {
        lanes
            .iter()
            .find(|l| l.name == name)
            .map_or(Duration::ZERO, |l| pct(&l.took, 0.5))
    };
    let p99 = |name: &str| {
        lanes
            .iter()
            .find(|l| l.name == name)
            .map_or(Duration::ZERO, |l| pct(&l.took, 0.99))
    };
    for slow in ["commit", "fsync"] {
        let added = p50(slow).as_secs_f64() - p50("async").as_secs_f64();
        let added99 = p99(slow).as_secs_f64() - p99("async").as_secs_f64();
        println!(
            "added per task by {slow} over async: {:+.1} µs at p50, {:+.1} µs at p99",
            added * 1e6,
            added99 * 1e6
        );
    }
    for lane in lanes {
        lane.gw.shutdown().await;
    }
    delegate.shutdown().await;

    // (a) Insert rate. Run second: its hundreds of MB of writes leave the kernel flushing
    // dirty pages for a while, which would stall the commits (b) measures.
    println!();
    println!("ledger insert rate: {rows} rows, temp-file SQLite (WAL), one writer thread");
    println!(
        "{:<50} {:>12} {:>10} {:>8}",
        "path", "rows/s", "total", "dropped"
    );
    for (name, d) in [
        ("writer, commit (256 concurrent record)", Durability::Commit),
        ("writer, fsync (256 concurrent record)", Durability::Fsync),
        ("writer, async (queue holds all)", Durability::Async),
    ] {
        let (took, dropped) = writer_run(&dir, d, rows).await?;
        println!(
            "{name:<50} {} {:>10.2?} {dropped:>8}",
            rate(rows, took),
            took
        );
    }
    for (name, dir) in [("file", Some(&dir)), ("in memory", None)] {
        let took = raw_run(dir, rows)?;
        println!(
            "{:<50} {} {:>10.2?} {:>8}",
            format!("Backend::insert, {RAW_BATCH} rows/transaction, {name}"),
            rate(rows, took),
            took,
            "-"
        );
    }
    Ok(())
}
