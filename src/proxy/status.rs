//! Status queries: the reference Rust adapter discards the answer to its TASK_SUBMIT and polls
//! with TASK_UPDATE `status_query`. Each task's latest state is kept in a [`RecentTasks`] —
//! running (and in which client session, for a TASK_CANCEL without one), then the answer
//! exactly as its client received it — for the client (tenant and `from`) that submitted it.

use super::{Proxy, RequestCtx};
use crate::ldp::{Envelope, TaskId};
pub(super) use crate::recent::{task_not_found, RecentTasks, StatusKey, TaskStatus};
use std::sync::Arc;

/// The key of `task_id` for the client asking in `env`.
fn key(ctx: &RequestCtx, env: &Envelope, task_id: &TaskId) -> StatusKey {
    StatusKey::new(&ctx.tenant.name, &env.from, task_id)
}

impl Proxy {
    /// Answers a status query from the store (see [`RecentTasks::answer_query`]). No session
    /// is needed: the store is keyed by the asking client.
    pub(super) fn status_query(
        &self,
        env: &Envelope,
        ctx: &RequestCtx,
        task_id: &TaskId,
    ) -> Arc<Envelope> {
        self.statuses
            .answer_query(&key(ctx, env, task_id), env, self.id())
    }

    /// What this replica's status store weighs now, in bytes.
    pub fn status_bytes(&self) -> usize {
        self.statuses.bytes()
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
