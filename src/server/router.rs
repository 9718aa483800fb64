//! The LDP listener's router: one table of its routes ([`TABLE`]: path, handler, metric label,
//! the way in whose error form answers its panics), from which the router, the `route` labels
//! exported at 0 ([`ROUTES`]) and each request's label and panic answer ([`route_of`]) all
//! come; and the one layer every request passes (counted, traced, a panic caught).
//!
//! A route added to the table is served, counted under its label (exported at 0 from the
//! first scrape) and answers a panic in its protocol's form, with nothing else to touch.

use crate::config::Config;
use crate::frontend::api_error::{self, ApiError, ErrorKind};
use crate::frontend::request::REQUEST_TRACE;
use crate::frontend::{self, AppState};
use crate::provenance::Ingress;
use crate::telemetry::otel::{Attr, Otel, Trace, TRACEPARENT};
use axum::extract::{DefaultBodyLimit, MatchedPath, State};
use axum::response::Response;
use axum::routing::{any, get, post, MethodRouter};
use axum::Router;
use std::sync::LazyLock;

/// One route of the LDP listener.
pub(super) struct Route {
    /// Its path template.
    pub(super) path: &'static str,
    /// The way in (front end) whose error form answers what its handler could not: a panic.
    pub(super) protocol: Ingress,
    /// Its methods and their handler (and the answer to any other method).
    pub(super) handler: fn() -> MethodRouter<AppState>,
    /// Its `route` label on `ldp_gateway_http_requests_total`.
    pub(super) label: Label,
    /// Whether the listener serves it under a configuration.
    pub(super) served: fn(&Config) -> bool,
}

/// A route's `route` label.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Label {
    /// Its path template, exported at 0 from the first scrape.
    Path,
    /// `other`: a catch-all (any path under it), not exported at 0.
    Other,
}

impl Route {
    /// `path` of `protocol`, answered by `handler`, labelled by its path, always served.
    const fn new(
        path: &'static str,
        protocol: Ingress,
        handler: fn() -> MethodRouter<AppState>,
    ) -> Route {
        Route {
            path,
            protocol,
            handler,
            label: Label::Path,
            served: always,
        }
    }

    /// Counted as `other`.
    const fn other(self) -> Route {
        Route {
            label: Label::Other,
            ..self
        }
    }

    /// Served only when `served` says so.
    const fn when(self, served: fn(&Config) -> bool) -> Route {
        Route { served, ..self }
    }

    /// Its `route` label.
    fn label(&self) -> &'static str {
        match self.label {
            Label::Path => self.path,
            Label::Other => OTHER,
        }
    }
}

/// The label of a request to a catch-all route.
const OTHER: &str = "other";
/// The label of a request no route matched.
const UNMATCHED: &str = "unmatched";

fn always(_: &Config) -> bool {
    true
}

fn openai_ingress(c: &Config) -> bool {
    c.openai.ingress
}

fn anthropic_ingress(c: &Config) -> bool {
    c.anthropic.ingress
}

fn chat_ingress(c: &Config) -> bool {
    c.openai.ingress || c.anthropic.ingress
}

/// Every route of the LDP listener.
pub(super) const TABLE: &[Route] = &[
    Route::new("/ldp/messages", Ingress::Ldp, || {
        post(frontend::ldp_http::messages)
    }),
    Route::new("/ldp/stream", Ingress::Ldp, || {
        post(frontend::ldp_http::stream)
    }),
    Route::new("/ldp/feedback", Ingress::Ldp, || {
        post(frontend::ldp_http::feedback)
    }),
    Route::new("/.well-known/ldp-identity", Ingress::Ldp, || {
        get(frontend::ldp_http::identity)
    }),
    Route::new("/ldp/identity", Ingress::Ldp, || {
        get(frontend::ldp_http::identity)
    }),
    Route::new("/ldp/capabilities", Ingress::Ldp, || {
        get(frontend::ldp_http::capabilities)
    }),
    Route::new("/healthz", Ingress::Ldp, || {
        get(frontend::ldp_http::healthz)
    }),
    Route::new("/v1/chat/completions", Ingress::Openai, || {
        post(frontend::openai::completions).fallback(frontend::openai::unknown)
    })
    .when(openai_ingress),
    Route::new("/v1/messages", Ingress::Anthropic, || {
        post(frontend::anthropic::messages).fallback(frontend::anthropic::unknown)
    })
    .when(anthropic_ingress),
    Route::new("/v1/messages/count_tokens", Ingress::Anthropic, || {
        post(frontend::anthropic::count_tokens).fallback(frontend::anthropic::unknown)
    })
    .when(anthropic_ingress),
    Route::new("/v1/models", Ingress::Openai, || {
        get(frontend::models).fallback(frontend::unknown_v1)
    })
    .when(chat_ingress),
    Route::new("/v1", Ingress::Openai, || any(frontend::unknown_v1))
        .other()
        .when(chat_ingress),
    Route::new("/v1/{*rest}", Ingress::Openai, || any(frontend::unknown_v1))
        .other()
        .when(chat_ingress),
    Route::new("/llmx", Ingress::Llmx, || post(frontend::llmx::llmx)),
    Route::new("/ladp", Ingress::Ladp, || post(frontend::ladp::ladp)),
    Route::new("/llmcp", Ingress::Llmcp, || post(frontend::llmcp::llmcp)),
    Route::new(a2a_wire::consts::AGENT_CARD_PATH, Ingress::A2a, || {
        get(frontend::a2a::card)
    }),
    Route::new(frontend::a2a::ROUTE, Ingress::A2a, || {
        post(frontend::a2a::jsonrpc)
    }),
];

/// The route labels of `ldp_gateway_http_requests_total` for the LDP listener's routes,
/// exported at 0 from the start: every route's of [`TABLE`] but the catch-alls'.
pub(super) static ROUTES: LazyLock<Vec<&'static str>> = LazyLock::new(|| {
    TABLE
        .iter()
        .filter(|r| r.label == Label::Path)
        .map(Route::label)
        .collect()
});

/// The LDP router (no socket needed: tests may drive it with `tower::ServiceExt`).
pub fn router(state: AppState) -> Router {
    build(state, |handler| handler)
}

/// The router of [`TABLE`]'s routes served under `state`'s configuration, each handler passed
/// through `wrap` (the tests' panicking layer; nothing otherwise).
fn build(
    state: AppState,
    wrap: impl Fn(MethodRouter<AppState>) -> MethodRouter<AppState>,
) -> Router {
    let limit = state.config.server.body_limit_bytes;
    TABLE
        .iter()
        .filter(|r| (r.served)(&state.config))
        .fold(Router::new(), |router, r| {
            router.route(r.path, wrap((r.handler)()))
        })
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(limit))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            around_requests,
        ))
        .with_state(state)
}

/// The route `req` matched, from [`TABLE`]: its label (from a bounded set, never the raw
/// path) and the way in whose error form answers its panic. No route: `unmatched`, LDP's.
fn route_of(req: &axum::extract::Request) -> (&'static str, Ingress) {
    let Some(matched) = req.extensions().get::<MatchedPath>() else {
        return (UNMATCHED, Ingress::Ldp);
    };
    TABLE
        .iter()
        .find(|r| r.path == matched.as_str())
        .map_or((OTHER, Ingress::Ldp), |r| (r.label(), r.protocol))
}

/// What every request passes, in one layer (one boxed service and future per request, not
/// one per concern): counted by route label and status, its error reported; with tracing on,
/// run inside its SERVER span ([`traced`]); a panic answered with a generic 500 in its
/// route's protocol's form, and counted and reported like any error.
async fn around_requests(
    State(s): State<AppState>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let (route, protocol) = route_of(&req);
    let resp = match s.otel.as_ref() {
        None => caught(&s, protocol, req, next).await,
        Some(otel) => traced(&s, otel, route, protocol, req, next).await,
    };
    let metrics = &s.metrics;
    metrics
        .http_requests
        .with_label_values(&[route, resp.status().as_str()])
        .inc();
    api_error::report(metrics, route, &resp);
    resp
}

/// The rest of the request; a panic answered in `protocol`'s error form.
async fn caught(
    s: &AppState,
    protocol: Ingress,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    api_error::caught(&s.metrics, req, next, |e| {
        frontend::error_answer(protocol, s, e)
    })
    .await
}

/// One SERVER span for the request (under the client's `traceparent`), the handler run inside
/// it ([`REQUEST_TRACE`]); an answer naming a task (`x-ldp-task-id`) names its trace too
/// (`traceparent`).
async fn traced(
    s: &AppState,
    otel: &std::sync::Arc<Otel>,
    route: &'static str,
    protocol: Ingress,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let method = req.method().clone();
    let trace = Trace::server(Some(otel), req.headers(), method.as_str(), route);
    let mut resp = REQUEST_TRACE
        .scope(trace.clone(), caught(s, protocol, req, next))
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::Gateway;

    /// A gateway of no delegates on loopback ports, its ledger in `dir`.
    async fn gateway(dir: &std::path::Path) -> Gateway {
        let mut config = Config::default();
        config.server.listen = "127.0.0.1:0".parse().unwrap();
        config.admin.listen = "127.0.0.1:0".parse().unwrap();
        config.admin.token_env = "LDP_TEST_ADMIN_TOKEN_NEVER_SET".into();
        config.provenance.store = format!("sqlite://{}", dir.join("ledger.db").display());
        Gateway::start(config).await.unwrap()
    }

    /// What a handler with a bug does.
    async fn boom(_: axum::extract::Request, _: axum::middleware::Next) -> Response {
        if std::hint::black_box(true) {
            panic!("secret panic text");
        }
        Response::default()
    }

    /// Whether `body` is an internal error in `protocol`'s form (and in no other's).
    /// Exhaustive: a new way in must say what its form is.
    fn in_form(protocol: Ingress, body: &str) -> bool {
        let json = || serde_json::from_str::<serde_json::Value>(body).unwrap_or_default();
        match protocol {
            Ingress::Ldp => {
                let j = json();
                j["error"]["code"] == "INTERNAL"
                    && j["error"]["category"] == "runtime"
                    && j.get("type").is_none()
            }
            Ingress::Openai => {
                let j = json();
                j["error"]["type"] == "server_error" && j["error"].get("category").is_none()
            }
            Ingress::Anthropic => {
                let j = json();
                j["type"] == "error"
                    && j["error"]["type"] == "api_error"
                    && j["error"].get("code").is_none()
            }
            Ingress::Llmcp => {
                let j = json();
                j["type"] == "error" && j["error"]["code"] == "INTERNAL"
            }
            Ingress::A2a => {
                let j = json();
                j["jsonrpc"] == "2.0" && j["error"]["code"] == -32603 && j["id"].is_null()
            }
            Ingress::Llmx => llmx::parse(body).is_ok_and(|m| {
                let o = m.blocks.first().and_then(|b| b.get("o")?.as_str());
                m.blocks.len() == 1 && o == Some("NACK")
            }),
            Ingress::Ladp => ladp::Msg::parse(body.trim_end()).is_ok_and(|m| m.kind == "error"),
        }
    }

    #[tokio::test]
    async fn every_route_of_the_table_answers_a_panic_in_its_protocols_form() {
        let dir = tempfile::tempdir().unwrap();
        let gw = gateway(dir.path()).await;
        // The real table, router and layer; each handler panics.
        let app = build(gw.state.clone(), |h| {
            h.layer(axum::middleware::from_fn(boom))
        });
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", l.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(l, app).await });
        let client = reqwest::Client::new();
        let served: Vec<&Route> = TABLE
            .iter()
            .filter(|r| (r.served)(&gw.state.config))
            .collect();
        assert_eq!(
            served.len(),
            TABLE.len(),
            "the default config serves every route"
        );
        for r in &served {
            let url = format!("{base}{}", r.path.replace("{*rest}", "any/thing"));
            for method in [reqwest::Method::GET, reqwest::Method::POST] {
                let resp = client.request(method.clone(), &url).send().await.unwrap();
                let status = resp.status().as_u16();
                let body = resp.text().await.unwrap();
                assert_eq!(status, 500, "{method} {}: {body}", r.path);
                assert!(
                    in_form(r.protocol, &body),
                    "{method} {}: not in {:?}'s form: {body}",
                    r.path,
                    r.protocol
                );
                assert!(!body.contains("secret"), "{}: {body}", r.path);
            }
        }
        let m = gw.metrics();
        let panics = m.panics.with_label_values(&["request"]).get();
        assert_eq!(panics, 2 * TABLE.len() as u64);
        // Each counted under its table label.
        for r in &served {
            let counted = m.http_requests.with_label_values(&[r.label(), "500"]).get();
            let same_label = served.iter().filter(|o| o.label() == r.label()).count();
            assert_eq!(counted, 2 * same_label as u64, "{}", r.path);
        }
        gw.shutdown().await;
    }

    #[tokio::test]
    async fn the_route_labels_exported_at_0_are_the_tables() {
        let dir = tempfile::tempdir().unwrap();
        let gw = gateway(dir.path()).await;
        let scrape = reqwest::get(format!("{}/metrics", gw.admin_url()))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let prefix = "ldp_gateway_http_requests_total{route=\"";
        let mut exported: Vec<&str> = scrape
            .lines()
            .filter_map(|l| l.strip_prefix(prefix))
            .filter_map(|l| l.strip_suffix("\",status=\"200\"} 0"))
            .collect();
        exported.sort_unstable();
        let mut table: Vec<&str> = TABLE
            .iter()
            .filter(|r| r.label == Label::Path)
            .map(|r| r.path)
            .collect();
        table.sort_unstable();
        assert_eq!(
            exported, table,
            "route labels exported at 0, and the table's"
        );
        assert!(!exported.contains(&OTHER));
        gw.shutdown().await;
    }
}
