//! Recent tasks and what became of them — running (in which session), then the answer as
//! its client received it — kept for the client that submitted each (scope and sender), bounded
//! in bytes and expiring. The gateway answers status queries and sessionless cancels from it
//! (`proxy/status.rs`), and so does the simulated delegate.

use crate::fair::{FairTable, Kept, Probe, TableStats};
use crate::ldp::error::GatewayCode;
use crate::ldp::{Body, Envelope, LdpError, PayloadMode, SessionId, TaskId};
use std::sync::Arc;
use std::time::Duration;

/// Weight of an entry beyond its ids and answer and the table's own overhead: the key's
/// strings' headers (256 bytes in all, as the Redis store counts an entry).
const ENTRY_OVERHEAD: usize = 256 - crate::fair::ENTRY_OVERHEAD;

/// A task's entry: who asked (a scope, such as the gateway's tenant, and the envelope's
/// `from`) and which task, so one client's task id can neither read nor overwrite another
/// client's entry.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct StatusKey {
    scope: String,
    from: String,
    task: TaskId,
}

impl StatusKey {
    /// The key of `task` sent by `from` in `scope`.
    pub fn new(scope: &str, from: &str, task: &TaskId) -> StatusKey {
        StatusKey {
            scope: scope.to_owned(),
            from: from.to_owned(),
            task: task.clone(),
        }
    }

    /// Its scope, sender and task.
    pub fn parts(&self) -> (&str, &str, &TaskId) {
        (&self.scope, &self.from, &self.task)
    }
}

/// A key sought within its scope's part of the table (the scope is the table's tenant).
#[derive(Hash)]
struct Sought<'a> {
    from: &'a str,
    task: &'a str,
}

impl Probe<StatusKey> for Sought<'_> {
    fn is(&self, key: &StatusKey) -> bool {
        key.from == self.from && key.task.as_str() == self.task
    }
}

/// What is known of a task.
#[derive(Debug, Clone)]
pub enum TaskStatus {
    /// Admitted and running in this client session.
    Running(SessionId),
    /// Answered: the TASK_RESULT or TASK_FAILED its client received.
    Done(Arc<Envelope>),
}

impl Kept<StatusKey> for TaskStatus {
    /// Its ids, the whole answer kept (output, provenance, error and partial output,
    /// [`crate::provenance::bounds::envelope_weight`]), and an overhead.
    fn weight(&self, k: &StatusKey) -> usize {
        let ids = k.scope.len() + k.from.len() + k.task.len();
        let value = match self {
            TaskStatus::Running(session) => session.len(),
            TaskStatus::Done(env) => crate::provenance::bounds::envelope_weight(env),
        };
        ids + value + ENTRY_OVERHEAD
    }

    /// A running task's entry is never evicted: its status query and its sessionless cancel
    /// find it until it ends (or the TTL passes).
    fn running(&self) -> bool {
        match self {
            TaskStatus::Running(_) => true,
            TaskStatus::Done(_) => false,
        }
    }
}

/// Recent task outcomes, per client (this replica's tasks only): a tenant-fair table
/// ([`crate::fair`]) whose tenants are the scopes, bounded in bytes, each entry kept `ttl`
/// after its last change; a scope over its share loses its oldest answers first, a running
/// task's entry is never evicted.
///
/// Not `moka`: with its bookkeeping, two writes per task cost the load bench 7–8% of the
/// gateway's throughput at 64 connections (measured); and it has no per-tenant shares.
pub struct RecentTasks {
    table: FairTable<StatusKey, TaskStatus>,
}

impl RecentTasks {
    /// A store bounded by `max_bytes` of entries, each kept `ttl` after its last change.
    pub fn new(ttl: Duration, max_bytes: u64) -> RecentTasks {
        RecentTasks {
            table: FairTable::new(usize::try_from(max_bytes).unwrap_or(usize::MAX), Some(ttl)),
        }
    }

    /// Sets the state of `task` for (`scope`, `from`); the key is built only for a new entry.
    /// A new entry refused (its scope over its share with running tasks only) is not kept:
    /// a status query for it answers `TASK_NOT_FOUND`.
    fn set(&self, scope: &str, from: &str, task: &TaskId, status: TaskStatus) {
        let sought = Sought {
            from,
            task: task.as_str(),
        };
        // Either the new entry or the change takes it.
        let status = std::cell::Cell::new(Some(status));
        let _ = self.table.change(
            scope,
            &sought,
            || {
                status
                    .take()
                    .map(|s| (StatusKey::new(scope, from, task), s))
            },
            |old| {
                if let Some(s) = status.take() {
                    *old = s;
                }
            },
        );
    }

    /// The task was admitted and runs in `session`.
    pub fn running(&self, scope: &str, from: &str, task: &TaskId, session: SessionId) {
        self.set(scope, from, task, TaskStatus::Running(session));
    }

    /// The task's answer, as its client receives it.
    pub fn done(&self, scope: &str, from: &str, task: &TaskId, answer: Arc<Envelope>) {
        self.set(scope, from, task, TaskStatus::Done(answer));
    }

    /// The answer, sent as `me`, to `query`, a status query for `key`'s task: the stored answer
    /// as its client received it, TASK_UPDATE `working` while it runs, or TASK_FAILED
    /// `TASK_NOT_FOUND` (unknown, expired, or another client's: the same answer for all three).
    pub fn answer_query(&self, key: &StatusKey, query: &Envelope, me: &str) -> Arc<Envelope> {
        answer_query(self.get(key), key, query, me)
    }

    /// Bytes the entries weigh together.
    pub fn bytes(&self) -> usize {
        self.table.bytes()
    }

    /// The table's figures (its metrics).
    pub fn stats(&self) -> TableStats {
        self.table.stats()
    }

    /// The task's state, if this client submitted it and it has not expired.
    pub fn get(&self, key: &StatusKey) -> Option<TaskStatus> {
        let sought = Sought {
            from: &key.from,
            task: key.task.as_str(),
        };
        self.table.get(&key.scope, &sought, TaskStatus::clone)
    }
}

/// The answer, sent as `me`, to `query`, a status query for `key`'s task whose state is
/// `status` (see [`RecentTasks::answer_query`]).
pub fn answer_query(
    status: Option<TaskStatus>,
    key: &StatusKey,
    query: &Envelope,
    me: &str,
) -> Arc<Envelope> {
    let body = match status {
        Some(TaskStatus::Done(answer)) => return answer,
        Some(TaskStatus::Running(_)) => Body::TaskUpdate {
            task_id: key.task.clone(),
            progress: None,
            message: Some("working".into()),
        },
        None => Body::TaskFailed {
            task_id: key.task.clone(),
            error: task_not_found(&key.task),
        },
    };
    Arc::new(query.reply(me, body, PayloadMode::Text))
}

/// `TASK_NOT_FOUND` for `task_id`.
pub fn task_not_found(task_id: &TaskId) -> LdpError {
    LdpError::gateway(
        GatewayCode::TaskNotFound,
        format!("task '{task_id}' is unknown, expired or not yours"),
    )
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::ldp::PayloadMode;

    fn store(max_bytes: u64, ttl: Duration) -> RecentTasks {
        RecentTasks::new(ttl, max_bytes)
    }

    /// A TASK_RESULT for `task` whose output is `output_bytes` long (the status stores' tests).
    pub(crate) fn result(task: &str, output_bytes: usize) -> Arc<Envelope> {
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

    fn bytes(s: &RecentTasks) -> usize {
        s.bytes()
    }

    fn count(s: &RecentTasks) -> usize {
        s.table.len()
    }

    #[test]
    fn entries_belong_to_their_tenant_and_sender() {
        let s = store(1 << 20, Duration::from_secs(60));
        let t: TaskId = "t1".into();
        s.running("acme", "alice", &t, "sess".into());
        assert!(matches!(
            s.get(&StatusKey::new("acme", "alice", &t)),
            Some(TaskStatus::Running(id)) if id.as_str() == "sess"
        ));
        assert!(s.get(&StatusKey::new("acme", "bob", &t)).is_none());
        assert!(s.get(&StatusKey::new("other", "alice", &t)).is_none());
        // Another client's task of the same id does not replace it.
        s.done("other", "alice", &t, result("t1", 10));
        assert!(matches!(
            s.get(&StatusKey::new("acme", "alice", &t)),
            Some(TaskStatus::Running(_))
        ));
        s.done("acme", "alice", &t, result("t1", 10));
        assert!(matches!(
            s.get(&StatusKey::new("acme", "alice", &t)),
            Some(TaskStatus::Done(env)) if env.body.task_id() == Some("t1")
        ));
        // One entry each; the first client's replaced in place.
        assert_eq!(count(&s), 2);
    }

    #[test]
    fn bytes_bound_the_store_and_the_newest_stay() {
        let max = 256 * 1024;
        let s = store(max, Duration::from_secs(60));
        for i in 0..1000 {
            let t: TaskId = format!("t{i}").into();
            s.running("a", "c", &t, "sess".into());
            s.done("a", "c", &t, result(&t, 4096));
        }
        assert!(bytes(&s) <= max as usize, "{}", bytes(&s));
        assert!(count(&s) < 1000 && count(&s) > 0, "{}", count(&s));
        let last: TaskId = "t999".into();
        assert!(s.get(&StatusKey::new("a", "c", &last)).is_some());
        let first: TaskId = "t0".into();
        assert!(s.get(&StatusKey::new("a", "c", &first)).is_none());
    }

    #[test]
    fn entries_expire() {
        let s = store(1 << 20, Duration::from_millis(1));
        let t: TaskId = "t".into();
        s.running("a", "c", &t, "s".into());
        std::thread::sleep(Duration::from_millis(5));
        assert!(s.get(&StatusKey::new("a", "c", &t)).is_none());
        // A change of the scope drops its expired entries.
        s.running("a", "c", &"newest".into(), "s".into());
        assert_eq!(count(&s), 1);
    }

    /// Another tenant's flood of large answers leaves a tenant's own answers (within its
    /// share) in place, and its running task's entry too.
    #[test]
    fn a_flooding_scope_evicts_only_its_own_answers() {
        let max = 4 << 20;
        let s = store(max, Duration::from_secs(60));
        let mine: TaskId = "mine".into();
        let running: TaskId = "running".into();
        s.done("alpha", "c", &mine, result("mine", 1000));
        s.running("alpha", "c", &running, "sess".into());
        for i in 0..100 {
            let t: TaskId = format!("b{i}").into();
            s.running("beta", "c", &t, "sess".into());
            s.done("beta", "c", &t, result(&t, 512 * 1024));
        }
        assert!(bytes(&s) <= max as usize, "{}", bytes(&s));
        assert!(s.get(&StatusKey::new("alpha", "c", &mine)).is_some());
        assert!(matches!(
            s.get(&StatusKey::new("alpha", "c", &running)),
            Some(TaskStatus::Running(_))
        ));
        assert!(s.get(&StatusKey::new("beta", "c", &"b99".into())).is_some());
        assert!(s.get(&StatusKey::new("beta", "c", &"b0".into())).is_none());
    }
}
