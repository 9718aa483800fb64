//! Status queries: the reference Rust adapter discards the answer to its TASK_SUBMIT and polls
//! with TASK_UPDATE `status_query`. Each task's latest state is kept in the status store
//! (`state::Statuses`: this process's [`crate::recent::RecentTasks`], or Redis in cluster mode,
//! so any replica answers) — running (and in which client session, for a TASK_CANCEL without
//! one), then the answer exactly as its client received it — for the client (tenant and
//! `from`) that submitted it.

use super::{Proxy, RequestCtx};
use crate::ldp::error::GatewayCode;
use crate::ldp::{Body, Envelope, LdpError, PayloadMode, TaskId};
pub(super) use crate::recent::{task_not_found, StatusKey, TaskStatus};
use crate::state::{StatusStore, StoreError};
use std::sync::Arc;

/// The key of `task_id` for the client asking in `env`.
fn key(ctx: &RequestCtx, env: &Envelope, task_id: &TaskId) -> StatusKey {
    StatusKey::new(&ctx.tenant.name, &env.from, task_id)
}

/// `SHARED_STATE_UNAVAILABLE` (retryable) for a status that could not be read.
pub(super) fn status_unavailable(e: &StoreError) -> LdpError {
    LdpError::gateway(
        GatewayCode::Unavailable,
        format!("task status not read: {e}"),
    )
}

impl Proxy {
    /// Answers a status query from the store (see [`crate::recent::answer_query`]). No
    /// session is needed: the store is keyed by the asking client.
    pub(super) async fn status_query(
        &self,
        env: &Envelope,
        ctx: &RequestCtx,
        task_id: &TaskId,
    ) -> Arc<Envelope> {
        let key = key(ctx, env, task_id);
        match self.statuses.get(&key).await {
            Ok(status) => crate::recent::answer_query(status, &key, env, self.id()),
            Err(e) => {
                let body = Body::TaskFailed {
                    task_id: task_id.clone(),
                    error: status_unavailable(&e),
                };
                Arc::new(env.reply(self.id(), body, PayloadMode::Text))
            }
        }
    }

    /// What this replica's status store weighs now, in bytes (0 in cluster mode).
    pub fn status_bytes(&self) -> usize {
        self.statuses.local_bytes()
    }

    /// This replica's status table's figures (none in cluster mode).
    pub fn status_stats(&self) -> Option<crate::fair::TableStats> {
        self.statuses.local_stats()
    }

    /// What the store knows of this client's task.
    pub(super) async fn task_status(
        &self,
        env: &Envelope,
        ctx: &RequestCtx,
        task_id: &TaskId,
    ) -> Result<Option<TaskStatus>, StoreError> {
        self.statuses.get(&key(ctx, env, task_id)).await
    }
}
