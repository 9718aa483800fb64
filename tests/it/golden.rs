//! Golden snapshots of every translation (issue 38 item 6): each front end's request → task
//! and result → answer (whole and streamed), and each upstream kind's task → request and
//! answer → result, driven through the real routes of a real gateway (no internal function
//! is called, so the tests outlive any restructuring behind the routes) in front of
//! recording upstreams that answer fixed bytes (`support::recorder`).
//!
//! One case, one snapshot file (`tests/it/snapshots/<protocol>__<case>.snap`): every request
//! the client sent (a fixture in the test), what each upstream received during it (the
//! translation out), what the upstream answered (fixed), and what the client received (the
//! translation back), as pretty JSON (keys sorted) or text. What the gateway makes afresh on
//! every run is normalised ([`normalise`]): UUIDs become `[uuid-N]`, numbered in order of
//! first appearance (so the task id sent upstream and the one in the answer show as the same
//! placeholder), timestamps `[time]`, addresses the upstream's name, and so on.
//!
//! A change in a wire shape is a failing test with a diff. To accept one, run
//! `INSTA_UPDATE=always cargo test -p ldp-gateway --test it golden::` and review every changed
//! `.snap` file like code. CI runs with `CI=true`, where insta writes nothing and fails on any
//! difference (and on a missing snapshot).

mod a2a;
mod anthropic;
mod ladp;
mod ldp;
mod llmcp;
mod llmx;
mod openai;

use crate::support::recorder::{Log, Recorder, FIXED_TIME, FIXED_UNIX};
use crate::support::{Resp, TestGateway};
use regex::Regex;
use serde_json::Value;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::LazyLock;

/// The API key of the tenant every golden gateway has ([`gateway`]).
pub const KEY: &str = "sk-golden";
/// `Authorization` with [`KEY`].
pub const BEARER: (&str, &str) = ("authorization", "Bearer sk-golden");

/// A gateway builder with the tenant `golden` (key [`KEY`], trust domain `default`).
pub fn gateway<'a>() -> crate::support::gateway::Builder<'a> {
    let tenant: ldp_gateway::config::TenantConfig = serde_json::from_value(serde_json::json!({
        "name": "golden",
        "api_key_sha256": [ldp_gateway::secret::hash_key(KEY)],
        "trust_domains": ["default"],
    }))
    .expect("a tenant");
    TestGateway::builder().tenant(tenant)
}

/// The `from` of the golden LDP client.
pub const CLIENT: &str = "ldp:client:golden";

/// An envelope of the golden LDP client's, numbered `n`, in `session`, at [`FIXED_TIME`].
pub fn envelope(n: u32, session: &str, body: Value) -> Value {
    serde_json::json!({
        "message_id": format!("client-msg-{n}"), "session_id": session, "from": CLIENT,
        "to": "ldp:delegate:gateway", "body": body, "payload_mode": "text",
        "timestamp": FIXED_TIME, "provenance": null
    })
}

/// A TASK_SUBMIT of the golden client (task `client-task-1`) for `skill` with `input`.
pub fn submit(session: &str, skill: &str, input: Value) -> Value {
    envelope(
        3,
        session,
        serde_json::json!({"type": "TASK_SUBMIT", "task_id": "client-task-1", "skill": skill,
            "input": input}),
    )
}

/// A text session of the golden LDP client at `gw`, opened outside any case (the opening is
/// `ldp__session_and_task`'s to show); its id.
pub async fn session(gw: &TestGateway) -> String {
    let c = gw.client().with_key(Some(KEY)).with_from(CLIENT);
    c.session(serde_json::json!({"preferred_payload_modes": ["text"]}))
        .await
        .0
}

/// Response headers left out of a snapshot: transport, not translation.
const TRANSPORT_HEADERS: [&str; 5] = [
    "date",
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
];

/// One golden case: the exchanges it made, rendered as they happened, and its snapshot.
pub struct Case {
    name: String,
    what: String,
    base: String,
    http: reqwest::Client,
    upstreams: Vec<Upstream>,
    calls: usize,
    out: String,
    /// Where the last answer to the client starts in `out`.
    answer_at: usize,
    keep: Vec<String>,
}

/// A recording upstream of a case, under the name the snapshot gives it.
struct Upstream {
    name: String,
    authority: String,
    log: Log,
    seen: usize,
}

impl Case {
    /// A case called `name` (its snapshot's file name) showing `what`, against `gw`.
    pub fn new(name: &str, what: &str, gw: &TestGateway) -> Case {
        Case {
            name: name.to_owned(),
            what: what.to_owned(),
            base: gw.ldp_url(),
            http: reqwest::Client::new(),
            upstreams: Vec::new(),
            calls: 0,
            out: String::new(),
            answer_at: 0,
            keep: vec![FIXED_TIME.to_owned(), FIXED_UNIX.to_string()],
        }
    }

    /// Shows `r`'s exchanges under `name`, in the order upstreams are added.
    pub fn upstream(mut self, name: &str, r: &Recorder) -> Case {
        let log = r.log();
        let seen = log.lock().expect("log").len();
        self.upstreams.push(Upstream {
            name: name.to_owned(),
            authority: r.url().trim_start_matches("http://").to_owned(),
            log,
            seen,
        });
        self
    }

    /// A value of a fixture that looks like one the gateway makes (a timestamp, a UUID): kept
    /// as it is.
    pub fn keep(mut self, token: &str) -> Case {
        self.keep.push(token.to_owned());
        self
    }

    /// POSTs `body` as JSON to `path` with `headers` besides `content-type`.
    pub async fn post_json(&mut self, path: &str, headers: &[(&str, &str)], body: &Value) -> Resp {
        let mut all = vec![("content-type", "application/json")];
        all.extend_from_slice(headers);
        self.call("POST", path, &all, body.to_string().into_bytes())
            .await
    }

    /// POSTs `body` as it is to `path` with `headers`.
    pub async fn post(&mut self, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Resp {
        self.call("POST", path, headers, body.to_vec()).await
    }

    /// GETs `path` with `headers`.
    pub async fn get(&mut self, path: &str, headers: &[(&str, &str)]) -> Resp {
        self.call("GET", path, headers, Vec::new()).await
    }

    /// One client call, rendered with what the upstreams saw during it.
    async fn call(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Vec<u8>,
    ) -> Resp {
        self.calls += 1;
        let n = self.calls;
        let mut req = self.http.request(
            method.parse().expect("a method"),
            format!("{}{path}", self.base),
        );
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let ctype = headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case("content-type"))
            .map_or("", |(_, v)| *v);
        let _ = writeln!(self.out, "== {n}. client → gateway: {method} {path}");
        let mut shown: Vec<(String, String)> = headers
            .iter()
            .map(|(k, v)| (k.to_ascii_lowercase(), (*v).to_owned()))
            .collect();
        shown.sort();
        write_headers(&mut self.out, &shown);
        write_body(&mut self.out, ctype, &body);
        let resp = req.body(body).send().await.expect("the gateway answers");
        let status = resp.status().as_u16();
        let resp_headers = resp.headers().clone();
        let raw = resp.bytes().await.expect("the answer's body").to_vec();
        self.upstream_exchanges(n);
        let mut shown: Vec<(String, String)> = resp_headers
            .iter()
            .filter(|(k, _)| !TRANSPORT_HEADERS.contains(&k.as_str()))
            .map(|(k, v)| {
                (
                    k.as_str().to_owned(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect();
        shown.sort();
        let ctype = resp_headers
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        self.answer_at = self.out.len();
        let _ = writeln!(self.out, "== {n}. gateway → client: {status}");
        write_headers(&mut self.out, &shown);
        write_body(&mut self.out, &ctype, &raw);
        let json = serde_json::from_slice(&raw).unwrap_or(Value::Null);
        Resp {
            status,
            headers: resp_headers,
            raw,
            json,
        }
    }

    /// The exchanges each upstream had since the last call, upstream by upstream (their order
    /// across upstreams is the order the case added them: a batch runs them concurrently).
    fn upstream_exchanges(&mut self, n: usize) {
        let mut i = 0;
        for u in &mut self.upstreams {
            let log = u.log.lock().expect("log").clone();
            for x in &log[u.seen..] {
                if x.asked.method == "GET" {
                    // Discovery (a card, a model list), not a translation.
                    continue;
                }
                i += 1;
                let a = &x.asked;
                let _ = writeln!(
                    self.out,
                    "-- {n}.{i} gateway → {}: {} {}",
                    u.name, a.method, a.path
                );
                let mut shown: Vec<(String, String)> = a
                    .headers
                    .iter()
                    .filter(|(k, _)| k != "host" && !TRANSPORT_HEADERS.contains(&k.as_str()))
                    .map(|(k, v)| match k.as_str() {
                        "traceparent" | "tracestate" => (k.clone(), "[trace context]".into()),
                        _ => (k.clone(), v.clone()),
                    })
                    .collect();
                shown.sort();
                write_headers(&mut self.out, &shown);
                let ctype = a
                    .headers
                    .iter()
                    .find(|(k, _)| k == "content-type")
                    .map_or("", |(_, v)| v.as_str());
                write_body(&mut self.out, ctype, &a.body);
                let r = &x.reply;
                let _ = writeln!(
                    self.out,
                    "-- {n}.{i} {} → gateway: {} {}",
                    u.name, r.status, r.content_type
                );
                write_body(&mut self.out, &r.content_type, &r.body);
            }
            u.seen = log.len();
        }
    }

    /// Sorts the lines of the last answer that start with `prefix` among themselves, each
    /// sorted line taking the place of one of them: an answer whose parts come in
    /// completion order (an LLMX batch) reads the same on every run.
    pub fn sort_answer_lines(&mut self, prefix: &str) {
        let answer = self.out.split_off(self.answer_at);
        let mut lines: Vec<&str> = answer.split_inclusive('\n').collect();
        let mut sorted: Vec<&str> = lines
            .iter()
            .copied()
            .filter(|l| l.starts_with(prefix))
            .collect();
        sorted.sort_unstable();
        let mut next = sorted.into_iter();
        for line in &mut lines {
            if line.starts_with(prefix) {
                *line = next.next().expect("as many sorted lines");
            }
        }
        self.out.push_str(&lines.concat());
    }

    /// Any words of the case's own between calls (what the next call shows).
    pub fn note(&mut self, text: &str) {
        let _ = writeln!(self.out, "# {text}\n");
    }

    /// The case's text, normalised.
    fn text(&self) -> String {
        let mut names: Vec<(String, String)> = self
            .upstreams
            .iter()
            .map(|u| (u.authority.clone(), u.name.clone()))
            .collect();
        names.push((
            self.base.trim_start_matches("http://").to_owned(),
            "gateway".to_owned(),
        ));
        normalise(&self.out, &names, &self.keep)
    }

    /// Checks the case against its snapshot file.
    pub fn snapshot(self) {
        let text = self.text();
        let mut settings = insta::Settings::clone_current();
        settings.set_prepend_module_to_snapshot(false);
        settings.set_omit_expression(true);
        settings.set_description(self.what.as_str());
        settings.bind(|| insta::assert_snapshot!(self.name.as_str(), text));
    }
}

fn write_headers(out: &mut String, headers: &[(String, String)]) {
    for (k, v) in headers {
        let _ = writeln!(out, "{k}: {v}");
    }
}

/// A body as a reader wants it: JSON pretty (keys sorted), each event of a stream apart with
/// its JSON pretty, anything else as text.
fn write_body(out: &mut String, content_type: &str, body: &[u8]) {
    out.push('\n');
    if body.is_empty() {
        out.push_str("(no body)\n\n");
        return;
    }
    let text = String::from_utf8_lossy(body);
    if content_type.starts_with("text/event-stream") {
        for event in text.replace("\r\n", "\n").split("\n\n") {
            if event.is_empty() {
                continue;
            }
            for line in event.lines() {
                match line
                    .strip_prefix("data:")
                    .map(|d| d.strip_prefix(' ').unwrap_or(d))
                    .and_then(|d| serde_json::from_str::<Value>(d).ok())
                {
                    Some(v) => {
                        let _ = writeln!(out, "data: {}", pretty(&v));
                    }
                    None => {
                        let _ = writeln!(out, "{line}");
                    }
                }
            }
            out.push('\n');
        }
        if !text.ends_with("\n\n") {
            out.push_str("(the stream ends here, mid-event)\n\n");
        }
        return;
    }
    match serde_json::from_slice::<Value>(body) {
        Ok(v) => {
            let _ = writeln!(out, "{}\n", pretty(&v));
            write_unfolded(out, &v, &mut String::new());
        }
        Err(_) => {
            out.push_str(&text);
            out.push_str(if text.ends_with('\n') { "\n" } else { "\n\n" });
        }
    }
}

/// Each string of `v` (at `at`) holding several lines, again as its lines: a prompt reads
/// (and its diff shows) line by line.
fn write_unfolded(out: &mut String, v: &Value, at: &mut String) {
    match v {
        Value::String(s) if s.lines().count() > 2 => {
            let _ = writeln!(out, "{at}, unfolded:");
            for line in s.lines() {
                let _ = writeln!(out, "| {line}");
            }
            out.push('\n');
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                let len = at.len();
                let _ = write!(at, "[{i}]");
                write_unfolded(out, item, at);
                at.truncate(len);
            }
        }
        Value::Object(fields) => {
            for (k, item) in fields {
                let len = at.len();
                let _ = write!(at, ".{k}");
                write_unfolded(out, item, at);
                at.truncate(len);
            }
        }
        _ => {}
    }
}

fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).expect("JSON")
}

/// What the gateway makes afresh on every run, in `text`, replaced by placeholders: the
/// `names` given (`authority`, `name`: a listener's `127.0.0.1:PORT`) by their names, any
/// other loopback port by `[port]`, UUIDs by `[uuid-N]` and other runs of 16 or more hex
/// digits by `[hex-N]`, each numbered in order of first appearance, RFC 3339 instants by
/// `[time]`, an OpenAI `created` by `[unix time]`, the instant of an LADP message from the
/// gateway by `[epoch ms]`; the `keep` values stay as they are.
pub fn normalise(text: &str, names: &[(String, String)], keep: &[String]) -> String {
    static PORT: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"127\.0\.0\.1:\d+").expect("re"));
    static UUID: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
            .expect("re")
    });
    static TIME: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:\d{2})")
            .expect("re")
    });
    // Ids in their simple form (a UUID's 32 digits) and digests of what varies (an ETag).
    static HEX: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"\b[0-9a-f]{16,}\b").expect("re"));
    // An OpenAI answer's `created`, in seconds since the epoch.
    static CREATED: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r#""created": (\d{9,})"#).expect("re"));
    // The instant of an LADP message the gateway sends, in milliseconds since the epoch.
    static LADP_MS: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"(\(msg \S+ gateway \S+ )\d+").expect("re"));
    let mut t = text.to_owned();
    for (authority, name) in names {
        t = t.replace(authority.as_str(), name);
    }
    let t = PORT.replace_all(&t, "127.0.0.1:[port]");
    let mut seen: HashMap<String, usize> = HashMap::new();
    let t = UUID.replace_all(&t, |c: &regex::Captures<'_>| {
        let id = &c[0];
        if keep.iter().any(|k| k == id) {
            return id.to_owned();
        }
        let next = seen.len() + 1;
        let n = *seen.entry(id.to_ascii_lowercase()).or_insert(next);
        format!("[uuid-{n}]")
    });
    let mut seen: HashMap<String, usize> = HashMap::new();
    let t = HEX.replace_all(&t, |c: &regex::Captures<'_>| {
        let hex = &c[0];
        if keep.iter().any(|k| k == hex) {
            return hex.to_owned();
        }
        let next = seen.len() + 1;
        let n = *seen.entry(hex.to_owned()).or_insert(next);
        format!("[hex-{n}]")
    });
    let t = TIME.replace_all(&t, |c: &regex::Captures<'_>| {
        let at = &c[0];
        match keep.iter().any(|k| k == at) {
            true => at.to_owned(),
            false => "[time]".to_owned(),
        }
    });
    let t = CREATED.replace_all(&t, |c: &regex::Captures<'_>| {
        match keep.iter().any(|k| k == &c[1]) {
            true => c[0].to_owned(),
            false => "\"created\": [unix time]".to_owned(),
        }
    });
    let t = LADP_MS.replace_all(&t, "${1}[epoch ms]");
    t.into_owned()
}

/// The normaliser keeps what a fixture wrote and numbers what the gateway made, the same
/// value the same way wherever it appears.
#[test]
fn normalise_numbers_what_varies_and_keeps_the_fixtures() {
    let (a, b) = (
        "0f8fad5b-d9cb-469f-a165-70867728950e",
        "7c9e6679-7425-40de-944b-e07fc1f90ae7",
    );
    let text = format!(
        "{a} {b} {a} at 127.0.0.1:4001 and 127.0.0.1:4002 \"created\": 1796658151 \
         \"created\": {FIXED_UNIX} ldp-0123456789abcdef0123456789abcdef {FIXED_TIME} \
         2026-12-07T15:33:59.123456Z (msg vote gateway ctl 1796658412515 (data)) \
         (msg task-init ctl gateway 1746176400000 (data))"
    );
    let names = [("127.0.0.1:4001".to_owned(), "d0".to_owned())];
    let keep = [FIXED_TIME.to_owned(), FIXED_UNIX.to_string()];
    assert_eq!(
        normalise(&text, &names, &keep),
        format!(
            "[uuid-1] [uuid-2] [uuid-1] at d0 and 127.0.0.1:[port] \"created\": [unix time] \
             \"created\": {FIXED_UNIX} ldp-[hex-1] {FIXED_TIME} [time] \
             (msg vote gateway ctl [epoch ms] (data)) \
             (msg task-init ctl gateway 1746176400000 (data))"
        )
    );
}
