//! `[identity]`: the gateway's own identity card.

use super::checks::Checks;
use crate::ldp::TrustDomain;
use serde::{Deserialize, Serialize};

/// `[identity]`: the gateway's own card.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct IdentityConfig {
    /// `ldp:delegate:…` id.
    pub delegate_id: String,
    /// Display name.
    pub name: String,
    /// The gateway's trust domain.
    pub trust_domain: TrustDomain,
    /// Model family shown on the card.
    pub model_family: String,
    /// Version shown on the card (default: the crate version).
    pub model_version: Option<String>,
    /// Context window shown on the card (default: the largest among healthy delegates).
    pub context_window: Option<u64>,
    /// Public URL written into the card's `endpoint`.
    pub public_url: Option<String>,
}

impl Default for IdentityConfig {
    fn default() -> Self {
        IdentityConfig {
            delegate_id: "ldp:delegate:gateway".into(),
            name: "LDP Gateway".into(),
            trust_domain: TrustDomain::default(),
            model_family: "ldp-gateway".into(),
            model_version: None,
            context_window: None,
            public_url: None,
        }
    }
}

impl IdentityConfig {
    pub(super) fn check(&self, c: &mut Checks) {
        if self.delegate_id.trim().is_empty() {
            c.push("identity.delegate_id", "must not be empty");
        }
    }
}
