//! The gateway's identity card: the skills healthy delegates offer, each with the best hints.

use super::{Proxy, GATEWAY_MODES};
use crate::ldp::{Capability, IdentityCard};
use std::collections::BTreeMap;

fn max_opt<T: PartialOrd>(a: Option<T>, b: Option<T>) -> Option<T> {
    match (a, b) {
        (Some(a), Some(b)) => Some(if b > a { b } else { a }),
        (a, b) => a.or(b),
    }
}

fn min_opt<T: PartialOrd>(a: Option<T>, b: Option<T>) -> Option<T> {
    match (a, b) {
        (Some(a), Some(b)) => Some(if b < a { b } else { a }),
        (a, b) => a.or(b),
    }
}

impl Proxy {
    /// The gateway's identity card: its skills are those healthy delegates offer, each with the
    /// best hint any of them declares.
    pub fn identity_card(&self, endpoint: Option<String>) -> IdentityCard {
        let id = &self.cfg.identity;
        let mut skills: BTreeMap<String, Capability> = BTreeMap::new();
        let mut context_window = None;
        for d in self.registry.snapshot().iter().filter(|d| d.is_healthy()) {
            let Some(card) = d.card() else { continue };
            context_window = context_window.max(card.context_window);
            for cap in &card.capabilities {
                let Some(h) = card.effective_hints(&cap.name) else {
                    continue;
                };
                let entry = skills.entry(cap.name.clone()).or_insert_with(|| {
                    let mut c = Capability::named(cap.name.clone());
                    c.description = cap.description.clone();
                    c
                });
                let e = &mut entry.hints;
                e.quality = max_opt(e.quality, h.quality);
                e.latency_p50_ms = min_opt(e.latency_p50_ms, h.latency_p50_ms);
                e.latency_p99_ms = min_opt(e.latency_p99_ms, h.latency_p99_ms);
                e.cost_per_call_usd = min_opt(e.cost_per_call_usd, h.cost_per_call_usd);
                e.cost_tier = min_opt(e.cost_tier, h.cost_tier);
                e.max_tokens = max_opt(e.max_tokens, h.max_tokens);
                e.supports_streaming = max_opt(e.supports_streaming, h.supports_streaming);
            }
        }
        IdentityCard {
            delegate_id: id.delegate_id.clone(),
            name: id.name.clone(),
            description: Some("LDP gateway: routes each task to a delegate by policy".into()),
            model_family: id.model_family.clone(),
            model_version: self.version.clone(),
            weights_fingerprint: None,
            trust_domain: id.trust_domain.clone(),
            // The Rust reference requires the key; 0 says no healthy delegate declares one.
            context_window: Some(id.context_window.or(context_window).unwrap_or(0)),
            reasoning_profile: None,
            cost_profile: None,
            latency_profile: None,
            jurisdiction: None,
            capabilities: skills.into_values().collect(),
            supported_payload_modes: GATEWAY_MODES.to_vec(),
            endpoint: id.public_url.clone().or(endpoint),
            metadata: BTreeMap::from([("ldp.gateway".to_owned(), "true".to_owned())]),
        }
    }
}
