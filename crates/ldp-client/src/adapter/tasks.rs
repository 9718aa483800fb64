//! The adapter's record of each task's lifecycle, for `status` and `cancel`: bounded, the
//! oldest finished records dropped first.

use super::Open;
use crate::Error;
use ldp_wire::{DelegateId, SessionId, TaskId};
use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, MutexGuard};
use tokio::task::AbortHandle;

/// Where a task stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskState {
    /// Accepted by the adapter; its TASK_SUBMIT not yet sent.
    Submitted,
    /// Sent; no answer yet.
    Running,
    /// Answered with a result.
    Completed,
    /// Answered with a failure, or the exchange failed.
    Failed,
    /// Cancelled through the adapter.
    Cancelled,
}

impl TaskState {
    /// Whether the task is over.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            TaskState::Completed | TaskState::Failed | TaskState::Cancelled
        )
    }

    /// Lower-case name (`submitted`, `running`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            TaskState::Submitted => "submitted",
            TaskState::Running => "running",
            TaskState::Completed => "completed",
            TaskState::Failed => "failed",
            TaskState::Cancelled => "cancelled",
        }
    }
}

/// Where to send a TASK_CANCEL.
pub(super) struct CancelTarget {
    pub(super) base: String,
    pub(super) session_id: SessionId,
    pub(super) delegate_id: DelegateId,
}

struct Record {
    state: TaskState,
    base: String,
    session_id: SessionId,
    delegate_id: DelegateId,
    abort: Option<AbortHandle>,
}

#[derive(Default)]
struct Book {
    records: HashMap<TaskId, Record>,
    /// Insertion order, for eviction.
    order: VecDeque<TaskId>,
}

/// The records, at most `max`. (A map and a queue under one short lock; tasks are recorded
/// once and updated a few times each.)
pub(super) struct Tasks {
    book: Mutex<Book>,
    max: usize,
}

impl Tasks {
    pub(super) fn new(max: usize) -> Tasks {
        Tasks {
            book: Mutex::new(Book::default()),
            max: max.max(1),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Book> {
        self.book.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records a new task sent in `open`, dropping the oldest finished records (the oldest of
    /// all when none has finished) to stay within the bound.
    pub(super) fn submitted(&self, task_id: &TaskId, base: &str, open: &Open) {
        let mut book = self.lock();
        while book.records.len() >= self.max {
            let finished = book
                .order
                .iter()
                .position(|id| book.records.get(id).is_none_or(|r| r.state.is_final()));
            let Some(id) = book.order.remove(finished.unwrap_or(0)) else {
                break;
            };
            book.records.remove(&id);
        }
        book.records.insert(
            task_id.clone(),
            Record {
                state: TaskState::Submitted,
                base: base.to_owned(),
                session_id: open.session.session_id.clone(),
                delegate_id: open.session.delegate_id.clone(),
                abort: None,
            },
        );
        book.order.push_back(task_id.clone());
    }

    pub(super) fn set_abort(&self, task_id: &TaskId, abort: AbortHandle) {
        if let Some(r) = self.lock().records.get_mut(task_id) {
            r.abort = Some(abort);
        }
    }

    /// The TASK_SUBMIT is on its way (again, after a re-handshake).
    pub(super) fn running(&self, task_id: &TaskId) {
        if let Some(r) = self.lock().records.get_mut(task_id) {
            if !r.state.is_final() {
                r.state = TaskState::Running;
            }
        }
    }

    /// The task ended with `result` (a cancelled task stays cancelled).
    pub(super) fn finished<T>(&self, task_id: &TaskId, result: &Result<T, Error>) {
        if let Some(r) = self.lock().records.get_mut(task_id) {
            if r.state != TaskState::Cancelled {
                r.state = match result {
                    Ok(_) => TaskState::Completed,
                    Err(_) => TaskState::Failed,
                };
            }
            r.abort = None;
        }
    }

    pub(super) fn state(&self, task_id: &TaskId) -> Option<TaskState> {
        self.lock().records.get(task_id).map(|r| r.state)
    }

    /// Marks a task that has not finished cancelled and stops waiting for it; where to send
    /// its TASK_CANCEL. `None` if it is unknown or already over.
    pub(super) fn cancel(&self, task_id: &TaskId) -> Option<CancelTarget> {
        let mut book = self.lock();
        let r = book.records.get_mut(task_id)?;
        if r.state.is_final() {
            return None;
        }
        r.state = TaskState::Cancelled;
        if let Some(abort) = r.abort.take() {
            abort.abort();
        }
        Some(CancelTarget {
            base: r.base.clone(),
            session_id: r.session_id.clone(),
            delegate_id: r.delegate_id.clone(),
        })
    }
}
