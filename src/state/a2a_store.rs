//! Cluster mode's A2A tasks and contexts, so that any replica answers `GetTask`,
//! `CancelTask` and `SubscribeToTask` for a task another replica runs, and continues a
//! `contextId` in its session: each a tenant-fair map ([`super::fair_map`]), the tasks
//! `a2a:task` (a snapshot per task, weighed, the running ones never evicted), the contexts
//! `a2a:ctx` (the session each runs in). A snapshot written publishes its event on the bus
//! (`Topic::A2a`) in the same round trip, for subscribers on other replicas. The front end
//! keeps the running replica's own table in front of this one (the A2A front end's): the
//! running replica writes each change of a task it runs; another replica writes only a
//! cancel, and never over a task that ended.

use super::bus::{Bus, Note, Topic};
use super::fair_map::{Publish, RedisFairMap};
use super::StoreError;
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::broadcast;

/// How long a task's snapshot is kept in Redis past its last change, at least (longer when a
/// task may run longer).
const TASK_TTL: Duration = Duration::from_secs(24 * 3600);

/// A stored snapshot: whether the task still runs, and its JSON.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// Not yet in a terminal state.
    pub running: bool,
    /// The front end's JSON of it.
    pub json: Vec<u8>,
}

/// Cluster mode: the A2A tasks and contexts every replica reads.
pub struct SharedA2a {
    tasks: RedisFairMap,
    contexts: RedisFairMap,
    bus: Bus,
}

impl SharedA2a {
    /// The maps on `bus`'s Redis: tasks `max_task_bytes` together (kept a day past their last
    /// change, at least `task_timeout` twice), contexts `max_context_bytes` (kept as long as
    /// a session may live, `session_ttl`).
    pub fn new(
        bus: Bus,
        max_task_bytes: u64,
        max_context_bytes: u64,
        task_timeout: Duration,
        session_ttl: Duration,
    ) -> SharedA2a {
        let redis = bus.redis().clone();
        let task_ttl = TASK_TTL.max(task_timeout * 2);
        SharedA2a {
            tasks: RedisFairMap::new(redis.clone(), "a2a:task", task_ttl, max_task_bytes),
            contexts: RedisFairMap::new(redis, "a2a:ctx", session_ttl, max_context_bytes),
            bus,
        }
    }

    /// Writes `tenant`'s task `id` (`running`, its JSON `json`) unless it ended, and tells
    /// its subscribers `events` (a JSON array; `{"tenant", "task", "events"}` on the bus)
    /// once written, when there are any.
    /// Whether it was written (not: the task ended, on another replica's cancel).
    pub async fn put_task(
        &self,
        tenant: &str,
        id: &str,
        running: bool,
        json: &[u8],
        events: Option<&Value>,
    ) -> Result<bool, StoreError> {
        let mut value = Vec::with_capacity(json.len() + 1);
        value.push(if running { b'r' } else { b'd' });
        value.extend_from_slice(json);
        let publish = match events.filter(|e| e.as_array().is_some_and(|a| !a.is_empty())) {
            Some(evs) => {
                let body = serde_json::json!({"tenant": tenant, "task": id, "events": evs});
                Some(Publish {
                    channel: self.bus.channel(Topic::A2a),
                    message: self.bus.note(body)?,
                })
            }
            None => None,
        };
        let field = RedisFairMap::field(&[tenant, id]);
        self.tasks
            .set("a2a_task_set", tenant, &field, &value, true, publish)
            .await
    }

    /// `tenant`'s task `id`, if kept.
    pub async fn get_task(&self, tenant: &str, id: &str) -> Result<Option<Snapshot>, StoreError> {
        let field = RedisFairMap::field(&[tenant, id]);
        let v = self.tasks.get("a2a_task_get", tenant, &field).await?;
        Ok(v.and_then(|v| {
            let (kind, json) = v.split_first()?;
            Some(Snapshot {
                running: *kind == b'r',
                json: json.to_vec(),
            })
        }))
    }

    /// Records the session `tenant`'s `context` runs in.
    pub async fn put_context(
        &self,
        tenant: &str,
        context: &str,
        session: &str,
    ) -> Result<(), StoreError> {
        let mut value = b"d".to_vec();
        value.extend_from_slice(session.as_bytes());
        let field = RedisFairMap::field(&[tenant, context]);
        self.contexts
            .set("a2a_context_set", tenant, &field, &value, false, None)
            .await
            .map(|_| ())
    }

    /// The session `tenant`'s `context` runs in, if kept.
    pub async fn get_context(
        &self,
        tenant: &str,
        context: &str,
    ) -> Result<Option<String>, StoreError> {
        let field = RedisFairMap::field(&[tenant, context]);
        let v = self.contexts.get("a2a_context_get", tenant, &field).await?;
        Ok(v.and_then(|v| {
            let (_, session) = v.split_first()?;
            Some(String::from_utf8_lossy(session).into_owned())
        }))
    }

    /// The events other replicas tell, from now on (`{"tenant", "task", "events"}`).
    pub fn events(&self) -> broadcast::Receiver<Arc<Note>> {
        self.bus.listen(Topic::A2a)
    }
}
