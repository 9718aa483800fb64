//! Anthropic-API delegates and clients: the simulated Anthropic server on a loopback port, the
//! `[[delegates]]` entry (`kind = "anthropic"`) with its declared card, and a stream of named
//! events read as its events.

use super::Resp;
use ldp_gateway::config::{DeclaredCard, DelegateConfig, DelegateKind};
use ldp_gateway::sim::anthropic::{spawn, AnthropicHandle, AnthropicOptions};
use serde_json::Value;

/// A simulated Anthropic server with `opts` on a loopback port of its own.
pub async fn start(opts: AnthropicOptions) -> AnthropicHandle {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind anthropic sim");
    spawn(listener, opts).await.expect("spawn anthropic sim")
}

/// The entry of an Anthropic-API delegate `name` at `url` (the SDK's `base_url`) serving
/// `model`, declared as `card`.
pub fn entry(name: &str, url: &str, model: &str, card: DeclaredCard) -> DelegateConfig {
    DelegateConfig {
        name: Some(name.to_owned()),
        kind: DelegateKind::Anthropic,
        model: Some(model.to_owned()),
        card: Some(card),
        ..DelegateConfig::new(url)
    }
}

/// The named events of an SSE body, in order: (event, data).
pub fn events(r: &Resp) -> Vec<(String, Value)> {
    r.text()
        .replace("\r\n", "\n")
        .split("\n\n")
        .filter(|e| !e.trim().is_empty())
        .map(|e| {
            let field = |p: &str| e.lines().find_map(|l| l.strip_prefix(p));
            let data = field("data: ").unwrap_or("null");
            let data = serde_json::from_str(data).unwrap_or_else(|err| panic!("{err}: {e}"));
            (field("event: ").unwrap_or("").to_owned(), data)
        })
        .collect()
}
