//! Heap allocations per task on each front end's hot path, counted on the gateway's threads
//! only: the gateway runs in process on a runtime of its own, the client and the simulated
//! delegates on another whose threads (and the main thread) are marked not to count, so what is
//! counted is the gateway's runtime and its background threads (the ledger writer, the blocking
//! pool). The gateway's config is the load bench's production-like one (a tenant with a hashed
//! API key and a rate limit, sqlite ledger with `durability = "commit"`, metrics, a policy with
//! every constraint kind, info logs to a file). Each front end: a warm-up, then TASKS sequential
//! tasks (one connection, one LDP session); allocation calls (a `realloc` counts as one) and
//! bytes asked for, per task. (The counting allocator is `tracking-allocator`'s, since this crate
//! forbids the `unsafe` a `GlobalAlloc` needs.)
//!
//! `cargo bench --bench allocs [-- TASKS]` (default 2000). `ALLOCS_TRACE=N` also samples every
//! Nth counted allocation's backtrace and prints the sites that allocate most, per front end.

#[path = "support/bridges.rs"]
mod bridges;
#[path = "support/fixtures.rs"]
mod fixtures;
#[path = "support/propose.rs"]
mod propose;

use bridges::Bridge;
use bytes::Bytes;
use fixtures::{CARD, POLICY};
use ldp_client::transport::HttpAnswer;
use ldp_client::Transport;
use ldp_gateway::ldp::{Body, Envelope, IdentityCard, PayloadMode};
use ldp_gateway::server::Gateway;
use ldp_gateway::sim::{self, openai::OpenAiOptions, SimOptions};
use reqwest::header::{HeaderName, HeaderValue, AUTHORIZATION};
use std::cell::Cell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::Duration;
use tracking_allocator::{AllocationGroupId, AllocationRegistry, AllocationTracker, Allocator};

#[global_allocator]
static GLOBAL: Allocator<std::alloc::System> = Allocator::system();

thread_local! {
    /// Set on the threads whose allocations are not the gateway's.
    static UNCOUNTED: Cell<bool> = const { Cell::new(false) };
}
static ALLOCS: AtomicU64 = AtomicU64::new(0);
static BYTES: AtomicU64 = AtomicU64::new(0);
/// With `ALLOCS_TRACE=N`: N (0 is off), and the sampled backtraces' sites, counted.
static TRACE_EVERY: AtomicU64 = AtomicU64::new(0);
static SITES: Mutex<Option<HashMap<String, u64>>> = Mutex::new(None);

const TIMEOUT: Duration = Duration::from_secs(10);
const KEY: &str = "allocs-bench-key";

/// Counts the allocations of the threads not marked [`UNCOUNTED`].
struct Counter;

impl AllocationTracker for Counter {
    fn allocated(&self, _addr: usize, size: usize, _wrapped: usize, _group: AllocationGroupId) {
        if UNCOUNTED.try_with(Cell::get).unwrap_or(true) {
            return;
        }
        let n = ALLOCS.fetch_add(1, Relaxed);
        BYTES.fetch_add(size as u64, Relaxed);
        let every = TRACE_EVERY.load(Relaxed);
        if every > 0 && n.is_multiple_of(every) {
            // The tracker runs with tracking suspended: what this allocates is not counted.
            let trace = std::backtrace::Backtrace::force_capture().to_string();
            let site = site(&trace);
            if let Ok(mut sites) = SITES.lock() {
                *sites
                    .get_or_insert_with(HashMap::new)
                    .entry(site)
                    .or_default() += 1;
            }
        }
    }

    fn deallocated(
        &self,
        _: usize,
        _: usize,
        _: usize,
        _: AllocationGroupId,
        _: AllocationGroupId,
    ) {
    }
}

/// A sampled allocation's site: the first frame outside the allocator, `alloc`, `core` and
/// `std` (what allocated), and the first four frames of the workspace's own code below it.
/// (Frames are told by their file: with line tables only, inlined frames have no module path.)
fn site(trace: &str) -> String {
    let mut frames = Vec::new();
    let mut lines = trace.lines().map(str::trim).peekable();
    while let Some(line) = lines.next() {
        let Some((_, name)) = line.split_once(": ") else {
            continue;
        };
        let at = match lines.peek() {
            Some(l) if l.starts_with("at ") => lines.next().map_or("", |l| &l[3..]),
            _ => "",
        };
        frames.push((name, at));
    }
    let plumbing = |at: &str| {
        at.is_empty()
            || at.starts_with("/rustc/")
            || at.contains("/tracking-allocator-")
            || at.contains("benches/allocs.rs")
    };
    let ours = |at: &str| !at.contains("/.cargo/") && !plumbing(at);
    // `file:line` from the crate's `src/` on (or the registry crate's folder on).
    let short = |at: &str| {
        let at = at.rsplit_once(":").map_or(at, |(head, _col)| head);
        match at.find("/registry/src/") {
            Some(i) => at[i + 14..].split_once('/').map_or(at, |(_, rest)| rest),
            None => at.find("/src/").map_or(at, |i| &at[i + 1..]),
        }
        .to_owned()
    };
    let Some(top) = frames.iter().position(|(_, at)| !plumbing(at)) else {
        return "?".into();
    };
    // A name without its generic arguments.
    let bare = |name: &str| name.split_once('<').map_or(name, |(n, _)| n).to_owned();
    let (name, at) = frames[top];
    let mut out = format!("{} @ {}", bare(name), short(at));
    for (name, at) in frames[top..].iter().filter(|(_, at)| ours(at)).take(4) {
        out.push_str(&format!(" <- {} @ {}", bare(name), short(at)));
    }
    out
}

/// Allocations and bytes counted so far.
fn counted() -> (u64, u64) {
    (ALLOCS.load(Relaxed), BYTES.load(Relaxed))
}

/// The request a front end's row repeats.
#[derive(Clone, Copy)]
enum Front {
    /// LDP TASK_SUBMITs of this skill in one session.
    Ldp(&'static str),
    /// OpenAI chat completions (`POST /v1/chat/completions`) to the OpenAI-backed delegate.
    OpenAi,
    /// A bridge of another agent protocol, sent the load bench's request.
    Bridge(Bridge),
}

impl Front {
    fn name(self) -> &'static str {
        match self {
            Front::Ldp("echo") => "ldp",
            Front::Ldp(_) => "ldp-oai",
            Front::OpenAi => "oai-ingress",
            Front::Bridge(b) => b.name(),
        }
    }

    fn path(self) -> &'static str {
        match self {
            Front::Ldp(_) => "",
            Front::OpenAi => "/v1/chat/completions",
            Front::Bridge(b) => b.path(),
        }
    }

    /// Request `i` of the sender `sender`, the load bench's (`benches/load.rs`).
    fn body(self, sender: &str, i: u64) -> Bytes {
        match self {
            Front::Ldp(_) => Bytes::new(),
            Front::OpenAi => Bytes::from(
                serde_json::json!({
                    "model": "chat",
                    "messages": [{"role": "user", "content": "hello"}],
                })
                .to_string(),
            ),
            Front::Bridge(b) => b.body(sender, i),
        }
    }

    /// Whether the answer is the task's result in the front end's protocol.
    fn answered(self, a: &HttpAnswer) -> bool {
        match self {
            Front::Ldp(_) => false,
            Front::OpenAi => {
                a.head.status.is_success()
                    && serde_json::from_slice::<serde_json::Value>(&a.body)
                        .is_ok_and(|v| v["choices"][0]["message"]["content"].is_string())
            }
            Front::Bridge(b) => b.answered(a),
        }
    }
}

/// One front end's row: `warm` tasks, then `tasks` counted (their allocations sampled every
/// `trace`th when not 0); allocations and bytes per task.
async fn row(
    base: &str,
    front: Front,
    warm: u64,
    tasks: u64,
    trace: u64,
) -> anyhow::Result<(f64, f64)> {
    let mut client = Transport::new("ldp:client:allocs", TIMEOUT, TIMEOUT);
    let auth = vec![(
        AUTHORIZATION,
        format!("Bearer {KEY}").parse::<HeaderValue>()?,
    )];
    client.set_headers(auth.clone());
    let mut headers = auth;
    headers.push((
        HeaderName::from_static("a2a-version"),
        HeaderValue::from_static("1.0"),
    ));
    let sender = format!("allocs{}", front.name().replace('-', ""));
    let sid = match front {
        Front::Ldp(_) => propose::session(&client, base, TIMEOUT).await?,
        _ => String::new(),
    };
    let mut before = counted();
    for i in 0..warm + tasks {
        if i == warm {
            TRACE_EVERY.store(trace, Relaxed);
            before = counted();
        }
        let ok = match front {
            Front::Ldp(skill) => {
                let env = Envelope::new(
                    sid.as_str(),
                    client.from_id(),
                    "x",
                    Body::TaskSubmit {
                        task_id: format!("t{i}").into(),
                        skill: skill.into(),
                        input: serde_json::json!("hello").into(),
                        contract: None,
                    },
                    PayloadMode::Text,
                );
                matches!(
                    client.send(base, &env, TIMEOUT).await?.body,
                    Body::TaskResult { .. }
                )
            }
            _ => {
                let body = front.body(&sender, i + 1);
                let a = client
                    .request(
                        base,
                        front.path(),
                        Some(body),
                        &headers,
                        None.into(),
                        TIMEOUT,
                    )
                    .await?;
                front.answered(&a)
            }
        };
        anyhow::ensure!(ok, "{}: task {i} not answered", front.name());
    }
    let after = counted();
    TRACE_EVERY.store(0, Relaxed);
    let n = tasks as f64;
    Ok((
        (after.0 - before.0) as f64 / n,
        (after.1 - before.1) as f64 / n,
    ))
}

/// The load bench's gateway config (`benches/load.rs`), its ledger and policies under `dir`.
fn config(dir: &std::path::Path, ldp: &str, openai: &str) -> String {
    format!(
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
[[tenants]]
name = "load"
api_key_sha256 = ["{h}"]
trust_domains = ["default"]
policies = ["load-all"]
default_policy = "load-all"
limits = {{ rps = 1000000, burst = 1000000 }}
[[delegates]]
url = "{ldp}"
name = "load-fast"
[[delegates]]
kind = "openai"
name = "load-openai"
url = "{openai}"
model = "load-model"
[delegates.card]
skills = ["chat"]
quality = 0.9
price_per_mtok_input = 0.1
price_per_mtok_output = 0.4
latency_p50_ms = 5
jurisdiction = "eu-west"
trust_domain = {{ name = "default", allow_cross_domain = false, trusted_peers = [] }}
context_window = 32768
model_family = "sim-openai"
[openai]
session_memory_bytes = 0
[ladp]
rate_per_minute = 60000
"#,
        d = dir.display(),
        h = ldp_gateway::secret::hash_key(KEY),
    )
}

fn main() -> anyhow::Result<()> {
    UNCOUNTED.set(true);
    let tasks: u64 = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(2000);
    let trace = std::env::var("ALLOCS_TRACE")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0);
    AllocationRegistry::set_global_tracker(Counter)
        .map_err(|_| anyhow::anyhow!("a tracker is already set"))?;
    AllocationRegistry::enable_tracking();

    // The client's and the delegates' runtime, not counted; the gateway's, counted.
    let peers = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .on_thread_start(|| UNCOUNTED.set(true))
        .build()?;
    let gateway = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;

    let dir = tempfile::tempdir()?;
    ldp_gateway::telemetry::init_to_file(&dir.path().join("gateway.log"))?;
    let (delegate, openai) = peers.block_on(async {
        let card: IdentityCard = serde_json::from_str(CARD)?;
        let ldp = sim::spawn(
            tokio::net::TcpListener::bind("127.0.0.1:0").await?,
            SimOptions::new(card),
        );
        let oai = sim::openai::spawn(
            tokio::net::TcpListener::bind("127.0.0.1:0").await?,
            OpenAiOptions::new("load-model"),
        );
        anyhow::Ok((ldp.await?, oai.await?))
    })?;
    std::fs::create_dir_all(dir.path().join("policies"))?;
    std::fs::write(dir.path().join("policies/load-all.toml"), POLICY)?;
    let path = dir.path().join("gateway.toml");
    std::fs::write(&path, config(dir.path(), &delegate.url(), &openai.url()))?;
    let cfg = ldp_gateway::config::Config::load(&path)?;
    let gw = gateway.block_on(async {
        let gw = Gateway::start(cfg).await?;
        anyhow::ensure!(gw.wait_healthy(2, TIMEOUT).await, "delegates not healthy");
        anyhow::Ok(gw)
    })?;
    let base = gw.ldp_url();

    println!("heap allocations per task on the gateway's threads, {tasks} sequential tasks");
    println!("| front end | allocations per task | bytes per task |");
    println!("|---|---|---|");
    let fronts = [Front::Ldp("echo"), Front::OpenAi, Front::Ldp("chat")]
        .into_iter()
        .chain(bridges::BRIDGES.map(Front::Bridge));
    for front in fronts {
        let warm = (tasks / 10).max(50);
        let (allocs, bytes) = peers.block_on(row(&base, front, warm, tasks, trace))?;
        println!("| {} | {allocs:.1} | {bytes:.0} |", front.name());
        if trace > 0 {
            print_sites(front.name());
        }
    }
    gateway.block_on(gw.shutdown());
    peers.block_on(async {
        delegate.shutdown().await;
        openai.shutdown().await;
    });
    Ok(())
}

/// The sampled sites of the last row, most first (and clears them).
fn print_sites(front: &str) {
    let Some(sites) = SITES.lock().ok().and_then(|mut s| s.take()) else {
        return;
    };
    let total: u64 = sites.values().sum();
    let mut sites: Vec<_> = sites.into_iter().collect();
    sites.sort_by_key(|s| std::cmp::Reverse(s.1));
    eprintln!("--- {front}: {total} sampled allocations, top sites");
    for (site, n) in &sites {
        eprintln!("{:5.1}% {site}", 100.0 * *n as f64 / total as f64);
    }
}
