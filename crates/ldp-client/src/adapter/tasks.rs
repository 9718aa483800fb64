//! The adapter's record of each task's lifecycle, for `status` and `cancel`: bounded, the
//! oldest finished records dropped first.

use super::Open;
use crate::Error;
use ldp_wire::{DelegateId, SessionId, TaskId};
use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, MutexGuard};
use tokio::sync::oneshot;

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

/// Where to send a TASK_CANCEL, and what ends the task's local wait.
pub(super) struct CancelTarget {
    pub(super) base: String,
    pub(super) session_id: SessionId,
    pub(super) delegate_id: DelegateId,
    pub(super) stop: Stop,
}

/// Ends a task's local wait when fired or dropped (so a `cancel` whose future is dropped
/// half-way still ends it).
pub(super) struct Stop(Option<oneshot::Sender<()>>);

impl Drop for Stop {
    fn drop(&mut self) {
        if let Some(tx) = self.0.take() {
            let _ = tx.send(());
        }
    }
}

struct Record {
    state: TaskState,
    base: String,
    session_id: SessionId,
    delegate_id: DelegateId,
    /// Fired by `cancel`; the task's run stops waiting for the delegate.
    stop: Option<oneshot::Sender<()>>,
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
    /// all when none has finished) to stay within the bound. The receiver resolves when the
    /// task is cancelled.
    pub(super) fn submitted(
        &self,
        task_id: &TaskId,
        base: &str,
        open: &Open,
    ) -> oneshot::Receiver<()> {
        let (stop, stopped) = oneshot::channel();
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
                stop: Some(stop),
            },
        );
        book.order.push_back(task_id.clone());
        stopped
    }

    /// The TASK_SUBMIT is on its way in `open` (again, in a new session, after a
    /// re-handshake: a TASK_CANCEL must name that one).
    pub(super) fn running(&self, task_id: &TaskId, open: &Open) {
        if let Some(r) = self.lock().records.get_mut(task_id) {
            if !r.state.is_final() {
                r.state = TaskState::Running;
                r.session_id = open.session.session_id.clone();
                r.delegate_id = open.session.delegate_id.clone();
            }
        }
    }

    /// The task ended with `result`, which is returned, or [`Error::Cancelled`] for a task
    /// cancelled meanwhile (it stays cancelled, whatever the delegate answered).
    pub(super) fn finished<T>(
        &self,
        task_id: &TaskId,
        result: Result<T, Error>,
    ) -> Result<T, Error> {
        let mut book = self.lock();
        let Some(r) = book.records.get_mut(task_id) else {
            return result;
        };
        r.stop = None;
        if r.state == TaskState::Cancelled {
            return Err(Error::Cancelled {
                task_id: task_id.clone(),
            });
        }
        r.state = match &result {
            Ok(_) => TaskState::Completed,
            Err(_) => TaskState::Failed,
        };
        result
    }

    pub(super) fn state(&self, task_id: &TaskId) -> Option<TaskState> {
        self.lock().records.get(task_id).map(|r| r.state)
    }

    /// Marks a task that has not finished cancelled; where to send its TASK_CANCEL, and the
    /// [`Stop`] that ends its wait. `None` if it is unknown or already over.
    pub(super) fn cancel(&self, task_id: &TaskId) -> Option<CancelTarget> {
        let mut book = self.lock();
        let r = book.records.get_mut(task_id)?;
        if r.state.is_final() {
            return None;
        }
        r.state = TaskState::Cancelled;
        Some(CancelTarget {
            base: r.base.clone(),
            session_id: r.session_id.clone(),
            delegate_id: r.delegate_id.clone(),
            stop: Stop(r.stop.take()),
        })
    }
}
