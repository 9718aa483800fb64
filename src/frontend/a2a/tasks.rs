//! The A2A bridge's memory: each tenant's tasks (their last snapshot and the events of those
//! still running) and contexts (the gateway session each `contextId` runs in). Both bounded
//! per tenant; the least recently used goes first.

use crate::ldp::SessionId;
use a2a_wire::v1::{StreamResponse, Task, TaskState};
use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use tokio::sync::broadcast;

/// Tasks kept per tenant (the oldest forgotten first, running or not).
pub const MAX_TASKS_PER_TENANT: usize = 1024;
/// Contexts kept per tenant (the least recently used forgotten first: its next task opens a
/// new session, so its affinity and conversation start afresh).
pub const MAX_CONTEXTS_PER_TENANT: usize = 1024;
/// Events buffered per task for a listener that is behind (it then skips to the latest).
const EVENTS_BUFFERED: usize = 64;

/// One task: its last snapshot, the session it runs in, its events.
struct Entry {
    task: Task,
    session: Option<SessionId>,
    events: broadcast::Sender<StreamResponse>,
}

#[derive(Default)]
struct TenantTables {
    tasks: HashMap<String, Entry>,
    /// Task ids, oldest first.
    order: VecDeque<String>,
    /// `contextId` → its session (none yet) and when it was last used.
    contexts: HashMap<String, (Option<SessionId>, u64)>,
    tick: u64,
}

/// The bridge's per-process state.
#[derive(Default)]
pub struct A2aState {
    tenants: Mutex<HashMap<String, TenantTables>>,
}

/// What [`A2aState::cancel`] found.
pub enum Cancel {
    /// Marked canceled: its snapshot, and the session to cancel it in (when it started).
    Canceled(Box<Task>, Option<SessionId>),
    /// Already in a terminal state.
    Terminal(TaskState),
    /// No such task of the tenant's.
    NotFound,
}

impl A2aState {
    fn with<R>(&self, tenant: &str, f: impl FnOnce(&mut TenantTables) -> R) -> R {
        // A poisoned lock still holds consistent tables (no update panics half-way).
        let mut all = self.tenants.lock().unwrap_or_else(|p| p.into_inner());
        // The tenant's key is allocated once, when its first task comes.
        if let Some(t) = all.get_mut(tenant) {
            return f(t);
        }
        f(all.entry(tenant.to_owned()).or_default())
    }

    /// Adds `task` for `tenant` (forgetting its oldest task past the cap) and touches its
    /// context; answers a listener of its events, the context's session, if any, and the
    /// session of a context forgotten to make room (the caller closes it: a context's
    /// session lives no longer than the context).
    pub fn insert(&self, tenant: &str, task: Task) -> Inserted {
        self.with(tenant, |t| {
            let (session, evicted) = touch_context(t, &task.context_id);
            while t.order.len() >= MAX_TASKS_PER_TENANT {
                match t.order.pop_front() {
                    Some(old) => {
                        t.tasks.remove(&old);
                    }
                    None => break,
                }
            }
            let (events, rx) = broadcast::channel(EVENTS_BUFFERED);
            t.order.push_back(task.id.clone());
            t.tasks.insert(
                task.id.clone(),
                Entry {
                    task,
                    session: None,
                    events,
                },
            );
            Inserted {
                events: rx,
                session,
                evicted,
            }
        })
    }

    /// The snapshot of `tenant`'s task `id`.
    pub fn get(&self, tenant: &str, id: &str) -> Option<Task> {
        self.with(tenant, |t| t.tasks.get(id).map(|e| e.task.clone()))
    }

    /// The snapshot of `tenant`'s task `id` and a listener of its next events (taken
    /// together: no event falls between them).
    pub fn subscribe(
        &self,
        tenant: &str,
        id: &str,
    ) -> Option<(Task, broadcast::Receiver<StreamResponse>)> {
        self.with(tenant, |t| {
            t.tasks
                .get(id)
                .map(|e| (e.task.clone(), e.events.subscribe()))
        })
    }

    /// Records the session `context` (and task `id`, when given) runs in.
    pub fn set_session(&self, tenant: &str, context: &str, id: &str, session: &SessionId) {
        self.with(tenant, |t| {
            if let Some(e) = t.tasks.get_mut(id) {
                e.session = Some(session.clone());
            }
            t.tick += 1;
            let tick = t.tick;
            if let Some(c) = t.contexts.get_mut(context) {
                *c = (Some(session.clone()), tick);
            }
        })
    }

    /// Applies `change` to task `id`'s snapshot and sends `event` to its listeners, unless
    /// the task is already terminal (a canceled task keeps its state) or forgotten. Answers
    /// whether it was applied.
    pub fn update(
        &self,
        tenant: &str,
        id: &str,
        change: impl FnOnce(&mut Task),
        event: Option<StreamResponse>,
    ) -> bool {
        self.with(tenant, |t| {
            let Some(e) = t.tasks.get_mut(id) else {
                return false;
            };
            if e.task.status.state.is_terminal() {
                return false;
            }
            change(&mut e.task);
            if let Some(ev) = event {
                let _ = e.events.send(ev);
            }
            true
        })
    }

    /// Marks `tenant`'s task `id` canceled (telling its listeners with `event(task)`) unless
    /// it is terminal.
    pub fn cancel(
        &self,
        tenant: &str,
        id: &str,
        change: impl FnOnce(&mut Task) -> StreamResponse,
    ) -> Cancel {
        self.with(tenant, |t| {
            let Some(e) = t.tasks.get_mut(id) else {
                return Cancel::NotFound;
            };
            if e.task.status.state.is_terminal() {
                return Cancel::Terminal(e.task.status.state.clone());
            }
            let ev = change(&mut e.task);
            let _ = e.events.send(ev);
            Cancel::Canceled(Box::new(e.task.clone()), e.session.clone())
        })
    }
}

/// What [`A2aState::insert`] answers.
pub struct Inserted {
    /// A listener of the task's events.
    pub events: broadcast::Receiver<StreamResponse>,
    /// The session its context runs in, if it has one yet.
    pub session: Option<SessionId>,
    /// The session of the context forgotten to make room, for the caller to close.
    pub evicted: Option<SessionId>,
}

/// Marks `context` used now (adding it, forgetting the least recently used past the cap);
/// answers its session and the forgotten context's.
fn touch_context(t: &mut TenantTables, context: &str) -> (Option<SessionId>, Option<SessionId>) {
    t.tick += 1;
    let tick = t.tick;
    if let Some(c) = t.contexts.get_mut(context) {
        c.1 = tick;
        return (c.0.clone(), None);
    }
    let mut evicted = None;
    if t.contexts.len() >= MAX_CONTEXTS_PER_TENANT {
        let oldest = t
            .contexts
            .iter()
            .min_by_key(|(_, (_, used))| *used)
            .map(|(k, _)| k.clone());
        if let Some(k) = oldest {
            evicted = t.contexts.remove(&k).and_then(|(session, _)| session);
        }
    }
    t.contexts.insert(context.to_owned(), (None, tick));
    (None, evicted)
}

#[cfg(test)]
mod tests {
    use super::*;
    use a2a_wire::v1::TaskStatus;

    fn task(id: &str, context: &str) -> Task {
        Task {
            id: id.into(),
            context_id: context.into(),
            status: TaskStatus::new(TaskState::Submitted),
            artifacts: Vec::new(),
            history: Vec::new(),
            metadata: None,
            rest: Default::default(),
        }
    }

    #[test]
    fn tasks_and_contexts_are_bounded_and_per_tenant() {
        let s = A2aState::default();
        for i in 0..MAX_TASKS_PER_TENANT + 5 {
            s.insert("a", task(&format!("t{i}"), &format!("c{i}")));
        }
        assert!(s.get("a", "t0").is_none());
        assert!(s
            .get("a", &format!("t{}", MAX_TASKS_PER_TENANT + 4))
            .is_some());
        assert!(s.get("b", "t6").is_none());
        s.with("a", |t| {
            assert_eq!(t.tasks.len(), MAX_TASKS_PER_TENANT);
            assert_eq!(t.contexts.len(), MAX_CONTEXTS_PER_TENANT);
            assert!(!t.contexts.contains_key("c0"));
        });
    }

    #[test]
    fn a_terminal_task_is_not_changed_again() {
        let s = A2aState::default();
        s.insert("a", task("t", "c"));
        let done = |t: &mut Task| t.status = TaskStatus::new(TaskState::Canceled);
        assert!(s.update("a", "t", done, None));
        let work = |t: &mut Task| t.status = TaskStatus::new(TaskState::Completed);
        assert!(!s.update("a", "t", work, None));
        assert_eq!(
            s.get("a", "t").map(|t| t.status.state),
            Some(TaskState::Canceled)
        );
    }
}
