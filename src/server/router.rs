//! The LDP listener's router: the LDP routes, client feedback, the OpenAI ingress, and the
//! layers every request passes (body limit, panics caught, requests counted).

use super::{ApiError, AppState, ErrorKind};
use crate::telemetry::otel::{Attr, Otel, Trace, TRACEPARENT};
use axum::extract::{DefaultBodyLimit, State};
use axum::response::Response;
use axum::routing::post;
use axum::Router;

/// The LDP router (no socket needed: tests may drive it with `tower::ServiceExt`).
pub fn router(state: AppState) -> Router {
    let limit = state.config.server.body_limit_bytes;
    super::ldp_routes::routes()
        .route("/ldp/feedback", post(super::feedback::feedback))
        .merge(super::openai_routes::router(&state))
        .merge(super::llmx_routes::router(&state))
        .merge(super::ladp_routes::router(&state))
        .merge(super::llmcp_routes::router(&state))
        .merge(super::a2a_routes::router(&state))
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(limit))
        // One layer, not three: axum clones every layer's boxed service per request.
        .layer(axum::middleware::from_fn_with_state(state.clone(), edge))
        .with_state(state)
}

/// The route labels of `ldp_gateway_http_requests_total` for the LDP listener's routes (those
/// `count_requests` names), exported at 0 from the start.
pub(super) const ROUTES: [&str; 13] = [
    "/ldp/messages",
    "/ldp/stream",
    "/ldp/feedback",
    "/.well-known/ldp-identity",
    "/ldp/identity",
    "/ldp/capabilities",
    "/v1/chat/completions",
    "/v1/models",
    "/llmx",
    "/ladp",
    "/llmcp",
    "/.well-known/agent-card.json",
    "/a2a",
];

/// The route template `req` matched, from a bounded set (never the raw path).
fn route_of(req: &axum::extract::Request) -> &'static str {
    req.extensions()
        .get::<axum::extract::MatchedPath>()
        .map_or("unmatched", |p| match p.as_str() {
            "/ldp/messages" => "/ldp/messages",
            "/ldp/stream" => "/ldp/stream",
            "/ldp/feedback" => "/ldp/feedback",
            "/.well-known/ldp-identity" => "/.well-known/ldp-identity",
            "/ldp/identity" => "/ldp/identity",
            "/ldp/capabilities" => "/ldp/capabilities",
            "/healthz" => "/healthz",
            "/v1/chat/completions" => "/v1/chat/completions",
            "/v1/models" => "/v1/models",
            "/llmx" => "/llmx",
            "/ladp" => "/ladp",
            "/llmcp" => "/llmcp",
            "/.well-known/agent-card.json" => "/.well-known/agent-card.json",
            "/a2a" => "/a2a",
            _ => "other",
        })
}

/// Every request of the listener, around its handler: counted by route template (never the
/// raw path: bounded labels) and status; with tracing on, run in its SERVER span; a panic
/// answered with a generic 500 (counted and reported like any error) by
/// [`super::api_error::catch_panics`].
async fn edge(
    State(s): State<AppState>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let route = route_of(&req);
    let resp = match s.otel.as_ref() {
        Some(otel) => traced(otel, route, req, next, &s).await,
        None => super::api_error::run_catching_panics(&s.metrics, req, next).await,
    };
    let metrics = &s.metrics;
    metrics
        .http_requests
        .with_label_values(&[route, resp.status().as_str()])
        .inc();
    super::api_error::report(metrics, route, &resp);
    resp
}

/// One SERVER span for the request (under the client's `traceparent`), the handler run
/// inside it ([`super::request::REQUEST_TRACE`]); an answer naming a task (`x-ldp-task-id`)
/// names its trace too (`traceparent`).
async fn traced(
    otel: &std::sync::Arc<Otel>,
    route: &'static str,
    req: axum::extract::Request,
    next: axum::middleware::Next,
    s: &AppState,
) -> Response {
    let method = req.method().clone();
    let trace = Trace::server(Some(otel), req.headers(), method.as_str(), route);
    let mut resp = super::request::REQUEST_TRACE
        .scope(
            trace.clone(),
            super::api_error::run_catching_panics(&s.metrics, req, next),
        )
        .await;
    let status = resp.status();
    trace.set(|| {
        vec![Attr::new(
            "http.response.status_code",
            i64::from(status.as_u16()),
        )]
    });
    if status.is_server_error() {
        trace.fail(status.as_str());
    }
    if resp.headers().contains_key("x-ldp-task-id") {
        if let Some(parent) = trace.traceparent() {
            resp.headers_mut().insert(TRACEPARENT, parent);
        }
    }
    trace.end();
    resp
}

async fn not_found() -> ApiError {
    ApiError::of(ErrorKind::NoRoute, "no such route")
}
