//! Interop with the reference Python SDK, both forms: its `LdpClient` → gateway → its `LdpDelegate`.
//!
//! The interpreters come from `LDP_PY_WHEEL` (PyPI wheel `ldp-protocol==0.2.0`) and
//! `LDP_PY_SDK` (the newer SDK bundled in the `ldp-protocol` crate's source); `.ci/run` builds
//! both venvs and sets them (`eval "$(bash .ci/run venvs)"` does it for a shell). Unset, the
//! venvs it left in its cache are used; without them each test prints a skip note and passes,
//! unless `LDP_INTEROP_REQUIRED=1` (CI), where it fails.
//!
//! Each test starts `tests/interop/ref_delegate.py` subprocesses and simulated delegates,
//! an in-process gateway in front of them, and runs `tests/interop/ref_client.py` against
//! the gateway, asserting on its exit status and its one-line JSON summary.

use crate::support::process::{output_within, py_script, python, Running, Sdk};
use crate::support::{sim, Card, TestGateway};
use ldp_gateway::ldp::IdentityCard;
use ldp_gateway::sim::{SimHandle, SimOptions};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

/// A cold Python start on a loaded 2-core machine can take seconds; allow plenty.
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// One `ref_client.py` run: start-up, discovery, a session and a few tasks.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(120);
/// `ref_client.py` exit code for a SESSION_REJECT.
const EXIT_REJECTED: i32 = 3;

const GATEWAY_ID: &str = "ldp:delegate:gateway";
/// Offered only by the reference delegate, so its tasks cannot go anywhere else.
const PY_SKILL: &str = "interop-echo";
/// Offered by the simulated delegates (and, less attractively, by the reference delegate).
const SHARED_SKILL: &str = "summarize";
const SIM_IDS: [&str; 2] = ["ldp:delegate:sim-fast", "ldp:delegate:sim-smart"];

/// What the interop tests skip without a venv.
const WHAT: &str = "reference-SDK interop";

/// A `ref_delegate.py` subprocess; killed on drop (and it exits by itself when our end of
/// its stdin closes, should this process die first).
struct RefDelegate {
    url: String,
    _process: Running,
}

async fn spawn_ref_delegate(python: &Path, args: &[&str]) -> RefDelegate {
    let mut cmd = py_script(python, "ref_delegate.py");
    cmd.arg("--watch-stdin").args(args).stdin(Stdio::piped());
    let mut process = Running::spawn(cmd);
    let line = process.line(READY_TIMEOUT, |_| true).await;
    let url = line
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("unexpected readiness line {line:?}"))
        .trim()
        .to_owned();
    RefDelegate {
        url,
        _process: process,
    }
}

/// A reference delegate offering [`PY_SKILL`] and (expensive, slow, mediocre) [`SHARED_SKILL`].
async fn spawn_py_delegate(python: &Path, id: &str, skill: &str) -> RefDelegate {
    spawn_ref_delegate(
        python,
        &[
            "--id",
            id,
            "--name",
            "Python reference delegate",
            "--skill",
            skill,
            "--skill",
            SHARED_SKILL,
            "--quality",
            "0.6",
            "--cost",
            "0.05",
            "--latency-ms",
            "3000",
            "--trust-domain",
            "default",
            "--model-family",
            "pyref",
            "--model-version",
            "pyref-1.0",
        ],
    )
    .await
}

fn sim_card(id: &str, quality: f64, cost: f64, latency_ms: u64) -> IdentityCard {
    Card::new("sim")
        .set("delegate_id", json!(id))
        .set("name", json!(id))
        .set("model_version", json!("sim-1.0"))
        .set("context_window", json!(32000))
        .set(
            "trust_domain",
            json!({"name": "default", "allow_cross_domain": false, "trusted_peers": []}),
        )
        .modes(&["semantic_frame", "text"])
        .capability(
            json!({"name": SHARED_SKILL, "quality": {"quality_score": quality,
            "latency_p50_ms": latency_ms, "cost_per_call_usd": cost}}),
        )
        .build()
}

async fn spawn_sims() -> Vec<SimHandle> {
    let cards = [
        sim_card(SIM_IDS[0], 0.8, 0.001, 20),
        sim_card(SIM_IDS[1], 0.95, 0.004, 40),
    ];
    let mut sims = Vec::new();
    for card in cards {
        let mut opts = SimOptions::new(card);
        opts.latency = Duration::from_millis(5);
        sims.push(sim(opts).await);
    }
    sims
}

/// A gateway in front of `urls`, with every delegate healthy.
async fn start_gateway(urls: &[String]) -> TestGateway {
    TestGateway::builder()
        .delegates(urls)
        .config(|c| c.identity.delegate_id = GATEWAY_ID.into())
        .spawn()
        .await
}

/// What one `ref_client.py` run did.
struct ClientRun {
    code: Option<i32>,
    summary: Value,
    stderr: String,
}

async fn run_client(python: &Path, url: &str, args: &[&str]) -> ClientRun {
    let mut cmd = py_script(python, "ref_client.py");
    cmd.args(["--url", url]).args(args);
    let out = output_within(cmd, CLIENT_TIMEOUT).await;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let last = stdout.lines().rev().find(|l| !l.trim().is_empty());
    let summary = match last.map(serde_json::from_str::<Value>) {
        Some(Ok(v)) => v,
        _ => panic!(
            "ref_client.py {args:?} printed no JSON summary (exit {:?})\nstdout:\n{stdout}\nstderr:\n{stderr}",
            out.status.code()
        ),
    };
    ClientRun {
        code: out.status.code(),
        summary,
        stderr,
    }
}

impl ClientRun {
    /// Panics with everything the client said unless it exited 0 with `ok: true`.
    fn assert_ok(&self, what: &str) -> &Vec<Value> {
        eprintln!("{what}: exit {:?}, summary {}", self.code, self.summary);
        assert!(
            self.code == Some(0) && self.summary["ok"] == json!(true),
            "{what}: ref_client.py failed (exit {:?})\nsummary: {}\nstderr:\n{}",
            self.code,
            self.summary,
            self.stderr
        );
        match self.summary["results"].as_array() {
            Some(r) => r,
            None => panic!("{what}: no results in {}", self.summary),
        }
    }
}

fn produced_by(result: &Value) -> &str {
    result["produced_by"].as_str().unwrap_or_default()
}

/// Every result names the client's session, and all came from one delegate (stickiness).
fn assert_one_session_one_delegate(what: &str, summary: &Value, results: &[Value]) {
    let session = &summary["session_id"];
    assert!(session.is_string(), "{what}: no session id in {summary}");
    for r in results {
        assert_eq!(
            &r["session_id"], session,
            "{what}: provenance session id in {r}"
        );
        assert_eq!(
            produced_by(r),
            produced_by(&results[0]),
            "{what}: tasks of one skill in one session must stick to one delegate: {results:?}"
        );
    }
}

/// Client and reference delegate of the same SDK form, plus simulated delegates, through
/// one gateway: tasks of the delegate-only skill reach the reference delegate and come back
/// with its provenance; tasks of the shared skill stick to one delegate of the fleet.
async fn round_trip(sdk: Sdk) {
    let Some(py) = python(sdk, WHAT) else { return };
    let py_id = format!("ldp:delegate:py-{}", sdk.label());
    let refd = spawn_py_delegate(&py, &py_id, PY_SKILL).await;
    let sims = spawn_sims().await;
    let mut urls = vec![refd.url.clone()];
    urls.extend(sims.iter().map(SimHandle::url));
    let gw = start_gateway(&urls).await;
    let url = gw.ldp_url();

    // The reference delegate's own skill: routed to it, output and provenance passed through.
    let mut args = vec![
        "--skill",
        PY_SKILL,
        "--tasks",
        "3",
        "--expect-produced-by",
        py_id.as_str(),
        "--expect-echo",
    ];
    if sdk == Sdk::Bundled {
        // The bundled SDK sends a delegation contract; the gateway must pass it on in a
        // form the bundled delegate parses (it rejects malformed ones with HTTP 500).
        args.extend(["--contract-budget-usd", "1.0"]);
    }
    let run = run_client(&py, &url, &args).await;
    let what = format!(
        "{} client → gateway → {} reference delegate",
        sdk.label(),
        sdk.label()
    );
    let results = run.assert_ok(&what);
    assert_eq!(run.summary["sdk"], json!(sdk.label()), "{what}");
    assert_eq!(results.len(), 3, "{what}: {results:?}");
    assert_eq!(
        run.summary["card"]["delegate_id"],
        json!(GATEWAY_ID),
        "{what}"
    );
    assert_one_session_one_delegate(&what, &run.summary, results);
    for r in results {
        assert_eq!(produced_by(r), py_id, "{what}: {r}");
        assert_eq!(r["model_version"], json!("pyref-1.0"), "{what}: {r}");
        assert_eq!(r["output"]["by"], json!(py_id), "{what}: {r}");
        if sdk == Sdk::Bundled {
            let first = &r["lineage"][0];
            assert_eq!(first["step"], json!("route"), "{what}: lineage in {r}");
            assert_eq!(
                first["delegate_id"],
                json!(GATEWAY_ID),
                "{what}: lineage in {r}"
            );
            // The delegate's own provenance is passed on: the bundled delegate self-verifies.
            assert_eq!(
                r["verification_status"],
                json!("self_verified"),
                "{what}: {r}"
            );
            assert_eq!(r["contract_satisfied"], json!(true), "{what}: {r}");
        }
    }

    // The shared skill: some delegate of the fleet serves it, the same one for every task.
    let run = run_client(&py, &url, &["--skill", SHARED_SKILL, "--tasks", "3"]).await;
    let what = format!("{} client → gateway → {SHARED_SKILL} fleet", sdk.label());
    let results = run.assert_ok(&what);
    assert_eq!(results.len(), 3, "{what}: {results:?}");
    assert_one_session_one_delegate(&what, &run.summary, results);
    let by = produced_by(&results[0]);
    assert!(
        by == py_id || SIM_IDS.contains(&by),
        "{what}: produced_by {by:?} is not in the fleet"
    );
    if sdk == Sdk::Bundled {
        for r in results {
            assert_eq!(
                r["lineage"][0]["step"],
                json!("route"),
                "{what}: lineage in {r}"
            );
        }
    }

    gw.shutdown().await;
    for s in sims {
        s.shutdown().await;
    }
    drop(refd);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wheel_client_and_wheel_delegate_through_gateway() {
    round_trip(Sdk::Wheel).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bundled_client_and_bundled_delegate_through_gateway() {
    round_trip(Sdk::Bundled).await
}

/// Each SDK's client against the other SDK's delegate, both behind one gateway: what the
/// gateway sends upstream must parse in the older wheel and in the newer bundled SDK alike,
/// whichever client started the session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_client_reaches_the_other_sdks_delegate() {
    let (Some(wheel), Some(bundled)) = (python(Sdk::Wheel, WHAT), python(Sdk::Bundled, WHAT))
    else {
        return;
    };
    let wheel_skill = format!("{PY_SKILL}-wheel");
    let bundled_skill = format!("{PY_SKILL}-bundled");
    let wheel_d = spawn_py_delegate(&wheel, "ldp:delegate:py-wheel", &wheel_skill).await;
    let bundled_d = spawn_py_delegate(&bundled, "ldp:delegate:py-bundled", &bundled_skill).await;
    let gw = start_gateway(&[wheel_d.url.clone(), bundled_d.url.clone()]).await;
    let cases = [
        (
            Sdk::Wheel,
            &wheel,
            &bundled_skill,
            "ldp:delegate:py-bundled",
        ),
        (
            Sdk::Bundled,
            &bundled,
            &wheel_skill,
            "ldp:delegate:py-wheel",
        ),
    ];
    for (sdk, py, skill, target) in cases {
        let mut args = vec![
            "--skill",
            skill.as_str(),
            "--tasks",
            "2",
            "--expect-produced-by",
            target,
            "--expect-echo",
        ];
        if sdk == Sdk::Bundled {
            // The older wheel delegate must not trip over a contract it does not know.
            args.extend(["--contract-budget-usd", "1.0"]);
        }
        let run = run_client(py, &gw.ldp_url(), &args).await;
        let what = format!("{} client → gateway → {target}", sdk.label());
        let results = run.assert_ok(&what);
        assert_eq!(results.len(), 2, "{what}: {results:?}");
        assert_one_session_one_delegate(&what, &run.summary, results);
        if sdk == Sdk::Bundled {
            for r in results {
                assert_eq!(
                    r["lineage"][0]["step"],
                    json!("route"),
                    "{what}: lineage in {r}"
                );
            }
        }
    }
    gw.shutdown().await;
    drop((wheel_d, bundled_d));
}

/// A client claiming a domain the gateway does not trust gets SESSION_REJECT with
/// `TRUST_VIOLATION`, which the reference client raises as `ConnectionError`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn untrusted_client_domain_is_rejected() {
    let pythons: Vec<(Sdk, PathBuf)> = [Sdk::Wheel, Sdk::Bundled]
        .into_iter()
        .filter_map(|sdk| python(sdk, WHAT).map(|p| (sdk, p)))
        .collect();
    if pythons.is_empty() {
        return;
    }
    let sims = spawn_sims().await;
    let urls: Vec<String> = sims.iter().map(SimHandle::url).collect();
    let gw = start_gateway(&urls).await;
    for (sdk, py) in &pythons {
        let run = run_client(
            py,
            &gw.ldp_url(),
            &[
                "--skill",
                SHARED_SKILL,
                "--tasks",
                "1",
                "--trust-domain",
                "other",
            ],
        )
        .await;
        let what = format!("{} client claiming trust domain 'other'", sdk.label());
        eprintln!("{what}: {}", run.summary);
        assert_eq!(
            run.code,
            Some(EXIT_REJECTED),
            "{what}: expected a SESSION_REJECT (exit {EXIT_REJECTED})\nsummary: {}\nstderr:\n{}",
            run.summary,
            run.stderr
        );
        assert_eq!(
            run.summary["rejected"],
            json!(true),
            "{what}: {}",
            run.summary
        );
        assert_eq!(
            run.summary["code"],
            json!("TRUST_VIOLATION"),
            "{what}: {}",
            run.summary
        );
        let reason = run.summary["reason"].as_str().unwrap_or_default();
        assert!(
            reason.contains("other"),
            "{what}: reason {reason:?} should name the domain"
        );
    }
    for s in &sims {
        assert_eq!(
            s.stats().tasks,
            0,
            "a rejected session must not reach a delegate"
        );
    }
    gw.shutdown().await;
    for s in sims {
        s.shutdown().await;
    }
}
