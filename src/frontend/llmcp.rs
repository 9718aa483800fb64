//! The LLMCP front end: a `laika.llmcp` v1 request as one task (the user message,
//! task arguments and context documents rendered as text, untrusted documents fenced as data),
//! the delegate's answer read against the response schema (JSON mode: repaired once, then the
//! seed's Markdown fallback) and written as an LLMCP response with the gateway's provenance.
//! The ledger sees digests of the documents, never their text.
//!
//! The route, `POST /llmcp`, takes a `laika.llmcp` v1 request (JSON) with the tenant's Bearer
//! key and answers an LLMCP response, with `x-ldp-task-id`, `x-ldp-policy` and
//! `x-ldp-delegate`. Every refusal is an LLMCP error packet (`type: "error"`) with the LDP
//! routes' status. `prompt.rs` writes what the delegate reads (and the ledger's stand-in).

mod prompt;

pub use prompt::{ledger_input, render_input};

use super::api_error::ApiError;
use super::request::{read_json_body, refuse, request_ctx, CancelIngressTasksOnDrop};
use super::AppState;
use crate::ldp::error::GatewayCode;
use crate::ldp::{Body, Json, LdpError, TaskId};
use crate::provenance::Ingress;
use crate::proxy::{IngressTask, Proxy, Refusal, RequestCtx, Trip};
use axum::body::Body as HttpBody;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderName, HeaderValue};
use axum::response::{IntoResponse, Response};
use llmcp::{Assistant, ModelAnswer, Request, Response as LlmcpResponse, ToolCall};
use llmcp::{ErrorBody, ErrorPacket, Probe, Protocol, ReadError};
use prompt::{cut, repair_input};
use serde::Serialize;
use serde_json::Value;

/// `e` as the LLMCP route answers a request it could not read: an LLMCP error packet.
pub(crate) fn error_answer(e: ApiError) -> Response {
    error_packet(Refused::from(e))
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
pub(crate) async fn llmcp(
    State(s): State<AppState>,
    headers: HeaderMap,
    body: HttpBody,
) -> Response {
    match served(&s, &headers, body).await {
        Ok(resp) => resp,
        Err(r) => error_packet(r),
    }
}

/// The request read, its task run (and its repair), the answer or the refusal.
async fn served(s: &AppState, headers: &HeaderMap, body: HttpBody) -> Result<Response, Refused> {
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
    let task_id: TaskId = crate::ldp::new_task_id().into();
    let repair_id: TaskId = crate::ldp::new_task_id().into();
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
        crate::proxy::boxed(|| answer(&proxy, &ctx, &req, task_id, repair_id)).await
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

/// The response's extra field carrying the gateway's provenance (readers of the seed's
/// schema ignore it).
pub const PROVENANCE_FIELD: &str = "ldp_gateway";

/// How an LLMCP request through the gateway ended.
#[derive(Debug)]
pub struct LlmcpOutcome {
    /// The task's id (the first; a repair is a second task, named in the provenance).
    pub task_id: TaskId,
    /// The policy it ran under.
    pub policy: String,
    /// The delegate that answered (or last failed), if one was routed to.
    pub delegate: Option<String>,
    /// The response packet, or the error the task failed with.
    pub result: Result<Box<LlmcpResponse>, LdpError>,
}

/// The gateway's part of a response (its `ldp_gateway` field).
#[derive(Debug, Serialize)]
pub struct Provenance {
    /// The task's id; `repair_task_id` the repair's, when there was one.
    pub task_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repair_task_id: Option<String>,
    pub policy: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delegate: Option<String>,
    /// The LDP provenance of the answer used (`produced_by`, `model_version`,
    /// `verification_status`, `confidence`, `tokens_used`, `cost_usd`, …).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub provenance: Option<crate::ldp::Provenance>,
    /// The first answer broke the response schema and the repaired one was used. (A repair
    /// that was not usable either ends in `fallback`.)
    pub repaired: bool,
    /// Set when the answer is the seed's Markdown fallback: the whole output as
    /// `assistant.markdown`, no tool calls or citations.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fallback: Option<Fallback>,
}

/// Why the answer fell back to Markdown.
#[derive(Debug, Serialize)]
pub struct Fallback {
    /// Always `"markdown"`.
    pub to: &'static str,
    /// What was wrong with the last answer.
    pub reason: String,
}

/// Answers `req` for `ctx`'s tenant: the first task is `task_id`, a repair (JSON mode, the
/// first answer unusable) `repair_id`.
pub async fn answer(
    proxy: &Proxy,
    ctx: &RequestCtx,
    req: &Request,
    task_id: TaskId,
    repair_id: TaskId,
) -> Result<LlmcpOutcome, Refusal> {
    let format = req.output.format;
    let text = render_input(req);
    let first = run(proxy, ctx, req, task_id.clone(), text.clone(), false).await?;
    let output = match output_of(&first) {
        Ok(o) => o,
        Err(error) => return Ok(outcome(task_id, &first, Err(error))),
    };
    // Whether a repair task ran (and has its ledger row).
    let mut repair_ran = false;
    let (trip, answer, repaired, fallback) = match llmcp::read(&output, format) {
        Ok(answer) => (first, answer, false, None),
        Err(why) => {
            let repair = repair_input(&text, &output, &why);
            let second = run(proxy, ctx, req, repair_id.clone(), repair, true).await;
            repair_ran = second.is_ok();
            match second.as_ref().map(output_of) {
                Ok(Ok(again)) => match llmcp::read_answer(&again) {
                    Ok(answer) => (second?, answer, true, None),
                    Err(why) => {
                        let fb = fallback(&again, format!("the repaired answer: {why}"));
                        (second?, fb.0, false, Some(fb.1))
                    }
                },
                // The repair failed as a task or was refused (a rate limit): the first
                // answer is all there is.
                Ok(Err(e)) => {
                    let reason = format!("{why}; its repair failed: {}", e.code);
                    let fb = fallback(&output, reason);
                    (first, fb.0, false, Some(fb.1))
                }
                Err(refusal) => {
                    let reason = format!("{why}; its repair was refused: {refusal}");
                    let fb = fallback(&output, reason);
                    (first, fb.0, false, Some(fb.1))
                }
            }
        }
    };
    let provenance = Provenance {
        task_id: task_id.to_string(),
        repair_task_id: repair_ran.then(|| repair_id.to_string()),
        policy: trip.policy.name.0.clone(),
        delegate: trip.delegate.as_ref().map(|d| d.client_name()),
        provenance: match &trip.reply.body {
            Body::TaskResult { provenance, .. } => provenance.clone(),
            _ => None,
        },
        repaired,
        fallback,
    };
    let mut response = LlmcpResponse::answering(
        req,
        crate::ldp::new_id(),
        now(),
        answer.assistant,
        answer.tool_calls,
    );
    if let Ok(v) = serde_json::to_value(&provenance) {
        response.rest.insert(PROVENANCE_FIELD.to_owned(), v);
    }
    Ok(outcome(task_id, &trip, Ok(Box::new(response))))
}

fn outcome(
    task_id: TaskId,
    trip: &Trip,
    result: Result<Box<LlmcpResponse>, LdpError>,
) -> LlmcpOutcome {
    LlmcpOutcome {
        task_id,
        policy: trip.policy.name.0.clone(),
        delegate: trip.delegate.as_ref().map(|d| d.client_name()),
        result,
    }
}

/// The seed's fallback: the whole output as Markdown, no tool calls or citations.
fn fallback(output: &str, reason: String) -> (ModelAnswer, Fallback) {
    let answer = ModelAnswer {
        assistant: Assistant::markdown(output),
        tool_calls: Vec::<ToolCall>::new(),
    };
    let reason = cut(&reason, 512).to_owned();
    (
        answer,
        Fallback {
            to: "markdown",
            reason,
        },
    )
}

/// One task: `text` to the delegate, the digest-only stand-in to the ledger.
async fn run(
    proxy: &Proxy,
    ctx: &RequestCtx,
    req: &Request,
    task_id: TaskId,
    text: String,
    repair: bool,
) -> Result<Trip, Refusal> {
    let task = IngressTask {
        ingress: Ingress::Llmcp,
        task_id,
        skill: &req.input.task.name,
        input: Json::from(Value::String(text)),
        chat: None,
        contract: None,
        quorum: None,
        keep_rounds: false,
        ledger_input: Some(Json::from(ledger_input(req, repair))),
    };
    proxy.ingress_task(ctx, task, None).await
}

/// The delegate's answer as text (a string output as it is, any other JSON as its text), or
/// the error the task failed with.
fn output_of(trip: &Trip) -> Result<String, LdpError> {
    match &trip.reply.body {
        Body::TaskResult { output, .. } => Ok(output
            .as_string()
            .unwrap_or_else(|| output.get().to_owned())),
        Body::TaskFailed { error, .. } => Err(error.clone()),
        other => Err(LdpError::gateway(
            GatewayCode::Internal,
            format!("unexpected {} for a task", other.message_type().as_str()),
        )),
    }
}

/// Now, as the seed writes `created_at`.
fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}
