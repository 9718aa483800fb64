//! An answer's head as callers see it: the status, the pause it asks for and whether it is
//! JSON. Read by every
//! way an answer arrives (the pool, HTTPS) and handed to callers with the body
//! ([`super::HttpAnswer`], [`super::Events`]), so it lives apart from both.

use hyper::header::{HeaderMap, CONTENT_TYPE, RETRY_AFTER};
use hyper::StatusCode;
use std::time::Duration;

/// Longest `Retry-After` taken from an answer: a server cannot park a caller for longer.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(3600);

/// An answer's head: its status, and how long it asks the caller to wait (`Retry-After` in
/// seconds; an HTTP date is not read).
#[derive(Debug, Clone, Copy)]
pub struct Head {
    /// The HTTP status.
    pub status: StatusCode,
    /// `Retry-After`, at most an hour.
    pub retry_after: Option<Duration>,
    /// Whether its `Content-Type` is JSON (`application/json`, `…+json`): a stream asked for
    /// may come back whole from a server that does not stream.
    pub json: bool,
}

impl Head {
    pub(super) fn of(status: StatusCode, headers: &HeaderMap) -> Head {
        // Only a refusal asks to wait: a success's headers are not searched.
        let retry_after = (!status.is_success())
            .then(|| headers.get(RETRY_AFTER))
            .flatten()
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<f64>().ok())
            .filter(|s| s.is_finite() && *s >= 0.0)
            // Capped before it becomes a `Duration`: `1e30` seconds is no `Duration`, and
            // converting it first panicked.
            .map(|s| Duration::from_secs_f64(s.min(MAX_RETRY_AFTER.as_secs_f64())));
        let json = headers
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .map(|v| v.trim().to_ascii_lowercase())
            .is_some_and(|v| v == "application/json" || v.ends_with("+json"));
        Head {
            status,
            retry_after,
            json,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::header::HeaderValue;

    fn head(value: &str) -> Head {
        let mut h = HeaderMap::new();
        h.insert(RETRY_AFTER, HeaderValue::from_str(value).unwrap());
        Head::of(StatusCode::TOO_MANY_REQUESTS, &h)
    }

    #[test]
    fn a_json_answer_is_told_apart_from_a_stream() {
        let of = |v: &str| {
            let mut h = HeaderMap::new();
            h.insert(CONTENT_TYPE, HeaderValue::from_str(v).unwrap());
            Head::of(StatusCode::OK, &h).json
        };
        assert!(of("application/json"));
        assert!(of("Application/JSON; charset=utf-8"));
        assert!(of("application/problem+json"));
        assert!(!of("text/event-stream"));
        assert!(!Head::of(StatusCode::OK, &HeaderMap::new()).json);
    }

    #[test]
    fn retry_after_is_read_in_seconds_and_capped() {
        assert_eq!(head("3").retry_after, Some(Duration::from_secs(3)));
        assert_eq!(head(" 0.5 ").retry_after, Some(Duration::from_millis(500)));
        assert_eq!(head("99999999").retry_after, Some(MAX_RETRY_AFTER));
        // Past what a `Duration` holds: capped, never a panic.
        for huge in ["1e30", "1.8e19", "18446744073709551616", "1e308"] {
            assert_eq!(head(huge).retry_after, Some(MAX_RETRY_AFTER), "{huge}");
        }
        assert_eq!(head("inf").retry_after, None);
        assert_eq!(head("NaN").retry_after, None);
        assert_eq!(head("Wed, 21 Oct 2015 07:28:00 GMT").retry_after, None);
        assert_eq!(head("-1").retry_after, None);
        assert_eq!(
            Head::of(StatusCode::OK, &HeaderMap::new()).retry_after,
            None
        );
    }
}
