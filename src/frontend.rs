//! The front ends: one per way in (LDP, OpenAI, LLMX, LADP, LLMCP, A2A), each one room that
//! reads its protocol's request, checks it, turns it into the one task input
//! ([`crate::proxy::IngressTask`]) and the task's trip ([`crate::proxy::Trip`]) back into its
//! protocol, its errors included, and drives the task's lifecycle (cancelled when the client
//! leaves; A2A's tasks kept to be read, followed and cancelled).
//!
//! This layer stands between `server` (which routes paths to these handlers, counts requests
//! and catches panics: `server/router.rs`'s table) and `proxy` (the one task pipeline): it
//! imports `proxy`, and neither imports it back. The front ends do not import each other;
//! what they all use is here: the state every handler is given ([`AppState`]), the request
//! plumbing (`request.rs`: body, tenant, the answer to a refused request, the guard that
//! cancels a leaving client's tasks) and errors told once (`api_error.rs`: the one status
//! table).

pub mod a2a;
pub mod anthropic;
pub(crate) mod api_error;
pub(crate) mod chat;
pub mod ladp;
pub(crate) mod ldp_http;
pub mod llmcp;
pub mod llmx;
pub mod openai;
pub(crate) mod request;

use crate::config::Config;
use crate::provenance::Ingress;
use crate::proxy::Proxy;
use crate::registry::Registry;
use crate::telemetry::otel::Otel;
use api_error::ApiError;
use axum::response::Response;
use std::sync::Arc;

/// State shared by the handlers: one `Arc`, so the clone axum makes for every request is one
/// reference count (cloning the parts each time showed as 2% of the gateway's CPU under load).
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

impl AppState {
    /// The state of one gateway.
    pub fn new(shared: Shared) -> AppState {
        AppState(Arc::new(shared))
    }
}

impl std::ops::Deref for AppState {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}

/// What [`AppState`] shares.
pub struct Shared {
    /// The gateway core.
    pub proxy: Arc<Proxy>,
    /// The delegates (registration, cards, health).
    pub registry: Arc<Registry>,
    /// The ledger (queries, readiness).
    pub ledger: crate::provenance::LedgerHandle,
    /// The metrics.
    pub metrics: Arc<crate::telemetry::Metrics>,
    /// The client to delegates (card polls on registration).
    pub upstream: crate::upstream::UpstreamClient,
    /// The configuration it runs with.
    pub config: Arc<Config>,
    /// This listener's URL, written into the identity card's `endpoint`.
    pub public_url: Arc<str>,
    /// The LLMX bridge's sequence numbers (each sender's, the gateway's own).
    pub llmx: llmx::LlmxState,
    /// The LADP bridge's agent rates and tasks.
    pub ladp: ladp::LadpState,
    /// The A2A bridge's tasks and contexts.
    pub a2a: a2a::A2aState,
    /// The tracer (`[telemetry] otlp_endpoint` set), else none: no span is made.
    pub otel: Option<Arc<Otel>>,
}

/// Whether a `/v1/…` request is Anthropic's to answer: it names an `anthropic-version` and
/// that ingress is on, or only that ingress is on.
fn anthropics(s: &AppState, headers: &axum::http::HeaderMap) -> bool {
    let c = &s.config;
    c.anthropic.ingress && (anthropic::speaks_anthropic(headers) || !c.openai.ingress)
}

/// `GET /v1/models`, which both chat front ends serve: Anthropic's list to a request that
/// names an `anthropic-version`, OpenAI's otherwise.
pub(crate) async fn models(
    axum::extract::State(s): axum::extract::State<AppState>,
    headers: axum::http::HeaderMap,
) -> Response {
    match anthropics(&s, &headers) {
        true => anthropic::models(&s, &headers).await,
        false => openai::models(axum::extract::State(s), headers).await,
    }
}

/// Any other `/v1/…` path: a 404 in the form of the API the request speaks.
pub(crate) async fn unknown_v1(
    axum::extract::State(s): axum::extract::State<AppState>,
    headers: axum::http::HeaderMap,
    method: axum::http::Method,
    uri: axum::http::Uri,
) -> Response {
    match anthropics(&s, &headers) {
        true => anthropic::unknown(method, uri).await,
        false => openai::unknown(method, uri).await,
    }
}

/// `e` in the error shape of the way in `protocol`, nothing of the request known: how a route
/// of that protocol answers a panic of its handler. Exhaustive: a new way in must say how.
pub(crate) fn error_answer(protocol: Ingress, s: &AppState, e: ApiError) -> Response {
    match protocol {
        Ingress::Ldp => ldp_http::error_answer(e),
        Ingress::Openai => openai::error_answer(e),
        Ingress::Anthropic => anthropic::error_answer(e),
        Ingress::Llmcp => llmcp::error_answer(e),
        Ingress::Llmx => llmx::error_answer(s, e),
        Ingress::Ladp => ladp::error_answer(e),
        Ingress::A2a => a2a::error_answer(e),
    }
}
