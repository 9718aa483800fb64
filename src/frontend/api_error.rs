//! Errors told once: every kind of error the gateway answers maps, in one exhaustive table
//! ([`telling`]), to its HTTP status, log level and a low-cardinality metric code. Answers
//! are built purely ([`ApiError`]'s `IntoResponse`, in LDP's form or a front end's own
//! [`Form`]); one layer ([`report`]) logs server faults with the request's ids and counts every
//! error by code.

use crate::ldp::error::GatewayCode;
use crate::ldp::LdpError;
use crate::proxy::{Refusal, Refused, RequestIds};
use crate::telemetry::Metrics;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use std::num::NonZeroU32;
use std::time::Duration;
use tracing::Level;

/// Every kind of error the HTTP layer answers with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// No route has this path (HTTP 404 with the `BAD_REQUEST` code).
    NoRoute,
    /// The request body did not arrive within the body deadline (HTTP 408, `BAD_REQUEST`).
    BodyTimeout,
    /// Admin: the name is taken; feedback: the task is rated already (HTTP 409,
    /// `BAD_REQUEST`).
    Conflict,
    /// One of the gateway's LDP error codes.
    Code(GatewayCode),
}

/// How one kind of error is told.
#[derive(Debug, Clone, Copy)]
pub struct Telling {
    /// The HTTP status of a `{"error": LdpError}` answer. (Protocol refusals inside an
    /// envelope are HTTP 200 whatever their code.)
    pub status: StatusCode,
    /// The level it is logged at: client mistakes below `INFO`, server faults at `ERROR`.
    pub level: Level,
    /// The `code` label of `ldp_gateway_errors_total`.
    pub code: &'static str,
}

/// The one table. Exhaustive: a new code must be given a status, a level and a metric code.
pub fn telling(kind: ErrorKind) -> Telling {
    use GatewayCode as C;
    use StatusCode as S;
    let (status, level, code) = match kind {
        ErrorKind::NoRoute => (S::NOT_FOUND, Level::DEBUG, "no_route"),
        ErrorKind::BodyTimeout => (S::REQUEST_TIMEOUT, Level::DEBUG, "body_timeout"),
        ErrorKind::Conflict => (S::CONFLICT, Level::DEBUG, "conflict"),
        ErrorKind::Code(c) => match c {
            C::BadRequest => (S::BAD_REQUEST, Level::DEBUG, "bad_request"),
            C::PayloadTooLarge => (S::PAYLOAD_TOO_LARGE, Level::DEBUG, "payload_too_large"),
            C::Unauthenticated => (S::UNAUTHORIZED, Level::DEBUG, "unauthenticated"),
            C::RateLimited => (S::TOO_MANY_REQUESTS, Level::DEBUG, "rate_limited"),
            C::SessionNotFound => (S::NOT_FOUND, Level::DEBUG, "session_not_found"),
            C::TaskNotFound => (S::NOT_FOUND, Level::DEBUG, "task_not_found"),
            C::NoEligibleDelegate => (S::NOT_FOUND, Level::INFO, "no_eligible_delegate"),
            C::TrustViolation => (S::FORBIDDEN, Level::DEBUG, "trust_violation"),
            C::BudgetExceeded => (S::FORBIDDEN, Level::DEBUG, "budget_exceeded"),
            C::UnknownPolicy => (S::FORBIDDEN, Level::DEBUG, "unknown_policy"),
            C::SessionLimit => (S::SERVICE_UNAVAILABLE, Level::INFO, "session_limit"),
            C::LoopDetected => (S::LOOP_DETECTED, Level::WARN, "loop_detected"),
            C::UpstreamFailed => (S::BAD_GATEWAY, Level::WARN, "upstream_failed"),
            C::VerificationFailed => (S::BAD_GATEWAY, Level::INFO, "verification_failed"),
            C::Unavailable => (
                S::SERVICE_UNAVAILABLE,
                Level::WARN,
                "shared_state_unavailable",
            ),
            C::Internal => (S::INTERNAL_SERVER_ERROR, Level::ERROR, "internal"),
        },
    };
    Telling {
        status,
        level,
        code,
    }
}

/// Every `code` label [`telling`] gives `ldp_gateway_errors_total`.
pub fn error_codes() -> Vec<&'static str> {
    let kinds = [
        ErrorKind::NoRoute,
        ErrorKind::BodyTimeout,
        ErrorKind::Conflict,
    ];
    let mut codes: Vec<&'static str> = kinds
        .into_iter()
        .chain(GatewayCode::ALL.into_iter().map(ErrorKind::Code))
        .map(|k| telling(k).code)
        .collect();
    codes.sort_unstable();
    codes.dedup();
    codes
}

/// An error answered as `{"error": LdpError}` with the status its kind is told with, or in a
/// front end's own [`Form`] (OpenAI's `{"error": {"message", "type", "param", "code"}}`).
#[derive(Debug)]
pub struct ApiError {
    kind: ErrorKind,
    error: LdpError,
    /// `Retry-After`, whole seconds (at least one: a niche keeps the error small).
    retry_after: Option<NonZeroU32>,
    ids: Option<Box<RequestIds>>,
    form: Option<Box<dyn Form>>,
}

/// A front end's own form of an error answer, written in place of `{"error": LdpError}`: the
/// front end says how its protocol writes an error; the status table, `Retry-After` and the
/// report stay the gateway's.
pub trait Form: std::fmt::Debug + Send + Sync {
    /// The status (`told.status`, unless the form knows better) and the body of the answer to
    /// `error` of `kind`.
    fn write(
        self: Box<Self>,
        error: &LdpError,
        kind: ErrorKind,
        told: Telling,
    ) -> (StatusCode, Response);
}

impl ApiError {
    /// An error with one of the gateway's codes.
    pub fn new(code: GatewayCode, message: impl Into<String>) -> Self {
        ApiError {
            kind: ErrorKind::Code(code),
            error: LdpError::gateway(code, message),
            retry_after: None,
            ids: None,
            form: None,
        }
    }

    /// An error of a kind the HTTP layer adds to the gateway's codes, answered with the
    /// LDP code `BAD_REQUEST`.
    pub fn of(kind: ErrorKind, message: impl Into<String>) -> Self {
        ApiError {
            kind,
            error: LdpError::gateway(GatewayCode::BadRequest, message),
            retry_after: None,
            ids: None,
            form: None,
        }
    }

    /// HTTP 429 `RATE_LIMITED` with a `Retry-After` of at least one second.
    pub fn rate_limited(scope: crate::limits::Scope, retry_after: Duration) -> Self {
        let mut e = ApiError::new(
            GatewayCode::RateLimited,
            format!(
                "{} rate limit reached; retry after {:.3} s",
                scope.as_str(),
                retry_after.as_secs_f64()
            ),
        );
        e.retry_after = Some(retry_secs(retry_after));
        e
    }

    /// The LDP error this answers with.
    pub fn error(&self) -> &LdpError {
        &self.error
    }

    /// An LDP error a task was answered with (a `TASK_FAILED`), told by its code: a gateway
    /// code as on the LDP routes, a delegate's own code as `UPSTREAM_FAILED`.
    pub fn task_failed(error: LdpError) -> Self {
        let code = GatewayCode::from_wire(&error.code).unwrap_or(GatewayCode::UpstreamFailed);
        ApiError {
            kind: ErrorKind::Code(code),
            error,
            // A delegate's rate limit: a second is as good a guess as any.
            retry_after: (code == GatewayCode::RateLimited).then_some(NonZeroU32::MIN),
            ids: None,
            form: None,
        }
    }

    /// With `Retry-After` of `wait` (at least a second), when it is a rate limit.
    pub fn with_retry_after(mut self, wait: Option<Duration>) -> Self {
        if let (Some(w), Some(_)) = (wait, self.retry_after) {
            self.retry_after = Some(retry_secs(w));
        }
        self
    }

    /// Written in `form` (a front end's own) rather than LDP's.
    pub fn in_form(mut self, form: impl Form + 'static) -> Self {
        self.form = Some(Box::new(form));
        self
    }

    /// Whether it is written in a front end's own form.
    pub fn has_form(&self) -> bool {
        self.form.is_some()
    }

    /// Its kind.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// How it is told.
    pub fn telling(&self) -> Telling {
        telling(self.kind)
    }
}

impl From<Refusal> for ApiError {
    fn from(r: Refusal) -> ApiError {
        match r {
            Refusal::BadRequest(m) => ApiError::new(GatewayCode::BadRequest, m),
            Refusal::Unauthenticated(m) => ApiError::new(GatewayCode::Unauthenticated, m),
            Refusal::RateLimited { scope, retry_after } => {
                ApiError::rate_limited(scope, retry_after)
            }
            Refusal::Unavailable(m) => ApiError::new(GatewayCode::Unavailable, m),
        }
    }
}

/// A ledger read or write as the client hears it: a busy or slow ledger (too many reads,
/// a read past its deadline, the writer stopping, a store too far behind to take a row) is
/// `UNAVAILABLE` (503, worth retrying), wherever it is met; anything else is the gateway's
/// fault (500), told in general terms (its detail, which may name files or the store, is
/// logged, never sent).
impl From<&crate::provenance::LedgerError> for ApiError {
    fn from(e: &crate::provenance::LedgerError) -> ApiError {
        use crate::provenance::LedgerError as L;
        let code = match e {
            L::ReadsBusy(_) | L::ReadTimeout(_) | L::Closed | L::Overloaded(_) => {
                GatewayCode::Unavailable
            }
            L::BadStore(_)
            | L::Postgres(_)
            | L::Sqlite(_)
            | L::Io { .. }
            | L::Write(_)
            | L::LastBatchFailed(_)
            | L::Corrupt(_)
            | L::Detached { .. }
            | L::SchemaTooNew { .. }
            | L::Journal { .. } => {
                tracing::error!(error = %e, "provenance ledger failed");
                return ApiError::new(GatewayCode::Internal, "the provenance ledger failed");
            }
        };
        ApiError::new(code, e.to_string())
    }
}

impl From<Refused> for ApiError {
    fn from(r: Refused) -> ApiError {
        ApiError {
            ids: Some(Box::new(r.ids)),
            ..ApiError::from(r.refusal)
        }
    }
}

/// Whole seconds to wait, at least one (`Retry-After`).
fn retry_secs(wait: Duration) -> NonZeroU32 {
    let secs = wait.as_secs_f64().ceil().clamp(1.0, f64::from(u32::MAX)) as u32;
    NonZeroU32::new(secs).unwrap_or(NonZeroU32::MIN)
}

/// What [`report`] needs of an error answer, left in the response's extensions.
#[derive(Debug, Clone)]
struct Told {
    telling: Telling,
    message: String,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let telling = telling(self.kind);
        let (status, body) = match self.form {
            None => (
                telling.status,
                axum::Json(serde_json::json!({ "error": self.error })).into_response(),
            ),
            Some(form) => form.write(&self.error, self.kind, telling),
        };
        let mut resp = match self.retry_after {
            Some(secs) => (
                status,
                [(axum::http::header::RETRY_AFTER, secs.to_string())],
                body,
            )
                .into_response(),
            None => (status, body).into_response(),
        };
        // Server faults keep their message for the log line; a client's mistake needs none.
        let message = if telling.level <= Level::WARN {
            self.error.message
        } else {
            String::new()
        };
        resp.extensions_mut().insert(Told { telling, message });
        if let Some(ids) = self.ids {
            resp.extensions_mut().insert(*ids);
        }
        resp
    }
}

/// What a client is told of a fault inside the gateway (a panic): nothing of its text.
const INTERNAL_MESSAGE: &str = "internal error in the gateway";

/// The answer for a request whose work ended without one: its task panicked (counted and
/// logged here with the panic's text, which is never answered) or was cut at shutdown.
pub(crate) fn task_lost(metrics: &Metrics, e: tokio::task::JoinError) -> ApiError {
    match e.try_into_panic() {
        Ok(payload) => metrics.panicked("request", payload.as_ref()),
        Err(e) => tracing::warn!(error = %e, "a request's task ended without an answer"),
    }
    ApiError::new(GatewayCode::Internal, INTERNAL_MESSAGE)
}

/// A listener's error form, for the answer to a panic of its handlers.
pub(crate) type Shape = std::sync::Arc<dyn Fn(ApiError) -> Response + Send + Sync>;

/// The layer that keeps a panic from reaching a client, for a listener answering in one
/// protocol (the admin listener, in LDP's): a handler that panics is answered with a generic
/// 500 in that protocol's error form (`shape`), and the panic is counted and logged, never
/// answered. (The LDP listener's routes each answer in their own protocol's: its one layer
/// calls [`caught`] with the shape its route table names.)
pub(crate) async fn catch_panics_shaped(
    axum::extract::State((metrics, shape)): axum::extract::State<(std::sync::Arc<Metrics>, Shape)>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    caught(&metrics, req, next, |e| shape(e)).await
}

/// Runs the rest of the request; a panic is counted and answered by `answer` with
/// [`INTERNAL_MESSAGE`].
pub(crate) async fn caught(
    metrics: &Metrics,
    req: axum::extract::Request,
    next: axum::middleware::Next,
    answer: impl FnOnce(ApiError) -> Response,
) -> Response {
    use futures_util::FutureExt as _;
    match std::panic::AssertUnwindSafe(next.run(req))
        .catch_unwind()
        .await
    {
        Ok(resp) => resp,
        Err(payload) => {
            metrics.panicked("request", payload.as_ref());
            answer(ApiError::new(GatewayCode::Internal, INTERNAL_MESSAGE))
        }
    }
}

/// The one layer that reports errors: counts every error answer by code and logs it at its
/// level, with the route and, when the envelope was read, its ids.
pub(crate) fn report(metrics: &Metrics, route: &str, resp: &Response) {
    let Some(told) = resp.extensions().get::<Told>() else {
        return;
    };
    let t = told.telling;
    metrics.errors.with_label_values(&[t.code]).inc();
    let ids = resp
        .extensions()
        .get::<RequestIds>()
        .cloned()
        .unwrap_or_default();
    let (mid, sid, msg) = (
        ids.message_id.as_str(),
        ids.session_id.as_str(),
        told.message.as_str(),
    );
    match t.level {
        Level::ERROR => tracing::error!(
            route,
            code = t.code,
            message_id = mid,
            session_id = sid,
            error = msg,
            "request failed"
        ),
        Level::WARN => tracing::warn!(
            route,
            code = t.code,
            message_id = mid,
            session_id = sid,
            error = msg,
            "request failed"
        ),
        Level::INFO => tracing::info!(
            route,
            code = t.code,
            message_id = mid,
            session_id = sid,
            "request refused"
        ),
        _ => tracing::debug!(
            route,
            code = t.code,
            message_id = mid,
            session_id = sid,
            "request refused"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_panicking_handler_is_answered_in_its_route_group_s_own_shape() {
        let metrics = std::sync::Arc::new(Metrics::new().unwrap());
        let shape: Shape = std::sync::Arc::new(|e| {
            let text = format!("shaped: {}", e.error().message);
            (StatusCode::INTERNAL_SERVER_ERROR, text).into_response()
        });
        let boom = || async {
            if std::hint::black_box(true) {
                panic!("secret panic text");
            }
            "never"
        };
        let app = axum::Router::new()
            .route("/boom", axum::routing::get(boom))
            .layer(axum::middleware::from_fn_with_state(
                (metrics.clone(), shape),
                catch_panics_shaped,
            ));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/boom", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        let resp = reqwest::get(&url).await.unwrap();
        assert_eq!(resp.status().as_u16(), 500);
        assert_eq!(
            resp.text().await.unwrap(),
            format!("shaped: {INTERNAL_MESSAGE}")
        );
        assert_eq!(metrics.panics.with_label_values(&["request"]).get(), 1);
    }

    #[test]
    fn only_the_gateways_own_faults_are_5xx_and_logged_at_error() {
        let all = [
            GatewayCode::BadRequest,
            GatewayCode::PayloadTooLarge,
            GatewayCode::Unauthenticated,
            GatewayCode::RateLimited,
            GatewayCode::SessionNotFound,
            GatewayCode::TaskNotFound,
            GatewayCode::NoEligibleDelegate,
            GatewayCode::TrustViolation,
            GatewayCode::BudgetExceeded,
            GatewayCode::UnknownPolicy,
            GatewayCode::SessionLimit,
            GatewayCode::LoopDetected,
            GatewayCode::UpstreamFailed,
            GatewayCode::Unavailable,
            GatewayCode::VerificationFailed,
            GatewayCode::Internal,
        ];
        for c in all {
            let t = telling(ErrorKind::Code(c));
            // Metric codes are the wire codes, lower-cased (bounded, stable).
            assert_eq!(t.code.to_uppercase(), c.as_str(), "{c:?}");
            if t.status.is_client_error() {
                assert!(
                    t.level > Level::WARN,
                    "{c:?}: a client mistake is not a warning"
                );
            }
            assert_eq!(t.level == Level::ERROR, c == GatewayCode::Internal, "{c:?}");
        }
        assert_eq!(telling(ErrorKind::NoRoute).status, StatusCode::NOT_FOUND);
    }
}
