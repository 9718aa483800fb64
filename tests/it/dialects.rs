//! Wire dialects: the gateway reads the RFC and every reference SDK, and what it writes parses
//! in all of them (the `ldp-protocol` 0.2.0 Rust types, its bundled Python SDK and the older
//! PyPI wheel).
//!
//! Fixtures: `tests/fixtures/reference_*.json` are copied from the reference crate's `examples/`;
//! `tests/fixtures/python/*/` are `model_dump(by_alias=True)` of the real pydantic models
//! (`tests/fixtures/python/generate.py` regenerates them); `rfc_identity_card.json` follows RFC §2.

use ldp_gateway::ldp::contract::ContractPolicy;
use ldp_gateway::ldp::error::GatewayCode;
use ldp_gateway::ldp::provenance::EvidenceRef;
use ldp_gateway::ldp::{
    Body, BudgetPolicy, Capability, CapabilityManifest, ClaimType, CostTier, DelegationContract,
    Envelope, ErrorCategory, ErrorSeverity, IdentityCard, LdpError, LineageEntry, MessageType,
    PayloadMode, Provenance, SessionConfig, TrustDomain, VerificationStatus,
};
use ldp_protocol::types::capability::{
    ClaimType as RfClaimType, LdpCapability as RfCapability, QualityMetrics as RfQuality,
};
use ldp_protocol::types::contract::{
    BudgetPolicy as RfBudget, DelegationContract as RfContract, FailurePolicy as RfFailurePolicy,
};
use ldp_protocol::types::error::{
    ErrorSeverity as RfSeverity, FailureCategory as RfCategory, LdpError as RfError,
};
use ldp_protocol::types::identity::LdpIdentityCard as RfCard;
use ldp_protocol::types::messages::{LdpEnvelope as RfEnvelope, LdpMessageBody as RfBody};
use ldp_protocol::types::payload::PayloadMode as RfMode;
use ldp_protocol::types::provenance::Provenance as RfProvenance;
use ldp_protocol::types::trust::TrustDomain as RfTrustDomain;
use ldp_protocol::types::verification::{
    EvidenceRef as RfEvidence, ProvenanceEntry as RfLineage, VerificationStatus as RfStatus,
};
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;

use PayloadMode::{CacheSlices, LatentCapsules, SemanticFrame, Text};

const GATEWAY: &str = "ldp:delegate:gateway";
const CLIENT: &str = "ldp:delegate:router-alpha";
const DELEGATE: &str = "ldp:delegate:qwen3-8b";
const SESSION: &str = "550e8400-e29b-41d4-a716-446655440000";
const TS: &str = "2026-03-09T10:00:00Z";
const SECRET: &str = "shared-secret";

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

fn fixture(path: &str) -> Vec<u8> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(path);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn fixture_json(path: &str) -> Value {
    serde_json::from_slice(&fixture(path)).unwrap()
}

/// Reads an envelope with our reader, failing with the JSON that did not parse.
fn read(v: &Value) -> Envelope {
    Envelope::from_slice(&serde_json::to_vec(v).unwrap())
        .unwrap_or_else(|e| panic!("our reader rejected {v:#}: {e}"))
}

/// A capability as our writer settles it: the Rust reference requires `supports_streaming`
/// inside `quality`, so an unknown value is written (and read back) as `false`. Every other
/// hint that was absent stays absent.
fn as_written(mut c: Capability) -> Capability {
    c.hints.supports_streaming = Some(c.hints.supports_streaming.unwrap_or(false));
    c
}

/// `to_vec` → `from_slice` must give back the same envelope (bar `as_written`).
fn round_trip(e: &Envelope) -> Envelope {
    let bytes = e.to_vec().unwrap();
    let back = Envelope::from_slice(&bytes).unwrap_or_else(|err| {
        panic!(
            "our reader rejected our own output {}: {err}",
            String::from_utf8_lossy(&bytes)
        )
    });
    let mut expected = e.clone();
    if let Body::CapabilityManifest { capabilities } = &mut expected.body {
        capabilities.capabilities = capabilities
            .capabilities
            .drain(..)
            .map(as_written)
            .collect();
    }
    assert_eq!(
        back,
        expected,
        "round trip of {}",
        e.body.message_type().as_str()
    );
    back
}

/// What we write, read by the reference Rust types.
fn as_reference(e: &Envelope) -> RfEnvelope {
    let bytes = e.to_vec().unwrap();
    serde_json::from_slice(&bytes).unwrap_or_else(|err| {
        panic!(
            "ldp-protocol rejected our {}: {err}",
            String::from_utf8_lossy(&bytes)
        )
    })
}

fn rf_mode(m: &RfMode) -> String {
    serde_json::to_value(m)
        .unwrap()
        .as_str()
        .unwrap()
        .to_owned()
}

fn rf_modes(ms: &[RfMode]) -> Vec<String> {
    ms.iter().map(rf_mode).collect()
}

fn our_modes(ms: &[PayloadMode]) -> Vec<String> {
    ms.iter().map(|m| m.as_str().to_owned()).collect()
}

fn to_value<T: serde::Serialize>(t: &T) -> Value {
    serde_json::to_value(t).unwrap()
}

/// Every place in `v` that no SDK-wheel peer can parse: the RFC-only payload modes as any
/// string value, and the newer-SDK-only `security` error category.
fn unemittable(v: &Value, path: &str, out: &mut Vec<String>) {
    match v {
        Value::String(s) if s == "latent_capsules" || s == "cache_slices" => {
            out.push(format!("{path} = {s}"))
        }
        Value::Object(o) => {
            for (k, child) in o {
                let p = format!("{path}.{k}");
                if k == "category" && child == "security" {
                    out.push(format!("{p} = security"));
                }
                unemittable(child, &p, out);
            }
        }
        Value::Array(a) => {
            for (i, child) in a.iter().enumerate() {
                unemittable(child, &format!("{path}[{i}]"), out);
            }
        }
        _ => {}
    }
}

fn assert_emittable<T: serde::Serialize>(t: &T) -> Value {
    let v = to_value(t);
    let mut bad = Vec::new();
    unemittable(&v, "$", &mut bad);
    assert!(
        bad.is_empty(),
        "emitted what the PyPI wheel rejects: {bad:?} in {v:#}"
    );
    v
}

/// The PyPI wheel's `LdpError` (seven categories, no `security`) and `PayloadMode` (the four
/// of `ldp_protocol`), as pydantic would validate them.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "snake_case")]
enum WheelCategory {
    Identity,
    Capability,
    Policy,
    Runtime,
    Quality,
    Session,
    Transport,
}

#[derive(Debug, Deserialize)]
#[expect(dead_code, reason = "fields are validated by deserialisation only")]
struct WheelError {
    code: String,
    category: WheelCategory,
    message: String,
    severity: RfSeverity,
    retryable: bool,
}

#[derive(Debug, Deserialize)]
#[expect(dead_code, reason = "fields are validated by deserialisation only")]
struct WheelProvenance {
    produced_by: String,
    model_version: String,
    payload_mode_used: RfMode,
    confidence: Option<f64>,
    verified: bool,
}

/// The fields of the wheel's flat `LdpMessageBody` whose validation can fail, plus the Python
/// delegate's `PayloadMode(m)` over `config.preferred_payload_modes`.
fn wheel_accepts(envelope: &Value) {
    let body = &envelope["body"];
    let _: RfMode = serde_json::from_value(envelope["payload_mode"].clone()).unwrap();
    if !body["supported_modes"].is_null() {
        let _: Vec<RfMode> = serde_json::from_value(body["supported_modes"].clone())
            .unwrap_or_else(|e| panic!("wheel rejects {}: {e}", body["supported_modes"]));
    }
    if !body["negotiated_mode"].is_null() {
        let _: RfMode = serde_json::from_value(body["negotiated_mode"].clone()).unwrap();
    }
    if body["error"].is_object() {
        let _: WheelError = serde_json::from_value(body["error"].clone())
            .unwrap_or_else(|e| panic!("wheel rejects body.error {}: {e}", body["error"]));
    }
    for p in [&body["provenance"], &envelope["provenance"]] {
        if !p.is_null() {
            let _: WheelProvenance = serde_json::from_value(p.clone())
                .unwrap_or_else(|e| panic!("wheel rejects provenance {p}: {e}"));
        }
    }
    if let Some(prefs) = body["config"].get("preferred_payload_modes") {
        let _: Vec<RfMode> = serde_json::from_value(prefs.clone())
            .unwrap_or_else(|e| panic!("Python delegate rejects {prefs}: {e}"));
    }
}

fn envelope_json(body: Value, extra: Value) -> Value {
    let mut e = json!({
        "message_id": "msg-001",
        "session_id": SESSION,
        "from": CLIENT,
        "to": DELEGATE,
        "body": body,
        "payload_mode": "semantic_frame",
        "timestamp": TS,
        "provenance": null
    });
    if let (Some(o), Value::Object(x)) = (e.as_object_mut(), extra) {
        o.extend(x);
    }
    e
}

fn message_types(es: &[Envelope]) -> BTreeSet<&'static str> {
    es.iter().map(|e| e.body.message_type().as_str()).collect()
}

fn all_types() -> BTreeSet<&'static str> {
    MessageType::ALL.iter().map(|t| t.as_str()).collect()
}

// ---------------------------------------------------------------------------------------------
// 1. Round trips of all twelve bodies, RFC form and reference form
// ---------------------------------------------------------------------------------------------

/// The twelve bodies as the RFC writes them (§2.2, §3.3, §6.1): `fixtures/rfc_bodies.json`.
fn rfc_bodies() -> Vec<Value> {
    serde_json::from_value(fixture_json("rfc_bodies.json")).unwrap()
}

fn check_rfc_body(body: &Body) {
    match body {
        Body::Hello {
            delegate_id,
            supported_modes,
        } => {
            assert_eq!(delegate_id, CLIENT);
            assert_eq!(supported_modes, &[SemanticFrame, Text]);
        }
        Body::CapabilityManifest { capabilities } => {
            let cap = &capabilities.capabilities[0];
            assert_eq!(cap.name, "reasoning");
            assert_eq!(cap.hints.quality, Some(0.85));
            assert_eq!(cap.hints.latency_p50_ms, Some(5000));
            assert_eq!(cap.hints.cost_tier, Some(CostTier::Medium));
            assert_eq!(cap.hints.cost_per_call_usd, None, "a tier is not a price");
            assert_eq!(capabilities.supported_modes, [SemanticFrame, Text]);
        }
        Body::SessionPropose { config } => {
            assert_eq!(
                config.required_trust_domain.as_deref(),
                Some("research.internal")
            );
            assert_eq!(
                config.trust_domain, None,
                "RFC names the responder's domain, not ours"
            );
            assert_eq!(config.ttl_secs, Some(3600));
            assert_eq!(config.preferences(), [SemanticFrame, Text]);
        }
        Body::SessionAccept {
            session_id,
            negotiated_mode,
            fallback_chain,
        } => {
            assert_eq!(session_id, SESSION);
            assert_eq!(*negotiated_mode, SemanticFrame);
            assert_eq!(fallback_chain, &[Text]);
        }
        Body::SessionReject { reason, error } => {
            assert_eq!(reason, "required trust domain not met");
            assert_eq!(error, &None);
        }
        Body::TaskSubmit {
            task_id,
            skill,
            input,
            contract,
        } => {
            assert_eq!(
                (task_id.as_str(), skill.as_str()),
                ("task-001", "reasoning")
            );
            assert_eq!(input.to_value().unwrap()["task_type"], "analysis");
            assert_eq!(contract, &None);
        }
        Body::TaskUpdate {
            task_id,
            progress,
            message,
        } => {
            assert_eq!(task_id, "task-001");
            assert_eq!(*progress, Some(0.5));
            assert_eq!(message.as_deref(), Some("halfway"));
        }
        Body::TaskResult {
            provenance, output, ..
        } => {
            assert_eq!(output.to_value().unwrap()["analysis"], "...");
            let p = provenance.as_ref().unwrap();
            assert_eq!(p.produced_by, DELEGATE);
            assert_eq!(p.confidence, Some(0.84));
            assert!(p.verified);
            // The RFC bool and the reference status agree once read (as the SDK normalises).
            assert_eq!(p.verification_status, VerificationStatus::SelfVerified);
            assert_eq!((p.tokens_used, p.cost_usd), (None, None), "absent, never 0");
            assert!(p.lineage.is_empty() && p.evidence.is_empty());
        }
        Body::TaskFailed { task_id, error } => {
            assert_eq!(task_id, "task-001");
            assert_eq!(error.message, "schema validation failed");
            assert_eq!(error.category, ErrorCategory::Runtime);
        }
        Body::TaskCancel { task_id } => assert_eq!(task_id, "task-001"),
        Body::Attestation { claim, evidence } => {
            assert_eq!(claim["weights_fingerprint"], "sha256:a1b2");
            assert_eq!(evidence["signature"], "c0ffee");
        }
        Body::SessionClose { reason } => assert_eq!(reason.as_deref(), Some("done")),
    }
}

#[test]
fn rfc_form_every_body_round_trips() {
    let mut read_back = Vec::new();
    for body in rfc_bodies() {
        let e = read(&envelope_json(body, json!({})));
        assert_eq!(e.signature, None);
        check_rfc_body(&e.body);
        let back = round_trip(&e);
        check_rfc_body(&back.body);
        read_back.push(back);
    }
    assert_eq!(message_types(&read_back), all_types());
}

#[test]
fn rfc_fields_survive_our_writer() {
    // A peer that spoke RFC finds its own field names in what we write back.
    let find = |t: &str| {
        rfc_bodies()
            .into_iter()
            .find(|b| b["type"] == t)
            .map(|b| to_value(&read(&envelope_json(b, json!({})))))
            .unwrap()
    };
    let manifest = find("CAPABILITY_MANIFEST");
    let cap = &manifest["body"]["capabilities"]["capabilities"][0];
    assert_eq!(cap["quality_hint"], 0.85);
    assert_eq!(cap["latency_hint_ms_p50"], 5000);
    assert_eq!(cap["cost_hint"], "medium");
    let propose = find("SESSION_PROPOSE");
    assert_eq!(
        propose["body"]["config"]["required_trust_domain"],
        "research.internal"
    );
    assert_eq!(
        propose["body"]["config"]["preferred_payload_modes"],
        json!(["semantic_frame", "text"])
    );
    let accept = find("SESSION_ACCEPT");
    assert_eq!(accept["body"]["fallback_chain"], json!(["text"]));
    let result = find("TASK_RESULT");
    assert_eq!(result["body"]["provenance"]["verified"], true);
    assert_eq!(
        result["body"]["provenance"]["verification_status"],
        "self_verified"
    );
    assert!(result["body"]["provenance"].get("tokens_used").is_none());
    assert!(result["body"]["provenance"].get("cost_usd").is_none());
}

/// The twelve bodies as `ldp-protocol` 0.2.0 writes them, with every reference-only field
/// (contract, LdpError objects, provenance with lineage and evidence): `fixtures/reference_bodies.json`.
fn reference_bodies() -> Vec<Value> {
    serde_json::from_value(fixture_json("reference_bodies.json")).unwrap()
}

fn reference_body(kind: &str) -> Value {
    reference_bodies()
        .into_iter()
        .find(|b| b["type"] == kind)
        .unwrap()
}

/// A reference provenance record whose gateway lineage hop carries extra keys.
fn reference_provenance_json() -> Value {
    reference_body("TASK_RESULT")["provenance"].clone()
}

fn reference_signature() -> Value {
    json!({"signature": "9a0b1c2d3e4f", "signature_algorithm": "hmac-sha256",
           "nonce": "0123456789abcdef0123456789abcdef"})
}

fn check_reference_body(body: &Body) {
    match body {
        Body::Hello {
            supported_modes, ..
        } => assert_eq!(supported_modes, &[SemanticFrame, Text]),
        Body::CapabilityManifest { capabilities } => {
            let cap = &capabilities.capabilities[0];
            assert_eq!(cap.name, "code-review");
            assert_eq!(cap.description.as_deref(), Some("Reviews Rust"));
            assert_eq!(cap.domains, ["rust", "python"]);
            let h = &cap.hints;
            assert_eq!(h.quality, Some(0.9));
            assert_eq!(
                (h.latency_p50_ms, h.latency_p99_ms),
                (Some(1200), Some(4000))
            );
            assert_eq!(h.cost_per_call_usd, Some(0.01));
            assert_eq!(h.cost_tier, None, "a price is not a tier");
            assert_eq!(h.max_tokens, Some(8192));
            assert_eq!(h.supports_streaming, Some(true));
            assert_eq!(h.claim_type, Some(ClaimType::IssuerAttested));
        }
        Body::SessionPropose { config } => {
            assert_eq!(config.trust_domain.as_deref(), Some("research.internal"));
            assert_eq!(
                config.required_trust_domain, None,
                "the initiator's domain is not a requirement"
            );
            assert_eq!(config.payload_mode, Some(SemanticFrame));
            assert_eq!(
                config.preferred_payload_modes.as_deref(),
                Some(&[SemanticFrame, Text][..])
            );
            assert_eq!(config.ttl_secs, Some(600));
        }
        Body::SessionAccept {
            negotiated_mode,
            fallback_chain,
            ..
        } => {
            assert_eq!(*negotiated_mode, Text);
            assert!(fallback_chain.is_empty(), "the SDK sends no chain");
        }
        Body::SessionReject { reason, error } => {
            let e = error.as_ref().unwrap();
            assert_eq!(reason, &e.message);
            assert_eq!(
                (e.code.as_str(), e.category, e.severity),
                (
                    "TRUST_VIOLATION",
                    ErrorCategory::Policy,
                    ErrorSeverity::Fatal
                )
            );
            assert!(!e.retryable);
        }
        Body::TaskSubmit { contract, .. } => {
            let c = contract.as_ref().unwrap();
            assert_eq!(c.contract_id, "contract-001");
            let budget = c.policy.budget.as_ref().unwrap();
            assert_eq!(
                (budget.max_tokens, budget.max_cost_usd),
                (Some(5000), Some(0.05))
            );
            assert!(c.deadline_at().is_some());
            assert_eq!(c.extra["objective"], "Summarize the document");
            assert_eq!(c.policy.extra["failure_policy"], "fail_closed");
        }
        Body::TaskUpdate {
            progress, message, ..
        } => {
            assert_eq!(*progress, Some(0.25));
            assert_eq!(message, &None);
        }
        Body::TaskResult { provenance, .. } => {
            let p = provenance.as_ref().unwrap();
            assert_eq!(p.verification_status, VerificationStatus::PeerVerified);
            assert!(p.verified);
            assert_eq!((p.tokens_used, p.cost_usd), (Some(1234), Some(0.0031)));
            assert_eq!(p.contract_id.as_deref(), Some("contract-001"));
            assert_eq!(p.contract_satisfied, Some(false));
            assert_eq!(p.contract_violations, ["DEADLINE_EXCEEDED"]);
            assert_eq!(p.evidence[0].summary.as_deref(), Some("50 passed"));
            assert_eq!(p.lineage.len(), 2);
            assert_eq!(p.lineage[0].policy.as_deref(), Some("balanced"));
            assert_eq!(p.lineage[0].attempts, Some(2));
            assert_eq!(
                p.lineage[1].verification_status,
                VerificationStatus::SelfVerified
            );
        }
        Body::TaskFailed { error, .. } => {
            assert_eq!(
                error.category,
                ErrorCategory::Security,
                "read, though never emitted"
            );
            assert_eq!(error.partial_output, Some(json!({"lines": 3})));
        }
        Body::TaskCancel { task_id } => assert_eq!(task_id, "task-002"),
        Body::Attestation { evidence, .. } => assert_eq!(evidence, &json!(["sig-1", "sig-2"])),
        Body::SessionClose { reason } => assert_eq!(reason, &None),
    }
}

#[test]
fn reference_form_every_body_round_trips() {
    let mut read_back = Vec::new();
    for body in reference_bodies() {
        let raw = envelope_json(body, reference_signature());
        // The fixture itself is what the reference writes: its own types accept it.
        let _: RfEnvelope = serde_json::from_value(raw.clone())
            .unwrap_or_else(|e| panic!("not reference-shaped: {raw:#}: {e}"));
        let e = read(&raw);
        assert_eq!(e.signature.as_deref(), Some("9a0b1c2d3e4f"));
        assert_eq!(e.signature_algorithm.as_deref(), Some("hmac-sha256"));
        assert_eq!(e.nonce.as_deref(), Some("0123456789abcdef0123456789abcdef"));
        check_reference_body(&e.body);
        let back = round_trip(&e);
        check_reference_body(&back.body);
        read_back.push(back);
    }
    assert_eq!(message_types(&read_back), all_types());
}

#[test]
fn envelope_level_provenance_round_trips() {
    let raw = envelope_json(
        json!({"type": "TASK_CANCEL", "task_id": "t"}),
        json!({"provenance": reference_provenance_json()}),
    );
    let e = read(&raw);
    assert_eq!(e.provenance.as_ref().unwrap().tokens_used, Some(1234));
    round_trip(&e);
}

#[test]
fn reference_session_flow_example_reads() {
    let flow = fixture_json("reference_session_flow.json");
    let steps: Vec<Envelope> = flow.as_array().unwrap().iter().map(read).collect();
    let kinds: Vec<&str> = steps
        .iter()
        .map(|e| e.body.message_type().as_str())
        .collect();
    assert_eq!(
        kinds,
        [
            "HELLO",
            "CAPABILITY_MANIFEST",
            "SESSION_PROPOSE",
            "SESSION_ACCEPT",
            "TASK_SUBMIT",
            "TASK_RESULT"
        ]
    );
    match &steps[1].body {
        Body::CapabilityManifest { capabilities } => {
            let names: Vec<&str> = capabilities
                .capabilities
                .iter()
                .map(|c| c.name.as_str())
                .collect();
            assert_eq!(names, ["reasoning", "analysis"]);
            assert_eq!(
                capabilities.capabilities[0].hints,
                Default::default(),
                "bare names carry no hints"
            );
            assert_eq!(capabilities.supported_modes, [SemanticFrame, Text]);
        }
        other => panic!("{other:?}"),
    }
    match &steps[5].body {
        Body::TaskResult {
            provenance: Some(p),
            ..
        } => {
            assert!(!p.verified);
            assert_eq!(p.verification_status, VerificationStatus::Unverified);
        }
        other => panic!("{other:?}"),
    }
    assert!(steps[5].provenance.is_some());
    for e in &steps {
        round_trip(e);
    }
}

// ---------------------------------------------------------------------------------------------
// 2. Identity cards
// ---------------------------------------------------------------------------------------------

fn read_card(bytes: &[u8]) -> IdentityCard {
    serde_json::from_slice(bytes).unwrap_or_else(|e| panic!("our card reader: {e}"))
}

#[test]
fn reference_example_card_reads_with_hints() {
    let card = read_card(&fixture("reference_identity_card.json"));
    assert_eq!(card.delegate_id, "ldp:delegate:qwen3-8b-reasoning");
    assert_eq!(card.trust_domain, TrustDomain::named("research.internal"));
    assert_eq!(card.context_window, Some(32768));
    assert_eq!(
        card.endpoint.as_deref(),
        Some("ldp://localhost:8080/delegates/qwen3-8b")
    );
    assert_eq!(card.supported_payload_modes, [SemanticFrame, Text]);
    let reasoning = &card.capability("reasoning").unwrap().hints;
    assert_eq!(reasoning.quality, Some(0.85));
    assert_eq!(reasoning.latency_p50_ms, Some(5000));
    assert_eq!(reasoning.cost_tier, Some(CostTier::Medium));
    assert_eq!(reasoning.cost_per_call_usd, None);
    let analysis = &card.capability("analysis").unwrap().hints;
    assert_eq!(
        (analysis.quality, analysis.latency_p50_ms),
        (Some(0.82), Some(4500))
    );
    assert_eq!(card.cost_tier(), Some(CostTier::Medium));
    assert_eq!(card.latency().p50_ms, Some(5000));

    // The example is written in RFC hint names, which the reference's own Rust types do not
    // know: they parse it but see no quality at all. We keep both.
    let theirs: RfCard = serde_json::from_slice(&fixture("reference_identity_card.json")).unwrap();
    assert!(theirs.capabilities.iter().all(|c| c.quality.is_none()));
    let ours_in_theirs: RfCard = serde_json::from_value(to_value(&card)).unwrap();
    let q = ours_in_theirs.capabilities[0].quality.as_ref().unwrap();
    assert_eq!(
        (q.quality_score, q.latency_p50_ms),
        (Some(0.85), Some(5000))
    );
}

#[test]
fn rfc_card_reads() {
    let card = read_card(&fixture("rfc_identity_card.json"));
    assert_eq!(card.trust_domain.name, "research.internal");
    assert!(card.trust_domain.trusts("partner.external"));
    assert_eq!(card.jurisdiction.as_deref(), Some("eu-west"));
    assert_eq!(card.context_window, Some(131072));
    assert_eq!(card.metadata["owner"], "platform");
    // RFC mode 4 is read (and only dropped when written).
    assert_eq!(
        card.supported_payload_modes,
        [SemanticFrame, Text, LatentCapsules]
    );

    let summarize = card.effective_hints("summarize").unwrap();
    assert_eq!(summarize.quality, Some(0.78));
    assert_eq!(
        summarize.latency_p50_ms,
        Some(1200),
        "the capability's own hint wins"
    );
    assert_eq!(summarize.cost_tier, Some(CostTier::Low));
    let translate = card.effective_hints("translate").unwrap();
    assert_eq!(translate.cost_tier, Some(CostTier::High));
    assert_eq!(
        translate.latency_p50_ms,
        Some(2000),
        "from latency_profile p50:2000ms"
    );
    let classify = card.effective_hints("classify").unwrap();
    assert_eq!(classify.quality, None);
    assert_eq!(classify.cost_tier, Some(CostTier::Low), "from cost_profile");
    assert_eq!(classify.latency_p50_ms, Some(2000));

    // The reference rejects the raw RFC card (it has no `latent_capsules`) but reads ours.
    assert!(serde_json::from_slice::<RfCard>(&fixture("rfc_identity_card.json")).is_err());
    let written = assert_emittable(&card);
    let theirs: RfCard = serde_json::from_value(written).unwrap();
    assert_eq!(
        rf_modes(&theirs.supported_payload_modes),
        ["semantic_frame", "text"]
    );
    assert_eq!(
        theirs.capabilities[1]
            .quality
            .as_ref()
            .unwrap()
            .quality_score,
        Some(0.9)
    );
    assert!(theirs.trust_domain.trusts("partner.external"));
}

fn minimal_card(extra: Value) -> Value {
    let mut card = json!({
        "delegate_id": "ldp:delegate:plain", "name": "Plain", "model_family": "f", "model_version": "1",
        "trust_domain": {"name": "default"}, "capabilities": [{"name": "echo"}]
    });
    if let (Some(o), Value::Object(x)) = (card.as_object_mut(), extra) {
        o.extend(x);
    }
    card
}

#[test]
fn card_without_hints_keeps_them_absent() {
    let card: IdentityCard = serde_json::from_value(minimal_card(json!({}))).unwrap();
    let h = card.effective_hints("echo").unwrap();
    assert_eq!(h.quality, None, "absent, never 0");
    assert_eq!(h.latency_p50_ms, None);
    assert_eq!(h.latency_p99_ms, None);
    assert_eq!(h.cost_per_call_usd, None);
    assert_eq!(h.cost_tier, None);
    assert_eq!(card.context_window, None);

    // Through our writer and back, and through the reference's types: still no numbers.
    let written = assert_emittable(&card);
    assert_eq!(
        written["capabilities"][0]["quality"]["quality_score"],
        Value::Null
    );
    assert!(written["capabilities"][0].get("quality_hint").is_none());
    let back: IdentityCard = serde_json::from_value(written.clone()).unwrap();
    let h = back.effective_hints("echo").unwrap();
    assert_eq!(
        (h.quality, h.latency_p50_ms, h.cost_per_call_usd),
        (None, None, None)
    );
    assert_eq!(back.context_window, None);
    let theirs: RfCard = serde_json::from_value(written).unwrap();
    let q = theirs.capabilities[0].quality.as_ref().unwrap();
    assert_eq!(
        (q.quality_score, q.latency_p50_ms, q.cost_per_call_usd),
        (None, None, None)
    );

    // An explicit `quality: null` (the Python delegate's manifest) is the same as none.
    let c: Capability =
        serde_json::from_value(json!({"name": "echo", "description": null, "quality": null}))
            .unwrap();
    assert_eq!(c.hints, Default::default());
}

#[test]
fn bare_string_trust_domain_reads() {
    let card: IdentityCard =
        serde_json::from_value(minimal_card(json!({"trust_domain": "acme-prod"}))).unwrap();
    assert_eq!(card.trust_domain, TrustDomain::named("acme-prod"));
    assert!(!card.trust_domain.allow_cross_domain);
    // Written as the object every SDK requires.
    let theirs: RfCard = serde_json::from_value(to_value(&card)).unwrap();
    assert_eq!(theirs.trust_domain, RfTrustDomain::new("acme-prod"));
}

#[test]
fn cost_tiers_read_from_hints_and_profile() {
    for (raw, tier) in [
        ("low", CostTier::Low),
        ("medium", CostTier::Medium),
        ("high", CostTier::High),
        ("HIGH", CostTier::High),
    ] {
        let card: IdentityCard = serde_json::from_value(minimal_card(json!({
            "cost_profile": raw,
            "capabilities": [{"name": "echo"}, {"name": "hinted", "cost_hint": raw}]
        })))
        .unwrap();
        assert_eq!(card.cost_tier(), Some(tier), "{raw}");
        assert_eq!(
            card.effective_hints("echo").unwrap().cost_tier,
            Some(tier),
            "{raw}"
        );
        assert_eq!(
            card.capability("hinted").unwrap().hints.cost_tier,
            Some(tier),
            "{raw}"
        );
        assert_eq!(card.capability("echo").unwrap().hints.cost_tier, None);
    }
    let card: IdentityCard = serde_json::from_value(minimal_card(json!({
        "cost_profile": "cheap", "capabilities": [{"name": "echo", "cost_hint": "free"}]
    })))
    .unwrap();
    assert_eq!(card.cost_tier(), None, "an unknown tier is no tier");
    assert_eq!(card.effective_hints("echo").unwrap().cost_tier, None);
}

#[test]
fn latency_profile_fills_missing_latency() {
    let card: IdentityCard = serde_json::from_value(minimal_card(json!({
        "latency_profile": "p50:2000ms",
        "capabilities": [{"name": "echo"}, {"name": "quick", "latency_hint_ms_p50": 150}]
    })))
    .unwrap();
    assert_eq!(card.latency().p50_ms, Some(2000));
    assert_eq!(card.latency().p99_ms, None);
    assert_eq!(
        card.effective_hints("echo").unwrap().latency_p50_ms,
        Some(2000)
    );
    assert_eq!(
        card.effective_hints("quick").unwrap().latency_p50_ms,
        Some(150)
    );
    // The profile string travels unchanged to the reference.
    let theirs: RfCard = serde_json::from_value(to_value(&card)).unwrap();
    assert_eq!(theirs.latency_profile.as_deref(), Some("p50:2000ms"));
}

#[test]
fn python_sdk_cards_read() {
    for flavour in ["pypi_wheel", "bundled_sdk"] {
        let card = read_card(&fixture(&format!("python/{flavour}/identity_card.json")));
        assert_eq!(card.context_window, Some(128000), "{flavour}");
        let h = &card.capability("summarize").unwrap().hints;
        assert_eq!(h.quality, Some(0.8), "{flavour}");
        assert_eq!(h.latency_p50_ms, Some(900), "{flavour}");
        assert_eq!(h.cost_per_call_usd, Some(0.004), "{flavour}");
        assert_eq!(h.latency_p99_ms, None, "{flavour}: null stays absent");
        assert_eq!(
            card.capability("echo").unwrap().hints.quality,
            None,
            "{flavour}"
        );
        assert_eq!(
            card.supported_payload_modes,
            [SemanticFrame, Text],
            "{flavour}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// 3. Cross-parsing with the reference Rust types
// ---------------------------------------------------------------------------------------------

fn hinted_capability() -> Capability {
    let mut c = Capability::named("summarize");
    c.description = Some("Summaries".into());
    c.input_schema = Some(json!({"type": "object"}));
    c.domains = vec!["en".into()];
    c.hints.quality = Some(0.82);
    c.hints.latency_p50_ms = Some(900);
    c.hints.latency_p99_ms = Some(2500);
    c.hints.cost_per_call_usd = Some(0.004);
    c.hints.cost_tier = Some(CostTier::Low);
    c.hints.max_tokens = Some(8192);
    c.hints.supports_streaming = Some(true);
    c.hints.claim_type = Some(ClaimType::RuntimeObserved);
    c
}

fn gateway_card() -> IdentityCard {
    IdentityCard {
        delegate_id: GATEWAY.into(),
        name: "LDP Gateway".into(),
        description: Some("One endpoint, many delegates".into()),
        model_family: "ldp-gateway".into(),
        model_version: "0.1.0".into(),
        weights_fingerprint: None,
        trust_domain: TrustDomain {
            name: "research.internal".into(),
            allow_cross_domain: true,
            trusted_peers: vec!["partner.external".into()],
        },
        context_window: Some(131072),
        reasoning_profile: None,
        cost_profile: Some("medium".into()),
        latency_profile: Some("p50:900ms".into()),
        jurisdiction: Some("eu-west".into()),
        capabilities: vec![hinted_capability(), Capability::named("echo")],
        supported_payload_modes: vec![SemanticFrame, Text, LatentCapsules, CacheSlices],
        endpoint: Some("http://127.0.0.1:8700".into()),
        metadata: BTreeMap::from([("ldp.gateway".to_owned(), "true".to_owned())]),
    }
}

fn gateway_contract() -> DelegationContract {
    let extra = |v: Value| v.as_object().cloned().unwrap();
    DelegationContract {
        contract_id: "contract-001".into(),
        policy: ContractPolicy {
            budget: Some(BudgetPolicy {
                max_tokens: Some(5000),
                max_cost_usd: Some(0.05),
            }),
            extra: extra(json!({"failure_policy": "fail_closed"})),
        },
        deadline: Some("2026-03-09T10:05:00Z".into()),
        extra: extra(
            json!({"objective": "Summarize", "success_criteria": ["short"], "created_at": TS}),
        ),
    }
}

fn gateway_provenance() -> Provenance {
    let mut p = Provenance::new(DELEGATE, "qwen3-8b-2026.01", SemanticFrame);
    p.confidence = Some(0.84);
    p.session_id = Some(SESSION.into());
    p.timestamp = Some(TS.into());
    p.tokens_used = Some(321);
    p.cost_usd = Some(0.0042);
    p.contract_id = Some("contract-001".into());
    p.contract_satisfied = Some(true);
    p.verification_status = VerificationStatus::SelfVerified;
    p.normalize();
    p.evidence = vec![EvidenceRef {
        source: "pytest".into(),
        kind: "tests".into(),
        uri: None,
        summary: None,
        decision: None,
        weight: None,
        confidence: None,
    }];
    p.lineage = vec![
        LineageEntry {
            delegate_id: GATEWAY.into(),
            model_version: "0.1.0".into(),
            step: "route".into(),
            timestamp: Some(TS.into()),
            verification_status: VerificationStatus::Unverified,
            policy: Some("balanced".into()),
            routed_to: Some(DELEGATE.into()),
            attempts: Some(2),
            note: Some("fell back once".into()),
        },
        LineageEntry {
            delegate_id: DELEGATE.into(),
            model_version: "qwen3-8b-2026.01".into(),
            step: "summarize".into(),
            timestamp: None,
            verification_status: VerificationStatus::SelfVerified,
            policy: None,
            routed_to: None,
            attempts: None,
            note: None,
        },
    ];
    p
}

/// The twelve bodies the way the gateway builds them.
fn gateway_bodies() -> Vec<Body> {
    vec![
        Body::Hello {
            delegate_id: GATEWAY.into(),
            supported_modes: vec![SemanticFrame, Text],
        },
        Body::CapabilityManifest {
            capabilities: CapabilityManifest {
                capabilities: gateway_card().capabilities,
                supported_modes: vec![SemanticFrame, Text],
            },
        },
        Body::SessionPropose {
            config: SessionConfig {
                preferred_payload_modes: Some(vec![SemanticFrame, Text]),
                payload_mode: Some(SemanticFrame),
                ttl_secs: Some(600),
                required_trust_domain: None,
                trust_domain: Some("research.internal".into()),
                policy: None,
            },
        },
        Body::SessionAccept {
            session_id: SESSION.into(),
            negotiated_mode: SemanticFrame,
            fallback_chain: vec![Text],
        },
        Body::SessionReject {
            reason: "trust domain 'x' is not 'research.internal'".into(),
            error: Some(LdpError::gateway(
                GatewayCode::TrustViolation,
                "trust domain 'x' is not 'research.internal'",
            )),
        },
        Body::TaskSubmit {
            task_id: "task-001".into(),
            skill: "summarize".into(),
            input: json!({"task_type": "summary", "instruction": "Summarize"}).into(),
            contract: Some(gateway_contract()),
        },
        Body::TaskUpdate {
            task_id: "task-001".into(),
            progress: Some(0.5),
            message: Some("routing".into()),
        },
        Body::TaskResult {
            task_id: "task-001".into(),
            output: json!({"summary": "hi"}).into(),
            provenance: Some(gateway_provenance()),
        },
        Body::TaskFailed {
            task_id: "task-001".into(),
            error: LdpError::gateway(
                GatewayCode::UpstreamFailed,
                "every attempt failed: connection refused",
            ),
        },
        Body::TaskCancel {
            task_id: "task-001".into(),
        },
        Body::Attestation {
            claim: json!({"delegate_id": GATEWAY}),
            evidence: json!({"kind": "none"}),
        },
        Body::SessionClose {
            reason: Some("client closed".into()),
        },
    ]
}

fn gateway_envelope(body: Body) -> Envelope {
    let mut e = Envelope::new(SESSION, GATEWAY, CLIENT, body, SemanticFrame);
    e.timestamp = TS.into();
    e.signature = Some("ab".repeat(32));
    e.signature_algorithm = Some("hmac-sha256".into());
    e.nonce = Some("00112233445566778899aabbccddeeff".into());
    e
}

fn same_error(ours: &LdpError, theirs: &RfError) {
    assert_eq!(ours.code, theirs.code);
    assert_eq!(ours.message, theirs.message);
    assert_eq!(ours.retryable, theirs.retryable);
    assert_eq!(to_value(&ours.category), to_value(&theirs.category));
    assert_eq!(to_value(&ours.severity), to_value(&theirs.severity));
    assert_eq!(ours.partial_output, theirs.partial_output);
}

fn same_provenance(ours: &Provenance, theirs: &RfProvenance) {
    assert_eq!(ours.produced_by, theirs.produced_by);
    assert_eq!(ours.model_version, theirs.model_version);
    assert_eq!(
        ours.payload_mode_used.as_str(),
        rf_mode(&theirs.payload_mode_used)
    );
    assert_eq!(ours.confidence, theirs.confidence);
    assert_eq!(ours.session_id, theirs.session_id);
    assert_eq!(ours.tokens_used, theirs.tokens_used);
    assert_eq!(ours.cost_usd, theirs.cost_usd);
    assert_eq!(ours.contract_id, theirs.contract_id);
    assert_eq!(ours.contract_satisfied, theirs.contract_satisfied);
    assert_eq!(ours.contract_violations, theirs.contract_violations);
    assert_eq!(
        to_value(&ours.verification_status),
        to_value(&theirs.verification_status)
    );
    assert_eq!(ours.evidence.len(), theirs.evidence.len());
    let lineage: Vec<(&str, &str, &str)> = ours
        .lineage
        .iter()
        .map(|l| {
            (
                l.delegate_id.as_str(),
                l.model_version.as_str(),
                l.step.as_str(),
            )
        })
        .collect();
    let rf_lineage: Vec<(&str, &str, &str)> = theirs
        .lineage
        .iter()
        .map(|l| {
            (
                l.delegate_id.as_str(),
                l.model_version.as_str(),
                l.step.as_str(),
            )
        })
        .collect();
    assert_eq!(lineage, rf_lineage);
}

fn same_capability(ours: &Capability, theirs: &RfCapability) {
    assert_eq!(ours.name, theirs.name);
    assert_eq!(ours.description, theirs.description);
    assert_eq!(ours.domains, theirs.domains);
    let h = &ours.hints;
    match theirs.quality.as_ref() {
        Some(q) => {
            assert_eq!(h.quality, q.quality_score);
            assert_eq!(h.latency_p50_ms, q.latency_p50_ms);
            assert_eq!(h.latency_p99_ms, q.latency_p99_ms);
            assert_eq!(h.cost_per_call_usd, q.cost_per_call_usd);
            assert_eq!(h.max_tokens, q.max_tokens);
            assert_eq!(h.supports_streaming.unwrap_or(false), q.supports_streaming);
            assert_eq!(
                to_value(&h.claim_type.unwrap_or_default()),
                to_value(&q.claim_type)
            );
        }
        None => assert_eq!(h.quality, None),
    }
}

/// Key fields of one body, ours against the reference's reading of the same bytes.
fn same_body(ours: &Body, theirs: &RfBody) {
    match (ours, theirs) {
        (
            Body::Hello {
                delegate_id,
                supported_modes,
            },
            RfBody::Hello {
                delegate_id: d,
                supported_modes: m,
            },
        ) => {
            assert_eq!(delegate_id, d);
            assert_eq!(our_modes(supported_modes), rf_modes(m));
        }
        (
            Body::CapabilityManifest { capabilities },
            RfBody::CapabilityManifest { capabilities: raw },
        ) => {
            // What the reference's session manager and router do with a manifest.
            let modes: Vec<RfMode> =
                serde_json::from_value(raw["supported_modes"].clone()).unwrap();
            assert_eq!(our_modes(&capabilities.supported_modes), rf_modes(&modes));
            let caps: Vec<RfCapability> =
                serde_json::from_value(raw["capabilities"].clone()).unwrap();
            assert_eq!(caps.len(), capabilities.capabilities.len());
            for (o, t) in capabilities.capabilities.iter().zip(&caps) {
                same_capability(o, t);
            }
        }
        (Body::SessionPropose { config }, RfBody::SessionPropose { config: raw }) => {
            // The reference server reads `trust_domain` as a string and `payload_mode` as a mode.
            assert_eq!(
                raw.get("trust_domain").and_then(Value::as_str),
                config.trust_domain.as_deref()
            );
            let mode: Option<RfMode> = raw
                .get("payload_mode")
                .map(|m| serde_json::from_value(m.clone()).unwrap());
            assert_eq!(
                mode.as_ref().map(rf_mode),
                config.payload_mode.map(|m| m.as_str().to_owned())
            );
            assert_eq!(raw.get("ttl_secs").and_then(Value::as_u64), config.ttl_secs);
        }
        (
            Body::SessionAccept {
                session_id,
                negotiated_mode,
                ..
            },
            RfBody::SessionAccept {
                session_id: s,
                negotiated_mode: m,
            },
        ) => {
            assert_eq!(session_id, s);
            assert_eq!(negotiated_mode.as_str(), rf_mode(m));
        }
        (
            Body::SessionReject { reason, error },
            RfBody::SessionReject {
                reason: r,
                error: e,
            },
        ) => {
            assert_eq!(reason, r);
            assert_eq!(error.is_some(), e.is_some());
            if let (Some(o), Some(t)) = (error, e) {
                same_error(o, t);
            }
        }
        (
            Body::TaskSubmit {
                task_id,
                skill,
                input,
                contract,
            },
            RfBody::TaskSubmit {
                task_id: t,
                skill: s,
                input: i,
                contract: c,
            },
        ) => {
            assert_eq!((task_id.as_str(), skill), (t.as_str(), s));
            assert_eq!(input, i);
            assert_eq!(contract.is_some(), c.is_some());
            if let (Some(o), Some(t)) = (contract, c) {
                assert_eq!(o.contract_id, t.contract_id);
                assert_eq!(o.deadline, t.deadline);
                let (ob, tb) = (
                    o.policy.budget.as_ref().unwrap(),
                    t.policy.budget.as_ref().unwrap(),
                );
                assert_eq!(
                    (ob.max_tokens, ob.max_cost_usd),
                    (tb.max_tokens, tb.max_cost_usd)
                );
                assert_eq!(o.extra["objective"], t.objective.as_str());
                assert_eq!(
                    to_value(&t.policy.failure_policy),
                    o.policy.extra["failure_policy"]
                );
            }
        }
        (
            Body::TaskUpdate {
                task_id,
                progress,
                message,
            },
            RfBody::TaskUpdate {
                task_id: t,
                progress: p,
                message: m,
            },
        ) => {
            assert_eq!(task_id, t);
            assert_eq!(*progress, p.map(f64::from));
            assert_eq!(message, m);
        }
        (
            Body::TaskResult {
                task_id,
                output,
                provenance,
            },
            RfBody::TaskResult {
                task_id: t,
                output: o,
                provenance: p,
            },
        ) => {
            assert_eq!(task_id, t);
            assert_eq!(output, o);
            same_provenance(provenance.as_ref().unwrap(), p);
        }
        (
            Body::TaskFailed { task_id, error },
            RfBody::TaskFailed {
                task_id: t,
                error: e,
            },
        ) => {
            assert_eq!(task_id, t);
            same_error(error, e);
        }
        (Body::TaskCancel { task_id }, RfBody::TaskCancel { task_id: t }) => assert_eq!(task_id, t),
        (
            Body::Attestation { claim, evidence },
            RfBody::Attestation {
                claim: c,
                evidence: e,
            },
        ) => {
            assert_eq!((claim, evidence), (c, e));
        }
        (Body::SessionClose { reason }, RfBody::SessionClose { reason: r }) => {
            assert_eq!(reason, r)
        }
        (o, t) => panic!(
            "{} was read by the reference as {t:?}",
            o.message_type().as_str()
        ),
    }
}

fn same_envelope(ours: &Envelope, theirs: &RfEnvelope) {
    assert_eq!(ours.message_id, theirs.message_id);
    assert_eq!(ours.session_id, theirs.session_id);
    assert_eq!(ours.from, theirs.from);
    assert_eq!(ours.to, theirs.to);
    assert_eq!(ours.timestamp, theirs.timestamp);
    assert_eq!(ours.payload_mode.as_str(), rf_mode(&theirs.payload_mode));
    assert_eq!(ours.signature, theirs.signature);
    assert_eq!(ours.signature_algorithm, theirs.signature_algorithm);
    assert_eq!(ours.nonce, theirs.nonce);
    assert_eq!(ours.provenance.is_some(), theirs.provenance.is_some());
    same_body(&ours.body, &theirs.body);
}

#[test]
fn everything_we_emit_parses_as_the_reference() {
    let envelopes: Vec<Envelope> = gateway_bodies().into_iter().map(gateway_envelope).collect();
    assert_eq!(message_types(&envelopes), all_types());
    for e in &envelopes {
        let written = assert_emittable(e);
        wheel_accepts(&written);
        same_envelope(e, &as_reference(e));
        round_trip(e);
    }
}

#[test]
fn what_the_reference_emits_parses_with_ours() {
    let mut card = RfCard {
        delegate_id: DELEGATE.into(),
        name: "Qwen".into(),
        description: None,
        model_family: "qwen".into(),
        model_version: "qwen3-8b-2026.01".into(),
        weights_fingerprint: None,
        trust_domain: RfTrustDomain::new("research.internal"),
        context_window: 32768,
        reasoning_profile: None,
        cost_profile: None,
        latency_profile: None,
        jurisdiction: None,
        capabilities: vec![RfCapability {
            name: "reasoning".into(),
            description: Some("Deep reasoning".into()),
            input_schema: None,
            output_schema: None,
            quality: Some(RfQuality {
                quality_score: Some(0.85),
                latency_p50_ms: Some(5000),
                latency_p99_ms: None,
                cost_per_call_usd: Some(0.02),
                max_tokens: None,
                supports_streaming: false,
                claim_type: RfClaimType::ExternallyBenchmarked,
            }),
            domains: vec![],
        }],
        supported_payload_modes: vec![RfMode::SemanticFrame, RfMode::Text],
        endpoint: String::new(),
        metadata: HashMap::new(),
    };
    card.metadata.insert("k".into(), "v".into());

    let mut provenance = RfProvenance::new(DELEGATE, "qwen3-8b-2026.01");
    provenance.confidence = Some(0.9);
    provenance.session_id = Some(SESSION.into());
    provenance.tokens_used = Some(77);
    provenance.cost_usd = Some(0.001);
    provenance.contract_id = Some("c-9".into());
    provenance.contract_satisfied = Some(true);
    provenance.verification_status = RfStatus::ToolVerified;
    provenance.normalize();
    provenance.evidence.push(RfEvidence {
        source: "cargo".into(),
        kind: "tests".into(),
        uri: None,
        summary: None,
    });
    provenance.lineage.push(RfLineage {
        delegate_id: DELEGATE.into(),
        model_version: "qwen3-8b-2026.01".into(),
        step: "reasoning".into(),
        timestamp: Some(TS.into()),
        verification_status: RfStatus::SelfVerified,
    });

    let contract = RfContract::new("Summarize", vec!["short".into()])
        .with_deadline("2026-03-09T10:05:00Z")
        .with_budget(RfBudget {
            max_tokens: Some(100),
            max_cost_usd: Some(0.01),
        })
        .with_failure_policy(RfFailurePolicy::FailClosed);

    let bodies = vec![
        RfBody::Hello {
            delegate_id: DELEGATE.into(),
            supported_modes: vec![RfMode::SemanticFrame, RfMode::Text],
        },
        // Exactly what `LdpServer::handle_hello` sends.
        RfBody::CapabilityManifest {
            capabilities: json!({"capabilities": card.capabilities, "supported_modes": card.supported_payload_modes}),
        },
        // Exactly what `SessionManager` sends.
        RfBody::SessionPropose {
            config: json!({"payload_mode": RfMode::SemanticFrame, "ttl_secs": 3600, "trust_domain": "research.internal"}),
        },
        RfBody::SessionAccept {
            session_id: SESSION.into(),
            negotiated_mode: RfMode::SemanticFrame,
        },
        RfBody::SessionReject {
            reason: "Trust domain 'x' not trusted".into(),
            error: Some(RfError::policy(
                "TRUST_VIOLATION",
                "Trust domain 'x' not trusted",
            )),
        },
        RfBody::TaskSubmit {
            task_id: "task-9".into(),
            skill: "reasoning".into(),
            input: json!({"prompt": "why?"}),
            contract: Some(contract),
        },
        RfBody::TaskUpdate {
            task_id: "task-9".into(),
            progress: Some(0.25),
            message: Some("thinking".into()),
        },
        RfBody::TaskResult {
            task_id: "task-9".into(),
            output: json!("because"),
            provenance: provenance.clone(),
        },
        RfBody::TaskFailed {
            task_id: "task-9".into(),
            error: RfError::security("REPLAY_DETECTED", "Duplicate nonce")
                .with_partial_output(json!({"p": 1})),
        },
        RfBody::TaskCancel {
            task_id: "task-9".into(),
        },
        RfBody::Attestation {
            claim: json!({"c": 1}),
            evidence: json!(null),
        },
        RfBody::SessionClose { reason: None },
    ];
    let mut seen = Vec::new();
    for body in bodies {
        let mut theirs = RfEnvelope::new(SESSION, DELEGATE, GATEWAY, body, RfMode::SemanticFrame);
        theirs.nonce = Some("ffeeddccbbaa99887766554433221100".into());
        ldp_protocol::signing::apply_signature(&mut theirs, SECRET);
        let bytes = serde_json::to_vec(&theirs).unwrap();
        let ours = Envelope::from_slice(&bytes).unwrap_or_else(|e| {
            panic!(
                "we rejected the reference's {}: {e}",
                String::from_utf8_lossy(&bytes)
            )
        });
        same_envelope(&ours, &theirs);
        // Relaying what we read keeps the reference's HMAC valid: every signed field survives.
        let relayed = as_reference(&round_trip(&ours));
        assert!(
            ldp_protocol::signing::verify_envelope(
                &relayed,
                SECRET,
                relayed.signature.as_deref().unwrap()
            ),
            "signature broken by our relay of {}",
            ours.body.message_type().as_str()
        );
        seen.push(ours);
    }
    assert_eq!(message_types(&seen), all_types());
    // The RFC `verified` bool and the reference's status agree in what we read.
    match &seen[7].body {
        Body::TaskResult {
            provenance: Some(p),
            ..
        } => {
            assert!(p.verified);
            assert_eq!(p.verification_status, VerificationStatus::ToolVerified);
        }
        other => panic!("{other:?}"),
    }

    // Their card as ours, and back.
    let ours: IdentityCard = serde_json::from_value(to_value(&card)).unwrap();
    assert_eq!(ours.context_window, Some(32768));
    assert_eq!(ours.endpoint, None, "an empty endpoint is no endpoint");
    same_capability(&ours.capabilities[0], &card.capabilities[0]);
    assert_eq!(
        ours.capabilities[0].hints.claim_type,
        Some(ClaimType::ExternallyBenchmarked)
    );
    let again: RfCard = serde_json::from_value(to_value(&ours)).unwrap();
    same_capability(&ours.capabilities[0], &again.capabilities[0]);
    assert_eq!(again.metadata["k"], "v");
}

#[test]
fn our_card_parses_as_the_reference_card() {
    let card = gateway_card();
    let written = assert_emittable(&card);
    let theirs: RfCard = serde_json::from_value(written.clone()).unwrap();
    assert_eq!(theirs.delegate_id, GATEWAY);
    assert_eq!(theirs.context_window, 131072);
    assert_eq!(theirs.trust_domain.name, "research.internal");
    assert!(theirs.trust_domain.trusts("partner.external"));
    assert_eq!(theirs.endpoint, "http://127.0.0.1:8700");
    assert_eq!(
        rf_modes(&theirs.supported_payload_modes),
        ["semantic_frame", "text"]
    );
    assert_eq!(theirs.capabilities.len(), 2);
    for (o, t) in card.capabilities.iter().zip(&theirs.capabilities) {
        same_capability(o, t);
    }
    // Both hint dialects are written, so an RFC reader finds its names too.
    assert_eq!(written["capabilities"][0]["quality_hint"], 0.82);
    assert_eq!(written["capabilities"][0]["latency_hint_ms_p50"], 900);
    assert_eq!(written["capabilities"][0]["cost_hint"], "low");
    // And ours reads it back the same, bar the modes the SDKs cannot carry.
    let back: IdentityCard = serde_json::from_value(written).unwrap();
    let expected: Vec<Capability> = card.capabilities.iter().cloned().map(as_written).collect();
    assert_eq!(back.capabilities, expected);
    assert_eq!(back.supported_payload_modes, [SemanticFrame, Text]);
}

#[test]
fn card_without_context_window_still_parses_everywhere() {
    let mut card = gateway_card();
    card.context_window = None;
    let written = assert_emittable(&card);
    // Every SDK requires the key (`u64` in Rust, `int` in both Python SDKs).
    let theirs: RfCard = serde_json::from_value(written.clone())
        .unwrap_or_else(|e| panic!("reference rejects a card with an unknown context window: {e}"));
    assert_eq!(theirs.context_window, 0);
    let back: IdentityCard = serde_json::from_value(written).unwrap();
    assert_eq!(
        back.context_window, None,
        "unknown stays unknown through our own writer"
    );
}

#[test]
fn capability_manifest_three_shapes() {
    let cap = json!({"name": "summarize", "description": null,
                     "quality": {"quality_score": 0.8, "latency_p50_ms": 900, "latency_p99_ms": null,
                                 "cost_per_call_usd": 0.004, "max_tokens": null,
                                 "supports_streaming": false, "claim_type": "self_claimed"}});
    let shapes = [
        (
            "rust reference",
            json!({"capabilities": [cap.clone()], "supported_modes": ["semantic_frame", "text"]}),
        ),
        ("python bare list", json!([cap.clone()])),
        (
            "rfc skills",
            json!({"skills": [cap.clone()], "supported_modes": ["semantic_frame", "text"]}),
        ),
    ];
    for (name, shape) in shapes {
        let e = read(&envelope_json(
            json!({"type": "CAPABILITY_MANIFEST", "capabilities": shape}),
            json!({}),
        ));
        let Body::CapabilityManifest { capabilities } = &e.body else {
            panic!("{name}: {:?}", e.body)
        };
        assert_eq!(capabilities.capabilities.len(), 1, "{name}");
        let h = &capabilities.capabilities[0].hints;
        assert_eq!(
            (h.quality, h.latency_p50_ms, h.cost_per_call_usd),
            (Some(0.8), Some(900), Some(0.004)),
            "{name}"
        );
        assert_eq!(h.latency_p99_ms, None, "{name}");
        let expected: &[PayloadMode] = if name == "python bare list" {
            &[]
        } else {
            &[SemanticFrame, Text]
        };
        assert_eq!(capabilities.supported_modes, expected, "{name}");
        // Whatever came in, the gateway writes the first shape.
        let written = to_value(&round_trip(&e));
        assert!(
            written["body"]["capabilities"]["capabilities"].is_array(),
            "{name}"
        );
        assert!(
            written["body"]["capabilities"]["supported_modes"].is_array(),
            "{name}"
        );
    }
    // RFC `skills` as bare names, and `skills` next to (not inside) `capabilities`.
    let e = read(&envelope_json(
        json!({"type": "CAPABILITY_MANIFEST", "skills": ["a", "b"]}),
        json!({}),
    ));
    let Body::CapabilityManifest { capabilities } = &e.body else {
        panic!("{:?}", e.body)
    };
    assert_eq!(
        capabilities.capabilities,
        [Capability::named("a"), Capability::named("b")]
    );
    // The real Python delegate's manifest.
    for flavour in ["pypi_wheel", "bundled_sdk"] {
        let e = read(&fixture_json(&format!(
            "python/{flavour}/capability_manifest.json"
        )));
        let Body::CapabilityManifest { capabilities } = &e.body else {
            panic!("{:?}", e.body)
        };
        let names: Vec<&str> = capabilities
            .capabilities
            .iter()
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(names, ["summarize", "echo"], "{flavour}");
        assert_eq!(
            capabilities.capabilities[0].hints.quality,
            Some(0.8),
            "{flavour}"
        );
        assert_eq!(
            capabilities.capabilities[1].hints,
            Default::default(),
            "{flavour}"
        );
    }
}

#[test]
fn provenance_lineage_with_extra_keys_parses_on_both_sides() {
    let raw = reference_provenance_json();
    let theirs: RfProvenance = serde_json::from_value(raw.clone()).unwrap();
    let ours: Provenance = serde_json::from_value(raw).unwrap();
    same_provenance(&ours, &theirs);
    assert_eq!(ours.lineage[0].routed_to.as_deref(), Some(DELEGATE));
    assert_eq!(ours.lineage[0].note.as_deref(), Some("fallback"));
    // Our gateway hop, written by us, is read by the reference (which ignores the extras).
    let ours_written = to_value(&gateway_provenance());
    assert_eq!(ours_written["lineage"][0]["policy"], "balanced");
    assert_eq!(ours_written["lineage"][0]["attempts"], 2);
    let theirs: RfProvenance = serde_json::from_value(ours_written).unwrap();
    same_provenance(&gateway_provenance(), &theirs);
    assert_eq!(theirs.lineage[0].step, "route");
}

#[test]
fn reference_requires_provenance_on_task_result() {
    // RFC: provenance MUST be present; the Rust reference cannot read a TASK_RESULT without
    // it, so the gateway must always fill it (the Python SDKs would accept `null`).
    let bare = gateway_envelope(Body::TaskResult {
        task_id: "t".into(),
        output: json!(1).into(),
        provenance: None,
    });
    let bytes = bare.to_vec().unwrap();
    assert!(serde_json::from_slice::<RfEnvelope>(&bytes).is_err());
    round_trip(&bare);
}

// ---------------------------------------------------------------------------------------------
// 4. What we emit never carries RFC-only modes or the `security` category
// ---------------------------------------------------------------------------------------------

#[test]
fn rfc_only_payload_modes_are_never_emitted() {
    let mut card = gateway_card();
    card.supported_payload_modes = vec![LatentCapsules, SemanticFrame, CacheSlices, Text];
    let v = assert_emittable(&card);
    assert_eq!(
        v["supported_payload_modes"],
        json!(["semantic_frame", "text"])
    );

    let all_modes = vec![LatentCapsules, SemanticFrame, CacheSlices, Text];
    let mut provenance = gateway_provenance();
    provenance.payload_mode_used = LatentCapsules;
    let bodies = vec![
        Body::Hello {
            delegate_id: GATEWAY.into(),
            supported_modes: all_modes.clone(),
        },
        Body::CapabilityManifest {
            capabilities: CapabilityManifest {
                capabilities: vec![],
                supported_modes: all_modes.clone(),
            },
        },
        Body::SessionPropose {
            config: SessionConfig {
                preferred_payload_modes: Some(all_modes.clone()),
                payload_mode: Some(CacheSlices),
                ttl_secs: None,
                required_trust_domain: None,
                trust_domain: Some("default".into()),
                policy: None,
            },
        },
        Body::SessionAccept {
            session_id: SESSION.into(),
            negotiated_mode: LatentCapsules,
            fallback_chain: all_modes.clone(),
        },
        Body::TaskResult {
            task_id: "t".into(),
            output: json!(null).into(),
            provenance: Some(provenance.clone()),
        },
    ];
    for body in bodies {
        let mut e = gateway_envelope(body);
        e.payload_mode = CacheSlices;
        e.provenance = Some(provenance.clone());
        let written = assert_emittable(&e);
        wheel_accepts(&written);
        let theirs = as_reference(&e);
        assert_eq!(
            rf_mode(&theirs.payload_mode),
            "text",
            "the universal fallback"
        );
        match &theirs.body {
            RfBody::Hello {
                supported_modes, ..
            } => assert_eq!(rf_modes(supported_modes), ["semantic_frame", "text"]),
            RfBody::SessionAccept {
                negotiated_mode, ..
            } => assert_eq!(rf_mode(negotiated_mode), "text"),
            RfBody::SessionPropose { config } => {
                assert_eq!(
                    config["preferred_payload_modes"],
                    json!(["semantic_frame", "text"])
                );
                assert!(
                    config.get("payload_mode").is_none(),
                    "an unsendable single mode is left out"
                );
            }
            RfBody::CapabilityManifest { capabilities } => {
                assert_eq!(
                    capabilities["supported_modes"],
                    json!(["semantic_frame", "text"])
                );
            }
            RfBody::TaskResult { provenance, .. } => {
                assert_eq!(rf_mode(&provenance.payload_mode_used), "text")
            }
            other => panic!("{other:?}"),
        }
    }
    // The chain keeps only what can be written.
    let accept = to_value(&gateway_envelope(Body::SessionAccept {
        session_id: SESSION.into(),
        negotiated_mode: SemanticFrame,
        fallback_chain: vec![CacheSlices, Text],
    }));
    assert_eq!(accept["body"]["fallback_chain"], json!(["text"]));
}

#[test]
fn security_category_is_made_emittable() {
    let categories = [
        ErrorCategory::Identity,
        ErrorCategory::Capability,
        ErrorCategory::Policy,
        ErrorCategory::Runtime,
        ErrorCategory::Quality,
        ErrorCategory::Session,
        ErrorCategory::Transport,
        ErrorCategory::Security,
    ];
    for category in categories {
        let e = LdpError::new("X", category, ErrorSeverity::Fatal, false, "m").emittable();
        let expected = if category == ErrorCategory::Security {
            ErrorCategory::Policy
        } else {
            category
        };
        assert_eq!(e.category, expected);
        let v = assert_emittable(&e);
        let _: WheelError = serde_json::from_value(v).unwrap();
    }
    // A newer SDK's security failure, relayed after `emittable()`, parses in the wheel.
    let raw = reference_bodies()
        .into_iter()
        .find(|b| b["type"] == "TASK_FAILED")
        .unwrap();
    let Body::TaskFailed { task_id, error } = read(&envelope_json(raw, json!({}))).body else {
        panic!()
    };
    assert_eq!(error.category, ErrorCategory::Security);
    let relayed = gateway_envelope(Body::TaskFailed {
        task_id,
        error: error.emittable(),
    });
    let written = assert_emittable(&relayed);
    wheel_accepts(&written);
    assert_eq!(written["body"]["error"]["code"], "REPLAY_DETECTED");
    assert_eq!(
        written["body"]["error"]["partial_output"],
        json!({"lines": 3})
    );
    // Every code the gateway answers with is emittable as is.
    for code in [
        GatewayCode::BadRequest,
        GatewayCode::PayloadTooLarge,
        GatewayCode::Unauthenticated,
        GatewayCode::RateLimited,
        GatewayCode::TrustViolation,
        GatewayCode::SessionNotFound,
        GatewayCode::NoEligibleDelegate,
        GatewayCode::BudgetExceeded,
        GatewayCode::UpstreamFailed,
        GatewayCode::Internal,
    ] {
        let e = LdpError::gateway(code, "m");
        assert_eq!(e.clone().emittable(), e, "{}", code.as_str());
        let _: RfError = serde_json::from_value(assert_emittable(&e)).unwrap();
    }
    // A wheel-mimic sanity check: it does reject `security`.
    let security = to_value(&LdpError::new(
        "X",
        ErrorCategory::Security,
        ErrorSeverity::Fatal,
        false,
        "m",
    ));
    assert!(serde_json::from_value::<WheelError>(security).is_err());
    assert!(serde_json::from_value::<RfCategory>(json!("security")).is_ok());
}

// ---------------------------------------------------------------------------------------------
// Python SDK shapes: `model_dump(by_alias=True)`, every field, nulls included
// ---------------------------------------------------------------------------------------------

#[test]
fn python_wheel_envelopes_read() {
    let hello = read(&fixture_json("python/pypi_wheel/hello.json"));
    assert_eq!(hello.session_id, "");
    assert_eq!(hello.from, "ldp:client:default");
    assert_eq!(hello.signature, None);
    match &hello.body {
        Body::Hello {
            delegate_id,
            supported_modes,
        } => {
            assert_eq!(delegate_id, "ldp:client:default");
            assert_eq!(supported_modes, &[SemanticFrame, Text]);
        }
        other => panic!("{other:?}"),
    }

    let propose = read(&fixture_json("python/pypi_wheel/session_propose.json"));
    match &propose.body {
        Body::SessionPropose { config } => {
            assert_eq!(config.trust_domain.as_deref(), Some("default"));
            assert_eq!(config.required_trust_domain, None);
            assert_eq!(config.ttl_secs, Some(3600));
            assert_eq!(config.preferences(), [SemanticFrame, Text]);
        }
        other => panic!("{other:?}"),
    }

    let submit = read(&fixture_json("python/pypi_wheel/task_submit.json"));
    assert_eq!(submit.payload_mode, SemanticFrame);
    match &submit.body {
        Body::TaskSubmit {
            task_id,
            skill,
            input,
            contract,
        } => {
            assert_eq!(
                (task_id.as_str(), skill.as_str()),
                ("task-001", "summarize")
            );
            assert_eq!(input, &json!({"text": "hello world"}));
            assert_eq!(contract, &None);
        }
        other => panic!("{other:?}"),
    }

    let result = read(&fixture_json("python/pypi_wheel/task_result.json"));
    match &result.body {
        Body::TaskResult {
            output,
            provenance: Some(p),
            ..
        } => {
            assert_eq!(output, &json!({"summary": "hi"}));
            assert_eq!(p.produced_by, "ldp:delegate:py-echo");
            assert_eq!(p.confidence, Some(0.9));
            assert_eq!(p.payload_mode_used, SemanticFrame);
            assert!(!p.verified);
            assert_eq!((p.tokens_used, p.cost_usd), (None, None));
        }
        other => panic!("{other:?}"),
    }

    let failed = read(&fixture_json("python/pypi_wheel/task_failed.json"));
    match &failed.body {
        Body::TaskFailed { error, .. } => {
            assert_eq!(error.code, "TASK_EXECUTION_ERROR");
            assert_eq!(error.category, ErrorCategory::Runtime);
            assert!(error.retryable);
        }
        other => panic!("{other:?}"),
    }

    let reject = read(&fixture_json("python/pypi_wheel/session_reject.json"));
    match &reject.body {
        Body::SessionReject {
            reason,
            error: Some(e),
        } => {
            assert!(reason.contains("not trusted"));
            assert_eq!(
                (e.code.as_str(), e.category),
                ("SESSION_REJECTED", ErrorCategory::Policy)
            );
        }
        other => panic!("{other:?}"),
    }

    for e in [&hello, &propose, &submit, &result, &failed, &reject] {
        round_trip(e);
    }
}

#[test]
fn bundled_python_sdk_envelopes_read() {
    let submit = read(&fixture_json("python/bundled_sdk/task_submit.json"));
    assert_eq!(
        submit.nonce.as_deref(),
        Some("0123456789abcdef0123456789abcdef")
    );
    assert_eq!(submit.signature_algorithm.as_deref(), Some("hmac-sha256"));
    match &submit.body {
        Body::TaskSubmit {
            contract: Some(c), ..
        } => {
            assert_eq!(c.contract_id, "contract-001");
            assert_eq!(c.policy.budget.as_ref().unwrap().max_cost_usd, Some(0.02));
            assert!(c.deadline_at().is_some());
        }
        other => panic!("{other:?}"),
    }
    // The Python SDK's HMAC (same canonical form as Rust) still verifies after our relay.
    let relayed = as_reference(&round_trip(&submit));
    assert!(ldp_protocol::signing::verify_envelope(
        &relayed,
        SECRET,
        relayed.signature.as_deref().unwrap()
    ));

    let result = read(&fixture_json("python/bundled_sdk/task_result.json"));
    match &result.body {
        Body::TaskResult {
            provenance: Some(p),
            ..
        } => {
            assert_eq!(p.verification_status, VerificationStatus::SelfVerified);
            assert!(p.verified);
            assert_eq!((p.tokens_used, p.cost_usd), (Some(321), Some(0.0042)));
            assert_eq!(p.contract_satisfied, Some(true));
            assert_eq!(
                p.lineage[0].timestamp, None,
                "`timestamp: null` reads as absent"
            );
        }
        other => panic!("{other:?}"),
    }
    for name in [
        "hello",
        "session_propose",
        "capability_manifest",
        "task_failed",
        "session_reject",
    ] {
        let e = read(&fixture_json(&format!("python/bundled_sdk/{name}.json")));
        round_trip(&e);
        // And the reference's Rust types read our relay of it.
        same_envelope(&e, &as_reference(&e));
    }
}
