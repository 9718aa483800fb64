//! The front ends' way in (`frontend`: OpenAI, LLMCP, LLMX, LADP, A2A): one request of
//! another protocol runs as one LDP task through the same pipeline (tenant limits, trust,
//! policy, routing, budgets, verification, failover, ledger, metrics) in a gateway session
//! kept per tenant and front end. Its trust claim is the tenant's first trust domain (the
//! gateway's own without tenants), exactly as a SESSION_PROPOSE without a claim.

use super::pipeline::{ChatDelta, Pipeline, Progress, TaskIn, Trip};
use super::{Proxy, Refusal, RequestCtx};
use crate::chat::Chat;
use crate::ldp::error::GatewayCode;
use crate::ldp::{
    Body, DelegationContract, Envelope, Json, LdpError, PayloadMode, SessionConfig, SessionId,
    TaskId,
};
use crate::provenance::Ingress;
use crate::session::ClientSession;
use crate::state::{ConversationStore as _, SessionStore as _};
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
    pub chat: Option<&'a Chat>,
    /// A deadline or budget the protocol's message set (LLMX `pr`, LADP `deadline`).
    pub contract: Option<DelegationContract>,
    /// The weighted yes a verified result needs, for this task (LADP `quorum`; else the
    /// policy's `[verify] threshold`).
    pub quorum: Option<f64>,
    /// Keep each verification round's producer and result in the trip (LADP answers with
    /// every round).
    pub keep_rounds: bool,
    /// What the ledger row's input preview (`store_payloads`) shows in place of the input:
    /// LLMCP's context documents reach the delegate but only their digests the ledger.
    pub ledger_input: Option<Json>,
}

/// The `from` of a front end's envelopes (with the tenant, the owner of its sessions).
fn ingress_from(ingress: Ingress) -> &'static str {
    match ingress {
        Ingress::Ldp => "ldp:client:ldp-ingress",
        Ingress::Openai => "ldp:client:openai-ingress",
        Ingress::Anthropic => "ldp:client:anthropic-ingress",
        Ingress::Llmcp => "ldp:client:llmcp-ingress",
        Ingress::Llmx => "ldp:client:llmx-ingress",
        Ingress::Ladp => "ldp:client:ladp-ingress",
        Ingress::A2a => "ldp:client:a2a-ingress",
    }
}

impl Proxy {
    /// Runs `task` for `ctx`'s tenant in the tenant's session for its front end; content
    /// deltas go to `deltas` as they come when the client streams (an OpenAI-backed
    /// delegate's; an LDP delegate's answer comes whole). The trip's reply is a TASK_RESULT
    /// or a TASK_FAILED; `Err` is a refusal before the task ran (rate limit, signing
    /// required).
    pub async fn ingress_task(
        &self,
        ctx: &RequestCtx,
        task: IngressTask<'_>,
        deltas: Option<&mpsc::Sender<ChatDelta>>,
    ) -> Result<Trip, Refusal> {
        let progress = deltas.map_or(Progress::Quiet, Progress::Deltas);
        self.run_ingress(ctx, task, progress, &mut None, None).await
    }

    /// Runs `task` (an A2A task) in `session`, a session the front end keeps (opened by
    /// [`Proxy::open_ingress_session`], one per A2A context): tasks of one session keep their
    /// delegate per skill (affinity) and an OpenAI-backed delegate's conversation.
    /// TASK_UPDATEs (the gateway's notes, the delegate's updates and deltas) go to `updates`
    /// as they come. Answers the trip and the session it ran in (a new one if it was gone).
    ///
    /// `first`: the session's first task (a new context's). It runs on the upstream sessions
    /// of the tenant's session for the front end, routed afresh, as a stateless request
    /// does: a context that never continues opens and closes no upstream session of its own
    /// (two upstream round trips fewer per message). Its provenance, conversation and an A2A
    /// agent's context are still its session's; the session's own upstream session is opened
    /// by its second task.
    pub async fn ingress_task_in_session(
        &self,
        ctx: &RequestCtx,
        task: IngressTask<'_>,
        session: SessionId,
        first: bool,
        updates: Option<&mpsc::Sender<Envelope>>,
    ) -> Result<(Trip, SessionId), Refusal> {
        let progress = updates.map_or(Progress::Quiet, Progress::Updates);
        let lender = if first {
            self.lender(ctx, task.ingress).await
        } else {
            None
        };
        let mut kept = Some(session);
        let trip = self
            .run_ingress(ctx, task, progress, &mut kept, lender.as_deref())
            .await?;
        Ok((trip, kept.unwrap_or_default()))
    }

    /// The one way in: `task` in `kept` (a session the front end keeps, replaced here if it
    /// is gone) or, with none, in the tenant's session for the front end; on `lender`'s
    /// upstream sessions when given ([`Proxy::ingress_task_in_session`]). A session gone
    /// idle past its TTL (or lost by the store) is opened anew, once.
    async fn run_ingress(
        &self,
        ctx: &RequestCtx,
        task: IngressTask<'_>,
        progress: Progress<'_>,
        kept: &mut Option<SessionId>,
        lender: Option<&ClientSession>,
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
        let from = ingress_from(task.ingress);
        for fresh in [false, true] {
            let session = match (kept.as_ref(), fresh) {
                (Some(id), false) => Ok(id.clone()),
                (Some(_), true) => self.open_ingress_session(ctx, task.ingress).await,
                (None, _) => self.ingress_session(ctx, task.ingress, fresh).await,
            };
            let session_id = match session {
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
            if kept.is_some() {
                *kept = Some(session_id.clone());
            }
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
                ledger_input: task.ledger_input.as_ref(),
                checked: false,
                rerouted: false,
                lender,
            };
            let trip = Pipeline(self).submit(&env, ctx, t, progress).await?;
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

    /// Registers `tenant`'s task `task_id` of front end `ingress` as running, for a cancel to
    /// find from now on: the route calls it when it admits the task, before it spawns it, and
    /// keeps the registration until the task's future ends.
    pub fn ingress_task_arrived(
        &self,
        tenant: &str,
        ingress: Ingress,
        task_id: &TaskId,
    ) -> super::Registration {
        let owner = super::owner_of(tenant, ingress_from(ingress));
        self.running.register(owner, None, task_id.clone())
    }

    /// Cancels `tenant`'s front-end task `task_id` (its client went away before the answer,
    /// or asked), as [`Proxy::cancel_for_disconnect`] does for an LDP client, here or (cluster
    /// mode) on the replica running it: whether it was running (from the moment it was
    /// admitted) and is now cancelled.
    pub async fn cancel_ingress_task(
        &self,
        tenant: &str,
        ingress: Ingress,
        task_id: &TaskId,
    ) -> bool {
        let owner = super::owner_of(tenant, ingress_from(ingress));
        self.cancel_anywhere(&owner, task_id, None).await.is_some()
    }

    /// The tenant's session for `ingress`, live (opened anew if it was gone), to lend its
    /// upstream sessions to a new context's first task; none when no session can be had
    /// (the task then runs on its own, as it would have).
    async fn lender(&self, ctx: &RequestCtx, ingress: Ingress) -> Option<Arc<ClientSession>> {
        let owner = super::owner_of(&ctx.tenant.name, ingress_from(ingress));
        for fresh in [false, true] {
            let id = self.ingress_session(ctx, ingress, fresh).await.ok()?;
            if let Ok(Some(session)) = self.session(&id, &owner).await {
                return Some(session);
            }
        }
        None
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

// The sessions a front end keeps itself (the A2A bridge: one per context).
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

    /// Closes `tenant`'s `session` kept by the `ingress` front end (an A2A context it
    /// forgot): its upstream sessions closed, its conversations dropped, its slot under the
    /// tenant's session cap freed.
    pub async fn close_ingress_session(&self, tenant: &str, ingress: Ingress, session: &SessionId) {
        let owner = super::owner_of(tenant, ingress_from(ingress));
        match self.sessions.close(session, &owner).await {
            Ok(bindings) => {
                self.close_later(bindings);
                self.conversations.forget_session(tenant, session).await;
            }
            Err(e) => tracing::warn!(error = %e, "a front end's session was not closed"),
        }
    }

    /// Cancels `tenant`'s task `task_id` running in `session` (opened for `ingress` by
    /// [`Proxy::open_ingress_session`]) here or (cluster mode) on another replica; false when
    /// it is not running.
    pub async fn cancel_task_in_session(
        &self,
        tenant: &str,
        ingress: Ingress,
        session: &SessionId,
        task_id: &TaskId,
    ) -> bool {
        let owner = super::owner_of(tenant, ingress_from(ingress));
        self.cancel_anywhere(&owner, task_id, Some(session))
            .await
            .is_some()
    }
}
