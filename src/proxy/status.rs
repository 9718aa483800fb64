//! Status queries: the reference Rust adapter discards the answer to its TASK_SUBMIT and polls
//! with TASK_UPDATE `status_query`. Each task's latest state is kept here — running (and in
//! which client session, for a TASK_CANCEL without one), then the answer exactly as its client
//! received it — for the client that submitted it only, bounded in bytes and expiring.

use super::{Proxy, RequestCtx};
use crate::config::TaskStatusConfig;
use crate::ldp::error::GatewayCode;
use crate::ldp::{Body, Envelope, LdpError, PayloadMode, SessionId, TaskId};
use moka::policy::EvictionPolicy;
use moka::sync::Cache;
use std::sync::Arc;

/// Weight of an entry beyond its ids and output: the envelope, the provenance or error (an
/// estimate: weighing them exactly would serialise them once more per task).
const ENTRY_OVERHEAD: usize = 1024;

/// A task's entry: who asked (tenant and envelope `from`, as sessions are owned) and which
/// task, so one client's task id can neither read nor overwrite another client's entry.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct StatusKey {
    tenant: String,
    from: String,
    task: TaskId,
}

impl StatusKey {
    pub(super) fn new(tenant: &str, from: &str, task: &TaskId) -> StatusKey {
        StatusKey {
            tenant: tenant.to_owned(),
            from: from.to_owned(),
            task: task.clone(),
        }
    }

    fn of(ctx: &RequestCtx, env: &Envelope, task: &TaskId) -> StatusKey {
        StatusKey::new(&ctx.tenant.name, &env.from, task)
    }
}

/// What is known of a task.
#[derive(Debug, Clone)]
pub(super) enum TaskStatus {
    /// Admitted and running in this client session.
    Running(SessionId),
    /// Answered: the TASK_RESULT or TASK_FAILED its client received.
    Done(Arc<Envelope>),
}

/// Recent task outcomes, per client (this replica's tasks only).
pub(super) struct TaskStatuses {
    cache: Cache<StatusKey, TaskStatus>,
}

impl TaskStatuses {
    /// A store bounded by `max_bytes` of entries (least recently used out first), each kept
    /// `ttl` after its last change.
    pub(super) fn new(cfg: &TaskStatusConfig) -> TaskStatuses {
        let cache = Cache::builder()
            .max_capacity(cfg.max_bytes)
            .weigher(|k: &StatusKey, v: &TaskStatus| weight(k, v))
            .time_to_live(cfg.ttl)
            // Recency, not popularity: a new task's entry must not be refused admission in
            // favour of an older one that was polled often (TinyLFU's default).
            .eviction_policy(EvictionPolicy::lru())
            .build();
        TaskStatuses { cache }
    }

    /// The task was admitted and runs in `session`.
    pub(super) fn running(&self, key: StatusKey, session: SessionId) {
        self.cache.insert(key, TaskStatus::Running(session));
    }

    /// The task's answer, as its client receives it.
    pub(super) fn done(&self, key: StatusKey, answer: Arc<Envelope>) {
        self.cache.insert(key, TaskStatus::Done(answer));
    }

    /// The task's state, if this client submitted it and it has not expired.
    pub(super) fn get(&self, key: &StatusKey) -> Option<TaskStatus> {
        self.cache.get(key)
    }
}

/// An entry's weight in bytes, about: its ids, its output or error text, and an overhead.
fn weight(k: &StatusKey, v: &TaskStatus) -> u32 {
    let ids = k.tenant.len() + k.from.len() + k.task.len();
    let value = match v {
        TaskStatus::Running(session) => session.len(),
        TaskStatus::Done(env) => match &env.body {
            Body::TaskResult { output, .. } => output.get().len(),
            Body::TaskFailed { error, .. } => error.message.len(),
            _ => 0,
        },
    };
    u32::try_from(ids + value + ENTRY_OVERHEAD).unwrap_or(u32::MAX)
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
        match self.statuses.get(&StatusKey::of(ctx, env, task_id)) {
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
        self.statuses.get(&StatusKey::of(ctx, env, task_id))
    }
}

/// `TASK_NOT_FOUND` for `task_id`.
pub(super) fn task_not_found(task_id: &TaskId) -> LdpError {
    LdpError::gateway(
        GatewayCode::TaskNotFound,
        format!("task '{task_id}' is unknown, expired or not yours"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn store(max_bytes: u64, ttl: Duration) -> TaskStatuses {
        TaskStatuses::new(&TaskStatusConfig { ttl, max_bytes })
    }

    fn result(task: &str, output_bytes: usize) -> Arc<Envelope> {
        let output = crate::ldp::Json::from_value(&serde_json::json!("x".repeat(output_bytes)));
        Arc::new(Envelope::new(
            "s",
            "gw",
            "client",
            Body::TaskResult {
                task_id: task.into(),
                output,
                provenance: None,
            },
            PayloadMode::Text,
        ))
    }

    #[test]
    fn entries_belong_to_their_tenant_and_sender() {
        let s = store(1 << 20, Duration::from_secs(60));
        let t: TaskId = "t1".into();
        s.running(StatusKey::new("acme", "alice", &t), "sess".into());
        assert!(matches!(
            s.get(&StatusKey::new("acme", "alice", &t)),
            Some(TaskStatus::Running(id)) if id.as_str() == "sess"
        ));
        assert!(s.get(&StatusKey::new("acme", "bob", &t)).is_none());
        assert!(s.get(&StatusKey::new("other", "alice", &t)).is_none());
        // Another client's task of the same id does not replace it.
        s.done(StatusKey::new("other", "alice", &t), result("t1", 10));
        assert!(matches!(
            s.get(&StatusKey::new("acme", "alice", &t)),
            Some(TaskStatus::Running(_))
        ));
        s.done(StatusKey::new("acme", "alice", &t), result("t1", 10));
        assert!(matches!(
            s.get(&StatusKey::new("acme", "alice", &t)),
            Some(TaskStatus::Done(env)) if env.body.task_id() == Some("t1")
        ));
    }

    #[test]
    fn bytes_bound_the_store() {
        let s = store(64 * 1024, Duration::from_secs(60));
        for i in 0..64 {
            let t: TaskId = format!("t{i}").into();
            s.done(StatusKey::new("a", "c", &t), result(&t, 4096));
        }
        s.cache.run_pending_tasks();
        assert!(
            s.cache.weighted_size() <= 64 * 1024,
            "{}",
            s.cache.weighted_size()
        );
        assert!(s.cache.entry_count() < 64);
        // The newest stays (recency, not frequency, decides).
        let last: TaskId = "t63".into();
        assert!(s.get(&StatusKey::new("a", "c", &last)).is_some());
    }

    #[test]
    fn entries_expire() {
        let s = store(1 << 20, Duration::from_millis(1));
        let t: TaskId = "t".into();
        s.running(StatusKey::new("a", "c", &t), "s".into());
        std::thread::sleep(Duration::from_millis(5));
        assert!(s.get(&StatusKey::new("a", "c", &t)).is_none());
    }
}
