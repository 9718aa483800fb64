//! Recent tasks and their answers, for status queries and sessionless cancels. Single node:
//! this process's [`RecentTasks`] (`crate::recent`). Cluster mode: Redis, so any replica
//! answers a status query for a task another replica ran. Both keep each task for the
//! client (scope and `from`) that submitted it, bounded in bytes (`task_status.max_bytes`,
//! the least recently changed first) and expiring (`task_status.ttl`). When Redis does not
//! answer, a status query is answered `SHARED_STATE_UNAVAILABLE` (retryable) and a change is skipped
//! (logged; the Redis error is counted).

use super::StoreError;
use crate::ldp::{Envelope, SessionId, TaskId};
use crate::recent::{RecentTasks, StatusKey, TaskStatus};
use std::future::Future;
use std::sync::Arc;

mod redis;
pub use redis::RedisStatuses;

/// Keeps what became of recent tasks.
pub trait StatusStore {
    /// The task was admitted and runs in `session`.
    fn running(
        &self,
        scope: &str,
        from: &str,
        task: &TaskId,
        session: SessionId,
    ) -> impl Future<Output = ()> + Send;

    /// The task's answer, as its client receives it.
    fn done(
        &self,
        scope: &str,
        from: &str,
        task: &TaskId,
        answer: Arc<Envelope>,
    ) -> impl Future<Output = ()> + Send;

    /// The task's state, if this client submitted it and it has not expired.
    fn get(
        &self,
        key: &StatusKey,
    ) -> impl Future<Output = Result<Option<TaskStatus>, StoreError>> + Send;
}

/// The status store chosen at start.
pub enum Statuses {
    /// Single node.
    Local(RecentTasks),
    /// Cluster mode.
    Shared(RedisStatuses),
}

impl Statuses {
    /// What this process's store weighs (0 in cluster mode, where Redis keeps it).
    pub fn local_bytes(&self) -> usize {
        match self {
            Statuses::Local(r) => r.bytes(),
            Statuses::Shared(_) => 0,
        }
    }

    /// This process's table's figures (none in cluster mode).
    pub fn local_stats(&self) -> Option<crate::fair::TableStats> {
        match self {
            Statuses::Local(r) => Some(r.stats()),
            Statuses::Shared(_) => None,
        }
    }
}

impl StatusStore for Statuses {
    async fn running(&self, scope: &str, from: &str, task: &TaskId, session: SessionId) {
        match self {
            Statuses::Local(r) => r.running(scope, from, task, session),
            Statuses::Shared(r) => r.running(scope, from, task, session).await,
        }
    }

    async fn done(&self, scope: &str, from: &str, task: &TaskId, answer: Arc<Envelope>) {
        match self {
            Statuses::Local(r) => r.done(scope, from, task, answer),
            Statuses::Shared(r) => r.done(scope, from, task, answer).await,
        }
    }

    async fn get(&self, key: &StatusKey) -> Result<Option<TaskStatus>, StoreError> {
        match self {
            Statuses::Local(r) => Ok(r.get(key)),
            Statuses::Shared(r) => r.get(key).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recent::tests::result;
    use std::time::Duration;

    async fn kept_for_their_client(store: &Statuses, replica: &Statuses) {
        let t: TaskId = "t1".into();
        store.running("acme", "alice", &t, "sess".into()).await;
        let mine = StatusKey::new("acme", "alice", &t);
        assert!(matches!(
            replica.get(&mine).await.unwrap(),
            Some(TaskStatus::Running(s)) if s.as_str() == "sess"
        ));
        assert!(replica
            .get(&StatusKey::new("acme", "bob", &t))
            .await
            .unwrap()
            .is_none());
        let answer = result("t1", 10);
        store.done("acme", "alice", &t, answer.clone()).await;
        match replica.get(&mine).await.unwrap() {
            Some(TaskStatus::Done(env)) => assert_eq!(*env, *answer),
            other => panic!("{other:?}"),
        }
        // Bounded in bytes: the oldest go first, the newest stay.
        for i in 0..200 {
            let t: TaskId = format!("n{i}").into();
            store.done("acme", "alice", &t, result(&t, 4096)).await;
        }
        let newest = StatusKey::new("acme", "alice", &"n199".into());
        assert!(replica.get(&newest).await.unwrap().is_some());
        assert!(replica.get(&mine).await.unwrap().is_none());
    }

    /// A tenant's flood of answers evicts only its own oldest answers: another tenant's
    /// answer (within its share) stays, and so does the flooding tenant's running task.
    async fn a_flood_keeps_to_its_share(store: &Statuses) {
        let (mine, running): (TaskId, TaskId) = ("mine".into(), "running".into());
        store.done("alpha", "c", &mine, result("mine", 100)).await;
        store.running("beta", "c", &running, "sess".into()).await;
        for i in 0..200 {
            let t: TaskId = format!("b{i}").into();
            store.done("beta", "c", &t, result(&t, 4096)).await;
        }
        let key = |scope: &str, t: &str| StatusKey::new(scope, "c", &t.into());
        assert!(store.get(&key("alpha", "mine")).await.unwrap().is_some());
        assert!(matches!(
            store.get(&key("beta", "running")).await.unwrap(),
            Some(TaskStatus::Running(_))
        ));
        assert!(store.get(&key("beta", "b199")).await.unwrap().is_some());
        assert!(store.get(&key("beta", "b0")).await.unwrap().is_none());
    }

    #[tokio::test]
    async fn local_statuses_are_kept_for_their_client_and_bounded() {
        let s = Statuses::Local(RecentTasks::new(Duration::from_secs(60), 256 * 1024));
        kept_for_their_client(&s, &s).await;
        assert!(s.local_bytes() <= 256 * 1024);
        let s = Statuses::Local(RecentTasks::new(Duration::from_secs(60), 256 * 1024));
        a_flood_keeps_to_its_share(&s).await;
    }

    #[tokio::test]
    async fn shared_statuses_are_read_by_another_replica_and_bounded() {
        let (redis, _) = crate::state::redis::testing::redis();
        let ttl = Duration::from_secs(60);
        let a = Statuses::Shared(RedisStatuses::new(redis.clone(), ttl, 256 * 1024));
        let b = Statuses::Shared(RedisStatuses::new(redis, ttl, 256 * 1024));
        kept_for_their_client(&a, &b).await;
        let Statuses::Shared(r) = &a else {
            unreachable!()
        };
        let total = r.total_bytes().await.unwrap();
        assert!(total > 0 && total <= 256 * 1024, "{total}");
    }

    #[tokio::test]
    async fn shared_statuses_are_shared_out_by_tenant() {
        let (redis, _) = crate::state::redis::testing::redis();
        let ttl = Duration::from_secs(60);
        let s = Statuses::Shared(RedisStatuses::new(redis, ttl, 256 * 1024));
        a_flood_keeps_to_its_share(&s).await;
        let Statuses::Shared(r) = &s else {
            unreachable!()
        };
        let total = r.total_bytes().await.unwrap();
        assert!(total > 0 && total <= 256 * 1024, "{total}");
    }
}
