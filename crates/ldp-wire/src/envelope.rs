//! The message envelope (RFC §3.1), with the reference SDK's signature fields.

use super::body::{Body, BodyError, RawBody};
use super::ids::SessionId;
use super::payload::{ser_mode, PayloadMode};
use super::provenance::Provenance;
use serde::{Deserialize, Serialize};

/// One LDP message.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Envelope {
    /// Unique message id.
    pub message_id: String,
    /// Session id (`""` before a session exists).
    pub session_id: SessionId,
    /// Sender id.
    pub from: String,
    /// Recipient id.
    pub to: String,
    /// The message.
    pub body: Body,
    /// Mode of this message's payload (an RFC-only mode is written as `text`).
    #[serde(serialize_with = "ser_mode")]
    pub payload_mode: PayloadMode,
    /// RFC 3339 send time.
    pub timestamp: String,
    /// Envelope-level provenance (rarely used).
    pub provenance: Option<Provenance>,
    /// Reference SDK HMAC signature, hex.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
    /// Signature algorithm (`hmac-sha256`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signature_algorithm: Option<String>,
    /// Replay-protection nonce (newer SDK).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nonce: Option<String>,
}

/// Why bytes are not an envelope. Messages name the offending field.
#[derive(Debug, thiserror::Error)]
pub enum ParseError {
    /// Not JSON, or the envelope's own fields are wrong.
    #[error("invalid envelope: {0}")]
    Json(#[from] serde_json::Error),
    /// The body is wrong.
    #[error("invalid envelope: {0}")]
    Body(#[from] BodyError),
}

#[derive(Deserialize)]
struct RawEnvelope {
    #[serde(default)]
    message_id: Option<String>,
    #[serde(default)]
    session_id: Option<String>,
    #[serde(default)]
    from: Option<String>,
    #[serde(default)]
    to: Option<String>,
    body: RawBody,
    #[serde(default)]
    payload_mode: Option<PayloadMode>,
    #[serde(default)]
    timestamp: Option<String>,
    #[serde(default)]
    provenance: Option<Provenance>,
    #[serde(default)]
    signature: Option<String>,
    #[serde(default)]
    signature_algorithm: Option<String>,
    #[serde(default)]
    nonce: Option<String>,
}

impl Envelope {
    /// Reads an envelope from JSON bytes. Only `body` and `body.type` (plus the fields that
    /// type requires) are mandatory; absent envelope fields take the Python reference's
    /// defaults (`""`, `text`).
    pub fn from_slice(bytes: &[u8]) -> Result<Envelope, ParseError> {
        let raw: RawEnvelope = serde_json::from_slice(bytes)?;
        Ok(Envelope {
            message_id: raw.message_id.unwrap_or_default(),
            session_id: raw.session_id.unwrap_or_default().into(),
            from: raw.from.unwrap_or_default(),
            to: raw.to.unwrap_or_default(),
            body: raw.body.into_body()?,
            payload_mode: raw.payload_mode.unwrap_or(PayloadMode::Text),
            timestamp: raw.timestamp.unwrap_or_default(),
            provenance: raw.provenance.map(Provenance::normalized),
            signature: raw.signature,
            signature_algorithm: raw.signature_algorithm,
            nonce: raw.nonce,
        })
    }

    /// A new message with a fresh id and the current time.
    pub fn new(
        session_id: impl Into<SessionId>,
        from: impl Into<String>,
        to: impl Into<String>,
        body: Body,
        payload_mode: PayloadMode,
    ) -> Envelope {
        Envelope {
            message_id: super::new_message_id(),
            session_id: session_id.into(),
            from: from.into(),
            to: to.into(),
            body,
            payload_mode,
            timestamp: super::now_rfc3339(),
            provenance: None,
            signature: None,
            signature_algorithm: None,
            nonce: None,
        }
    }

    /// A reply to this message from `from`, in the same session.
    pub fn reply(&self, from: &str, body: Body, payload_mode: PayloadMode) -> Envelope {
        Envelope::new(
            self.session_id.clone(),
            from,
            self.from.clone(),
            body,
            payload_mode,
        )
    }

    /// Serialises to JSON bytes. Serialising these types cannot fail (string keys only), but
    /// the error is passed on rather than assumed away.
    pub fn to_vec(&self) -> Result<Vec<u8>, serde_json::Error> {
        serde_json::to_vec(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::body::MessageType;
    use crate::provenance::VerificationStatus;

    #[test]
    fn rfc_minimal_envelope_reads() {
        let e = Envelope::from_slice(
            br#"{"message_id":"m","session_id":"","from":"a","to":"b",
                "body":{"type":"HELLO","delegate_id":"a","supported_modes":["semantic_frame","text"]},
                "payload_mode":"text","timestamp":"2026-01-01T00:00:00Z","provenance":null}"#,
        )
        .unwrap();
        assert_eq!(e.body.message_type(), MessageType::Hello);
    }

    #[test]
    fn errors_name_the_field() {
        let err =
            Envelope::from_slice(br#"{"body":{"type":"TASK_SUBMIT","task_id":"t"}}"#).unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid envelope: TASK_SUBMIT is missing field `body.skill`"
        );
        let err = Envelope::from_slice(br#"{"message_id":"m"}"#).unwrap_err();
        assert!(err.to_string().contains("missing field `body`"), "{err}");
        let err = Envelope::from_slice(br#"{"body":{"type":"NOPE"}}"#).unwrap_err();
        assert!(err.to_string().contains("unknown message type `NOPE`"));
        let err = Envelope::from_slice(b"{not json").unwrap_err();
        assert!(matches!(err, ParseError::Json(_)));
    }

    #[test]
    fn task_failed_accepts_a_bare_string_error() {
        let e = Envelope::from_slice(
            br#"{"body":{"type":"TASK_FAILED","task_id":"t","error":"boom"}}"#,
        )
        .unwrap();
        match e.body {
            Body::TaskFailed { error, .. } => assert_eq!(error.message, "boom"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn rfc_verified_bool_is_normalised_on_read() {
        let e = Envelope::from_slice(
            br#"{"body":{"type":"TASK_RESULT","task_id":"t","output":1,
                "provenance":{"produced_by":"d","model_version":"v","verified":true}},
                "provenance":{"produced_by":"d","model_version":"v","verified":true}}"#,
        )
        .unwrap();
        let Body::TaskResult {
            provenance: Some(p),
            ..
        } = &e.body
        else {
            panic!("{:?}", e.body)
        };
        assert_eq!(p.verification_status, VerificationStatus::SelfVerified);
        let envelope_level = e.provenance.as_ref().unwrap();
        assert_eq!(
            envelope_level.verification_status,
            VerificationStatus::SelfVerified
        );
    }

    #[test]
    fn rfc_only_modes_are_written_as_text() {
        let mut p = Provenance::new("d", "v", PayloadMode::LatentCapsules);
        p.timestamp = None;
        let body = Body::SessionAccept {
            session_id: "s".into(),
            negotiated_mode: PayloadMode::CacheSlices,
            fallback_chain: vec![PayloadMode::Text],
        };
        let mut e = Envelope::new("s", "a", "b", body, PayloadMode::LatentCapsules);
        e.provenance = Some(p);
        let v = serde_json::to_value(&e).unwrap();
        assert_eq!(v["payload_mode"], "text");
        assert_eq!(v["body"]["negotiated_mode"], "text");
        assert_eq!(v["provenance"]["payload_mode_used"], "text");
    }

    #[test]
    fn message_ids_are_distinct_v4_uuids() {
        let a = super::super::new_message_id();
        let b = super::super::new_message_id();
        assert_ne!(a, b);
        let u = uuid::Uuid::parse_str(&a).unwrap();
        assert_eq!(u.get_version_num(), 4);
    }

    #[test]
    fn signature_fields_are_omitted_when_absent() {
        let e = Envelope::new(
            "s",
            "a",
            "b",
            Body::TaskCancel {
                task_id: "t".into(),
            },
            PayloadMode::Text,
        );
        let v = serde_json::to_value(&e).unwrap();
        assert!(v.get("signature").is_none());
        assert_eq!(v["body"]["type"], "TASK_CANCEL");
        let back = Envelope::from_slice(&e.to_vec().unwrap()).unwrap();
        assert_eq!(back, e);
    }
}
