//! Envelope signatures: the reference SDKs' HMAC-SHA256 and our whole-envelope variant.
//!
//! Two algorithms, named on the wire by `signature_algorithm`; the signature itself is
//! lower-case hex in `signature`. Both are HMAC-SHA256 under a secret shared with the peer.
//!
//! # `hmac-sha256` ([`Algorithm::Reference`])
//!
//! Byte-compatible with `ldp-protocol` 0.2.0: the Rust crate's `signing::sign_envelope`, the
//! Python SDK bundled in its source, and the older PyPI wheel (which never sends a nonce, and
//! the input is the same whenever `nonce` is absent). The MAC input is
//!
//! ```text
//! from|to|session_id|timestamp|message_id[|nonce]|<body fields>|<TYPE>
//! ```
//!
//! where `<body fields>` is `delegate_id` (HELLO), `session_id` (SESSION_ACCEPT), `reason`
//! (SESSION_REJECT), `task_id|skill` (TASK_SUBMIT), `task_id` (TASK_UPDATE, TASK_RESULT,
//! TASK_FAILED, TASK_CANCEL) and empty for the other four types.
//!
//! **It covers** the routing ids, the session id, the timestamp, the message id, the nonce,
//! the message type, and the fields above (task id, skill, …). **It does not cover** the
//! session configuration, the task input and output, the contract, provenance, progress,
//! errors, capabilities, attestation claims, nor `payload_mode`: a peer on the path can
//! change any of these without breaking the signature. The fields are joined without escaping,
//! so `from = "a|b", to = "c"` and `from = "a", to = "b|c"` sign alike. These are properties
//! of the reference algorithm, kept for interoperability; use [`Algorithm::Body`] between
//! peers that both run this crate.
//!
//! One reading difference: a SESSION_REJECT without `reason` but with an `error` is read with
//! the error's message as its reason ([`Body::SessionReject`]), so its reference signature is
//! computed over that message where the Python SDK would use an empty reason. The SDKs'
//! own constructors always write `reason`, so their messages are not affected.
//!
//! # `hmac-sha256-body` ([`Algorithm::Body`])
//!
//! Ours. The MAC input is the domain tag `ldp-gateway/hmac-sha256-body/v1` and a newline,
//! then this crate's JSON serialisation of the [`Envelope`] with `signature` and
//! `signature_algorithm` removed. **It covers everything the parsed envelope holds**: every
//! envelope field (nonce included) and the whole body, task input and output, session config,
//! contract and provenance included.
//!
//! The canonical form is our serialisation *of the parsed model*, not the bytes received: the
//! verifier re-serialises what it parsed, and the signer's serialisation is what it sends.
//! Task input and output, which travel as their original text ([`super::Json`]), are signed
//! in their parsed form (keys sorted, no whitespace) for the same reason.
//! Hence key order and whitespace in the original bytes do not matter, but also: fields our
//! model does not keep (unknown keys) are **not** covered and may be added or changed freely,
//! and two wire forms that parse to the same model (an RFC-only payload mode and `text`, the
//! RFC `verified: true` and `verification_status: self_verified`, the manifest shapes) are the
//! same signed message. Numbers survive the round trip exactly because `serde_json` is built
//! with `float_roundtrip` (without it, about one float in ten re-serialises differently). Only
//! peers running this crate can verify it; the reference SDKs ignore `signature_algorithm`
//! and would report a mismatch.
//!
//! # Nonces and replay
//!
//! [`apply`] sets only `signature` and `signature_algorithm`, as the reference's
//! `apply_signature` does. For replay protection set `nonce` first ([`new_nonce`]), except
//! towards the PyPI wheel: it drops the unknown field and its verification would then fail.
//! A valid signature says nothing about freshness; pair [`verify`] with
//! [`super::replay::ReplayGuard`].

use super::body::Body;
use super::envelope::Envelope;
use hmac::digest::{Key, KeyInit};
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use std::fmt;

type HmacSha256 = Hmac<Sha256>;

/// Wire name of [`Algorithm::Reference`], as the reference SDKs write it.
pub const REFERENCE_ALGORITHM: &str = "hmac-sha256";

/// Wire name of [`Algorithm::Body`].
pub const BODY_ALGORITHM: &str = "hmac-sha256-body";

/// Prefix of the [`Algorithm::Body`] MAC input. It keeps the two algorithms' inputs apart
/// (and versions the canonical form should it ever change).
const BODY_DOMAIN: &[u8] = b"ldp-gateway/hmac-sha256-body/v1\n";

/// A signature algorithm. See the module documentation for what each covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// `hmac-sha256`: the reference SDKs' algorithm (ids, timestamp, nonce, type, task id and
    /// skill; not the payload).
    Reference,
    /// `hmac-sha256-body`: ours, over the whole parsed envelope.
    Body,
}

impl Algorithm {
    /// Both algorithms.
    pub const ALL: [Algorithm; 2] = [Algorithm::Reference, Algorithm::Body];

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Algorithm::Reference => REFERENCE_ALGORITHM,
            Algorithm::Body => BODY_ALGORITHM,
        }
    }

    /// Parses a wire name (exact match).
    pub fn parse(s: &str) -> Option<Algorithm> {
        Algorithm::ALL.into_iter().find(|a| a.as_str() == s)
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why an envelope could not be signed or its signature was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    /// The envelope has no `signature`.
    #[error("message is not signed")]
    Missing,
    /// `signature_algorithm` names an algorithm we do not implement.
    #[error("unknown signature algorithm `{0}`")]
    UnknownAlgorithm(String),
    /// The signature is not the MAC of this envelope under this secret (or is not hex).
    #[error("signature does not match")]
    Mismatch,
    /// The envelope could not be serialised into its canonical form. Serialising an
    /// [`Envelope`] does not fail (all map keys are strings); the error is passed on rather
    /// than assumed away, as [`Envelope::to_vec`] does.
    #[error("cannot serialise the envelope to sign it: {0}")]
    Encode(String),
}

/// The bytes `alg` authenticates for `env` (the `signature` fields are ignored). Exposed for
/// debugging interop and for tests; [`sign`] and [`verify`] are what callers need.
pub fn signing_input(env: &Envelope, alg: Algorithm) -> Result<Vec<u8>, SignatureError> {
    match alg {
        Algorithm::Reference => Ok(reference_input(env)),
        Algorithm::Body => body_input(env),
    }
}

/// The lower-case hex HMAC-SHA256 of `env` under `secret` with `alg`.
pub fn sign(env: &Envelope, secret: &[u8], alg: Algorithm) -> Result<String, SignatureError> {
    let mut mac = keyed(secret);
    mac.update(&signing_input(env, alg)?);
    Ok(hex::encode(mac.finalize().into_bytes()))
}

/// Signs `env` in place: sets `signature` and `signature_algorithm` (and nothing else, like
/// the reference's `apply_signature`; set `nonce` beforehand if the peer should get one).
pub fn apply(env: &mut Envelope, secret: &[u8], alg: Algorithm) -> Result<(), SignatureError> {
    let signature = sign(env, secret, alg)?;
    env.signature = Some(signature);
    env.signature_algorithm = Some(alg.as_str().to_owned());
    Ok(())
}

/// Checks `env`'s signature under `secret` and returns the algorithm it was signed with, in
/// constant time with respect to the expected MAC. An absent `signature_algorithm` means
/// [`Algorithm::Reference`]: the reference verifiers never read the field.
///
/// A caller that requires whole-envelope integrity must check that the result is
/// [`Algorithm::Body`]: a valid reference signature leaves the payload unprotected.
pub fn verify(env: &Envelope, secret: &[u8]) -> Result<Algorithm, SignatureError> {
    let signature = env.signature.as_deref().ok_or(SignatureError::Missing)?;
    let alg = match env.signature_algorithm.as_deref() {
        None => Algorithm::Reference,
        Some(name) => Algorithm::parse(name)
            .ok_or_else(|| SignatureError::UnknownAlgorithm(name.to_owned()))?,
    };
    let claimed = hex::decode(signature).map_err(|_| SignatureError::Mismatch)?;
    let mut mac = keyed(secret);
    mac.update(&signing_input(env, alg)?);
    mac.verify_slice(&claimed)
        .map_err(|_| SignatureError::Mismatch)?;
    Ok(alg)
}

/// A fresh nonce: 16 random bytes in lower-case hex, the form the reference SDK documents.
pub fn new_nonce() -> String {
    hex::encode(uuid::Uuid::new_v4().as_bytes())
}

/// An HMAC-SHA256 keyed with `secret`. RFC 2104 uses the key as one hash block: a shorter
/// key is zero-padded, a longer one hashed first. Doing that here lets us use the infallible
/// `KeyInit::new` rather than `new_from_slice`, whose error HMAC never returns.
fn keyed(secret: &[u8]) -> HmacSha256 {
    let mut block = Key::<HmacSha256>::default();
    if secret.len() > block.len() {
        let digest = Sha256::digest(secret);
        block[..digest.len()].copy_from_slice(&digest);
    } else {
        block[..secret.len()].copy_from_slice(secret);
    }
    <HmacSha256 as KeyInit>::new(&block)
}

/// `from|to|session_id|timestamp|message_id[|nonce]|<body fields>|<TYPE>`, exactly as the
/// reference SDKs build it.
fn reference_input(env: &Envelope) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    for (i, part) in [
        &env.from,
        &env.to,
        env.session_id.as_str(),
        &env.timestamp,
        &env.message_id,
    ]
    .into_iter()
    .enumerate()
    {
        if i > 0 {
            out.push(b'|');
        }
        out.extend_from_slice(part.as_bytes());
    }
    if let Some(nonce) = &env.nonce {
        out.push(b'|');
        out.extend_from_slice(nonce.as_bytes());
    }
    out.push(b'|');
    match &env.body {
        Body::Hello { delegate_id, .. } => out.extend_from_slice(delegate_id.as_bytes()),
        Body::SessionAccept { session_id, .. } => out.extend_from_slice(session_id.as_bytes()),
        Body::SessionReject { reason, .. } => out.extend_from_slice(reason.as_bytes()),
        Body::TaskSubmit { task_id, skill, .. } => {
            out.extend_from_slice(task_id.as_bytes());
            out.push(b'|');
            out.extend_from_slice(skill.as_bytes());
        }
        Body::TaskUpdate { task_id, .. }
        | Body::TaskResult { task_id, .. }
        | Body::TaskFailed { task_id, .. }
        | Body::TaskCancel { task_id } => out.extend_from_slice(task_id.as_bytes()),
        Body::CapabilityManifest { .. }
        | Body::SessionPropose { .. }
        | Body::Attestation { .. }
        | Body::SessionClose { .. } => {}
    }
    out.push(b'|');
    out.extend_from_slice(env.body.message_type().as_str().as_bytes());
    out
}

/// The domain tag, then our JSON of `env` without its signature fields. Cloning (rather than
/// serialising a borrowed copy of the fields) means a field added to [`Envelope`] later is
/// covered without touching this code.
fn body_input(env: &Envelope) -> Result<Vec<u8>, SignatureError> {
    let mut unsigned = Envelope {
        signature: None,
        signature_algorithm: None,
        ..env.clone()
    };
    // Task payloads travel as the text they came in: sign their parsed form, so that key
    // order and spacing on the wire do not matter (as for every other field). Text that does
    // not parse into a value cannot be signed nor verified.
    unsigned
        .body
        .canonicalize_payload()
        .map_err(|e| SignatureError::Encode(format!("task payload: {e}")))?;
    let mut out = BODY_DOMAIN.to_vec();
    serde_json::to_writer(&mut out, &unsigned)
        .map_err(|e| SignatureError::Encode(e.to_string()))?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::body::CapabilityManifest;
    use crate::error::LdpError;
    use crate::payload::PayloadMode;
    use crate::provenance::Provenance;
    use crate::session_config::SessionConfig;
    use serde_json::json;

    const SECRET: &[u8] = b"test-secret";

    fn envelope(body: Body) -> Envelope {
        Envelope {
            message_id: "m-1".into(),
            session_id: "s-1".into(),
            from: "client".into(),
            to: "gateway".into(),
            body,
            payload_mode: PayloadMode::Text,
            timestamp: "2026-01-01T00:00:00.000000Z".into(),
            provenance: None,
            signature: None,
            signature_algorithm: None,
            nonce: None,
        }
    }

    fn submit() -> Envelope {
        envelope(Body::TaskSubmit {
            task_id: "t-1".into(),
            skill: "echo".into(),
            input: json!({"text": "hi", "n": 0.1}).into(),
            contract: None,
        })
    }

    fn input(env: &Envelope) -> String {
        String::from_utf8(signing_input(env, Algorithm::Reference).unwrap()).unwrap()
    }

    #[test]
    fn algorithm_names_round_trip() {
        for alg in Algorithm::ALL {
            assert_eq!(Algorithm::parse(alg.as_str()), Some(alg));
            assert_eq!(alg.to_string(), alg.as_str());
        }
        assert_eq!(Algorithm::Reference.as_str(), "hmac-sha256");
        assert_eq!(Algorithm::Body.as_str(), "hmac-sha256-body");
        assert_eq!(Algorithm::parse("HMAC-SHA256"), None);
    }

    #[test]
    fn keyed_matches_new_from_slice_for_every_key_length() {
        for len in [0, 1, 11, 32, 63, 64, 65, 131, 500] {
            let key: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
            let mut ours = keyed(&key);
            let mut theirs = <HmacSha256 as Mac>::new_from_slice(&key).unwrap();
            ours.update(b"message");
            theirs.update(b"message");
            assert_eq!(
                ours.finalize().into_bytes(),
                theirs.finalize().into_bytes(),
                "key length {len}"
            );
        }
    }

    #[test]
    fn keyed_passes_rfc_4231_vectors() {
        // Test case 2 (short key) and 6 (131-byte key, hashed first).
        let mut mac = keyed(b"Jefe");
        mac.update(b"what do ya want for nothing?");
        assert_eq!(
            hex::encode(mac.finalize().into_bytes()),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        let mut mac = keyed(&[0xaa; 131]);
        mac.update(b"Test Using Larger Than Block-Size Key - Hash Key First");
        assert_eq!(
            hex::encode(mac.finalize().into_bytes()),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"
        );
    }

    #[test]
    fn reference_input_per_body_type() {
        let prefix = "client|gateway|s-1|2026-01-01T00:00:00.000000Z|m-1";
        let cases = [
            (
                Body::Hello {
                    delegate_id: "client".into(),
                    supported_modes: vec![PayloadMode::Text],
                },
                "client|HELLO",
            ),
            (
                Body::CapabilityManifest {
                    capabilities: CapabilityManifest::default(),
                },
                "|CAPABILITY_MANIFEST",
            ),
            (
                Body::SessionPropose {
                    config: SessionConfig::default(),
                },
                "|SESSION_PROPOSE",
            ),
            (
                Body::SessionAccept {
                    session_id: "s-2".into(),
                    negotiated_mode: PayloadMode::Text,
                    fallback_chain: vec![],
                },
                "s-2|SESSION_ACCEPT",
            ),
            (
                Body::SessionReject {
                    reason: "no".into(),
                    error: None,
                },
                "no|SESSION_REJECT",
            ),
            (submit().body, "t-1|echo|TASK_SUBMIT"),
            (
                Body::TaskUpdate {
                    task_id: "t-1".into(),
                    progress: Some(0.5),
                    message: None,
                },
                "t-1|TASK_UPDATE",
            ),
            (
                Body::TaskResult {
                    task_id: "t-1".into(),
                    output: json!(1).into(),
                    provenance: None,
                },
                "t-1|TASK_RESULT",
            ),
            (
                Body::TaskFailed {
                    task_id: "t-1".into(),
                    error: LdpError::from_text("boom"),
                },
                "t-1|TASK_FAILED",
            ),
            (
                Body::TaskCancel {
                    task_id: "t-1".into(),
                },
                "t-1|TASK_CANCEL",
            ),
            (
                Body::Attestation {
                    claim: json!({}),
                    evidence: json!([]),
                },
                "|ATTESTATION",
            ),
            (Body::SessionClose { reason: None }, "|SESSION_CLOSE"),
        ];
        assert_eq!(cases.len(), 12);
        for (body, tail) in cases {
            let mut env = envelope(body);
            assert_eq!(input(&env), format!("{prefix}|{tail}"));
            env.nonce = Some("n-1".into());
            assert_eq!(input(&env), format!("{prefix}|n-1|{tail}"));
        }
    }

    #[test]
    fn signature_is_lower_case_hex_of_the_input() {
        let env = submit();
        let sig = sign(&env, SECRET, Algorithm::Reference).unwrap();
        let mut mac = <HmacSha256 as Mac>::new_from_slice(SECRET).unwrap();
        mac.update(b"client|gateway|s-1|2026-01-01T00:00:00.000000Z|m-1|t-1|echo|TASK_SUBMIT");
        assert_eq!(sig, hex::encode(mac.finalize().into_bytes()));
        assert_eq!(sig.len(), 64);
        assert!(sig.chars().all(|c| matches!(c, '0'..='9' | 'a'..='f')));
    }

    #[test]
    fn apply_then_verify_round_trips_both_algorithms() {
        for alg in Algorithm::ALL {
            let mut env = submit();
            env.nonce = Some(new_nonce());
            apply(&mut env, SECRET, alg).unwrap();
            assert_eq!(env.signature_algorithm.as_deref(), Some(alg.as_str()));
            assert_eq!(verify(&env, SECRET), Ok(alg));
            // Through the wire too.
            let back = Envelope::from_slice(&env.to_vec().unwrap()).unwrap();
            assert_eq!(verify(&back, SECRET), Ok(alg));
        }
    }

    #[test]
    fn apply_sets_no_nonce() {
        let mut env = submit();
        apply(&mut env, SECRET, Algorithm::Reference).unwrap();
        assert_eq!(env.nonce, None);
    }

    #[test]
    fn unsigned_missing_and_unknown_algorithm() {
        let mut env = submit();
        assert_eq!(verify(&env, SECRET), Err(SignatureError::Missing));
        apply(&mut env, SECRET, Algorithm::Reference).unwrap();
        env.signature_algorithm = Some("hmac-md5".into());
        assert_eq!(
            verify(&env, SECRET),
            Err(SignatureError::UnknownAlgorithm("hmac-md5".into()))
        );
        // Absent algorithm: the reference verifiers never read it.
        env.signature_algorithm = None;
        assert_eq!(verify(&env, SECRET), Ok(Algorithm::Reference));
    }

    #[test]
    fn wrong_secret_bad_hex_and_truncation_fail() {
        let mut env = submit();
        apply(&mut env, SECRET, Algorithm::Body).unwrap();
        assert_eq!(verify(&env, b"other"), Err(SignatureError::Mismatch));
        let good = env.signature.clone().unwrap();
        env.signature = Some(good[..62].to_owned());
        assert_eq!(verify(&env, SECRET), Err(SignatureError::Mismatch));
        env.signature = Some("zz".repeat(32));
        assert_eq!(verify(&env, SECRET), Err(SignatureError::Mismatch));
        env.signature = Some(String::new());
        assert_eq!(verify(&env, SECRET), Err(SignatureError::Mismatch));
        // Upper-case hex of the right MAC is the same bytes.
        env.signature = Some(good.to_uppercase());
        assert_eq!(verify(&env, SECRET), Ok(Algorithm::Body));
    }

    #[test]
    fn relabelling_the_algorithm_fails() {
        for alg in Algorithm::ALL {
            let mut env = submit();
            apply(&mut env, SECRET, alg).unwrap();
            let other = match alg {
                Algorithm::Reference => Algorithm::Body,
                Algorithm::Body => Algorithm::Reference,
            };
            env.signature_algorithm = Some(other.as_str().into());
            assert_eq!(verify(&env, SECRET), Err(SignatureError::Mismatch));
        }
    }

    #[test]
    fn body_covers_the_payload_reference_does_not() {
        for (alg, input_change_detected) in [(Algorithm::Reference, false), (Algorithm::Body, true)]
        {
            let mut env = submit();
            apply(&mut env, SECRET, alg).unwrap();
            if let Body::TaskSubmit { input, .. } = &mut env.body {
                *input = json!({"text": "rm -rf /"}).into();
            }
            assert_eq!(
                verify(&env, SECRET).is_err(),
                input_change_detected,
                "{alg}"
            );

            let mut env = submit();
            apply(&mut env, SECRET, alg).unwrap();
            env.payload_mode = PayloadMode::SemanticFrame;
            assert_eq!(
                verify(&env, SECRET).is_err(),
                input_change_detected,
                "{alg}"
            );

            let mut env = submit();
            apply(&mut env, SECRET, alg).unwrap();
            env.provenance = Some(Provenance::new("d", "v", PayloadMode::Text));
            assert_eq!(
                verify(&env, SECRET).is_err(),
                input_change_detected,
                "{alg}"
            );
        }
    }

    #[test]
    fn payloads_sign_by_meaning_and_unreadable_ones_not_at_all() {
        let wire = |input: &str| {
            let bytes = format!(
                r#"{{"message_id":"m","session_id":"s","from":"c","to":"g","timestamp":"t",
                   "body":{{"type":"TASK_SUBMIT","task_id":"t1","skill":"x","input":{input}}}}}"#
            );
            Envelope::from_slice(bytes.as_bytes()).unwrap()
        };
        // Key order and spacing do not change the signature.
        let mut a = wire(r#"{"b": 1, "a": [2]}"#);
        apply(&mut a, SECRET, Algorithm::Body).unwrap();
        let mut b = wire(r#"{"a":[2],"b":1}"#);
        b.signature = a.signature.clone();
        b.signature_algorithm = a.signature_algorithm.clone();
        assert_eq!(verify(&b, SECRET), Ok(Algorithm::Body));
        // JSON that is no value (out-of-range number, lone surrogate) is neither signed nor
        // verified: it must not sign like anything else.
        for bad in [r#"{"n": 1e999}"#, r#""\udead""#] {
            let mut e = wire(bad);
            assert!(
                matches!(
                    apply(&mut e, SECRET, Algorithm::Body),
                    Err(SignatureError::Encode(_))
                ),
                "{bad}"
            );
            e.signature = a.signature.clone();
            e.signature_algorithm = a.signature_algorithm.clone();
            assert!(verify(&e, SECRET).is_err(), "{bad}");
        }
    }

    #[test]
    fn body_input_is_tagged_json_without_signature_fields() {
        let mut env = submit();
        env.nonce = Some("n".into());
        apply(&mut env, SECRET, Algorithm::Body).unwrap();
        let bytes = signing_input(&env, Algorithm::Body).unwrap();
        let json = bytes.strip_prefix(BODY_DOMAIN).unwrap();
        let v: serde_json::Value = serde_json::from_slice(json).unwrap();
        assert!(v.get("signature").is_none());
        assert!(v.get("signature_algorithm").is_none());
        assert_eq!(v["nonce"], "n");
        assert_eq!(v["body"]["input"]["text"], "hi");
    }

    #[test]
    fn body_ignores_key_order_and_unknown_fields() {
        let mut env = submit();
        apply(&mut env, SECRET, Algorithm::Body).unwrap();
        let mut v = serde_json::to_value(&env).unwrap();
        v["x_extension"] = json!("not covered");
        // serde_json::Value maps are sorted, so this also reorders the keys.
        let back = Envelope::from_slice(&serde_json::to_vec(&v).unwrap()).unwrap();
        assert_eq!(verify(&back, SECRET), Ok(Algorithm::Body));
    }

    #[test]
    fn full_precision_floats_survive_the_wire() {
        // Without serde_json's `float_roundtrip`, these re-serialise one digit short and the
        // body signature would not verify after a hop.
        let floats = [
            0.49295128722039555,
            154.29503903627779,
            2.7982510712172035e-7,
        ];
        let mut env = submit();
        if let Body::TaskSubmit { input, .. } = &mut env.body {
            *input = json!(floats).into();
        }
        apply(&mut env, SECRET, Algorithm::Body).unwrap();
        let back = Envelope::from_slice(&env.to_vec().unwrap()).unwrap();
        assert_eq!(back, env);
        assert_eq!(verify(&back, SECRET), Ok(Algorithm::Body));
    }

    proptest::proptest! {
        #[test]
        fn body_signatures_survive_the_wire_for_any_finite_float(
            x in proptest::num::f64::NORMAL | proptest::num::f64::SUBNORMAL | proptest::num::f64::ZERO,
            p in 0.0f64..1.0,
        ) {
            let mut env = envelope(Body::TaskUpdate {
                task_id: "t".into(),
                progress: Some(p),
                message: None,
            });
            env.provenance = Some(Provenance {
                confidence: Some(x),
                ..Provenance::new("d", "v", PayloadMode::Text)
            });
            apply(&mut env, SECRET, Algorithm::Body).unwrap();
            let back = Envelope::from_slice(&env.to_vec().unwrap()).unwrap();
            proptest::prop_assert_eq!(verify(&back, SECRET), Ok(Algorithm::Body));
        }
    }

    #[test]
    fn nonces_are_16_random_bytes_hex() {
        let (a, b) = (new_nonce(), new_nonce());
        assert_eq!(a.len(), 32);
        assert!(a
            .chars()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
        assert_ne!(a, b);
    }
}
