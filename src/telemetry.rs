//! Logging set-up and the one `Metrics` struct that owns every Prometheus collector.
//!
//! Names are part of the product contract (PRODUCT.md "Metrics"); dashboards in `grafana/`
//! query exactly these. Labels are bounded: tenant, skill, delegate, policy, outcome, reason,
//! scope, route, status — never a session or task id.

pub mod otel;

use prometheus::{
    Counter, CounterVec, Gauge, GaugeVec, Histogram, HistogramOpts, HistogramVec, IntCounter,
    IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
};

/// Installs the global subscriber once; later calls do nothing.
pub fn init() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}

/// Where a command that prints a report (the demo) sends its logs: to `file` when `rust_log`
/// (the `RUST_LOG` variable) is unset, so standard output and error carry the report alone;
/// `None` when `RUST_LOG` is set, which then says where they go (standard error, as [`init`]).
pub fn log_file_unless_rust_log(
    file: &std::path::Path,
    rust_log: Option<&std::ffi::OsStr>,
) -> Option<std::path::PathBuf> {
    rust_log.is_none().then(|| file.to_owned())
}

/// Installs the global subscriber once, at `info`, appending plain lines (no colours) to
/// `path`; later calls do nothing.
pub fn init_to_file(path: &std::path::Path) -> std::io::Result<()> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new("info"))
        .with_ansi(false)
        .with_writer(std::sync::Mutex::new(file))
        .try_init();
    Ok(())
}

/// Buckets for task durations: 1 ms … 2 min.
const TASK_BUCKETS: [f64; 16] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
];

/// Buckets for gateway overhead: 10 µs … 100 ms.
const OVERHEAD_BUCKETS: [f64; 12] = [
    0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1,
];

/// `gen_ai.client.token.usage` buckets, as the GenAI conventions (v1.37.0) advise:
/// <https://opentelemetry.io/docs/specs/semconv/gen-ai/gen-ai-metrics/#metric-gen_aiclienttokenusage>.
const GEN_AI_TOKEN_BUCKETS: [f64; 14] = [
    1.0, 4.0, 16.0, 64.0, 256.0, 1024.0, 4096.0, 16384.0, 65536.0, 262144.0, 1048576.0, 4194304.0,
    16777216.0, 67108864.0,
];

/// `gen_ai.client.operation.duration` buckets (seconds), as the GenAI conventions advise:
/// <https://opentelemetry.io/docs/specs/semconv/gen-ai/gen-ai-metrics/#metric-gen_aiclientoperationduration>.
const GEN_AI_DURATION_BUCKETS: [f64; 14] = [
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
];

/// `gen_ai_operation_name` values: an OpenAI-backed delegate's completion, an LDP or A2A
/// delegate's task.
pub const GEN_AI_OPERATIONS: [&str; 2] = ["chat", "invoke_agent"];

/// Reasons for an extra upstream attempt, as `ldp_gateway_fallbacks_total{reason}` counts them.
pub const FALLBACK_REASONS: [&str; 2] = ["payload_mode", "session_lost"];

/// Where a panic was caught, as `ldp_gateway_panics_total{where}` counts them: a task (its
/// hold and row settled, the client answered), one card poll (the poller goes on), a request
/// (answered with a generic 500).
pub const PANIC_PLACES: [&str; 3] = ["task", "card_poll", "request"];

/// How a client rated a task, as `ldp_gateway_feedback_total{outcome}` counts them (the
/// ledger's `provenance::Given`, pinned equal by its test).
pub const FEEDBACK_OUTCOMES: [&str; 3] = ["good", "bad", "score"];

/// How a verification round ended, as `ldp_gateway_verifications_total{result}` counts them:
/// the verifiers passed the result, voted it down, or none could vote (no independent
/// verifier eligible, or none answered).
pub const VERIFICATION_RESULTS: [&str; 3] = ["passed", "failed", "no_verifier"];

/// How a task ended, as `ldp_gateway_tasks_total{outcome}` counts it (the ledger's
/// `provenance::Outcome`).
pub const TASK_OUTCOMES: [&str; 2] = ["result", "failed"];

/// The front ends a task can come in through, as `ldp_gateway_tasks_total{ingress}` counts
/// them (the ledger's `provenance::Ingress`, pinned equal by its test).
pub const INGRESSES: [&str; 7] = ["ldp", "openai", "anthropic", "llmcp", "llmx", "ladp", "a2a"];

/// Why the ledger refused rows, as `ldp_gateway_ledger_shed_rows_total{reason}` counts them
/// (the ledger's `provenance::Backlog`, pinned equal by its test).
pub const LEDGER_SHED_REASONS: [&str; 2] = ["journal_full", "queue_full"];

/// How a policy reload ended, as `ldp_gateway_policy_reloads_total{result}` counts it.
pub const RELOAD_RESULTS: [&str; 2] = ["ok", "error"];

/// The scopes of `ldp_gateway_rate_limited_total{scope}` and
/// `ldp_gateway_rate_limit_local_fallbacks_total{scope}`.
pub const RATE_LIMIT_SCOPES: [&str; 6] = [
    "tenant",
    "tenant_skill",
    "policy",
    "delegate",
    "tenant_share",
    "ladp_agent",
];

/// The tenant-fair tables (`crate::fair`), as `ldp_gateway_table_*`'s `table` label.
pub const TABLES: [&str; 7] = [
    "task_status",
    "conversations",
    "a2a_tasks",
    "a2a_contexts",
    "ladp_rates",
    "ladp_book",
    "llmx_senders",
];

/// The `tenant_class` label of `ldp_gateway_table_*`: whether the tenants counted hold more
/// than their share of the table (the bound divided by the tenants holding entries).
pub const TENANT_CLASSES: [&str; 2] = ["over_share", "within_share"];

/// Most label sets [`Metrics::init_known`] visits per metric and call: label sets from the
/// configuration start at 0 up to this many (a huge fleet × tenants × policies does not flood
/// a scrape).
pub const MAX_INIT_SERIES: usize = 4096;

/// Most label sets [`Metrics::init_known`] visits over the process's life, every metric
/// together: label values that a delegate's card keeps changing cannot grow the exposition
/// without end (a series used by a task is created then, as always).
pub const MAX_KNOWN_SERIES_TOTAL: usize = 65_536;

/// What the configuration and the fleet say label values can be: their series are exported
/// at 0 before anything happens, so a dashboard panel has a series from the first scrape.
#[derive(Hash)]
pub struct Known<'a> {
    /// Tenant names.
    pub tenants: &'a [&'a str],
    /// Policy names.
    pub policies: &'a [&'a str],
    /// `(delegate, skill)` for each skill each delegate offers.
    pub offers: &'a [(&'a str, &'a str)],
    /// HTTP routes (their `200` series).
    pub routes: &'a [&'a str],
    /// Error codes of `ldp_gateway_errors_total`.
    pub error_codes: &'a [&'a str],
}

/// A caught panic's message (`panic!`'s text, if it was text).
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)")
}

/// Removes each series of `vec` whose `label` is `value` (the crate has no partial-match
/// removal: the series are listed and removed one by one; deregistration is rare).
fn forget<T: prometheus::core::MetricVecBuilder>(
    vec: &prometheus::core::MetricVec<T>,
    label: &str,
    value: &str,
) {
    use prometheus::core::Collector;
    for family in vec.collect() {
        for m in family.get_metric() {
            let labels: std::collections::HashMap<&str, &str> = m
                .get_label()
                .iter()
                .map(|l| (l.name(), l.value()))
                .collect();
            if labels.get(label) == Some(&value) {
                let _ = vec.remove(&labels);
            }
        }
    }
}

/// Every collector the gateway exports, registered once in its own registry.
pub struct Metrics {
    registry: Registry,
    /// Serialises scrapes: the per-delegate gauges are rebuilt for each one, and a second
    /// scrape must not render them half rebuilt.
    scrape: std::sync::Mutex<()>,
    /// What [`Metrics::init_known`] last saw (a hash) and how many label sets it has visited.
    known: std::sync::Mutex<(Option<u64>, usize)>,
    /// `ldp_gateway_tasks_total{tenant,skill,delegate,outcome,ingress}`.
    pub tasks: IntCounterVec,
    /// `ldp_gateway_task_duration_seconds{skill,delegate}`: client-observed task time.
    pub task_duration: HistogramVec,
    /// `ldp_gateway_cost_usd_total{tenant,skill,delegate,policy}`.
    pub cost_usd: CounterVec,
    /// `ldp_gateway_tokens_total{tenant,delegate}`.
    pub tokens: IntCounterVec,
    /// `ldp_gateway_routing_decisions_total{policy,delegate}`.
    pub routing_decisions: IntCounterVec,
    /// `ldp_gateway_fallbacks_total{reason}`.
    pub fallbacks: IntCounterVec,
    /// `ldp_gateway_rate_limited_total{scope}`.
    pub rate_limited: IntCounterVec,
    /// `ldp_gateway_delegate_up{delegate}`.
    pub delegate_up: IntGaugeVec,
    /// `ldp_gateway_delegate_latency_ewma_seconds{delegate}`: observed.
    pub delegate_latency_ewma: GaugeVec,
    /// `ldp_gateway_delegate_declared_latency_seconds{delegate,skill}`: the card's p50 hint.
    pub delegate_declared_latency: GaugeVec,
    /// `ldp_gateway_sessions_active`.
    pub sessions_active: IntGauge,
    /// `ldp_gateway_task_status_bytes`: what the status store's entries weigh (this
    /// replica's store; set at each scrape).
    pub task_status_bytes: IntGauge,
    /// `ldp_gateway_conversations_bytes`: conversation text kept for OpenAI-backed
    /// delegates, every session together (this replica's; set at each scrape).
    pub conversations_bytes: IntGauge,
    /// `ldp_gateway_conversations_evicted_total`: sessions' conversations dropped, least
    /// recently used first, to keep within `openai.memory_bytes`.
    pub conversations_evicted: IntCounter,
    /// `ldp_gateway_table_bytes{table,tenant_class}`: what each tenant-fair table holds, by
    /// the tenants over and within their share (this replica's tables; set at each scrape).
    pub table_bytes: IntGaugeVec,
    /// `ldp_gateway_table_evictions_total{table,tenant_class}`: entries evicted for room, by
    /// the class of the tenant that lost them (`within_share` stays 0: the guarantee).
    pub table_evictions: IntCounterVec,
    /// `ldp_gateway_table_refusals_total{table}`: new entries refused, their tenant's share
    /// full of running entries.
    pub table_refusals: IntCounterVec,
    /// `ldp_gateway_http_requests_total{route,status}`.
    pub http_requests: IntCounterVec,
    /// `ldp_gateway_errors_total{code}`: error answers (`{"error": …}`) by the low-cardinality
    /// code of `server::telling`.
    pub errors: IntCounterVec,
    /// `ldp_gateway_overhead_seconds`: task time minus upstream time.
    pub overhead: Histogram,
    /// `ldp_gateway_cost_discrepancies_total{delegate}`: reported and declared cost disagree.
    pub cost_discrepancies: IntCounterVec,
    /// `ldp_gateway_usage_clamped_total{delegate}`: an OpenAI-backed delegate reported more
    /// tokens than it could have used (charged within the bound instead).
    pub usage_clamped: IntCounterVec,
    /// `ldp_gateway_ledger_dropped_rows_total`: rows lost in `async` durability.
    pub ledger_dropped: IntCounter,
    /// `ldp_gateway_ledger_rows_total`: rows committed.
    pub ledger_rows: IntCounter,
    /// `ldp_gateway_ledger_queue_depth`.
    pub ledger_queue: IntGauge,
    /// `ldp_gateway_ledger_batches_total`: transactions committed (rows ÷ batches = group size).
    pub ledger_batches: IntCounter,
    /// `ldp_gateway_ledger_shed_rows_total{reason}`: rows refused because the store was too
    /// far behind (their results withheld): [`LEDGER_SHED_REASONS`].
    pub ledger_shed: IntCounterVec,
    /// `ldp_gateway_journal_damaged_records_total`: records found damaged in the journals
    /// adopted at start (their rows lost; every valid record around them replayed).
    pub journal_damaged: IntCounter,
    /// `ldp_gateway_policy_reloads_total{result}`: `ok` or `error`.
    pub policy_reloads: IntCounterVec,
    /// `ldp_gateway_policy_reload_failures_total`.
    pub policy_reload_failures: IntCounter,
    /// `ldp_gateway_build_info{version}` = 1.
    pub build_info: GaugeVec,
    /// `ldp_gateway_spend_usd_total`: every cost recorded, for a single total.
    pub spend_total: Counter,
    /// `ldp_gateway_up` = 1.
    pub up: Gauge,
    /// `ldp_gateway_redis_up`: 1 while the shared state answers (cluster mode).
    pub redis_up: IntGauge,
    /// `ldp_gateway_redis_calls_total{op}`: shared-state round trips.
    pub redis_calls: IntCounterVec,
    /// `ldp_gateway_redis_errors_total{op}`: round trips that failed or timed out.
    pub redis_errors: IntCounterVec,
    /// `ldp_gateway_rate_limit_local_fallbacks_total{scope}`: limits decided locally (limit ÷
    /// replicas) because the shared state did not answer.
    pub rate_limit_fallbacks: IntCounterVec,
    /// `ldp_gateway_openai_turns_dropped_total{reason}`: conversation turns forgotten for
    /// OpenAI-backed delegates (`context_window`, `memory_cap`).
    pub openai_turns_dropped: IntCounterVec,
    /// `ldp_gateway_feedback_total{outcome}`: ratings stored, by how they were given
    /// (`good`, `bad`, `score`).
    pub feedback: IntCounterVec,
    /// `ldp_gateway_verifications_total{policy,result}`: verification rounds, by how they
    /// ended ([`VERIFICATION_RESULTS`]).
    pub verifications: IntCounterVec,
    /// `ldp_gateway_delegate_quality{delegate,skill,source}`: quality as routing sees it
    /// (`declared`, `observed`, `blended`), set at each scrape.
    pub delegate_quality: GaugeVec,
    /// `ldp_gateway_panics_total{where}`: panics caught ([`PANIC_PLACES`]); any is a bug.
    pub panics: IntCounterVec,
    /// `ldp_gateway_verifier_reliability{delegate,skill}`: a verifier's learned reliability
    /// at a policy's verify skill (the weight of its vote), set at each scrape.
    pub verifier_reliability: GaugeVec,
    /// `ldp_gateway_otel_spans_dropped_total`: ended spans never exported (queue full, an
    /// export that failed or missed its deadline).
    pub otel_spans_dropped: IntCounter,
    /// `gen_ai_client_token_usage{gen_ai_operation_name, gen_ai_provider_name,
    /// gen_ai_request_model, gen_ai_token_type}`: tokens per call (the GenAI conventions').
    pub gen_ai_token_usage: HistogramVec,
    /// `gen_ai_client_operation_duration{gen_ai_operation_name, gen_ai_provider_name,
    /// gen_ai_request_model, error_type}`: seconds per call to a delegate.
    pub gen_ai_operation_duration: HistogramVec,
}

fn counter_vec(
    r: &Registry,
    name: &str,
    help: &str,
    labels: &[&str],
) -> Result<IntCounterVec, prometheus::Error> {
    let c = IntCounterVec::new(Opts::new(name, help), labels)?;
    r.register(Box::new(c.clone()))?;
    Ok(c)
}

fn gauge_vec(
    r: &Registry,
    name: &str,
    help: &str,
    labels: &[&str],
) -> Result<GaugeVec, prometheus::Error> {
    let g = GaugeVec::new(Opts::new(name, help), labels)?;
    r.register(Box::new(g.clone()))?;
    Ok(g)
}

impl Metrics {
    /// Builds and registers every collector.
    pub fn new() -> Result<Metrics, prometheus::Error> {
        let r = Registry::new();
        let tasks = counter_vec(
            &r,
            "ldp_gateway_tasks_total",
            "Task outcomes by tenant, skill, delegate, outcome (result, failed) and the front end \
             it came in through (ldp, openai, llmcp, llmx, ladp, a2a)",
            &["tenant", "skill", "delegate", "outcome", "ingress"],
        )?;
        let task_duration = HistogramVec::new(
            HistogramOpts::new(
                "ldp_gateway_task_duration_seconds",
                "Task time as the client sees it",
            )
            .buckets(TASK_BUCKETS.to_vec()),
            &["skill", "delegate"],
        )?;
        r.register(Box::new(task_duration.clone()))?;
        let cost_usd = CounterVec::new(
            Opts::new(
                "ldp_gateway_cost_usd_total",
                "Spend in USD by tenant, skill, delegate and policy",
            ),
            &["tenant", "skill", "delegate", "policy"],
        )?;
        r.register(Box::new(cost_usd.clone()))?;
        let tokens = counter_vec(
            &r,
            "ldp_gateway_tokens_total",
            "Tokens used by tenant and delegate",
            &["tenant", "delegate"],
        )?;
        let routing_decisions = counter_vec(
            &r,
            "ldp_gateway_routing_decisions_total",
            "Routing decisions by policy and chosen delegate",
            &["policy", "delegate"],
        )?;
        let fallbacks = counter_vec(
            &r,
            "ldp_gateway_fallbacks_total",
            "Upstream retries and fallbacks by reason",
            &["reason"],
        )?;
        let rate_limited = counter_vec(
            &r,
            "ldp_gateway_rate_limited_total",
            "Requests refused by a rate limit, by scope",
            &["scope"],
        )?;
        let delegate_up = IntGaugeVec::new(
            Opts::new(
                "ldp_gateway_delegate_up",
                "1 if the delegate's card was fetched at the last poll",
            ),
            &["delegate"],
        )?;
        r.register(Box::new(delegate_up.clone()))?;
        let delegate_latency_ewma = gauge_vec(
            &r,
            "ldp_gateway_delegate_latency_ewma_seconds",
            "Observed upstream latency (EWMA) per delegate",
            &["delegate"],
        )?;
        let delegate_declared_latency = gauge_vec(
            &r,
            "ldp_gateway_delegate_declared_latency_seconds",
            "Latency the delegate's card declares (p50 hint) per skill",
            &["delegate", "skill"],
        )?;
        let sessions_active = IntGauge::new("ldp_gateway_sessions_active", "Open client sessions")?;
        r.register(Box::new(sessions_active.clone()))?;
        let task_status_bytes = IntGauge::new(
            "ldp_gateway_task_status_bytes",
            "Bytes the status store's entries weigh (answers kept for status queries)",
        )?;
        r.register(Box::new(task_status_bytes.clone()))?;
        let conversations_bytes = IntGauge::new(
            "ldp_gateway_conversations_bytes",
            "Bytes of conversation kept for OpenAI-backed delegates, every session together",
        )?;
        r.register(Box::new(conversations_bytes.clone()))?;
        let table_bytes = IntGaugeVec::new(
            Opts::new(
                "ldp_gateway_table_bytes",
                "Bytes each tenant-fair table holds, by the tenants over and within their share",
            ),
            &["table", "tenant_class"],
        )?;
        r.register(Box::new(table_bytes.clone()))?;
        let table_evictions = counter_vec(
            &r,
            "ldp_gateway_table_evictions_total",
            "Entries a tenant-fair table evicted for room, by the class of the tenant that lost them",
            &["table", "tenant_class"],
        )?;
        let table_refusals = counter_vec(
            &r,
            "ldp_gateway_table_refusals_total",
            "New entries a tenant-fair table refused, their tenant's share full of running entries",
            &["table"],
        )?;
        for table in TABLES {
            table_refusals.with_label_values(&[table]);
            for class in TENANT_CLASSES {
                table_bytes.with_label_values(&[table, class]);
                table_evictions.with_label_values(&[table, class]);
            }
        }
        let conversations_evicted = IntCounter::new(
            "ldp_gateway_conversations_evicted_total",
            "Sessions' conversations dropped (least recently used first) to stay within openai.memory_bytes",
        )?;
        r.register(Box::new(conversations_evicted.clone()))?;
        let http_requests = counter_vec(
            &r,
            "ldp_gateway_http_requests_total",
            "HTTP requests on the LDP listener by route and status",
            &["route", "status"],
        )?;
        let errors = counter_vec(
            &r,
            "ldp_gateway_errors_total",
            "Error answers on the LDP and admin listeners by code",
            &["code"],
        )?;
        let overhead = Histogram::with_opts(
            HistogramOpts::new(
                "ldp_gateway_overhead_seconds",
                "Time the gateway adds to a task (total minus upstream)",
            )
            .buckets(OVERHEAD_BUCKETS.to_vec()),
        )?;
        r.register(Box::new(overhead.clone()))?;
        let cost_discrepancies = counter_vec(
            &r,
            "ldp_gateway_cost_discrepancies_total",
            "Results whose reported cost differs from the declared price beyond the configured ratio",
            &["delegate"],
        )?;
        let usage_clamped = counter_vec(
            &r,
            "ldp_gateway_usage_clamped_total",
            "Completions whose reported token usage exceeded what the request allowed (charged within the bound)",
            &["delegate"],
        )?;
        let ledger_dropped = IntCounter::new(
            "ldp_gateway_ledger_dropped_rows_total",
            "Provenance rows lost (async durability: queue overflow or shutdown)",
        )?;
        r.register(Box::new(ledger_dropped.clone()))?;
        let ledger_rows =
            IntCounter::new("ldp_gateway_ledger_rows_total", "Provenance rows committed")?;
        r.register(Box::new(ledger_rows.clone()))?;
        let ledger_queue = IntGauge::new(
            "ldp_gateway_ledger_queue_depth",
            "Provenance rows waiting for the writer",
        )?;
        r.register(Box::new(ledger_queue.clone()))?;
        let ledger_batches = IntCounter::new(
            "ldp_gateway_ledger_batches_total",
            "Provenance batches committed (one transaction each)",
        )?;
        r.register(Box::new(ledger_batches.clone()))?;
        let ledger_shed = counter_vec(
            &r,
            "ldp_gateway_ledger_shed_rows_total",
            "Provenance rows refused (their results withheld) because the store was too far behind: journal full, or queue full",
            &["reason"],
        )?;
        for reason in LEDGER_SHED_REASONS {
            ledger_shed.with_label_values(&[reason]);
        }
        let journal_damaged = IntCounter::new(
            "ldp_gateway_journal_damaged_records_total",
            "Ledger journal records found damaged at start (their rows lost; the valid records around them replayed)",
        )?;
        r.register(Box::new(journal_damaged.clone()))?;
        let policy_reloads = counter_vec(
            &r,
            "ldp_gateway_policy_reloads_total",
            "Policy reloads by result",
            &["result"],
        )?;
        let policy_reload_failures = IntCounter::new(
            "ldp_gateway_policy_reload_failures_total",
            "Policy reloads refused because a file had problems (the old set stayed)",
        )?;
        r.register(Box::new(policy_reload_failures.clone()))?;
        let build_info = gauge_vec(
            &r,
            "ldp_gateway_build_info",
            "Build information",
            &["version"],
        )?;
        build_info
            .with_label_values(&[env!("CARGO_PKG_VERSION")])
            .set(1.0);
        let spend_total = Counter::new("ldp_gateway_spend_usd_total", "All spend in USD")?;
        r.register(Box::new(spend_total.clone()))?;
        // Known label values start at zero, so dashboards show a flat line, not "no data".
        for scope in RATE_LIMIT_SCOPES {
            rate_limited.with_label_values(&[scope]);
        }
        for result in RELOAD_RESULTS {
            policy_reloads.with_label_values(&[result]);
        }
        for reason in FALLBACK_REASONS {
            fallbacks.with_label_values(&[reason]);
        }
        let up = Gauge::new("ldp_gateway_up", "1 while the gateway runs")?;
        r.register(Box::new(up.clone()))?;
        up.set(1.0);
        let redis_up = IntGauge::new(
            "ldp_gateway_redis_up",
            "1 while the shared state (Redis) answers; cluster mode only",
        )?;
        r.register(Box::new(redis_up.clone()))?;
        let redis_calls = counter_vec(
            &r,
            "ldp_gateway_redis_calls_total",
            "Shared-state (Redis) round trips by operation",
            &["op"],
        )?;
        let redis_errors = counter_vec(
            &r,
            "ldp_gateway_redis_errors_total",
            "Shared-state (Redis) round trips that failed or missed their deadline",
            &["op"],
        )?;
        let rate_limit_fallbacks = counter_vec(
            &r,
            "ldp_gateway_rate_limit_local_fallbacks_total",
            "Rate-limit decisions made locally (limit divided by replicas) while Redis was unreachable",
            &["scope"],
        )?;
        for scope in RATE_LIMIT_SCOPES {
            rate_limit_fallbacks.with_label_values(&[scope]);
        }
        let openai_turns_dropped = counter_vec(
            &r,
            "ldp_gateway_openai_turns_dropped_total",
            "Conversation turns forgotten for OpenAI-backed delegates (oldest first), by reason",
            &["reason"],
        )?;
        for reason in ["context_window", "memory_cap"] {
            openai_turns_dropped.with_label_values(&[reason]);
        }
        let feedback = counter_vec(
            &r,
            "ldp_gateway_feedback_total",
            "Client ratings of tasks stored, by how they were given (good, bad, score)",
            &["outcome"],
        )?;
        for outcome in FEEDBACK_OUTCOMES {
            feedback.with_label_values(&[outcome]);
        }
        let verifications = counter_vec(
            &r,
            "ldp_gateway_verifications_total",
            "Verification rounds by policy and result (passed, failed, no_verifier)",
            &["policy", "result"],
        )?;
        let delegate_quality = gauge_vec(
            &r,
            "ldp_gateway_delegate_quality",
            "Delegate quality per skill: declared by its card, observed from votes and ratings, and the blend routing uses",
            &["delegate", "skill", "source"],
        )?;
        let panics = counter_vec(
            &r,
            "ldp_gateway_panics_total",
            "Panics caught (a bug, logged with its message), by where: task, card_poll, request",
            &["where"],
        )?;
        for place in PANIC_PLACES {
            panics.with_label_values(&[place]);
        }
        let verifier_reliability = gauge_vec(
            &r,
            "ldp_gateway_verifier_reliability",
            "A verifier's learned reliability at a verify skill (card claim as prior; calibration, agreement, trusted ratings): the weight of its vote",
            &["delegate", "skill"],
        )?;
        let otel_spans_dropped = IntCounter::new(
            "ldp_gateway_otel_spans_dropped_total",
            "Trace spans never exported: the export queue was full, or an export failed or missed its deadline",
        )?;
        r.register(Box::new(otel_spans_dropped.clone()))?;
        let gen_ai_token_usage = HistogramVec::new(
            HistogramOpts::new(
                "gen_ai_client_token_usage",
                "Tokens used per delegate call (GenAI conventions), by operation, provider, declared model and token type",
            )
            .buckets(GEN_AI_TOKEN_BUCKETS.to_vec()),
            &[
                "gen_ai_operation_name",
                "gen_ai_provider_name",
                "gen_ai_request_model",
                "gen_ai_token_type",
            ],
        )?;
        r.register(Box::new(gen_ai_token_usage.clone()))?;
        let gen_ai_operation_duration = HistogramVec::new(
            HistogramOpts::new(
                "gen_ai_client_operation_duration",
                "Seconds per delegate call (GenAI conventions), by operation, provider, declared model and error type",
            )
            .buckets(GEN_AI_DURATION_BUCKETS.to_vec()),
            &[
                "gen_ai_operation_name",
                "gen_ai_provider_name",
                "gen_ai_request_model",
                "error_type",
            ],
        )?;
        r.register(Box::new(gen_ai_operation_duration.clone()))?;
        Ok(Metrics {
            registry: r,
            tasks,
            task_duration,
            cost_usd,
            tokens,
            routing_decisions,
            fallbacks,
            rate_limited,
            delegate_up,
            delegate_latency_ewma,
            delegate_declared_latency,
            sessions_active,
            task_status_bytes,
            conversations_bytes,
            conversations_evicted,
            table_bytes,
            table_evictions,
            table_refusals,
            http_requests,
            errors,
            overhead,
            cost_discrepancies,
            usage_clamped,
            ledger_dropped,
            ledger_rows,
            ledger_queue,
            ledger_batches,
            ledger_shed,
            journal_damaged,
            policy_reloads,
            policy_reload_failures,
            build_info,
            spend_total,
            up,
            redis_up,
            redis_calls,
            redis_errors,
            rate_limit_fallbacks,
            openai_turns_dropped,
            feedback,
            verifications,
            delegate_quality,
            panics,
            verifier_reliability,
            otel_spans_dropped,
            gen_ai_token_usage,
            gen_ai_operation_duration,
            scrape: std::sync::Mutex::new(()),
            known: std::sync::Mutex::new((None, 0)),
        })
    }

    /// Sets `table`'s series (one of [`TABLES`]) from its figures: the bytes, and the
    /// counters brought up to the table's own totals.
    pub fn table(&self, table: &str, stats: &crate::fair::TableStats) {
        let bytes = [
            ("over_share", stats.bytes_over_share),
            ("within_share", stats.bytes_within_share),
        ];
        for (class, b) in bytes {
            self.table_bytes
                .with_label_values(&[table, class])
                .set(i64::try_from(b).unwrap_or(i64::MAX));
        }
        let catch_up = |c: IntCounter, total: u64| {
            if let Some(d) = total.checked_sub(c.get()).filter(|d| *d > 0) {
                c.inc_by(d);
            }
        };
        let evicted = [
            ("over_share", stats.evicted_over_share),
            ("within_share", stats.evicted_within_share),
        ];
        for (class, n) in evicted {
            catch_up(self.table_evictions.with_label_values(&[table, class]), n);
        }
        catch_up(
            self.table_refusals.with_label_values(&[table]),
            stats.refused,
        );
    }

    /// One call to a delegate in the GenAI histograms: `operation` one of
    /// [`GEN_AI_OPERATIONS`], `provider` and `model` from the configuration (never from an
    /// answer: bounded), `error` the failure's reason code (empty for a success), and the
    /// input and output tokens when the delegate reported them.
    pub fn gen_ai_call(
        &self,
        operation: &str,
        provider: &str,
        model: &str,
        error: &str,
        took: std::time::Duration,
        tokens: Option<(u64, u64)>,
    ) {
        self.gen_ai_operation_duration
            .with_label_values(&[operation, provider, model, error])
            .observe(took.as_secs_f64());
        if let Some((input, output)) = tokens {
            for (kind, n) in [("input", input), ("output", output)] {
                self.gen_ai_token_usage
                    .with_label_values(&[operation, provider, model, kind])
                    .observe(n as f64);
            }
        }
    }

    /// Creates at 0 the GenAI series of a configured delegate's calls (successes; an
    /// OpenAI-backed one's tokens too), so its panels have data before traffic.
    pub fn gen_ai_known(&self, operation: &str, provider: &str, model: &str) {
        self.gen_ai_operation_duration
            .with_label_values(&[operation, provider, model, ""]);
        if operation == "chat" {
            for kind in ["input", "output"] {
                self.gen_ai_token_usage
                    .with_label_values(&[operation, provider, model, kind]);
            }
        }
    }

    /// Renders after `refresh` has set the per-delegate gauges anew: they are cleared first,
    /// so a delegate that left, or a skill its card no longer lists, has no series.
    pub fn render_with(&self, refresh: impl FnOnce(&Metrics)) -> String {
        let _one_at_a_time = self.scrape.lock();
        self.delegate_up.reset();
        self.delegate_latency_ewma.reset();
        self.delegate_declared_latency.reset();
        self.delegate_quality.reset();
        self.verifier_reliability.reset();
        refresh(self);
        self.render()
    }

    /// Creates, at 0, the series of every label set `known` allows (each metric up to
    /// [`MAX_INIT_SERIES`]): tasks, durations, spend, tokens, routing decisions and
    /// verifications by the configured tenants, policies and offered skills, the routes'
    /// `200`, every error code. Existing series keep their counts.
    /// Nothing is done when `known` is what the last call saw (each scrape calls it), nor once
    /// [`MAX_KNOWN_SERIES_TOTAL`] label sets have been visited.
    pub fn init_known(&self, known: &Known<'_>) {
        use std::hash::{Hash as _, Hasher as _};
        let mut h = std::hash::DefaultHasher::new();
        known.hash(&mut h);
        let seen = h.finish();
        let mut state = self
            .known
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if state.0 == Some(seen) || state.1 >= MAX_KNOWN_SERIES_TOTAL {
            return;
        }
        state.0 = Some(seen);
        fn each<'a>(
            visited: &std::cell::Cell<usize>,
            sets: impl Iterator<Item = Vec<&'a str>>,
            mut init: impl FnMut(&[&'a str]),
        ) {
            for labels in sets.take(MAX_INIT_SERIES) {
                if visited.get() >= MAX_KNOWN_SERIES_TOTAL {
                    return;
                }
                visited.set(visited.get() + 1);
                init(&labels);
            }
        }
        let visited = std::cell::Cell::new(state.1);
        let Known {
            tenants,
            policies,
            offers,
            routes,
            error_codes,
        } = *known;
        let mut delegates: Vec<&str> = offers.iter().map(|(d, _)| *d).collect();
        delegates.sort_unstable();
        delegates.dedup();
        let t_offers = || {
            tenants
                .iter()
                .flat_map(move |t| offers.iter().map(move |(d, s)| (*t, *d, *s)))
        };
        each(
            &visited,
            t_offers().flat_map(|(t, d, s)| {
                TASK_OUTCOMES
                    .iter()
                    .flat_map(move |o| INGRESSES.iter().map(move |i| vec![t, s, d, *o, *i]))
            }),
            |l| {
                self.tasks.with_label_values(l);
            },
        );
        each(
            &visited,
            t_offers().flat_map(|(t, d, s)| policies.iter().map(move |p| vec![t, s, d, *p])),
            |l| {
                self.cost_usd.with_label_values(l);
            },
        );
        each(&visited, offers.iter().map(|(d, s)| vec![*s, *d]), |l| {
            self.task_duration.with_label_values(l);
        });
        each(
            &visited,
            tenants
                .iter()
                .flat_map(|t| delegates.iter().map(move |d| vec![*t, *d])),
            |l| {
                self.tokens.with_label_values(l);
            },
        );
        each(
            &visited,
            policies
                .iter()
                .flat_map(|p| delegates.iter().map(move |d| vec![*p, *d])),
            |l| {
                self.routing_decisions.with_label_values(l);
            },
        );
        each(
            &visited,
            policies
                .iter()
                .flat_map(|p| VERIFICATION_RESULTS.iter().map(move |r| vec![*p, *r])),
            |l| {
                self.verifications.with_label_values(l);
            },
        );
        each(&visited, routes.iter().map(|r| vec![*r, "200"]), |l| {
            self.http_requests.with_label_values(l);
        });
        each(&visited, error_codes.iter().map(|c| vec![*c]), |l| {
            self.errors.with_label_values(l);
        });
        state.1 = visited.get();
    }

    /// Counts and logs a panic caught at `place` (one of [`PANIC_PLACES`]).
    pub fn panicked(&self, place: &'static str, payload: &(dyn std::any::Any + Send)) {
        self.panics.with_label_values(&[place]).inc();
        tracing::error!(
            place,
            panic = panic_message(payload),
            "a panic was caught (a bug)"
        );
    }

    /// Removes every series labelled with delegate `name` (it was deregistered).
    pub fn forget_delegate(&self, name: &str) {
        forget(&self.tasks, "delegate", name);
        forget(&self.task_duration, "delegate", name);
        forget(&self.cost_usd, "delegate", name);
        forget(&self.tokens, "delegate", name);
        forget(&self.routing_decisions, "delegate", name);
        forget(&self.cost_discrepancies, "delegate", name);
        forget(&self.usage_clamped, "delegate", name);
        forget(&self.delegate_up, "delegate", name);
        forget(&self.delegate_quality, "delegate", name);
        forget(&self.delegate_latency_ewma, "delegate", name);
        forget(&self.delegate_declared_latency, "delegate", name);
    }

    /// The Prometheus text exposition of every collector.
    pub fn render(&self) -> String {
        let mut buf = String::new();
        let encoder = prometheus::TextEncoder::new();
        if let Err(e) = encoder.encode_utf8(&self.registry.gather(), &mut buf) {
            tracing::error!(error = %e, "metrics encoding failed");
        }
        buf
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_logs_to_its_file_unless_rust_log_is_set() {
        let file = std::path::Path::new("/tmp/x/gateway.log");
        assert_eq!(log_file_unless_rust_log(file, None), Some(file.to_owned()));
        let set = std::ffi::OsStr::new("debug");
        assert_eq!(log_file_unless_rust_log(file, Some(set)), None);
    }

    #[test]
    fn known_label_sets_start_at_zero_bounded_and_keep_their_counts() {
        let m = Metrics::new().unwrap();
        let fresh = m.render();
        for line in [
            "ldp_gateway_policy_reloads_total{result=\"error\"} 0",
            "ldp_gateway_rate_limit_local_fallbacks_total{scope=\"tenant\"} 0",
            "ldp_gateway_feedback_total{outcome=\"bad\"} 0",
        ] {
            assert!(fresh.contains(line), "{line} in\n{fresh}");
        }
        m.tasks
            .with_label_values(&["acme", "s", "d", "result", "ldp"])
            .inc();
        let offers: Vec<(String, String)> = (0..100)
            .map(|i| (format!("d{i}"), "s".to_owned()))
            .collect();
        let offers: Vec<(&str, &str)> = offers
            .iter()
            .map(|(d, s)| (d.as_str(), s.as_str()))
            .collect();
        let tenants: Vec<String> = (0..30).map(|i| format!("t{i}")).collect();
        let mut tenants: Vec<&str> = tenants.iter().map(String::as_str).collect();
        tenants.push("acme");
        let known = Known {
            tenants: &tenants,
            policies: &["balanced", "cheapest"],
            offers: &[("d", "s")],
            routes: &["/ldp/messages"],
            error_codes: &["bad_request"],
        };
        m.init_known(&known);
        let text = m.render();
        for line in [
            "ldp_gateway_tasks_total{delegate=\"d\",ingress=\"ldp\",outcome=\"result\",skill=\"s\",tenant=\"acme\"} 1",
            "ldp_gateway_tasks_total{delegate=\"d\",ingress=\"a2a\",outcome=\"failed\",skill=\"s\",tenant=\"acme\"} 0",
            "ldp_gateway_cost_usd_total{delegate=\"d\",policy=\"cheapest\",skill=\"s\",tenant=\"t3\"} 0",
            "ldp_gateway_task_duration_seconds_count{delegate=\"d\",skill=\"s\"} 0",
            "ldp_gateway_routing_decisions_total{delegate=\"d\",policy=\"balanced\"} 0",
            "ldp_gateway_verifications_total{policy=\"cheapest\",result=\"no_verifier\"} 0",
            "ldp_gateway_http_requests_total{route=\"/ldp/messages\",status=\"200\"} 0",
            "ldp_gateway_errors_total{code=\"bad_request\"} 0",
        ] {
            assert!(text.contains(line), "{line} in\n{text}");
        }
        // 31 tenants x 100 offers x 2 policies = 6200 label sets: capped (the 62 of the first
        // call among them).
        m.init_known(&Known {
            offers: &offers,
            ..known
        });
        let spend = m
            .render()
            .lines()
            .filter(|l| l.starts_with("ldp_gateway_cost_usd_total{"))
            .count();
        assert!(
            (MAX_INIT_SERIES..=MAX_INIT_SERIES + 62).contains(&spend),
            "{spend}"
        );
        // A fleet whose skill names keep changing: no more series once the lifetime budget
        // is spent, however many scrapes see new names.
        let lines = || m.render().lines().count();
        for round in 0..10 {
            let names: Vec<String> = (0..100).map(|i| format!("s{round}-{i}")).collect();
            let rotated: Vec<(&str, &str)> = names.iter().map(|n| ("d", n.as_str())).collect();
            m.init_known(&Known {
                offers: &rotated,
                ..known
            });
        }
        let before = lines();
        let names: Vec<String> = (0..100).map(|i| format!("late-{i}")).collect();
        let rotated: Vec<(&str, &str)> = names.iter().map(|n| ("d", n.as_str())).collect();
        m.init_known(&Known {
            offers: &rotated,
            ..known
        });
        assert_eq!(lines(), before, "the lifetime budget is spent");
    }
}
