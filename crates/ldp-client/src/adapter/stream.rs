//! A streamed task as the caller reads it: progress, then the result.

use super::Outcome;
use crate::Error;
use ldp_wire::TaskId;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::sync::mpsc;

/// One event of a streamed task. The last is `Completed` or `Failed` (`Error::Cancelled` for
/// a task cancelled through the adapter).
#[derive(Debug)]
pub enum Event {
    /// A TASK_UPDATE from the delegate.
    Progress {
        /// 0..1, if the delegate said.
        progress: Option<f64>,
        /// Its message, if any.
        message: Option<String>,
    },
    /// The result.
    Completed(Box<Outcome>),
    /// The task failed, or the exchange did.
    Failed(Error),
}

/// The events of a streamed task, buffered up to the adapter's `stream_buffer`. Also a
/// [`futures_util::Stream`].
#[derive(Debug)]
pub struct TaskStream {
    task_id: TaskId,
    events: mpsc::Receiver<Event>,
}

impl TaskStream {
    pub(super) fn new(task_id: TaskId, events: mpsc::Receiver<Event>) -> TaskStream {
        TaskStream { task_id, events }
    }

    /// The task's id.
    pub fn task_id(&self) -> &TaskId {
        &self.task_id
    }

    /// The next event; `None` once the last has been read.
    pub async fn next(&mut self) -> Option<Event> {
        self.events.recv().await
    }
}

impl futures_util::Stream for TaskStream {
    type Item = Event;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Event>> {
        self.events.poll_recv(cx)
    }
}
