//! LDP wire types: one internal model that reads both dialects in the wild.
//!
//! The RFC (seed `000_…`) and the reference SDK `ldp-protocol` 0.2.0 disagree on field names
//! and paths. Readers here accept both; writers emit a shape every known peer parses (see
//! `docs/ARCHITECTURE.md`, "Dialects"). This crate depends on no other LDP crate.

pub mod body;
pub mod contract;
pub mod envelope;
pub mod error;
pub mod identity;
pub mod ids;
pub mod json;
pub mod payload;
pub mod provenance;
pub mod replay;
pub mod session_config;
pub mod signing;
pub mod text;
pub mod trust;

pub use body::{Body, CapabilityManifest, ManifestError, MessageType};
pub use contract::{BudgetPolicy, DelegationContract};
pub use envelope::{Envelope, ParseError};
pub use error::{ErrorCategory, ErrorSeverity, LdpError};
pub use identity::{Capability, CapabilityHints, ClaimType, CostTier, IdentityCard};
pub use ids::{DelegateId, SessionId, TaskId};
pub use json::Json;
pub use payload::{negotiate, NegotiatedPayload, PayloadMode};
pub use provenance::{LineageEntry, Provenance, VerificationStatus};
pub use session_config::SessionConfig;
pub use trust::{TrustDomain, TrustViolation};

/// Current time as an RFC 3339 timestamp, the form both dialects write.
pub fn now_rfc3339() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

/// A fresh unguessable id (sessions): a UUID v4 from the operating system's generator.
pub fn new_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// A fresh id for a task the gateway names (a front end's request): a UUID v7, whose leading
/// time orders ids as they are made, so that the ledger's task-id indexes take each new row at
/// their end rather than on a random page (each a page written on the next commit). Unique and
/// hard to guess, but it tells when it was made: not for ids that guard access.
pub fn new_task_id() -> String {
    uuid::Uuid::now_v7().to_string()
}

/// A fresh unique message id: a UUID v4 drawn from the thread's fast generator (seeded
/// randomly), so that sending a message costs no system call. Not for ids that guard access.
pub fn new_message_id() -> String {
    let bytes = fastrand::u128(..).to_le_bytes();
    uuid::Builder::from_random_bytes(bytes)
        .into_uuid()
        .to_string()
}

#[cfg(test)]
mod tests {
    /// Task ids sort in the order they were made (the ledger's indexes take them at their
    /// end), and are distinct.
    #[test]
    fn task_ids_are_ordered_as_made() {
        let ids: Vec<String> = (0..2000).map(|_| super::new_task_id()).collect();
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
    }
}
