//! What the pipeline knows of a chat, in no front end's or upstream's words: the turns of a
//! conversation the gateway keeps for a delegate that keeps none. The front ends and the
//! upstream kinds translate their own wire to and from these.

use std::sync::Arc;

/// Weight of a turn beyond its text (so that empty turns are not free).
pub const TURN_OVERHEAD: usize = 32;

/// One exchange: what the user sent and what the assistant answered.
#[derive(Debug, Clone)]
pub struct Turn {
    /// The task's input as text.
    pub user: Arc<str>,
    /// The answer's text.
    pub assistant: Arc<str>,
}

impl Turn {
    /// Its weight: its text and [`TURN_OVERHEAD`].
    pub fn bytes(&self) -> usize {
        self.user.len() + self.assistant.len() + TURN_OVERHEAD
    }
}
