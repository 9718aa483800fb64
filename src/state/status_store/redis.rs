//! Recent tasks in Redis, shared out by tenant as the local table is (`crate::fair`): the
//! tenant-fair map `status` ([`crate::state::fair_map`]; `{p}:status:entries`, per tenant
//! `{p}:status:t:{t}:idle` and `:run`, `{p}:status:tenants`, `{p}:status:bytes`), each task's
//! state a field keyed by a SHA-256 of the client's scope, `from` and task id: `r` and the
//! session id while it runs, `d` and the answer's JSON once answered.

use super::StatusStore;
use crate::ldp::{Envelope, SessionId, TaskId};
use crate::recent::{StatusKey, TaskStatus};
use crate::state::fair_map::RedisFairMap;
use crate::state::redis::Redis;
use crate::state::StoreError;
use std::sync::Arc;
use std::time::Duration;

/// Cluster mode: the statuses every replica reads and writes.
pub struct RedisStatuses {
    map: RedisFairMap,
}

impl RedisStatuses {
    /// Statuses in `redis`, each kept `ttl` after its last change, at most `max_bytes` together.
    pub fn new(redis: Redis, ttl: Duration, max_bytes: u64) -> RedisStatuses {
        RedisStatuses {
            map: RedisFairMap::new(redis, "status", ttl, max_bytes),
        }
    }

    /// What the entries weigh, as Redis accounts them.
    pub async fn total_bytes(&self) -> Result<u64, StoreError> {
        self.map.total_bytes().await
    }

    async fn set(&self, scope: &str, from: &str, task: &TaskId, value: Vec<u8>) {
        let field = RedisFairMap::field(&[scope, from, task]);
        let r = self
            .map
            .set("status_set", scope, &field, &value, false, None)
            .await;
        if let Err(e) = r {
            tracing::warn!(error = %e, task_id = %task, "task status not shared: the shared state did not answer");
        }
    }
}

impl StatusStore for RedisStatuses {
    async fn running(&self, scope: &str, from: &str, task: &TaskId, session: SessionId) {
        let mut value = b"r".to_vec();
        value.extend_from_slice(session.as_str().as_bytes());
        self.set(scope, from, task, value).await;
    }

    async fn done(&self, scope: &str, from: &str, task: &TaskId, answer: Arc<Envelope>) {
        let mut value = b"d".to_vec();
        if let Err(e) = serde_json::to_writer(&mut value, &*answer) {
            tracing::warn!(error = %e, "task status not shared: the answer did not serialise");
            return;
        }
        self.set(scope, from, task, value).await;
    }

    async fn get(&self, key: &StatusKey) -> Result<Option<TaskStatus>, StoreError> {
        let (scope, from, task) = key.parts();
        let field = RedisFairMap::field(&[scope, from, task]);
        let v = self.map.get("status_get", scope, &field).await?;
        let Some(v) = v else { return Ok(None) };
        match v.split_first() {
            Some((b'r', session)) => {
                let session = String::from_utf8_lossy(session).into_owned();
                Ok(Some(TaskStatus::Running(session.into())))
            }
            Some((b'd', json)) => {
                let env = Envelope::from_slice(json)
                    .map_err(|e| StoreError::Redis(format!("a stored answer: {e}")))?;
                Ok(Some(TaskStatus::Done(Arc::new(env))))
            }
            _ => Err(StoreError::Redis("a stored status of no known kind".into())),
        }
    }
}
