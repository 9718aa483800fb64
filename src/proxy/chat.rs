//! The OpenAI ingress's way in: one chat completion runs as one LDP task through the same
//! pipeline (tenant limits, trust, policy, routing, budgets, failover, ledger, metrics) in a
//! gateway session the ingress keeps per tenant. Its trust claim is the tenant's first trust
//! domain (the gateway's own without tenants), exactly as a SESSION_PROPOSE without a claim.

use super::task::{ChatDelta, Progress, TaskIn};
use super::{Proxy, Refusal, RequestCtx};
use crate::ldp::error::GatewayCode;
use crate::ldp::{Body, Envelope, Json, LdpError, PayloadMode, SessionConfig, SessionId, TaskId};
use crate::openai::estimate_tokens;
use crate::openai::wire::{ChatRequest, ErrorDetail, Message, Usage};
use crate::provenance::Ingress;
use serde_json::{Map, Value};
use tokio::sync::mpsc;

/// The `from` of the ingress's envelopes (with the tenant, the owner of its sessions).
const INGRESS_FROM: &str = "ldp:client:openai-ingress";

/// How a chat completion through the gateway ended.
#[derive(Debug)]
pub struct ChatOutcome {
    /// The task's id (its ledger row's).
    pub task_id: TaskId,
    /// The policy it ran under.
    pub policy: String,
    /// The delegate that answered (or last failed), if one was routed to.
    pub delegate: Option<String>,
    /// The answer, or why there is none.
    pub result: Result<ChatReply, ChatRefusal>,
}

/// An answered completion.
#[derive(Debug)]
pub struct ChatReply {
    /// The assistant's text: an LDP result's output if it is a string, else its JSON text.
    pub content: String,
    /// The model that answered (its provenance's `model_version`).
    pub model: String,
    /// Token counts: an OpenAI-backed delegate's usage, else estimated from the text.
    pub usage: Usage,
    /// Why the answer stopped: an OpenAI-backed delegate's `finish_reason`, else `stop`.
    pub finish_reason: String,
    /// An OpenAI-backed delegate's message fields besides its text (`tool_calls`,
    /// `function_call`, `refusal`, …), as it sent them.
    pub other: Map<String, Value>,
}

/// A completion refused or failed.
#[derive(Debug)]
pub struct ChatRefusal {
    /// The LDP error (its code gives the HTTP status, as on the LDP routes).
    pub error: LdpError,
    /// An OpenAI-backed delegate's own refusal of the request (status and error), to pass
    /// on as it came.
    pub upstream: Option<(u16, ErrorDetail)>,
    /// A delegate's rate limit: how long it asked to wait (`Retry-After`).
    pub retry_after: Option<std::time::Duration>,
}

impl Proxy {
    /// Runs `req` for `skill` as task `task_id` of `ctx`'s tenant; content deltas go to `deltas`
    /// as they come when the client streams (an OpenAI-backed delegate's; an LDP delegate's
    /// answer comes whole).
    pub async fn chat(
        &self,
        ctx: &RequestCtx,
        req: &ChatRequest,
        skill: &str,
        task_id: TaskId,
        deltas: Option<&mpsc::Sender<ChatDelta>>,
    ) -> Result<ChatOutcome, Refusal> {
        if ctx
            .tenant
            .signing
            .as_ref()
            .is_some_and(|(_, required)| *required)
        {
            // OpenAI requests carry no LDP signature: a tenant that requires them is refused.
            return Err(Refusal::Unauthenticated(
                "this tenant requires signed LDP messages, which the OpenAI ingress cannot carry"
                    .into(),
            ));
        }
        self.admit_tenant(ctx).await?;
        let input = Json::from(serde_json::Value::String(input_text(&req.messages)));
        let progress = deltas.map_or(Progress::Quiet, Progress::Deltas);
        // A session gone idle past its TTL (or lost by the store) is opened anew, once.
        for fresh in [false, true] {
            let session_id = match self.ingress_session(ctx, fresh).await {
                Ok(id) => id,
                Err(error) => {
                    let policy = self.policies.load().default_policy().name.0.clone();
                    return Ok(ChatOutcome {
                        task_id,
                        policy,
                        delegate: None,
                        result: Err(ChatRefusal {
                            error,
                            upstream: None,
                            retry_after: None,
                        }),
                    });
                }
            };
            let env = Envelope::new(
                session_id,
                INGRESS_FROM,
                self.id(),
                Body::TaskSubmit {
                    task_id: task_id.clone(),
                    skill: skill.to_owned(),
                    input: input.clone(),
                    contract: None,
                },
                PayloadMode::Text,
            );
            let task = TaskIn {
                task_id: &task_id,
                ingress: Ingress::Openai,
                retried_if_session_lost: !fresh,
                skill,
                input: &input,
                contract: None,
                chat: Some(req),
                verifying: false,
            };
            let mut trip = self.submit(&env, ctx, task, progress).await?;
            let lost = matches!(&trip.reply.body,
                Body::TaskFailed { error, .. } if error.code == GatewayCode::SessionNotFound.as_str());
            if lost && !fresh {
                continue;
            }
            let result = match &trip.reply.body {
                Body::TaskResult {
                    output, provenance, ..
                } => {
                    let content = output
                        .as_string()
                        .unwrap_or_else(|| output.get().to_owned());
                    let usage = trip.usage.unwrap_or_else(|| {
                        Usage::new(
                            estimate_tokens(input.get().len()),
                            estimate_tokens(content.len()),
                        )
                    });
                    let model = provenance
                        .as_ref()
                        .map(|p| p.model_version.clone())
                        .unwrap_or_default();
                    Ok(ChatReply {
                        content,
                        model,
                        usage,
                        finish_reason: trip.finish_reason.clone().unwrap_or_else(|| "stop".into()),
                        other: trip.reply_fields.take().unwrap_or_default(),
                    })
                }
                Body::TaskFailed { error, .. } => Err(ChatRefusal {
                    retry_after: trip
                        .retry_after
                        .filter(|_| error.code == GatewayCode::RateLimited.as_str()),
                    error: error.clone(),
                    upstream: trip.refused_upstream,
                }),
                other => Err(ChatRefusal {
                    error: LdpError::gateway(
                        GatewayCode::Internal,
                        format!("unexpected {} for a task", other.message_type().as_str()),
                    ),
                    upstream: None,
                    retry_after: None,
                }),
            };
            return Ok(ChatOutcome {
                task_id,
                policy: trip.policy.name.0.clone(),
                delegate: trip.delegate.map(|d| d.name.clone()),
                result,
            });
        }
        Err(Refusal::Unavailable(
            "the ingress session could not be kept".into(),
        ))
    }

    /// The tenant's ingress session, opened (as a SESSION_PROPOSE without a claim would be)
    /// when there is none yet or `fresh` asks for a new one.
    /// Cancels `tenant`'s ingress task `task_id` because its client went away before the
    /// answer, as [`Proxy::cancel_for_disconnect`] does for an LDP client.
    pub async fn cancel_chat(&self, tenant: &str, task_id: &TaskId) -> bool {
        let Some(session_id) = self.ingress_sessions.get(tenant).map(|id| id.clone()) else {
            return false;
        };
        let owner = super::owner_of(tenant, INGRESS_FROM);
        self.cancel_for_disconnect(&session_id, &owner, task_id)
            .await
    }

    async fn ingress_session(&self, ctx: &RequestCtx, fresh: bool) -> Result<SessionId, LdpError> {
        let tenant = ctx.tenant.name.as_str();
        if !fresh {
            if let Some(id) = self.ingress_sessions.get(tenant) {
                return Ok(id.clone());
            }
        }
        let config = SessionConfig {
            preferred_payload_modes: Some(vec![PayloadMode::Text]),
            payload_mode: Some(PayloadMode::Text),
            ttl_secs: None,
            required_trust_domain: None,
            trust_domain: None,
            policy: None,
        };
        let propose = Envelope::new(
            crate::ldp::new_id(),
            INGRESS_FROM,
            self.id(),
            Body::SessionPropose {
                config: config.clone(),
            },
            PayloadMode::Text,
        );
        let answer = self.propose(&propose, &config, ctx).await;
        match answer.body {
            Body::SessionAccept { session_id, .. } => {
                let id: SessionId = session_id.into();
                self.ingress_sessions.insert(tenant.to_owned(), id.clone());
                Ok(id)
            }
            Body::SessionReject { reason, error } => {
                Err(error.unwrap_or_else(|| LdpError::gateway(GatewayCode::TrustViolation, reason)))
            }
            other => Err(LdpError::gateway(
                GatewayCode::Internal,
                format!("unexpected {} to a proposal", other.message_type().as_str()),
            )),
        }
    }
}

/// The conversation as one text task for an LDP delegate: a lone message's text as it is;
/// several as a transcript, one `role: text` line each.
fn input_text(messages: &[Message]) -> String {
    if let [only] = messages {
        return only.text();
    }
    let mut out = String::new();
    for m in messages {
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(&m.role);
        out.push_str(": ");
        out.push_str(&m.text());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(role: &str, content: serde_json::Value) -> Message {
        Message {
            role: role.into(),
            content,
            extra: Default::default(),
        }
    }

    #[test]
    fn a_lone_message_is_its_text_and_several_a_transcript() {
        assert_eq!(input_text(&[m("user", "hi".into())]), "hi");
        let parts =
            serde_json::json!([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]);
        let t = input_text(&[m("system", "be brief".into()), m("user", parts)]);
        assert_eq!(t, "system: be brief\nuser: ab");
    }
}
