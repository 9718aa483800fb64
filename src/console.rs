//! The console: server-rendered pages on the admin listener under `/ui/` (fleet, a routing
//! decision explained, the ledger and one task, spend, policies), read from the same registry,
//! policies and ledger as `/admin/*`.
//!
//! Behind a login with the admin token (`auth.rs`, sessions in `sessions.rs`); every page
//! rendered by `page.rs` with every value escaped (maud), plain CSS from the binary, no script,
//! and a `Content-Security-Policy` on every answer.

mod auth;
mod fleet;
mod ledger;
mod page;
mod policies;
mod route;
mod sessions;
mod spend;

use crate::frontend::AppState;
use axum::extract::Request;
use axum::http::{header, HeaderValue};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use axum::Router;
use std::sync::Arc;

/// What every console handler is given: the gateway's state and the console's sessions.
#[derive(Clone)]
pub(crate) struct Console {
    /// The gateway's state, as the admin API reads it.
    pub(crate) app: AppState,
    /// Logged-in browsers.
    pub(crate) sessions: Arc<sessions::Sessions>,
}

/// The policy every console answer carries: nothing but the console's own stylesheet and
/// images drawn inline, no script at all, no framing, forms posting only here.
pub const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; \
    img-src 'self' data:; frame-ancestors 'none'; form-action 'self'";

const CSS: &str = include_str!("console/console.css");

/// The console's routes, `/ui` and below, for the admin router.
pub fn router(app: AppState) -> Router<AppState> {
    let console = Console {
        app,
        sessions: Arc::new(sessions::Sessions::new(
            sessions::MAX_SESSIONS,
            sessions::LIFETIME,
        )),
    };
    let pages = Router::new()
        .route("/ui/", get(fleet::fleet))
        .route("/ui/fleet", get(fleet::fleet))
        .route("/ui/fleet/{name}", get(fleet::delegate))
        .route("/ui/route", get(route::route))
        .route("/ui/ledger", get(ledger::ledger))
        .route("/ui/ledger/{task_id}", get(ledger::task))
        .route("/ui/spend", get(spend::spend))
        .route("/ui/policies", get(policies::policies))
        .route("/ui/logout", axum::routing::post(auth::logout))
        .route_layer(middleware::from_fn_with_state(
            console.clone(),
            auth::require_session,
        ));
    Router::new()
        .route("/ui", get(|| async { Redirect::to("/ui/") }))
        .route("/ui/login", get(auth::login_form).post(auth::login))
        .route("/ui/static/console.css", get(stylesheet))
        .route("/ui/{*rest}", get(not_found).post(not_found))
        .merge(pages)
        .layer(middleware::from_fn(headers))
        .with_state(console)
}

async fn stylesheet() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/css; charset=utf-8"),
            (header::CACHE_CONTROL, "public, max-age=3600"),
        ],
        CSS,
    )
        .into_response()
}

/// Any other path under `/ui/`: a page saying so, with the console's headers.
async fn not_found() -> Response {
    page::bare(
        axum::http::StatusCode::NOT_FOUND,
        "Not found",
        maud::html! { p { a href="/ui/fleet" { "To the fleet" } } },
    )
}

/// The headers of every console answer: the CSP, no sniffing, no referrer, and (pages) no
/// caching.
async fn headers(req: Request, next: Next) -> Response {
    let mut resp = next.run(req).await;
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    if !h.contains_key(header::CACHE_CONTROL) {
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    resp
}
