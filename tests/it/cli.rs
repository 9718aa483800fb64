//! Black-box tests of the real binary: `check` output and exit codes, `serve` refusing a bad
//! config, a simulated `delegate` serving its card, and `demo` answering LDP and finishing.

use crate::support::process::{self, bin, text, Running};
use crate::support::Client;
use serde_json::{json, Value};
use std::path::Path;
use std::time::Duration;

const SHIPPED_POLICIES: [&str; 6] = [
    "balanced",
    "cheapest",
    "best-quality",
    "low-latency",
    "eu-only",
    "internal-only",
];
/// Generous: CI machines are slow and the demo sleeps real (simulated) model latencies.
const DEMO_WITHIN: Duration = Duration::from_secs(90);

async fn run(args: &[&str]) -> std::process::Output {
    process::run(args, &[]).await
}

fn write(path: &Path, body: &str) {
    std::fs::write(path, body).unwrap();
}

/// A config whose policy directory is `dir`, with free ports.
fn config_with_policies(dir: &Path, default: &str) -> String {
    format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n[admin]\nlisten = \"127.0.0.1:0\"\n\
         [policies]\ndir = \"{}\"\ndefault = \"{default}\"\n",
        dir.display()
    )
}

#[tokio::test]
async fn check_accepts_the_shipped_configs() {
    for config in ["config/gateway.toml", "config/demo.toml"] {
        let out = run(&["check", "--config", config]).await;
        let stdout = text(&out.stdout);
        assert!(
            out.status.success(),
            "{config}: {stdout}{}",
            text(&out.stderr)
        );
        assert_eq!(stdout.trim(), format!("{config}: ok"));
    }
}

#[tokio::test]
async fn check_reports_each_policy_problem_with_file_line_and_key() {
    let tmp = tempfile::tempdir().unwrap();
    let policies = tmp.path().join("policies");
    std::fs::create_dir(&policies).unwrap();
    let bad = policies.join("bad.toml");
    write(
        &bad,
        "name = \"bad\"\n\
         description = \"two mistakes\"\n\
         [require]\n\
         min_quality = 1.5\n\
         colour = \"blue\"\n",
    );
    let config = tmp.path().join("gateway.toml");
    write(&config, &config_with_policies(&policies, "bad"));

    let out = run(&["check", "--config", config.to_str().unwrap()]).await;
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    let file = bad.display().to_string();
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 2, "one line per problem:\n{stdout}");
    assert_eq!(
        lines[0],
        format!("{file}:4: require.min_quality: must be between 0 and 1, got 1.5")
    );
    let colour = format!("{file}:5: require.colour: unknown key");
    assert!(lines[1].starts_with(&colour), "{stdout}");
    assert!(!stdout.contains(": ok"), "{stdout}");
}

#[tokio::test]
async fn check_names_an_unknown_config_key() {
    let tmp = tempfile::tempdir().unwrap();
    let config = tmp.path().join("gateway.toml");
    write(
        &config,
        "[server]\nlisten = \"127.0.0.1:0\"\nlisten_typo = \"x\"\n",
    );
    let out = run(&["check", "--config", config.to_str().unwrap()]).await;
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    let want = format!("{}: server.listen_typo: unknown field", config.display());
    assert!(
        stdout.lines().any(|l| l.starts_with(&want)),
        "no `{want}…` line in:\n{stdout}"
    );
}

#[tokio::test]
async fn serve_refuses_a_bad_config_without_starting() {
    let tmp = tempfile::tempdir().unwrap();
    let config = tmp.path().join("gateway.toml");
    write(
        &config,
        "[server]\nlisten = \"127.0.0.1:0\"\n[admin]\nlisten = \"127.0.0.1:0\"\n\
         [discovery]\npoll_interval = \"0s\"\n",
    );
    let out = run(&["serve", "--config", config.to_str().unwrap()]).await;
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "serve started on a bad config");
    assert!(
        stderr.contains("discovery.poll_interval: must be longer than 0s"),
        "{stderr}"
    );
    assert!(
        !text(&out.stdout).contains("LDP endpoint"),
        "it must not have listened"
    );
}

#[tokio::test]
async fn serve_refuses_a_bad_policy_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let policies = tmp.path().join("policies");
    std::fs::create_dir(&policies).unwrap();
    let bad = policies.join("bad.toml");
    write(&bad, "name = \"bad\"\n[weights]\nquality = \"high\"\n");
    let config = tmp.path().join("gateway.toml");
    write(&config, &config_with_policies(&policies, "bad"));
    let out = run(&["serve", "--config", config.to_str().unwrap()]).await;
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "serve started with a bad policy");
    let want = format!(
        "{}:3: weights.quality: expected a number, got a string",
        bad.display()
    );
    assert!(stderr.contains(&want), "no `{want}` in:\n{stderr}");
}

#[tokio::test]
async fn delegate_serves_its_card() {
    let mut cmd = bin();
    cmd.args([
        "delegate",
        "--card",
        "config/delegates/qwen-translate-apac.json",
        "--latency-ms",
        "0",
    ]);
    let mut child = Running::spawn(cmd);
    let line = child
        .line(Duration::from_secs(30), |l| l.starts_with("listening on "))
        .await;
    let url = line.trim_start_matches("listening on ").trim();
    assert!(url.starts_with("http://127.0.0.1:"), "{line}");
    let card = Client::new(url).get("/.well-known/ldp-identity").await.json;
    assert_eq!(card["delegate_id"], "ldp:delegate:qwen-translate-apac");
    assert_eq!(
        card["endpoint"], url,
        "an empty endpoint becomes the listen URL"
    );
    child.kill().await;
}

fn hello() -> Value {
    json!({
        "message_id": "cli-test-hello", "session_id": "", "from": "ldp:client:cli-test",
        "to": "ldp:delegate:gateway", "payload_mode": "text",
        "timestamp": "2026-01-01T00:00:00Z", "provenance": null,
        "body": {"type": "HELLO", "delegate_id": "ldp:client:cli-test",
                 "supported_modes": ["semantic_frame", "text"]}
    })
}

#[cfg(unix)] // stops it with SIGTERM
#[tokio::test]
async fn demo_answers_ldp_early_then_prints_a_table_per_policy() {
    let mut cmd = bin();
    cmd.args(["demo", "--tasks", "10"]);
    let mut out = Running::spawn(cmd);
    let first = out.line(DEMO_WITHIN, |_| true).await;
    let url = first
        .strip_prefix("LDP endpoint: ")
        .unwrap_or_else(|| panic!("the first line names the LDP endpoint: {first}"));
    assert!(url.starts_with("http://127.0.0.1:"), "{first}");

    let demo = Client::new(url);
    let resp = demo.post(serde_json::to_vec(&hello()).unwrap()).await;
    assert_eq!(resp.status, 200);
    let manifest = resp.json;
    assert_eq!(
        manifest["body"]["type"], "CAPABILITY_MANIFEST",
        "{manifest}"
    );
    let skills: Vec<&str> = manifest["body"]["capabilities"]["capabilities"]
        .as_array()
        .unwrap_or_else(|| panic!("{manifest}"))
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    for skill in ["summarize", "reasoning", "translate", "code-review"] {
        assert!(skills.contains(&skill), "{skill} missing from {skills:?}");
    }

    out.line(DEMO_WITHIN, |l| l.starts_with("demo traffic done"))
        .await;
    let seen = out.stdout();
    for policy in SHIPPED_POLICIES {
        let heading = format!("policy {policy} ");
        assert!(
            seen.iter().any(|l| l.starts_with(&heading)),
            "no table for {policy}:\n{}",
            seen.join("\n")
        );
    }
    assert!(
        seen.last().unwrap().ends_with("serving until Ctrl-C"),
        "{:?}",
        seen.last()
    );
    // Still serving after the tables.
    assert_eq!(demo.get("/healthz").await.status, 200);
    let data = data_dir(&seen.join("\n"));

    // SIGTERM (as from a service manager or Ctrl-C) stops it cleanly and removes its files.
    out.signal("-TERM");
    out.line(Duration::from_secs(30), |l| l == "shutting down")
        .await;
    let status = out.exit_within(Duration::from_secs(30)).await;
    assert!(status.success(), "{status}");
    assert!(
        !Path::new(&data).exists(),
        "the temporary directory {data} is removed at exit"
    );
}

/// Issue 25 item 5: without `RUST_LOG` the demo prints its summary alone — no log line on
/// stdout or stderr, though the quiz votes results down — and the gateway's logs go to
/// `gateway.log` in its data directory, which the summary names.
#[cfg(unix)] // stops it with SIGTERM
#[tokio::test]
async fn demo_prints_the_summary_alone_and_logs_to_its_data_directory() {
    let mut cmd = bin();
    cmd.args(["demo", "--tasks", "10", "--quiz-tasks", "20"])
        .env_remove("RUST_LOG");
    let mut out = Running::spawn(cmd);
    out.line(DEMO_WITHIN, |l| l.starts_with("demo traffic done"))
        .await;
    let seen = out.stdout().join("\n");
    let data = data_dir(&seen);
    let logs = seen
        .lines()
        .find_map(|l| l.strip_prefix("logs:"))
        .map(str::trim)
        .unwrap_or_else(|| panic!("no logs line:\n{seen}"));
    assert_eq!(Path::new(logs), Path::new(&data).join("gateway.log"));
    let log = std::fs::read_to_string(logs).expect("the log file");
    assert!(
        log.contains(" INFO ") && log.contains("ldp_gateway::"),
        "{log}"
    );
    assert!(!log.contains('\u{1b}'), "plain text, no colours: {log}");
    let looks_like_log = |l: &str| {
        l.contains('\u{1b}')
            || [
                " TRACE ",
                " DEBUG ",
                " INFO ",
                " WARN ",
                " ERROR ",
                "ldp_gateway::",
            ]
            .iter()
            .any(|w| l.contains(w))
    };
    assert!(!seen.lines().any(looks_like_log), "{seen}");
    assert_eq!(out.stderr(), "", "nothing on stderr");
    out.signal("-TERM");
    let status = out.exit_within(Duration::from_secs(30)).await;
    assert!(status.success(), "{status}");
}

/// The demo's temporary directory, from its `data:` line.
fn data_dir(stdout: &str) -> String {
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("data:"))
        .unwrap_or_else(|| panic!("no data line:\n{stdout}"));
    let dir = line.split_whitespace().next().unwrap().to_owned();
    assert!(
        dir.contains("ldp-gateway-demo-"),
        "a directory of its own: {dir}"
    );
    dir
}

/// The `savings` line of `policy`'s table: `(USD saved, percent saved)`.
fn savings(stdout: &str, policy: &str) -> (f64, f64) {
    let heading = format!("policy {policy} ");
    let table: Vec<&str> = stdout
        .lines()
        .skip_while(|l| !l.starts_with(&heading))
        .take_while(|l| !l.is_empty())
        .collect();
    let line = table
        .iter()
        .find(|l| l.trim_start().starts_with("savings"))
        .unwrap_or_else(|| panic!("no savings line for {policy}:\n{}", table.join("\n")));
    let words: Vec<&str> = line.split_whitespace().collect();
    let usd: f64 = words[1].parse().unwrap();
    let pct: f64 = words
        .iter()
        .find_map(|w| w.strip_suffix('%'))
        .unwrap()
        .parse()
        .unwrap();
    (usd, pct)
}

#[tokio::test]
async fn demo_with_exit_finishes_cleans_up_and_shows_savings() {
    let mut cmd = bin();
    cmd.args(["demo", "--tasks", "10", "--exit"]);
    let out = process::output_within(cmd, DEMO_WITHIN).await;
    let stdout = text(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\nstderr:\n{}",
        text(&out.stderr)
    );
    assert!(
        stdout.starts_with("LDP endpoint: http://127.0.0.1:"),
        "{stdout}"
    );
    let last = stdout.lines().last().unwrap();
    assert!(
        last.starts_with("demo traffic done") && last.ends_with("exiting (--exit)"),
        "{last}"
    );
    for policy in SHIPPED_POLICIES {
        assert!(stdout.contains(&format!("policy {policy} ")), "{stdout}");
    }
    let (usd, pct) = savings(&stdout, "cheapest");
    assert!(
        usd > 0.0 && pct > 50.0,
        "cheapest saves {usd} USD ({pct}%):\n{stdout}"
    );
    let (_, best) = savings(&stdout, "best-quality");
    assert!(
        best < pct,
        "best-quality saves less than cheapest:\n{stdout}"
    );

    let data = data_dir(&stdout);
    assert!(
        !Path::new(&data).exists(),
        "the temporary directory {data} is removed at exit"
    );
}
