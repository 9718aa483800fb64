//! The LLMCP bridge on the LDP listener: `POST /llmcp` takes a `laika.llmcp` v1 request
//! (JSON) with the tenant's Bearer key and answers an LLMCP response, with `x-ldp-task-id`,
//! `x-ldp-policy` and `x-ldp-delegate` (`frontend::llmcp` does the translation). Every
//! refusal is an LLMCP error packet (`type: "error"`) with the LDP routes' status.

use super::api_error::{catch_panics_shaped, ApiError, Shape};
use super::request::{read_json_body, refuse, request_ctx, CancelIngressTasksOnDrop};
use super::AppState;
use crate::frontend::llmcp::LlmcpOutcome;
use crate::ldp::error::GatewayCode;
use crate::ldp::TaskId;
use crate::provenance::Ingress;
use axum::body::Body as HttpBody;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderName, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use llmcp::{ErrorBody, ErrorPacket, Probe, Protocol, ReadError};

/// The route (a panic of its handler answered with an LLMCP error packet).
pub(super) fn router(state: &AppState) -> Router<AppState> {
    let shape: Shape = std::sync::Arc::new(|e| error_packet(Refused::from(e)));
    Router::new()
        .route("/llmcp", post(handle))
        .layer(axum::middleware::from_fn_with_state(
            (state.metrics.clone(), shape),
            catch_panics_shaped,
        ))
}

/// A refusal: the error, what was read of the request, and the LLMCP code when it is not
/// the LDP one.
struct Refused {
    error: ApiError,
    probe: Probe,
    unsupported: bool,
}

impl From<ApiError> for Refused {
    fn from(error: ApiError) -> Refused {
        Refused {
            error,
            probe: Probe::default(),
            unsupported: false,
        }
    }
}

/// `POST /llmcp`.
async fn handle(State(s): State<AppState>, headers: HeaderMap, body: HttpBody) -> Response {
    match answer(&s, &headers, body).await {
        Ok(resp) => resp,
        Err(r) => error_packet(r),
    }
}

async fn answer(s: &AppState, headers: &HeaderMap, body: HttpBody) -> Result<Response, Refused> {
    let ctx = request_ctx(s, headers)?;
    let bytes = read_json_body(s, headers, body).await?;
    let req = llmcp::read_request(&bytes).map_err(|e| {
        let unsupported = matches!(e, ReadError::Unsupported { .. } | ReadError::NoProtocol);
        Refused {
            error: ApiError::new(GatewayCode::BadRequest, e.to_string()),
            probe: Probe::of(&bytes),
            unsupported,
        }
    })?;
    let probe = Probe {
        id: Some(req.id.clone()),
        conversation: Some(req.conversation.clone()),
    };
    let task_id: TaskId = crate::ldp::new_id().into();
    let repair_id: TaskId = crate::ldp::new_id().into();
    // A client that leaves before its answer cancels the task (and its repair).
    let tasks = [task_id.clone(), repair_id.clone()];
    let guard = CancelIngressTasksOnDrop::new(s, &ctx.tenant.name, Ingress::Llmcp, tasks);
    // Running from now on, for a cancel to find, until the task's future ends.
    let registered = [&task_id, &repair_id].map(|id| {
        s.proxy
            .ingress_task_arrived(&ctx.tenant.name, Ingress::Llmcp, id)
    });
    let proxy = s.proxy.clone();
    // Its own (tracked) task: a client that leaves does not stop its settling and ledger row.
    let task = s.proxy.spawn_tracked(async move {
        let _registered = registered;
        crate::frontend::llmcp::answer(&proxy, &ctx, &req, task_id, repair_id).await
    });
    let Some(task) = task else {
        return Err(Refused {
            error: ApiError::new(GatewayCode::Unavailable, "the gateway is stopping"),
            probe,
            unsupported: false,
        });
    };
    let joined = task.await;
    guard.done();
    let outcome: LlmcpOutcome = match joined {
        Ok(Ok(o)) => o,
        Ok(Err(refusal)) => {
            return Err(Refused {
                error: ApiError::from(refusal),
                probe,
                unsupported: false,
            })
        }
        Err(e) => {
            return Err(Refused {
                error: super::api_error::task_lost(&s.metrics, e),
                probe,
                unsupported: false,
            })
        }
    };
    let ids = ldp_headers(&outcome);
    match outcome.result {
        Ok(response) => {
            let mut resp = axum::Json(*response).into_response();
            resp.headers_mut().extend(ids);
            Ok(resp)
        }
        // A failed task has its ledger row too: its headers name it.
        Err(error) => {
            let mut resp = error_packet(Refused {
                error: ApiError::task_failed(error),
                probe,
                unsupported: false,
            });
            resp.headers_mut().extend(ids);
            Ok(resp)
        }
    }
}

/// The refusal as an LLMCP error packet, with the status, headers and report (metrics, log)
/// the gateway's error table gives it.
fn error_packet(r: Refused) -> Response {
    let e = r.error.error();
    let body = ErrorBody {
        code: if r.unsupported {
            "UNSUPPORTED_PROTOCOL".to_owned()
        } else {
            e.code.clone()
        },
        message: e.message.clone(),
        retryable: e.retryable,
        supported: r.unsupported.then(|| vec![Protocol::v1()]),
    };
    let packet = ErrorPacket::new(r.probe, crate::ldp::new_id(), now(), body);
    let (mut parts, _) = refuse(r.error).into_parts();
    parts.headers.remove(header::CONTENT_LENGTH);
    let bytes = llmcp::write(&packet).unwrap_or_default();
    Response::from_parts(parts, HttpBody::from(bytes))
}

/// `x-ldp-task-id`, `x-ldp-policy`, `x-ldp-delegate` (when known).
fn ldp_headers(o: &LlmcpOutcome) -> HeaderMap {
    let mut h = HeaderMap::new();
    let pairs = [
        ("x-ldp-task-id", Some(o.task_id.as_str())),
        ("x-ldp-policy", Some(o.policy.as_str())),
        ("x-ldp-delegate", o.delegate.as_deref()),
    ];
    for (name, value) in pairs {
        if let Some(v) = value.and_then(|v| HeaderValue::from_str(v).ok()) {
            h.insert(HeaderName::from_static(name), v);
        }
    }
    h
}

fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}
