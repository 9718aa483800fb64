//! Identity cards and capabilities, read from either dialect, never inventing hints.
//!
//! RFC capability: `{name, quality_hint, latency_hint_ms_p50, cost_hint: "low"|"medium"|"high"}`.
//! Reference capability: `{name, quality: {quality_score, latency_p50_ms, latency_p99_ms,
//! cost_per_call_usd, max_tokens, supports_streaming, claim_type}}`. Both read into
//! [`CapabilityHints`], where an absent hint stays `None`. Written cards carry both forms, so
//! every parser finds its own fields (unknown fields are ignored by all of them).

use super::payload::{lenient_modes, PayloadMode};
use super::trust::TrustDomain;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::collections::BTreeMap;

/// Cost tier of the RFC (`cost_hint`, `cost_profile`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum CostTier {
    /// Cheap.
    Low,
    /// Middling.
    Medium,
    /// Expensive.
    High,
}

impl CostTier {
    /// Parses `low`/`medium`/`high` in any case; `None` for anything else.
    pub fn parse(s: &str) -> Option<CostTier> {
        match s.trim().to_ascii_lowercase().as_str() {
            "low" => Some(CostTier::Low),
            "medium" | "med" => Some(CostTier::Medium),
            "high" => Some(CostTier::High),
            _ => None,
        }
    }

    /// The wire value.
    pub fn as_str(self) -> &'static str {
        match self {
            CostTier::Low => "low",
            CostTier::Medium => "medium",
            CostTier::High => "high",
        }
    }
}

/// How a quality claim was established (reference SDK).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ClaimType {
    /// Reported by the delegate itself.
    #[default]
    SelfClaimed,
    /// Attested by a third party.
    IssuerAttested,
    /// Measured at run time.
    RuntimeObserved,
    /// Measured by an external benchmark.
    ExternallyBenchmarked,
}

/// A capability's quality, cost and latency hints. `None` means the card did not say.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CapabilityHints {
    /// Quality 0..1.
    pub quality: Option<f64>,
    /// Median latency, ms.
    pub latency_p50_ms: Option<u64>,
    /// p99 latency, ms.
    pub latency_p99_ms: Option<u64>,
    /// Price per call, USD.
    pub cost_per_call_usd: Option<f64>,
    /// Cost tier.
    pub cost_tier: Option<CostTier>,
    /// Token ceiling per call.
    pub max_tokens: Option<u64>,
    /// Whether the capability streams.
    pub supports_streaming: Option<bool>,
    /// How the claim was established.
    pub claim_type: Option<ClaimType>,
}

/// One skill a delegate offers.
#[derive(Debug, Clone, PartialEq)]
pub struct Capability {
    /// Skill name.
    pub name: String,
    /// Description.
    pub description: Option<String>,
    /// JSON Schema of the input.
    pub input_schema: Option<serde_json::Value>,
    /// JSON Schema of the output.
    pub output_schema: Option<serde_json::Value>,
    /// Domains it applies to.
    pub domains: Vec<String>,
    /// Hints, absent where the card is silent.
    pub hints: CapabilityHints,
}

impl Capability {
    /// A capability with no hints.
    pub fn named(name: impl Into<String>) -> Self {
        Capability {
            name: name.into(),
            description: None,
            input_schema: None,
            output_schema: None,
            domains: Vec::new(),
            hints: CapabilityHints::default(),
        }
    }
}

fn non_negative_u64(v: Option<f64>) -> Option<u64> {
    v.filter(|x| x.is_finite() && *x >= 0.0)
        .map(|x| x.round() as u64)
}

impl<'de> Deserialize<'de> for Capability {
    fn deserialize<D: Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        #[derive(Deserialize, Default)]
        struct RawQuality {
            #[serde(default)]
            quality_score: Option<f64>,
            #[serde(default)]
            latency_p50_ms: Option<f64>,
            #[serde(default)]
            latency_p99_ms: Option<f64>,
            #[serde(default)]
            cost_per_call_usd: Option<f64>,
            #[serde(default)]
            max_tokens: Option<f64>,
            #[serde(default)]
            supports_streaming: Option<bool>,
            #[serde(default)]
            claim_type: Option<ClaimType>,
        }
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum QualityField {
            Score(f64),
            Metrics(RawQuality),
        }
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum CostHint {
            Usd(f64),
            Tier(String),
        }
        #[derive(Deserialize)]
        struct Raw {
            name: String,
            #[serde(default)]
            description: Option<String>,
            #[serde(default)]
            input_schema: Option<serde_json::Value>,
            #[serde(default)]
            output_schema: Option<serde_json::Value>,
            #[serde(default)]
            domains: Option<Vec<String>>,
            #[serde(default)]
            quality: Option<QualityField>,
            #[serde(default)]
            quality_hint: Option<f64>,
            #[serde(default)]
            latency_hint_ms_p50: Option<f64>,
            #[serde(default)]
            latency_hint_ms_p99: Option<f64>,
            #[serde(default)]
            cost_hint: Option<CostHint>,
        }
        let raw = Raw::deserialize(de)?;
        let q = match raw.quality {
            Some(QualityField::Metrics(m)) => m,
            Some(QualityField::Score(s)) => RawQuality {
                quality_score: Some(s),
                ..RawQuality::default()
            },
            None => RawQuality::default(),
        };
        let (hint_usd, hint_tier) = match raw.cost_hint {
            Some(CostHint::Usd(u)) => (Some(u), None),
            Some(CostHint::Tier(t)) => (None, CostTier::parse(&t)),
            None => (None, None),
        };
        // The reference's `quality` object is the richer claim; RFC hints fill what it omits.
        let hints = CapabilityHints {
            quality: q.quality_score.or(raw.quality_hint),
            latency_p50_ms: non_negative_u64(q.latency_p50_ms.or(raw.latency_hint_ms_p50)),
            latency_p99_ms: non_negative_u64(q.latency_p99_ms.or(raw.latency_hint_ms_p99)),
            cost_per_call_usd: q.cost_per_call_usd.or(hint_usd),
            cost_tier: hint_tier,
            max_tokens: non_negative_u64(q.max_tokens),
            supports_streaming: q.supports_streaming,
            claim_type: q.claim_type,
        };
        Ok(Capability {
            name: raw.name,
            description: raw.description,
            input_schema: raw.input_schema,
            output_schema: raw.output_schema,
            domains: raw.domains.unwrap_or_default(),
            hints,
        })
    }
}

impl Serialize for Capability {
    fn serialize<S: Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Quality {
            quality_score: Option<f64>,
            latency_p50_ms: Option<u64>,
            latency_p99_ms: Option<u64>,
            cost_per_call_usd: Option<f64>,
            max_tokens: Option<u64>,
            // The Rust reference requires this key.
            supports_streaming: bool,
            #[serde(skip_serializing_if = "Option::is_none")]
            claim_type: Option<ClaimType>,
        }
        #[derive(Serialize)]
        struct Out<'a> {
            name: &'a str,
            description: &'a Option<String>,
            #[serde(skip_serializing_if = "Option::is_none")]
            input_schema: &'a Option<serde_json::Value>,
            #[serde(skip_serializing_if = "Option::is_none")]
            output_schema: &'a Option<serde_json::Value>,
            domains: &'a [String],
            quality: Quality,
            #[serde(skip_serializing_if = "Option::is_none")]
            quality_hint: Option<f64>,
            #[serde(skip_serializing_if = "Option::is_none")]
            latency_hint_ms_p50: Option<u64>,
            #[serde(skip_serializing_if = "Option::is_none")]
            cost_hint: Option<&'static str>,
        }
        let h = &self.hints;
        Out {
            name: &self.name,
            description: &self.description,
            input_schema: &self.input_schema,
            output_schema: &self.output_schema,
            domains: &self.domains,
            quality: Quality {
                quality_score: h.quality,
                latency_p50_ms: h.latency_p50_ms,
                latency_p99_ms: h.latency_p99_ms,
                cost_per_call_usd: h.cost_per_call_usd,
                max_tokens: h.max_tokens,
                supports_streaming: h.supports_streaming.unwrap_or(false),
                claim_type: h.claim_type,
            },
            quality_hint: h.quality,
            latency_hint_ms_p50: h.latency_p50_ms,
            cost_hint: h.cost_tier.map(CostTier::as_str),
        }
        .serialize(ser)
    }
}

/// Latency from a card-level `latency_profile` such as `p50:2000ms` or `p50:2s,p99:8s`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LatencyProfile {
    /// Median, ms.
    pub p50_ms: Option<u64>,
    /// p99, ms.
    pub p99_ms: Option<u64>,
}

impl LatencyProfile {
    /// Parses the profile string; unknown parts are ignored, so garbage yields no hints.
    pub fn parse(s: &str) -> LatencyProfile {
        let mut out = LatencyProfile::default();
        for part in s.split([',', ';', ' ']).filter(|p| !p.is_empty()) {
            let Some((key, value)) = part.split_once([':', '=']) else {
                continue;
            };
            let value = value.trim();
            let ms = if let Some(n) = value.strip_suffix("ms") {
                n.trim().parse::<f64>().ok()
            } else if let Some(n) = value.strip_suffix('s') {
                n.trim().parse::<f64>().ok().map(|s| s * 1000.0)
            } else {
                value.parse::<f64>().ok()
            };
            let ms = non_negative_u64(ms);
            match key.trim().to_ascii_lowercase().as_str() {
                "p50" => out.p50_ms = ms,
                "p99" => out.p99_ms = ms,
                _ => {}
            }
        }
        out
    }
}

/// A delegate's identity card (RFC §2.1, reference `LdpIdentityCard`).
#[derive(Debug, Clone, PartialEq)]
pub struct IdentityCard {
    /// `ldp:delegate:<name>`.
    pub delegate_id: String,
    /// Human-readable name.
    pub name: String,
    /// Purpose.
    pub description: Option<String>,
    /// Model family.
    pub model_family: String,
    /// Model version.
    pub model_version: String,
    /// SHA-256 of the weights.
    pub weights_fingerprint: Option<String>,
    /// The delegate's trust domain.
    pub trust_domain: TrustDomain,
    /// Context window in tokens; absent if the card did not say (or said 0, which is how an
    /// unknown window is written: every SDK requires the key).
    pub context_window: Option<u64>,
    /// Reasoning profile.
    pub reasoning_profile: Option<String>,
    /// Card-level cost tier string (`low`/`medium`/`high`).
    pub cost_profile: Option<String>,
    /// Card-level latency string (`p50:2000ms`).
    pub latency_profile: Option<String>,
    /// Jurisdiction (`eu-west`, …).
    pub jurisdiction: Option<String>,
    /// Skills.
    pub capabilities: Vec<Capability>,
    /// Supported modes, preferred first. Unknown modes are skipped on read.
    pub supported_payload_modes: Vec<PayloadMode>,
    /// Informational URL. The gateway never connects to it.
    pub endpoint: Option<String>,
    /// Extra string metadata.
    pub metadata: BTreeMap<String, String>,
}

impl IdentityCard {
    /// The capability for `skill`.
    pub fn capability(&self, skill: &str) -> Option<&Capability> {
        self.capabilities.iter().find(|c| c.name == skill)
    }

    /// The card-level cost tier, if it parses.
    pub fn cost_tier(&self) -> Option<CostTier> {
        self.cost_profile.as_deref().and_then(CostTier::parse)
    }

    /// The card-level latency profile.
    pub fn latency(&self) -> LatencyProfile {
        self.latency_profile
            .as_deref()
            .map(LatencyProfile::parse)
            .unwrap_or_default()
    }

    /// Hints for `skill`, with card-level `cost_profile` and `latency_profile` filling what
    /// the capability omits. `None` if the skill is not offered.
    pub fn effective_hints(&self, skill: &str) -> Option<CapabilityHints> {
        let cap = self.capability(skill)?;
        let mut h = cap.hints.clone();
        let profile = self.latency();
        h.latency_p50_ms = h.latency_p50_ms.or(profile.p50_ms);
        h.latency_p99_ms = h.latency_p99_ms.or(profile.p99_ms);
        if h.cost_per_call_usd.is_none() {
            h.cost_tier = h.cost_tier.or(self.cost_tier());
        }
        Some(h)
    }

    /// The RFC §9.1 `ldp.*` labels.
    pub fn labels(&self) -> BTreeMap<String, String> {
        let mut l = BTreeMap::new();
        l.insert("ldp.delegate_id".into(), self.delegate_id.clone());
        l.insert("ldp.model_family".into(), self.model_family.clone());
        l.insert("ldp.model_version".into(), self.model_version.clone());
        l.insert("ldp.trust_domain".into(), self.trust_domain.name.clone());
        if let Some(cw) = self.context_window {
            l.insert("ldp.context_window".into(), cw.to_string());
        }
        let optional = [
            ("ldp.weights_fingerprint", &self.weights_fingerprint),
            ("ldp.reasoning_profile", &self.reasoning_profile),
            ("ldp.cost_profile", &self.cost_profile),
            ("ldp.latency_profile", &self.latency_profile),
            ("ldp.jurisdiction", &self.jurisdiction),
        ];
        for (k, v) in optional {
            if let Some(v) = v {
                l.insert(k.into(), v.clone());
            }
        }
        let modes: Vec<&str> = self
            .supported_payload_modes
            .iter()
            .map(|m| m.as_str())
            .collect();
        l.insert("ldp.payload_modes".into(), modes.join(","));
        l
    }
}

fn lenient_metadata<'de, D: Deserializer<'de>>(
    de: D,
) -> Result<BTreeMap<String, String>, D::Error> {
    let raw: Option<BTreeMap<String, serde_json::Value>> = Option::deserialize(de)?;
    Ok(raw
        .unwrap_or_default()
        .into_iter()
        .filter_map(|(k, v)| match v {
            serde_json::Value::String(s) => Some((k, s)),
            serde_json::Value::Number(n) => Some((k, n.to_string())),
            serde_json::Value::Bool(b) => Some((k, b.to_string())),
            _ => None,
        })
        .collect())
}

fn default_modes() -> Vec<PayloadMode> {
    vec![PayloadMode::Text]
}

impl<'de> Deserialize<'de> for IdentityCard {
    fn deserialize<D: Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Raw {
            delegate_id: String,
            name: String,
            #[serde(default)]
            description: Option<String>,
            model_family: String,
            model_version: String,
            #[serde(default)]
            weights_fingerprint: Option<String>,
            trust_domain: TrustDomain,
            #[serde(default)]
            context_window: Option<f64>,
            #[serde(default)]
            reasoning_profile: Option<String>,
            #[serde(default)]
            cost_profile: Option<String>,
            #[serde(default)]
            latency_profile: Option<String>,
            #[serde(default)]
            jurisdiction: Option<String>,
            #[serde(default)]
            capabilities: Vec<Capability>,
            #[serde(default = "default_modes", deserialize_with = "lenient_modes")]
            supported_payload_modes: Vec<PayloadMode>,
            #[serde(default)]
            endpoint: Option<String>,
            #[serde(default, deserialize_with = "lenient_metadata")]
            metadata: BTreeMap<String, String>,
        }
        let r = Raw::deserialize(de)?;
        let mut modes = r.supported_payload_modes;
        if modes.is_empty() {
            modes = default_modes();
        }
        Ok(IdentityCard {
            delegate_id: r.delegate_id,
            name: r.name,
            description: r.description,
            model_family: r.model_family,
            model_version: r.model_version,
            weights_fingerprint: r.weights_fingerprint,
            trust_domain: r.trust_domain,
            context_window: non_negative_u64(r.context_window).filter(|&n| n > 0),
            reasoning_profile: r.reasoning_profile,
            cost_profile: r.cost_profile,
            latency_profile: r.latency_profile,
            jurisdiction: r.jurisdiction,
            capabilities: r.capabilities,
            supported_payload_modes: modes,
            endpoint: r.endpoint.filter(|e| !e.is_empty()),
            metadata: r.metadata,
        })
    }
}

impl Serialize for IdentityCard {
    fn serialize<S: Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Out<'a> {
            delegate_id: &'a str,
            name: &'a str,
            description: &'a Option<String>,
            model_family: &'a str,
            model_version: &'a str,
            weights_fingerprint: &'a Option<String>,
            trust_domain: &'a TrustDomain,
            // Required by both SDKs (`u64` / `int`); 0 stands for unknown and reads back as such.
            context_window: u64,
            reasoning_profile: &'a Option<String>,
            cost_profile: &'a Option<String>,
            latency_profile: &'a Option<String>,
            jurisdiction: &'a Option<String>,
            capabilities: &'a [Capability],
            supported_payload_modes: Vec<PayloadMode>,
            endpoint: &'a str,
            metadata: &'a BTreeMap<String, String>,
        }
        Out {
            delegate_id: &self.delegate_id,
            name: &self.name,
            description: &self.description,
            model_family: &self.model_family,
            model_version: &self.model_version,
            weights_fingerprint: &self.weights_fingerprint,
            trust_domain: &self.trust_domain,
            context_window: self.context_window.unwrap_or(0),
            reasoning_profile: &self.reasoning_profile,
            cost_profile: &self.cost_profile,
            latency_profile: &self.latency_profile,
            jurisdiction: &self.jurisdiction,
            capabilities: &self.capabilities,
            supported_payload_modes: self
                .supported_payload_modes
                .iter()
                .copied()
                .filter(|m| m.is_emittable())
                .collect(),
            endpoint: self.endpoint.as_deref().unwrap_or(""),
            metadata: &self.metadata,
        }
        .serialize(ser)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc_capability_reads_hints() {
        let c: Capability = serde_json::from_value(serde_json::json!({
            "name": "reasoning", "quality_hint": 0.85, "latency_hint_ms_p50": 5000, "cost_hint": "medium"
        }))
        .unwrap();
        assert_eq!(c.hints.quality, Some(0.85));
        assert_eq!(c.hints.latency_p50_ms, Some(5000));
        assert_eq!(c.hints.cost_tier, Some(CostTier::Medium));
        assert_eq!(c.hints.cost_per_call_usd, None);
    }

    #[test]
    fn reference_capability_reads_quality_object() {
        let c: Capability = serde_json::from_value(serde_json::json!({
            "name": "code-review", "description": null,
            "quality": {"quality_score": 0.9, "latency_p50_ms": 1200, "latency_p99_ms": 4000,
                        "cost_per_call_usd": 0.01, "supports_streaming": false,
                        "claim_type": "issuer_attested"},
            "domains": ["rust"]
        }))
        .unwrap();
        assert_eq!(c.hints.quality, Some(0.9));
        assert_eq!(c.hints.latency_p99_ms, Some(4000));
        assert_eq!(c.hints.cost_per_call_usd, Some(0.01));
        assert_eq!(c.hints.claim_type, Some(ClaimType::IssuerAttested));
        assert_eq!(c.domains, vec!["rust".to_string()]);
    }

    #[test]
    fn absent_hints_stay_absent() {
        let c: Capability =
            serde_json::from_value(serde_json::json!({"name": "echo", "quality": null})).unwrap();
        assert_eq!(c.hints, CapabilityHints::default());
        let c: Capability = serde_json::from_value(
            serde_json::json!({"name": "echo", "quality": {"supports_streaming": true}}),
        )
        .unwrap();
        assert_eq!(c.hints.quality, None);
        assert_eq!(c.hints.cost_per_call_usd, None);
        assert_eq!(c.hints.supports_streaming, Some(true));
    }

    #[test]
    fn latency_profile_forms() {
        assert_eq!(LatencyProfile::parse("p50:2000ms").p50_ms, Some(2000));
        let p = LatencyProfile::parse("p50:1.5s, p99:8s");
        assert_eq!((p.p50_ms, p.p99_ms), (Some(1500), Some(8000)));
        assert_eq!(LatencyProfile::parse("fast"), LatencyProfile::default());
    }

    #[test]
    fn card_level_profiles_fill_capability_gaps() {
        let card: IdentityCard = serde_json::from_value(serde_json::json!({
            "delegate_id": "ldp:delegate:a", "name": "A", "model_family": "f", "model_version": "1",
            "trust_domain": "acme", "cost_profile": "low", "latency_profile": "p50:300ms",
            "capabilities": [{"name": "s"}], "supported_payload_modes": ["semantic_frame", "text", "future_mode"]
        }))
        .unwrap();
        let h = card.effective_hints("s").unwrap();
        assert_eq!(h.cost_tier, Some(CostTier::Low));
        assert_eq!(h.latency_p50_ms, Some(300));
        assert_eq!(h.quality, None);
        assert_eq!(card.context_window, None);
        assert_eq!(
            card.supported_payload_modes,
            vec![PayloadMode::SemanticFrame, PayloadMode::Text]
        );
        assert_eq!(card.labels()["ldp.payload_modes"], "semantic_frame,text");
        assert!(card.effective_hints("other").is_none());
    }

    #[test]
    fn written_card_carries_both_dialects() {
        let mut cap = Capability::named("s");
        cap.hints.quality = Some(0.7);
        cap.hints.cost_tier = Some(CostTier::High);
        let card = IdentityCard {
            delegate_id: "ldp:delegate:a".into(),
            name: "A".into(),
            description: None,
            model_family: "f".into(),
            model_version: "1".into(),
            weights_fingerprint: None,
            trust_domain: TrustDomain::named("d"),
            context_window: Some(8000),
            reasoning_profile: None,
            cost_profile: None,
            latency_profile: None,
            jurisdiction: None,
            capabilities: vec![cap],
            supported_payload_modes: vec![PayloadMode::LatentCapsules, PayloadMode::Text],
            endpoint: None,
            metadata: BTreeMap::new(),
        };
        let v = serde_json::to_value(&card).unwrap();
        assert_eq!(v["capabilities"][0]["quality_hint"], 0.7);
        assert_eq!(v["capabilities"][0]["quality"]["quality_score"], 0.7);
        assert_eq!(v["capabilities"][0]["cost_hint"], "high");
        assert_eq!(v["supported_payload_modes"], serde_json::json!(["text"]));
        let back: IdentityCard = serde_json::from_value(v).unwrap();
        let h = &back.capabilities[0].hints;
        assert_eq!(
            (h.quality, h.cost_tier, h.claim_type),
            (Some(0.7), Some(CostTier::High), None)
        );
        // The Rust reference requires `supports_streaming`; unknown is written as `false`.
        assert_eq!(h.supports_streaming, Some(false));
    }

    #[test]
    fn unknown_context_window_is_written_as_zero_and_read_as_unknown() {
        let raw = serde_json::json!({
            "delegate_id": "ldp:delegate:a", "name": "A", "model_family": "f", "model_version": "1",
            "trust_domain": "d"
        });
        let card: IdentityCard = serde_json::from_value(raw).unwrap();
        assert_eq!(card.context_window, None);
        let v = serde_json::to_value(&card).unwrap();
        assert_eq!(v["context_window"], 0);
        let back: IdentityCard = serde_json::from_value(v).unwrap();
        assert_eq!(back.context_window, None);
    }
}
