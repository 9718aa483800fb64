//! Why a call to an LDP endpoint failed, and what that says (retryable, the delegate's fault,
//! the reason code, refusal or failure or transport).

use ldp_wire::{ErrorCategory, LdpError, TaskId, TrustViolation};
use std::time::Duration;

/// Why a call to a delegate failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    /// Could not connect (refused, reset before sending, DNS).
    #[error("cannot connect to {url}: {reason}")]
    Connect {
        /// Where.
        url: String,
        /// Why.
        reason: String,
    },
    /// No answer within the deadline.
    #[error("{url} did not answer within {after:?}")]
    Timeout {
        /// Where.
        url: String,
        /// The deadline.
        after: Duration,
    },
    /// A non-2xx answer.
    #[error("{url} answered HTTP {status}{}", error.as_ref().map(|e| format!(": {} {}", e.code, e.message)).unwrap_or_default())]
    Status {
        /// Where.
        url: String,
        /// HTTP status.
        status: u16,
        /// The `{"error": …}` body a gateway sends with it, if that is what came.
        error: Option<Box<LdpError>>,
    },
    /// The answer was not a usable LDP message.
    #[error("{url} sent an unreadable answer: {reason}")]
    Malformed {
        /// Where.
        url: String,
        /// Why.
        reason: String,
    },
    /// The delegate refused the session.
    #[error("session rejected: {reason}")]
    Rejected {
        /// The delegate's reason.
        reason: String,
        /// Its structured error, if any.
        error: Option<LdpError>,
    },
    /// The connection failed after the request was sent: the delegate may have started work.
    #[error("connection to {url} broke: {reason}")]
    Broken {
        /// Where.
        url: String,
        /// Why.
        reason: String,
    },
    /// The connection closed (or reset) before any answer began: the delegate never answered —
    /// typically a pooled keep-alive connection it closed as it went down.
    #[error("{url} closed the connection without answering: {reason}")]
    Unanswered {
        /// Where.
        url: String,
        /// Why.
        reason: String,
    },
    /// A stream ended before its final message.
    #[error("the stream from {url} ended before its final message")]
    StreamBroken {
        /// Where.
        url: String,
    },
    /// The delegate answered with a message type that makes no sense here.
    #[error("unexpected {got} from {url}")]
    Unexpected {
        /// Where.
        url: String,
        /// What came back.
        got: &'static str,
    },
    /// The client's own configuration cannot be used (an API key that is no header value).
    #[error("unusable client configuration: {reason}")]
    Config {
        /// Why.
        reason: String,
    },
    /// Not an `http(s)://` or `ldp(s)://` URL this build can call.
    #[error(transparent)]
    Url(#[from] crate::UrlError),
    /// The delegate's trust domain does not satisfy the requirement; no session was opened.
    #[error("{url} refused before any session: {violation}")]
    Untrusted {
        /// Where.
        url: String,
        /// Which check failed.
        violation: TrustViolation,
    },
    /// The task ran and failed, or was refused: the delegate's (or gateway's) TASK_FAILED.
    #[error("task failed: {} {}", error.code, error.message)]
    Failed {
        /// The delegate's error.
        error: Box<LdpError>,
    },
    /// The task was cancelled through this client.
    #[error("task {task_id} was cancelled")]
    Cancelled {
        /// Which.
        task_id: TaskId,
    },
    /// This client has no record of the task (never submitted here, or forgotten).
    #[error("no task {task_id} is known here")]
    UnknownTask {
        /// Which.
        task_id: TaskId,
    },
}

/// What kind of "no" an [`Error`] is, for callers that act on it (`ldp-gateway call`'s exit
/// code).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The endpoint or this client declined the work: a session rejected, a trust domain not
    /// satisfied, a 4xx answer (unauthenticated, rate-limited), or a TASK_FAILED in the
    /// identity, policy, capability, session or security categories.
    Refused,
    /// The task was taken and failed, or was cancelled.
    Failed,
    /// The exchange itself failed: no connection, no answer in time, a 5xx, an unreadable
    /// answer, a bad URL.
    Transport,
}

impl Error {
    /// Whether trying another delegate is safe and may help: nothing was started (connect),
    /// or the delegate gave up, never answered or answered nonsense (timeout, unanswered, 5xx,
    /// malformed, rejected, a broken stream). A connection that broke once the answer had
    /// begun is not: the delegate did the work.
    pub fn retryable(&self) -> bool {
        match self {
            Error::Connect { .. }
            | Error::Timeout { .. }
            | Error::Malformed { .. }
            | Error::Rejected { .. }
            | Error::Unanswered { .. }
            | Error::StreamBroken { .. }
            | Error::Unexpected { .. } => true,
            Error::Status { status, .. } => *status >= 500,
            Error::Failed { error } => error.retryable,
            Error::Broken { .. }
            | Error::Config { .. }
            | Error::Url(_)
            | Error::Untrusted { .. }
            | Error::Cancelled { .. }
            | Error::UnknownTask { .. } => false,
        }
    }

    /// Refusal, failure or transport.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Rejected { .. } | Error::Untrusted { .. } => ErrorKind::Refused,
            Error::Status { status, .. } if *status < 500 => ErrorKind::Refused,
            Error::Failed { error } => match error.category {
                ErrorCategory::Identity
                | ErrorCategory::Capability
                | ErrorCategory::Policy
                | ErrorCategory::Session
                | ErrorCategory::Security => ErrorKind::Refused,
                ErrorCategory::Runtime | ErrorCategory::Quality | ErrorCategory::Transport => {
                    ErrorKind::Failed
                }
            },
            Error::Cancelled { .. } | Error::UnknownTask { .. } => ErrorKind::Failed,
            Error::Connect { .. }
            | Error::Timeout { .. }
            | Error::Status { .. }
            | Error::Malformed { .. }
            | Error::Broken { .. }
            | Error::Unanswered { .. }
            | Error::StreamBroken { .. }
            | Error::Unexpected { .. }
            | Error::Config { .. }
            | Error::Url(_) => ErrorKind::Transport,
        }
    }

    /// Whether this says something about the delegate's health (a refused session does not).
    pub fn is_delegate_fault(&self) -> bool {
        match self {
            Error::Status { status, .. } => *status >= 500,
            Error::Rejected { .. }
            | Error::Config { .. }
            | Error::Url(_)
            | Error::Untrusted { .. }
            | Error::Failed { .. }
            | Error::Cancelled { .. }
            | Error::UnknownTask { .. } => false,
            _ => true,
        }
    }

    /// Low-cardinality reason for metrics and the ledger.
    pub fn reason(&self) -> &'static str {
        match self {
            Error::Connect { .. } => "connect",
            Error::Timeout { .. } => "timeout",
            Error::Status { status, .. } if *status >= 500 => "http_5xx",
            Error::Status { .. } => "http_4xx",
            Error::Malformed { .. } | Error::Unexpected { .. } => "malformed",
            Error::Rejected { .. } => "session_rejected",
            Error::Broken { .. } => "broken",
            Error::Unanswered { .. } => "unanswered",
            Error::StreamBroken { .. } => "stream_broken",
            Error::Config { .. } => "config",
            Error::Url(_) => "bad_url",
            Error::Untrusted { .. } => "untrusted",
            Error::Failed { .. } => "task_failed",
            Error::Cancelled { .. } => "cancelled",
            Error::UnknownTask { .. } => "unknown_task",
        }
    }
}
