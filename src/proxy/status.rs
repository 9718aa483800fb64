//! Status queries: the reference Rust adapter discards the answer to its TASK_SUBMIT and polls
//! with TASK_UPDATE `status_query`. Each task's latest state is kept in a [`RecentTasks`] —
//! running (and in which client session, for a TASK_CANCEL without one), then the answer
//! exactly as its client received it — for the client (tenant and `from`) that submitted it.

use super::{Proxy, RequestCtx};
use crate::ldp::error::GatewayCode;
use crate::ldp::{Body, Envelope, LdpError, PayloadMode, TaskId};
pub(super) use crate::recent::{RecentTasks, StatusKey, TaskStatus};
use std::sync::Arc;

/// The key of `task_id` for the client asking in `env`.
fn key(ctx: &RequestCtx, env: &Envelope, task_id: &TaskId) -> StatusKey {
    StatusKey::new(&ctx.tenant.name, &env.from, task_id)
}

impl Proxy {
    /// Answers a status query from the store: the stored TASK_RESULT / TASK_FAILED, TASK_UPDATE
    /// `working` while the task runs, or TASK_FAILED `TASK_NOT_FOUND` (unknown, expired, or
    /// another client's). No session is needed: the store is keyed by the asking client.
    pub(super) fn status_query(
        &self,
        env: &Envelope,
        ctx: &RequestCtx,
        task_id: &TaskId,
    ) -> Arc<Envelope> {
        match self.statuses.get(&key(ctx, env, task_id)) {
            Some(TaskStatus::Done(answer)) => answer,
            Some(TaskStatus::Running(_)) => Arc::new(env.reply(
                self.id(),
                Body::TaskUpdate {
                    task_id: task_id.clone(),
                    progress: None,
                    message: Some("working".into()),
                },
                PayloadMode::Text,
            )),
            None => Arc::new(self.task_failed(env, task_id, task_not_found(task_id))),
        }
    }

    /// What the store knows of this client's task.
    pub(super) fn task_status(
        &self,
        env: &Envelope,
        ctx: &RequestCtx,
        task_id: &TaskId,
    ) -> Option<TaskStatus> {
        self.statuses.get(&key(ctx, env, task_id))
    }
}

/// `TASK_NOT_FOUND` for `task_id`.
pub(super) fn task_not_found(task_id: &TaskId) -> LdpError {
    LdpError::gateway(
        GatewayCode::TaskNotFound,
        format!("task '{task_id}' is unknown, expired or not yours"),
    )
}
