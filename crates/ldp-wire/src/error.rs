//! `LdpError`: the structured error object both SDKs use, and the gateway's own codes.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Failure category. `Security` exists only in the newer SDK; the gateway reads it but never
/// emits it (the PyPI wheel would reject it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCategory {
    /// Who the caller is.
    Identity,
    /// What the delegate can do.
    Capability,
    /// What a policy allows.
    Policy,
    /// A failure while running the task.
    Runtime,
    /// The result's quality.
    Quality,
    /// Session state or the request itself.
    Session,
    /// Network or the delegate's HTTP answer.
    Transport,
    /// Signatures and replays (newer SDK only).
    Security,
}

/// Severity of a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorSeverity {
    /// Worth knowing.
    Warning,
    /// The operation failed.
    Error,
    /// The operation failed and retrying will not help.
    Fatal,
}

/// A structured LDP error.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LdpError {
    /// Stable, low-cardinality code (`SESSION_NOT_FOUND`, …).
    pub code: String,
    /// Failure category.
    pub category: ErrorCategory,
    /// Human-readable explanation.
    pub message: String,
    /// Severity.
    pub severity: ErrorSeverity,
    /// Whether the same request may succeed if retried.
    pub retryable: bool,
    /// Whatever the delegate produced before failing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partial_output: Option<serde_json::Value>,
}

impl LdpError {
    /// A new error with no partial output.
    pub fn new(
        code: impl Into<String>,
        category: ErrorCategory,
        severity: ErrorSeverity,
        retryable: bool,
        message: impl Into<String>,
    ) -> Self {
        LdpError {
            code: code.into(),
            category,
            message: message.into(),
            severity,
            retryable,
            partial_output: None,
        }
    }

    /// An error carrying one of the gateway's own codes, with the category, severity and
    /// retryability PRODUCT.md fixes for it.
    pub fn gateway(code: GatewayCode, message: impl Into<String>) -> Self {
        LdpError::new(
            code.as_str(),
            code.category(),
            code.severity(),
            code.retryable(),
            message,
        )
    }

    /// `UPSTREAM_FAILED` for one delegate's failure, retryable as its cause is (a delegate
    /// that refused the request outright is not worth retrying; one that timed out is).
    pub fn upstream_failed(message: impl Into<String>, retryable: bool) -> Self {
        let code = GatewayCode::UpstreamFailed;
        LdpError::new(
            code.as_str(),
            code.category(),
            code.severity(),
            retryable,
            message,
        )
    }

    /// The form of a bare-string error some peers send (`"error": "boom"`): a runtime failure.
    pub fn from_text(message: impl Into<String>) -> Self {
        LdpError::new(
            "TASK_FAILED",
            ErrorCategory::Runtime,
            ErrorSeverity::Error,
            true,
            message,
        )
    }

    /// The same error made safe for every SDK: `security` becomes `policy` (the PyPI wheel
    /// has no `security` category).
    pub fn emittable(mut self) -> Self {
        if self.category == ErrorCategory::Security {
            self.category = ErrorCategory::Policy;
        }
        self
    }
}

impl fmt::Display for LdpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

/// The error codes the gateway itself answers with (PRODUCT.md "Errors").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GatewayCode {
    /// Malformed JSON, a missing field, an unknown message type.
    BadRequest,
    /// Body over the configured limit.
    PayloadTooLarge,
    /// Missing or wrong key.
    Unauthenticated,
    /// A rate limit refused the request.
    RateLimited,
    /// A trust-domain claim was refused.
    TrustViolation,
    /// Unknown, expired, closed or someone else's session.
    SessionNotFound,
    /// A status query names a task that is unknown, expired from the store, or someone
    /// else's.
    TaskNotFound,
    /// No delegate passes the skill and the constraints.
    NoEligibleDelegate,
    /// A budget would be overshot.
    BudgetExceeded,
    /// The request named a policy that does not exist or its tenant may not use.
    UnknownPolicy,
    /// A session limit (overall or per tenant) is reached.
    SessionLimit,
    /// Every attempt upstream failed.
    UpstreamFailed,
    /// The task has passed through more gateways than `upstream.max_hops` (a routing loop).
    LoopDetected,
    /// Cluster mode: the shared state (Redis) did not answer, so a budget, session or replay
    /// check could not be made; refused rather than guessed.
    Unavailable,
    /// Every verified round's result was voted down by its verifiers (`[verify]`).
    VerificationFailed,
    /// The gateway's own fault.
    Internal,
}

impl GatewayCode {
    /// Every code.
    pub const ALL: [GatewayCode; 16] = [
        GatewayCode::BadRequest,
        GatewayCode::PayloadTooLarge,
        GatewayCode::Unauthenticated,
        GatewayCode::RateLimited,
        GatewayCode::TrustViolation,
        GatewayCode::SessionNotFound,
        GatewayCode::TaskNotFound,
        GatewayCode::NoEligibleDelegate,
        GatewayCode::BudgetExceeded,
        GatewayCode::UnknownPolicy,
        GatewayCode::SessionLimit,
        GatewayCode::UpstreamFailed,
        GatewayCode::LoopDetected,
        GatewayCode::Unavailable,
        GatewayCode::VerificationFailed,
        GatewayCode::Internal,
    ];

    /// The gateway code whose wire code is `code`, if it is one.
    pub fn from_wire(code: &str) -> Option<GatewayCode> {
        GatewayCode::ALL.into_iter().find(|c| c.as_str() == code)
    }

    /// The wire code.
    pub fn as_str(self) -> &'static str {
        match self {
            GatewayCode::BadRequest => "BAD_REQUEST",
            GatewayCode::PayloadTooLarge => "PAYLOAD_TOO_LARGE",
            GatewayCode::Unauthenticated => "UNAUTHENTICATED",
            GatewayCode::RateLimited => "RATE_LIMITED",
            GatewayCode::TrustViolation => "TRUST_VIOLATION",
            GatewayCode::SessionNotFound => "SESSION_NOT_FOUND",
            GatewayCode::TaskNotFound => "TASK_NOT_FOUND",
            GatewayCode::NoEligibleDelegate => "NO_ELIGIBLE_DELEGATE",
            GatewayCode::BudgetExceeded => "BUDGET_EXCEEDED",
            GatewayCode::UnknownPolicy => "UNKNOWN_POLICY",
            GatewayCode::SessionLimit => "SESSION_LIMIT",
            GatewayCode::UpstreamFailed => "UPSTREAM_FAILED",
            GatewayCode::LoopDetected => "LOOP_DETECTED",
            GatewayCode::Unavailable => "SHARED_STATE_UNAVAILABLE",
            GatewayCode::VerificationFailed => "VERIFICATION_FAILED",
            GatewayCode::Internal => "INTERNAL",
        }
    }

    /// The category PRODUCT.md assigns.
    pub fn category(self) -> ErrorCategory {
        match self {
            GatewayCode::BadRequest | GatewayCode::PayloadTooLarge => ErrorCategory::Session,
            GatewayCode::Unauthenticated => ErrorCategory::Identity,
            GatewayCode::RateLimited
            | GatewayCode::TrustViolation
            | GatewayCode::UnknownPolicy
            | GatewayCode::SessionLimit
            | GatewayCode::BudgetExceeded
            | GatewayCode::LoopDetected => ErrorCategory::Policy,
            GatewayCode::SessionNotFound | GatewayCode::TaskNotFound => ErrorCategory::Session,
            GatewayCode::NoEligibleDelegate => ErrorCategory::Capability,
            GatewayCode::UpstreamFailed | GatewayCode::Unavailable => ErrorCategory::Transport,
            GatewayCode::VerificationFailed => ErrorCategory::Quality,
            GatewayCode::Internal => ErrorCategory::Runtime,
        }
    }

    /// `fatal` for policy refusals, `error` otherwise.
    pub fn severity(self) -> ErrorSeverity {
        match self.category() {
            ErrorCategory::Policy => ErrorSeverity::Fatal,
            _ => ErrorSeverity::Error,
        }
    }

    /// Whether a client may retry the same request.
    pub fn retryable(self) -> bool {
        match self {
            GatewayCode::RateLimited
            | GatewayCode::UpstreamFailed
            | GatewayCode::SessionLimit
            | GatewayCode::Unavailable
            | GatewayCode::Internal => true,
            GatewayCode::BadRequest
            | GatewayCode::PayloadTooLarge
            | GatewayCode::Unauthenticated
            | GatewayCode::TrustViolation
            | GatewayCode::SessionNotFound
            | GatewayCode::TaskNotFound
            | GatewayCode::NoEligibleDelegate
            | GatewayCode::UnknownPolicy
            | GatewayCode::BudgetExceeded
            | GatewayCode::LoopDetected
            | GatewayCode::VerificationFailed => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn product_table_is_kept() {
        let e = LdpError::gateway(GatewayCode::RateLimited, "slow down");
        assert_eq!(
            (e.category, e.severity, e.retryable),
            (ErrorCategory::Policy, ErrorSeverity::Fatal, true)
        );
        let e = LdpError::gateway(GatewayCode::SessionNotFound, "gone");
        assert_eq!(
            (e.category, e.severity, e.retryable),
            (ErrorCategory::Session, ErrorSeverity::Error, false)
        );
        let e = LdpError::gateway(GatewayCode::TaskNotFound, "gone");
        assert_eq!(
            (e.code.as_str(), e.category, e.retryable),
            ("TASK_NOT_FOUND", ErrorCategory::Session, false)
        );
        let e = LdpError::gateway(GatewayCode::UpstreamFailed, "down");
        assert_eq!(e.category, ErrorCategory::Transport);
        assert!(e.retryable);
        assert_eq!(
            LdpError::gateway(GatewayCode::NoEligibleDelegate, "x").category,
            ErrorCategory::Capability
        );
    }

    #[test]
    fn security_is_never_emitted() {
        let e = LdpError::new(
            "REPLAY",
            ErrorCategory::Security,
            ErrorSeverity::Fatal,
            false,
            "r",
        );
        assert_eq!(e.emittable().category, ErrorCategory::Policy);
    }

    #[test]
    fn round_trip_keeps_every_field() {
        let mut e = LdpError::gateway(GatewayCode::BadRequest, "missing field `skill`");
        e.partial_output = Some(serde_json::json!({"x": 1}));
        let v = serde_json::to_value(&e).unwrap();
        for k in ["code", "category", "message", "severity", "retryable"] {
            assert!(v.get(k).is_some(), "{k}");
        }
        assert_eq!(serde_json::from_value::<LdpError>(v).unwrap(), e);
    }
}
