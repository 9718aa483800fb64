//! Provenance: the union of the RFC record (§6.1) and the reference SDK's fields.

use super::payload::{ser_mode, PayloadMode};
use serde::{Deserialize, Serialize};

/// How a result was verified (reference SDK). RFC peers send only the `verified` bool; reading
/// normalises the two (see [`Provenance::normalize`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VerificationStatus {
    /// Not checked.
    #[default]
    Unverified,
    /// Checked by the producer itself.
    SelfVerified,
    /// Checked by another delegate.
    PeerVerified,
    /// Checked by a tool.
    ToolVerified,
    /// Checked by a human.
    HumanVerified,
}

impl VerificationStatus {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            VerificationStatus::Unverified => "unverified",
            VerificationStatus::SelfVerified => "self_verified",
            VerificationStatus::PeerVerified => "peer_verified",
            VerificationStatus::ToolVerified => "tool_verified",
            VerificationStatus::HumanVerified => "human_verified",
        }
    }
}

/// A reference to supporting evidence.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvidenceRef {
    /// Where the evidence comes from.
    pub source: String,
    /// What kind of evidence.
    pub kind: String,
    /// Link to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uri: Option<String>,
    /// Short summary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    /// A vote's decision (`passed`, `failed`): the gateway's peer verification. Extra fields
    /// the SDKs ignore.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<String>,
    /// A vote's weight (its verifier's quality).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<f64>,
    /// The confidence the verifier reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confidence: Option<f64>,
}

/// One hop in a delegation lineage (newest first). The gateway's own hop adds `policy`,
/// `attempts` and `note`, which the SDKs ignore.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LineageEntry {
    /// Who acted at this hop.
    pub delegate_id: String,
    /// Its version.
    pub model_version: String,
    /// What it did (`route` for the gateway).
    pub step: String,
    /// When.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<String>,
    /// Verification at this hop.
    #[serde(default)]
    pub verification_status: VerificationStatus,
    /// Gateway hop: the policy that chose the delegate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
    /// Gateway hop: the delegate it routed to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub routed_to: Option<String>,
    /// Gateway hop: how many upstream attempts it took.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempts: Option<u32>,
    /// Gateway hop: free-form note (e.g. payload-mode fallback, context moved).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// A provenance record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Provenance {
    /// Delegate that produced the result.
    pub produced_by: String,
    /// Its model version.
    pub model_version: String,
    /// Mode the exchange used (the reference SDK defaults it to `semantic_frame`).
    #[serde(default = "default_mode", serialize_with = "ser_mode")]
    pub payload_mode_used: PayloadMode,
    /// Self-reported confidence 0..1.
    #[serde(default)]
    pub confidence: Option<f64>,
    /// RFC bool, kept in step with `verification_status`.
    #[serde(default)]
    pub verified: bool,
    /// Session in which it was produced.
    #[serde(default)]
    pub session_id: Option<String>,
    /// RFC 3339 time of production.
    #[serde(default)]
    pub timestamp: Option<String>,
    /// Tokens used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_used: Option<u64>,
    /// Cost in USD as the delegate reports it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    /// Contract id the result answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contract_id: Option<String>,
    /// Whether the contract was met.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contract_satisfied: Option<bool>,
    /// Contract violation codes.
    #[serde(default)]
    pub contract_violations: Vec<String>,
    /// Granular verification status.
    #[serde(default)]
    pub verification_status: VerificationStatus,
    /// Supporting evidence.
    #[serde(default)]
    pub evidence: Vec<EvidenceRef>,
    /// Delegation lineage, newest hop first.
    #[serde(default)]
    pub lineage: Vec<LineageEntry>,
}

fn default_mode() -> PayloadMode {
    PayloadMode::SemanticFrame
}

impl Provenance {
    /// A minimal record for `produced_by` at `model_version`.
    pub fn new(
        produced_by: impl Into<String>,
        model_version: impl Into<String>,
        mode: PayloadMode,
    ) -> Self {
        Provenance {
            produced_by: produced_by.into(),
            model_version: model_version.into(),
            payload_mode_used: mode,
            confidence: None,
            verified: false,
            session_id: None,
            timestamp: Some(super::now_rfc3339()),
            tokens_used: None,
            cost_usd: None,
            contract_id: None,
            contract_satisfied: None,
            contract_violations: Vec::new(),
            verification_status: VerificationStatus::Unverified,
            evidence: Vec::new(),
            lineage: Vec::new(),
        }
    }

    /// Makes `verified` and `verification_status` agree, as the reference SDK does:
    /// an RFC `verified: true` without a status becomes `self_verified`.
    pub fn normalize(&mut self) {
        if self.verification_status == VerificationStatus::Unverified && self.verified {
            self.verification_status = VerificationStatus::SelfVerified;
        }
        self.verified = self.verification_status != VerificationStatus::Unverified;
    }

    /// The record normalised; envelope readers apply it so an RFC `verified: true` is written
    /// back with a matching `verification_status` (the Rust reference does not normalise).
    pub(super) fn normalized(mut self) -> Self {
        self.normalize();
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verification_names_match_serde() {
        for v in [
            VerificationStatus::Unverified,
            VerificationStatus::SelfVerified,
            VerificationStatus::PeerVerified,
            VerificationStatus::ToolVerified,
            VerificationStatus::HumanVerified,
        ] {
            assert_eq!(serde_json::to_value(v).unwrap(), v.as_str());
        }
    }

    #[test]
    fn rfc_record_reads_and_normalises() {
        let mut p: Provenance = serde_json::from_value(serde_json::json!({
            "produced_by": "ldp:delegate:qwen3-8b", "model_version": "qwen3-8b-2026.01",
            "payload_mode_used": "semantic_frame", "confidence": 0.84, "verified": true
        }))
        .unwrap();
        p.normalize();
        assert_eq!(p.verification_status, VerificationStatus::SelfVerified);
        assert_eq!(p.tokens_used, None);
        assert_eq!(p.cost_usd, None);
    }

    #[test]
    fn reference_record_round_trips() {
        let raw = serde_json::json!({
            "produced_by": "d", "model_version": "v", "payload_mode_used": "text",
            "confidence": 0.9, "verified": true, "session_id": "s", "timestamp": "t",
            "tokens_used": 10, "cost_usd": 0.001, "contract_id": "c", "contract_satisfied": true,
            "contract_violations": [], "verification_status": "peer_verified",
            "evidence": [{"source": "pytest", "kind": "tests"}],
            "lineage": [{"delegate_id": "x", "model_version": "1", "step": "route",
                         "verification_status": "unverified", "policy": "balanced", "attempts": 1}]
        });
        let p: Provenance = serde_json::from_value(raw.clone()).unwrap();
        assert_eq!(serde_json::to_value(&p).unwrap(), raw);
    }
}
