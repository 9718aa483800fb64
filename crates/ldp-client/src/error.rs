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
            // Another delegate may answer what this one would not, unless the request
            // itself is at fault.
            Error::Status { status, .. } => !requests_own(*status),
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
            Error::Status { status, .. } if (400..500).contains(status) => ErrorKind::Refused,
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
            // A redirect, a proxy asking for credentials, a 304 to a POST, a 5xx: the
            // delegate is broken. The request's own refusal and a rate limit are not faults.
            Error::Status { status, .. } => !requests_own(*status) && *status != 429,
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

    /// What the error says without where it happened or what the other side wrote (no URL,
    /// no upstream text): fit for a message to someone other than the operator. Read as
    /// "the delegate {summary}".
    pub fn summary(&self) -> Summary<'_> {
        Summary(self)
    }

    /// Low-cardinality reason for metrics and the ledger.
    pub fn reason(&self) -> &'static str {
        match self {
            Error::Connect { .. } => "connect",
            Error::Timeout { .. } => "timeout",
            Error::Status { status, .. } => status_reason(*status),
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

/// Statuses that refuse the request itself (malformed, too large, unprocessable): the same
/// request fails anywhere, so it is the caller's answer, not a reason to try elsewhere.
pub fn requests_own(status: u16) -> bool {
    matches!(status, 400 | 413 | 422)
}

/// The low-cardinality reason of a non-2xx status: `loop_detected` (508: a gateway behind
/// refused a routing loop), else `http_3xx`, `http_4xx` or `http_5xx` (anything else,
/// `http_other`).
pub fn status_reason(status: u16) -> &'static str {
    match status {
        508 => "loop_detected",
        300..=399 => "http_3xx",
        400..=499 => "http_4xx",
        500..=599 => "http_5xx",
        _ => "http_other",
    }
}

/// An HTTP status as a client may be told it: `HTTP 502 Bad Gateway`.
pub fn status_text(status: u16) -> StatusText {
    StatusText(status)
}

/// See [`status_text`].
#[derive(Debug, Clone, Copy)]
pub struct StatusText(u16);

impl std::fmt::Display for StatusText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let phrase = hyper::StatusCode::from_u16(self.0)
            .ok()
            .and_then(|s| s.canonical_reason());
        match phrase {
            Some(p) => write!(f, "HTTP {} {p}", self.0),
            None => write!(f, "HTTP {}", self.0),
        }
    }
}

/// [`Error::summary`]: the error told without its URL or the other side's text.
#[derive(Debug, Clone, Copy)]
pub struct Summary<'a>(&'a Error);

impl std::fmt::Display for Summary<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Error::Connect { .. } => f.write_str("could not be reached"),
            Error::Timeout { after, .. } => write!(f, "did not answer within {after:?}"),
            Error::Status { status, .. } => write!(f, "answered {}", status_text(*status)),
            Error::Malformed { .. } => f.write_str("sent an unreadable answer"),
            Error::Rejected { .. } => f.write_str("refused the session"),
            Error::Broken { .. } => f.write_str("broke the connection while answering"),
            Error::Unanswered { .. } => f.write_str("closed the connection without answering"),
            Error::StreamBroken { .. } => {
                f.write_str("ended before its final message (a broken stream)")
            }
            Error::Unexpected { got, .. } => write!(f, "answered with an unexpected {got}"),
            Error::Config { .. } => {
                f.write_str("cannot be called with this client's configuration")
            }
            Error::Url(_) => f.write_str("has a URL this build cannot call"),
            Error::Untrusted { .. } => f.write_str("is not in a trust domain this session accepts"),
            Error::Failed { error } => match code_shown(&error.code) {
                Some(code) => write!(f, "failed the task ({code})"),
                None => f.write_str("failed the task"),
            },
            Error::Cancelled { .. } => f.write_str("had the task cancelled"),
            Error::UnknownTask { .. } => f.write_str("has no record of the task"),
        }
    }
}

/// A delegate's error code, if it reads as one (`UPPER_SNAKE`, at most 64 bytes): a code is
/// shown to clients, free text is not.
pub fn code_shown(code: &str) -> Option<&str> {
    let ok = !code.is_empty()
        && code.len() <= 64
        && code
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_');
    ok.then_some(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: u16) -> Error {
        Error::Status {
            url: "http://10.0.0.7:9000/ldp/messages".into(),
            status: code,
            error: Some(Box::new(LdpError::new(
                "INTERNAL",
                ErrorCategory::Runtime,
                ldp_wire::ErrorSeverity::Error,
                true,
                "db at 10.0.0.8 refused password CANARY",
            ))),
        }
    }

    #[test]
    fn only_the_requests_own_statuses_are_its_answer() {
        // (status, retryable, the delegate's fault, kind, reason)
        let table = [
            (302, true, true, ErrorKind::Transport, "http_3xx"),
            (304, true, true, ErrorKind::Transport, "http_3xx"),
            (401, true, true, ErrorKind::Refused, "http_4xx"),
            (407, true, true, ErrorKind::Refused, "http_4xx"),
            (429, true, false, ErrorKind::Refused, "http_4xx"),
            (400, false, false, ErrorKind::Refused, "http_4xx"),
            (413, false, false, ErrorKind::Refused, "http_4xx"),
            (422, false, false, ErrorKind::Refused, "http_4xx"),
            (500, true, true, ErrorKind::Transport, "http_5xx"),
            (508, true, true, ErrorKind::Transport, "loop_detected"),
        ];
        for (code, retryable, fault, kind, reason) in table {
            let e = status(code);
            assert_eq!(e.retryable(), retryable, "{code}");
            assert_eq!(e.is_delegate_fault(), fault, "{code}");
            assert_eq!(e.kind(), kind, "{code}");
            assert_eq!(e.reason(), reason, "{code}");
        }
    }

    #[test]
    fn a_summary_has_no_address_and_no_upstream_text() {
        let e = status(500);
        assert!(e.to_string().contains("CANARY"), "the detail keeps it: {e}");
        assert_eq!(
            e.summary().to_string(),
            "answered HTTP 500 Internal Server Error"
        );
        assert_eq!(
            status(508).summary().to_string(),
            "answered HTTP 508 Loop Detected"
        );
        let connect = Error::Connect {
            url: "http://10.0.0.7:9000".into(),
            reason: "refused".into(),
        };
        assert_eq!(connect.summary().to_string(), "could not be reached");
        let failed = |code: &str| Error::Failed {
            error: Box::new(LdpError::new(
                code,
                ErrorCategory::Runtime,
                ldp_wire::ErrorSeverity::Error,
                true,
                "CANARY",
            )),
        };
        assert_eq!(
            failed("MODEL_OVERLOADED").summary().to_string(),
            "failed the task (MODEL_OVERLOADED)"
        );
        // A code that is free text is not shown.
        assert_eq!(
            failed("see http://10.0.0.8").summary().to_string(),
            "failed the task"
        );
    }
}
