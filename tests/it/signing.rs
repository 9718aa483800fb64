//! Envelope signatures against the reference SDKs: the Rust crate in-process, the Python
//! SDKs by transliteration and, when their venvs exist, by running them.
//!
//! The Python run uses `LDP_PY_SDK` (the newer SDK, with nonce) and `LDP_PY_WHEEL` (the PyPI
//! wheel, without), else the venvs `.ci/run venvs` builds under `~/.cache/ldp-gateway-ci`.
//! Absent, it prints a skip note and passes, unless `LDP_INTEROP_REQUIRED=1`.

use crate::support::process::{output_with_input, py_code, python, text, Sdk};
use ldp_gateway::ldp::signing::{self, Algorithm, SignatureError};
use ldp_gateway::ldp::{Body, Envelope};
use ldp_protocol::signing::{apply_signature, sign_envelope, verify_envelope};
use ldp_protocol::types::error::LdpError as TheirError;
use ldp_protocol::types::messages::{LdpEnvelope, LdpMessageBody};
use ldp_protocol::types::payload::PayloadMode as TheirMode;
use ldp_protocol::types::provenance::Provenance as TheirProvenance;
use serde_json::{json, Value};
use std::path::Path;
use std::time::Duration;

const SECRET: &str = "shared-secret-é";

/// One envelope of each of the twelve types, built with the reference crate's types.
fn their_bodies() -> Vec<LdpMessageBody> {
    let mut provenance = TheirProvenance::new("delegate-1", "model-v1");
    provenance.timestamp = Some("2026-01-01T00:00:01+00:00".into());
    vec![
        LdpMessageBody::Hello {
            delegate_id: "client-1".into(),
            supported_modes: vec![TheirMode::SemanticFrame, TheirMode::Text],
        },
        LdpMessageBody::CapabilityManifest {
            capabilities: json!({"capabilities": [{"name": "echo"}], "supported_modes": ["text"]}),
        },
        LdpMessageBody::SessionPropose {
            config: json!({"preferred_payload_modes": ["text"], "ttl_secs": 60}),
        },
        LdpMessageBody::SessionAccept {
            session_id: "sess-9".into(),
            negotiated_mode: TheirMode::Text,
        },
        LdpMessageBody::SessionReject {
            reason: "no capacity | try later".into(),
            error: Some(TheirError::policy(
                "SESSION_REJECTED",
                "no capacity | try later",
            )),
        },
        LdpMessageBody::TaskSubmit {
            task_id: "task-1".into(),
            skill: "summarise".into(),
            input: json!({"text": "héllo", "n": 0.1}),
            contract: None,
        },
        LdpMessageBody::TaskUpdate {
            task_id: "task-1".into(),
            progress: Some(0.5),
            message: Some("half".into()),
        },
        LdpMessageBody::TaskResult {
            task_id: "task-1".into(),
            output: json!({"summary": "hi"}),
            provenance,
        },
        LdpMessageBody::TaskFailed {
            task_id: "task-1".into(),
            error: TheirError::runtime("TASK_FAILED", "boom"),
        },
        LdpMessageBody::TaskCancel {
            task_id: "task-1".into(),
        },
        LdpMessageBody::Attestation {
            claim: json!({"type": "domain"}),
            evidence: json!(["sig"]),
        },
        LdpMessageBody::SessionClose {
            reason: Some("done".into()),
        },
    ]
}

fn their_envelope(body: LdpMessageBody, nonce: Option<&str>) -> LdpEnvelope {
    let mut env = LdpEnvelope::new("sess-1", "client-1", "gateway", body, TheirMode::Text);
    env.message_id = "11111111-2222-4333-8444-555555555555".into();
    env.timestamp = "2026-01-01T00:00:00.123456+00:00".into();
    env.nonce = nonce.map(str::to_owned);
    env
}

/// Every type, without and with a nonce.
fn their_envelopes() -> Vec<LdpEnvelope> {
    let mut out = Vec::new();
    for nonce in [None, Some("00112233445566778899aabbccddeeff")] {
        out.extend(their_bodies().into_iter().map(|b| their_envelope(b, nonce)));
    }
    assert_eq!(out.len(), 24);
    out
}

fn to_ours(env: &LdpEnvelope) -> Envelope {
    Envelope::from_slice(&serde_json::to_vec(env).unwrap()).unwrap()
}

fn to_theirs(env: &Envelope) -> LdpEnvelope {
    serde_json::from_slice(&env.to_vec().unwrap()).unwrap()
}

fn type_of(env: &Envelope) -> &'static str {
    env.body.message_type().as_str()
}

#[test]
fn reference_signature_equals_the_rust_sdk_for_every_type() {
    for theirs in their_envelopes() {
        let ours = to_ours(&theirs);
        assert_eq!(
            signing::sign(&ours, SECRET.as_bytes(), Algorithm::Reference).unwrap(),
            sign_envelope(&theirs, SECRET),
            "{} nonce={:?}",
            type_of(&ours),
            ours.nonce
        );
    }
}

#[test]
fn sdk_signed_envelopes_verify_with_ours() {
    for mut theirs in their_envelopes() {
        apply_signature(&mut theirs, SECRET);
        let ours = to_ours(&theirs);
        assert_eq!(ours.signature_algorithm.as_deref(), Some("hmac-sha256"));
        assert_eq!(
            signing::verify(&ours, SECRET.as_bytes()),
            Ok(Algorithm::Reference),
            "{}",
            type_of(&ours)
        );
    }
}

#[test]
fn our_reference_signatures_verify_with_the_sdk() {
    for theirs in their_envelopes() {
        let mut ours = to_ours(&theirs);
        signing::apply(&mut ours, SECRET.as_bytes(), Algorithm::Reference).unwrap();
        let back = to_theirs(&ours);
        let sig = back.signature.clone().unwrap();
        assert_eq!(back.signature_algorithm.as_deref(), Some("hmac-sha256"));
        assert!(
            verify_envelope(&back, SECRET, &sig),
            "{} nonce={:?}",
            type_of(&ours),
            ours.nonce
        );
    }
}

/// Flips one signed field at a time on an SDK-signed TASK_SUBMIT.
#[test]
fn changing_a_signed_field_fails() {
    type Tamper = fn(&mut Envelope);
    let tampers: [(&str, Tamper); 9] = [
        ("task_id", |e| {
            if let Body::TaskSubmit { task_id, .. } = &mut e.body {
                *task_id = format!("{task_id}x").into();
            }
        }),
        ("skill", |e| {
            if let Body::TaskSubmit { skill, .. } = &mut e.body {
                *skill = "delete_everything".into();
            }
        }),
        ("from", |e| e.from = "attacker".into()),
        ("to", |e| e.to = "elsewhere".into()),
        ("session_id", |e| e.session_id = "sess-2".into()),
        ("message_id", |e| e.message_id = "other".into()),
        ("timestamp", |e| {
            e.timestamp = "2026-01-01T00:05:00+00:00".into()
        }),
        ("nonce changed", |e| e.nonce = Some("ffff".into())),
        ("nonce removed", |e| e.nonce = None),
    ];
    let submit = their_bodies().remove(5);
    let mut theirs = their_envelope(submit, Some("00112233445566778899aabbccddeeff"));
    apply_signature(&mut theirs, SECRET);
    let signed = to_ours(&theirs);
    assert_eq!(
        signing::verify(&signed, SECRET.as_bytes()),
        Ok(Algorithm::Reference)
    );
    for (what, tamper) in tampers {
        let mut env = signed.clone();
        tamper(&mut env);
        assert_eq!(
            signing::verify(&env, SECRET.as_bytes()),
            Err(SignatureError::Mismatch),
            "{what}"
        );
    }
    // Adding a nonce to an envelope signed without one fails too.
    let mut theirs = their_envelope(their_bodies().remove(5), None);
    apply_signature(&mut theirs, SECRET);
    let mut env = to_ours(&theirs);
    env.nonce = Some("00".into());
    assert_eq!(
        signing::verify(&env, SECRET.as_bytes()),
        Err(SignatureError::Mismatch)
    );
}

/// The task input is outside the reference signature, inside ours.
#[test]
fn changing_the_task_input_passes_reference_and_fails_body() {
    let tamper = |env: &Envelope| {
        let mut v = serde_json::to_value(env).unwrap();
        v["body"]["input"] = json!({"text": "something else entirely"});
        Envelope::from_slice(&serde_json::to_vec(&v).unwrap()).unwrap()
    };
    let base = to_ours(&their_envelope(their_bodies().remove(5), Some("n-1")));
    for (alg, expected) in [
        (Algorithm::Reference, Ok(Algorithm::Reference)),
        (Algorithm::Body, Err(SignatureError::Mismatch)),
    ] {
        let mut env = base.clone();
        signing::apply(&mut env, SECRET.as_bytes(), alg).unwrap();
        assert_eq!(signing::verify(&env, SECRET.as_bytes()), Ok(alg));
        assert_eq!(
            signing::verify(&tamper(&env), SECRET.as_bytes()),
            expected,
            "{alg}"
        );
    }
    // And the SDK itself agrees the reference signature still holds.
    let mut theirs = their_envelope(their_bodies().remove(5), None);
    apply_signature(&mut theirs, SECRET);
    let sig = theirs.signature.clone().unwrap();
    if let LdpMessageBody::TaskSubmit { input, .. } = &mut theirs.body {
        *input = json!("changed");
    }
    assert!(verify_envelope(&theirs, SECRET, &sig));
}

#[test]
fn body_signatures_survive_the_wire_for_every_type() {
    for theirs in their_envelopes() {
        let mut ours = to_ours(&theirs);
        signing::apply(&mut ours, SECRET.as_bytes(), Algorithm::Body).unwrap();
        let back = Envelope::from_slice(&ours.to_vec().unwrap()).unwrap();
        assert_eq!(
            signing::verify(&back, SECRET.as_bytes()),
            Ok(Algorithm::Body),
            "{}",
            type_of(&ours)
        );
        // The reference SDK does not know it, and says so by failing.
        let sig = ours.signature.clone().unwrap();
        assert!(!verify_envelope(&to_theirs(&ours), SECRET, &sig));
    }
}

#[test]
fn wrong_secret_and_unknown_algorithm_fail() {
    let mut theirs = their_envelope(their_bodies().remove(5), Some("n"));
    apply_signature(&mut theirs, SECRET);
    let mut env = to_ours(&theirs);
    assert_eq!(
        signing::verify(&env, b"not-the-secret"),
        Err(SignatureError::Mismatch)
    );
    env.signature_algorithm = Some("ed25519".into());
    assert_eq!(
        signing::verify(&env, SECRET.as_bytes()),
        Err(SignatureError::UnknownAlgorithm("ed25519".into()))
    );
    env.signature = None;
    assert_eq!(
        signing::verify(&env, SECRET.as_bytes()),
        Err(SignatureError::Missing)
    );
}

/// `signing.py` (both versions) transliterated over the envelope's JSON: the flat body, the
/// truthiness tests (`if body.delegate_id`), and the nonce only when present, which the
/// wheel's version lacks (identical output when there is no nonce).
fn python_canonical(v: &Value) -> String {
    let s = |v: &Value| v.as_str().unwrap_or("").to_owned();
    let body = &v["body"];
    let mut out = format!(
        "{}|{}|{}|{}|{}",
        s(&v["from"]),
        s(&v["to"]),
        s(&v["session_id"]),
        s(&v["timestamp"]),
        s(&v["message_id"])
    );
    if let Some(nonce) = v["nonce"].as_str() {
        out += "|";
        out += nonce;
    }
    out += "|";
    let body_type = s(&body["type"]);
    match body_type.as_str() {
        "HELLO" => out += &s(&body["delegate_id"]),
        "SESSION_ACCEPT" => out += &s(&body["session_id"]),
        "SESSION_REJECT" => out += &s(&body["reason"]),
        "TASK_SUBMIT" => {
            out += &s(&body["task_id"]);
            out += "|";
            out += &s(&body["skill"]);
        }
        "TASK_UPDATE" | "TASK_RESULT" | "TASK_FAILED" | "TASK_CANCEL" => {
            out += &s(&body["task_id"])
        }
        _ => {}
    }
    out += "|";
    out += &body_type;
    out
}

fn hmac_hex(input: &[u8]) -> String {
    use hmac::{Hmac, Mac};
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(SECRET.as_bytes()).unwrap();
    mac.update(input);
    hex::encode(mac.finalize().into_bytes())
}

#[test]
fn reference_signature_equals_python_signing_py_by_hand() {
    // One spelled out in full.
    let theirs = their_envelope(their_bodies().remove(5), Some("abc"));
    let ours = to_ours(&theirs);
    let canonical = "client-1|gateway|sess-1|2026-01-01T00:00:00.123456+00:00|\
                     11111111-2222-4333-8444-555555555555|abc|task-1|summarise|TASK_SUBMIT";
    assert_eq!(
        signing::signing_input(&ours, Algorithm::Reference).unwrap(),
        canonical.as_bytes()
    );
    assert_eq!(
        signing::sign(&ours, SECRET.as_bytes(), Algorithm::Reference).unwrap(),
        hmac_hex(canonical.as_bytes())
    );
    // Every type, with and without nonce, through the transliteration of the wire JSON.
    for theirs in their_envelopes() {
        let ours = to_ours(&theirs);
        let wire: Value = serde_json::from_slice(&ours.to_vec().unwrap()).unwrap();
        assert_eq!(
            signing::sign(&ours, SECRET.as_bytes(), Algorithm::Reference).unwrap(),
            hmac_hex(python_canonical(&wire).as_bytes()),
            "{}",
            type_of(&ours)
        );
    }
}

// ---------------------------------------------------------------------------------------
// The Python SDKs, run for real when their venvs exist.
// ---------------------------------------------------------------------------------------

/// Signs each envelope and verifies the signature it carries (if any).
const PY_SIGN: &str = r#"
import json, sys
from ldp_protocol.types.messages import LdpEnvelope
from ldp_protocol.signing import sign_envelope, verify_envelope
req = json.load(sys.stdin)
out = []
for item in req["envelopes"]:
    env = LdpEnvelope.model_validate(item)
    sig = item.get("signature")
    out.append({
        "sign": sign_envelope(env, req["secret"]),
        "verify": verify_envelope(env, req["secret"], sig) if sig else None,
    })
print(json.dumps(out))
"#;

#[derive(serde::Deserialize)]
struct PyResult {
    sign: String,
    verify: Option<bool>,
}

async fn run_python(python: &Path, envelopes: &[Envelope]) -> Vec<PyResult> {
    let wire: Vec<Value> = envelopes
        .iter()
        .map(|e| serde_json::from_slice(&e.to_vec().unwrap()).unwrap())
        .collect();
    let request = json!({"secret": SECRET, "envelopes": wire});
    let out = output_with_input(
        py_code(python, PY_SIGN),
        serde_json::to_vec(&request).unwrap(),
        Duration::from_secs(120),
    )
    .await;
    assert!(
        out.status.success(),
        "{} failed: {}",
        python.display(),
        text(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Our envelopes of every type, signed by us with the reference algorithm.
fn our_signed_envelopes(with_nonce: bool) -> Vec<Envelope> {
    their_envelopes()
        .iter()
        .map(to_ours)
        .filter(|e| e.nonce.is_some() == with_nonce)
        .map(|mut e| {
            signing::apply(&mut e, SECRET.as_bytes(), Algorithm::Reference).unwrap();
            e
        })
        .collect()
}

#[tokio::test]
async fn python_sdks_sign_alike_and_verify_ours() {
    for (sdk, nonce_cases) in [
        (Sdk::Bundled, &[false, true][..]),
        (Sdk::Wheel, &[false][..]),
    ] {
        let Some(python) = python(sdk, "Python signing interop") else {
            continue;
        };
        for &with_nonce in nonce_cases {
            let envelopes = our_signed_envelopes(with_nonce);
            let results = run_python(&python, &envelopes).await;
            assert_eq!(results.len(), envelopes.len());
            for (env, py) in envelopes.iter().zip(results) {
                let what = format!("{}, {}, nonce={with_nonce}", sdk.label(), type_of(env));
                assert_eq!(env.signature.as_deref(), Some(py.sign.as_str()), "{what}");
                assert_eq!(py.verify, Some(true), "{what}");
            }
        }
    }
}

/// The wheel predates nonces: it drops the field, so it signs as if there were none, and
/// refuses our signature over a nonce. That is why `signing::apply` never adds one.
#[tokio::test]
async fn the_wheel_ignores_nonces() {
    let Some(python) = python(Sdk::Wheel, "Python signing interop") else {
        return;
    };
    let envelopes = our_signed_envelopes(true);
    let results = run_python(&python, &envelopes).await;
    for (env, py) in envelopes.iter().zip(results) {
        let mut without = env.clone();
        without.nonce = None;
        assert_eq!(
            py.sign,
            signing::sign(&without, SECRET.as_bytes(), Algorithm::Reference).unwrap(),
            "{}",
            type_of(env)
        );
        assert_eq!(py.verify, Some(false), "{}", type_of(env));
    }
}
