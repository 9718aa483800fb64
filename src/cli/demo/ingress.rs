//! The demo's OpenAI ingress: a few chat completions sent to the gateway's
//! `POST /v1/chat/completions` as the `openai` SDK sends them (`model` a skill or
//! `skill@policy`), each answer's `x-ldp-delegate`, `x-ldp-policy` and `x-ldp-task-id` headers,
//! and the ledger row that task id finds.

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::header::{CONTENT_TYPE, HOST};
use hyper::{HeaderMap, Request};
use ldp_gateway::provenance::{LedgerHandle, Query};
use serde_json::{json, Value};
use std::fmt::Write as _;
use std::time::Duration;

/// Deadline of one request, end to end.
const TIMEOUT: Duration = Duration::from_secs(30);

/// What the demo asks the ingress: `(model, system prompt, user message)`. Each names a
/// different skill: the ingress keeps one gateway session per tenant, whose tasks of one skill
/// stay with the delegate that served the first.
pub const REQUESTS: [(&str, &str, &str); 2] = [
    (
        "chat@cheapest",
        "You are a support assistant. Answer in one sentence.",
        "My invoice shows two charges for March. What should I do?",
    ),
    (
        "summarize@best-quality",
        "You write executive summaries.",
        "Summarise: revenue grew 12% year on year; churn fell to 1.8%; infrastructure cost per \
         customer rose 4% because of the new EU region.",
    ),
];

/// One request and what came back.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Exchange {
    /// The `model` asked for.
    pub model: String,
    /// HTTP status.
    pub status: u16,
    /// `x-ldp-delegate`.
    pub delegate: Option<String>,
    /// `x-ldp-policy`.
    pub policy: Option<String>,
    /// `x-ldp-task-id`.
    pub task_id: Option<String>,
    /// `usage.total_tokens` of the answer.
    pub tokens: Option<u64>,
    /// `cost_usd` of the task's ledger row.
    pub cost_usd: Option<f64>,
    /// The answer's text, or the error's message.
    pub text: String,
}

/// Sends every request of [`REQUESTS`] to the gateway at `ldp` (its base URL) in turn and
/// looks each task up in `ledger`.
pub async fn run(ldp: &str, ledger: &LedgerHandle) -> Vec<Exchange> {
    let mut out = Vec::new();
    for (model, system, user) in REQUESTS {
        let body = json!({
            "model": model,
            "messages": [
                {"role": "system", "content": system},
                {"role": "user", "content": user},
            ],
        });
        let mut ex = match post(ldp, "/v1/chat/completions", body.to_string()).await {
            Ok((status, headers, body)) => read(model, status, &headers, &body),
            Err(e) => Exchange {
                model: model.to_owned(),
                text: format!("request failed: {e:#}"),
                ..Exchange::default()
            },
        };
        if let Some(id) = &ex.task_id {
            let q = Query {
                task_id: Some(id.clone()),
                ..Query::default()
            };
            if let Ok(rows) = ledger.query(q).await {
                ex.cost_usd = rows.first().and_then(|r| r.cost_usd);
            }
        }
        out.push(ex);
    }
    out
}

/// An answer, read: the headers, the usage, the assistant's text or the error's message.
fn read(model: &str, status: u16, headers: &HeaderMap, body: &[u8]) -> Exchange {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let v: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let text = v["choices"][0]["message"]["content"]
        .as_str()
        .or_else(|| v["error"]["message"].as_str())
        .unwrap_or_default();
    Exchange {
        model: model.to_owned(),
        status,
        delegate: header("x-ldp-delegate"),
        policy: header("x-ldp-policy"),
        task_id: header("x-ldp-task-id"),
        tokens: v["usage"]["total_tokens"].as_u64(),
        cost_usd: None,
        text: text.to_owned(),
    }
}

/// One POST of JSON `body` to `base` + `path` on a fresh HTTP/1.1 connection: status, headers
/// and body.
async fn post(base: &str, path: &str, body: String) -> anyhow::Result<(u16, HeaderMap, Bytes)> {
    let host = base
        .strip_prefix("http://")
        .ok_or_else(|| anyhow::anyhow!("not an http:// URL: {base}"))?
        .trim_end_matches('/')
        .to_owned();
    let exchange = async {
        let stream = tokio::net::TcpStream::connect(&host).await?;
        let (mut sender, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await?;
        let driver = tokio::spawn(conn);
        let req = Request::post(path)
            .header(HOST, &host)
            .header(CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(body)))?;
        let resp = sender.send_request(req).await?;
        let (parts, body) = resp.into_parts();
        let bytes = body.collect().await?.to_bytes();
        driver.abort();
        anyhow::Ok((parts.status.as_u16(), parts.headers, bytes))
    };
    tokio::time::timeout(TIMEOUT, exchange)
        .await
        .map_err(|_| anyhow::anyhow!("no answer within {TIMEOUT:?}"))?
}

/// The exchanges as a table: model asked, status, who answered under which policy, tokens,
/// the ledger's cost, the start of the answer.
pub fn render(exchanges: &[Exchange]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "  {:<24} {:>6} {:<20} {:<14} {:>6} {:>11}  answer",
        "model", "status", "x-ldp-delegate", "x-ldp-policy", "tokens", "cost USD"
    );
    for e in exchanges {
        let text: String = e.text.chars().take(48).collect();
        let more = if e.text.chars().count() > 48 {
            "…"
        } else {
            ""
        };
        let _ = writeln!(
            out,
            "  {:<24} {:>6} {:<20} {:<14} {:>6} {:>11}  {text}{more}",
            e.model,
            e.status,
            e.delegate.as_deref().unwrap_or("-"),
            e.policy.as_deref().unwrap_or("-"),
            e.tokens.map_or_else(|| "-".into(), |t| t.to_string()),
            e.cost_usd.map_or_else(|| "-".into(), |c| format!("{c:.6}")),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::header::HeaderValue;

    #[test]
    fn an_answer_is_read_from_its_headers_and_body() {
        let mut h = HeaderMap::new();
        h.insert("x-ldp-delegate", HeaderValue::from_static("llama-local"));
        h.insert("x-ldp-policy", HeaderValue::from_static("cheapest"));
        h.insert("x-ldp-task-id", HeaderValue::from_static("t-1"));
        let body = json!({
            "choices": [{"message": {"role": "assistant", "content": "echo: hi"}}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
        });
        let e = read("chat@cheapest", 200, &h, body.to_string().as_bytes());
        assert_eq!(e.delegate.as_deref(), Some("llama-local"));
        assert_eq!(e.policy.as_deref(), Some("cheapest"));
        assert_eq!(e.task_id.as_deref(), Some("t-1"));
        assert_eq!((e.tokens, e.text.as_str()), (Some(5), "echo: hi"));

        let err = json!({"error": {"message": "The model `x` does not exist", "type": "x"}});
        let e = read("x", 404, &HeaderMap::new(), err.to_string().as_bytes());
        assert_eq!(
            (e.status, e.delegate.as_deref(), e.tokens),
            (404, None, None)
        );
        assert!(e.text.contains("does not exist"), "{e:?}");
    }

    #[test]
    fn the_table_shows_who_answered_and_what_it_cost() {
        let e = Exchange {
            model: "chat@cheapest".into(),
            status: 200,
            delegate: Some("llama-local".into()),
            policy: Some("cheapest".into()),
            task_id: Some("t".into()),
            tokens: Some(42),
            cost_usd: Some(0.0),
            text: "x".repeat(60),
        };
        let t = render(&[e]);
        let row = t.lines().nth(1).unwrap();
        let cols: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(
            cols[..6],
            [
                "chat@cheapest",
                "200",
                "llama-local",
                "cheapest",
                "42",
                "0.000000"
            ]
        );
        assert!(row.ends_with('…'), "{row}");
    }
}
