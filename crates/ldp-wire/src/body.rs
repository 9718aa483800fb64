//! The twelve message bodies, read leniently from either dialect and written in the shape
//! every SDK parses.

use super::contract::DelegationContract;
use super::error::LdpError;
use super::identity::Capability;
use super::ids::TaskId;
use super::json::Json;
use super::payload::{lenient_modes_opt, ser_mode, PayloadMode};
use super::provenance::Provenance;
use super::session_config::SessionConfig;
use serde::{Deserialize, Serialize, Serializer};

/// The capability list a CAPABILITY_MANIFEST carries.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CapabilityManifest {
    /// Skills offered.
    pub capabilities: Vec<Capability>,
    /// Modes supported; empty if the peer did not say (the Python reference's bare list).
    pub supported_modes: Vec<PayloadMode>,
}

impl Serialize for CapabilityManifest {
    fn serialize<S: Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Out<'a> {
            capabilities: &'a [Capability],
            supported_modes: Vec<PayloadMode>,
        }
        Out {
            capabilities: &self.capabilities,
            supported_modes: emittable(&self.supported_modes),
        }
        .serialize(ser)
    }
}

/// Why a capability manifest cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// A listed capability is neither a name nor a capability object.
    #[error("capability: {0}")]
    Capability(serde_json::Error),
    /// An object without a list of skills.
    #[error("manifest has neither `capabilities` nor `skills`")]
    NoList,
    /// Neither a list nor an object.
    #[error("manifest must be a list or an object")]
    Shape,
}

impl CapabilityManifest {
    /// Reads the three shapes in the wild: `{capabilities, supported_modes}` (Rust reference),
    /// a bare list (Python reference) and `{skills, supported_modes}` (RFC example). Skills may
    /// be capability objects or bare names.
    pub fn from_value(v: &serde_json::Value) -> Result<CapabilityManifest, ManifestError> {
        fn caps(list: &[serde_json::Value]) -> Result<Vec<Capability>, ManifestError> {
            list.iter()
                .map(|c| match c {
                    serde_json::Value::String(name) => Ok(Capability::named(name.clone())),
                    other => serde_json::from_value::<Capability>(other.clone())
                        .map_err(ManifestError::Capability),
                })
                .collect()
        }
        fn modes(v: Option<&serde_json::Value>) -> Vec<PayloadMode> {
            v.and_then(|m| m.as_array())
                .map(|a| {
                    a.iter()
                        .filter_map(|m| m.as_str().and_then(PayloadMode::parse))
                        .collect()
                })
                .unwrap_or_default()
        }
        match v {
            serde_json::Value::Array(list) => Ok(CapabilityManifest {
                capabilities: caps(list)?,
                supported_modes: Vec::new(),
            }),
            serde_json::Value::Object(o) => {
                let list = o
                    .get("capabilities")
                    .or_else(|| o.get("skills"))
                    .and_then(|l| l.as_array())
                    .ok_or(ManifestError::NoList)?;
                Ok(CapabilityManifest {
                    capabilities: caps(list)?,
                    supported_modes: modes(o.get("supported_modes")),
                })
            }
            _ => Err(ManifestError::Shape),
        }
    }
}

fn emittable(modes: &[PayloadMode]) -> Vec<PayloadMode> {
    modes.iter().copied().filter(|m| m.is_emittable()).collect()
}

fn ser_modes<S: Serializer>(modes: &[PayloadMode], ser: S) -> Result<S::Ok, S::Error> {
    emittable(modes).serialize(ser)
}

/// A message body. Serialized with its `type` tag in SCREAMING_SNAKE_CASE.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Body {
    /// Handshake opener.
    Hello {
        /// Sender's id.
        delegate_id: String,
        /// Sender's modes.
        #[serde(serialize_with = "ser_modes")]
        supported_modes: Vec<PayloadMode>,
    },
    /// Answer to HELLO.
    CapabilityManifest {
        /// The manifest.
        capabilities: CapabilityManifest,
    },
    /// Session proposal.
    SessionPropose {
        /// Its configuration.
        config: SessionConfig,
    },
    /// Session accepted.
    SessionAccept {
        /// The responder-issued session id.
        session_id: String,
        /// Agreed mode (an RFC-only mode is written as `text`).
        #[serde(serialize_with = "ser_mode")]
        negotiated_mode: PayloadMode,
        /// RFC: modes to fall back to (the SDKs ignore it).
        #[serde(serialize_with = "ser_modes")]
        fallback_chain: Vec<PayloadMode>,
    },
    /// Session refused.
    SessionReject {
        /// Why.
        reason: String,
        /// Structured error.
        #[serde(skip_serializing_if = "Option::is_none")]
        error: Option<LdpError>,
    },
    /// A task.
    TaskSubmit {
        /// Task id.
        task_id: TaskId,
        /// Skill to use.
        skill: String,
        /// Input, as sent (carried as JSON text, see [`Json`]).
        input: Json,
        /// Delegation contract.
        #[serde(skip_serializing_if = "Option::is_none")]
        contract: Option<DelegationContract>,
    },
    /// Progress.
    TaskUpdate {
        /// Task id.
        task_id: TaskId,
        /// 0..1.
        progress: Option<f64>,
        /// Status text.
        message: Option<String>,
    },
    /// Success.
    TaskResult {
        /// Task id.
        task_id: TaskId,
        /// Output, as produced (carried as JSON text, see [`Json`]).
        output: Json,
        /// Who produced it (RFC: MUST be present; the gateway always fills it).
        provenance: Option<Provenance>,
    },
    /// Failure.
    TaskFailed {
        /// Task id.
        task_id: TaskId,
        /// Why.
        error: LdpError,
    },
    /// Cancel a running task.
    TaskCancel {
        /// Task id.
        task_id: TaskId,
    },
    /// Trust attestation.
    Attestation {
        /// The claim.
        claim: serde_json::Value,
        /// Its evidence.
        evidence: serde_json::Value,
    },
    /// End the session.
    SessionClose {
        /// Why.
        reason: Option<String>,
    },
}

/// The message type of a body, without its fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MessageType {
    /// HELLO.
    Hello,
    /// CAPABILITY_MANIFEST.
    CapabilityManifest,
    /// SESSION_PROPOSE.
    SessionPropose,
    /// SESSION_ACCEPT.
    SessionAccept,
    /// SESSION_REJECT.
    SessionReject,
    /// TASK_SUBMIT.
    TaskSubmit,
    /// TASK_UPDATE.
    TaskUpdate,
    /// TASK_RESULT.
    TaskResult,
    /// TASK_FAILED.
    TaskFailed,
    /// TASK_CANCEL.
    TaskCancel,
    /// ATTESTATION.
    Attestation,
    /// SESSION_CLOSE.
    SessionClose,
}

impl MessageType {
    /// All twelve.
    pub const ALL: [MessageType; 12] = [
        MessageType::Hello,
        MessageType::CapabilityManifest,
        MessageType::SessionPropose,
        MessageType::SessionAccept,
        MessageType::SessionReject,
        MessageType::TaskSubmit,
        MessageType::TaskUpdate,
        MessageType::TaskResult,
        MessageType::TaskFailed,
        MessageType::TaskCancel,
        MessageType::Attestation,
        MessageType::SessionClose,
    ];

    /// The wire tag.
    pub fn as_str(self) -> &'static str {
        match self {
            MessageType::Hello => "HELLO",
            MessageType::CapabilityManifest => "CAPABILITY_MANIFEST",
            MessageType::SessionPropose => "SESSION_PROPOSE",
            MessageType::SessionAccept => "SESSION_ACCEPT",
            MessageType::SessionReject => "SESSION_REJECT",
            MessageType::TaskSubmit => "TASK_SUBMIT",
            MessageType::TaskUpdate => "TASK_UPDATE",
            MessageType::TaskResult => "TASK_RESULT",
            MessageType::TaskFailed => "TASK_FAILED",
            MessageType::TaskCancel => "TASK_CANCEL",
            MessageType::Attestation => "ATTESTATION",
            MessageType::SessionClose => "SESSION_CLOSE",
        }
    }

    /// Parses a wire tag.
    pub fn parse(s: &str) -> Option<MessageType> {
        MessageType::ALL.into_iter().find(|t| t.as_str() == s)
    }
}

/// The `message` of a TASK_UPDATE that asks for a task's status (the reference Rust adapter's
/// `status` and `stream` poll with it); answered with the stored outcome, or TASK_UPDATE
/// `submitted`/`working` while the task runs.
pub const STATUS_QUERY: &str = "status_query";

impl Body {
    /// Rewrites a task's input or output in its canonical form ([`Json::canonical`]): what the
    /// whole-envelope signature covers, so that what is forwarded is what was verified.
    pub fn canonicalize_payload(&mut self) -> Result<(), serde_json::Error> {
        if let Body::TaskSubmit { input: j, .. } | Body::TaskResult { output: j, .. } = self {
            *j = j.canonical()?;
        }
        Ok(())
    }

    /// This body's type.
    pub fn message_type(&self) -> MessageType {
        match self {
            Body::Hello { .. } => MessageType::Hello,
            Body::CapabilityManifest { .. } => MessageType::CapabilityManifest,
            Body::SessionPropose { .. } => MessageType::SessionPropose,
            Body::SessionAccept { .. } => MessageType::SessionAccept,
            Body::SessionReject { .. } => MessageType::SessionReject,
            Body::TaskSubmit { .. } => MessageType::TaskSubmit,
            Body::TaskUpdate { .. } => MessageType::TaskUpdate,
            Body::TaskResult { .. } => MessageType::TaskResult,
            Body::TaskFailed { .. } => MessageType::TaskFailed,
            Body::TaskCancel { .. } => MessageType::TaskCancel,
            Body::Attestation { .. } => MessageType::Attestation,
            Body::SessionClose { .. } => MessageType::SessionClose,
        }
    }

    /// The task asked about, if this is a status query (the reference Rust adapter's
    /// TASK_UPDATE whose `message` is [`STATUS_QUERY`]).
    pub fn status_query(&self) -> Option<&TaskId> {
        match self {
            Body::TaskUpdate {
                task_id,
                message: Some(m),
                ..
            } if m == STATUS_QUERY => Some(task_id),
            _ => None,
        }
    }

    /// The task id, for task messages.
    pub fn task_id(&self) -> Option<&str> {
        match self {
            Body::TaskSubmit { task_id, .. }
            | Body::TaskUpdate { task_id, .. }
            | Body::TaskResult { task_id, .. }
            | Body::TaskFailed { task_id, .. }
            | Body::TaskCancel { task_id } => Some(task_id),
            _ => None,
        }
    }
}

/// Every body field of every type, all optional: the flat form the Python reference uses.
/// Reading through it (instead of serde's internally tagged enum) gives errors that name the
/// missing field and its message type.
#[derive(Deserialize)]
pub(super) struct RawBody {
    #[serde(rename = "type")]
    kind: Option<String>,
    #[serde(default)]
    delegate_id: Option<String>,
    #[serde(default, deserialize_with = "lenient_modes_opt")]
    supported_modes: Option<Vec<PayloadMode>>,
    #[serde(default)]
    capabilities: Option<serde_json::Value>,
    #[serde(default)]
    skills: Option<serde_json::Value>,
    #[serde(default)]
    config: Option<serde_json::Value>,
    #[serde(default)]
    session_id: Option<String>,
    #[serde(default)]
    negotiated_mode: Option<PayloadMode>,
    #[serde(default, deserialize_with = "lenient_modes_opt")]
    fallback_chain: Option<Vec<PayloadMode>>,
    #[serde(default)]
    reason: Option<String>,
    #[serde(default)]
    error: Option<serde_json::Value>,
    #[serde(default)]
    task_id: Option<TaskId>,
    #[serde(default)]
    skill: Option<String>,
    #[serde(default)]
    input: Option<Json>,
    #[serde(default)]
    contract: Option<DelegationContract>,
    #[serde(default)]
    progress: Option<f64>,
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    output: Option<Json>,
    #[serde(default)]
    provenance: Option<Provenance>,
    #[serde(default)]
    claim: Option<serde_json::Value>,
    #[serde(default)]
    evidence: Option<serde_json::Value>,
}

/// Why a body could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BodyError {
    /// `body.type` is absent.
    #[error("missing field `body.type`")]
    MissingType,
    /// `body.type` names no LDP message.
    #[error("unknown message type `{0}`")]
    UnknownType(String),
    /// A field this type requires is absent.
    #[error("{kind} is missing field `body.{field}`")]
    MissingField {
        /// The message type.
        kind: &'static str,
        /// The field.
        field: &'static str,
    },
    /// A field is present but unusable.
    #[error("{kind} has an invalid `body.{field}`: {reason}")]
    InvalidField {
        /// The message type.
        kind: &'static str,
        /// The field.
        field: &'static str,
        /// Why.
        reason: String,
    },
}

impl RawBody {
    pub(super) fn into_body(self) -> Result<Body, BodyError> {
        let kind_str = self.kind.ok_or(BodyError::MissingType)?;
        let kind = MessageType::parse(&kind_str).ok_or(BodyError::UnknownType(kind_str))?;
        let name = kind.as_str();
        let need = |field: &'static str| BodyError::MissingField { kind: name, field };
        Ok(match kind {
            MessageType::Hello => Body::Hello {
                delegate_id: self.delegate_id.ok_or_else(|| need("delegate_id"))?,
                supported_modes: self
                    .supported_modes
                    .unwrap_or_else(|| vec![PayloadMode::Text]),
            },
            MessageType::CapabilityManifest => {
                let raw = self
                    .capabilities
                    .or(self.skills.map(|s| serde_json::json!({ "skills": s })))
                    .ok_or_else(|| need("capabilities"))?;
                let mut manifest =
                    CapabilityManifest::from_value(&raw).map_err(|e| BodyError::InvalidField {
                        kind: name,
                        field: "capabilities",
                        reason: e.to_string(),
                    })?;
                if manifest.supported_modes.is_empty() {
                    manifest.supported_modes = self.supported_modes.unwrap_or_default();
                }
                Body::CapabilityManifest {
                    capabilities: manifest,
                }
            }
            MessageType::SessionPropose => {
                let config = match self.config {
                    None | Some(serde_json::Value::Null) => SessionConfig::default(),
                    Some(v) => serde_json::from_value(v).map_err(|e| BodyError::InvalidField {
                        kind: name,
                        field: "config",
                        reason: e.to_string(),
                    })?,
                };
                Body::SessionPropose { config }
            }
            MessageType::SessionAccept => Body::SessionAccept {
                session_id: self.session_id.ok_or_else(|| need("session_id"))?,
                negotiated_mode: self.negotiated_mode.unwrap_or(PayloadMode::Text),
                fallback_chain: self.fallback_chain.unwrap_or_default(),
            },
            MessageType::SessionReject => {
                let error = self.error.map(read_error).transpose().map_err(|e| {
                    BodyError::InvalidField {
                        kind: name,
                        field: "error",
                        reason: e.to_string(),
                    }
                })?;
                let reason = self
                    .reason
                    .or_else(|| error.as_ref().map(|e| e.message.clone()))
                    .unwrap_or_default();
                Body::SessionReject { reason, error }
            }
            MessageType::TaskSubmit => Body::TaskSubmit {
                task_id: self.task_id.ok_or_else(|| need("task_id"))?,
                skill: self.skill.ok_or_else(|| need("skill"))?,
                input: self.input.unwrap_or_default(),
                contract: self.contract,
            },
            MessageType::TaskUpdate => Body::TaskUpdate {
                task_id: self.task_id.ok_or_else(|| need("task_id"))?,
                progress: self.progress,
                message: self.message,
            },
            MessageType::TaskResult => Body::TaskResult {
                task_id: self.task_id.ok_or_else(|| need("task_id"))?,
                output: self.output.unwrap_or_default(),
                provenance: self.provenance.map(Provenance::normalized),
            },
            MessageType::TaskFailed => {
                let error = match self.error {
                    Some(v) => read_error(v).map_err(|e| BodyError::InvalidField {
                        kind: name,
                        field: "error",
                        reason: e.to_string(),
                    })?,
                    None => LdpError::from_text(
                        self.reason
                            .or(self.message)
                            .unwrap_or_else(|| "task failed".into()),
                    ),
                };
                Body::TaskFailed {
                    task_id: self.task_id.unwrap_or_default(),
                    error,
                }
            }
            MessageType::TaskCancel => Body::TaskCancel {
                task_id: self.task_id.ok_or_else(|| need("task_id"))?,
            },
            MessageType::Attestation => Body::Attestation {
                claim: self.claim.unwrap_or(serde_json::Value::Null),
                evidence: self.evidence.unwrap_or(serde_json::Value::Null),
            },
            MessageType::SessionClose => Body::SessionClose {
                reason: self.reason,
            },
        })
    }
}

/// An error is an `LdpError` object or, from older peers, a bare string.
fn read_error(v: serde_json::Value) -> Result<LdpError, serde_json::Error> {
    match v {
        serde_json::Value::String(s) => Ok(LdpError::from_text(s)),
        other => serde_json::from_value(other),
    }
}
