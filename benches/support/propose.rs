//! The session the benches that speak LDP to a server open first (`hop`, `load`, `allocs`).

use ldp_client::Transport;
use ldp_gateway::ldp::{Body, Envelope, PayloadMode, SessionConfig};
use std::time::Duration;

/// A session proposed (text) to `base`, within `timeout`; its id.
pub async fn session(client: &Transport, base: &str, timeout: Duration) -> anyhow::Result<String> {
    let config = SessionConfig {
        preferred_payload_modes: Some(vec![PayloadMode::Text]),
        ..SessionConfig::default()
    };
    let env = Envelope::new(
        "",
        client.from_id(),
        "x",
        Body::SessionPropose { config },
        PayloadMode::Text,
    );
    match client.send(base, &env, timeout).await?.body {
        Body::SessionAccept { session_id, .. } => Ok(session_id),
        other => anyhow::bail!("no session from {base}: {other:?}"),
    }
}
