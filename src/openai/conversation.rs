//! A client session's conversations with OpenAI-backed delegates. Such an endpoint keeps no
//! state, so the gateway keeps, per skill, the user and assistant turns of the session's tasks
//! and sends them with each new task: bounded by the session's memory cap (the oldest turns
//! go first) and, when a request is built, by the delegate's context window.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

/// One exchange: what the user sent and what the assistant answered.
#[derive(Debug, Clone)]
pub struct Turn {
    /// The task's input as text.
    pub user: Arc<str>,
    /// The answer's text.
    pub assistant: Arc<str>,
}

impl Turn {
    fn bytes(&self) -> usize {
        self.user.len() + self.assistant.len()
    }
}

/// Every conversation of one client session, by skill, and the bytes they hold together.
#[derive(Debug, Default)]
pub struct Conversations {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// Few skills per session: a short list beats a map.
    by_skill: Vec<(Box<str>, VecDeque<Turn>)>,
    bytes: usize,
}

impl Conversations {
    /// The turns of `skill`, oldest first (shared text: nothing is copied).
    pub fn turns(&self, skill: &str) -> Vec<Turn> {
        let Ok(inner) = self.inner.lock() else {
            return Vec::new();
        };
        inner
            .by_skill
            .iter()
            .find(|(s, _)| &**s == skill)
            .map(|(_, t)| t.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Forgets the `n` oldest turns of `skill` (they no longer fit the context window);
    /// how many were forgotten.
    pub fn forget_oldest(&self, skill: &str, n: usize) -> usize {
        let Ok(mut inner) = self.inner.lock() else {
            return 0;
        };
        let Inner { by_skill, bytes } = &mut *inner;
        let Some((_, turns)) = by_skill.iter_mut().find(|(s, _)| &**s == skill) else {
            return 0;
        };
        let n = n.min(turns.len());
        for t in turns.drain(..n) {
            *bytes -= t.bytes();
        }
        n
    }

    /// Adds a turn to `skill`'s conversation, then forgets the oldest turns of it until the
    /// session holds at most `cap` bytes; how many were forgotten. A turn larger than the cap
    /// is not kept (and counts as one forgotten).
    pub fn push(&self, skill: &str, turn: Turn, cap: usize) -> usize {
        let Ok(mut inner) = self.inner.lock() else {
            return 0;
        };
        let Inner { by_skill, bytes } = &mut *inner;
        if turn.bytes() > cap {
            return 1;
        }
        let i = match by_skill.iter().position(|(s, _)| &**s == skill) {
            Some(i) => i,
            None => {
                by_skill.push((skill.into(), VecDeque::new()));
                by_skill.len() - 1
            }
        };
        *bytes += turn.bytes();
        let mut dropped = 0;
        // The other skills' turns stay: this conversation pays for its own growth.
        let turns = &mut by_skill[i].1;
        turns.push_back(turn);
        while *bytes > cap {
            let Some(old) = turns.pop_front() else { break };
            *bytes -= old.bytes();
            dropped += 1;
        }
        dropped
    }

    /// Bytes of text held.
    pub fn bytes(&self) -> usize {
        self.inner.lock().map(|i| i.bytes).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn turn(u: &str, a: &str) -> Turn {
        Turn {
            user: u.into(),
            assistant: a.into(),
        }
    }

    #[test]
    fn the_cap_drops_the_oldest_turns_of_the_growing_conversation() {
        let c = Conversations::default();
        assert_eq!(c.push("chat", turn("aaaa", "bbbb"), 20), 0);
        assert_eq!(c.push("sum", turn("cc", "dd"), 20), 0);
        assert_eq!(c.push("chat", turn("eeee", "ffff"), 19), 1);
        assert_eq!(c.bytes(), 12);
        let t = c.turns("chat");
        assert_eq!((t.len(), &*t[0].user), (1, "eeee"));
        assert_eq!(c.turns("sum").len(), 1);
        // Larger than the cap: not kept, counted.
        assert_eq!(c.push("chat", turn(&"x".repeat(30), ""), 20), 1);
        assert_eq!(c.bytes(), 12);
        assert_eq!(c.forget_oldest("chat", 5), 1);
        assert_eq!(c.bytes(), 4);
        assert!(c.turns("chat").is_empty());
    }
}
