//! SESSION_PROPOSE configuration in all three spellings.
//!
//! RFC: `{preferred_payload_modes, ttl_secs, required_trust_domain}`. Python reference:
//! `{preferred_payload_modes, ttl_secs, trust_domain}` (the initiator's own domain). Rust
//! reference: a singular `payload_mode`. All are read; the gateway writes all of them upstream.

use super::payload::{lenient_modes_opt, no_emittable_mode, ser_modes_opt, PayloadMode};
use super::trust::TrustDomain;
use serde::{Deserialize, Deserializer, Serialize};

/// A session proposal's configuration.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SessionConfig {
    /// Modes in preference order (RFC and Python reference). RFC-only modes are not written:
    /// the Python delegate fails on a mode it does not know.
    #[serde(
        default,
        deserialize_with = "lenient_modes_opt",
        serialize_with = "ser_modes_opt",
        skip_serializing_if = "Option::is_none"
    )]
    pub preferred_payload_modes: Option<Vec<PayloadMode>>,
    /// A single requested mode (Rust reference); left out when RFC-only.
    #[serde(
        default,
        deserialize_with = "lenient_mode_opt",
        skip_serializing_if = "no_emittable_mode"
    )]
    pub payload_mode: Option<PayloadMode>,
    /// Idle timeout in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_secs: Option<u64>,
    /// RFC: the responder must be in this domain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub required_trust_domain: Option<String>,
    /// Reference: the initiator's own domain (a name, or a domain object whose name is used).
    #[serde(
        default,
        deserialize_with = "domain_name_opt",
        skip_serializing_if = "Option::is_none"
    )]
    pub trust_domain: Option<String>,
    /// Gateway extension: the routing policy to use for this session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
}

/// RFC §5.4 default preference list.
pub const DEFAULT_PREFERENCES: [PayloadMode; 2] = [PayloadMode::SemanticFrame, PayloadMode::Text];

/// RFC §5.4 default TTL.
pub const DEFAULT_TTL_SECS: u64 = 3600;

impl SessionConfig {
    /// The initiator's preference list: `preferred_payload_modes`, else `[payload_mode, text]`,
    /// else the RFC default `[semantic_frame, text]`.
    pub fn preferences(&self) -> Vec<PayloadMode> {
        if let Some(p) = self
            .preferred_payload_modes
            .as_ref()
            .filter(|p| !p.is_empty())
        {
            return p.clone();
        }
        match self.payload_mode {
            Some(PayloadMode::Text) => vec![PayloadMode::Text],
            Some(m) => vec![m, PayloadMode::Text],
            None => DEFAULT_PREFERENCES.to_vec(),
        }
    }
}

fn lenient_mode_opt<'de, D: Deserializer<'de>>(de: D) -> Result<Option<PayloadMode>, D::Error> {
    let raw: Option<serde_json::Value> = Option::deserialize(de)?;
    Ok(raw
        .as_ref()
        .and_then(|v| v.as_str())
        .and_then(PayloadMode::parse))
}

fn domain_name_opt<'de, D: Deserializer<'de>>(de: D) -> Result<Option<String>, D::Error> {
    let raw: Option<TrustDomain> = Option::deserialize(de)?;
    Ok(raw.map(|d| d.name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_all_three_spellings() {
        let rfc: SessionConfig = serde_json::from_value(serde_json::json!({
            "preferred_payload_modes": ["semantic_frame", "text"], "ttl_secs": 60,
            "required_trust_domain": "research.internal"
        }))
        .unwrap();
        assert_eq!(
            rfc.required_trust_domain.as_deref(),
            Some("research.internal")
        );
        assert_eq!(
            rfc.preferences(),
            vec![PayloadMode::SemanticFrame, PayloadMode::Text]
        );

        let py: SessionConfig = serde_json::from_value(serde_json::json!({
            "preferred_payload_modes": ["text"], "ttl_secs": 3600, "trust_domain": "default"
        }))
        .unwrap();
        assert_eq!(py.trust_domain.as_deref(), Some("default"));

        let rs: SessionConfig = serde_json::from_value(
            serde_json::json!({"payload_mode": "semantic_frame", "trust_domain": {"name": "x"}}),
        )
        .unwrap();
        assert_eq!(
            rs.preferences(),
            vec![PayloadMode::SemanticFrame, PayloadMode::Text]
        );
        assert_eq!(rs.trust_domain.as_deref(), Some("x"));

        let empty: SessionConfig = serde_json::from_value(serde_json::json!({})).unwrap();
        assert_eq!(empty.preferences(), DEFAULT_PREFERENCES.to_vec());
    }

    #[test]
    fn rfc_only_modes_are_not_written() {
        let c = SessionConfig {
            preferred_payload_modes: Some(vec![
                PayloadMode::LatentCapsules,
                PayloadMode::SemanticFrame,
                PayloadMode::Text,
            ]),
            payload_mode: Some(PayloadMode::CacheSlices),
            ..SessionConfig::default()
        };
        let v = serde_json::to_value(&c).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"preferred_payload_modes": ["semantic_frame", "text"]})
        );
        let c = SessionConfig {
            payload_mode: Some(PayloadMode::SemanticFrame),
            ..SessionConfig::default()
        };
        assert_eq!(
            serde_json::to_value(&c).unwrap(),
            serde_json::json!({"payload_mode": "semantic_frame"})
        );
    }
}
