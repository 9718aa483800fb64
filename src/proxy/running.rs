//! The tasks running in this process, for a cancel to find: TASK_CANCEL, an LDP client that
//! leaves, LADP `halt`, A2A `CancelTask`, a front end's client that leaves.
//!
//! A task is registered when its request is admitted, before anything awaits: by the route
//! that received it (before it spawns the task), else where the proxy is entered. Whoever
//! comes next with the same key (the proxy's entry, the task's submit, a re-submit in a fresh
//! session) joins that registration and its [`RunningTask`]. So there is no moment between a
//! task being known to its client (it sent it, or a front end answered with its id) and a
//! cancel being able to find it: a cancel that comes before the task has done anything stops
//! it before its first upstream call. (Before, a task was listed in its session only after
//! the session lookup, the admission checks and the status write, and a cancel in between
//! was answered "not running" and lost.)
//!
//! Keyed by owner (tenant and sender) and task id; an LDP client's task also by its session
//! (a client may reuse a task id in another session), a front end's by none (its session is
//! the front end's, opened or renewed as the task runs). An entry lives as long as one of its
//! registrations does, so the table holds the tasks in flight and nothing else.

use crate::ldp::{SessionId, TaskId};
use crate::session::RunningTask;
use std::sync::Arc;

/// The running tasks (a `DashMap`: every task registers once and leaves once).
#[derive(Default)]
pub(super) struct RunningTasks {
    map: dashmap::DashMap<(String, TaskId), Vec<Entry>>,
}

/// One task of an owner and task id.
struct Entry {
    /// The session it runs in (an LDP client's), or `None` (a front end's: any).
    session: Option<SessionId>,
    task: Arc<RunningTask>,
    /// Registrations alive.
    holders: usize,
}

/// A hold on a task's place in the table: the task can be found for as long as one lives.
/// The route that admits a task keeps one until the task's future ends.
pub struct Registration {
    table: Arc<RunningTasks>,
    owner: String,
    task_id: TaskId,
    session: Option<SessionId>,
    task: Arc<RunningTask>,
}

impl Registration {
    /// The task's cancellation and calls in flight.
    pub(super) fn task(&self) -> &Arc<RunningTask> {
        &self.task
    }

    /// Cancelled when a cancel reaches the task (here, or asked by another replica).
    pub fn cancelled(&self) -> tokio_util::sync::CancellationToken {
        self.task.cancelled_token().clone()
    }
}

impl std::fmt::Debug for Registration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registration")
            .field("task_id", &self.task_id)
            .field("session", &self.session)
            .finish_non_exhaustive()
    }
}

impl RunningTasks {
    /// Registers `owner`'s task `task_id` (in `session`, or in none), or joins its
    /// registration if it has one.
    pub(super) fn register(
        self: &Arc<Self>,
        owner: String,
        session: Option<SessionId>,
        task_id: TaskId,
    ) -> Registration {
        let task = {
            let mut entries = self
                .map
                .entry((owner.clone(), task_id.clone()))
                .or_default();
            // A task that ran to its end under this key is not joined: a new one starts.
            let live = entries
                .iter_mut()
                .find(|e| e.session == session && !e.task.is_finished());
            match live {
                Some(e) => {
                    e.holders += 1;
                    e.task.clone()
                }
                None => {
                    let task = RunningTask::new();
                    entries.push(Entry {
                        session: session.clone(),
                        task: task.clone(),
                        holders: 1,
                    });
                    task
                }
            }
        };
        Registration {
            table: self.clone(),
            owner,
            task_id,
            session,
            task,
        }
    }

    /// `owner`'s running task `task_id` (not yet finished): in `session` when one is named (a
    /// front end's task, registered in none, is found by any), else in any.
    pub(super) fn find(
        &self,
        owner: &str,
        task_id: &TaskId,
        session: Option<&SessionId>,
    ) -> Option<Arc<RunningTask>> {
        let entries = self.map.get(&(owner.to_owned(), task_id.clone()))?;
        entries
            .iter()
            .filter(|e| !e.task.is_finished())
            .find(|e| match (session, &e.session) {
                (Some(asked), Some(its)) => asked == its,
                (None, _) | (_, None) => true,
            })
            .map(|e| e.task.clone())
    }

    /// How many tasks are registered (tests).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.map.iter().map(|e| e.len()).sum()
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        let key = (std::mem::take(&mut self.owner), self.task_id.clone());
        // The last holder takes the entry out, and the key with its last entry.
        self.table.map.remove_if_mut(&key, |_, entries| {
            if let Some(i) = entries
                .iter()
                .position(|e| Arc::ptr_eq(&e.task, &self.task))
            {
                entries[i].holders = entries[i].holders.saturating_sub(1);
                if entries[i].holders == 0 {
                    entries.swap_remove(i);
                }
            }
            entries.is_empty()
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_is_one_registration_however_many_join_it_and_leaves_with_the_last() {
        let table = Arc::new(RunningTasks::default());
        let (owner, id) = ("acme\u{1f}c".to_owned(), TaskId::from("t1"));
        let first = table.register(owner.clone(), None, id.clone());
        let second = table.register(owner.clone(), None, id.clone());
        assert!(Arc::ptr_eq(first.task(), second.task()));
        first.task().cancel();
        let found = table.find(&owner, &id, None).unwrap();
        assert!(
            found.is_cancelled(),
            "a cancel before the task joined is kept"
        );
        assert!(table.find("other", &id, None).is_none(), "another owner's");
        drop(first);
        assert!(table.find(&owner, &id, None).is_some());
        drop(second);
        assert!(table.find(&owner, &id, None).is_none());
        assert_eq!(table.len(), 0);
    }

    #[test]
    fn a_finished_task_is_not_found_and_not_joined() {
        let table = Arc::new(RunningTasks::default());
        let (owner, id) = ("acme\u{1f}c".to_owned(), TaskId::from("t1"));
        let route = table.register(owner.clone(), None, id.clone());
        route.task().finish();
        assert!(
            table.find(&owner, &id, None).is_none(),
            "nothing left to cancel"
        );
        let again = table.register(owner.clone(), None, id.clone());
        assert!(
            !Arc::ptr_eq(route.task(), again.task()),
            "a new task, not the one that ran"
        );
        assert!(table.find(&owner, &id, None).is_some());
        drop(route);
        assert!(table.find(&owner, &id, None).is_some());
        drop(again);
        assert_eq!(table.len(), 0);
    }

    #[test]
    fn an_ldp_task_is_found_in_its_own_session_only() {
        let table = Arc::new(RunningTasks::default());
        let (owner, id) = ("acme\u{1f}c".to_owned(), TaskId::from("t1"));
        let (a, b) = (SessionId::from("s-a"), SessionId::from("s-b"));
        let in_a = table.register(owner.clone(), Some(a.clone()), id.clone());
        let in_b = table.register(owner.clone(), Some(b.clone()), id.clone());
        assert!(!Arc::ptr_eq(in_a.task(), in_b.task()));
        let found = table.find(&owner, &id, Some(&b)).unwrap();
        assert!(Arc::ptr_eq(&found, in_b.task()));
        assert!(table.find(&owner, &id, Some(&"s-c".into())).is_none());
        assert!(
            table.find(&owner, &id, None).is_some(),
            "a sessionless cancel finds one"
        );
        drop((in_a, in_b));
        assert_eq!(table.len(), 0);
    }
}
