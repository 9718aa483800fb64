//! The provenance ledger's cost, in one run: (b, measured first) the per-task latency through
//! a real gateway with `durability = "commit"`, `"fsync"` and `"async"`, interleaved, and what
//! commit adds over async; (a) the sustained insert rate and CPU per row of the batching
//! writer (commit and fsync, each without and with the journal in front, interleaved; async)
//! and of raw `Backend::insert` batches, against a temp-file SQLite; (c) commit latency while
//! admin reads and a large prune run beside the commits.
//! `cargo bench --bench ledger [-- ROWS [TASKS]]`; `cargo bench --bench ledger -- reads` runs (c)
//! alone.

use ldp_gateway::config::{Config, DelegateConfig};
use ldp_gateway::ldp::{Body, Envelope, IdentityCard, PayloadMode, SessionConfig};
use ldp_gateway::provenance::{
    open_journaled, Backend, Durability, JsonText, Ledger, LedgerHandle, LedgerRow, Outcome, Place,
    Query, SqliteBackend,
};
use ldp_gateway::server::Gateway;
use ldp_gateway::sim::{self, SimOptions};
use ldp_gateway::telemetry::Metrics;
use std::sync::atomic::{AtomicBool, Ordering};
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
    row_at(i, chrono::Utc::now())
}

/// The same, finished at `now`.
fn row_at(i: usize, now: chrono::DateTime<chrono::Utc>) -> LedgerRow {
    LedgerRow {
        ingress: ldp_gateway::provenance::Ingress::Ldp,
        task_id: format!("{:032x}", i),
        session_id: "6f0c1f7e-8a55-4b9e-9f5e-1d2c3b4a5e6f".into(),
        upstream_session_id: Some("1b2c3d4e-5f60-4718-9a2b-3c4d5e6f7a8b".into()),
        tenant: format!("tenant-{}", i % 8),
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
        votes: Vec::new(),
        trace_id: None,
        usage: None,
    }
}

fn sqlite(dir: &tempfile::TempDir, name: &str, d: Durability) -> anyhow::Result<SqliteBackend> {
    let path = dir.path().join(name).display().to_string();
    Ok(SqliteBackend::open(&path, d)?)
}

/// CPU time this process has used (user + system), from `/proc/self/stat`.
fn cpu_time() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The fields after the command name (which may hold spaces), from its closing paren.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or("", |(_, rest)| rest)
        .split_whitespace()
        .collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // utime and stime are fields 14 and 15 of the line (11 and 12 after the state field),
    // in clock ticks of 1/100 s on Linux.
    Duration::from_millis((ticks(11) + ticks(12)) * 10)
}

/// `rows` rows through the writer (with the journal in front when `journal`): `PRODUCERS`
/// concurrent callers (commit, fsync), or one caller and a queue that holds them all (async:
/// the writer's drain rate, nothing dropped). Returns the time until every row is committed,
/// the rows dropped, and the process's CPU time meanwhile.
async fn writer_run(
    dir: &tempfile::TempDir,
    d: Durability,
    journal: bool,
    rows: usize,
) -> anyhow::Result<(Duration, u64, Duration)> {
    static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let run = RUNS.fetch_add(1, Ordering::Relaxed);
    let name = format!("writer-{d:?}-{journal}-{run}.db");
    let backend = sqlite(dir, &name, d)?;
    let metrics = Arc::new(Metrics::new()?);
    let capacity = if d == Durability::Async { rows } else { 10_000 };
    let cpu = cpu_time();
    let ledger = if journal {
        let place = Place {
            dir: dir.path().to_owned(),
            prefix: format!("{name}."),
        };
        let opened = open_journaled(Box::new(backend), &place, false)?;
        Ledger::start_opened(opened, d, capacity, metrics.clone())
    } else {
        Ledger::start(Box::new(backend), d, capacity, metrics.clone())
    };
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
    let cpu = cpu_time().saturating_sub(cpu);
    let committed = metrics.ledger_rows.get();
    anyhow::ensure!(
        committed + dropped == rows as u64,
        "committed {committed} + dropped {dropped} != {rows}"
    );
    Ok((took, dropped, cpu))
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

/// Rows in each ledger of (c): `READS_OLD` older than the retention, as many recent.
const READS_OLD: usize = 100_000;
/// Concurrent producers in (c), each recording one row every `READS_PACE` (4,000 rows/s in
/// all: a busy gateway, well within the writer's rate, so that the phases write alike).
const READS_PRODUCERS: usize = 8;
const READS_PACE: Duration = Duration::from_millis(2);
/// Admin reads per kind in (c)'s read phase.
const READS_EACH: usize = 10;

/// A temp-file ledger holding `2 × READS_OLD` rows, the first half 40 days old.
fn filled(dir: &tempfile::TempDir, name: &str) -> anyhow::Result<SqliteBackend> {
    let mut b = sqlite(dir, name, Durability::Commit)?;
    let now = chrono::Utc::now();
    let old = now - chrono::Duration::days(40);
    for chunk in (0..2 * READS_OLD).collect::<Vec<_>>().chunks(RAW_BATCH) {
        let rows: Vec<LedgerRow> = chunk
            .iter()
            .map(|&i| row_at(i, if i < READS_OLD { old } else { now }))
            .collect();
        b.insert(&rows)?;
    }
    Ok(b)
}

/// Producers recording at their pace until `stop`; the latency of every `record`.
fn producers(
    h: &LedgerHandle,
    stop: &Arc<AtomicBool>,
) -> Vec<tokio::task::JoinHandle<Vec<Duration>>> {
    (0..READS_PRODUCERS)
        .map(|p| {
            let (h, stop) = (h.clone(), stop.clone());
            tokio::spawn(async move {
                let mut took = Vec::new();
                let mut i = 10_000_000 + p * 1_000_000;
                let mut pace = tokio::time::interval(READS_PACE);
                pace.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                while !stop.load(Ordering::Relaxed) {
                    pace.tick().await;
                    i += 1;
                    let t = Instant::now();
                    if h.record(row(i)).await.is_err() {
                        break;
                    }
                    took.push(t.elapsed());
                }
                took
            })
        })
        .collect()
}

async fn latencies(
    ps: Vec<tokio::task::JoinHandle<Vec<Duration>>>,
) -> anyhow::Result<Vec<Duration>> {
    let mut all = Vec::new();
    for p in ps {
        all.extend(p.await?);
    }
    all.sort();
    anyhow::ensure!(!all.is_empty(), "no commit measured");
    Ok(all)
}

fn latency_line(name: &str, v: &[Duration], note: &str) {
    println!(
        "{name:<28} {:>7} {:>9.2?} {:>9.2?} {:>9.2?} {:>9.2?}  {note}",
        v.len(),
        pct(v, 0.5),
        pct(v, 0.99),
        pct(v, 0.999),
        v[v.len() - 1],
    );
}

/// (c) Commit latency with admin reads and a prune beside it, each phase on its own
/// temp-file ledger of `2 × READS_OLD` rows, `READS_PRODUCERS` paced producers (commit
/// durability): (1) alone, (2) while two admin readers each run `READS_EACH` whole-ledger
/// `spend_since` scans and 10,000-row queries, (3) while `READS_OLD` old rows are pruned.
async fn reads_run(dir: &tempfile::TempDir) -> anyhow::Result<()> {
    let start = |name: &str| -> anyhow::Result<Ledger> {
        let metrics = Arc::new(Metrics::new()?);
        let b = filled(dir, name)?;
        Ok(Ledger::start(
            Box::new(b),
            Durability::Commit,
            10_000,
            metrics,
        ))
    };
    println!();
    println!(
        "commit latency beside admin reads and pruning: {} rows stored, {READS_PRODUCERS} \
         producers recording a row every {READS_PACE:?} each (commit), temp-file SQLite",
        2 * READS_OLD
    );
    println!(
        "{:<28} {:>7} {:>9} {:>9} {:>9} {:>9}",
        "phase", "commits", "p50", "p99", "p99.9", "max"
    );

    // (1) Alone.
    let ledger = start("alone.db")?;
    let h = ledger.handle();
    let stop = Arc::new(AtomicBool::new(false));
    let ps = producers(&h, &stop);
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop.store(true, Ordering::Relaxed);
    latency_line("commits alone (3 s)", &latencies(ps).await?, "");
    ledger.close(Duration::from_secs(60)).await;

    // (2) Beside admin reads.
    let ledger = start("reads.db")?;
    let h = ledger.handle();
    let stop = Arc::new(AtomicBool::new(false));
    let ps = producers(&h, &stop);
    let t = Instant::now();
    let scans = {
        let h = h.clone();
        tokio::spawn(async move {
            let mut took = Vec::new();
            for _ in 0..READS_EACH {
                let t = Instant::now();
                let spend = h.spend_since(0).await?;
                anyhow::ensure!(spend.len() == 8, "{spend:?}");
                took.push(t.elapsed());
            }
            anyhow::Ok(took)
        })
    };
    let pages = {
        let h = h.clone();
        tokio::spawn(async move {
            let mut took = Vec::new();
            for i in 0..READS_EACH {
                let q = Query {
                    tenant: Some(format!("tenant-{}", i % 8)),
                    limit: Some(10_000),
                    ..Query::default()
                };
                let t = Instant::now();
                let rows = h.query(q).await?;
                anyhow::ensure!(rows.len() == 10_000, "{} rows", rows.len());
                took.push(t.elapsed());
            }
            anyhow::Ok(took)
        })
    };
    let (mut scans, mut pages) = (scans.await??, pages.await??);
    let reads_took = t.elapsed();
    stop.store(true, Ordering::Relaxed);
    scans.sort();
    pages.sort();
    latency_line(
        "commits beside admin reads",
        &latencies(ps).await?,
        &format!(
            "{READS_EACH} spend scans (p50 {:.1?}) + {READS_EACH} 10k-row queries (p50 {:.1?}) in {reads_took:.2?}",
            pct(&scans, 0.5),
            pct(&pages, 0.5)
        ),
    );
    ledger.close(Duration::from_secs(60)).await;

    // (3) Beside a prune of the old half.
    let ledger = start("prune.db")?;
    let h = ledger.handle();
    let stop = Arc::new(AtomicBool::new(false));
    let ps = producers(&h, &stop);
    let t = Instant::now();
    let cutoff = (chrono::Utc::now() - chrono::Duration::days(30)).timestamp_millis();
    let pruned = h.prune(cutoff).await?;
    let prune_took = t.elapsed();
    stop.store(true, Ordering::Relaxed);
    anyhow::ensure!(pruned == READS_OLD as u64, "pruned {pruned}");
    latency_line(
        "commits beside a prune",
        &latencies(ps).await?,
        &format!("{pruned} rows pruned in {prune_took:.2?}"),
    );
    ledger.close(Duration::from_secs(60)).await;
    prune_batches(dir)
}

/// What one prune transaction costs by its size (the longest a commit can wait for pruning),
/// on a ledger of `2 × READS_OLD` rows.
fn prune_batches(dir: &tempfile::TempDir) -> anyhow::Result<()> {
    println!();
    println!("one prune transaction by its size (Backend::prune_batch, temp-file SQLite)");
    println!(
        "{:<10} {:>10} {:>10} {:>12}",
        "rows", "p50", "max", "rows/s"
    );
    let cutoff = (chrono::Utc::now() - chrono::Duration::days(30)).timestamp_millis();
    for (n, limit) in [250u64, 1_000, 4_000, 16_000].into_iter().enumerate() {
        let mut b = filled(dir, &format!("batches-{n}.db"))?;
        let mut took = Vec::new();
        let mut pruned = 0;
        while pruned < READS_OLD as u64 {
            let t = Instant::now();
            let n = b.prune_batch(cutoff, limit)?;
            took.push(t.elapsed());
            anyhow::ensure!(n > 0, "nothing left to prune at {pruned}");
            pruned += n;
        }
        let total: Duration = took.iter().sum();
        took.sort();
        println!(
            "{limit:<10} {:>10.2?} {:>10.2?} {}",
            pct(&took, 0.5),
            took[took.len() - 1],
            rate(pruned as usize, total)
        );
    }
    Ok(())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 4)]
async fn main() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    if std::env::args().skip(1).any(|a| a == "reads") {
        return reads_run(&dir).await;
    }
    let mut args = std::env::args().skip(1).filter_map(|a| a.parse().ok());
    let rows: usize = args.next().unwrap_or(200_000);
    let tasks: usize = args.next().unwrap_or(2_000);

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
        "{:<50} {:>12} {:>10} {:>8} {:>12}",
        "path (median of 3 interleaved runs)", "rows/s", "total", "dropped", "CPU µs/row"
    );
    let writers = [
        (
            "writer, commit (256 concurrent record)",
            Durability::Commit,
            false,
        ),
        (
            "writer, commit + journal (256 concurrent)",
            Durability::Commit,
            true,
        ),
        (
            "writer, fsync (256 concurrent record)",
            Durability::Fsync,
            false,
        ),
        (
            "writer, fsync + journal (256 concurrent)",
            Durability::Fsync,
            true,
        ),
        ("writer, async (queue holds all)", Durability::Async, false),
    ];
    let mut runs: Vec<Vec<(Duration, u64, Duration)>> = vec![Vec::new(); writers.len()];
    for _ in 0..3 {
        for (i, (_, d, journal)) in writers.iter().enumerate() {
            runs[i].push(writer_run(&dir, *d, *journal, rows).await?);
        }
    }
    for ((name, _, _), mut r) in writers.into_iter().zip(runs) {
        r.sort();
        let (took, dropped, cpu) = r[1];
        println!(
            "{name:<50} {} {:>10.2?} {dropped:>8} {:>12.1}",
            rate(rows, took),
            took,
            cpu.as_secs_f64() * 1e6 / rows as f64
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
    reads_run(&dir).await
}
