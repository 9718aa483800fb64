//! The admin listener: health, readiness and read-only views of delegates and sessions.
//!
//! `/admin/*` needs `Authorization: Bearer <token>` when the token variable is set; without
//! it the admin API answers only on a loopback listener.

use super::{ApiError, AppState};
use crate::ldp::error::GatewayCode;
use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::json;

/// The admin router.
pub fn admin_router(state: AppState) -> Router {
    let admin = Router::new()
        .route("/admin/delegates", get(delegates))
        .route("/admin/sessions", get(sessions))
        .route_layer(middleware::from_fn_with_state(state.clone(), require_token));
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .merge(admin)
        .with_state(state)
}

async fn require_token(State(s): State<AppState>, req: Request, next: Next) -> Response {
    let expected = std::env::var(&s.config.admin.token_env)
        .ok()
        .filter(|t| !t.is_empty());
    let ok = match expected {
        Some(token) => req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .is_some_and(|given| constant_time_eq(given.as_bytes(), token.as_bytes())),
        None => s.config.admin.listen.ip().is_loopback(),
    };
    if ok {
        next.run(req).await
    } else {
        ApiError::new(GatewayCode::Unauthenticated, "admin token missing or wrong").into_response()
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn readyz(State(s): State<AppState>) -> Response {
    let healthy = s.proxy.registry().healthy_count();
    let body = Json(json!({"config": "loaded", "healthy_delegates": healthy}));
    if healthy > 0 {
        (StatusCode::OK, body).into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, body).into_response()
    }
}

async fn delegates(State(s): State<AppState>) -> Json<serde_json::Value> {
    let list: Vec<_> = s
        .proxy
        .registry()
        .snapshot()
        .iter()
        .map(|d| {
            let card = d.card();
            json!({
                "name": d.name,
                "url": d.base_url,
                "weight": d.weight,
                "labels": d.labels,
                "health": if d.is_healthy() { "healthy" } else { "down" },
                "last_error": d.last_error().map(|e| e.to_string()),
                "ldp_labels": card.as_ref().map(|c| c.labels()),
                "card": card.as_deref(),
            })
        })
        .collect();
    Json(json!({ "delegates": list }))
}

async fn sessions(State(s): State<AppState>) -> Json<serde_json::Value> {
    let list: Vec<_> = s
        .proxy
        .sessions()
        .list()
        .iter()
        .map(|c| {
            json!({
                "session_id": c.id,
                "client_domain": c.client_domain,
                "required_domain": c.required_domain,
                "negotiated_mode": c.payload.mode,
                "ttl_secs": c.ttl.as_secs(),
                "upstream_sessions": c.binding_count(),
            })
        })
        .collect();
    Json(json!({ "active": list.len(), "sessions": list }))
}
