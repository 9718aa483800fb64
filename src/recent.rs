//! Recent tasks and what became of them — running (in which session), then the answer as
//! its client received it — kept for the client that submitted each (scope and sender), bounded
//! in bytes and expiring. The gateway answers status queries and sessionless cancels from it
//! (`proxy/status.rs`), and so does the simulated delegate.

use crate::ldp::error::GatewayCode;
use crate::ldp::{Body, Envelope, LdpError, PayloadMode, SessionId, TaskId};
use std::collections::hash_map::RandomState;
use std::collections::{HashMap, VecDeque};
use std::hash::BuildHasher;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Weight of an entry beyond its ids and answer: the map slot, the change queue, the key.
const ENTRY_OVERHEAD: usize = 256;

/// Independent parts of the store: writers on different shards never wait for one another.
const SHARDS: usize = 16;

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

    fn is(&self, scope: &str, from: &str, task: &str) -> bool {
        self.scope == scope && self.from == from && self.task.as_str() == task
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

/// One stored task.
struct Entry {
    key: StatusKey,
    status: TaskStatus,
    /// Its weight, counted in its shard's bytes.
    weight: usize,
    /// Bumped at every change; the change order holds the latest one.
    generation: u64,
    changed: Instant,
}

/// A shard: entries by the key's hash (a collision of the process-keyed 64-bit hash only
/// replaces an entry, never shows it to another client: reads compare the whole key), and
/// the order of changes, oldest first, for expiry and the byte bound.
#[derive(Default)]
struct Shard {
    entries: HashMap<u64, Entry>,
    changes: VecDeque<(u64, u64)>,
    bytes: usize,
    generation: u64,
}

impl Shard {
    /// Drops entries changed before `oldest`, and the oldest changed while over `max_bytes`;
    /// forgets superseded changes once they are half the order.
    fn evict(&mut self, oldest: Option<Instant>, max_bytes: usize) {
        while let Some(&(hash, generation)) = self.changes.front() {
            let current = self
                .entries
                .get(&hash)
                .filter(|e| e.generation == generation);
            match current {
                None => {
                    self.changes.pop_front();
                }
                Some(e) if self.bytes > max_bytes || oldest.is_some_and(|t| e.changed < t) => {
                    self.bytes -= e.weight;
                    self.entries.remove(&hash);
                    self.changes.pop_front();
                }
                Some(_) => break,
            }
        }
        if self.changes.len() > 2 * self.entries.len() + 64 {
            let entries = &self.entries;
            self.changes.retain(|(hash, generation)| {
                entries
                    .get(hash)
                    .is_some_and(|e| e.generation == *generation)
            });
        }
    }
}

/// Recent task outcomes, per client (this replica's tasks only): bounded in bytes, each entry
/// kept `ttl` after its last change, the oldest changed dropped first.
///
/// Not `moka`: with its bookkeeping, two writes per task cost the load bench 7–8% of the
/// gateway's throughput at 64 connections (measured); a few sharded maps with a change queue
/// cost nothing measurable and give the same bounds.
pub struct RecentTasks {
    shards: Box<[Mutex<Shard>]>,
    hasher: RandomState,
    ttl: Duration,
    /// Each shard's share of `max_bytes`.
    shard_bytes: usize,
}

impl RecentTasks {
    /// A store bounded by `max_bytes` of entries, each kept `ttl` after its last change.
    pub fn new(ttl: Duration, max_bytes: u64) -> RecentTasks {
        RecentTasks {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            hasher: RandomState::new(),
            ttl,
            shard_bytes: usize::try_from(max_bytes / SHARDS as u64).unwrap_or(usize::MAX),
        }
    }

    fn hash(&self, scope: &str, from: &str, task: &str) -> u64 {
        self.hasher.hash_one((scope, from, task))
    }

    fn shard(&self, hash: u64) -> MutexGuard<'_, Shard> {
        // A poisoned shard is still a store: the worst a panic left is a stale entry.
        self.shards[(hash % SHARDS as u64) as usize]
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// Sets the state of `task` for (`scope`, `from`); the key is built only for a new entry.
    fn set(&self, scope: &str, from: &str, task: &TaskId, status: TaskStatus) {
        let hash = self.hash(scope, from, task);
        let now = Instant::now();
        let mut shard = self.shard(hash);
        shard.generation += 1;
        let generation = shard.generation;
        let key = match shard.entries.remove(&hash) {
            Some(old) => {
                shard.bytes -= old.weight;
                if old.key.is(scope, from, task) {
                    old.key
                } else {
                    StatusKey::new(scope, from, task)
                }
            }
            None => StatusKey::new(scope, from, task),
        };
        let weight = weight(&key, &status);
        shard.bytes += weight;
        shard.entries.insert(
            hash,
            Entry {
                key,
                status,
                weight,
                generation,
                changed: now,
            },
        );
        shard.changes.push_back((hash, generation));
        let oldest = now.checked_sub(self.ttl);
        let max = self.shard_bytes;
        shard.evict(oldest, max);
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

    /// Bytes the entries weigh together (never above the bound once a change is done).
    pub fn bytes(&self) -> usize {
        self.shards
            .iter()
            .map(|m| m.lock().unwrap_or_else(|p| p.into_inner()).bytes)
            .sum()
    }

    /// The task's state, if this client submitted it and it has not expired.
    pub fn get(&self, key: &StatusKey) -> Option<TaskStatus> {
        let hash = self.hash(&key.scope, &key.from, &key.task);
        let shard = self.shard(hash);
        let e = shard.entries.get(&hash)?;
        (e.key == *key && e.changed.elapsed() < self.ttl).then(|| e.status.clone())
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

/// An entry's weight in bytes, about: its ids, the whole answer kept (output, provenance,
/// error and partial output, [`crate::provenance::bounds::envelope_weight`]), and an overhead.
fn weight(k: &StatusKey, v: &TaskStatus) -> usize {
    let ids = k.scope.len() + k.from.len() + k.task.len();
    let value = match v {
        TaskStatus::Running(session) => session.len(),
        TaskStatus::Done(env) => crate::provenance::bounds::envelope_weight(env),
    };
    ids + value + ENTRY_OVERHEAD
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
        s.shards.iter().map(|m| m.lock().unwrap().bytes).sum()
    }

    fn count(s: &RecentTasks) -> usize {
        s.shards
            .iter()
            .map(|m| m.lock().unwrap().entries.len())
            .sum()
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
        // Superseded changes do not pile up.
        let changes: usize = s
            .shards
            .iter()
            .map(|m| m.lock().unwrap().changes.len())
            .sum();
        assert!(changes <= 2 * count(&s) + 64 * SHARDS, "{changes}");
    }

    #[test]
    fn entries_expire() {
        let s = store(1 << 20, Duration::from_millis(1));
        let t: TaskId = "t".into();
        s.running("a", "c", &t, "s".into());
        std::thread::sleep(Duration::from_millis(5));
        assert!(s.get(&StatusKey::new("a", "c", &t)).is_none());
        // A change in a shard drops that shard's expired entries.
        for i in 0..100 {
            s.running("a", "c", &format!("n{i}").into(), "s".into());
        }
        std::thread::sleep(Duration::from_millis(5));
        let newest: TaskId = "newest".into();
        let hash = s.hash("a", "c", &newest);
        let before = s.shard(hash).entries.len();
        s.running("a", "c", &newest, "s".into());
        assert_eq!(s.shard(hash).entries.len(), 1, "{before} entries before");
    }
}
