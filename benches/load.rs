//! Load bench: direct vs a bare nginx `proxy_pass` hop vs the gateway (production-like config),
//! in one run, against the same zero-latency simulated delegate, at 1, 16 and 64 keep-alive
//! connections. Each connection opens one LDP session and submits tasks in it back to back.
//! The OpenAI rows do the same against a zero-latency simulated OpenAI server: straight
//! (`oai-direct`), through a bare nginx hop (`oai-nginx`), through the gateway's OpenAI ingress
//! (`oai-ingress`: chat completions in, an OpenAI-backed delegate out) and from LDP clients
//! through the gateway to it (`ldp-oai`); `--only openai` selects the four. The Anthropic rows
//! (`--only anthropic`) do the same with Messages requests against a zero-latency simulated
//! Anthropic server: straight (`anth-direct`) and through the gateway's Anthropic ingress to an
//! Anthropic-API delegate (`anthropic`). `--pin` puts the
//! servers on CPU 0 and the load generator on CPU 1. The bridge rows (`llmcp`, `llmx`, `ladp`, `a2a`; `--only bridges`)
//! send the LDP rows' echo task through the gateway's bridges of other agent protocols, and the
//! `a2a` row as an A2A `SendMessage` through its A2A front end. The `gw-trace-100` and
//! `gw-trace-1` rows are the gateway row with OpenTelemetry tracing on (`[telemetry]`, every
//! trace sampled, 1 in 100), exporting to a stand-in collector that answers at once.
//!
//! `cargo build --release && cargo bench --bench load [-- SECS]` (SECS: measured seconds per
//! row, default 4; each row runs 3 times, interleaved, and the median is reported). It runs `target/release/ldp-gateway` (the release binary, not built here)
//! and Debian `nginx` (`apt-get install nginx-light`; the nginx row is skipped when missing),
//! prints the table and ratios, and rewrites the results section of `benches/README.md`.

#[path = "support/bridges.rs"]
mod bridges;
#[path = "support/fixtures.rs"]
mod fixtures;
#[path = "support/propose.rs"]
mod propose;

use bridges::{Bridge, BRIDGES, BRIDGE_PATHS};
use bytes::Bytes;
use fixtures::{CARD, POLICY};
use ldp_client::Transport;
use ldp_gateway::ldp::{Body, Envelope, PayloadMode};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const CONNS: [usize; 3] = [1, 16, 64];
const WARMUP: Duration = Duration::from_secs(1);
/// Every call's deadline.
const TIMEOUT: Duration = Duration::from_secs(10);
/// Repetitions of each row; the table reports the median one.
const REPS: usize = 3;
const BEGIN: &str = "<!-- load:begin -->";
const END: &str = "<!-- load:end -->";
/// The results section a `--pin` run rewrites.
const PINNED_BEGIN: &str = "<!-- load-pinned:begin -->";
const PINNED_END: &str = "<!-- load-pinned:end -->";
/// With `--pin`: the servers' CPU (every server process: delegate, nginx, gateway) and the
/// load generator's (this process, all its threads).
const SERVER_CPU: &str = "0";
const LOAD_CPU: &str = "1";
/// Set once by `--pin`: [`server_cmd`] then starts servers under `taskset`.
static PINNED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// A command for a server process: `program` itself, or under `taskset -c SERVER_CPU` in a
/// pinned run (taskset execs it, so the child's pid is the server's).
fn server_cmd(program: impl AsRef<std::ffi::OsStr>) -> Command {
    if PINNED.load(std::sync::atomic::Ordering::Relaxed) {
        let mut cmd = Command::new("taskset");
        cmd.args(["-c", SERVER_CPU]).arg(program);
        cmd
    } else {
        Command::new(program)
    }
}

/// Pins this process (every thread, and the threads it starts later) to `LOAD_CPU`.
fn pin_load_generator() -> anyhow::Result<()> {
    let status = Command::new("taskset")
        .args(["-a", "-p", "-c", LOAD_CPU, &std::process::id().to_string()])
        .stdout(Stdio::null())
        .status()
        .map_err(|e| anyhow::anyhow!("--pin needs taskset (util-linux): {e}"))?;
    anyhow::ensure!(status.success(), "taskset could not pin the load generator");
    Ok(())
}

/// A child process killed on drop.
struct Proc {
    child: Child,
}

impl Drop for Proc {
    fn drop(&mut self) {
        // SIGTERM first: a SIGKILLed nginx master leaves its workers running.
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        for _ in 0..50 {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Spawn and wait for a stdout line starting with `prefix`; returns the rest of every line
/// read until then that starts with one of `prefixes` (in order).
fn spawn_until(
    mut cmd: Command,
    prefixes: &[&str],
    log: &Path,
) -> anyhow::Result<(Proc, Vec<String>)> {
    cmd.stdout(Stdio::piped())
        .stderr(std::fs::File::create(log)?);
    let mut child = cmd.spawn()?;
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| anyhow::anyhow!("no stdout"))?;
    let proc = Proc { child };
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut found = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while found.len() < prefixes.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = rx
            .recv_timeout(left)
            .map_err(|_| anyhow::anyhow!("no {:?} line (see {})", prefixes, log.display()))?;
        if let Some(rest) = line.strip_prefix(prefixes[found.len()]) {
            found.push(rest.trim().to_string());
        }
    }
    Ok((proc, found))
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// utime + stime in clock ticks of `pid` (all threads).
fn ticks(pid: u32) -> u64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0;
    };
    let Some(rest) = stat.rfind(')').map(|i| &stat[i + 2..]) else {
        return 0;
    };
    // rest starts at field 3 (state); utime and stime are fields 14 and 15.
    let f: Vec<&str> = rest.split_whitespace().collect();
    let n = |i: usize| f.get(i).and_then(|s| s.parse::<u64>().ok()).unwrap_or(0);
    n(11) + n(12)
}

/// `pid` and its direct children (nginx master + workers).
fn tree(pid: u32) -> Vec<u32> {
    let mut out = vec![pid];
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for e in dir.flatten() {
            let Some(p) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) else {
                continue;
            };
            let ppid = stat
                .rfind(')')
                .and_then(|i| stat[i + 2..].split_whitespace().nth(1))
                .and_then(|s| s.parse::<u32>().ok());
            if ppid == Some(pid) {
                out.push(p);
            }
        }
    }
    out
}

fn cpu(pids: &[u32]) -> u64 {
    pids.iter().map(|&p| ticks(p)).sum()
}

fn clk_tck() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

#[derive(Clone)]
struct Target {
    base: String,
    key: Option<String>,
    /// What each request is.
    load: Load,
}

/// The request a connection repeats.
#[derive(Clone, Copy)]
enum Load {
    /// TASK_SUBMITs of this skill in one LDP session.
    Ldp(&'static str),
    /// `POST base + path` chat completions of this `model`.
    Chat {
        path: &'static str,
        model: &'static str,
    },
    /// One task of skill `echo` in a bridge's protocol.
    Bridge(Bridge),
    /// `POST base + /v1/messages` Messages requests of this `model`, as the 1.x SDK sends them.
    Messages(&'static str),
}

/// The skill and model the OpenAI rows use: the simulated server's model, and the skill the
/// gateway's OpenAI-backed delegate offers.
const OPENAI_MODEL: &str = "load-model";
const OPENAI_SKILL: &str = "chat";

/// The OpenAI rows; `--only openai` selects them all.
const OPENAI_PATHS: [&str; 4] = ["oai-direct", "oai-nginx", "oai-ingress", "ldp-oai"];

/// The model of the simulated Anthropic server, and the skill the gateway's Anthropic-API
/// delegate offers.
const ANTHROPIC_MODEL: &str = "load-claude";
const ANTHROPIC_SKILL: &str = "assist";
/// The Anthropic rows; `--only anthropic` selects them.
const ANTHROPIC_PATHS: [&str; 2] = ["anth-direct", "anthropic"];
/// The gateway rows with tracing on (`[telemetry]`), and their sample ratios.
const TRACE_PATHS: [(&str, f64); 2] = [("gw-trace-100", 1.0), ("gw-trace-1", 0.01)];

/// A stand-in OTLP/HTTP collector on a free loopback port: every export answered 200 at
/// once, nothing decoded. Its base URL.
async fn otlp_sink() -> anyhow::Result<String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    let app = axum::Router::new().route("/v1/traces", axum::routing::post(|| async { "" }));
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok(url)
}

/// The client of one connection: `ldp-client`'s transport (one pooled keep-alive
/// connection), with the target's API key.
fn client(t: &Target) -> anyhow::Result<Transport> {
    let mut client = Transport::new("ldp:client:load", TIMEOUT, TIMEOUT);
    if let Some(k) = &t.key {
        client.set_headers(vec![(
            reqwest::header::AUTHORIZATION,
            format!("Bearer {k}").parse()?,
        )]);
    }
    Ok(client)
}

fn task(sid: &str, skill: &str, i: u64) -> Envelope {
    Envelope::new(
        sid,
        "ldp:client:load",
        "x",
        Body::TaskSubmit {
            task_id: format!("t{i}").into(),
            skill: skill.into(),
            input: serde_json::json!("hello").into(),
            contract: None,
        },
        PayloadMode::Text,
    )
}

/// A chat completion's body: one user message, as small as the LDP rows' task.
fn chat_body(model: &str) -> Bytes {
    let body = serde_json::json!({
        "model": model,
        "messages": [{"role": "user", "content": "hello"}],
    });
    Bytes::from(body.to_string())
}

/// A Messages request's body: one user message, as small as the LDP rows' task.
fn messages_body(model: &str) -> Bytes {
    let body = serde_json::json!({
        "model": model,
        "max_tokens": 64,
        "messages": [{"role": "user", "content": "hello"}],
    });
    Bytes::from(body.to_string())
}

/// Whether a Messages request answered: 200 and a text block.
fn messaged(answer: &ldp_client::transport::HttpAnswer) -> bool {
    answer.head.status.is_success()
        && serde_json::from_slice::<serde_json::Value>(&answer.body)
            .is_ok_and(|v| v["content"][0]["text"].is_string())
}

/// Whether a chat completion answered: 200 and an assistant message.
fn completed(answer: &ldp_client::transport::HttpAnswer) -> bool {
    answer.head.status.is_success()
        && serde_json::from_slice::<serde_json::Value>(&answer.body)
            .is_ok_and(|v| v["choices"][0]["message"]["content"].is_string())
}

/// One connection: its own client (one pooled keep-alive connection), one session (LDP), tasks
/// or chat completions until `end`; latencies (µs) of those sent at or after `from` and done by
/// `end`.
async fn conn(t: Target, from: Instant, end: Instant) -> anyhow::Result<(Vec<u32>, u64)> {
    let client = client(&t)?;
    let sid = match t.load {
        Load::Ldp(_) => propose::session(&client, &t.base, TIMEOUT).await?,
        Load::Chat { .. } | Load::Bridge(_) | Load::Messages(_) => String::new(),
    };
    // A bridge's sender, one per connection.
    let sender = format!("load{}", uuid::Uuid::new_v4().simple());
    let auth = match &t.key {
        Some(k) => vec![(
            reqwest::header::AUTHORIZATION,
            format!("Bearer {k}").parse()?,
        )],
        None => Vec::new(),
    };
    // A2A's version header beside the key.
    let mut bridge_headers = auth.clone();
    bridge_headers.push((
        reqwest::header::HeaderName::from_static("a2a-version"),
        reqwest::header::HeaderValue::from_static("1.0"),
    ));
    // The Messages API's version header beside the key.
    let mut messages_headers = auth.clone();
    messages_headers.push((
        reqwest::header::HeaderName::from_static("anthropic-version"),
        reqwest::header::HeaderValue::from_static("2023-06-01"),
    ));
    let mut lat = Vec::with_capacity(100_000);
    let mut errors = 0u64;
    let mut i = 0u64;
    loop {
        let start = Instant::now();
        if start >= end {
            break;
        }
        i += 1;
        let ok = match t.load {
            Load::Ldp(skill) => matches!(
                client
                    .send(&t.base, &task(&sid, skill, i), TIMEOUT)
                    .await
                    .map(|e| e.body),
                Ok(Body::TaskResult { .. })
            ),
            Load::Chat { path, model } => client
                .request(
                    &t.base,
                    path,
                    Some(chat_body(model)),
                    &auth,
                    None.into(),
                    TIMEOUT,
                )
                .await
                .is_ok_and(|a| completed(&a)),
            Load::Bridge(b) => client
                .request(
                    &t.base,
                    b.path(),
                    Some(b.body(&sender, i)),
                    &bridge_headers,
                    None.into(),
                    TIMEOUT,
                )
                .await
                .is_ok_and(|a| b.answered(&a)),
            Load::Messages(model) => client
                .request(
                    &t.base,
                    "/v1/messages",
                    Some(messages_body(model)),
                    &messages_headers,
                    None.into(),
                    TIMEOUT,
                )
                .await
                .is_ok_and(|a| messaged(&a)),
        };
        let done = Instant::now();
        if start >= from && done <= end {
            if ok {
                lat.push(done.duration_since(start).as_micros().min(u32::MAX as u128) as u32);
            } else {
                errors += 1;
            }
        }
    }
    Ok((lat, errors))
}

#[derive(Clone)]
struct Row {
    path: &'static str,
    conns: usize,
    rps: f64,
    p50: u32,
    p99: u32,
    p999: u32,
    hop_us: f64,
    delegate_us: f64,
    errors: u64,
}

fn pct(v: &[u32], p: f64) -> u32 {
    if v.is_empty() {
        return 0;
    }
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

async fn row(
    path: &'static str,
    t: &Target,
    conns: usize,
    secs: u64,
    hop: &[u32],
    delegate: u32,
) -> anyhow::Result<Row> {
    let from = Instant::now() + WARMUP;
    let end = from + Duration::from_secs(secs);
    let tasks: Vec<_> = (0..conns)
        .map(|_| tokio::spawn(conn(t.clone(), from, end)))
        .collect();
    tokio::time::sleep_until(from.into()).await;
    // The hop's children too (nginx workers), looked up at each read.
    let pids = || hop.iter().flat_map(|&p| tree(p)).collect::<Vec<_>>();
    let (h0, d0) = (cpu(&pids()), ticks(delegate));
    tokio::time::sleep_until(end.into()).await;
    let (h1, d1) = (cpu(&pids()), ticks(delegate));
    let mut lat = Vec::new();
    let mut errors = 0;
    for h in tasks {
        let (l, e) = h.await??;
        lat.extend(l);
        errors += e;
    }
    lat.sort_unstable();
    let n = lat.len().max(1) as f64;
    let us = |ticks: u64| ticks as f64 / clk_tck() * 1e6 / n;
    let r = Row {
        path,
        conns,
        rps: lat.len() as f64 / secs as f64,
        p50: pct(&lat, 0.5),
        p99: pct(&lat, 0.99),
        p999: pct(&lat, 0.999),
        hop_us: us(h1 - h0),
        delegate_us: us(d1 - d0),
        errors,
    };
    eprintln!(
        "{path:<11} c={conns:<3} {:>9.0} req/s  p50 {}µs  p99 {}µs  p99.9 {}µs  errors {}",
        r.rps, r.p50, r.p99, r.p999, r.errors
    );
    Ok(r)
}

/// The OpenAI-backed delegate's `[[delegates]]` entry (the simulated server at `url`): its
/// declared card passes every constraint of [`POLICY`] too.
fn openai_delegate(url: &str) -> String {
    format!(
        r#"[[delegates]]
kind = "openai"
name = "load-openai"
url = "{url}"
model = "{OPENAI_MODEL}"
[delegates.card]
skills = ["{OPENAI_SKILL}"]
quality = 0.9
price_per_mtok_input = 0.1
price_per_mtok_output = 0.4
latency_p50_ms = 5
jurisdiction = "eu-west"
trust_domain = {{ name = "default", allow_cross_domain = false, trusted_peers = [] }}
context_window = 32768
model_family = "sim-openai"
"#
    )
}

/// The Anthropic-API delegate's `[[delegates]]` entry (the simulated server at `url`), declared
/// like the OpenAI one (priced within [`POLICY`]'s `max_cost_usd` for a typical call).
fn anthropic_delegate(url: &str) -> String {
    format!(
        r#"[[delegates]]
kind = "anthropic"
name = "load-anthropic"
url = "{url}"
model = "{ANTHROPIC_MODEL}"
[delegates.card]
skills = ["{ANTHROPIC_SKILL}"]
quality = 0.9
price_per_mtok_input = 1.0
price_per_mtok_output = 5.0
price_per_mtok_cache_read = 0.1
price_per_mtok_cache_write = 1.25
latency_p50_ms = 5
jurisdiction = "eu-west"
trust_domain = {{ name = "default", allow_cross_domain = false, trusted_peers = [] }}
context_window = 32768
model_family = "sim-anthropic"
"#
    )
}

/// One nginx process, one `server` block per (listen port, upstream `host:port`) pair: the LDP
/// delegate's hop, and the OpenAI server's when an OpenAI row runs.
fn nginx_conf(dir: &Path, hops: &[(u16, &str)]) -> String {
    let d = dir.display();
    let mut conf = format!(
        "daemon off;\nworker_processes auto;\npid {d}/nginx.pid;\nerror_log {d}/nginx-error.log warn;\n\
         events {{ worker_connections 1024; }}\n\
         http {{\n  access_log off;\n  client_body_temp_path {d}/nginx-body;\n  proxy_temp_path {d}/nginx-proxy;\n"
    );
    for (i, (port, upstream)) in hops.iter().enumerate() {
        conf.push_str(&format!(
            "  upstream up{i} {{ server {upstream}; keepalive 64; keepalive_requests 1000000; }}\n\
             \x20 server {{\n    listen 127.0.0.1:{port};\n    keepalive_requests 1000000;\n\
             \x20   location / {{ proxy_pass http://up{i}; proxy_http_version 1.1; proxy_set_header Connection \"\"; }}\n  }}\n"
        ));
    }
    conf.push_str("}\n");
    conf
}

fn machine() -> String {
    let cmd = |c: &str, a: &[&str]| {
        Command::new(c)
            .args(a)
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .map(|s| s.trim().to_string())
            .unwrap_or_default()
    };
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_default();
    format!(
        "{} · {} CPUs (nproc --all) · Linux {} · {}",
        cmd("date", &["-u", "+%Y-%m-%d %H:%M UTC"]),
        cmd("nproc", &["--all"]),
        cmd("uname", &["-r"]),
        model
    )
}

/// What the gateway holds in memory.
struct Memory {
    idle_kib: u64,
    after_load_kib: u64,
    per_session: f64,
    sessions: usize,
}

/// The performance issue's targets (wave 3, "Performance, second round") that this run
/// measures, each with the measured value.
fn targets(rows: &[Row], memory: Option<&Memory>) -> Vec<(String, String, bool)> {
    let find = |p: &str, c: usize| rows.iter().find(|r| r.path == p && r.conns == c);
    let mut out = Vec::new();
    for (path, hop, floor) in [("gateway", "nginx", 0.8), ("oai-ingress", "oai-nginx", 0.4)] {
        for c in [16, 64] {
            if let (Some(g), Some(n)) = (find(path, c), find(hop, c)) {
                let r = g.rps / n.rps.max(1e-9);
                out.push((
                    format!("{path} throughput at {c} conns ≥ {floor} × {hop}"),
                    format!("{r:.2} ×"),
                    r >= floor,
                ));
            }
        }
    }
    for (path, hop) in [("gateway", "nginx"), ("oai-ingress", "oai-nginx")] {
        for c in CONNS {
            if let (Some(g), Some(n)) = (find(path, c), find(hop, c)) {
                let r = g.hop_us / n.hop_us.max(1e-9);
                out.push((
                    format!("{path} added CPU per task at {c} conns ≤ 2 × {hop}'s"),
                    format!("{r:.2} × ({:.0} vs {:.0} µs)", g.hop_us, n.hop_us),
                    r <= 2.0,
                ));
            }
        }
    }
    if let (Some(g), Some(n)) = (find("gateway", 1), find("nginx", 1)) {
        let added = g.p50 as i64 - n.p50 as i64;
        out.push((
            "added p50 at 1 conn ≤ 100 µs over nginx".into(),
            format!("{added} µs"),
            added <= 100,
        ));
    }
    if let (Some(g), Some(n)) = (find("gateway", 64), find("nginx", 64)) {
        let r = g.p99 as f64 / n.p99.max(1) as f64;
        out.push((
            "p99 at 64 conns ≤ 1.5 × nginx".into(),
            format!("{r:.2} ×"),
            r <= 1.5,
        ));
    }
    if let Some(m) = memory {
        let mib = m.idle_kib as f64 / 1024.0;
        out.push((
            "idle RSS ≤ 30 MiB".into(),
            format!("{mib:.1} MiB"),
            mib <= 30.0,
        ));
        out.push((
            format!("memory per idle session ≤ 2 KiB ({} sessions)", m.sessions),
            format!("{:.0} bytes", m.per_session),
            m.per_session <= 2048.0,
        ));
    }
    out
}

fn report(
    rows: &[Row],
    secs: u64,
    reps: usize,
    memory: Option<&Memory>,
    notes: &[String],
) -> String {
    let mut s = String::new();
    s.push_str(&format!("Run: {}\n\n", machine()));
    s.push_str(&format!(
        "Command: `cargo build --release && cargo bench --bench load` ({}s warm-up + {secs}s measured per row, \
         {reps} interleaved repetitions of each, the median one by req/s shown; {})\n\n",
        WARMUP.as_secs(),
        if PINNED.load(std::sync::atomic::Ordering::Relaxed) {
            format!("`--pin`: every server on CPU {SERVER_CPU}, the load generator on CPU {LOAD_CPU}")
        } else {
            "load generator in the same process tree, on the same cores".to_owned()
        }
    ));
    s.push_str("| path | conns | req/s | p50 µs | p99 µs | p99.9 µs | hop CPU µs/req | delegate CPU µs/req | errors |\n");
    s.push_str("|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for r in rows {
        s.push_str(&format!(
            "| {} | {} | {:.0} | {} | {} | {} | {:.1} | {:.1} | {} |\n",
            r.path, r.conns, r.rps, r.p50, r.p99, r.p999, r.hop_us, r.delegate_us, r.errors
        ));
    }
    s.push_str("\nhop CPU = the process under test: the delegate (direct), nginx master + workers (nginx, oai-nginx), the gateway (gateway, oai-ingress, ldp-oai), the simulated OpenAI server (oai-direct). delegate CPU = the upstream: the simulated LDP delegate, or for the OpenAI rows the simulated OpenAI server.\n\n");
    s.push_str("Ratios (gateway vs direct / vs nginx):\n\n");
    s.push_str("| conns | req/s ÷ direct | req/s ÷ nginx | p50 added vs direct | p50 added vs nginx | p99 ÷ direct | p99 ÷ nginx | hop CPU ÷ nginx CPU |\n");
    s.push_str("|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    let find = |p: &str, c: usize| rows.iter().find(|r| r.path == p && r.conns == c);
    for c in CONNS {
        let (Some(g), Some(d)) = (find("gateway", c), find("direct", c)) else {
            continue;
        };
        let n = find("nginx", c);
        let opt = |f: &dyn Fn(&Row) -> String| n.map(f).unwrap_or_else(|| "–".into());
        s.push_str(&format!(
            "| {c} | {:.2} | {} | {} µs | {} | {:.2} | {} | {} |\n",
            g.rps / d.rps.max(1e-9),
            opt(&|n| format!("{:.2}", g.rps / n.rps.max(1e-9))),
            g.p50 as i64 - d.p50 as i64,
            opt(&|n| format!("{} µs", g.p50 as i64 - n.p50 as i64)),
            g.p99 as f64 / (d.p99.max(1)) as f64,
            opt(&|n| format!("{:.2}", g.p99 as f64 / n.p99.max(1) as f64)),
            opt(&|n| format!("{:.2}", g.hop_us / n.hop_us.max(1e-9))),
        ));
    }
    s.push_str(&openai_table(rows));
    s.push_str(&anthropic_table(rows));
    s.push_str(&bridge_table(rows));
    s.push_str("\nTargets (performance issue) measured in this run:\n\n| target | measured | met |\n|---|---|---|\n");
    for (what, value, met) in targets(rows, memory) {
        s.push_str(&format!(
            "| {what} | {value} | {} |\n",
            if met { "yes" } else { "**no**" }
        ));
    }
    if let Some(m) = memory {
        s.push_str(&format!(
            "\nMemory: idle RSS {:.1} MiB; after the load rows {:.1} MiB; {} idle sessions on a \
             fresh gateway add {:.0} bytes each.\n",
            m.idle_kib as f64 / 1024.0,
            m.after_load_kib as f64 / 1024.0,
            m.sessions,
            m.per_session
        ));
    }
    for n in notes {
        s.push_str(&format!("\nNote: {n}\n"));
    }
    s
}

/// The bridges next to the LDP path: the gateway's CPU per task on each, and what each adds
/// over the LDP path (empty without bridge rows).
fn bridge_table(rows: &[Row]) -> String {
    let find = |p: &str, c: usize| rows.iter().find(|r| r.path == p && r.conns == c);
    let mut s = String::new();
    for c in CONNS {
        let Some(g) = find("gateway", c) else {
            continue;
        };
        if !BRIDGE_PATHS.iter().any(|p| find(p, c).is_some()) {
            continue;
        }
        if s.is_empty() {
            s.push_str("\nBridges vs the LDP path (the same echo task; the gateway's CPU per task, and what each bridge adds to it):\n\n");
            s.push_str("| conns | gateway CPU µs/task: LDP / llmcp / llmx / ladp / a2a | added CPU µs/task: llmcp / llmx / ladp / a2a | p50 µs: LDP / llmcp / llmx / ladp / a2a |\n");
            s.push_str("|---:|---:|---:|---:|\n");
        }
        let each = |f: &dyn Fn(&Row) -> String| {
            BRIDGE_PATHS
                .iter()
                .map(|p| find(p, c).map_or_else(|| "–".into(), f))
                .collect::<Vec<_>>()
                .join(" / ")
        };
        s.push_str(&format!(
            "| {c} | {:.0} / {} | {} | {} / {} |\n",
            g.hop_us,
            each(&|r| format!("{:.0}", r.hop_us)),
            each(&|r| format!("{:+.0}", r.hop_us - g.hop_us)),
            g.p50,
            each(&|r| r.p50.to_string()),
        ));
    }
    s
}

/// The OpenAI path next to the LDP path: what each adds over its own upstream reached
/// directly, and the gateway's CPU per request on each (empty without OpenAI rows).
fn openai_table(rows: &[Row]) -> String {
    let find = |p: &str, c: usize| rows.iter().find(|r| r.path == p && r.conns == c);
    let mut s = String::new();
    for c in CONNS {
        let Some(od) = find("oai-direct", c) else {
            continue;
        };
        if s.is_empty() {
            s.push_str("\nOpenAI path vs LDP path (p50 added over each path's own upstream reached directly; the gateway's CPU per request):\n\n");
            s.push_str("| conns | LDP: gateway p50 added vs direct | OpenAI ingress: oai-ingress p50 added vs oai-direct | LDP client → OpenAI delegate: ldp-oai p50 added vs oai-direct | gateway CPU µs/req: gateway / oai-ingress / ldp-oai | req/s: gateway / oai-ingress / ldp-oai |\n");
            s.push_str("|---:|---:|---:|---:|---:|---:|\n");
        }
        let added = |r: Option<&Row>, base: Option<&Row>| match (r, base) {
            (Some(r), Some(b)) => format!("{} µs", r.p50 as i64 - b.p50 as i64),
            _ => "–".into(),
        };
        let each = |f: &dyn Fn(&Row) -> String| {
            ["gateway", "oai-ingress", "ldp-oai"]
                .iter()
                .map(|p| find(p, c).map_or_else(|| "–".into(), f))
                .collect::<Vec<_>>()
                .join(" / ")
        };
        s.push_str(&format!(
            "| {c} | {} | {} | {} | {} | {} |\n",
            added(find("gateway", c), find("direct", c)),
            added(find("oai-ingress", c), Some(od)),
            added(find("ldp-oai", c), Some(od)),
            each(&|r| format!("{:.0}", r.hop_us)),
            each(&|r| format!("{:.0}", r.rps)),
        ));
    }
    s
}

/// The Anthropic ingress beside the OpenAI one: what each adds over its own upstream reached
/// directly, and the gateway's CPU per request on each (empty without Anthropic rows).
fn anthropic_table(rows: &[Row]) -> String {
    let find = |p: &str, c: usize| rows.iter().find(|r| r.path == p && r.conns == c);
    let mut s = String::new();
    for c in CONNS {
        let (Some(a), Some(ad)) = (find("anthropic", c), find("anth-direct", c)) else {
            continue;
        };
        if s.is_empty() {
            s.push_str("\nAnthropic ingress vs OpenAI ingress (p50 added over each one's own simulated upstream reached directly; the gateway's CPU per request, and what the Anthropic path adds to the OpenAI one's):\n\n");
            s.push_str("| conns | oai-ingress p50 added vs oai-direct | anthropic p50 added vs anth-direct | gateway CPU µs/req: oai-ingress / anthropic | anthropic − oai-ingress CPU µs/req | req/s: oai-ingress / anthropic |\n");
            s.push_str("|---:|---:|---:|---:|---:|---:|\n");
        }
        let o = find("oai-ingress", c);
        let od = find("oai-direct", c);
        let oai = |f: &dyn Fn(&Row) -> String| o.map_or_else(|| "–".into(), f);
        s.push_str(&format!(
            "| {c} | {} | {} µs | {} / {:.0} | {} | {} / {:.0} |\n",
            match (o, od) {
                (Some(o), Some(d)) => format!("{} µs", o.p50 as i64 - d.p50 as i64),
                _ => "–".into(),
            },
            a.p50 as i64 - ad.p50 as i64,
            oai(&|o| format!("{:.0}", o.hop_us)),
            a.hop_us,
            oai(&|o| format!("{:+.0}", a.hop_us - o.hop_us)),
            oai(&|o| format!("{:.0}", o.rps)),
            a.rps,
        ));
    }
    s
}

/// Rewrites the results section of benches/README.md: the pinned one after a `--pin` run.
fn write_readme(manifest: &Path, section: &str) -> anyhow::Result<()> {
    let path = manifest.join("benches/README.md");
    let old = std::fs::read_to_string(&path).unwrap_or_default();
    let (begin, end, title) = if PINNED.load(std::sync::atomic::Ordering::Relaxed) {
        (PINNED_BEGIN, PINNED_END, "Load bench results, pinned")
    } else {
        (BEGIN, END, "Load bench results")
    };
    let block = format!("{begin}\n{section}{end}");
    let new = match (old.find(begin), old.find(end)) {
        (Some(a), Some(b)) if b > a => format!("{}{block}{}", &old[..a], &old[b + end.len()..]),
        _ => format!("{old}\n## {title}\n\n{block}\n"),
    };
    std::fs::write(path, new)?;
    Ok(())
}

/// What the gateway's config must serve besides the LDP rows.
#[derive(Clone, Copy)]
struct Rows<'a> {
    /// The simulated OpenAI server, for the OpenAI rows.
    openai_url: Option<&'a str>,
    /// The simulated Anthropic server, for the Anthropic rows.
    anthropic_url: Option<&'a str>,
    /// The bridge rows: the LADP agent rate raised out of their way.
    bridges: bool,
    /// Traces exported to this OTLP endpoint at this sample ratio (the `gw-trace-*` rows).
    trace: Option<(&'a str, f64)>,
}

/// Writes a production-like config under `dir` (its own ledger and policy folder), starts
/// `ldp-gateway serve` on it and waits until `/readyz` answers 200. Returns the process, the
/// LDP URL and the admin URL.
///
/// With `openai_url`, the gateway also has an OpenAI-backed delegate there, and keeps no
/// conversation for it (`openai.session_memory_bytes = 0`): every LDP task is one turn, as
/// every ingress request is, so rows measure the hop, not a growing conversation.
async fn start_gateway(
    bin: &Path,
    dir: &Path,
    delegate_url: &str,
    rows: Rows<'_>,
    key: &str,
    max_sessions: usize,
    probe: &reqwest::Client,
) -> anyhow::Result<(Proc, String, String)> {
    let Rows {
        openai_url,
        anthropic_url,
        bridges,
        trace,
    } = rows;
    std::fs::create_dir_all(dir.join("policies"))?;
    std::fs::write(dir.join("policies/load-all.toml"), POLICY)?;
    let mut cfg = format!(
        r#"[server]
listen = "127.0.0.1:0"
[admin]
listen = "127.0.0.1:0"
[policies]
dir = "{d}/policies"
default = "load-all"
[provenance]
store = "sqlite://{d}/provenance.db"
durability = "commit"
[security]
max_sessions = {max_sessions}
[[tenants]]
name = "load"
api_key_sha256 = ["{h}"]
trust_domains = ["default"]
policies = ["load-all"]
default_policy = "load-all"
limits = {{ rps = 1000000, burst = 1000000 }}
max_sessions = {max_sessions}
[[delegates]]
url = "{delegate_url}"
name = "load-fast"
"#,
        d = dir.display(),
        h = ldp_gateway::secret::hash_key(key),
    );
    if let Some(url) = openai_url {
        cfg.push_str(&openai_delegate(url));
        cfg.push_str("[openai]\nsession_memory_bytes = 0\n");
    }
    if let Some(url) = anthropic_url {
        cfg.push_str(&anthropic_delegate(url));
    }
    if bridges {
        // Each LADP connection is one agent: its per-agent rate (seed §14) at the highest
        // accepted, a full minute's worth at once, so the limiter runs but never refuses.
        cfg.push_str("[ladp]\nrate_per_minute = 60000\n");
    }
    if let Some((endpoint, ratio)) = trace {
        cfg.push_str(&format!(
            "[telemetry]\notlp_endpoint = \"{endpoint}\"\nsample_ratio = {ratio}\n"
        ));
    }
    std::fs::write(dir.join("gateway.toml"), cfg)?;
    let mut cmd = server_cmd(bin);
    cmd.args(["serve", "--config"])
        .arg(dir.join("gateway.toml"));
    let (gateway, urls) = spawn_until(cmd, &["LDP endpoint:", "admin:"], &dir.join("gateway.log"))?;
    let (gw_url, admin_url) = (urls[0].clone(), urls[1].clone());
    for _ in 0..100 {
        if let Ok(r) = probe.get(format!("{admin_url}/readyz")).send().await {
            if r.status().is_success() {
                return Ok((gateway, gw_url, admin_url));
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    anyhow::bail!("gateway not ready (see {}/gateway.log)", dir.display())
}

/// Resident set size of `pid`, KiB.
fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// Sessions opened by the memory measurement.
const SESSIONS: usize = 100_000;

/// A fresh gateway's RSS growth per idle client session: `SESSIONS` sessions opened over 16
/// keep-alive connections (no tasks), RSS before and after. Returns (bytes per session,
/// sessions the gateway accepted).
async fn session_memory(
    bin: &Path,
    dir: &Path,
    delegate_url: &str,
    probe: &reqwest::Client,
) -> anyhow::Result<(f64, usize)> {
    let key = format!("mem-{}", uuid::Uuid::new_v4().simple());
    let rows = Rows {
        openai_url: None,
        anthropic_url: None,
        bridges: false,
        trace: None,
    };
    let (gateway, url, _) =
        start_gateway(bin, dir, delegate_url, rows, &key, SESSIONS * 2, probe).await?;
    let before = rss_kib(gateway.child.id());
    let t = Target {
        base: url,
        key: Some(key),
        load: Load::Ldp("echo"),
    };
    let conns = 16;
    let tasks: Vec<_> = (0..conns)
        .map(|_| {
            let t = t.clone();
            tokio::spawn(async move {
                let client = client(&t)?;
                let mut ok = 0usize;
                for _ in 0..SESSIONS / conns {
                    ok += usize::from(propose::session(&client, &t.base, TIMEOUT).await.is_ok());
                }
                anyhow::Ok(ok)
            })
        })
        .collect();
    let mut opened = 0;
    for h in tasks {
        opened += h.await??;
    }
    let after = rss_kib(gateway.child.id());
    let per = after.saturating_sub(before) as f64 * 1024.0 / opened.max(1) as f64;
    Ok((per, opened))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // SECS is the first number that is not a flag's value.
    let secs: u64 = args
        .iter()
        .enumerate()
        .filter(|(i, _)| *i == 0 || !args[i - 1].starts_with("--"))
        .find_map(|(_, a)| a.parse().ok())
        .unwrap_or(4);
    let reps: usize = args
        .iter()
        .position(|a| a == "--reps")
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(REPS)
        .max(1);
    // `--only PATH[,PATH]` and `--conns N[,N]` narrow the run (for profiling one row); a
    // narrowed run prints its rows but leaves benches/README.md alone.
    let list = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
            .map(|v| v.split(',').map(str::to_owned).collect::<Vec<_>>())
    };
    // `openai` stands for the four OpenAI rows.
    let only = list("--only").map(|names| {
        names
            .into_iter()
            .flat_map(|n| match n.as_str() {
                "openai" => OPENAI_PATHS.iter().map(|p| (*p).to_owned()).collect(),
                "bridges" => BRIDGE_PATHS.iter().map(|p| (*p).to_owned()).collect(),
                "anthropic" => ANTHROPIC_PATHS.iter().map(|p| (*p).to_owned()).collect(),
                _ => vec![n],
            })
            .collect::<Vec<_>>()
    });
    let wanted = |path: &str| only.as_ref().is_none_or(|o| o.iter().any(|n| n == path));
    let conns: Vec<usize> = match list("--conns") {
        Some(v) => v.iter().filter_map(|c| c.parse().ok()).collect(),
        None => CONNS.to_vec(),
    };
    let full = only.is_none() && conns == CONNS;
    // `--pin`: servers on one core, this load generator on the other (needs two CPUs).
    if args.iter().any(|a| a == "--pin") {
        anyhow::ensure!(
            std::thread::available_parallelism().map_or(1, usize::from) >= 2,
            "--pin needs two CPUs"
        );
        pin_load_generator()?;
        PINNED.store(true, std::sync::atomic::Ordering::Relaxed);
    }
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| manifest.join("target"));
    let bin = target.join("release/ldp-gateway");
    if !bin.exists() {
        anyhow::bail!(
            "{} missing: run `cargo build --release` first",
            bin.display()
        );
    }
    let tmp = tempfile::tempdir()?;
    let dir = tmp.path();
    let mut notes = Vec::new();

    // The upstream: a zero-latency simulated delegate.
    let card = dir.join("card.json");
    std::fs::write(&card, CARD)?;
    let mut cmd = server_cmd(&bin);
    cmd.args([
        "delegate",
        "--latency-ms",
        "0",
        "--listen",
        "127.0.0.1:0",
        "--card",
    ])
    .arg(&card);
    let (delegate, urls) = spawn_until(cmd, &["listening on "], &dir.join("delegate.log"))?;
    let delegate_url = urls[0].clone();
    let delegate_pid = delegate.child.id();
    let upstream = delegate_url.trim_start_matches("http://").to_string();

    // The OpenAI upstream: a zero-latency simulated OpenAI server, when an OpenAI row runs.
    let openai = if OPENAI_PATHS.iter().any(|p| wanted(p)) {
        let mut cmd = server_cmd(&bin);
        cmd.args([
            "delegate",
            "--openai",
            "--model",
            OPENAI_MODEL,
            "--latency-ms",
            "0",
            "--listen",
            "127.0.0.1:0",
        ]);
        let (proc, urls) = spawn_until(cmd, &["listening on "], &dir.join("openai.log"))?;
        Some((proc, urls[0].clone()))
    } else {
        None
    };
    let openai_url = openai.as_ref().map(|(_, url)| url.as_str());
    let openai_pid = openai.as_ref().map_or(0, |(p, _)| p.child.id());

    // The Anthropic upstream: a zero-latency simulated Anthropic server, when its rows run.
    let anthropic = if ANTHROPIC_PATHS.iter().any(|p| wanted(p)) {
        let mut cmd = server_cmd(&bin);
        cmd.args([
            "delegate",
            "--anthropic",
            "--model",
            ANTHROPIC_MODEL,
            "--latency-ms",
            "0",
            "--listen",
            "127.0.0.1:0",
        ]);
        let (proc, urls) = spawn_until(cmd, &["listening on "], &dir.join("anthropic.log"))?;
        Some((proc, urls[0].clone()))
    } else {
        None
    };
    let anthropic_url = anthropic.as_ref().map(|(_, url)| url.as_str());
    let anthropic_pid = anthropic.as_ref().map_or(0, |(p, _)| p.child.id());

    // nginx: bare proxy_pass hop with upstream keep-alive.
    // With an OpenAI row, a second server block is the same bare hop to the OpenAI server.
    let nginx_port = free_port()?;
    let oai_nginx = match openai_url {
        Some(url) => {
            let host = url
                .trim_start_matches("http://")
                .split('/')
                .next()
                .unwrap_or_default()
                .to_owned();
            Some((free_port()?, host, url.trim_end_matches('/').to_owned()))
        }
        None => None,
    };
    let mut hops = vec![(nginx_port, upstream.as_str())];
    if let Some((port, host, _)) = &oai_nginx {
        hops.push((*port, host.as_str()));
    }
    std::fs::write(dir.join("nginx.conf"), nginx_conf(dir, &hops))?;
    let nginx = match server_cmd("nginx")
        .arg("-c")
        .arg(dir.join("nginx.conf"))
        .arg("-p")
        .arg(dir)
        .arg("-e")
        .arg(dir.join("nginx-error.log"))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("nginx.stderr"))?)
        .spawn()
    {
        Ok(child) => {
            let p = Proc { child };
            let mut up = false;
            for _ in 0..50 {
                if std::net::TcpStream::connect(("127.0.0.1", nginx_port)).is_ok() {
                    up = true;
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            if up {
                Some(p)
            } else {
                notes.push(format!(
                    "nginx did not come up: {}",
                    std::fs::read_to_string(dir.join("nginx.stderr")).unwrap_or_default()
                ));
                None
            }
        }
        Err(e) => {
            notes.push(format!(
                "nginx row skipped: {e} (apt-get install nginx-light)"
            ));
            None
        }
    };

    // The gateway, production-like: one tenant with an API key, sqlite ledger with commit
    // durability, metrics (always on at the admin /metrics), one policy using every constraint.
    let key = format!("load-{}", uuid::Uuid::new_v4().simple());
    let probe = reqwest::Client::new();
    // `LOAD_GATEWAY_BIN` swaps the gateway's binary alone (A/B runs of two builds against the
    // same upstream); the delegate keeps the release binary.
    let gw_bin = std::env::var_os("LOAD_GATEWAY_BIN").map_or_else(|| bin.clone(), PathBuf::from);
    let (gateway, gw_url, admin_url) = start_gateway(
        &gw_bin,
        &dir.join("gw"),
        &delegate_url,
        Rows {
            openai_url,
            anthropic_url,
            bridges: BRIDGE_PATHS.iter().any(|p| wanted(p)),
            trace: None,
        },
        &key,
        10_000,
        &probe,
    )
    .await?;
    let idle_rss = rss_kib(gateway.child.id());
    let gw_pid = gateway.child.id();

    // (path, target, hop pids, upstream pid)
    let mut targets: Vec<(&'static str, Target, Vec<u32>, u32)> = vec![(
        "direct",
        Target {
            base: delegate_url.clone(),
            key: None,
            load: Load::Ldp("echo"),
        },
        vec![delegate_pid],
        delegate_pid,
    )];
    if let Some(n) = &nginx {
        targets.push((
            "nginx",
            Target {
                base: format!("http://127.0.0.1:{nginx_port}"),
                key: None,
                load: Load::Ldp("echo"),
            },
            vec![n.child.id()],
            delegate_pid,
        ));
    }
    targets.push((
        "gateway",
        Target {
            base: gw_url.clone(),
            key: Some(key.clone()),
            load: Load::Ldp("echo"),
        },
        vec![gw_pid],
        delegate_pid,
    ));
    // The gateway's row with tracing on, every trace sampled and 1 in 100, exporting to a
    // collector stand-in that takes every export at once (what the spans cost the gateway).
    let sink = if TRACE_PATHS.iter().any(|(p, _)| wanted(p)) {
        Some(otlp_sink().await?)
    } else {
        None
    };
    let mut traced = Vec::new();
    for (path, ratio) in TRACE_PATHS.into_iter().filter(|(p, _)| wanted(p)) {
        let Some(sink) = &sink else { break };
        let (proc, url, _) = start_gateway(
            &gw_bin,
            &dir.join(path),
            &delegate_url,
            Rows {
                openai_url: None,
                anthropic_url: None,
                bridges: false,
                trace: Some((sink, ratio)),
            },
            &key,
            10_000,
            &probe,
        )
        .await?;
        targets.push((
            path,
            Target {
                base: url,
                key: Some(key.clone()),
                load: Load::Ldp("echo"),
            },
            vec![proc.child.id()],
            delegate_pid,
        ));
        traced.push(proc);
    }
    // The bridges' rows: the same echo task, in each bridge's protocol.
    for bridge in BRIDGES {
        targets.push((
            bridge.name(),
            Target {
                base: gw_url.clone(),
                key: Some(key.clone()),
                load: Load::Bridge(bridge),
            },
            vec![gw_pid],
            delegate_pid,
        ));
    }
    if let Some(url) = openai_url {
        targets.push((
            "oai-direct",
            Target {
                base: url.to_owned(),
                key: None,
                load: Load::Chat {
                    path: "/chat/completions",
                    model: OPENAI_MODEL,
                },
            },
            vec![openai_pid],
            openai_pid,
        ));
        if let (Some(n), Some((port, _, base))) = (&nginx, &oai_nginx) {
            // The OpenAI server's base URL with nginx's address in place of its own.
            let path = base
                .trim_start_matches("http://")
                .find('/')
                .map_or("", |i| &base.trim_start_matches("http://")[i..]);
            targets.push((
                "oai-nginx",
                Target {
                    base: format!("http://127.0.0.1:{port}{path}"),
                    key: None,
                    load: Load::Chat {
                        path: "/chat/completions",
                        model: OPENAI_MODEL,
                    },
                },
                vec![n.child.id()],
                openai_pid,
            ));
        }
        targets.push((
            "oai-ingress",
            Target {
                base: gw_url.clone(),
                key: Some(key.clone()),
                load: Load::Chat {
                    path: "/v1/chat/completions",
                    model: OPENAI_SKILL,
                },
            },
            vec![gw_pid],
            openai_pid,
        ));
        targets.push((
            "ldp-oai",
            Target {
                base: gw_url.clone(),
                key: Some(key.clone()),
                load: Load::Ldp(OPENAI_SKILL),
            },
            vec![gw_pid],
            openai_pid,
        ));
    }

    if let Some(url) = anthropic_url {
        targets.push((
            "anth-direct",
            Target {
                base: url.to_owned(),
                key: None,
                load: Load::Messages(ANTHROPIC_MODEL),
            },
            vec![anthropic_pid],
            anthropic_pid,
        ));
        targets.push((
            "anthropic",
            Target {
                base: gw_url.clone(),
                key: Some(key.clone()),
                load: Load::Messages(ANTHROPIC_SKILL),
            },
            vec![gw_pid],
            anthropic_pid,
        ));
    }

    let mut rows = Vec::new();
    targets.retain(|(name, ..)| wanted(name));
    // Repetitions interleave the paths (direct, nginx, gateway, direct, …) so that a burst of
    // noise from the shared machine hits one repetition of each rather than one whole path;
    // the table keeps each path's median repetition by req/s.
    let mut runs: Vec<Row> = Vec::new();
    for &c in &conns {
        for _ in 0..reps {
            for (name, t, hop, upstream) in &targets {
                runs.push(row(name, t, c, secs, hop, *upstream).await?);
            }
        }
    }
    for &c in &conns {
        for (name, ..) in &targets {
            let mut same: Vec<Row> = runs
                .iter()
                .filter(|r| r.path == *name && r.conns == c)
                .cloned()
                .collect();
            same.sort_by(|a, b| a.rps.total_cmp(&b.rps));
            if !same.is_empty() {
                rows.push(same.swap_remove(same.len() / 2));
            }
        }
    }

    // Sanity: the gateway's metrics and ledger saw the tasks.
    let metrics = probe
        .get(format!("{admin_url}/metrics"))
        .send()
        .await?
        .text()
        .await?;
    let counted = metrics
        .lines()
        .filter(|l| l.starts_with("ldp_gateway_tasks_total") && l.contains("outcome=\"result\""))
        .filter_map(|l| l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()))
        .sum::<f64>();
    notes.push(format!(
        "gateway /metrics counted {counted:.0} ok tasks in ldp_gateway_tasks_total (warm-up included)"
    ));
    let metric = |name: &str| {
        metrics
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    let (committed, batches) = (
        metric("ldp_gateway_ledger_rows_total "),
        metric("ldp_gateway_ledger_batches_total "),
    );
    if batches > 0.0 {
        notes.push(format!(
            "ledger group commit: {committed:.0} rows in {batches:.0} transactions ({:.1} rows each)",
            committed / batches
        ));
    }
    let ledger = rusqlite::Connection::open(dir.join("gw/provenance.db"))
        .and_then(|c| c.query_row("SELECT count(*) FROM ledger", [], |r| r.get::<_, i64>(0)));
    match ledger {
        Ok(n) => notes.push(format!(
            "provenance ledger (durability commit) holds {n} rows"
        )),
        Err(e) => notes.push(format!("provenance ledger not readable: {e}")),
    }

    let after_rss = rss_kib(gateway.child.id());
    let memory = if full || args.iter().any(|a| a == "--memory") {
        let (per, opened) =
            session_memory(&gw_bin, &dir.join("mem"), &delegate_url, &probe).await?;
        Some(Memory {
            idle_kib: idle_rss,
            after_load_kib: after_rss,
            per_session: per,
            sessions: opened,
        })
    } else {
        None
    };

    let section = report(&rows, secs, reps, memory.as_ref(), &notes);
    println!("{section}");
    if full {
        write_readme(&manifest, &section)?;
    }
    drop(gateway);
    drop(nginx);
    drop(openai);
    drop(anthropic);
    drop(delegate);
    std::io::stdout().flush()?;
    Ok(())
}
