//! Ending things: TASK_CANCEL, SESSION_CLOSE, expiry sweeps and shutdown, each closing the
//! upstream sessions involved.

use super::status::{status_unavailable, task_not_found, TaskStatus};
use super::{owner, Proxy, Refusal, RequestCtx};
use crate::ldp::{Body, Envelope, PayloadMode, SessionId, TaskId};
use crate::session::Binding;
use crate::state::SessionStore;
use crate::upstream::{UpstreamClient, UpstreamError};

async fn close_all(upstream: &UpstreamClient, bindings: Vec<Binding>) {
    // An OpenAI-backed delegate has no session to close.
    let closes = bindings
        .iter()
        .filter(|b| b.delegate.openai.is_none())
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

    /// Cancels a running task upstream on behalf of a client that went away (a dropped
    /// stream). Returns whether a TASK_CANCEL reached the delegate.
    pub async fn cancel_for_disconnect(
        &self,
        session_id: &SessionId,
        owner: &str,
        task_id: &TaskId,
    ) -> bool {
        let Ok(Some(session)) = self.session(session_id, owner).await else {
            return false;
        };
        let Some(b) = session
            .running_skill(task_id)
            .and_then(|skill| session.binding(&skill))
        else {
            return false;
        };
        if b.delegate.openai.is_some() {
            // Nothing to send: a streamed completion stops being read once nobody listens (a
            // whole one runs to its end, within the answer cap), and is settled and recorded.
            return false;
        }
        let sent = self.send_cancel(&b, task_id).await;
        tracing::info!(task_id = %task_id, delegate = %b.delegate.name, ok = sent.is_ok(), "client went away; task cancelled upstream");
        sent.is_ok()
    }

    /// TASK_CANCEL. Without a session id (the reference Rust adapter's cancel) the task is
    /// found in the status store, among the asking client's tasks.
    pub(super) async fn cancel(
        &self,
        env: &Envelope,
        ctx: &RequestCtx,
        task_id: &TaskId,
    ) -> Envelope {
        let session_id = if env.session_id.is_empty() {
            match self.task_status(env, ctx, task_id).await {
                Ok(Some(TaskStatus::Running(session_id))) => session_id,
                Ok(Some(TaskStatus::Done(_))) => return self.not_running(env, task_id),
                Ok(None) => return self.task_failed(env, task_id, task_not_found(task_id)),
                Err(e) => return self.task_failed(env, task_id, status_unavailable(&e)),
            }
        } else {
            env.session_id.clone()
        };
        let session = match self.session(&session_id, &owner(ctx, env)).await {
            Ok(Some(s)) => s,
            Ok(None) => return self.task_failed(env, task_id, self.session_not_found(env)),
            Err(e) => return self.task_failed(env, task_id, e),
        };
        let binding = session
            .running_skill(task_id)
            .and_then(|skill| session.binding(&skill));
        let Some(b) = binding else {
            return self.not_running(env, task_id);
        };
        if b.delegate.openai.is_some() {
            let message =
                "an OpenAI-compatible delegate has no cancel: the completion runs to its end";
            return self.cancel_answer(env, task_id, message.into());
        }
        let message = match self.send_cancel(&b, task_id).await {
            Ok(_) => "cancelled".to_owned(),
            Err(e) => {
                tracing::info!(delegate = %b.delegate.name, error = %e, "upstream TASK_CANCEL failed");
                format!("cancel could not reach the delegate: it {}", e.summary())
            }
        };
        self.cancel_answer(env, task_id, message)
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
        let bindings = self
            .sessions
            .close(&env.session_id, &owner(ctx, env))
            .await
            .map_err(|e| Refusal::Unavailable(format!("session not closed: {e}")))?;
        self.close_later(bindings);
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
