//! Anthropic-API delegates: the simulated Anthropic server on a loopback port and the
//! `[[delegates]]` entry (`kind = "anthropic"`) with its declared card.

use ldp_gateway::config::{DeclaredCard, DelegateConfig, DelegateKind};
use ldp_gateway::sim::anthropic::{spawn, AnthropicHandle, AnthropicOptions};

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
