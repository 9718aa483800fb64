//! Identity cards for simulated delegates, and starting one.

use ldp_gateway::ldp::IdentityCard;
use ldp_gateway::sim::{SimHandle, SimOptions};
use serde_json::{json, Value};

/// A card built field by field. Defaults: `delegate_id` `ldp:delegate:{id}`, model `sim`
/// `{id}-1`, trust domain `default`, text only, an 8,192-token context, an empty endpoint
/// (the simulator fills in its URL), no skills.
#[derive(Clone, Debug)]
pub struct Card(Value);

impl Card {
    pub fn new(id: &str) -> Card {
        Card(json!({
            "delegate_id": format!("ldp:delegate:{id}"), "name": id, "model_family": "sim",
            "model_version": format!("{id}-1"), "trust_domain": "default", "context_window": 8192,
            "capabilities": [], "supported_payload_modes": ["text"], "endpoint": ""
        }))
    }

    /// A skill at `quality`, 0.002 USD a call, 50 ms at p50, no streaming.
    pub fn skill(self, name: &str, quality: f64) -> Card {
        self.priced(name, quality, 0.002, 50)
    }

    /// A skill with its price (USD a call) and p50 latency.
    pub fn priced(self, name: &str, quality: f64, cost: f64, latency_ms: u64) -> Card {
        self.capability(json!({"name": name, "quality": {"quality_score": quality,
            "cost_per_call_usd": cost, "latency_p50_ms": latency_ms, "supports_streaming": false}}))
    }

    /// Any capability object, as written on the wire.
    pub fn capability(mut self, cap: Value) -> Card {
        if let Some(caps) = self.0["capabilities"].as_array_mut() {
            caps.push(cap);
        }
        self
    }

    pub fn domain(self, domain: &str) -> Card {
        self.set("trust_domain", json!(domain))
    }

    pub fn modes(self, modes: &[&str]) -> Card {
        self.set("supported_payload_modes", json!(modes))
    }

    /// Any top-level field.
    pub fn set(mut self, key: &str, value: Value) -> Card {
        self.0[key] = value;
        self
    }

    pub fn build(self) -> IdentityCard {
        serde_json::from_value(self.0).expect("test card")
    }
}

/// A card with `skills` at their quality in `domain`, speaking `modes` (see [`Card`]).
pub fn card(id: &str, domain: &str, skills: &[(&str, f64)], modes: &[&str]) -> IdentityCard {
    skills
        .iter()
        .fold(Card::new(id).domain(domain).modes(modes), |c, (s, q)| {
            c.skill(s, *q)
        })
        .build()
}

/// Starts a simulated delegate with `opts` on a loopback port of its own.
pub async fn sim(opts: SimOptions) -> SimHandle {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind sim");
    ldp_gateway::sim::spawn(l, opts).await.expect("spawn sim")
}

/// Reads an identity card (either dialect) from a JSON file, as `ldp-gateway delegate` does.
pub fn load_card(path: &std::path::Path) -> IdentityCard {
    let raw = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_slice(&raw)
        .unwrap_or_else(|e| panic!("{}: not an identity card: {e}", path.display()))
}
