//! Criterion micro-benches of the per-task steps outside routing and the ledger (those have
//! `benches/routing.rs` and `benches/ledger.rs`): envelope parse and serialise in both
//! dialects, session table lookups under contention, rate-limiter checks, the status store's
//! two writes per task.
//!
//! `cargo bench --bench hot_path` (quick: `cargo bench --bench hot_path -- --warm-up-time 1
//! --measurement-time 3`).

#[path = "support/sessions.rs"]
mod sessions;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use ldp_gateway::config::RateConfig;
use ldp_gateway::ldp::Envelope;
use ldp_gateway::limits::{KeyedRateLimit, RateLimit};
use ldp_gateway::session::SessionTable;
use sessions::new_session;
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The body fixture of `kind` from `file` (the interop tests' recorded bodies), in an
/// envelope as that dialect's peers send it.
fn envelope(file: &str, kind: &str) -> Vec<u8> {
    let path = format!("{}/tests/fixtures/{file}", env!("CARGO_MANIFEST_DIR"));
    let bodies: Vec<serde_json::Value> = std::fs::read_to_string(&path)
        .ok()
        .and_then(|s| serde_json::from_str(&s).ok())
        .unwrap_or_default();
    let body = bodies
        .into_iter()
        .find(|b| b["type"] == kind)
        .unwrap_or_else(|| serde_json::json!({"type": kind}));
    let env = serde_json::json!({
        "message_id": "5f0c1f7e-8a55-4b9e-9f5e-1d2c3b4a5e6f",
        "session_id": "6f0c1f7e-8a55-4b9e-9f5e-1d2c3b4a5e6f",
        "from": "ldp:delegate:client", "to": "ldp:delegate:gateway",
        "body": body, "payload_mode": "text", "timestamp": "2026-11-22T10:00:00.000000Z",
        "provenance": null,
    });
    serde_json::to_vec(&env).unwrap_or_default()
}

fn bench_envelopes(c: &mut Criterion) {
    let mut group = c.benchmark_group("envelope");
    for (dialect, file) in [("rfc", "rfc_bodies.json"), ("sdk", "reference_bodies.json")] {
        for kind in ["TASK_SUBMIT", "TASK_RESULT"] {
            let bytes = envelope(file, kind);
            let Ok(parsed) = Envelope::from_slice(&bytes) else {
                eprintln!("{file} {kind}: no usable fixture, skipped");
                continue;
            };
            group.throughput(Throughput::Bytes(bytes.len() as u64));
            let id = format!("{dialect}/{kind}");
            group.bench_with_input(BenchmarkId::new("parse", &id), &bytes, |b, bytes| {
                b.iter(|| Envelope::from_slice(black_box(bytes)))
            });
            group.bench_with_input(BenchmarkId::new("serialize", &id), &parsed, |b, env| {
                b.iter(|| black_box(env).to_vec())
            });
        }
    }
    // A task with a realistic payload: an 8 KiB JSON document as input, as Python clients
    // write it (", " and ": " separators). The gateway does not look inside it.
    let bytes = big_submit();
    if let Ok(parsed) = Envelope::from_slice(&bytes) {
        group.throughput(Throughput::Bytes(bytes.len() as u64));
        let id = "sdk/TASK_SUBMIT+8KiB";
        group.bench_with_input(BenchmarkId::new("parse", id), &bytes, |b, bytes| {
            b.iter(|| Envelope::from_slice(black_box(bytes)))
        });
        group.bench_with_input(BenchmarkId::new("serialize", id), &parsed, |b, env| {
            b.iter(|| black_box(env).to_vec())
        });
    }
    group.finish();
}

/// A TASK_SUBMIT whose input is about 8 KiB of JSON records.
fn big_submit() -> Vec<u8> {
    let records: Vec<String> = (0..64)
        .map(|i| {
            format!(
                r#"{{"id": {i}, "title": "Quarterly report section {i}", "tags": ["finance", "q3", "draft"], "score": 0.{i}5, "text": "Revenue grew in the period; costs were flat and margins improved across regions."}}"#
            )
        })
        .collect();
    format!(
        r#"{{"message_id": "m-1", "session_id": "s-1", "from": "client", "to": "gateway", "timestamp": "2026-11-22T10:00:00.000000Z", "payload_mode": "text", "body": {{"type": "TASK_SUBMIT", "task_id": "t-1", "skill": "summarize", "input": {{"instruction": "Summarise these records", "records": [{}]}}}}}}"#,
        records.join(", ")
    )
    .into_bytes()
}

/// `SessionTable::get` (the lookup every task starts with) over 10,000 open sessions, from
/// 1, 2 and 8 threads at once; the time is per lookup, across all threads.
fn bench_sessions(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build();
    let Ok(rt) = rt else { return };
    let _guard = rt.enter();
    let table = Arc::new(SessionTable::default());
    let keys: Arc<Vec<(String, String)>> = Arc::new(
        (0..10_000)
            .map(|i| {
                let s = table.open(new_session(i));
                (s.id.to_string(), s.owner.clone())
            })
            .collect(),
    );
    let mut group = c.benchmark_group("sessions/get");
    for threads in [1usize, 2, 8] {
        group.bench_function(BenchmarkId::from_parameter(threads), |b| {
            b.iter_custom(|iters| {
                let per = (iters as usize).div_ceil(threads);
                let start = Instant::now();
                std::thread::scope(|scope| {
                    for t in 0..threads {
                        let (table, keys) = (table.clone(), keys.clone());
                        scope.spawn(move || {
                            let mut rng = fastrand::Rng::with_seed(t as u64);
                            for _ in 0..per {
                                let (id, owner) = &keys[rng.usize(..keys.len())];
                                black_box(table.get(id, owner));
                            }
                        });
                    }
                });
                start.elapsed()
            })
        });
    }
    group.finish();
}

/// One admission check: a direct (per-tenant) limiter and a keyed (tenant × skill) one.
fn bench_limits(c: &mut Criterion) {
    let rate = RateConfig {
        rps: 1e9,
        burst: Some(1_000_000),
    };
    let (Some(direct), Some(keyed)) = (RateLimit::new(&rate), KeyedRateLimit::new(&rate)) else {
        return;
    };
    c.bench_function("limits/direct", |b| b.iter(|| black_box(direct.check())));
    let skills = ["summarize", "translate", "reasoning", "echo"];
    let mut i = 0usize;
    c.bench_function("limits/keyed", |b| {
        b.iter(|| {
            i = i.wrapping_add(1);
            black_box(keyed.check(skills[i % skills.len()]))
        })
    });
}

/// What a task costs the status store: `running` at admission and `done` with its answer,
/// into a store already full (so each write also evicts).
fn bench_status_store(c: &mut Criterion) {
    use ldp_gateway::ldp::{Body, Json, PayloadMode, TaskId};
    use ldp_gateway::recent::RecentTasks;
    let store = RecentTasks::new(Duration::from_secs(600), 4 * 1024 * 1024);
    let answer = Arc::new(Envelope::new(
        "6f0c1f7e-8a55-4b9e-9f5e-1d2c3b4a5e6f",
        "ldp:delegate:gateway",
        "ldp:delegate:client",
        Body::TaskResult {
            task_id: "t".into(),
            output: Json::from_value(&serde_json::json!("hello")),
            provenance: None,
        },
        PayloadMode::Text,
    ));
    let ids: Vec<TaskId> = (0..100_000)
        .map(|i| format!("5f0c1f7e-8a55-4b9e-9f5e-{i:012}").into())
        .collect();
    let session = "6f0c1f7e-8a55-4b9e-9f5e-1d2c3b4a5e6f";
    let mut i = 0;
    c.bench_function("status_store/running+done", |b| {
        b.iter(|| {
            let id = &ids[i % ids.len()];
            i += 1;
            store.running("acme", "ldp:delegate:client", id, session.into());
            store.done("acme", "ldp:delegate:client", id, Arc::clone(&answer));
        })
    });
}

criterion_group!(
    benches,
    bench_envelopes,
    bench_sessions,
    bench_limits,
    bench_status_store
);
criterion_main!(benches);
