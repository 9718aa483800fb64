//! Quality bench: what peer verification (`[verify]`) and learned quality buy, and cost, on a
//! fleet whose cheapest producer lies about its quality.
//! `cargo bench --bench quality [-- TASKS] [--reps R]`: TASKS per run (default 400), R runs per
//! scenario (default 5, simulator seeds 1000, 2000, …: one seeded run is one draw of the
//! verifiers' mistakes, and an early mistake shapes the rest of a run). About a minute.
//!
//! Fleet (simulated delegates, in process, every one at a fixed 2 ms latency, seeded draws):
//! - `liar` (family `alpha`): skill `qa`, claims quality 0.95, right half the time, 0.001 USD;
//! - `honest` (`delta`): claims 0.9, right 97% of the time, 0.01 USD;
//! - `honest-b` (`eps`): claims 0.85, right 90%, 0.005 USD;
//! - `v-beta`, `v-gamma` (`beta`, `gamma`): skill `verify`, judging right 95% of the time,
//!   0.0005 USD.
//!
//! Policy: `[require] min_quality = 0.8`, cost-heavy `[weights]` (quality 0.2, cost 0.7,
//! latency 0.1). Each scenario runs on a fresh gateway (its own ledger, no evidence carried
//! over), R runs of TASKS tasks carrying `expected`, sequentially in one text-mode session:
//! 1. blind — no `[verify]`;
//! 2. verified — `[verify]` with `sample = 1.0` (2 verifiers, threshold 0.75, 3 rounds);
//! 3. sampled — the same with `sample = 0.2`;
//! 4. oracle — no `[verify]`, every card declaring its true accuracy as its quality (so
//!    `min_quality` keeps the liar out from the start);
//! 5. rubber stamp, before — `v-beta` passes everything (still claiming 0.95) and is the
//!    cheapest verifier (0.0002 USD), `[verify]` with 1 verifier, `sample = 1.0`;
//! 6. rubber stamp, after — the same with `[verify.calibration]` (the shipped reference,
//!    12 items, a round at start, waited for).
//!
//! For each: right answers among those delivered, tasks failed (by code), runs in which every
//! producer ended below `min_quality` (NO_ELIGIBLE_DELEGATE), cost per 100 tasks
//! (the ledger rows' `cost_usd`, read through `/admin/provenance`; checked against the
//! simulators' call counts × prices) and its ratio to the oracle's, the share of tasks a
//! `[routing] explore` trial served, verified answers that were wrong, the liar's share in the last quarter (of answers
//! delivered, and of producer calls it received), p50/p99 client-observed task latency.
//!
//! 7. Added latency of verification: the same fleet, accuracy 1.0 everywhere, verified
//!    (`sample = 1`) and unverified tasks interleaved in one run (two sessions naming their
//!    policy), max(TASKS, 300) measured of each after a 10% warm-up.
//!
//! Prints markdown: a summary over the runs, one row per run, the latency table.

use ldp_client::Transport;
use ldp_gateway::config::{Config, DelegateConfig};
use ldp_gateway::ldp::{Body, Envelope, IdentityCard, PayloadMode, SessionConfig};
use ldp_gateway::provenance::LedgerRow;
use ldp_gateway::server::Gateway;
use ldp_gateway::sim::{self, SimHandle, SimOptions};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

const TIMEOUT: Duration = Duration::from_secs(30);
const GATEWAY_ID: &str = "ldp:delegate:gateway";
/// Every simulated delegate's latency.
const SIM_LATENCY: Duration = Duration::from_millis(2);
const LIAR: &str = "liar";

/// One simulated delegate of the fleet.
struct Member {
    name: &'static str,
    family: &'static str,
    /// `qa` for a producer, `verify` for a verifier.
    skill: &'static str,
    /// The quality its card declares (self-claimed).
    declared: f64,
    /// `cost_per_call_usd` on its card.
    price: f64,
    /// How often it is right (a producer) or judges right (a verifier).
    accuracy: f64,
}

const FLEET: [Member; 5] = [
    Member {
        name: LIAR,
        family: "alpha",
        skill: "qa",
        declared: 0.95,
        price: 0.001,
        accuracy: 0.5,
    },
    Member {
        name: "honest",
        family: "delta",
        skill: "qa",
        declared: 0.9,
        price: 0.01,
        accuracy: 0.97,
    },
    Member {
        name: "honest-b",
        family: "eps",
        skill: "qa",
        declared: 0.85,
        price: 0.005,
        accuracy: 0.9,
    },
    Member {
        name: "v-beta",
        family: "beta",
        skill: "verify",
        declared: 0.95,
        price: 0.0005,
        accuracy: 0.95,
    },
    Member {
        name: "v-gamma",
        family: "gamma",
        skill: "verify",
        declared: 0.95,
        price: 0.0005,
        accuracy: 0.95,
    },
];

/// How the fleet is dressed for a scenario.
#[derive(Clone, Copy, PartialEq)]
enum Dress {
    /// Cards as above.
    AsIs,
    /// Every card declares its true accuracy as its quality.
    Oracle,
    /// Everyone right (and judging right) every time.
    Perfect,
    /// As is, but `v-beta` is a rubber stamp (passes everything, still claims 0.95) and the
    /// cheapest verifier ([`STAMP_PRICE`]).
    Stamp,
}

/// The rubber stamp's price per call (`v-gamma` costs 0.0005).
const STAMP_PRICE: f64 = 0.0002;

/// What a scenario's policy asks of verification.
#[derive(Clone, Copy)]
struct Verifying {
    sample: f64,
    verifiers: u32,
    /// `[verify.calibration]` with the shipped reference (a round at start).
    calibrated: bool,
}

impl Verifying {
    const fn sampled(sample: f64) -> Option<Verifying> {
        Some(Verifying {
            sample,
            verifiers: 2,
            calibrated: false,
        })
    }
}

/// `m`'s card, declaring `declared` quality at `price` per call.
fn card_priced(m: &Member, declared: f64, price: f64) -> anyhow::Result<IdentityCard> {
    Ok(serde_json::from_value(json!({
        "delegate_id": format!("ldp:delegate:{}", m.name), "name": m.name,
        "model_family": m.family, "model_version": "sim-1", "trust_domain": {"name": "default"},
        "endpoint": "", "supported_payload_modes": ["semantic_frame", "text"],
        "capabilities": [{"name": m.skill, "quality": {"quality_score": declared,
            "cost_per_call_usd": price, "latency_p50_ms": SIM_LATENCY.as_millis() as u64}}]
    }))?)
}

/// A policy named `name`: min_quality 0.8, cost-heavy weights, `[verify]` if asked.
fn policy(name: &str, v: Option<Verifying>) -> String {
    let mut p = format!(
        "name = \"{name}\"\n[require]\nmin_quality = 0.8\n\
         [weights]\nquality = 0.2\ncost = 0.7\nlatency = 0.1\n"
    );
    if let Some(v) = v {
        let _ = write!(
            p,
            "[verify]\nskill = \"verify\"\nverifiers = {}\nthreshold = 0.75\nmax_rounds = 3\n\
             sample = {:?}\nindependent = true\n",
            v.verifiers, v.sample
        );
        if v.calibrated {
            let reference = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("policies/calibration/qa.jsonl");
            let _ = write!(
                p,
                "[verify.calibration]\nreference = {:?}\nevery = \"10m\"\nitems = 12\n",
                reference.display().to_string()
            );
        }
    }
    p
}

/// A fresh gateway over a fresh fleet, with these policies (the first is the default).
struct Rig {
    gw: Gateway,
    sims: Vec<SimHandle>,
    client: Transport,
    _dir: tempfile::TempDir,
}

impl Rig {
    async fn start(
        dress: Dress,
        policies: &[(&str, Option<Verifying>)],
        seed: u64,
    ) -> anyhow::Result<Rig> {
        let dir = tempfile::tempdir()?;
        let pdir = dir.path().join("policies");
        std::fs::create_dir(&pdir)?;
        for (name, sample) in policies {
            std::fs::write(pdir.join(format!("{name}.toml")), policy(name, *sample))?;
        }
        let mut sims = Vec::new();
        let mut delegates = Vec::new();
        for (i, m) in FLEET.iter().enumerate() {
            let (declared, accuracy) = match dress {
                Dress::AsIs | Dress::Stamp => (m.declared, m.accuracy),
                Dress::Oracle => (m.accuracy, m.accuracy),
                Dress::Perfect => (m.declared, 1.0),
            };
            let stamp = dress == Dress::Stamp && m.name == "v-beta";
            let price = if stamp { STAMP_PRICE } else { m.price };
            let opts = SimOptions {
                accuracy: Some(accuracy),
                verifier: m.skill == "verify",
                rubber_stamp: stamp,
                seed: Some(seed + i as u64),
                latency: SIM_LATENCY,
                ..SimOptions::new(card_priced(m, declared, price)?)
            };
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
            let s = sim::spawn(listener, opts).await?;
            delegates.push(DelegateConfig {
                name: Some(m.name.to_owned()),
                ..DelegateConfig::new(s.url())
            });
            sims.push(s);
        }
        let mut cfg = Config::default();
        cfg.server.listen = "127.0.0.1:0".parse()?;
        cfg.admin.listen = "127.0.0.1:0".parse()?;
        // Loopback admin without a token (a variable nobody sets).
        cfg.admin.token_env = "LDP_QUALITY_BENCH_ADMIN_TOKEN_NEVER_SET".into();
        cfg.discovery.poll_interval = Duration::from_secs(3600);
        cfg.provenance.store = format!("sqlite://{}", dir.path().join("ledger.db").display());
        cfg.policies.dir = pdir;
        cfg.policies.default = policies[0].0.to_owned();
        cfg.delegates = delegates;
        let gw = Gateway::start(cfg).await?;
        if !gw.wait_healthy(FLEET.len(), TIMEOUT).await {
            anyhow::bail!("the fleet did not come up healthy");
        }
        let rig = Rig {
            gw,
            sims,
            client: Transport::new("ldp:client:quality-bench", TIMEOUT, TIMEOUT),
            _dir: dir,
        };
        // A calibrated policy: its round at start is in before the first task.
        if policies
            .iter()
            .any(|(_, v)| v.is_some_and(|v| v.calibrated))
        {
            let deadline = Instant::now() + TIMEOUT;
            while rig.calibration_rows().await? < 2 {
                if Instant::now() > deadline {
                    anyhow::bail!("no calibration round at start");
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        Ok(rig)
    }

    /// What the calibration rounds cost (their rows' `cost_usd`).
    async fn calibration_cost(&self) -> anyhow::Result<f64> {
        let mut usd = 0.0;
        for v in ["v-beta", "v-gamma"] {
            let url = format!(
                "{}/admin/provenance?delegate={v}&limit=10000",
                self.gw.admin_url()
            );
            let body: Value = serde_json::from_slice(&reqwest::get(&url).await?.bytes().await?)?;
            for r in body["rows"].as_array().into_iter().flatten() {
                if r["task_id"]
                    .as_str()
                    .is_some_and(|t| t.starts_with("calibration-"))
                {
                    usd += r["cost_usd"].as_f64().unwrap_or(0.0);
                }
            }
        }
        Ok(usd)
    }

    /// How many calibration rows the ledger has (the gateway's own, tenant `""`).
    async fn calibration_rows(&self) -> anyhow::Result<usize> {
        let mut n = 0;
        for v in ["v-beta", "v-gamma"] {
            let url = format!(
                "{}/admin/provenance?delegate={v}&limit=100",
                self.gw.admin_url()
            );
            let body: Value = serde_json::from_slice(&reqwest::get(&url).await?.bytes().await?)?;
            n += body["rows"].as_array().map_or(0, |rows| {
                rows.iter()
                    .filter(|r| {
                        r["task_id"]
                            .as_str()
                            .is_some_and(|t| t.starts_with("calibration-"))
                    })
                    .count()
            });
        }
        Ok(n)
    }

    fn sim(&self, name: &str) -> anyhow::Result<&SimHandle> {
        FLEET
            .iter()
            .position(|m| m.name == name)
            .and_then(|i| self.sims.get(i))
            .ok_or_else(|| anyhow::anyhow!("no simulator {name}"))
    }

    /// A text-mode session, under `policy` if given.
    async fn open(&self, policy: Option<&str>) -> anyhow::Result<String> {
        let config = SessionConfig {
            payload_mode: Some(PayloadMode::Text),
            preferred_payload_modes: Some(vec![PayloadMode::Text]),
            policy: policy.map(str::to_owned),
            ..SessionConfig::default()
        };
        let env = Envelope::new(
            "",
            self.client.from_id(),
            GATEWAY_ID,
            Body::SessionPropose { config },
            PayloadMode::Text,
        );
        match self
            .client
            .send(&self.gw.ldp_url(), &env, TIMEOUT)
            .await?
            .body
        {
            Body::SessionAccept { session_id, .. } => Ok(session_id),
            other => anyhow::bail!("no session: {other:?}"),
        }
    }

    /// Task `i` (`what is i + i?`, expected `2i`) in session `sid`.
    async fn task(&self, sid: &str, i: usize) -> anyhow::Result<Obs> {
        let expected = json!(i * 2);
        let input = json!({"instruction": format!("what is {i} + {i}?"), "expected": expected});
        let env = Envelope::new(
            sid,
            self.client.from_id(),
            GATEWAY_ID,
            Body::TaskSubmit {
                task_id: format!("q{i}").into(),
                skill: "qa".into(),
                input: input.into(),
                contract: None,
            },
            PayloadMode::Text,
        );
        let t = Instant::now();
        let reply = self.client.send(&self.gw.ldp_url(), &env, TIMEOUT).await?;
        let took = t.elapsed();
        Ok(match reply.body {
            Body::TaskResult {
                output, provenance, ..
            } => {
                let out = output.to_value()?;
                let p = provenance.ok_or_else(|| anyhow::anyhow!("a result without provenance"))?;
                Obs {
                    took,
                    right: Some(out["answer"] == expected),
                    failed: None,
                    producer: Some(p.produced_by),
                    verified: p.verification_status.as_str() == "peer_verified",
                }
            }
            Body::TaskFailed { error, .. } => Obs {
                took,
                right: None,
                failed: Some(error.code),
                producer: None,
                verified: false,
            },
            other => anyhow::bail!("unexpected answer: {other:?}"),
        })
    }

    /// Every ledger row of session `sid`, through `GET /admin/provenance`.
    async fn ledger(&self, sid: &str) -> anyhow::Result<Vec<LedgerRow>> {
        let http = reqwest::Client::new();
        let mut rows = Vec::new();
        let mut offset = 0;
        loop {
            let url = format!(
                "{}/admin/provenance?session_id={sid}&limit=10000&offset={offset}",
                self.gw.admin_url()
            );
            let resp = http.get(&url).send().await?;
            let status = resp.status();
            let body: Value = serde_json::from_slice(&resp.bytes().await?)?;
            if !status.is_success() {
                anyhow::bail!("{url}: {status} {body}");
            }
            let page: Vec<LedgerRow> = serde_json::from_value(body["rows"].clone())?;
            rows.extend(page);
            match body["next_offset"].as_u64() {
                Some(next) => offset = next,
                None => return Ok(rows),
            }
        }
    }

    /// Σ over the simulators of (tasks received × card price): what the calls cost before
    /// the per-token surcharge (`× (1 + tokens/1000)`), a floor for the ledger's total.
    fn priced_calls(&self, dress: Dress) -> f64 {
        FLEET
            .iter()
            .zip(&self.sims)
            .map(|(m, s)| {
                let price = if dress == Dress::Stamp && m.name == "v-beta" {
                    STAMP_PRICE
                } else {
                    m.price
                };
                s.stats().tasks as f64 * price
            })
            .sum()
    }

    async fn shutdown(self) {
        self.gw.shutdown().await;
        for s in self.sims {
            s.shutdown().await;
        }
    }
}

/// What the client saw of one task.
struct Obs {
    took: Duration,
    /// The answer was right (`None`: no answer).
    right: Option<bool>,
    /// The failure's code.
    failed: Option<String>,
    /// `provenance.produced_by`.
    producer: Option<String>,
    verified: bool,
}

/// One run of one scenario.
struct Run {
    /// The simulators' seeds start here.
    seed: u64,
    tasks: usize,
    delivered: usize,
    right: usize,
    /// Failures by code.
    failed: BTreeMap<String, usize>,
    /// The first task that failed `NO_ELIGIBLE_DELEGATE`: every producer excluded.
    locked_out_at: Option<usize>,
    cost_usd: f64,
    /// The ledger's total ÷ Σ(simulator calls × card price).
    cost_check: f64,
    /// Last quarter: tasks, answers the liar produced, producer calls the liar received.
    last: usize,
    liar_answers_last: usize,
    liar_calls_last: u64,
    took: Vec<Duration>,
    verified: usize,
    by_producer: BTreeMap<String, usize>,
    /// Tasks whose (last) routing pick was a trial (`[routing] explore`: exploring or
    /// probation).
    trials: usize,
    /// Delivered as `peer_verified` yet wrong.
    verified_wrong: usize,
}

impl Run {
    fn failures(&self) -> usize {
        self.failed.values().sum()
    }

    fn failed_text(&self) -> String {
        if self.failed.is_empty() {
            return "0".into();
        }
        let codes: Vec<String> = self
            .failed
            .iter()
            .map(|(k, v)| format!("{v} {k}"))
            .collect();
        codes.join(", ")
    }
}

fn pct(v: &[Duration], p: f64) -> Duration {
    let mut v = v.to_vec();
    v.sort();
    v.get(((v.len() as f64 - 1.0) * p).round() as usize)
        .copied()
        .unwrap_or_default()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn percent(a: usize, b: usize) -> f64 {
    100.0 * a as f64 / b.max(1) as f64
}

async fn scenario(
    dress: Dress,
    verifying: Option<Verifying>,
    n: usize,
    seed: u64,
) -> anyhow::Result<Run> {
    let rig = Rig::start(dress, &[("quality", verifying)], seed).await?;
    let sid = rig.open(None).await?;
    let last_quarter = n - n / 4;
    let mut liar_calls_before = 0;
    let mut obs = Vec::with_capacity(n);
    for i in 0..n {
        if i == last_quarter {
            liar_calls_before = rig.sim(LIAR)?.stats().tasks;
        }
        obs.push(rig.task(&sid, i).await?);
    }
    let liar_calls_last = rig.sim(LIAR)?.stats().tasks - liar_calls_before;
    let rows = rig.ledger(&sid).await?;
    if rows.len() != n {
        anyhow::bail!("{} ledger rows for {n} tasks", rows.len());
    }
    let cost_usd: f64 = rows.iter().filter_map(|r| r.cost_usd).sum();
    let trials = rows
        .iter()
        .filter(|r| !r.routing.to_value()["trial"].is_null())
        .count();
    // Calibration rounds are the gateway's own (no session): their cost is not the tasks'.
    let calibration: f64 = rig.calibration_cost().await?;
    let priced = rig.priced_calls(dress) - calibration;
    rig.shutdown().await;

    let liar_id = format!("ldp:delegate:{LIAR}");
    let mut failed = BTreeMap::new();
    let mut by_producer = BTreeMap::new();
    for o in &obs {
        if let Some(code) = &o.failed {
            *failed.entry(code.clone()).or_insert(0) += 1;
        }
        if let Some(p) = &o.producer {
            let short = p.strip_prefix("ldp:delegate:").unwrap_or(p).to_owned();
            *by_producer.entry(short).or_insert(0) += 1;
        }
    }
    let last = &obs[last_quarter..];
    Ok(Run {
        seed,
        tasks: n,
        delivered: obs.iter().filter(|o| o.right.is_some()).count(),
        right: obs.iter().filter(|o| o.right == Some(true)).count(),
        failed,
        locked_out_at: obs
            .iter()
            .position(|o| o.failed.as_deref() == Some("NO_ELIGIBLE_DELEGATE")),
        cost_usd,
        cost_check: if priced > 0.0 { cost_usd / priced } else { 0.0 },
        last: last.len(),
        liar_answers_last: last
            .iter()
            .filter(|o| o.producer.as_deref() == Some(liar_id.as_str()))
            .count(),
        liar_calls_last,
        took: obs.iter().map(|o| o.took).collect(),
        verified: obs.iter().filter(|o| o.verified).count(),
        by_producer,
        trials,
        verified_wrong: obs
            .iter()
            .filter(|o| o.verified && o.right == Some(false))
            .count(),
    })
}

/// Scenario 5: verified and unverified tasks interleaved on a perfect fleet; the measured
/// latencies of each (after a 10% warm-up), and how many came back otherwise verified than
/// their policy says.
async fn added_latency(n: usize) -> anyhow::Result<(Vec<Duration>, Vec<Duration>, usize)> {
    let policies = [("plain", None), ("verified", Verifying::sampled(1.0))];
    let rig = Rig::start(Dress::Perfect, &policies, 1000).await?;
    let plain = rig.open(Some("plain")).await?;
    let verified = rig.open(Some("verified")).await?;
    let warm = n / 10;
    let (mut p, mut v) = (Vec::with_capacity(n), Vec::with_capacity(n));
    let mut mismatched = 0;
    for i in 0..n + warm {
        // Alternate which goes first, so neither always follows the other.
        let order = if i % 2 == 0 {
            [(&plain, false), (&verified, true)]
        } else {
            [(&verified, true), (&plain, false)]
        };
        for (sid, is_verified) in order {
            let o = rig.task(sid, i).await?;
            if o.right != Some(true) {
                anyhow::bail!("a perfect fleet answered wrong or failed: {:?}", o.failed);
            }
            if o.verified != is_verified {
                mismatched += 1;
            }
            if i >= warm {
                if is_verified { &mut v } else { &mut p }.push(o.took);
            }
        }
    }
    rig.shutdown().await;
    Ok((p, v, mismatched))
}

/// TASKS (the first number) and `--reps R`.
fn args() -> (usize, usize) {
    let (mut n, mut reps) = (400, 5);
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        if a == "--reps" {
            reps = it.next().and_then(|r| r.parse().ok()).unwrap_or(reps);
        } else if let Ok(v) = a.parse() {
            n = v;
        }
    }
    (n.max(8), reps.max(1))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let (n, reps) = args();
    let started = Instant::now();
    let stamp = |calibrated| {
        Some(Verifying {
            sample: 1.0,
            verifiers: 1,
            calibrated,
        })
    };
    let scenarios = [
        ("blind", Dress::AsIs, None),
        (
            "verified (sample 1.0)",
            Dress::AsIs,
            Verifying::sampled(1.0),
        ),
        ("sampled (sample 0.2)", Dress::AsIs, Verifying::sampled(0.2)),
        ("oracle", Dress::Oracle, None),
        (
            "rubber stamp, before (1 verifier)",
            Dress::Stamp,
            stamp(false),
        ),
        (
            "rubber stamp, after (calibrated)",
            Dress::Stamp,
            stamp(true),
        ),
    ];
    let mut results: Vec<(&str, Vec<Run>)> = Vec::new();
    for (name, dress, sample) in scenarios {
        let mut runs = Vec::new();
        for r in 0..reps {
            let seed = 1000 * (r as u64 + 1);
            runs.push(scenario(dress, sample, n, seed).await?);
        }
        eprintln!(
            "{name}: {reps} run(s) done ({:.1?} so far)",
            started.elapsed()
        );
        results.push((name, runs));
    }
    let n5 = n.max(300);
    let (plain, verified, mismatched) = added_latency(n5).await?;
    let per100 = |runs: &[Run]| {
        runs.iter()
            .map(|r| r.cost_usd / r.tasks as f64 * 100.0)
            .sum::<f64>()
            / runs.len().max(1) as f64
    };
    let oracle_cost = results
        .iter()
        .find(|(name, _)| *name == "oracle")
        .map_or(0.0, |(_, runs)| per100(runs));

    let mut out = String::new();
    let _ = writeln!(
        out,
        "Fleet: liar claims 0.95, right 50%, 0.001 USD/call · honest claims 0.9, right 97%, \
         0.01 USD · honest-b claims 0.85, right 90%, 0.005 USD · verifiers v-beta and v-gamma \
         (other model families) judge right 95%, 0.0005 USD · every delegate 2 ms. Policy: \
         min_quality 0.8, weights quality 0.2 / cost 0.7 / latency 0.1; `[verify]` 2 verifiers, \
         threshold 0.75, max_rounds 3 (rubber stamp scenarios: `v-beta` passes everything, \
         still claims 0.95, costs 0.0002 USD; 1 verifier, sample 1.0; after: \
         `[verify.calibration]` with the shipped 12-item reference, a round at start). \
         `[routing] explore` at its default, 0.05. {n} sequential tasks per run, {reps} run(s) per scenario \
         (simulator seeds 1000, 2000, …), each run on a fresh gateway.\n"
    );
    let _ = writeln!(
        out,
        "| scenario | right / delivered | right / all tasks | verified but wrong | failed | runs locked out | USD per 100 tasks: mean (min–max) | × oracle | trials (explore) | liar share, last ¼: answers / calls | p50 ms | p99 ms |"
    );
    let _ = writeln!(
        out,
        "|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|"
    );
    for (name, runs) in &results {
        let sum = |f: &dyn Fn(&Run) -> usize| runs.iter().map(f).sum::<usize>();
        let (tasks, delivered, right) =
            (sum(&|r| r.tasks), sum(&|r| r.delivered), sum(&|r| r.right));
        let mut failed: BTreeMap<&str, usize> = BTreeMap::new();
        for r in runs {
            for (k, v) in &r.failed {
                *failed.entry(k.as_str()).or_insert(0) += v;
            }
        }
        let failed_text = if failed.is_empty() {
            "0".to_owned()
        } else {
            let c: Vec<String> = failed.iter().map(|(k, v)| format!("{v} {k}")).collect();
            c.join(", ")
        };
        let per100: Vec<f64> = runs
            .iter()
            .map(|r| r.cost_usd / r.tasks as f64 * 100.0)
            .collect();
        let mean = per100.iter().sum::<f64>() / per100.len() as f64;
        let min = per100.iter().copied().fold(f64::INFINITY, f64::min);
        let max = per100.iter().copied().fold(0.0, f64::max);
        let last = sum(&|r| r.last);
        let took: Vec<Duration> = runs.iter().flat_map(|r| r.took.iter().copied()).collect();
        let _ = writeln!(
            out,
            "| {name} | {:.1}% ({right}/{delivered}) | {:.1}% | {} | {failed_text} | {}/{} | {mean:.3} ({min:.3}–{max:.3}) | {:.2} | {:.1}% | {:.1}% / {:.1}% | {:.2} | {:.2} |",
            percent(right, delivered),
            percent(right, tasks),
            sum(&|r| r.verified_wrong),
            runs.iter().filter(|r| r.locked_out_at.is_some()).count(),
            runs.len(),
            mean / oracle_cost.max(1e-12),
            percent(sum(&|r| r.trials), tasks),
            percent(sum(&|r| r.liar_answers_last), last),
            100.0 * runs.iter().map(|r| r.liar_calls_last).sum::<u64>() as f64 / last.max(1) as f64,
            ms(pct(&took, 0.5)),
            ms(pct(&took, 0.99)),
        );
    }
    let _ = writeln!(
        out,
        "\nright / delivered: answers equal to `expected` among the TASK_RESULTs; failed: \
         TASK_FAILED by code, all runs; locked out: a run in which a task failed \
         NO_ELIGIBLE_DELEGATE (every producer below min_quality); cost: the ledger rows' \
         `cost_usd` (verifiers and voted-down results included; calibration rounds, the \
         gateway's own, not), and its ratio to the oracle's mean; verified but wrong: \
         `peer_verified` answers not equal to `expected`; trials: tasks whose pick was a \
         `[routing] explore` trial (exploring or probation; explore 0.05); liar share: of the last \
         quarter's tasks, those the liar answered / producer calls it received; latency: \
         client-observed, every task of every run.\n"
    );
    let _ = writeln!(
        out,
        "| scenario | seed | right / delivered | verified | failed | locked out at task | USD per 100 | liar last ¼ (answers / calls) | answers by producer | ledger ÷ Σ calls×price |"
    );
    let _ = writeln!(out, "|---|---:|---:|---:|---|---:|---:|---:|---|---:|");
    for (name, runs) in &results {
        for r in runs {
            let by: Vec<String> = r
                .by_producer
                .iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect();
            let _ = writeln!(
                out,
                "| {name} | {} | {:.1}% ({}/{}) | {} | {} | {} | {:.3} | {} / {} | {} | {:.3} |",
                r.seed,
                percent(r.right, r.delivered),
                r.right,
                r.delivered,
                r.verified,
                r.failed_text(),
                r.locked_out_at.map_or("–".into(), |i| i.to_string()),
                r.cost_usd / r.tasks as f64 * 100.0,
                r.liar_answers_last,
                r.liar_calls_last,
                by.join(", "),
                r.cost_check,
            );
            debug_assert!(r.failures() + r.delivered == r.tasks);
        }
    }
    let (p50p, p99p, p50v, p99v) = (
        pct(&plain, 0.5),
        pct(&plain, 0.99),
        pct(&verified, 0.5),
        pct(&verified, 0.99),
    );
    let _ = writeln!(
        out,
        "\nAdded latency of verification (accuracy 1.0 everywhere, every delegate 2 ms; {} \
         verified and {} unverified tasks interleaved in one run, after a 10% warm-up):\n",
        verified.len(),
        plain.len()
    );
    let _ = writeln!(out, "| tasks | p50 ms | p99 ms |");
    let _ = writeln!(out, "|---|---:|---:|");
    let _ = writeln!(out, "| unverified | {:.2} | {:.2} |", ms(p50p), ms(p99p));
    let _ = writeln!(
        out,
        "| verified (2 verifiers, sample 1.0) | {:.2} | {:.2} |",
        ms(p50v),
        ms(p99v)
    );
    let _ = writeln!(
        out,
        "| added by verification | +{:.2} ({:.2}×) | +{:.2} ({:.2}×) |",
        ms(p50v) - ms(p50p),
        p50v.as_secs_f64() / p50p.as_secs_f64(),
        ms(p99v) - ms(p99p),
        p99v.as_secs_f64() / p99p.as_secs_f64(),
    );
    if mismatched > 0 {
        let _ = writeln!(
            out,
            "\nNote: {mismatched} task(s) came back verified otherwise than their policy says"
        );
    }
    let _ = writeln!(out, "\nWhole run: {:.1?}", started.elapsed());
    println!("{out}");
    Ok(())
}
