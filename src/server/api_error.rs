//! Errors told once: every kind of error the gateway answers maps, in one exhaustive table
//! ([`telling`]), to its HTTP status, log level and a low-cardinality metric code. Answers
//! are built purely ([`ApiError`]'s `IntoResponse`); one layer ([`report`]) logs server
//! faults with the request's ids and counts every error by code.

use crate::ldp::error::GatewayCode;
use crate::ldp::LdpError;
use crate::proxy::{Refusal, Refused, RequestIds};
use crate::telemetry::Metrics;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use openai_wire::ErrorDetail;
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

/// An error answered as `{"error": LdpError}` with the status its kind is told with (on the
/// OpenAI routes: OpenAI's `{"error": {"message", "type", "param", "code"}}`, same status).
#[derive(Debug)]
pub struct ApiError {
    kind: ErrorKind,
    error: LdpError,
    retry_after: Option<u32>,
    ids: Option<Box<RequestIds>>,
    openai: Option<Box<OpenAiShape>>,
}

/// How an error is written on the OpenAI routes.
#[derive(Debug, Default)]
struct OpenAiShape {
    /// The status, when it is not the kind's (an upstream's own refusal, passed on).
    status: Option<StatusCode>,
    /// The fields, when they are not derived from the LDP error.
    detail: Option<ErrorDetail>,
    /// The request field at fault.
    param: Option<String>,
}

/// OpenAI's `type` for an HTTP status.
fn openai_type(status: StatusCode) -> &'static str {
    match status.as_u16() {
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        429 => "rate_limit_error",
        s if s >= 500 => "server_error",
        _ => "invalid_request_error",
    }
}

impl ApiError {
    /// An error with one of the gateway's codes.
    pub fn new(code: GatewayCode, message: impl Into<String>) -> Self {
        ApiError {
            kind: ErrorKind::Code(code),
            error: LdpError::gateway(code, message),
            retry_after: None,
            ids: None,
            openai: None,
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
            openai: None,
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
            retry_after: (code == GatewayCode::RateLimited).then_some(1),
            ids: None,
            openai: None,
        }
    }

    /// With `Retry-After` of `wait` (at least a second), when it is a rate limit.
    pub fn with_retry_after(mut self, wait: Option<Duration>) -> Self {
        if let (Some(w), Some(_)) = (wait, self.retry_after) {
            self.retry_after = Some(retry_secs(w));
        }
        self
    }

    /// Written in OpenAI's shape (the OpenAI routes).
    pub fn openai(mut self) -> Self {
        self.openai.get_or_insert_with(Default::default);
        self
    }

    /// In OpenAI's shape, naming the request field at fault.
    pub fn openai_param(mut self, param: impl Into<String>) -> Self {
        self.openai.get_or_insert_with(Default::default).param = Some(param.into());
        self
    }

    /// In OpenAI's shape with exactly these fields (OpenAI's own answer to a case the
    /// gateway's codes do not name, such as an unknown URL).
    pub fn openai_detail(mut self, detail: ErrorDetail) -> Self {
        self.openai.get_or_insert_with(Default::default).detail = Some(detail);
        self
    }

    /// An OpenAI-backed delegate's own refusal of the request (`error`, the TASK_FAILED
    /// `BAD_REQUEST` the task was answered with), passed on with its status and fields.
    pub fn openai_upstream(error: LdpError, status: u16, detail: ErrorDetail) -> Self {
        let mut e = ApiError::task_failed(error);
        e.openai = Some(Box::new(OpenAiShape {
            status: StatusCode::from_u16(status).ok(),
            detail: Some(detail),
            param: None,
        }));
        e
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
fn retry_secs(wait: Duration) -> u32 {
    wait.as_secs_f64().ceil().clamp(1.0, f64::from(u32::MAX)) as u32
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
        let (status, body) = match self.openai {
            None => (
                telling.status,
                axum::Json(serde_json::json!({ "error": self.error })),
            ),
            Some(shape) => {
                let OpenAiShape {
                    status,
                    detail,
                    param,
                } = *shape;
                let status = status.unwrap_or(telling.status);
                let detail = detail.unwrap_or_else(|| ErrorDetail {
                    message: self.error.message.clone(),
                    kind: Some(openai_type(status).to_owned()),
                    param,
                    code: Some(serde_json::Value::String(openai_code(self.kind, telling))),
                });
                (status, axum::Json(serde_json::json!({ "error": detail })))
            }
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

/// The `code` of an error in OpenAI's shape: OpenAI's own name where it has one
/// (`invalid_api_key`, `model_not_found`, `rate_limit_exceeded`), else the metric code.
fn openai_code(kind: ErrorKind, telling: Telling) -> String {
    match kind {
        ErrorKind::Code(GatewayCode::Unauthenticated) => "invalid_api_key",
        ErrorKind::Code(GatewayCode::RateLimited) => "rate_limit_exceeded",
        ErrorKind::NoRoute => "model_not_found",
        _ => telling.code,
    }
    .to_owned()
}

/// What a client is told of a fault inside the gateway (a panic): nothing of its text.
const INTERNAL_MESSAGE: &str = "internal error in the gateway";

/// The answer for a request whose work ended without one: its task panicked (counted and
/// logged here with the panic's text, which is never answered) or was cut at shutdown.
pub(super) fn task_lost(metrics: &Metrics, e: tokio::task::JoinError) -> ApiError {
    match e.try_into_panic() {
        Ok(payload) => metrics.panicked("request", payload.as_ref()),
        Err(e) => tracing::warn!(error = %e, "a request's task ended without an answer"),
    }
    ApiError::new(GatewayCode::Internal, INTERNAL_MESSAGE)
}

/// The layer that keeps a panic from reaching a client: a handler that panics is answered
/// with a generic 500 in its route's protocol's shape (OpenAI's under `/v1/`, LDP's
/// elsewhere; a bridge's own, by [`catch_panics_shaped`] on its routes), and the panic is
/// counted and logged, never answered.
pub(super) async fn catch_panics(
    axum::extract::State(metrics): axum::extract::State<std::sync::Arc<Metrics>>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    caught_by_path(&metrics, req, next).await
}

/// [`catch_panics`] inside another layer (the LDP listener's one layer, `router.rs`).
pub(super) async fn caught_by_path(
    metrics: &Metrics,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let openai = req.uri().path().starts_with("/v1/");
    caught(metrics, req, next, |e| {
        if openai { e.openai() } else { e }.into_response()
    })
    .await
}

/// A route group's own error form (a bridge's), for the answer to a panic of its handler.
pub(super) type Shape = std::sync::Arc<dyn Fn(ApiError) -> Response + Send + Sync>;

/// [`catch_panics`] for a route group answering in its own protocol: the generic 500 in
/// that protocol's error form (`shape`). Layered on the group's router, inside the outer one.
pub(super) async fn catch_panics_shaped(
    axum::extract::State((metrics, shape)): axum::extract::State<(std::sync::Arc<Metrics>, Shape)>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    caught(&metrics, req, next, |e| shape(e)).await
}

/// Runs the rest of the request; a panic is counted and answered by `answer` with
/// [`INTERNAL_MESSAGE`].
async fn caught(
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
pub(super) fn report(metrics: &Metrics, route: &str, resp: &Response) {
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

    async fn a_handler_with_a_bug() -> &'static str {
        panic!("secret panic text")
    }

    #[tokio::test]
    async fn a_panicking_handler_is_answered_500_in_its_routes_shape_without_its_text() {
        let metrics = std::sync::Arc::new(Metrics::new().unwrap());
        let app = axum::Router::new()
            .route("/ldp/boom", axum::routing::get(a_handler_with_a_bug))
            .route("/v1/boom", axum::routing::get(a_handler_with_a_bug))
            .layer(axum::middleware::from_fn_with_state(
                metrics.clone(),
                catch_panics,
            ));
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", l.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(l, app).await });
        let get = |path: &'static str| {
            let url = format!("{base}{path}");
            async move {
                let r = reqwest::get(url).await.unwrap();
                let status = r.status().as_u16();
                let body = r.bytes().await.unwrap();
                let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
                (status, body)
            }
        };
        let (st, ldp) = get("/ldp/boom").await;
        assert_eq!(st, 500);
        assert_eq!(ldp["error"]["code"], "INTERNAL", "{ldp}");
        assert_eq!(ldp["error"]["category"], "runtime", "{ldp}");
        let (st, openai) = get("/v1/boom").await;
        assert_eq!(st, 500);
        assert_eq!(openai["error"]["type"], "server_error", "{openai}");
        assert!(openai["error"].get("category").is_none(), "{openai}");
        for body in [&ldp, &openai] {
            assert!(!body.to_string().contains("secret"), "{body}");
        }
        assert_eq!(metrics.panics.with_label_values(&["request"]).get(), 2);
    }

    async fn body_of(e: ApiError) -> (StatusCode, serde_json::Value) {
        use http_body_util::BodyExt;
        let resp = e.into_response();
        let status = resp.status();
        let bytes = resp.into_body().collect().await.unwrap().to_bytes();
        (status, serde_json::from_slice(&bytes).unwrap())
    }

    #[tokio::test]
    async fn openai_routes_get_openais_shape_with_the_same_statuses() {
        let (st, b) = body_of(ApiError::new(GatewayCode::Unauthenticated, "no key").openai()).await;
        assert_eq!(st, StatusCode::UNAUTHORIZED);
        assert_eq!(b["error"]["code"], "invalid_api_key");
        assert_eq!(b["error"]["type"], "authentication_error");
        assert_eq!(b["error"]["message"], "no key");
        let e = ApiError::new(GatewayCode::BadRequest, "bad").openai_param("messages");
        let (st, b) = body_of(e).await;
        assert_eq!(
            (st, &b["error"]["param"]),
            (StatusCode::BAD_REQUEST, &"messages".into())
        );
        let budget = LdpError::gateway(GatewayCode::BudgetExceeded, "over");
        let (st, b) = body_of(ApiError::task_failed(budget).openai()).await;
        assert_eq!(
            (st, &b["error"]["code"]),
            (StatusCode::FORBIDDEN, &"budget_exceeded".into())
        );
        // A delegate's own code is its failure: 502.
        let own = LdpError::upstream_failed("delegate failed", false);
        let own = LdpError {
            code: "MODEL_OVERLOADED".into(),
            ..own
        };
        assert_eq!(
            body_of(ApiError::task_failed(own).openai()).await.0,
            StatusCode::BAD_GATEWAY
        );
        // An upstream's refusal passes on as it came.
        let detail = ErrorDetail {
            message: "too long".into(),
            kind: Some("invalid_request_error".into()),
            param: Some("messages".into()),
            code: Some("context_length_exceeded".into()),
        };
        let error = LdpError::gateway(GatewayCode::BadRequest, "refused");
        let e = ApiError::openai_upstream(error, 400, detail);
        let (st, b) = body_of(e).await;
        assert_eq!(st, StatusCode::BAD_REQUEST);
        assert_eq!(b["error"]["code"], "context_length_exceeded");
        assert_eq!(b["error"]["message"], "too long");
        // The LDP routes keep theirs.
        let (_, b) = body_of(ApiError::new(GatewayCode::Unauthenticated, "no key")).await;
        assert_eq!(b["error"]["code"], "UNAUTHENTICATED");
    }
}
