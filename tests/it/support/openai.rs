//! OpenAI-compatible delegates and clients: the simulated OpenAI server on a loopback port,
//! the `[[delegates]]` entry (`kind = "openai"`) with its declared card, a chat stream read as
//! its chunks, and the interpreter that has the real `openai` SDK.

use super::process::{output_within, py_code, python, Sdk};
use super::Resp;
use ldp_gateway::config::{DeclaredCard, DelegateConfig, DelegateKind};
use ldp_gateway::sim::openai::{spawn, OpenAiHandle, OpenAiOptions};
use serde_json::Value;
use std::path::PathBuf;
use std::time::Duration;

/// What the SDK tests skip without a venv holding `openai`.
const WHAT: &str = "openai SDK interop";
/// `import openai` on a cold, loaded machine.
const IMPORT_WITHIN: Duration = Duration::from_secs(120);

/// A simulated OpenAI server with `opts` on a loopback port of its own.
pub async fn start(opts: OpenAiOptions) -> OpenAiHandle {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind openai sim");
    spawn(listener, opts).await.expect("spawn openai sim")
}

/// A declared card offering `skills` at `quality`: free, 100 ms at p50, the default trust
/// domain, no context window (fill in the rest).
pub fn declared(skills: &[&str], quality: f64) -> DeclaredCard {
    DeclaredCard {
        skills: skills.iter().map(|s| (*s).to_owned()).collect(),
        quality: Some(quality),
        price_per_mtok_input: None,
        price_per_mtok_output: None,
        price_per_mtok_cache_read: None,
        price_per_mtok_cache_write: None,
        latency_p50_ms: Some(100),
        jurisdiction: None,
        trust_domain: None,
        context_window: None,
        model_family: None,
    }
}

/// The entry of an OpenAI-backed delegate `name` at `url` serving `model`, declared as `card`.
pub fn entry(name: &str, url: &str, model: &str, card: DeclaredCard) -> DelegateConfig {
    DelegateConfig {
        name: Some(name.to_owned()),
        kind: DelegateKind::OpenAi,
        model: Some(model.to_owned()),
        card: Some(card),
        ..DelegateConfig::new(url)
    }
}

/// The `data:` payloads of an SSE body, in order.
pub fn sse_data(resp: &Resp) -> Vec<String> {
    resp.text()
        .replace("\r\n", "\n")
        .split("\n\n")
        .filter_map(|event| {
            event
                .lines()
                .find_map(|l| l.strip_prefix("data: ").or_else(|| l.strip_prefix("data:")))
                .map(str::to_owned)
        })
        .collect()
}

/// The JSON events of a chat stream and whether it ended with `[DONE]`.
pub fn chunks(resp: &Resp) -> (Vec<Value>, bool) {
    let data = sse_data(resp);
    let done = data.last().is_some_and(|d| d == "[DONE]");
    let chunks = data
        .iter()
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap_or_else(|e| panic!("chunk {d}: {e}")))
        .collect();
    (chunks, done)
}

/// The content deltas of `chunks`, joined.
pub fn streamed_text(chunks: &[Value]) -> String {
    chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect()
}

/// The wheel venv's interpreter if it has `openai`. Without it: `None` after a skip note, or
/// a failure when `LDP_INTEROP_REQUIRED=1` (CI).
pub async fn openai_python() -> Option<PathBuf> {
    let py = python(Sdk::Wheel, WHAT)?;
    let out = output_within(py_code(&py, "import openai"), IMPORT_WITHIN).await;
    if out.status.success() {
        return Some(py);
    }
    let required = std::env::var("LDP_INTEROP_REQUIRED").is_ok_and(|v| v == "1");
    assert!(
        !required,
        "{} has no `openai` but LDP_INTEROP_REQUIRED=1: rebuild with `bash .ci/run venvs`",
        py.display()
    );
    eprintln!(
        "skipping {WHAT}: {} has no `openai`; `eval \"$(bash .ci/run venvs)\"` adds it",
        py.display()
    );
    None
}
