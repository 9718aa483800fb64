//! `ldp-gateway call`: one task against any LDP endpoint (a delegate or a gateway) through
//! `ldp_client::Adapter`, or the endpoint's card with `--discover`; the exit code tells a
//! refusal, a failure and a transport error apart.

use ldp_client::{Adapter, Config, Discovery, Error, ErrorKind, Event, Outcome, Secret, Task};
use ldp_gateway::ldp::{IdentityCard, PayloadMode, Provenance, SessionConfig};
use serde_json::{json, Value};
use std::borrow::Cow;
use std::io::Write as _;
use std::process::ExitCode;
use std::time::Duration;

/// The endpoint or this client declined the work.
const EXIT_REFUSED: u8 = 3;
/// The task was taken and failed.
const EXIT_FAILED: u8 = 4;
/// The exchange itself failed.
const EXIT_TRANSPORT: u8 = 5;

/// Longest wait for the SESSION_CLOSE at the end.
const CLOSE_WITHIN: Duration = Duration::from_secs(5);

/// `call --help`'s closing text.
pub const AFTER_HELP: &str = "\
Exit codes:
  0  the task completed (with --discover: the card was read and would be accepted)
  1  any other error (such as an unwritable standard output)
  2  usage error
  3  refused: a session rejected (e.g. the endpoint does not trust --trust-domain), the
     --require-domain not satisfied (before any session),
     a 4xx answer (401 wrong key, 429 rate limited), or a TASK_FAILED in the identity,
     policy, capability, session or security categories (e.g. NO_ELIGIBLE_DELEGATE)
  4  failed: the task was taken and failed (runtime, quality or transport category,
     e.g. SIMULATED_FAILURE, UPSTREAM_FAILED)
  5  transport: no connection, no answer within --timeout, a 5xx, an unreadable answer,
     a bad URL
Errors go to standard error; the API key is never printed.";

/// Flags of `ldp-gateway call`.
#[derive(clap::Args)]
pub struct CallArgs {
    /// The endpoint: `http://host:port[/path]` or `ldp://host:port[/path]` (a delegate or a
    /// gateway).
    url: String,
    /// The skill to run.
    #[arg(long, required_unless_present = "discover")]
    skill: Option<String>,
    /// The task input as JSON. Text that is not JSON and starts with none of `{`, `[`, `"` is
    /// sent as a JSON string (`--input hello` is `"hello"`).
    #[arg(long, default_value = "{}", value_parser = parse_input)]
    input: Value,
    /// Print each progress update as it arrives, then the result.
    #[arg(long)]
    stream: bool,
    /// Print the endpoint's card (its `ldp.*` labels and capabilities); run no task.
    #[arg(long, conflicts_with_all = ["skill", "input", "stream", "mode"])]
    discover: bool,
    /// API key, sent as `Authorization: Bearer …`.
    #[arg(long, env = "LDP_API_KEY", hide_env_values = true)]
    key: Option<String>,
    /// Routing policy, sent as `x-ldp-policy`.
    #[arg(long)]
    policy: Option<String>,
    /// This client's own trust domain, sent with the session proposal (the reference SDK's
    /// session config `trust_domain`); the endpoint must trust it.
    #[arg(long, default_value = "default")]
    trust_domain: String,
    /// Required trust domain of the endpoint: one whose card names another is refused before
    /// any session.
    #[arg(long)]
    require_domain: Option<String>,
    /// Payload mode to propose (`text`, `semantic_frame`, …); default: the endpoint's
    /// choice among all (a semantic frame needs `task_type` and `instruction`).
    #[arg(long, value_parser = parse_mode)]
    mode: Option<PayloadMode>,
    /// Deadline of each exchange: the card, each handshake step, the task.
    #[arg(long, default_value = "60s", value_parser = parse_timeout)]
    timeout: Duration,
    /// One JSON object per line instead of text: each progress update, then the result
    /// (`task_id`, `answered_by`, `payload_mode`, `elapsed_ms`, `output` with its
    /// `ldp_provenance`), or the card (`url`, `labels`, `card`, `untrusted`).
    #[arg(long)]
    json: bool,
}

/// `--input`: JSON, or a bare string (see the flag's help).
fn parse_input(text: &str) -> Result<Value, String> {
    match serde_json::from_str(text) {
        Ok(v) => Ok(v),
        Err(e) if text.trim_start().starts_with(['{', '[', '"']) => {
            Err(format!("not valid JSON: {e}"))
        }
        Err(_) => Ok(Value::String(text.to_owned())),
    }
}

/// `--mode`: a payload mode's wire name.
fn parse_mode(text: &str) -> Result<PayloadMode, String> {
    PayloadMode::parse(text).ok_or_else(|| format!("unknown payload mode `{text}`"))
}

/// `--timeout`: a human duration longer than zero.
fn parse_timeout(text: &str) -> Result<Duration, String> {
    match humantime::parse_duration(text) {
        Ok(d) if d.is_zero() => Err("must be longer than 0s".into()),
        Ok(d) => Ok(d),
        Err(e) => Err(e.to_string()),
    }
}

/// Runs the call; an LDP error is printed to stderr and becomes its exit code.
pub async fn run(args: CallArgs) -> anyhow::Result<ExitCode> {
    match execute(args).await {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(e) => match e.downcast_ref::<Error>() {
            Some(ldp) => {
                let (word, code) = match ldp.kind() {
                    ErrorKind::Refused => ("refused", EXIT_REFUSED),
                    ErrorKind::Failed => ("failed", EXIT_FAILED),
                    ErrorKind::Transport => ("transport error", EXIT_TRANSPORT),
                };
                eprintln!("{word}: {}", shown(&ldp.to_string(), false));
                Ok(ExitCode::from(code))
            }
            None => Err(e),
        },
    }
}

async fn execute(mut args: CallArgs) -> anyhow::Result<()> {
    let defaults = Config::default();
    let session = match args.mode {
        Some(mode) => SessionConfig {
            preferred_payload_modes: Some(vec![mode]),
            payload_mode: Some(mode),
            ..defaults.session.clone()
        },
        None => defaults.session.clone(),
    };
    let adapter = Adapter::new(Config {
        session,
        api_key: args.key.take().map(Secret::new),
        policy: args.policy.take(),
        trust_domain: std::mem::take(&mut args.trust_domain),
        required_trust_domain: args.require_domain.take(),
        deadline: args.timeout,
        connect_timeout: args.timeout.min(defaults.connect_timeout),
        ..defaults
    })?;
    let close_within = args.timeout.min(CLOSE_WITHIN);
    let done = work(&adapter, args).await;
    // The session ends with the process: closed now, not left to the endpoint's idle TTL
    // (briefly: after a timeout the endpoint may not answer this either).
    let _ = tokio::time::timeout(close_within, adapter.close()).await;
    done
}

/// `--discover`, or the task.
async fn work(adapter: &Adapter, args: CallArgs) -> anyhow::Result<()> {
    if args.discover {
        let found = adapter.discover(&args.url).await?;
        print_card(&found, args.json)?;
        return match found.untrusted {
            Some(violation) => Err(Error::Untrusted {
                url: found.url,
                violation,
            }
            .into()),
            None => Ok(()),
        };
    }
    // clap requires `--skill` unless `--discover`.
    let skill = args.skill.unwrap_or_default();
    let task = Task::new(skill, args.input);
    let outcome = if args.stream {
        let mut events = adapter.stream(&args.url, task).await?;
        loop {
            match events.next().await {
                Some(Event::Progress { progress, message }) => {
                    print_progress(progress, message.as_deref(), args.json)?;
                }
                Some(Event::Completed(outcome)) => break *outcome,
                Some(Event::Failed(e)) => return Err(e.into()),
                None => return Err(Error::StreamBroken { url: args.url }.into()),
            }
        }
    } else {
        adapter.call(&args.url, task).await?
    };
    print_outcome(&outcome, args.json)
}

/// Writes `text` to stdout and flushes it (progress must show as it comes).
fn emit(text: &str) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()
}

fn print_progress(
    progress: Option<f64>,
    message: Option<&str>,
    as_json: bool,
) -> anyhow::Result<()> {
    let line = if as_json {
        json!({"progress": progress, "message": message}).to_string()
    } else {
        let pct = progress.map_or_else(|| "   -".to_owned(), |p| format!("{:>3.0}%", p * 100.0));
        format!("progress {pct} {}", shown(message.unwrap_or(""), false))
    };
    emit(&format!("{}\n", line.trim_end()))?;
    Ok(())
}

fn print_outcome(o: &Outcome, as_json: bool) -> anyhow::Result<()> {
    let elapsed_ms = o.elapsed.as_secs_f64() * 1000.0;
    if as_json {
        let line = json!({
            "task_id": o.task_id.as_str(),
            "answered_by": o.answered_by,
            "payload_mode": o.payload_mode.as_str(),
            "elapsed_ms": (elapsed_ms * 1000.0).round() / 1000.0,
            "output": o.output,
        });
        emit(&format!("{line}\n"))?;
        return Ok(());
    }
    // The output as the endpoint sent it: its provenance has a section of its own.
    let mut output = o.output.clone();
    if let Value::Object(map) = &mut output {
        map.remove("ldp_provenance");
    }
    // Pretty JSON escapes C0 in strings but not DEL, C1 or bidi controls; its own line breaks
    // stay.
    let pretty = serde_json::to_string_pretty(&output)?;
    let mut text = format!("output:\n{}\n", shown(&pretty, true));
    match &o.provenance {
        Some(p) => {
            text.push_str("provenance:\n");
            text.push_str(&table(&provenance_rows(p), "  "));
        }
        None => text.push_str("provenance: none (the endpoint sent no record)\n"),
    }
    text.push_str(&format!(
        "timing: {elapsed_ms:.1} ms (task {}, answered by {}, payload {})\n",
        shown(o.task_id.as_str(), false),
        shown(&o.answered_by, false),
        o.payload_mode.as_str()
    ));
    emit(&text)?;
    Ok(())
}

/// The provenance record as (field, value) rows, absent fields left out.
fn provenance_rows(p: &Provenance) -> Vec<Vec<String>> {
    let mut rows = vec![
        row("produced_by", &p.produced_by),
        row("model_version", &p.model_version),
        row("payload_mode_used", p.payload_mode_used.as_str()),
    ];
    let optional = [
        ("confidence", p.confidence.map(|c| c.to_string())),
        ("tokens_used", p.tokens_used.map(|t| t.to_string())),
        ("cost_usd", p.cost_usd.map(|c| c.to_string())),
        ("session_id", p.session_id.clone()),
        ("timestamp", p.timestamp.clone()),
        ("contract_id", p.contract_id.clone()),
        (
            "contract_satisfied",
            p.contract_satisfied.map(|s| s.to_string()),
        ),
    ];
    rows.extend(
        optional
            .into_iter()
            .filter_map(|(k, v)| v.map(|v| row(k, &v))),
    );
    if !p.contract_violations.is_empty() {
        rows.push(row(
            "contract_violations",
            &p.contract_violations.join(", "),
        ));
    }
    rows.push(row("verification", p.verification_status.as_str()));
    for e in &p.evidence {
        rows.push(row("evidence", &format!("{} ({})", e.source, e.kind)));
    }
    for l in &p.lineage {
        let mut hop = format!("{} by {}", l.step, l.delegate_id);
        let details = [
            l.routed_to.as_ref().map(|r| format!("routed to {r}")),
            l.policy.as_ref().map(|p| format!("policy {p}")),
            l.attempts.map(|a| format!("attempts {a}")),
            l.note.clone(),
        ];
        let details: Vec<String> = details.into_iter().flatten().collect();
        if !details.is_empty() {
            hop = format!("{hop}: {}", details.join(", "));
        }
        rows.push(row("lineage", &hop));
    }
    rows
}

fn print_card(found: &Discovery, as_json: bool) -> anyhow::Result<()> {
    if as_json {
        let line = json!({
            "url": found.url,
            "labels": found.labels,
            "card": found.card,
            "untrusted": found.untrusted.as_ref().map(|v| v.to_string()),
        });
        emit(&format!("{line}\n"))?;
        return Ok(());
    }
    let card = &found.card;
    let mut text = format!(
        "endpoint: {}\nname: {}\n",
        shown(&found.url, false),
        shown(&card.name, false)
    );
    if let Some(d) = &card.description {
        text.push_str(&format!("description: {}\n", shown(d, false)));
    }
    text.push_str("labels:\n");
    let labels: Vec<Vec<String>> = found.labels.iter().map(|(k, v)| row(k, v)).collect();
    text.push_str(&table(&labels, "  "));
    if !card.metadata.is_empty() {
        text.push_str("metadata:\n");
        let meta: Vec<Vec<String>> = card.metadata.iter().map(|(k, v)| row(k, v)).collect();
        text.push_str(&table(&meta, "  "));
    }
    text.push_str(&format!("capabilities: {}\n", card.capabilities.len()));
    text.push_str(&table(&capability_rows(card), "  "));
    match &found.untrusted {
        Some(v) => text.push_str(&format!(
            "trust: refused before any session: {}\n",
            shown(&v.to_string(), false)
        )),
        None => text.push_str(&format!(
            "trust: ok ({})\n",
            shown(&card.trust_domain.name, false)
        )),
    }
    emit(&text)?;
    Ok(())
}

/// A header row, then one row per capability; `-` where the card is silent.
fn capability_rows(card: &IdentityCard) -> Vec<Vec<String>> {
    let dash = || "-".to_owned();
    let mut rows = vec![[
        "skill", "quality", "usd/call", "p50_ms", "p99_ms", "stream", "domains",
    ]
    .map(str::to_owned)
    .to_vec()];
    for c in &card.capabilities {
        let h = &c.hints;
        rows.push(vec![
            c.name.clone(),
            h.quality.map_or_else(dash, |q| format!("{q:.2}")),
            h.cost_per_call_usd.map_or_else(dash, |c| c.to_string()),
            h.latency_p50_ms.map_or_else(dash, |l| l.to_string()),
            h.latency_p99_ms.map_or_else(dash, |l| l.to_string()),
            h.supports_streaming
                .map_or_else(dash, |s| if s { "yes" } else { "no" }.to_owned()),
            if c.domains.is_empty() {
                dash()
            } else {
                c.domains.join(",")
            },
        ]);
    }
    rows
}

fn row(key: &str, value: &str) -> Vec<String> {
    vec![key.to_owned(), value.to_owned()]
}

/// Whether `c` could drive a terminal: C0 and C1 controls, DEL, and the bidi controls
/// (embeddings and overrides U+202A–202E, isolates U+2066–2069, marks U+200E/F and U+061C).
fn is_hostile(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{200e}' | '\u{200f}' | '\u{61c}')
}

/// A remote string as shown in text mode: every control and bidi character escaped as
/// `\u{1b}`, so no card, answer or error can write escape sequences (clipboard, screen,
/// hyperlinks) or reorder text on the terminal; `keep_newlines` leaves `\n` (this program's
/// own line breaks in a block it formatted).
fn shown(s: &str, keep_newlines: bool) -> Cow<'_, str> {
    let hostile = |c: char| is_hostile(c) && !(keep_newlines && c == '\n');
    if !s.chars().any(hostile) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 16);
    for c in s.chars() {
        if hostile(c) {
            out.push_str(&format!("\\u{{{:x}}}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// Rows as left-aligned columns, each line starting with `indent`; every cell [`shown`].
fn table(rows: &[Vec<String>], indent: &str) -> String {
    let rows: Vec<Vec<Cow<'_, str>>> = rows
        .iter()
        .map(|r| r.iter().map(|c| shown(c, false)).collect())
        .collect();
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|i| {
            rows.iter()
                .filter_map(|r| r.get(i))
                .map(|c| c.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for r in rows {
        let cells: Vec<String> = r
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        out.push_str(indent);
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn input_is_json_or_a_bare_string() {
        assert_eq!(parse_input(r#"{"a": 1}"#), Ok(json!({"a": 1})));
        assert_eq!(parse_input("42"), Ok(json!(42)));
        assert_eq!(parse_input("hello world"), Ok(json!("hello world")));
        let bad = parse_input(r#"{"a": oops}"#).unwrap_err();
        assert!(bad.starts_with("not valid JSON: "), "{bad}");
        assert!(parse_input("[1,").is_err());
    }

    #[test]
    fn timeout_is_a_positive_duration() {
        assert_eq!(parse_timeout("1500ms"), Ok(Duration::from_millis(1500)));
        assert!(parse_timeout("0s").is_err());
        assert!(parse_timeout("soon").is_err());
    }

    #[test]
    fn hostile_characters_are_shown_escaped() {
        let nasty =
            "a\u{1b}]52;c;ZXZpbA==\u{7}b\u{9b}2J\u{7f}\u{202e}txt.exe\u{2066}\u{200f}\u{61c}\nz";
        assert_eq!(
            shown(nasty, false),
            "a\\u{1b}]52;c;ZXZpbA==\\u{7}b\\u{9b}2J\\u{7f}\\u{202e}txt.exe\\u{2066}\\u{200f}\\u{61c}\\u{a}z"
        );
        assert_eq!(shown("x\ny\u{1b}", true), "x\ny\\u{1b}");
        assert!(matches!(
            shown("plain — ünïcode ✓", false),
            Cow::Borrowed(_)
        ));
        let t = table(&[row("k\u{1b}[2J", "v")], "");
        assert_eq!(t, "k\\u{1b}[2J  v\n");
    }

    #[test]
    fn table_pads_columns() {
        let t = table(&[row("a", "1"), row("long key", "2")], "  ");
        assert_eq!(t, "  a         1\n  long key  2\n");
    }
}
