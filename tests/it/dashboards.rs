//! The Grafana dashboards in `grafana/dashboards/` against the gateway they describe.
//!
//! Two checks:
//! - `dashboards_query_only_exported_metrics` (always runs): every dashboard parses, every panel
//!   has a PromQL target on the provisioned datasource, and every metric name an expression
//!   uses is one the gateway exports — a typo fails here even without Prometheus.
//! - `every_panel_returns_series_from_a_real_prometheus`: simulated delegates, a gateway, ~100
//!   tasks over two skills and three policies, a real Prometheus scraping the admin `/metrics`
//!   every second, then every panel's expression evaluated through Prometheus' HTTP API; any
//!   expression with no series fails the test. It needs the `prometheus` binary
//!   (`LDP_PROMETHEUS_BIN`, else `prometheus` on PATH) and is skipped without one, unless
//!   `LDP_DASHBOARDS_REQUIRED=1` (set by `.ci/run`). Run with `--nocapture` to see one line
//!   per panel target: `dashboard / panel title: N series`.
//!
//! The dashboards use `[5m]` windows and Grafana's `$__range`; a run lasts seconds, so before
//! evaluating, the test rewrites `[5m]` → `[30s]`, `$__rate_interval` → `30s` and
//! `$__range` → `1m` (see [`concrete`]). Nothing else in an expression is changed.

use crate::support::process::Running;
use crate::support::{sim, Card, TestGateway};
use ldp_gateway::ldp::IdentityCard;
use ldp_gateway::sim::{SimHandle, SimOptions};
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const DASHBOARDS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/grafana/dashboards");
const TELEMETRY_RS: &str = include_str!("../../src/telemetry.rs");
/// The uid variable every panel's datasource names (a `datasource`-type template variable).
const DS_VARIABLE: &str = "DS_PROMETHEUS";

/// Metrics the issue asks the dashboards to cover; each must appear in some expression.
const REQUIRED: &[&str] = &[
    "ldp_gateway_tasks_total",
    "ldp_gateway_task_duration_seconds",
    "ldp_gateway_cost_usd_total",
    "ldp_gateway_tokens_total",
    "ldp_gateway_routing_decisions_total",
    "ldp_gateway_fallbacks_total",
    "ldp_gateway_rate_limited_total",
    "ldp_gateway_delegate_up",
    "ldp_gateway_delegate_latency_ewma_seconds",
    "ldp_gateway_delegate_declared_latency_seconds",
    "ldp_gateway_sessions_active",
    "ldp_gateway_http_requests_total",
    "ldp_gateway_overhead_seconds",
    "ldp_gateway_cost_discrepancies_total",
    "ldp_gateway_delegate_quality",
    "ldp_gateway_verifications_total",
];

/// One PromQL target of one panel.
struct Target {
    dashboard: String,
    panel: String,
    ref_id: String,
    expr: String,
}

impl Target {
    fn label(&self, multi: bool) -> String {
        if multi {
            format!("{} / {} [{}]", self.dashboard, self.panel, self.ref_id)
        } else {
            format!("{} / {}", self.dashboard, self.panel)
        }
    }
}

/// Every `*.json` in `grafana/dashboards`, by file stem, sorted.
fn dashboards() -> Vec<(String, Value)> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(DASHBOARDS)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).unwrap();
            let v: Value = serde_json::from_str(&text)
                .unwrap_or_else(|e| panic!("{}: not JSON: {e}", p.display()));
            let stem = p.file_stem().unwrap().to_string_lossy().into_owned();
            (stem, v)
        })
        .collect()
}

/// Panels of a dashboard, including those folded into collapsed rows.
fn panels(board: &Value) -> Vec<&Value> {
    let mut out = Vec::new();
    for p in board["panels"].as_array().into_iter().flatten() {
        out.push(p);
        out.extend(p["panels"].as_array().into_iter().flatten());
    }
    out
}

/// Every target of every non-row panel, checking the dashboard's shape on the way; returns
/// the targets and every problem found.
fn targets_of(name: &str, board: &Value) -> (Vec<Target>, Vec<String>) {
    let mut problems = Vec::new();
    let mut targets = Vec::new();
    if board["uid"].as_str().is_none_or(str::is_empty) {
        problems.push(format!("{name}: no uid"));
    }
    if board["title"].as_str().is_none_or(str::is_empty) {
        problems.push(format!("{name}: no title"));
    }
    let has_ds_variable = board["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|v| {
            v["name"] == DS_VARIABLE && v["type"] == "datasource" && v["query"] == "prometheus"
        });
    if !has_ds_variable {
        problems.push(format!(
            "{name}: no `{DS_VARIABLE}` datasource variable of type prometheus"
        ));
    }
    let ds_uid = format!("${{{DS_VARIABLE}}}");
    let mut ids = BTreeSet::new();
    let mut titles = BTreeSet::new();
    for p in panels(board) {
        let title = p["title"].as_str().unwrap_or("").to_owned();
        if !ids.insert(p["id"].as_u64().unwrap_or(0)) {
            problems.push(format!("{name} / {title}: duplicate or missing panel id"));
        }
        if p["type"] == "row" {
            continue;
        }
        if title.is_empty() {
            problems.push(format!("{name}: a panel has no title"));
        } else if !titles.insert(title.clone()) {
            problems.push(format!("{name} / {title}: two panels have this title"));
        }
        if p["datasource"]["uid"] != ds_uid.as_str() {
            problems.push(format!("{name} / {title}: datasource is not {ds_uid}"));
        }
        let ts = p["targets"].as_array().map(Vec::as_slice).unwrap_or(&[]);
        if ts.is_empty() {
            problems.push(format!("{name} / {title}: no targets"));
        }
        for t in ts {
            let expr = t["expr"].as_str().unwrap_or("").trim().to_owned();
            let ref_id = t["refId"].as_str().unwrap_or("").to_owned();
            if expr.is_empty() {
                problems.push(format!("{name} / {title} [{ref_id}]: empty expr"));
                continue;
            }
            targets.push(Target {
                dashboard: name.to_owned(),
                panel: title.clone(),
                ref_id,
                expr,
            });
        }
    }
    (targets, problems)
}

/// All targets of all dashboards; panics on any shape problem.
fn all_targets() -> Vec<Target> {
    let mut targets = Vec::new();
    let mut problems = Vec::new();
    let boards = dashboards();
    assert!(
        boards.len() >= 3,
        "expected the cost, latency and routing dashboards"
    );
    for (name, board) in &boards {
        let (t, p) = targets_of(name, board);
        targets.extend(t);
        problems.extend(p);
    }
    assert!(
        problems.is_empty(),
        "dashboard problems:\n{}",
        problems.join("\n")
    );
    targets
}

/// Metric names an expression refers to (`ldp_gateway_…`), with histogram series suffixes
/// (`_bucket`, `_sum`, `_count`) taken off.
fn metric_names(expr: &str) -> BTreeSet<String> {
    const PREFIX: &str = "ldp_gateway_";
    let bytes = expr.as_bytes();
    let word = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_';
    let mut out = BTreeSet::new();
    let mut from = 0;
    while let Some(i) = expr[from..].find(PREFIX).map(|i| i + from) {
        let mut end = i + PREFIX.len();
        while end < bytes.len() && word(bytes[end]) {
            end += 1;
        }
        if i == 0 || !(word(bytes[i - 1]) || bytes[i - 1].is_ascii_uppercase()) {
            let name = &expr[i..end];
            let base = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| name.strip_suffix(s))
                .unwrap_or(name);
            out.insert(base.to_owned());
        }
        from = end;
    }
    out
}

/// The expression as the test evaluates it: windows shortened to what a seconds-long run has.
fn concrete(expr: &str) -> String {
    expr.replace("[5m]", "[30s]")
        .replace("$__rate_interval", "30s")
        .replace("${__range}", "1m")
        .replace("$__range", "1m")
}

#[test]
fn metric_names_are_extracted_without_histogram_suffixes() {
    let names = metric_names(
        "histogram_quantile(0.9, sum by (le) (rate(ldp_gateway_task_duration_seconds_bucket[5m])))\n\
         / sum(rate(ldp_gateway_overhead_seconds_sum[5m])) + ldp_gateway_up",
    );
    let names: Vec<_> = names.iter().map(String::as_str).collect();
    assert_eq!(
        names,
        [
            "ldp_gateway_overhead_seconds",
            "ldp_gateway_task_duration_seconds",
            "ldp_gateway_up"
        ]
    );
    assert_eq!(
        concrete("sum(increase(x[$__range])) / rate(y[5m])"),
        "sum(increase(x[1m])) / rate(y[30s])"
    );
}

/// A card with two skills, each with its own price and declared latency.
fn priced_card(id: &str, skills: &[(&str, f64, f64, u64)]) -> IdentityCard {
    skills
        .iter()
        .fold(Card::new(id), |c, (name, quality, cost, latency_ms)| {
            c.priced(name, *quality, *cost, *latency_ms)
        })
        .build()
}

/// Three simulated delegates: fast and mid-priced, cheap and flaky, slow and best.
async fn delegates() -> Vec<(&'static str, SimHandle)> {
    let mut fast = SimOptions::new(priced_card(
        "fast",
        &[("summarize", 0.8, 0.004, 10), ("classify", 0.8, 0.002, 10)],
    ));
    fast.latency = Duration::from_millis(5);
    let mut cheap = SimOptions::new(priced_card(
        "cheap",
        &[
            ("summarize", 0.6, 0.0005, 40),
            ("classify", 0.6, 0.0005, 40),
        ],
    ));
    cheap.latency = Duration::from_millis(30);
    cheap.jitter = Duration::from_millis(10);
    cheap.fail_rate = 0.25;
    let mut best = SimOptions::new(priced_card(
        "best",
        &[
            ("summarize", 0.95, 0.02, 200),
            ("classify", 0.97, 0.02, 150),
        ],
    ));
    best.latency = Duration::from_millis(60);
    // A verifier of another model family, for the `verified` policy's rounds.
    let judge = SimOptions {
        verifier: true,
        ..SimOptions::new(
            Card::new("judge")
                .priced("verify", 0.9, 0.0005, 5)
                .set("model_family", json!("judges"))
                .build(),
        )
    };
    vec![
        ("fast", sim(fast).await),
        ("cheap", sim(cheap).await),
        ("best", sim(best).await),
        ("judge", sim(judge).await),
    ]
}

/// The shipped policies, plus `verified` (`balanced` with every result voted on).
fn policies() -> Vec<(String, String)> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/policies");
    let mut files: Vec<(String, String)> = std::fs::read_dir(dir)
        .expect("policies dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read_to_string(&p).expect("policy"))
        })
        .collect();
    files.push((
        "verified.toml".into(),
        "name = \"verified\"\n[verify]\nverifiers = 1\n".into(),
    ));
    files
}

async fn start_gateway(sims: &[(&'static str, SimHandle)]) -> TestGateway {
    let urls: Vec<String> = sims.iter().map(|(_, s)| s.url()).collect();
    let names: Vec<&str> = sims.iter().map(|(n, _)| *n).collect();
    policies()
        .iter()
        .fold(TestGateway::builder(), |b, (file, text)| {
            b.policy(file, text)
        })
        .delegates(&urls)
        .config(|cfg| {
            for (d, n) in cfg.delegates.iter_mut().zip(names) {
                d.name = Some(n.to_owned());
            }
        })
        .spawn()
        .await
}

#[tokio::test]
async fn dashboards_query_only_exported_metrics() {
    let targets = all_targets();
    let sims = delegates().await;
    let gw = start_gateway(&sims).await;
    let exposition = gw.metrics().await.0;
    let exported = |name: &str| {
        let type_line = format!("# TYPE {name} ");
        exposition.lines().any(|l| l.starts_with(&type_line))
            || TELEMETRY_RS.contains(&format!("\"{name}\""))
    };

    let mut used = BTreeSet::new();
    let mut unknown = Vec::new();
    for t in &targets {
        let names = metric_names(&t.expr);
        if names.is_empty() {
            unknown.push(format!("{}: names no ldp_gateway_ metric", t.label(true)));
        }
        for n in names {
            if !exported(&n) {
                unknown.push(format!(
                    "{}: `{n}` is not a metric the gateway exports",
                    t.label(true)
                ));
            }
            used.insert(n);
        }
    }
    assert!(unknown.is_empty(), "{}", unknown.join("\n"));
    let uncovered: Vec<_> = REQUIRED.iter().filter(|m| !used.contains(**m)).collect();
    assert!(uncovered.is_empty(), "no panel queries {uncovered:?}");
    gw.shutdown().await;
    for (_, s) in sims {
        s.shutdown().await;
    }
}

/// Whether `exposition` has a sample of metric `name` (a histogram by its `_count`).
fn has_series(exposition: &str, name: &str) -> bool {
    let count = format!("{name}_count");
    exposition.lines().any(|l| {
        [name, count.as_str()].iter().any(|n| {
            l.strip_prefix(n)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
    })
}

/// Issue 25 item 3: before any traffic, a fresh gateway's `/metrics` already has a series of
/// every metric a panel names (labelled counters with known label values start at 0), so no
/// panel shows "No data" until something happens.
#[tokio::test]
async fn a_fresh_gateway_has_every_series_a_panel_names() {
    let targets = all_targets();
    let sims = delegates().await;
    let gw = start_gateway(&sims).await;
    let exposition = gw.metrics().await.0;
    let mut missing: Vec<String> = Vec::new();
    for t in &targets {
        for n in metric_names(&t.expr) {
            if !has_series(&exposition, &n) {
                missing.push(format!("{}: `{n}` has no series", t.label(true)));
            }
        }
    }
    missing.dedup();
    assert!(
        missing.is_empty(),
        "{}

{exposition}",
        missing.join("\n")
    );
    gw.shutdown().await;
    for (_, s) in sims {
        s.shutdown().await;
    }
}

// ---------------------------------------------------------------------------------------------
// The real-Prometheus check
// ---------------------------------------------------------------------------------------------

/// `LDP_PROMETHEUS_BIN`, else `prometheus` on PATH.
fn prometheus_bin() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("LDP_PROMETHEUS_BIN").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(p));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join("prometheus"))
        .find(|p| p.is_file())
}

/// A Prometheus child process on a free loopback port, with its own config and storage in a
/// temporary directory; killed on drop.
struct Prometheus {
    process: Running,
    base: String,
    /// Config and storage; removed after the process is gone (fields drop in order).
    _dir: tempfile::TempDir,
}

impl Prometheus {
    /// Starts Prometheus scraping `target` (host:port) every second and waits for `/-/ready`.
    async fn start(bin: &Path, target: &str) -> Prometheus {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
                 scrape_configs:\n  - job_name: ldp-gateway\n    metrics_path: /metrics\n    \
                 static_configs:\n      - targets: [\"{target}\"]\n"
            ),
        )
        .unwrap();
        // The port is free when read, but another process may take it before Prometheus
        // binds: then Prometheus exits at once, and we try another.
        for _attempt in 0..3 {
            let port = {
                let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
                l.local_addr().unwrap().port()
            };
            let mut cmd = tokio::process::Command::new(bin);
            cmd.arg(format!("--config.file={}", config.display()))
                .arg(format!(
                    "--storage.tsdb.path={}",
                    dir.path().join(format!("data-{port}")).display()
                ))
                .arg(format!("--web.listen-address=127.0.0.1:{port}"))
                .stdin(std::process::Stdio::null())
                .kill_on_drop(true);
            let mut process = Running::spawn(cmd);
            if Self::wait_ready(&mut process, port).await {
                return Prometheus {
                    process,
                    base: format!("http://127.0.0.1:{port}"),
                    _dir: dir,
                };
            }
            eprintln!(
                "prometheus exited at start, retrying:\n{}",
                process.output()
            );
        }
        panic!("prometheus did not start (see the logs above)");
    }

    /// Polls `/-/ready`; false if the process exited first, panics after 30 s.
    async fn wait_ready(process: &mut Running, port: u16) -> bool {
        let http = reqwest::Client::new();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            if !process.is_running() {
                return false;
            }
            let ready = http
                .get(format!("http://127.0.0.1:{port}/-/ready"))
                .timeout(Duration::from_secs(2))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success());
            if ready {
                return true;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "prometheus not ready within 30 s:\n{}",
                process.output()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Kills the process and waits for it, before the directory goes.
    async fn stop(self) {
        self.process.kill().await;
    }

    fn log_text(&self) -> String {
        self.process.output()
    }

    /// `GET /api/v1/query`: the `data` object, or Prometheus' error.
    async fn query(&self, http: &reqwest::Client, promql: &str) -> Result<Value, String> {
        let url = format!("{}/api/v1/query?query={}", self.base, encode(promql));
        let r = http
            .get(&url)
            .timeout(Duration::from_secs(10))
            .send()
            .await
            .map_err(|e| e.to_string())?;
        let body: Value = serde_json::from_slice(&r.bytes().await.map_err(|e| e.to_string())?)
            .map_err(|e| e.to_string())?;
        if body["status"] == "success" {
            Ok(body["data"].clone())
        } else {
            Err(format!("{}: {}", body["errorType"], body["error"]))
        }
    }

    /// The first sample value of an instant query, if it returned any.
    async fn value(&self, http: &reqwest::Client, promql: &str) -> Option<f64> {
        let data = self.query(http, promql).await.ok()?;
        data["result"][0]["value"][1].as_str()?.parse().ok()
    }

    /// Polls `promql` until its first value satisfies `ok`; panics after `within`.
    async fn wait_for(
        &self,
        http: &reqwest::Client,
        promql: &str,
        within: Duration,
        ok: impl Fn(f64) -> bool,
    ) {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if self.value(http, promql).await.is_some_and(&ok) {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "prometheus: `{promql}` not as expected within {within:?}; last: {:?}\n{}",
                self.query(http, promql).await,
                self.log_text()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits for a scrape of the gateway that started after now, so everything done before
    /// this call is in Prometheus.
    async fn wait_next_scrape(&self, http: &reqwest::Client) {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        self.wait_for(
            http,
            "max(timestamp(ldp_gateway_up))",
            Duration::from_secs(15),
            |t| t > now,
        )
        .await;
    }
}

/// Percent-encodes a query-string value (everything but RFC 3986 unreserved characters).
fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 3);
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Series in an instant-query answer, and how many of them are NaN.
fn count_series(data: &Value) -> (usize, usize) {
    let is_nan = |v: &Value| v[1].as_str() == Some("NaN");
    match data["resultType"].as_str() {
        Some("vector") | Some("matrix") => {
            let r = data["result"].as_array().map(Vec::as_slice).unwrap_or(&[]);
            (r.len(), r.iter().filter(|s| is_nan(&s["value"])).count())
        }
        Some("scalar") | Some("string") => (1, usize::from(is_nan(&data["result"]))),
        _ => (0, 0),
    }
}

/// Policies the traffic is spread over (`None`: the default the gateway selects).
const POLICIES: [Option<&str>; 5] = [
    None,
    Some("cheapest"),
    Some("best-quality"),
    Some("balanced"),
    Some("verified"),
];
const SKILLS: [&str; 2] = ["summarize", "classify"];
const ROUNDS: usize = 5;
const TASKS_PER_SESSION: usize = 5;

/// One worker's share of a round: a fresh session under `policy` (the `ldp-client` adapter
/// opens it), then tasks alternating between the two skills. Returns (results, failures); an
/// exchange that fails outright fails the test.
async fn drive(ldp_url: String, policy: Option<&'static str>, round: usize) -> (usize, usize) {
    let mut config = ldp_client::Config::default();
    config.session.preferred_payload_modes = Some(vec![ldp_gateway::ldp::PayloadMode::Text]);
    config.session.policy = policy.map(str::to_owned);
    let adapter = ldp_client::Adapter::new(config).expect("adapter");
    let mut outcome = (0, 0);
    for i in 0..TASKS_PER_SESSION {
        let skill = SKILLS[(round + i) % SKILLS.len()];
        let input = json!(format!("round {round} task {i}: some text"));
        match adapter
            .call(&ldp_url, ldp_client::Task::new(skill, input))
            .await
        {
            Ok(_) => outcome.0 += 1,
            Err(e) if e.kind() == ldp_client::ErrorKind::Transport => panic!("{e}"),
            Err(_) => outcome.1 += 1,
        }
    }
    outcome
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_panel_returns_series_from_a_real_prometheus() {
    let required = std::env::var("LDP_DASHBOARDS_REQUIRED").is_ok_and(|v| v == "1");
    let Some(bin) = prometheus_bin() else {
        assert!(
            !required,
            "LDP_DASHBOARDS_REQUIRED=1 but no prometheus: set LDP_PROMETHEUS_BIN or put it on PATH"
        );
        eprintln!(
            "skipped: no prometheus (set LDP_PROMETHEUS_BIN or put `prometheus` on PATH; \
             `bash .ci/run` installs Debian's package)"
        );
        return;
    };
    let targets = all_targets();
    let sims = delegates().await;
    let gw = start_gateway(&sims).await;
    let admin = gw.admin_url();
    let prom = Prometheus::start(&bin, admin.trim_start_matches("http://")).await;
    let http = reqwest::Client::new();
    prom.wait_for(
        &http,
        "max(up{job=\"ldp-gateway\"})",
        Duration::from_secs(20),
        |v| v == 1.0,
    )
    .await;

    // Traffic in rounds with a scrape after each, so every counter has several samples
    // spread over the run and rate() has at least two points per series.
    let (mut results, mut failures) = (0, 0);
    for round in 0..ROUNDS {
        let workers = POLICIES.map(|p| tokio::spawn(drive(gw.ldp_url(), p, round)));
        for w in workers {
            let (r, f) = w.await.unwrap();
            results += r;
            failures += f;
        }
        prom.wait_next_scrape(&http).await;
    }
    println!(
        "traffic: {} tasks ({results} results, {failures} failed) over {ROUNDS} scrapes; \
         delegate tasks: {}",
        results + failures,
        sims.iter()
            .map(|(n, s)| format!("{n}={}", s.stats().tasks))
            .collect::<Vec<_>>()
            .join(" ")
    );
    // Readiness: if the gateway counts tasks, Prometheus must have them too.
    let exposition = gw.metrics().await.0;
    if exposition.contains("ldp_gateway_tasks_total{") {
        prom.wait_for(
            &http,
            "sum(ldp_gateway_tasks_total)",
            Duration::from_secs(15),
            |v| v > 0.0,
        )
        .await;
    } else {
        println!("note: the gateway's /metrics has no ldp_gateway_tasks_total samples");
    }

    let mut multi = std::collections::HashMap::<(String, String), usize>::new();
    for t in &targets {
        *multi
            .entry((t.dashboard.clone(), t.panel.clone()))
            .or_default() += 1;
    }
    let mut empty = Vec::new();
    for t in &targets {
        let label = t.label(multi[&(t.dashboard.clone(), t.panel.clone())] > 1);
        let expr = concrete(&t.expr);
        match prom.query(&http, &expr).await {
            Ok(data) => {
                let (n, nan) = count_series(&data);
                let nan = if nan > 0 {
                    format!(" ({nan} NaN)")
                } else {
                    String::new()
                };
                println!("{label}: {n} series{nan}");
                if n == 0 {
                    empty.push(format!(
                        "{label}: no series for\n    {}",
                        expr.replace('\n', "\n    ")
                    ));
                }
            }
            Err(e) => {
                println!("{label}: ERROR {e}");
                empty.push(format!(
                    "{label}: query failed: {e}\n    {}",
                    expr.replace('\n', "\n    ")
                ));
            }
        }
    }
    println!(
        "{} targets checked, {} without series",
        targets.len(),
        empty.len()
    );

    prom.stop().await;
    gw.shutdown().await;
    for (_, s) in sims {
        s.shutdown().await;
    }
    assert!(
        empty.is_empty(),
        "{} of {} panel expressions returned no series:\n{}",
        empty.len(),
        targets.len(),
        empty.join("\n")
    );
}
