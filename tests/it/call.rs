//! Black-box tests of `ldp-gateway call`: the real binary against a simulated delegate and a
//! gateway — its output, provenance and timing, `--discover`, `--stream`, `--json`, `ldp://`
//! URLs, and the exit codes of a refusal (3), a failure (4) and a transport error (5).

use crate::support::cards::{card, sim};
use crate::support::process::{bin, output_within, text};
use crate::support::{unique, TestGateway};
use ldp_gateway::config::TenantConfig;
use ldp_gateway::secret::hash_key;
use ldp_gateway::sim::SimOptions;
use serde_json::Value;
use std::process::Output;
use std::time::Duration;

/// Generous: a loaded 2-core machine.
const WITHIN: Duration = Duration::from_secs(60);

/// `ldp-gateway call ARGS…` with `env`, to its end (no `LDP_API_KEY` of the developer's).
async fn call(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = bin();
    cmd.arg("call").args(args).env_remove("LDP_API_KEY");
    for (k, v) in env {
        cmd.env(k, v);
    }
    output_within(cmd, WITHIN).await
}

/// Stdout and stderr, for failure messages.
fn said(out: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        text(&out.stdout),
        text(&out.stderr)
    )
}

/// A text-only delegate `id` offering `echo`, with `latency`.
fn echo_sim(id: &str, latency: Duration) -> SimOptions {
    let mut opts = SimOptions::new(card(id, "default", &[("echo", 0.9)], &["text"]));
    opts.latency = latency;
    opts
}

/// The value of the `  key  value` row under a `section:` heading of the human output.
fn row<'a>(stdout: &'a str, key: &str) -> Option<&'a str> {
    stdout.lines().find_map(|l| {
        let rest = l.strip_prefix("  ")?.strip_prefix(key)?;
        rest.starts_with(' ').then(|| rest.trim())
    })
}

#[tokio::test]
async fn call_prints_output_provenance_and_timing_and_closes_its_session() {
    let d = sim(echo_sim("a", Duration::ZERO)).await;
    let url = d.url();
    let out = call(
        &[&url, "--skill", "echo", "--input", r#"{"text": "hi"}"#],
        &[],
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    let stdout = text(&out.stdout);

    let body = stdout
        .strip_prefix("output:\n")
        .and_then(|s| s.split("\nprovenance:\n").next())
        .unwrap_or_else(|| panic!("output, then provenance:\n{stdout}"));
    let output: Value = serde_json::from_str(body).unwrap();
    assert_eq!(output["skill"], "echo", "{output}");
    assert!(
        output.get("ldp_provenance").is_none(),
        "provenance has its own section: {output}"
    );
    assert_eq!(
        row(&stdout, "produced_by"),
        Some("ldp:delegate:a"),
        "{stdout}"
    );
    assert_eq!(row(&stdout, "model_version"), Some("a-1"), "{stdout}");
    assert_eq!(row(&stdout, "payload_mode_used"), Some("text"), "{stdout}");
    assert!(row(&stdout, "session_id").is_some(), "{stdout}");
    let timing = stdout.lines().last().unwrap();
    let ms: f64 = timing
        .strip_prefix("timing: ")
        .and_then(|t| t.split(" ms (task ").next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("a timing line last: {stdout}"));
    assert!(ms >= 0.0 && ms < WITHIN.as_secs_f64() * 1000.0, "{timing}");
    assert!(
        timing.ends_with(", answered by ldp:delegate:a, payload text)"),
        "{timing}"
    );

    let stats = d.stats();
    assert_eq!((stats.accepted, stats.results), (1, 1), "{stats:?}");
    assert_eq!(
        (stats.closes, stats.active_sessions),
        (1, 0),
        "the session is closed before the process ends: {stats:?}"
    );
    d.shutdown().await;
}

#[tokio::test]
async fn json_output_is_one_line_with_the_seed_shape() {
    let d = sim(echo_sim("a", Duration::ZERO)).await;
    let url = d.url().replace("http://", "ldp://");
    // A bare string is sent as a JSON string.
    let out = call(
        &[&url, "--skill", "echo", "--input", "hi there", "--json"],
        &[],
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    let stdout = text(&out.stdout);
    assert_eq!(stdout.lines().count(), 1, "{stdout}");
    let v: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["answered_by"], "ldp:delegate:a", "{v}");
    assert_eq!(v["payload_mode"], "text", "{v}");
    assert!(v["elapsed_ms"].as_f64().is_some(), "{v}");
    assert!(!v["task_id"].as_str().unwrap_or("").is_empty(), "{v}");
    assert_eq!(
        v["output"]["ldp_provenance"]["produced_by"],
        "ldp:delegate:a"
    );
    assert_eq!(v["output"]["input_chars"], "hi there".len(), "{v}");
    d.shutdown().await;
}

#[tokio::test]
async fn discover_prints_labels_and_capabilities() {
    let d = sim(SimOptions::new(card(
        "a",
        "default",
        &[("echo", 0.9), ("summarize", 0.75)],
        &["text"],
    )))
    .await;
    let url = d.url().replace("http://", "ldp://");
    let out = call(&[&url, "--discover"], &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    let stdout = text(&out.stdout);
    assert_eq!(
        row(&stdout, "ldp.delegate_id"),
        Some("ldp:delegate:a"),
        "{stdout}"
    );
    assert_eq!(
        row(&stdout, "ldp.trust_domain"),
        Some("default"),
        "{stdout}"
    );
    assert_eq!(row(&stdout, "ldp.model_version"), Some("a-1"), "{stdout}");
    assert_eq!(row(&stdout, "ldp.payload_modes"), Some("text"), "{stdout}");
    let header = row(&stdout, "skill").unwrap_or_else(|| panic!("{stdout}"));
    assert!(header.starts_with("quality"), "{header}");
    let echo: Vec<&str> = row(&stdout, "echo").unwrap().split_whitespace().collect();
    assert_eq!(echo[..4], ["0.90", "0.002", "50", "-"], "{stdout}");
    assert!(row(&stdout, "summarize").unwrap().starts_with("0.75"));
    assert!(stdout.contains("\ntrust: ok (default)\n"), "{stdout}");
    let stats = d.stats();
    assert_eq!(
        (stats.hellos, stats.proposals),
        (0, 0),
        "no session: {stats:?}"
    );

    let out = call(&[&url, "--discover", "--json"], &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["labels"]["ldp.delegate_id"], "ldp:delegate:a", "{v}");
    assert_eq!(v["card"]["capabilities"].as_array().map(Vec::len), Some(2));
    assert!(v["untrusted"].is_null(), "{v}");

    // A card that --require-domain would refuse: printed, and exit 3.
    let out = call(&[&url, "--discover", "--require-domain", "other"], &[]).await;
    assert_eq!(out.status.code(), Some(3), "{}", said(&out));
    assert!(text(&out.stdout).contains("trust: refused before any session"));
    d.shutdown().await;
}

#[tokio::test]
async fn stream_prints_each_update_then_the_result() {
    let d = sim(echo_sim("a", Duration::from_millis(40))).await;
    let out = call(&[&d.url(), "--skill", "echo", "--stream"], &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    let stdout = text(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines[..3],
        ["progress   0% started", "progress  50% working", "output:"],
        "{stdout}"
    );
    assert_eq!(row(&stdout, "produced_by"), Some("ldp:delegate:a"));
    assert!(lines.last().unwrap().starts_with("timing: "), "{stdout}");

    let out = call(&[&d.url(), "--skill", "echo", "--stream", "--json"], &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    let events: Vec<Value> = text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(events.len(), 3, "{events:?}");
    assert_eq!(events[1]["progress"], 0.5);
    assert_eq!(events[1]["message"], "working");
    assert_eq!(events[2]["answered_by"], "ldp:delegate:a");
    d.shutdown().await;
}

#[tokio::test]
async fn through_the_gateway_with_its_route_step_and_refusals() {
    let key = unique("key");
    let gw = TestGateway::builder()
        .sim(echo_sim("b", Duration::from_millis(20)))
        .tenant(TenantConfig {
            api_key_sha256: vec![hash_key(&key)],
            trust_domains: vec!["default".into()],
            ..TenantConfig::new("acme")
        })
        .spawn()
        .await;
    let url = gw.client().url("").replace("http://", "ldp://");
    let with_key = [("LDP_API_KEY", key.as_str())];

    let out = call(
        &[&url, "--skill", "echo", "--policy", "balanced"],
        &with_key,
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    let stdout = text(&out.stdout);
    assert_eq!(
        row(&stdout, "produced_by"),
        Some("ldp:delegate:b"),
        "{stdout}"
    );
    let lineage = row(&stdout, "lineage").unwrap_or_else(|| panic!("{stdout}"));
    assert!(
        lineage.starts_with("route by ldp:delegate:gateway: "),
        "{lineage}"
    );
    assert!(lineage.contains("policy balanced"), "{lineage}");
    assert!(!stdout.contains(&key) && !text(&out.stderr).contains(&key));
    assert_eq!(gw.sessions(), 0, "its session closed as the process ended");

    let out = call(&[&url, "--skill", "echo", "--stream"], &with_key).await;
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    let stdout = text(&out.stdout);
    let first = stdout.lines().next().unwrap_or_default();
    assert!(
        first.starts_with("progress "),
        "the gateway's own update first:\n{stdout}"
    );
    assert!(stdout.contains("\nprovenance:\n"), "{stdout}");

    // No delegate offers the skill: NO_ELIGIBLE_DELEGATE is a refusal.
    let out = call(&[&url, "--skill", "nowhere"], &with_key).await;
    assert_eq!(out.status.code(), Some(3), "{}", said(&out));
    let stderr = text(&out.stderr);
    assert!(stderr.starts_with("refused: "), "{stderr}");
    assert!(stderr.contains("NO_ELIGIBLE_DELEGATE"), "{stderr}");
    assert!(out.stdout.is_empty(), "{}", said(&out));

    // A wrong key (given as a flag): 401, refused, and never printed.
    let wrong = unique("wrong");
    let out = call(&[&url, "--skill", "echo", "--key", &wrong], &[]).await;
    assert_eq!(out.status.code(), Some(3), "{}", said(&out));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("HTTP 401"), "{stderr}");
    assert!(!stderr.contains(&wrong), "the key leaked: {stderr}");

    assert_eq!(gw.sim(0).stats().failures, 0);
    gw.shutdown().await;
}

/// `--trust-domain` is the client's own domain (the reference SDK's session config
/// `trust_domain`): against a gateway in domain `lab` (no tenants), `--trust-domain lab` runs
/// the task; without it the client claims `default` and is refused as before, and
/// `--require-domain` still checks the endpoint's card.
#[tokio::test]
async fn trust_domain_is_the_clients_own_and_require_domain_the_endpoints() {
    let gw = TestGateway::builder()
        .sim(SimOptions::new(card(
            "b",
            "lab",
            &[("echo", 0.9)],
            &["text"],
        )))
        .config(|c| c.identity.trust_domain = ldp_gateway::ldp::TrustDomain::named("lab"))
        .spawn()
        .await;
    let url = gw.client().url("");

    let out = call(&[&url, "--skill", "echo", "--trust-domain", "lab"], &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    let stdout = text(&out.stdout);
    assert_eq!(
        row(&stdout, "produced_by"),
        Some("ldp:delegate:b"),
        "{stdout}"
    );

    let both = [
        &url,
        "--skill",
        "echo",
        "--trust-domain",
        "lab",
        "--require-domain",
        "lab",
    ];
    let out = call(&both, &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));

    // Without it: the client claims `default`, which a `lab` gateway does not trust.
    let out = call(&[&url, "--skill", "echo"], &[]).await;
    assert_eq!(out.status.code(), Some(3), "{}", said(&out));
    let stderr = text(&out.stderr);
    assert!(stderr.starts_with("refused: session rejected"), "{stderr}");
    assert!(stderr.contains("'default' is not trusted"), "{stderr}");

    // The requirement is on the endpoint's card: `lab` is not `default`.
    let out = call(
        &[
            &url,
            "--skill",
            "echo",
            "--trust-domain",
            "lab",
            "--require-domain",
            "default",
        ],
        &[],
    )
    .await;
    assert_eq!(out.status.code(), Some(3), "{}", said(&out));
    assert!(
        text(&out.stderr).contains("refused before any session"),
        "{}",
        said(&out)
    );
    assert_eq!(gw.sim(0).stats().failures, 0);
    gw.shutdown().await;
}

#[tokio::test]
async fn exit_codes_tell_refused_failed_and_transport_apart() {
    let d = sim(echo_sim("a", Duration::ZERO)).await;
    let url = d.url();

    // Refused before any session: the card's domain is not the required one.
    let out = call(&[&url, "--skill", "echo", "--require-domain", "other"], &[]).await;
    assert_eq!(out.status.code(), Some(3), "{}", said(&out));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("refused before any session"), "{stderr}");
    assert!(stderr.contains("'other'"), "{stderr}");
    let stats = d.stats();
    assert_eq!((stats.hellos, stats.proposals), (0, 0), "{stats:?}");

    // A skill the delegate does not offer: SKILL_NOT_FOUND (capability) is a refusal too.
    let out = call(&[&url, "--skill", "nope"], &[]).await;
    assert_eq!(out.status.code(), Some(3), "{}", said(&out));
    assert!(
        text(&out.stderr).contains("SKILL_NOT_FOUND"),
        "{}",
        said(&out)
    );

    // Failed: the task was taken and failed at run time.
    let mut failing = echo_sim("f", Duration::ZERO);
    failing.fail_rate = 1.0;
    let f = sim(failing).await;
    let out = call(&[&f.url(), "--skill", "echo"], &[]).await;
    assert_eq!(out.status.code(), Some(4), "{}", said(&out));
    let stderr = text(&out.stderr);
    assert!(stderr.starts_with("failed: "), "{stderr}");
    assert!(stderr.contains("SIMULATED_FAILURE"), "{stderr}");
    assert_eq!(f.stats().failures, 1);

    // Transport: nothing listens on the port.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let out = call(
        &[&format!("ldp://127.0.0.1:{closed}"), "--skill", "echo"],
        &[],
    )
    .await;
    assert_eq!(out.status.code(), Some(5), "{}", said(&out));
    assert!(
        text(&out.stderr).starts_with("transport error: cannot connect to "),
        "{}",
        said(&out)
    );

    // Usage errors stay clap's: bad JSON, a missing skill.
    let out = call(
        &[&url, "--skill", "echo", "--input", r#"{"text": oops}"#],
        &[],
    )
    .await;
    assert_eq!(out.status.code(), Some(2), "{}", said(&out));
    assert!(
        text(&out.stderr).contains("not valid JSON"),
        "{}",
        said(&out)
    );
    let out = call(&[&url], &[]).await;
    assert_eq!(out.status.code(), Some(2), "{}", said(&out));

    d.shutdown().await;
    f.shutdown().await;
}

/// What a hostile delegate puts in every string: an OSC 52 clipboard write, a screen clear,
/// a hidden hyperlink, a C1 CSI, DEL, and a right-to-left override with an isolate and marks.
const HOSTILE: &str = "x\u{1b}]52;c;cm0gLXJmIH4=\u{7}\u{1b}[2J\u{1b}]8;;http://evil.example/\u{1b}\\click\u{1b}]8;;\u{1b}\\\u{9b}31m\u{7f}\u{202e}fdp.exe\u{2066}\u{200e}\u{200f}\u{61c}\u{2069}\u{202c}";

/// Whether `bytes` hold an ESC, a C1 control or a bidi control.
fn has_hostile(bytes: &[u8]) -> bool {
    let s = String::from_utf8_lossy(bytes);
    bytes.contains(&0x1b)
        || s.chars().any(|c| {
            ('\u{80}'..='\u{9f}').contains(&c)
                || c == '\u{7f}'
                || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{200e}' | '\u{200f}' | '\u{61c}')
        })
}

/// A delegate written here whose card (name, description, metadata, skill, domains) and
/// answer (output text, provenance fields, lineage, evidence) all carry [`HOSTILE`].
async fn hostile_delegate() -> String {
    use ldp_client::ldp_wire::{Body, Envelope, Json, PayloadMode, Provenance};
    let card = serde_json::json!({
        "delegate_id": "ldp:delegate:hostile", "name": format!("name{HOSTILE}"),
        "description": format!("about{HOSTILE}\nfake: line"),
        "model_family": "evil", "model_version": format!("v{HOSTILE}"),
        "trust_domain": {"name": "default", "allow_cross_domain": false, "trusted_peers": []},
        "supported_payload_modes": ["text"],
        "metadata": {format!("k{HOSTILE}"): format!("v{HOSTILE}")},
        "capabilities": [{"name": "echo", "domains": [format!("d{HOSTILE}")],
            "quality": {"quality_score": 0.9}},
            {"name": format!("s{HOSTILE}"), "quality": {"quality_score": 0.5}}]
    });
    let messages = move |body: axum::body::Bytes| async move {
        let env = Envelope::from_slice(&body).expect("an envelope");
        let me = "ldp:delegate:hostile";
        let body = match &env.body {
            Body::Hello { .. } => Body::CapabilityManifest {
                capabilities: Default::default(),
            },
            Body::SessionPropose { .. } => Body::SessionAccept {
                session_id: ldp_client::ldp_wire::new_id(),
                negotiated_mode: PayloadMode::Text,
                fallback_chain: Vec::new(),
            },
            Body::TaskSubmit { task_id, .. } => {
                let provenance: Provenance = serde_json::from_value(serde_json::json!({
                    "produced_by": format!("ldp:delegate:hostile{HOSTILE}"),
                    "model_version": format!("v{HOSTILE}"),
                    "payload_mode_used": "text",
                    "verified": false,
                    "session_id": format!("s{HOSTILE}"),
                    "timestamp": format!("t{HOSTILE}"),
                    "contract_violations": [format!("c{HOSTILE}")],
                    "evidence": [{"kind": format!("k{HOSTILE}"), "source": format!("e{HOSTILE}")}],
                    "lineage": [{"delegate_id": format!("l{HOSTILE}"), "model_version": "1",
                        "step": format!("step{HOSTILE}"), "note": format!("n{HOSTILE}")}]
                }))
                .expect("a provenance record");
                Body::TaskResult {
                    task_id: task_id.clone(),
                    output: Json::from_value(
                        &serde_json::json!({"text": format!("answer{HOSTILE}")}),
                    ),
                    provenance: Some(provenance),
                }
            }
            _ => Body::SessionClose { reason: None },
        };
        axum::Json(env.reply(me, body, PayloadMode::Text))
    };
    let app = axum::Router::new()
        .route(
            "/.well-known/ldp-identity",
            axum::routing::get(move || async move { axum::Json(card) }),
        )
        .route("/ldp/messages", axum::routing::post(messages));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

/// Issue 24 item 11: `call` shows control and bidi characters of remote strings escaped in
/// text mode: `--discover` and a task's output, provenance and timing hold no ESC byte and no
/// bidi control, and show `\u{1b}` instead.
#[tokio::test]
async fn remote_strings_are_shown_escaped() {
    let url = hostile_delegate().await;
    let out = call(&[&url, "--discover"], &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    assert!(!has_hostile(&out.stdout), "{}", said(&out));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("name: namex\\u{1b}]52;c;"), "{stdout}");
    assert!(stdout.contains("\\u{202e}fdp.exe"), "{stdout}");
    assert!(
        !stdout.contains("\nfake: line"),
        "a newline in a description is shown escaped: {stdout}"
    );

    let out = call(&[&url, "--skill", "echo", "--input", "hi"], &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    assert!(!has_hostile(&out.stdout), "{}", said(&out));
    let stdout = text(&out.stdout);
    // The output is pretty JSON (C0 as JSON escapes, the rest shown escaped).
    assert!(stdout.contains("answerx\\u001b]52;c;"), "{stdout}");
    assert!(stdout.contains("\\u{9b}31m\\u{7f}\\u{202e}"), "{stdout}");
    assert!(
        row(&stdout, "model_version").is_some_and(|v| v.starts_with("vx\\u{1b}]52;c;")),
        "{stdout}"
    );

    // --json stays JSON: the strings as sent, for a program to read.
    let out = call(&[&url, "--discover", "--json"], &[]).await;
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(v["card"]["name"], format!("name{HOSTILE}"));
}
