//! Status queries to the simulated delegate (the reference Rust adapter's TASK_UPDATE
//! `status_query`): each task's state, running or its answer, kept for the `from` that
//! submitted it, bounded and expiring (the reference server's task table is neither).

use crate::ldp::{Envelope, TaskId};
use moka::sync::Cache;
use std::sync::Arc;
use std::time::Duration;

/// Most tasks remembered (least recently used out first).
const CAPACITY: u64 = 10_000;

/// How long a task is remembered after its last change.
const TTL: Duration = Duration::from_secs(600);

/// A task of one sender.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct Key {
    from: String,
    task: TaskId,
}

impl Key {
    pub(super) fn new(from: &str, task: &str) -> Key {
        Key {
            from: from.to_owned(),
            task: task.into(),
        }
    }
}

/// What is known of a task.
#[derive(Debug, Clone)]
pub(super) enum TaskStatus {
    /// Submitted in this session and not answered yet.
    Running(String),
    /// Its answer, as sent.
    Done(Arc<Envelope>),
}

/// The delegate's recent tasks.
pub(super) struct Statuses(Cache<Key, TaskStatus>);

impl Default for Statuses {
    fn default() -> Self {
        Statuses(
            Cache::builder()
                .max_capacity(CAPACITY)
                .time_to_live(TTL)
                .eviction_policy(moka::policy::EvictionPolicy::lru())
                .build(),
        )
    }
}

impl Statuses {
    pub(super) fn set(&self, key: Key, status: TaskStatus) {
        self.0.insert(key, status);
    }

    pub(super) fn get(&self, key: &Key) -> Option<TaskStatus> {
        self.0.get(key)
    }
}
