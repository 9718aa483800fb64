//! Ending things: TASK_CANCEL, SESSION_CLOSE, expiry sweeps and shutdown, each closing the
//! upstream sessions involved.

use super::status::{status_unavailable, task_not_found, TaskStatus};
use super::{owner, Proxy, Refusal, RequestCtx};
use crate::ldp::{Body, Envelope, PayloadMode, SessionId, TaskId};
use crate::session::{Binding, RunningTask};
use crate::state::bus::{Note, Topic};
use crate::state::{ConversationStore as _, SessionStore};
use crate::upstream::{UpstreamClient, UpstreamError};
use std::sync::Arc;
use std::time::Duration;

/// A cancel asked of the other replicas: the task's owner (tenant and sender), its id, its
/// session when the client named one.
#[derive(serde::Serialize, serde::Deserialize)]
struct CancelAsk {
    owner: String,
    task: String,
    session: Option<String>,
}

async fn close_all(upstream: &UpstreamClient, bindings: Vec<Binding>) {
    // An OpenAI-backed delegate or an A2A agent has no session to close.
    let closes = bindings
        .iter()
        .filter(|b| b.delegate.upstream.keeps_sessions())
        .map(|b| upstream.close_session(&b.delegate.base_url, &b.upstream));
    futures_util::future::join_all(closes).await;
}

impl Proxy {
    /// Sends TASK_CANCEL for `task_id` to the upstream session of binding `b`, within the
    /// handshake deadline.
    async fn send_cancel(&self, b: &Binding, task_id: &TaskId) -> Result<Envelope, UpstreamError> {
        let cancel = Envelope::new(
            b.upstream.session_id.as_str(),
            self.id(),
            b.upstream.delegate_id.as_str(),
            Body::TaskCancel {
                task_id: task_id.clone(),
            },
            PayloadMode::Text,
        );
        self.upstream
            .send(
                &b.delegate.base_url,
                &cancel,
                self.cfg.upstream.handshake_timeout,
            )
            .await
    }

    /// Cancels `task`: nothing more starts for it (no round, no verifier, no failover), the
    /// LDP calls it has in flight are dropped, and each of their delegates is sent
    /// TASK_CANCEL (an OpenAI-backed one has none: a streamed completion stops being read, a
    /// whole one runs to its end within the answer cap; either is settled and recorded).
    /// `None` when no call was in flight at an LDP delegate; else whether every TASK_CANCEL
    /// was answered, and the last failure.
    async fn cancel_running(
        &self,
        task: &RunningTask,
    ) -> Option<Result<(), (String, UpstreamError)>> {
        let calls: Vec<(Binding, TaskId)> = task
            .cancel()
            .into_iter()
            .filter(|(b, _)| b.delegate.upstream.keeps_sessions())
            .collect();
        if calls.is_empty() {
            task.abandon();
            return None;
        }
        let sends = calls.iter().map(|(b, id)| async move {
            let sent = self.send_cancel(b, id).await;
            tracing::info!(task_id = %id, delegate = %b.delegate.name, ok = sent.is_ok(), "task cancelled upstream");
            // The client hears of it: the delegate as clients are told of it.
            sent.map_err(|e| (b.delegate.client_name(), e))
        });
        let mut outcome = Ok(());
        for sent in futures_util::future::join_all(sends).await {
            if let Err(e) = sent {
                outcome = Err(e);
            }
        }
        // Told (or unreachable, within the handshake deadline): whatever they still answer,
        // nobody waits for it.
        task.abandon();
        Some(outcome.map(|_| ()))
    }

    /// Cancels `owner`'s task `task_id` in session `session_id` on behalf of a client that
    /// went away (a dropped request or stream), as TASK_CANCEL does. Whether it was running
    /// (from the moment it was admitted: [`Proxy::task_arrived`]) and is now cancelled.
    pub async fn cancel_for_disconnect(
        &self,
        session_id: &SessionId,
        owner: &str,
        task_id: &TaskId,
    ) -> bool {
        let Some(task) = self.running.find(owner, task_id, Some(session_id)) else {
            return false;
        };
        tracing::info!(task_id = %task_id, "client went away; task cancelled");
        self.cancel_found(&task).await;
        true
    }

    /// Cancels a running task found in the table, logging a TASK_CANCEL that did not reach
    /// its delegate.
    pub(super) async fn cancel_found(&self, task: &RunningTask) {
        if let Some(Err((delegate, e))) = self.cancel_running(task).await {
            tracing::info!(delegate = %delegate, error = %e, "upstream TASK_CANCEL failed");
        }
    }

    /// TASK_CANCEL: the asking client's task running in this process (in the envelope's
    /// session; without a session id, the reference Rust adapter's cancel, in any), from the
    /// moment it was admitted. A task not running here: without a session id, the status
    /// store says whether it ran; with one, an unknown session is `SESSION_NOT_FOUND`.
    pub(super) async fn cancel(
        &self,
        env: &Envelope,
        ctx: &RequestCtx,
        task_id: &TaskId,
    ) -> Envelope {
        let owner = owner(ctx, env);
        let session_id = (!env.session_id.is_empty()).then_some(&env.session_id);
        let Some(task) = self.running.find(&owner, task_id, session_id) else {
            // Cluster mode: running on another replica, which cancels it.
            if let Some(message) = self.cancel_elsewhere(&owner, task_id, session_id).await {
                return self.cancel_answer(env, task_id, message);
            }
            if session_id.is_none() {
                return match self.task_status(env, ctx, task_id).await {
                    // Running in another replica's process, or just finished.
                    Ok(Some(TaskStatus::Running(_) | TaskStatus::Done(_))) => {
                        self.not_running(env, task_id)
                    }
                    Ok(None) => self.task_failed(env, task_id, task_not_found(task_id)),
                    Err(e) => self.task_failed(env, task_id, status_unavailable(&e)),
                };
            }
            return match self.session(&env.session_id, &owner).await {
                Ok(Some(_)) => self.not_running(env, task_id),
                Ok(None) => self.task_failed(env, task_id, self.session_not_found(env)),
                Err(e) => self.task_failed(env, task_id, e),
            };
        };
        let message = self.cancel_message(&task).await;
        self.cancel_answer(env, task_id, message)
    }

    /// Cancels `task` (running here): what became of its calls, as the TASK_CANCEL answer
    /// says (the task answers CANCELLED either way).
    async fn cancel_message(&self, task: &RunningTask) -> String {
        match self.cancel_running(task).await {
            None | Some(Ok(())) => "cancelled".to_owned(),
            Some(Err((delegate, e))) => {
                tracing::info!(delegate = %delegate, error = %e, "upstream TASK_CANCEL failed");
                format!(
                    "cancelled; the cancel could not reach delegate '{delegate}': it {}",
                    e.summary()
                )
            }
        }
    }

    /// Cancels `owner`'s task `task_id` (in `session`, when named) where it runs: here, else
    /// (cluster mode) on the replica running it. What became of its calls, or `None` when no
    /// replica runs it.
    pub(super) async fn cancel_anywhere(
        &self,
        owner: &str,
        task_id: &TaskId,
        session: Option<&SessionId>,
    ) -> Option<String> {
        match self.running.find(owner, task_id, session) {
            Some(task) => Some(self.cancel_message(&task).await),
            None => self.cancel_elsewhere(owner, task_id, session).await,
        }
    }

    /// Cluster mode: asks the other replicas to cancel `owner`'s task `task_id`; what became
    /// of its calls, as the replica running it says, or `None` (no replica runs it, or the
    /// bus is down: said in the log).
    async fn cancel_elsewhere(
        &self,
        owner: &str,
        task_id: &TaskId,
        session: Option<&SessionId>,
    ) -> Option<String> {
        let bus = self.bus.as_ref()?;
        let ask = CancelAsk {
            owner: owner.to_owned(),
            task: task_id.as_str().to_owned(),
            session: session.map(|s| s.as_str().to_owned()),
        };
        let ask = serde_json::to_value(&ask).ok()?;
        // Every other replica answers at once whether it runs the task; the one that does,
        // once its delegates were told (each within the handshake deadline).
        let deadline = self.cfg.upstream.handshake_timeout
            + self.cfg.cluster.redis_timeout * 4
            + Duration::from_secs(1);
        let found = |v: &serde_json::Value| v.get("found") == Some(&serde_json::Value::Bool(true));
        match bus.ask(Topic::Cancel, ask, deadline, found).await {
            Ok(Some(v)) => Some(
                v.get("message")
                    .and_then(|m| m.as_str())
                    .unwrap_or("cancelled")
                    .to_owned(),
            ),
            Ok(None) => None,
            Err(e) => {
                tracing::warn!(task_id = %task_id, error = %e, "a cancel was not asked of the other replicas");
                None
            }
        }
    }

    /// Cluster mode: answers the other replicas' cancels of tasks running here until
    /// `shutdown` (`None` on a single node).
    pub fn spawn_cancel_listener(
        self: Arc<Self>,
        mut shutdown: tokio::sync::watch::Receiver<bool>,
    ) -> Option<tokio::task::JoinHandle<()>> {
        let mut asks = self.bus.as_ref()?.listen(Topic::Cancel);
        Some(tokio::spawn(async move {
            loop {
                let note = tokio::select! {
                    _ = shutdown.wait_for(|s| *s) => break,
                    n = asks.recv() => n,
                };
                match note {
                    Ok(note) => {
                        let this = self.clone();
                        // Its own task: one slow delegate does not hold up the next cancel.
                        self.spawn_tracked(async move { this.answer_cancel(&note).await });
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                        tracing::warn!(skipped = n, "cancels from other replicas skipped (behind)");
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
                }
            }
        }))
    }

    /// Answers another replica's cancel: the task cancelled here, or not running here.
    async fn answer_cancel(&self, note: &Note) {
        let Some(bus) = &self.bus else { return };
        let answer = match serde_json::from_value::<CancelAsk>(note.body.clone()) {
            Ok(ask) => {
                let (task, session) = (TaskId::from(ask.task), ask.session.map(SessionId::from));
                match self.running.find(&ask.owner, &task, session.as_ref()) {
                    Some(running) => {
                        tracing::info!(task_id = %task, "task cancelled for another replica");
                        let message = self.cancel_message(&running).await;
                        serde_json::json!({ "found": true, "message": message })
                    }
                    None => serde_json::json!({ "found": false }),
                }
            }
            Err(_) => serde_json::json!({ "found": false }),
        };
        bus.answer(note, answer).await;
    }

    fn not_running(&self, env: &Envelope, task_id: &TaskId) -> Envelope {
        self.cancel_answer(env, task_id, format!("task '{task_id}' is not running"))
    }

    fn cancel_answer(&self, env: &Envelope, task_id: &TaskId, message: String) -> Envelope {
        env.reply(
            self.id(),
            Body::TaskUpdate {
                task_id: task_id.to_owned(),
                progress: None,
                message: Some(message),
            },
            PayloadMode::Text,
        )
    }

    pub(super) async fn close(
        &self,
        env: &Envelope,
        ctx: &RequestCtx,
    ) -> Result<Envelope, Refusal> {
        // Closing twice, or closing an unknown session, is acknowledged the same way: the
        // caller cannot learn whether someone else's session id exists.
        let owner = owner(ctx, env);
        let owned = matches!(self.session(&env.session_id, &owner).await, Ok(Some(_)));
        let bindings = self
            .sessions
            .close(&env.session_id, &owner)
            .await
            .map_err(|e| Refusal::Unavailable(format!("session not closed: {e}")))?;
        self.close_later(bindings);
        // Its conversations end with it (only the owner's close reaches them).
        if owned {
            self.conversations
                .forget_session(&ctx.tenant.name, &env.session_id)
                .await;
        }
        Ok(env.reply(
            self.id(),
            Body::SessionClose {
                reason: Some("acknowledged".into()),
            },
            PayloadMode::Text,
        ))
    }

    /// Closes upstream sessions in the background (each call has the handshake deadline).
    pub(super) fn close_later(&self, bindings: Vec<Binding>) {
        if bindings.is_empty() {
            return;
        }
        let upstream = self.upstream.clone();
        self.spawn_tracked(async move { close_all(&upstream, bindings).await });
    }

    /// Removes expired sessions and closes their upstream sessions; returns how many expired.
    pub async fn sweep_expired(&self) -> usize {
        let (n, bindings) = self.sessions.take_expired().await;
        if n > 0 {
            tracing::debug!(sessions = n, upstream = bindings.len(), "sessions expired");
        }
        close_all(&self.upstream, bindings).await;
        n
    }

    /// Closes every session and its upstream sessions (shutdown). In cluster mode the
    /// sessions live on in the other replicas: only this replica's copies are dropped.
    pub async fn close_everything(&self) {
        let bindings = self.sessions.take_all();
        close_all(&self.upstream, bindings).await;
    }
}
