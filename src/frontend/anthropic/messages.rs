//! The Anthropic front end's reading: a Messages request checked (`model`, `messages`,
//! `max_tokens`, roles) and turned into a chat in Anthropic's dialect — its messages, its
//! `system` and every other parameter as they came, its `anthropic-beta` to pass on — with the
//! conversation as one text input for a delegate that reads text; and `count_tokens`.

use crate::chat::{self, estimate_tokens, Chat, Dialect};
use crate::frontend::api_error::{ApiError, ErrorKind};
use crate::frontend::chat::{skill_and_policy, transcript};
use crate::frontend::request::{read_json_body, request_ctx_keyed};
use crate::frontend::AppState;
use crate::ldp::error::GatewayCode;
use crate::proxy::RequestCtx;
use crate::routing::Picked;
use anthropic_wire::{
    CountTokensRequest, MessagesRequest, TokenCount, BETA_HEADER, COUNT_TOKENS_PATH, KEY_HEADER,
};
use axum::body::Body as HttpBody;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value};

/// A Messages request, checked.
pub(super) struct Request {
    /// Who asks, and the policy the headers name.
    pub(super) ctx: RequestCtx,
    /// The skill `model` names.
    pub(super) skill: String,
    /// `model` as asked (echoed until the answering model is known).
    pub(super) model: String,
    /// Whether to answer with events.
    pub(super) stream: bool,
    /// The chat, as it came.
    pub(super) chat: Chat,
    /// The conversation as one text (for a delegate that reads text).
    pub(super) input: String,
}

/// Reads and checks a `POST /v1/messages`.
pub(super) async fn read_request(
    s: &AppState,
    headers: &HeaderMap,
    body: HttpBody,
) -> Result<Request, ApiError> {
    let mut ctx = request_ctx_keyed(s, headers, KEY_HEADER)?;
    let bytes = read_json_body(s, headers, body).await?;
    let req: MessagesRequest = serde_json::from_slice(&bytes).map_err(|e| {
        ApiError::new(
            GatewayCode::BadRequest,
            format!("invalid request body: {e}"),
        )
    })?;
    let skill = checked_skill(s, &mut ctx, &req.model)?;
    if req.messages.is_empty() {
        return Err(bad("messages: at least one message is required"));
    }
    if let Some((i, m)) = req
        .messages
        .iter()
        .enumerate()
        .find(|(_, m)| !matches!(m.role.as_str(), "user" | "assistant"))
    {
        return Err(bad(format!(
            "messages.{i}.role: Input should be 'user' or 'assistant', got '{}'",
            m.role
        )));
    }
    // What the budget holds for and the request allows: at least a token.
    if req.max_tokens == 0 {
        return Err(bad("max_tokens: must be at least 1"));
    }
    let mut params = req.extra;
    let system_text = req.system.as_ref().map(chat::text_of).unwrap_or_default();
    if let Some(system) = req.system {
        params.insert("system".into(), system);
    }
    let headers_on = betas(headers);
    let chat = Chat {
        dialect: Dialect::Anthropic,
        messages: req
            .messages
            .into_iter()
            .map(|m| chat::Message {
                role: m.role,
                content: m.content,
                fields: m.extra,
            })
            .collect(),
        max_output_tokens: Some(req.max_tokens),
        newer_bound: false,
        params,
        headers: headers_on,
    };
    let input = transcript(&system_text, &chat.messages);
    Ok(Request {
        ctx,
        skill,
        model: req.model,
        stream: req.stream.unwrap_or(false),
        chat,
        input,
    })
}

/// A 400 `invalid_request_error` saying `message`.
fn bad(message: impl Into<String>) -> ApiError {
    ApiError::new(GatewayCode::BadRequest, message)
}

/// The skill `model` names, offered by some delegate, and the policy it names (put in
/// `ctx`), known.
fn checked_skill(s: &AppState, ctx: &mut RequestCtx, model: &str) -> Result<String, ApiError> {
    let Some((skill, policy)) = skill_and_policy(model) else {
        return Err(bad(
            "model: must name a skill, or a skill and a policy as `skill@policy`",
        ));
    };
    let unknown =
        |what: String| ApiError::of(ErrorKind::NoRoute, format!("model: {model}: {what}"));
    if s.registry.index().offers(skill).is_empty() {
        return Err(unknown(format!("no delegate offers the skill '{skill}'")));
    }
    if let Some(p) = policy {
        if s.proxy.policies().get(p).is_none() {
            return Err(unknown(format!("there is no policy '{p}'")));
        }
        ctx.policy = Some(p.to_owned());
    }
    Ok(skill.to_owned())
}

/// The delegate a count is asked of: the one a task of the tenant's for `skill` would be
/// routed to now (its policy's constraints, trust domain and allowance), when healthy and no
/// loop of gateways is under way; `None` (the count is estimated) otherwise.
fn counting_delegate(
    s: &AppState,
    ctx: &RequestCtx,
    skill: &str,
) -> Option<std::sync::Arc<crate::registry::Delegate>> {
    let policy = ctx.policy.as_deref();
    if ctx.hops as usize >= s.config.upstream.max_hops
        || policy.is_some_and(|p| !ctx.tenant.may_use(p))
    {
        return None;
    }
    let explained = s
        .proxy
        .explain(skill, policy, Some(&ctx.tenant.name), None)
        .ok()?;
    match explained.pick {
        Picked::Delegate(name) => s.registry.get(&name).filter(|d| d.is_healthy()),
        Picked::NoneEligible(_) => None,
    }
}

/// `POST /v1/messages/count_tokens`, under the tenant's rate limit: asked of the delegate a
/// task would be routed to when that is an Anthropic one (with its model and the gateway's
/// key, never the client's), else estimated from the text of the system prompt, the messages
/// and the tools.
pub(super) async fn count_tokens(
    s: &AppState,
    headers: &HeaderMap,
    body: HttpBody,
) -> Result<Response, ApiError> {
    let mut ctx = request_ctx_keyed(s, headers, KEY_HEADER)?;
    let bytes = read_json_body(s, headers, body).await?;
    let req: CountTokensRequest = serde_json::from_slice(&bytes).map_err(|e| {
        ApiError::new(
            GatewayCode::BadRequest,
            format!("invalid request body: {e}"),
        )
    })?;
    let skill = checked_skill(s, &mut ctx, &req.model)?;
    let mut body: Map<String, Value> = req.extra;
    body.insert(
        "messages".into(),
        serde_json::to_value(&req.messages).unwrap_or(Value::Null),
    );
    if let Some(system) = &req.system {
        body.insert("system".into(), system.clone());
    }
    // A count may cost an upstream call: the tenant's rate limit applies.
    s.proxy.admit_request(&ctx).await?;
    let delegate = counting_delegate(s, &ctx, &skill);
    if let Some((d, a)) = delegate
        .as_ref()
        .and_then(|d| d.upstream.anthropic().map(|a| (d, a)))
    {
        let timeout = s.config.upstream.task_timeout;
        match a
            .backend
            .count_tokens(
                &s.upstream,
                &d.base_url,
                body.clone(),
                &betas(headers),
                ctx.hops.saturating_add(1),
                timeout,
            )
            .await
        {
            Ok(n) => return Ok(axum::Json(TokenCount { input_tokens: n }).into_response()),
            // Estimated instead; the delegate's failure is its poll's business.
            Err(e) => {
                tracing::debug!(delegate = %d.name, error = %e, path = COUNT_TOKENS_PATH, "count_tokens upstream failed; estimated")
            }
        }
    }
    let text: usize = req
        .messages
        .iter()
        .map(|m| chat::text_of(&m.content).len())
        .sum::<usize>()
        + req.system.as_ref().map_or(0, |s| chat::text_of(s).len())
        + body.get("tools").map_or(0, |t| t.to_string().len());
    let count = TokenCount {
        input_tokens: estimate_tokens(text).max(1),
    };
    Ok(axum::Json(count).into_response())
}

/// The request's `anthropic-beta` lines, each to pass on to an Anthropic delegate.
fn betas(headers: &HeaderMap) -> Vec<(String, String)> {
    headers
        .get_all(BETA_HEADER)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .map(|v| (BETA_HEADER.to_owned(), v.to_owned()))
        .collect()
}
