//! The admin listener: health, readiness, metrics, the admin API (delegates, policies,
//! reload, route explain, sessions) and the console under `/ui/` (`crate::console`).
//!
//! `/admin/*` needs `Authorization: Bearer <token>` when the token variable is set; without
//! it the admin API answers only on a loopback listener.

use super::{ApiError, AppState, ErrorKind};
use crate::config::DelegateConfig;
use crate::frontend::api_error;
use crate::ldp::error::GatewayCode;
use crate::registry::RegistryError;
use axum::extract::{Path, Query, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::json;
use std::collections::BTreeMap;

/// The admin router.
pub fn admin_router(state: AppState) -> Router {
    let admin = Router::new()
        .route("/admin/delegates", get(delegates).post(register))
        .route("/admin/delegates/{name}", delete(deregister))
        .route("/admin/policies", get(policies))
        .route("/admin/reload", post(reload))
        .route("/admin/route", get(route))
        .route("/admin/sessions", get(sessions))
        .route("/admin/provenance", get(provenance))
        .route_layer(middleware::from_fn_with_state(state.clone(), require_token));
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .merge(admin)
        .merge(crate::console::router(state.clone()))
        .layer(middleware::from_fn_with_state(
            (state.metrics.clone(), ldp_form()),
            api_error::catch_panics_shaped,
        ))
        .layer(middleware::from_fn_with_state(state.clone(), report_errors))
        .with_state(state)
}

/// The admin listener answers in LDP's error form, `{"error": LdpError}`, a panic too.
fn ldp_form() -> api_error::Shape {
    std::sync::Arc::new(IntoResponse::into_response)
}

/// Reports error answers (counted and logged by [`api_error::report`]).
async fn report_errors(State(s): State<AppState>, req: Request, next: Next) -> Response {
    let resp = next.run(req).await;
    api_error::report(&s.metrics, "admin", &resp);
    resp
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

use crate::secret::constant_time_eq;

/// Why `POST /admin/delegates` refuses a URL before trying it.
#[derive(Debug, thiserror::Error)]
enum RegistrationError {
    /// Not a delegate URL.
    #[error(transparent)]
    Url(#[from] crate::config::UrlError),
    /// The HTTP client cannot parse it.
    #[error("'{url}': {reason}")]
    Parse {
        /// The URL as given.
        url: String,
        /// The parser's reason.
        reason: String,
    },
    /// Its host is not on `security.registration_allow`.
    #[error("host '{0}' is not in security.registration_allow")]
    NotAllowed(String),
}

/// Whether `url`'s host may be registered: with an allowlist, its host must be a listed name
/// (exact, case-insensitive; no DNS lookup, so no rebinding) or an IP inside a listed CIDR.
fn registration_allowed(url: &str, allow: &[String]) -> Result<(), RegistrationError> {
    if allow.is_empty() {
        return Ok(());
    }
    let base = crate::config::normalize_url(url)?;
    // The host, parsed by the URI parser of the HTTP stack the client connects with:
    // splitting the string by hand read `http://127.0.0.1:80@169.254.169.254/` as 127.0.0.1.
    let parsed = base
        .parse::<hyper::Uri>()
        .map_err(|e| RegistrationError::Parse {
            url: url.to_owned(),
            reason: e.to_string(),
        })?;
    let host = parsed.host().unwrap_or("");
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    let ip: Option<std::net::IpAddr> = host.parse().ok();
    let ok = allow.iter().any(|entry| match (entry.split_once('/'), ip) {
        (Some((net, bits)), Some(ip)) => in_cidr(ip, net, bits),
        (Some(_), None) => false,
        (None, _) => entry.eq_ignore_ascii_case(host),
    });
    if ok {
        Ok(())
    } else {
        Err(RegistrationError::NotAllowed(host.to_owned()))
    }
}

fn in_cidr(ip: std::net::IpAddr, net: &str, bits: &str) -> bool {
    use std::net::IpAddr;
    let (Ok(net), Ok(bits)) = (net.parse::<IpAddr>(), bits.parse::<u32>()) else {
        return false;
    };
    match (ip, net) {
        (IpAddr::V4(a), IpAddr::V4(n)) if bits <= 32 => {
            let mask = if bits == 0 {
                0
            } else {
                u32::MAX << (32 - bits)
            };
            u32::from(a) & mask == u32::from(n) & mask
        }
        (IpAddr::V6(a), IpAddr::V6(n)) if bits <= 128 => {
            let mask = if bits == 0 {
                0
            } else {
                u128::MAX << (128 - bits)
            };
            u128::from(a) & mask == u128::from(n) & mask
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::registration_allowed;

    #[test]
    fn allowlist_by_cidr_and_exact_name() {
        let allow = vec!["127.0.0.0/8".to_string(), "delegates.internal".to_string()];
        assert!(registration_allowed("http://127.0.0.5:9000", &allow).is_ok());
        assert!(registration_allowed("ldp://delegates.internal:1/x", &allow).is_ok());
        assert!(registration_allowed("http://169.254.169.254/latest", &allow).is_err());
        assert!(registration_allowed("http://evil.delegates.internal.example", &allow).is_err());
        assert!(registration_allowed("http://127.0.0.1:80@169.254.169.254/", &allow).is_err());
        assert!(registration_allowed("http://127.0.0.1@10.0.0.1:8080", &allow).is_err());
        assert!(registration_allowed("http://10.0.0.1", &[]).is_ok());
        assert!(registration_allowed("http://[::1]:80", &["::1/128".to_string()]).is_ok());
    }
}

/// Ready when a delegate is healthy, the ledger can commit now (a probe write through its
/// writer: a full disk or deleted files read as `"ledger": false`) and, in cluster mode,
/// Redis answers.
async fn readyz(State(s): State<AppState>) -> Response {
    let healthy = s.registry.healthy_count();
    let ledger = s.ledger.healthy(READY_DEADLINE).await;
    let redis = s.proxy.shared_state_ready().await;
    let body = Json(json!({
        "config": "loaded",
        "healthy_delegates": healthy,
        "ledger": ledger,
        "redis": redis,
    }));
    if healthy > 0 && ledger && redis != Some(false) {
        (StatusCode::OK, body).into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, body).into_response()
    }
}

/// How long `/readyz` waits for each dependency (the ledger's probe queues behind its rows).
const READY_DEADLINE: std::time::Duration = std::time::Duration::from_secs(2);

async fn metrics(State(s): State<AppState>) -> Response {
    let body = s.metrics.render_with(|m| refresh_gauges(&s, m));
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], body).into_response()
}

/// Sets the per-delegate gauges (cleared by the caller) for the delegates registered now, and
/// creates at 0 the counters of every label set the configuration and fleet allow.
fn refresh_gauges(s: &AppState, m: &crate::telemetry::Metrics) {
    let snapshot = s.registry.snapshot();
    init_known(s, m, &snapshot);
    let policies = s.proxy.policies();
    let verify_skills: std::collections::BTreeSet<&str> = policies
        .policies
        .iter()
        .filter_map(|p| p.verify.as_ref().map(|v| v.skill.as_str()))
        .collect();
    for d in snapshot.iter() {
        let name = d.name.as_str();
        m.delegate_up
            .with_label_values(&[name])
            .set(i64::from(d.is_healthy()));
        m.cost_discrepancies.with_label_values(&[name]);
        m.usage_clamped.with_label_values(&[name]);
        // Not measured yet: NaN (a series with no number), never a made-up 0 s.
        let ewma = d.observed_latency_ms().map_or(f64::NAN, |ms| ms / 1000.0);
        m.delegate_latency_ewma.with_label_values(&[name]).set(ewma);
        if let Some(card) = d.card() {
            for cap in &card.capabilities {
                let hints = card.effective_hints(&cap.name);
                let skill = cap.name.as_str();
                if let Some(p50) = hints.as_ref().and_then(|h| h.latency_p50_ms) {
                    m.delegate_declared_latency
                        .with_label_values(&[name, skill])
                        .set(p50 as f64 / 1000.0);
                }
                let q = d.quality_at(&card, skill);
                let sources = [
                    ("declared", q.declared),
                    ("observed", q.observed.map(|o| o.mean)),
                    ("blended", q.blended),
                ];
                for (source, q) in sources {
                    if let Some(q) = q {
                        m.delegate_quality
                            .with_label_values(&[name, skill, source])
                            .set(q);
                    }
                }
                if let Some(r) = q.blended.filter(|_| verify_skills.contains(skill)) {
                    m.verifier_reliability
                        .with_label_values(&[name, skill])
                        .set(r);
                }
            }
        }
    }
    m.sessions_active.set(s.proxy.sessions().len() as i64);
    m.task_status_bytes
        .set(i64::try_from(s.proxy.status_bytes()).unwrap_or(i64::MAX));
    if let Some(b) = s.proxy.conversation_bytes() {
        m.conversations_bytes
            .set(i64::try_from(b).unwrap_or(i64::MAX));
    }
    // The tenant-fair tables (`crate::fair`): this replica's; in cluster mode the status
    // store and conversations are in Redis.
    let (a2a_tasks, a2a_contexts) = s.a2a.stats();
    let (ladp_rates, ladp_book) = s.ladp.stats();
    let tables = [
        ("task_status", s.proxy.status_stats()),
        ("conversations", s.proxy.conversation_stats()),
        ("a2a_tasks", Some(a2a_tasks)),
        ("a2a_contexts", Some(a2a_contexts)),
        ("ladp_rates", Some(ladp_rates)),
        ("ladp_book", Some(ladp_book)),
        ("llmx_senders", Some(s.llmx.stats())),
    ];
    for (table, stats) in tables {
        if let Some(stats) = stats {
            m.table(table, &stats);
        }
    }
}

/// [`crate::telemetry::Metrics::init_known`] for the tenants, policies and offered skills now.
fn init_known(
    s: &AppState,
    m: &crate::telemetry::Metrics,
    delegates: &[std::sync::Arc<crate::registry::Delegate>],
) {
    let policies = s.proxy.policies();
    let policy_names: Vec<&str> = policies
        .policies
        .iter()
        .map(|p| p.name.0.as_str())
        .collect();
    let tenants: Vec<&str> = s
        .proxy
        .tenants()
        .all()
        .iter()
        .map(|t| t.name.as_str())
        .collect();
    let cards: Vec<_> = delegates
        .iter()
        .map(|d| (d.name.as_str(), d.card()))
        .collect();
    let offers: Vec<(&str, &str)> = cards
        .iter()
        .filter_map(|(name, card)| card.as_ref().map(|c| (*name, c)))
        .flat_map(|(name, c)| {
            c.capabilities
                .iter()
                .map(move |cap| (name, cap.name.as_str()))
        })
        .collect();
    m.init_known(&crate::telemetry::Known {
        tenants: &tenants,
        policies: &policy_names,
        offers: &offers,
        routes: super::router::ROUTES.as_slice(),
        error_codes: &api_error::error_codes(),
    });
}

fn delegate_json(d: &crate::registry::Delegate) -> serde_json::Value {
    let card = d.card();
    json!({
        "name": d.name,
        "url": crate::secret::redact_url(&d.base_url),
        "weight": d.weight,
        "labels": d.labels,
        "health": if d.is_healthy() { "healthy" } else { "down" },
        "last_error": d.last_error().map(|e| e.to_string()),
        "observed": {
            "latency_ewma_ms": d.observed_latency_ms(),
            "samples": d.samples(),
        },
        "ldp_labels": card.as_ref().map(|c| c.labels()),
        "card": card.as_deref(),
    })
}

async fn delegates(State(s): State<AppState>) -> Json<serde_json::Value> {
    let list: Vec<_> = s
        .registry
        .snapshot()
        .iter()
        .map(|d| delegate_json(d))
        .collect();
    Json(json!({ "delegates": list }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Registration {
    url: String,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    weight: Option<f64>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    #[serde(default)]
    max_in_flight: Option<u32>,
}

async fn register(State(s): State<AppState>, body: axum::body::Bytes) -> Response {
    let reg: Registration = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => return ApiError::new(GatewayCode::BadRequest, e.to_string()).into_response(),
    };
    if reg.weight.is_some_and(|w| !(w.is_finite() && w > 0.0)) {
        return ApiError::new(GatewayCode::BadRequest, "weight must be a positive number")
            .into_response();
    }
    let cfg = DelegateConfig {
        name: reg.name,
        weight: reg.weight,
        labels: reg.labels,
        max_in_flight: reg.max_in_flight,
        ..DelegateConfig::new(reg.url)
    };
    // An unusable URL (credentials in it, say) is the request's mistake, whatever the
    // allowlist says; its message never shows the credentials.
    if let Err(why) = crate::config::normalize_url(&cfg.url) {
        return ApiError::new(GatewayCode::BadRequest, format!("url: {why}")).into_response();
    }
    if let Err(why) = registration_allowed(&cfg.url, &s.config.security.registration_allow) {
        let error = crate::ldp::LdpError::gateway(GatewayCode::BadRequest, why.to_string());
        return (StatusCode::FORBIDDEN, Json(json!({ "error": error }))).into_response();
    }
    let registry = &s.registry;
    match registry.add(&cfg) {
        Ok(d) => {
            let polled = registry
                .poll_one(&d, &s.upstream, s.config.discovery.fetch_timeout)
                .await;
            if let Err(e) = polled {
                // The gateway itself (directly, or under another URL): refused, not kept.
                let _ = registry.remove(&d.name);
                s.metrics.forget_delegate(&d.name);
                return ApiError::new(GatewayCode::BadRequest, e.to_string()).into_response();
            }
            (StatusCode::CREATED, Json(delegate_json(&d))).into_response()
        }
        Err(RegistryError::Duplicate(n)) => ApiError::of(
            ErrorKind::Conflict,
            format!("a delegate named '{n}' is already registered"),
        )
        .into_response(),
        Err(e) => ApiError::new(GatewayCode::BadRequest, e.to_string()).into_response(),
    }
}

async fn deregister(State(s): State<AppState>, Path(name): Path<String>) -> Response {
    match s.registry.remove(&name) {
        Ok(_) => {
            s.metrics.forget_delegate(&name);
            StatusCode::NO_CONTENT.into_response()
        }
        Err(e) => (
            StatusCode::NOT_FOUND,
            Json(json!({"error": crate::ldp::LdpError::gateway(GatewayCode::BadRequest, e.to_string())})),
        )
            .into_response(),
    }
}

async fn policies(State(s): State<AppState>) -> Json<serde_json::Value> {
    let set = s.proxy.policies();
    let list: Vec<_> = set
        .policies
        .iter()
        .map(|p| {
            json!({
                "name": p.name.0,
                "description": p.description,
                "file": p.source.display().to_string(),
                "weights": {"quality": p.weights.quality, "cost": p.weights.cost, "latency": p.weights.latency},
                "tolerance": p.tolerance,
                "max_attempts": p.max_attempts,
                "matches": p.matcher.as_ref().map(|m| json!({
                    "skills": m.skills.iter().map(|g| g.0.clone()).collect::<Vec<_>>(),
                    "tenants": m.tenants,
                })),
            })
        })
        .collect();
    Json(json!({ "default": set.default.0, "policies": list }))
}

async fn reload(State(s): State<AppState>) -> Response {
    match s.proxy.reload_policies() {
        Ok(n) => Json(json!({"reloaded": true, "policies": n})).into_response(),
        Err(problems) => {
            let list: Vec<String> = problems.iter().map(ToString::to_string).collect();
            tracing::error!(trigger = "admin", problems = %list.join("; "), "policy reload refused; keeping the previous policies");
            (
                StatusCode::UNPROCESSABLE_ENTITY,
                Json(json!({
                    "reloaded": false,
                    "problems": list,
                    "error": crate::ldp::LdpError::gateway(GatewayCode::BadRequest, "policy files have problems; the previous policies stay in force"),
                })),
            )
                .into_response()
        }
    }
}

#[derive(Deserialize)]
struct RouteQuery {
    skill: String,
    #[serde(default)]
    policy: Option<String>,
    #[serde(default)]
    tenant: Option<String>,
    #[serde(default)]
    trust_domain: Option<String>,
    #[serde(default)]
    format: Option<String>,
}

async fn route(
    State(s): State<AppState>,
    q: Result<Query<RouteQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let q = match q {
        Ok(Query(q)) => q,
        Err(e) => return ApiError::new(GatewayCode::BadRequest, e.body_text()).into_response(),
    };
    match s.proxy.explain(
        &q.skill,
        q.policy.as_deref(),
        q.tenant.as_deref(),
        q.trust_domain.as_deref(),
    ) {
        Ok(x) if q.format.as_deref() == Some("text") => x.to_table().into_response(),
        Ok(x) => Json(x).into_response(),
        Err(e) => ApiError::new(GatewayCode::UnknownPolicy, e.to_string()).into_response(),
    }
}

/// Query parameters of `/admin/provenance`. Spelled out rather than `#[serde(flatten)]`:
/// flattening makes serde_urlencoded hand numbers over as strings.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ProvenanceQuery {
    session_id: Option<String>,
    task_id: Option<String>,
    delegate: Option<String>,
    tenant: Option<String>,
    ingress: Option<crate::provenance::Ingress>,
    trace_id: Option<String>,
    skill: Option<String>,
    policy: Option<String>,
    outcome: Option<crate::provenance::Outcome>,
    limit: Option<u32>,
    offset: Option<u32>,
    since: Option<String>,
    format: Option<String>,
}

async fn provenance(
    State(s): State<AppState>,
    q: Result<Query<ProvenanceQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let q = match q {
        Ok(Query(q)) => q,
        Err(e) => return ApiError::new(GatewayCode::BadRequest, e.body_text()).into_response(),
    };
    let mut filter = crate::provenance::Query {
        session_id: q.session_id,
        task_id: q.task_id,
        delegate: q.delegate,
        tenant: q.tenant,
        ingress: q.ingress,
        // Stored lowercase (as `traceparent` writes it).
        trace_id: q.trace_id.map(|t| t.to_ascii_lowercase()),
        skill: q.skill,
        policy: q.policy,
        outcome: q.outcome,
        since_ms: None,
        limit: q.limit,
        offset: q.offset,
    };
    if let Some(since) = &q.since {
        let now = chrono::Utc::now().timestamp_millis();
        match crate::provenance::query::parse_since(since, now) {
            Ok(ms) => filter.since_ms = Some(ms),
            Err(e) => return ApiError::new(GatewayCode::BadRequest, e.to_string()).into_response(),
        }
    }
    let csv = match q.format.as_deref() {
        None | Some("json") => false,
        Some("csv") => true,
        Some(other) => {
            return ApiError::new(
                GatewayCode::BadRequest,
                format!("format must be json or csv, got '{other}'"),
            )
            .into_response()
        }
    };
    let page = filter.page();
    let offset = filter.offset.unwrap_or(0);
    let task_id = filter.task_id.clone();
    match s.ledger.query(filter).await {
        Ok(rows) if csv => (
            [(header::CONTENT_TYPE, "text/csv; charset=utf-8")],
            crate::provenance::query::to_csv(&rows),
        )
            .into_response(),
        Ok(rows) => {
            let next = (rows.len() as u32 == page).then(|| offset + page);
            let mut body = json!({"rows": rows, "count": rows.len(), "next_offset": next});
            // Asked about one task id: its ratings too (a primary-key read; JSON only, the
            // CSV keeps its columns).
            if let Some(task_id) = task_id {
                match s.ledger.feedback(&task_id).await {
                    Ok(fb) => body["feedback"] = json!(fb),
                    // Busy (503) or failed (500), as every ledger read is told.
                    Err(e) => return ApiError::from(&e).into_response(),
                }
            }
            Json(body).into_response()
        }
        Err(e) => ApiError::from(&e).into_response(),
    }
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
                "policy": c.policy,
                "negotiated_mode": c.payload.mode,
                "ttl_secs": c.ttl.as_secs(),
                "upstream_sessions": c.binding_count(),
            })
        })
        .collect();
    Json(json!({ "active": list.len(), "sessions": list }))
}
