//! The provenance ledger through a real gateway and simulated delegates: one row per task
//! outcome the client saw, the admin query API and its filters, the `provenance` command,
//! payload previews, and the metrics exposition.

use crate::support::ledger::{self, contract};
use crate::support::process::{self, text};
use crate::support::{card, sim, Client, TestGateway};
use ldp_gateway::ldp::PayloadMode;
use ldp_gateway::provenance::{LedgerRow, Outcome};
use ldp_gateway::sim::{SimHandle, SimOptions};
use serde_json::{json, Value};
use sha2::Digest as _;
use std::collections::{BTreeMap, BTreeSet};

const FRAME: &str = "semantic_frame";

fn frame(text: &str) -> Value {
    json!({"task_type": "summarization", "instruction": "Summarize", "input": text})
}

/// `d0` offers `echo` but rejects semantic frames (the gateway falls back to text); `d1`
/// offers `flaky`, whose failure rate the test turns up and down.
async fn fleet() -> (SimHandle, SimHandle) {
    let mut a = SimOptions::new(card("a", "default", &[("echo", 0.9)], &[FRAME, "text"]));
    a.fail_modes = vec![PayloadMode::SemanticFrame];
    let b = SimOptions::new(card("b", "default", &[("flaky", 0.8)], &[FRAME, "text"]));
    (sim(a).await, sim(b).await)
}

/// What the client saw for one task.
#[derive(Debug, Clone)]
struct Seen {
    session: String,
    skill: String,
    body: Value,
}

impl Seen {
    fn task_id(&self) -> &str {
        self.body["task_id"].as_str().unwrap()
    }
}

/// Results, a payload-mode fallback, a reused binding, a delegate failure and an unknown
/// skill in one session (`main`), and one plain result in a second session.
async fn mixed_run(c: &Client, flaky: &SimHandle) -> (String, Vec<Seen>) {
    let (sid, mode) = c
        .session(json!({"preferred_payload_modes": [FRAME, "text"]}))
        .await;
    assert_eq!(mode, FRAME);
    let mut seen = Vec::new();
    let mut push = |session: &str, skill: &str, body: Value| {
        seen.push(Seen {
            session: session.to_owned(),
            skill: skill.to_owned(),
            body,
        });
    };
    let r = c.task(&sid, "echo", frame("first text"), FRAME).await;
    assert_eq!(r["type"], "TASK_RESULT", "{r}");
    push(&sid, "echo", r);
    let r = c.task(&sid, "echo", frame("second text"), FRAME).await;
    assert_eq!(r["type"], "TASK_RESULT", "{r}");
    push(&sid, "echo", r);
    let r = c.task(&sid, "flaky", frame("works"), FRAME).await;
    assert_eq!(r["type"], "TASK_RESULT", "{r}");
    push(&sid, "flaky", r);
    flaky.set_fail_rate(1.0);
    let r = c.task(&sid, "flaky", frame("breaks"), FRAME).await;
    assert_eq!(r["type"], "TASK_FAILED", "{r}");
    push(&sid, "flaky", r);
    flaky.set_fail_rate(0.0);
    let r = c.task(&sid, "nope", frame("nobody"), FRAME).await;
    assert_eq!(r["type"], "TASK_FAILED", "{r}");
    assert_eq!(r["error"]["code"], "NO_ELIGIBLE_DELEGATE", "{r}");
    push(&sid, "nope", r);

    let (other, _) = c
        .session(json!({"preferred_payload_modes": ["text"]}))
        .await;
    let r = c.task(&other, "echo", json!("plain text"), "text").await;
    assert_eq!(r["type"], "TASK_RESULT", "{r}");
    push(&other, "echo", r);
    (sid, seen)
}

fn sha256_hex(v: &Value) -> String {
    hex::encode(sha2::Sha256::digest(serde_json::to_vec(v).unwrap()))
}

fn task_ids(rows: &[LedgerRow]) -> BTreeSet<String> {
    rows.iter().map(|r| r.task_id.clone()).collect()
}

/// The row says what the client saw, field by field.
fn assert_row_matches(row: &LedgerRow, seen: &Seen) {
    let b = &seen.body;
    let ctx = format!("row {row:#?}\nanswer {b}");
    assert_eq!(row.task_id, seen.task_id(), "{ctx}");
    assert_eq!(row.session_id, seen.session, "{ctx}");
    assert_eq!(row.skill, seen.skill, "{ctx}");
    assert_eq!(row.tenant, "anonymous", "{ctx}");
    assert_eq!(row.policy.as_deref(), Some("balanced"), "{ctx}");
    assert!(
        row.finished_ms > 0 && row.latency_ms >= row.upstream_ms,
        "{ctx}"
    );
    assert!(row.payload.is_none(), "store_payloads is off: {ctx}");
    match b["type"].as_str().unwrap() {
        "TASK_RESULT" => {
            let p = &b["provenance"];
            assert_eq!(row.outcome, Outcome::Result, "{ctx}");
            assert_eq!(row.error_code, None, "{ctx}");
            assert_eq!(
                row.output_sha256.as_deref(),
                Some(sha256_hex(&b["output"]).as_str()),
                "digest of the output JSON: {ctx}"
            );
            assert_eq!(
                row.delegate_id.as_ref(),
                p["produced_by"].as_str().map(String::from).as_ref(),
                "{ctx}"
            );
            assert_eq!(
                row.model_version.as_deref(),
                p["model_version"].as_str(),
                "{ctx}"
            );
            assert_eq!(
                row.payload_mode.as_deref(),
                p["payload_mode_used"].as_str(),
                "{ctx}"
            );
            assert_eq!(row.tokens, p["tokens_used"].as_u64(), "{ctx}");
            assert_eq!(row.reported_cost_usd, p["cost_usd"].as_f64(), "{ctx}");
            assert!(row.reported_cost_usd.is_some_and(|c| c > 0.0), "{ctx}");
            assert_eq!(row.cost_usd, row.reported_cost_usd, "reported wins: {ctx}");
            assert_eq!(
                row.declared_cost_usd,
                Some(0.002),
                "the card's price: {ctx}"
            );
            assert_eq!(row.confidence, p["confidence"].as_f64(), "{ctx}");
            assert_eq!(
                row.verification_status.as_deref(),
                p["verification_status"].as_str(),
                "{ctx}"
            );
            assert_eq!(
                row.lineage.to_value(),
                p["lineage"],
                "the lineage the client got: {ctx}"
            );
            let lineage = row.lineage.to_value();
            assert_eq!(lineage[0]["step"], "route", "{ctx}");
            assert_eq!(lineage[0]["delegate_id"], "ldp:delegate:gateway", "{ctx}");
            assert_eq!(lineage[0]["attempts"], row.attempts, "{ctx}");
            assert!(row.upstream_session_id.is_some(), "{ctx}");
            assert_ne!(
                row.upstream_session_id.as_deref(),
                Some(row.session_id.as_str()),
                "{ctx}"
            );
        }
        "TASK_FAILED" => {
            assert_eq!(row.outcome, Outcome::Failed, "{ctx}");
            assert_eq!(
                row.error_code.as_deref(),
                b["error"]["code"].as_str(),
                "{ctx}"
            );
            assert_eq!(
                row.error_message.as_deref(),
                b["error"]["message"].as_str(),
                "{ctx}"
            );
            assert_eq!(row.output_sha256, None, "{ctx}");
            assert_eq!(row.cost_usd, None, "no charge for a failure: {ctx}");
        }
        other => panic!("unexpected answer {other}"),
    }
}

#[tokio::test]
async fn ledger_rows_match_what_the_client_saw() {
    let (a, b) = fleet().await;
    // A file of its own, read again after the gateway (and its directory) is gone.
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("ledger.db");
    let store = format!("sqlite://{}", db.display());
    let gw = TestGateway::builder()
        .delegate(&a.url())
        .delegate(&b.url())
        .config(|cfg| cfg.provenance.store = store)
        .spawn()
        .await;
    let c = gw.client();
    let admin = gw.admin();
    let (sid, seen) = mixed_run(&c, &b).await;
    let in_main: Vec<&Seen> = seen.iter().filter(|s| s.session == sid).collect();

    // Exactly one row per outcome of the session, newest first.
    let (rows, page) = ledger::page(&admin, &format!("session_id={sid}")).await;
    assert_eq!(rows.len(), in_main.len(), "{rows:#?}");
    assert_eq!(page["next_offset"], Value::Null);
    let by_id: BTreeMap<&str, &LedgerRow> = rows.iter().map(|r| (r.task_id.as_str(), r)).collect();
    assert_eq!(by_id.len(), rows.len(), "one row per task");
    for s in &in_main {
        let row = by_id
            .get(s.task_id())
            .unwrap_or_else(|| panic!("no row for {s:?}"));
        assert_row_matches(row, s);
    }
    let newest_first: Vec<&str> = in_main.iter().rev().map(|s| s.task_id()).collect();
    let order: Vec<&str> = rows.iter().map(|r| r.task_id.as_str()).collect();
    assert_eq!(order, newest_first);

    // The row of each step of the run, beyond what the answer shows.
    let fallback = by_id[in_main[0].task_id()];
    assert_eq!(
        (fallback.delegate.as_deref(), fallback.attempts),
        (Some("d0"), 2)
    );
    assert_eq!(fallback.fallbacks, vec!["payload_mode".to_owned()]);
    assert_eq!(fallback.payload_mode.as_deref(), Some("text"));
    assert_eq!(fallback.candidates, Some(1));
    assert!(fallback.score.is_some());
    assert_eq!(fallback.routing.to_value()["reused_binding"], false);
    let reused = by_id[in_main[1].task_id()];
    assert_eq!((reused.attempts, reused.fallbacks.len()), (1, 0));
    assert_eq!(
        reused.payload_mode.as_deref(),
        Some("text"),
        "the session stays at text"
    );
    assert_eq!((reused.score, reused.candidates), (None, None));
    assert_eq!(reused.routing.to_value()["reused_binding"], true);
    assert_eq!(reused.upstream_session_id, fallback.upstream_session_id);
    let failed = by_id[in_main[3].task_id()];
    assert_eq!(failed.delegate.as_deref(), Some("d1"));
    assert_eq!(failed.delegate_id.as_deref(), Some("ldp:delegate:b"));
    assert_eq!(failed.attempts, 1);
    let unrouted = by_id[in_main[4].task_id()];
    assert_eq!(unrouted.error_code.as_deref(), Some("NO_ELIGIBLE_DELEGATE"));
    assert_eq!((unrouted.delegate.as_ref(), unrouted.attempts), (None, 0));
    assert_eq!(
        (
            unrouted.upstream_session_id.as_ref(),
            unrouted.payload_mode.as_ref()
        ),
        (None, None)
    );

    // Filters.
    let all = seen.len();
    let one = seen[2].task_id();
    let (rows, _) = ledger::page(&admin, &format!("task_id={one}")).await;
    assert_eq!(task_ids(&rows), BTreeSet::from([one.to_owned()]));
    let (rows, _) = ledger::page(&admin, "delegate=d1").await;
    assert_eq!(rows.len(), 2, "the flaky delegate's result and failure");
    assert!(rows.iter().all(|r| r.delegate.as_deref() == Some("d1")));
    let (rows, _) = ledger::page(&admin, &format!("delegate=d1&task_id={one}")).await;
    assert_eq!(
        task_ids(&rows),
        BTreeSet::from([one.to_owned()]),
        "filters combine"
    );
    let (rows, _) = ledger::page(&admin, "tenant=anonymous").await;
    assert_eq!(rows.len(), all);
    let (rows, _) = ledger::page(&admin, "tenant=acme").await;
    assert!(rows.is_empty());
    let (rows, _) = ledger::page(&admin, "since=1h").await;
    assert_eq!(rows.len(), all);
    let (rows, _) = ledger::page(&admin, "since=2999-01-01T00:00:00Z").await;
    assert!(rows.is_empty(), "nothing finished in the future");

    // Paging: limit + offset walk every row once, with next_offset until the last page.
    let mut walked = Vec::new();
    let mut offset = Some(0_u64);
    let mut pages = 0;
    while let Some(o) = offset {
        let (rows, page) = ledger::page(&admin, &format!("limit=2&offset={o}")).await;
        assert!(rows.len() <= 2);
        pages += 1;
        walked.extend(rows.into_iter().map(|r| r.task_id));
        offset = page["next_offset"].as_u64();
        assert!(pages <= all, "paging does not end");
    }
    assert_eq!(walked.len(), all, "{walked:?}");
    assert_eq!(
        walked.iter().collect::<BTreeSet<_>>().len(),
        all,
        "no row twice"
    );
    assert_eq!(pages, all / 2 + 1);

    // CSV: the header, then one line per row.
    let r = admin
        .get(&format!("/admin/provenance?session_id={sid}&format=csv"))
        .await;
    let (status, ctype, csv) = (r.status, r.content_type(), r.text());
    assert_eq!(status, 200, "{csv}");
    assert!(ctype.starts_with("text/csv"), "{ctype}");
    let lines: Vec<&str> = csv.lines().collect();
    assert!(
        lines[0].starts_with("finished_at,task_id,ingress,session_id,"),
        "{}",
        lines[0]
    );
    assert!(
        lines[0].ends_with(
            ",tokens,input_tokens,output_tokens,cache_read_tokens,cache_write_tokens,output_sha256"
        ),
        "{}",
        lines[0]
    );
    assert_eq!(lines.len(), 1 + in_main.len(), "{csv}");
    let columns = lines[0].split(',').count();
    assert!(
        lines[1..].iter().all(|l| l.split(',').count() >= columns),
        "{csv}"
    );

    // Bad requests are the client's fault.
    for bad in ["since=yesterday", "format=xml", "limit=many"] {
        let r = admin.get(&format!("/admin/provenance?{bad}")).await;
        assert_eq!(r.status, 400, "{bad}: {}", r.text());
        assert_eq!(r.json["error"]["code"], "BAD_REQUEST", "{bad}: {}", r.json);
    }

    // The CLI reads the same rows from the file: while the gateway runs (WAL reader) and after.
    let (json_rows, _) = ledger::page(&admin, &format!("session_id={sid}")).await;
    assert_eq!(cli(&db, &sid, "csv").await, csv);
    let printed: Vec<LedgerRow> = serde_json::from_str(&cli(&db, &sid, "json").await).unwrap();
    assert_eq!(printed, json_rows);
    gw.shutdown().await;
    assert_eq!(cli(&db, &sid, "csv").await, csv, "after shutdown");
}

/// `ldp-gateway provenance --db FILE --session ID --format F`.
async fn cli(db: &std::path::Path, session: &str, format: &str) -> String {
    let db = db.to_str().unwrap();
    let out = process::run(
        &[
            "provenance",
            "--db",
            db,
            "--session",
            session,
            "--format",
            format,
        ],
        &[],
    )
    .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// A task answered TASK_FAILED before it could run (its session is gone, or the shared state
/// did not answer) has its row like any other: every answered task is recorded.
#[tokio::test]
async fn a_task_failed_for_want_of_its_session_has_its_row() {
    let (a, _b) = fleet().await;
    let gw = TestGateway::builder().delegate(&a.url()).spawn().await;
    let gone = uuid::Uuid::new_v4().to_string();
    let r = gw.client().task(&gone, "echo", json!("x"), "text").await;
    assert_eq!(r["type"], "TASK_FAILED", "{r}");
    assert_eq!(r["error"]["code"], "SESSION_NOT_FOUND", "{r}");
    let (rows, _) = ledger::page(&gw.admin(), &format!("session_id={gone}")).await;
    assert_eq!(rows.len(), 1, "{rows:#?}");
    let row = &rows[0];
    assert_eq!(row.task_id, r["task_id"].as_str().unwrap());
    assert_eq!(row.outcome, Outcome::Failed);
    assert_eq!(row.error_code.as_deref(), Some("SESSION_NOT_FOUND"));
    assert_eq!((row.delegate.as_ref(), row.attempts), (None, 0));
    gw.shutdown().await;
}

#[tokio::test]
async fn payload_previews_are_opt_in_and_redacted() {
    const CANARY: &str = "sk-CANARY-123";
    let (a, _b) = fleet().await;
    let gw = TestGateway::builder()
        .delegate(&a.url())
        .config(|cfg| cfg.provenance.store_payloads = true)
        .spawn()
        .await;
    let c = gw.client();
    let admin = gw.admin();
    let (sid, _) = c
        .session(json!({"preferred_payload_modes": ["text"]}))
        .await;
    let input = json!({"text": "summarise this", "api_key": CANARY,
        "nested": {"Authorization": format!("Bearer {CANARY}"), "note": "kept"}});
    let r = c.task(&sid, "echo", input, "text").await;
    assert_eq!(r["type"], "TASK_RESULT", "{r}");
    assert!(
        !r.to_string().contains(CANARY),
        "the delegate did not echo it: {r}"
    );

    let page = admin
        .get(&format!("/admin/provenance?session_id={sid}"))
        .await;
    assert_eq!(page.status, 200);
    let json_text = page.text();
    let csv = admin
        .get(&format!("/admin/provenance?session_id={sid}&format=csv"))
        .await
        .text();
    assert!(!json_text.contains(CANARY), "{json_text}");
    assert!(!csv.contains(CANARY), "{csv}");
    let (rows, _) = ledger::page(&admin, &format!("session_id={sid}")).await;
    let payload = rows[0]
        .payload
        .as_ref()
        .expect("a preview is stored")
        .to_value();
    assert_eq!(payload["input"]["api_key"], "[redacted]");
    assert_eq!(payload["input"]["nested"]["Authorization"], "[redacted]");
    assert_eq!(payload["input"]["nested"]["note"], "kept");
    assert_eq!(payload["input"]["text"], "summarise this");
    assert_eq!(
        payload["output"], r["output"],
        "a short output is kept whole"
    );
    gw.shutdown().await;
}

// ---- metrics exposition ----

/// One sample line of the Prometheus text format.
#[derive(Debug)]
struct Sample {
    name: String,
    labels: Vec<(String, String)>,
    value: f64,
}

fn is_name(s: &str, colon: bool) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || (colon && c == ':'))
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || (colon && c == ':'))
}

fn parse_value(s: &str) -> Result<f64, String> {
    match s {
        "+Inf" => Ok(f64::INFINITY),
        "-Inf" => Ok(f64::NEG_INFINITY),
        "NaN" => Ok(f64::NAN),
        _ => s.parse().map_err(|_| format!("bad value '{s}'")),
    }
}

/// Parses `name{l="v",…} value [timestamp]` strictly.
fn parse_sample(line: &str) -> Result<Sample, String> {
    let name_end = line.find(['{', ' ']).ok_or("no value")?;
    let name = &line[..name_end];
    if !is_name(name, true) {
        return Err(format!("bad metric name '{name}'"));
    }
    let mut rest = &line[name_end..];
    let mut labels = Vec::new();
    if let Some(body) = rest.strip_prefix('{') {
        let mut chars = body.char_indices().peekable();
        let close;
        loop {
            let (start, c) = chars.next().ok_or("unterminated labels")?;
            if c == '}' {
                close = start;
                break;
            }
            let eq = body[start..].find('=').ok_or("label without '='")? + start;
            let lname = &body[start..eq];
            if !is_name(lname, false) {
                return Err(format!("bad label name '{lname}'"));
            }
            while chars.peek().is_some_and(|(i, _)| *i <= eq) {
                chars.next();
            }
            if chars.next().map(|(_, c)| c) != Some('"') {
                return Err(format!("label {lname} value is not quoted"));
            }
            let mut value = String::new();
            loop {
                match chars.next().ok_or("unterminated label value")?.1 {
                    '"' => break,
                    '\\' => match chars.next().ok_or("dangling escape")?.1 {
                        'n' => value.push('\n'),
                        '\\' => value.push('\\'),
                        '"' => value.push('"'),
                        other => return Err(format!("bad escape \\{other}")),
                    },
                    c => value.push(c),
                }
            }
            labels.push((lname.to_owned(), value));
            match chars.next().ok_or("unterminated labels")? {
                (_, ',') => {}
                (i, '}') => {
                    close = i;
                    break;
                }
                (_, c) => return Err(format!("unexpected '{c}' after a label")),
            }
        }
        rest = &body[close + 1..];
    }
    let fields: Vec<&str> = rest
        .strip_prefix(' ')
        .ok_or("no space before the value")?
        .split(' ')
        .collect();
    let value = match fields.as_slice() {
        [v] => parse_value(v)?,
        [v, ts] => {
            ts.parse::<i64>()
                .map_err(|_| format!("bad timestamp '{ts}'"))?;
            parse_value(v)?
        }
        _ => return Err("trailing fields".into()),
    };
    Ok(Sample {
        name: name.to_owned(),
        labels,
        value,
    })
}

/// Every line of an exposition: `# HELP`/`# TYPE` comments, then samples of declared families.
fn parse_exposition(text: &str) -> Vec<Sample> {
    let mut types: BTreeMap<String, String> = BTreeMap::new();
    let mut samples = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let n = n + 1;
        if line.is_empty() {
            continue;
        }
        if let Some(c) = line.strip_prefix("# ") {
            let mut parts = c.splitn(3, ' ');
            match (parts.next(), parts.next(), parts.next()) {
                (Some("HELP"), Some(name), _) => assert!(is_name(name, true), "line {n}: {line}"),
                (Some("TYPE"), Some(name), Some(t)) => {
                    assert!(is_name(name, true), "line {n}: {line}");
                    assert!(
                        ["counter", "gauge", "histogram", "summary", "untyped"].contains(&t),
                        "line {n}: {line}"
                    );
                    types.insert(name.to_owned(), t.to_owned());
                }
                _ => panic!("line {n}: unknown comment {line}"),
            }
            continue;
        }
        let s = parse_sample(line).unwrap_or_else(|e| panic!("line {n}: {e}: {line}"));
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|suffix| {
                s.name
                    .strip_suffix(suffix)
                    .filter(|f| types.get(*f).is_some_and(|t| t == "histogram"))
            })
            .unwrap_or(&s.name);
        assert!(
            types.contains_key(family),
            "line {n}: no # TYPE for {family}"
        );
        samples.push(s);
    }
    samples
}

fn looks_like_uuid(v: &str) -> bool {
    let groups: Vec<&str> = v.split('-').collect();
    groups.iter().map(|g| g.len()).eq([8, 4, 4, 4, 12])
        && groups
            .iter()
            .all(|g| g.chars().all(|c| c.is_ascii_hexdigit()))
}

#[test]
fn the_exposition_parser_is_strict() {
    let ok = parse_sample(r#"x_total{a="1",b="q\"uote\\"} 2.5"#).unwrap();
    assert_eq!(ok.labels[1], ("b".into(), "q\"uote\\".into()));
    assert_eq!(ok.value, 2.5);
    assert!(parse_sample("x +Inf").unwrap().value.is_infinite());
    for bad in [
        "9x 1",
        "x{a=1} 1",
        "x{a=\"1\" 1",
        "x{a=\"1\"}1",
        "x one",
        "x 1 2 3",
        "x{-a=\"1\"} 1",
    ] {
        assert!(parse_sample(bad).is_err(), "{bad}");
    }
    assert!(looks_like_uuid("0e5c1a9e-3c1b-4e55-9a5f-2f1e2d3c4b5a"));
    assert!(!looks_like_uuid("d0"));
}

#[tokio::test]
async fn metrics_exposition_parses_and_names_the_contract() {
    let (a, b) = fleet().await;
    let gw = TestGateway::builder()
        .delegate(&a.url())
        .delegate(&b.url())
        .spawn()
        .await;
    let c = gw.client();
    let (sid, seen) = mixed_run(&c, &b).await;
    // A ledger read waits until the store holds every row acknowledged before it (the
    // journal's rows moved in), so the ledger's counters below are complete.
    assert_eq!(
        gw.admin().get("/admin/provenance?limit=1").await.status,
        200
    );
    let r = gw.admin().get("/metrics").await;
    let (status, ctype, text) = (r.status, r.content_type(), r.text());
    assert_eq!(status, 200);
    assert!(ctype.starts_with("text/plain"), "{ctype}");
    let samples = parse_exposition(&text);
    let names: BTreeSet<&str> = samples.iter().map(|s| s.name.as_str()).collect();
    for want in [
        "ldp_gateway_tasks_total",
        "ldp_gateway_task_duration_seconds_bucket",
        "ldp_gateway_cost_usd_total",
        "ldp_gateway_tokens_total",
        "ldp_gateway_routing_decisions_total",
        "ldp_gateway_fallbacks_total",
        "ldp_gateway_rate_limited_total",
        "ldp_gateway_delegate_up",
        "ldp_gateway_delegate_latency_ewma_seconds",
        "ldp_gateway_sessions_active",
        "ldp_gateway_http_requests_total",
        "ldp_gateway_overhead_seconds_bucket",
        "ldp_gateway_build_info",
    ] {
        assert!(names.contains(want), "{want} missing from\n{text}");
    }
    // No unbounded label values: no ids of any kind.
    let ids: BTreeSet<String> = seen
        .iter()
        .flat_map(|s| [s.session.clone(), s.task_id().to_owned()])
        .chain([sid])
        .collect();
    for s in &samples {
        for (k, v) in &s.labels {
            assert!(
                !looks_like_uuid(v) && !ids.contains(v),
                "{}{{{k}=\"{v}\"}}",
                s.name
            );
        }
    }
    // The counts agree with the run.
    let total = |name: &str, filter: &dyn Fn(&Sample) -> bool| -> f64 {
        samples
            .iter()
            .filter(|s| s.name == name && filter(s))
            .map(|s| s.value)
            .sum()
    };
    let label = |s: &Sample, k: &str| {
        s.labels
            .iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.clone())
    };
    let results = seen
        .iter()
        .filter(|s| s.body["type"] == "TASK_RESULT")
        .count() as f64;
    assert_eq!(
        total("ldp_gateway_tasks_total", &|_| true),
        seen.len() as f64
    );
    assert_eq!(
        total("ldp_gateway_tasks_total", &|s| label(s, "outcome")
            .as_deref()
            == Some("result")),
        results
    );
    assert_eq!(
        total("ldp_gateway_fallbacks_total", &|s| label(s, "reason")
            .as_deref()
            == Some("payload_mode")),
        1.0
    );
    assert_eq!(total("ldp_gateway_delegate_up", &|_| true), 2.0);
    assert_eq!(total("ldp_gateway_sessions_active", &|_| true), 2.0);
    assert_eq!(total("ldp_gateway_build_info", &|_| true), 1.0);
    assert_eq!(
        total("ldp_gateway_task_duration_seconds_count", &|_| true),
        seen.len() as f64
    );
    assert_eq!(
        total("ldp_gateway_task_duration_seconds_bucket", &|s| label(
            s, "le"
        )
        .as_deref()
            == Some("+Inf")),
        seen.len() as f64,
        "+Inf bucket equals the count"
    );
    assert!(total("ldp_gateway_cost_usd_total", &|_| true) > 0.0);
    assert_eq!(
        total("ldp_gateway_ledger_rows_total", &|_| true),
        seen.len() as f64
    );
    assert_eq!(
        total("ldp_gateway_ledger_dropped_rows_total", &|_| true),
        0.0
    );
    gw.shutdown().await;
}

/// The SQLite backend keeps the ledger contract that Postgres keeps too (`cluster`).
#[test]
fn the_sqlite_backend_filters_pages_reads_back_and_prunes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.db");
    let mut b = ldp_gateway::provenance::SqliteBackend::open(
        &path.display().to_string(),
        ldp_gateway::provenance::Durability::Commit,
    )
    .unwrap();
    contract::check(&mut b);
}

/// A Postgres ledger of schema 2 (feedback, no votes) gains the votes table when a replica of
/// this build opens it, keeps its rows and ratings, and its new rows take votes.
#[test]
fn a_postgres_ledger_from_before_votes_migrates_and_keeps_its_rows() {
    use crate::support::stores::{pg_sql, TempDb};
    use ldp_gateway::provenance::{Backend, Durability, PostgresBackend, Query};
    use std::time::Duration;
    let db = TempDb::new();
    let open =
        || PostgresBackend::open(&db.url(), Durability::Commit, Duration::from_secs(5)).unwrap();
    let old = contract::row("old", "s", "anonymous", 1_000);
    {
        let mut b = open();
        b.insert(std::slice::from_ref(&old)).unwrap();
        assert!(b
            .rate(&contract::rating("old", "anonymous", 1.0, 1_100))
            .unwrap());
    }
    // Back to schema 2, as a build before votes left it.
    pg_sql(
        &db.name,
        "DROP TABLE votes; UPDATE ldp_ledger_schema SET version = 2".into(),
    );
    let mut b = open();
    let by_task = |t: &str| Query {
        task_id: Some(t.into()),
        ..Query::default()
    };
    assert_eq!(b.query(&by_task("old")).unwrap(), vec![old]);
    let new = LedgerRow {
        votes: vec![contract::vote(1, "d0", "v", false, 0.5)],
        ..contract::row("new", "s", "anonymous", 2_000)
    };
    b.insert(std::slice::from_ref(&new)).unwrap();
    assert_eq!(b.query(&by_task("new")).unwrap(), vec![new]);
    let at: Vec<i64> = b.evidence(0, 10).unwrap().iter().map(|e| e.at_ms).collect();
    assert_eq!(at, [1_100, 2_000]);
}
