//! The request plumbing every front end shares: the body read within its limits, the
//! caller's tenant and headers, the answer to a refused request, the guard that cancels a
//! leaving client's tasks.

use super::api_error::{ApiError, ErrorKind};
use super::AppState;
use crate::ldp::error::GatewayCode;
use crate::proxy::RequestCtx;
use axum::body::Body as HttpBody;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};

tokio::task_local! {
    /// The span of the request being served: set around the handler by the router's tracing
    /// layer when tracing is on, read by [`request_ctx`].
    pub(crate) static REQUEST_TRACE: crate::telemetry::otel::Trace;
}

/// Most bytes read and thrown away after a body went over the limit. A server that closes
/// with unread input sends a reset, and a client still sending (or not yet reading) loses the
/// 413 it was sent; so, as nginx's lingering close does, the 413 goes out at once and the rest
/// of the body is read and discarded in the background, up to this and the body deadline,
/// before the connection closes.
const LINGER_MAX_BYTES: u64 = 64 * 1024 * 1024;

/// [`read_body`] for a JSON route: its nesting checked cheaply before any parse; or the 4xx
/// that explains why not.
pub(super) async fn read_json_body(
    s: &AppState,
    headers: &HeaderMap,
    body: HttpBody,
) -> Result<axum::body::Bytes, ApiError> {
    let bytes = read_body(s, headers, body).await?;
    let depth = s.config.security.max_json_depth;
    if json_depth_exceeds(&bytes, depth) {
        return Err(ApiError::new(
            GatewayCode::BadRequest,
            format!("JSON nesting deeper than {depth} levels"),
        ));
    }
    Ok(bytes)
}

/// Reads the body within the size limit and the body deadline (a text route's: its own
/// reader bounds its nesting); or the 4xx that explains why not.
pub(super) async fn read_body(
    s: &AppState,
    headers: &HeaderMap,
    body: HttpBody,
) -> Result<axum::body::Bytes, ApiError> {
    use http_body_util::BodyExt;
    let limit = s.config.server.body_limit_bytes;
    let too_large = || {
        ApiError::new(
            GatewayCode::PayloadTooLarge,
            format!("request body is over the {limit}-byte limit"),
        )
    };
    let deadline = tokio::time::Instant::now() + s.config.server.body_read_timeout;
    let mut body = body;
    if axum::body::HttpBody::size_hint(&body).lower() > limit as u64 {
        // Declared too large, nothing read yet. A client waiting for `100 Continue` has not
        // sent the body: reading would ask for it. Unanswered, hyper closes without it.
        if !expects_continue(headers) {
            s.proxy.spawn_tracked(linger(body, deadline));
        }
        return Err(too_large());
    }
    let collect = http_body_util::Limited::new(&mut body, limit).collect();
    let bytes = match tokio::time::timeout_at(deadline, collect).await {
        Err(_) => {
            return Err(ApiError::of(
                ErrorKind::BodyTimeout,
                "request body was not received in time",
            ))
        }
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => {
            s.proxy.spawn_tracked(linger(body, deadline));
            return Err(too_large());
        }
        Ok(Err(e)) => {
            return Err(ApiError::new(
                GatewayCode::BadRequest,
                format!("cannot read body: {e}"),
            ))
        }
        Ok(Ok(c)) => c.to_bytes(),
    };
    Ok(bytes)
}

/// Reads and discards the rest of an oversized body (while hyper sends the 413), up to
/// [`LINGER_MAX_BYTES`] and the body deadline. A body declared larger than that is not read at
/// all. Dropping the body ends the connection.
async fn linger(mut body: HttpBody, deadline: tokio::time::Instant) {
    use http_body_util::BodyExt;
    if axum::body::HttpBody::size_hint(&body).lower() > LINGER_MAX_BYTES {
        return;
    }
    let mut left = LINGER_MAX_BYTES;
    while let Ok(Some(Ok(frame))) = tokio::time::timeout_at(deadline, body.frame()).await {
        let n = frame.data_ref().map_or(0, |d| d.len() as u64);
        match left.checked_sub(n) {
            Some(l) => left = l,
            None => return,
        }
    }
}

fn expects_continue(headers: &HeaderMap) -> bool {
    headers
        .get(header::EXPECT)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"))
}

/// The response for a refused request. After an oversized body the connection is closed once
/// the rest of the body has been discarded: its input is not worth reading further.
pub(super) fn refuse(e: ApiError) -> Response {
    let too_large = e.telling().status == StatusCode::PAYLOAD_TOO_LARGE;
    let mut resp = e.into_response();
    if too_large {
        resp.headers_mut().insert(
            header::CONNECTION,
            header::HeaderValue::from_static("close"),
        );
    }
    resp
}

/// Whether `bytes` nest `[`/`{` deeper than `max` (outside strings): one linear pass, no
/// allocation, before any parsing.
pub fn json_depth_exceeds(bytes: &[u8], max: usize) -> bool {
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for &b in bytes {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > max {
                    return true;
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    false
}

/// Who is calling (the tenant of its API key, `Authorization: Bearer`) and what the headers
/// add (`x-ldp-policy`).
pub(super) fn request_ctx(s: &AppState, headers: &HeaderMap) -> Result<RequestCtx, ApiError> {
    let auth = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    let tenant = s.proxy.tenants().authenticate(auth);
    ctx_of(headers, tenant)
}

/// As [`request_ctx`], the key read from `key_header` (Anthropic's `x-api-key`) when the
/// request has it, else from `Authorization: Bearer`.
pub(super) fn request_ctx_keyed(
    s: &AppState,
    headers: &HeaderMap,
    key_header: &str,
) -> Result<RequestCtx, ApiError> {
    match headers.get(key_header).and_then(|v| v.to_str().ok()) {
        Some(key) => {
            let tenant = s.proxy.tenants().authenticate_key(Some(key));
            ctx_of(headers, tenant)
        }
        None => request_ctx(s, headers),
    }
}

/// The request's context once its key has found (or not) its tenant.
fn ctx_of(
    headers: &HeaderMap,
    tenant: Result<std::sync::Arc<crate::tenant::Tenant>, crate::tenant::AuthError>,
) -> Result<RequestCtx, ApiError> {
    let tenant = tenant.map_err(|e| ApiError::new(GatewayCode::Unauthenticated, e.to_string()))?;
    let trace = REQUEST_TRACE.try_with(Clone::clone).unwrap_or_default();
    // The tenant's name, never its key.
    trace.set(|| {
        vec![crate::telemetry::otel::Attr::new(
            "ldp.tenant",
            tenant.name.clone(),
        )]
    });
    Ok(RequestCtx {
        trace,
        tenant,
        policy: headers
            .get("x-ldp-policy")
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(str::to_owned),
        // Absent or unreadable: a first hop. Gateways set it when they forward a task; a
        // client that sends one only brings a refusal closer.
        hops: headers
            .get(crate::upstream::HOPS_HEADER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0),
    })
}

/// Cancels a front end's tasks still pending when its request is dropped (the client left
/// before the answer), as a disconnected LDP client's are. Each task is marked answered
/// ([`CancelIngressTasksOnDrop::answered`]) or all at once ([`CancelIngressTasksOnDrop::done`]).
pub(super) struct CancelIngressTasksOnDrop {
    proxy: std::sync::Arc<crate::proxy::Proxy>,
    tenant: String,
    ingress: crate::provenance::Ingress,
    pending: std::sync::Arc<std::sync::Mutex<Vec<Option<crate::ldp::TaskId>>>>,
}

impl CancelIngressTasksOnDrop {
    /// A guard over `tasks` of `tenant`'s request through `ingress`.
    pub(super) fn new(
        s: &AppState,
        tenant: &str,
        ingress: crate::provenance::Ingress,
        tasks: impl IntoIterator<Item = crate::ldp::TaskId>,
    ) -> CancelIngressTasksOnDrop {
        CancelIngressTasksOnDrop {
            proxy: s.proxy.clone(),
            tenant: tenant.to_owned(),
            ingress,
            pending: std::sync::Arc::new(std::sync::Mutex::new(
                tasks.into_iter().map(Some).collect(),
            )),
        }
    }

    /// A handle that marks task `i` answered (from the task that runs it).
    pub(super) fn answered(&self) -> impl Fn(usize) + Send + Sync + 'static {
        let pending = self.pending.clone();
        move |i| {
            if let Some(slot) = pending.lock().unwrap_or_else(|p| p.into_inner()).get_mut(i) {
                *slot = None;
            }
        }
    }

    /// Every task answered: nothing to cancel.
    pub(super) fn done(&self) {
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        pending.iter_mut().for_each(|t| *t = None);
    }
}

impl Drop for CancelIngressTasksOnDrop {
    fn drop(&mut self) {
        let left: Vec<crate::ldp::TaskId> = self
            .pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter_mut()
            .filter_map(Option::take)
            .collect();
        if left.is_empty() {
            return;
        }
        let (proxy, tenant, ingress) = (
            self.proxy.clone(),
            std::mem::take(&mut self.tenant),
            self.ingress,
        );
        self.proxy.spawn_tracked(async move {
            for task_id in left {
                proxy.cancel_ingress_task(&tenant, ingress, &task_id).await;
            }
        });
    }
}
