//! The front ends' way in (`crate::frontend`: OpenAI, LLMCP, LLMX, LADP): one request of
//! another protocol runs as one LDP task through the same pipeline (tenant limits, trust,
//! policy, routing, budgets, verification, failover, ledger, metrics) in a gateway session
//! kept per tenant and front end. Its trust claim is the tenant's first trust domain (the
//! gateway's own without tenants), exactly as a SESSION_PROPOSE without a claim.

use super::task::{ChatDelta, Progress, TaskIn, Trip};
use super::{Proxy, Refusal, RequestCtx};
use crate::ldp::error::GatewayCode;
use crate::ldp::{
    Body, DelegationContract, Envelope, Json, LdpError, PayloadMode, SessionConfig, SessionId,
    TaskId,
};
use crate::openai::wire::ChatRequest;
use crate::provenance::Ingress;
use std::sync::Arc;
use tokio::sync::mpsc;

/// One task a front end brings: its protocol's message turned into the task input.
pub struct IngressTask<'a> {
    /// The front end (its ledger column and metric label).
    pub ingress: Ingress,
    /// The task's id (its ledger row's).
    pub task_id: TaskId,
    /// The skill asked for.
    pub skill: &'a str,
    /// The input an LDP delegate is sent.
    pub input: Json,
    /// The OpenAI ingress's request, whose messages an OpenAI-backed delegate is sent as
    /// they came.
    pub chat: Option<&'a ChatRequest>,
    /// A deadline or budget the protocol's message set (LLMX `pr`, LADP `deadline`).
    pub contract: Option<DelegationContract>,
    /// The weighted yes a verified result needs, for this task (LADP `quorum`; else the
    /// policy's `[verify] threshold`).
    pub quorum: Option<f64>,
    /// Keep each verification round's producer and result in the trip (LADP answers with
    /// every round).
    pub keep_rounds: bool,
}

/// The `from` of a front end's envelopes (with the tenant, the owner of its sessions).
fn ingress_from(ingress: Ingress) -> &'static str {
    match ingress {
        Ingress::Ldp => "ldp:client:ldp-ingress",
        Ingress::Openai => "ldp:client:openai-ingress",
        Ingress::Llmcp => "ldp:client:llmcp-ingress",
        Ingress::Llmx => "ldp:client:llmx-ingress",
        Ingress::Ladp => "ldp:client:ladp-ingress",
        Ingress::A2a => "ldp:client:a2a-ingress",
    }
}

impl Proxy {
    /// Runs `task` for `ctx`'s tenant; content deltas go to `deltas` as they come when the
    /// client streams (an OpenAI-backed delegate's; an LDP delegate's answer comes whole).
    /// The trip's reply is a TASK_RESULT or a TASK_FAILED; `Err` is a refusal before the
    /// task ran (rate limit, signing required).
    pub async fn ingress_task(
        &self,
        ctx: &RequestCtx,
        task: IngressTask<'_>,
        deltas: Option<&mpsc::Sender<ChatDelta>>,
    ) -> Result<Trip, Refusal> {
        self.run_ingress_task(ctx, task, None, deltas).await
    }

    /// [`Proxy::ingress_task`], the ledger's input preview showing `ledger_input` (when
    /// given) in place of the task's input.
    async fn run_ingress_task(
        &self,
        ctx: &RequestCtx,
        task: IngressTask<'_>,
        ledger_input: Option<&Json>,
        deltas: Option<&mpsc::Sender<ChatDelta>>,
    ) -> Result<Trip, Refusal> {
        if ctx
            .tenant
            .signing
            .as_ref()
            .is_some_and(|(_, required)| *required)
        {
            // Other protocols carry no LDP signature: a tenant that requires them is refused.
            return Err(Refusal::Unauthenticated(format!(
                "this tenant requires signed LDP messages, which the {} ingress cannot carry",
                task.ingress.as_str()
            )));
        }
        self.admit_tenant(ctx).await?;
        let progress = deltas.map_or(Progress::Quiet, Progress::Deltas);
        let from = ingress_from(task.ingress);
        // A session gone idle past its TTL (or lost by the store) is opened anew, once.
        for fresh in [false, true] {
            let session_id = match self.ingress_session(ctx, task.ingress, fresh).await {
                Ok(id) => id,
                Err(error) => {
                    let env = Envelope::new(
                        crate::ldp::new_id(),
                        from,
                        self.id(),
                        Body::TaskCancel {
                            task_id: task.task_id.clone(),
                        },
                        PayloadMode::Text,
                    );
                    let reply = Arc::new(self.task_failed(&env, &task.task_id, error));
                    let policy = self.policies.load().default_policy().clone();
                    return Ok(Trip::failed(task.task_id.clone(), reply, policy));
                }
            };
            let env = Envelope::new(
                session_id,
                from,
                self.id(),
                Body::TaskSubmit {
                    task_id: task.task_id.clone(),
                    skill: task.skill.to_owned(),
                    input: task.input.clone(),
                    contract: task.contract.clone(),
                },
                PayloadMode::Text,
            );
            let t = TaskIn {
                task_id: &task.task_id,
                ingress: task.ingress,
                retried_if_session_lost: !fresh,
                skill: task.skill,
                input: &task.input,
                contract: task.contract.as_ref(),
                chat: task.chat,
                verifying: false,
                quorum: task.quorum,
                keep_rounds: task.keep_rounds,
                ledger_input,
            };
            let trip = self.submit(&env, ctx, t, progress).await?;
            let lost = matches!(&trip.reply.body,
                Body::TaskFailed { error, .. } if error.code == GatewayCode::SessionNotFound.as_str());
            if lost && !fresh {
                continue;
            }
            return Ok(trip);
        }
        Err(Refusal::Unavailable(
            "the ingress session could not be kept".into(),
        ))
    }

    /// Cancels `tenant`'s front-end task `task_id` (its client went away before the answer,
    /// or asked), as [`Proxy::cancel_for_disconnect`] does for an LDP client.
    pub async fn cancel_ingress_task(
        &self,
        tenant: &str,
        ingress: Ingress,
        task_id: &TaskId,
    ) -> bool {
        let key = (tenant.to_owned(), ingress);
        let Some(session_id) = self.ingress_sessions.get(&key).map(|id| id.clone()) else {
            return false;
        };
        let owner = super::owner_of(tenant, ingress_from(ingress));
        self.cancel_for_disconnect(&session_id, &owner, task_id)
            .await
    }

    /// The tenant's session for `ingress`, opened (as a SESSION_PROPOSE without a claim
    /// would be) when there is none yet or `fresh` asks for a new one.
    async fn ingress_session(
        &self,
        ctx: &RequestCtx,
        ingress: Ingress,
        fresh: bool,
    ) -> Result<SessionId, LdpError> {
        let key = (ctx.tenant.name.clone(), ingress);
        if !fresh {
            if let Some(id) = self.ingress_sessions.get(&key) {
                return Ok(id.clone());
            }
        }
        let id = self.open_ingress_session(ctx, ingress).await?;
        self.ingress_sessions.insert(key, id.clone());
        Ok(id)
    }
}

// --- llmcp bridge ---
impl Proxy {
    /// Runs `task` as [`Proxy::ingress_task`] does, but the ledger row's input preview
    /// (`store_payloads`) is `ledger_input`, never the task's input: LLMCP's context
    /// documents reach the delegate and are kept out of the ledger (a digest-only stand-in).
    pub async fn ingress_task_ledgered(
        &self,
        ctx: &RequestCtx,
        task: IngressTask<'_>,
        ledger_input: &Json,
    ) -> Result<Trip, Refusal> {
        self.run_ingress_task(ctx, task, Some(ledger_input), None)
            .await
    }
}

// --- a2a bridge ---
impl Proxy {
    /// Opens a session of `ctx`'s tenant for `ingress` (as a SESSION_PROPOSE without a claim
    /// would be), kept by the caller: the A2A bridge keeps one per `contextId`.
    pub async fn open_ingress_session(
        &self,
        ctx: &RequestCtx,
        ingress: Ingress,
    ) -> Result<SessionId, LdpError> {
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
            ingress_from(ingress),
            self.id(),
            Body::SessionPropose {
                config: config.clone(),
            },
            PayloadMode::Text,
        );
        let answer = self.propose(&propose, &config, ctx).await;
        match answer.body {
            Body::SessionAccept { session_id, .. } => Ok(session_id.into()),
            Body::SessionReject { reason, error } => {
                Err(error.unwrap_or_else(|| LdpError::gateway(GatewayCode::TrustViolation, reason)))
            }
            other => Err(LdpError::gateway(
                GatewayCode::Internal,
                format!("unexpected {} to a proposal", other.message_type().as_str()),
            )),
        }
    }

    /// Runs `task` (an A2A task: `Ingress::A2a`) in `session`, a session of the caller's
    /// opened by [`Proxy::open_ingress_session`] for its context: tasks of one session keep
    /// their delegate per skill (affinity) and an OpenAI-backed delegate's conversation. A
    /// session gone (idle past its TTL) is opened anew, once. TASK_UPDATEs (the gateway's
    /// notes, the delegate's updates and deltas) go to `updates` as they come. Answers the
    /// trip and the session it ran in.
    pub async fn ingress_task_in_session(
        &self,
        ctx: &RequestCtx,
        task: IngressTask<'_>,
        mut session: SessionId,
        updates: Option<&mpsc::Sender<Envelope>>,
    ) -> Result<(Trip, SessionId), Refusal> {
        if ctx
            .tenant
            .signing
            .as_ref()
            .is_some_and(|(_, required)| *required)
        {
            return Err(Refusal::Unauthenticated(format!(
                "this tenant requires signed LDP messages, which the {} ingress cannot carry",
                task.ingress.as_str()
            )));
        }
        self.admit_tenant(ctx).await?;
        let progress = updates.map_or(Progress::Quiet, Progress::Updates);
        let from = ingress_from(task.ingress);
        for fresh in [false, true] {
            if fresh {
                session = match self.open_ingress_session(ctx, task.ingress).await {
                    Ok(id) => id,
                    Err(error) => {
                        let env = Envelope::new(
                            session.clone(),
                            from,
                            self.id(),
                            Body::TaskCancel {
                                task_id: task.task_id.clone(),
                            },
                            PayloadMode::Text,
                        );
                        let reply = Arc::new(self.task_failed(&env, &task.task_id, error));
                        let policy = self.policies.load().default_policy().clone();
                        return Ok((Trip::failed(task.task_id.clone(), reply, policy), session));
                    }
                };
            }
            let env = Envelope::new(
                session.clone(),
                from,
                self.id(),
                Body::TaskSubmit {
                    task_id: task.task_id.clone(),
                    skill: task.skill.to_owned(),
                    input: task.input.clone(),
                    contract: task.contract.clone(),
                },
                PayloadMode::Text,
            );
            let t = TaskIn {
                task_id: &task.task_id,
                ingress: task.ingress,
                retried_if_session_lost: !fresh,
                skill: task.skill,
                input: &task.input,
                contract: task.contract.as_ref(),
                chat: task.chat,
                verifying: false,
                quorum: task.quorum,
                keep_rounds: task.keep_rounds,
                ledger_input: None,
            };
            let trip = self.submit(&env, ctx, t, progress).await?;
            let lost = matches!(&trip.reply.body,
                Body::TaskFailed { error, .. } if error.code == GatewayCode::SessionNotFound.as_str());
            if lost && !fresh {
                continue;
            }
            return Ok((trip, session));
        }
        Err(Refusal::Unavailable(
            "the ingress session could not be kept".into(),
        ))
    }

    /// Cancels `tenant`'s task `task_id` running in `session` (opened for `ingress` by
    /// [`Proxy::open_ingress_session`]); false when it is not running there.
    pub async fn cancel_task_in_session(
        &self,
        tenant: &str,
        ingress: Ingress,
        session: &SessionId,
        task_id: &TaskId,
    ) -> bool {
        let owner = super::owner_of(tenant, ingress_from(ingress));
        self.cancel_for_disconnect(session, &owner, task_id).await
    }
}
