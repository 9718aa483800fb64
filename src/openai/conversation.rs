//! The conversations the gateway keeps for OpenAI-backed delegates. Such an endpoint keeps no
//! state, so the gateway keeps, per client session and skill, the user and assistant turns of
//! the session's tasks and sends them with each new task: bounded by the session's memory cap
//! (the oldest turns go first), when a request is built by the delegate's context window, and
//! across every session by a global budget ([`ConversationMemory`]: the least recently used
//! session's conversations go first). Cluster mode keeps them in Redis instead
//! (`state/conversation_store/redis.rs`).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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

/// Every conversation of one client session, by skill, and the bytes they hold together.
#[derive(Debug, Default)]
pub struct SessionConversations {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// Few skills per session: a short list beats a map.
    by_skill: Vec<(Box<str>, VecDeque<Turn>)>,
    bytes: usize,
}

impl SessionConversations {
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

/// What a turn added to a session's conversation cost.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pushed {
    /// Turns of the session forgotten for its memory cap (the new one counts if it was larger
    /// than the cap).
    pub dropped: usize,
    /// Other sessions whose conversations were dropped for the global budget.
    pub evicted: usize,
}

/// One session's conversations in the global memory, and when it was last used.
#[derive(Debug)]
struct Slot {
    conversations: SessionConversations,
    /// Its place in the use order.
    tick: u64,
    used: Instant,
    ttl: Duration,
}

#[derive(Debug, Default)]
struct Lru {
    sessions: HashMap<String, Slot>,
    /// Use order, least recent first: tick → session id.
    order: BTreeMap<u64, String>,
    tick: u64,
    bytes: usize,
}

impl Lru {
    /// Marks `id` used now (a new slot if absent).
    fn touch(&mut self, id: &str, ttl: Duration) -> &mut Slot {
        self.tick += 1;
        let tick = self.tick;
        if let Some(old) = self.sessions.get(id).map(|s| s.tick) {
            self.order.remove(&old);
        }
        self.order.insert(tick, id.to_owned());
        let slot = self.sessions.entry(id.to_owned()).or_insert_with(|| Slot {
            conversations: SessionConversations::default(),
            tick,
            used: Instant::now(),
            ttl,
        });
        slot.tick = tick;
        slot.used = Instant::now();
        slot.ttl = ttl;
        slot
    }

    fn remove(&mut self, id: &str) -> bool {
        let Some(slot) = self.sessions.remove(id) else {
            return false;
        };
        self.order.remove(&slot.tick);
        self.bytes -= slot.conversations.bytes();
        true
    }

    /// Drops the least recently used sessions that are idle past their TTL, or (but `keep`)
    /// while over `budget`; how many were dropped for the budget.
    fn evict(&mut self, budget: usize, keep: &str) -> usize {
        let mut evicted = 0;
        while let Some((_, id)) = self.order.first_key_value() {
            let Some(slot) = self.sessions.get(id) else {
                break;
            };
            let expired = slot.used.elapsed() > slot.ttl;
            let over = self.bytes > budget && id != keep;
            if !expired && !over {
                break;
            }
            let id = id.clone();
            self.remove(&id);
            evicted += usize::from(!expired);
        }
        evicted
    }
}

/// Every session's conversations on this node, within one byte budget: when a turn takes the
/// total past it, the least recently used sessions' conversations are dropped; a session idle
/// past its TTL is dropped at the next change.
#[derive(Debug)]
pub struct ConversationMemory {
    budget: usize,
    inner: Mutex<Lru>,
}

impl ConversationMemory {
    /// A memory of at most `budget` bytes of turns.
    pub fn new(budget: usize) -> ConversationMemory {
        ConversationMemory {
            budget,
            inner: Mutex::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Lru> {
        // A poisoned lock still holds whole turns: the worst a panic left is a stale one.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The turns of `session`'s conversation of `skill`, oldest first (a use of the session).
    pub fn turns(&self, session: &str, skill: &str) -> Vec<Turn> {
        let mut lru = self.lock();
        if !lru.sessions.contains_key(session) {
            return Vec::new();
        }
        let ttl = lru.sessions.get(session).map_or(Duration::ZERO, |s| s.ttl);
        lru.touch(session, ttl).conversations.turns(skill)
    }

    /// Forgets the `n` oldest turns of `session`'s `skill`; how many were forgotten.
    pub fn forget_oldest(&self, session: &str, skill: &str, n: usize) -> usize {
        let mut lru = self.lock();
        let Some(slot) = lru.sessions.get(session) else {
            return 0;
        };
        let before = slot.conversations.bytes();
        let forgotten = slot.conversations.forget_oldest(skill, n);
        let after = slot.conversations.bytes();
        lru.bytes -= before - after;
        forgotten
    }

    /// Adds a turn to `session`'s conversation of `skill` within the session's `cap`, the
    /// session living `ttl` past its last use; then drops sessions idle past their TTL and,
    /// while over the budget, the least recently used other sessions.
    pub fn push(
        &self,
        session: &str,
        skill: &str,
        turn: Turn,
        cap: usize,
        ttl: Duration,
    ) -> Pushed {
        let mut lru = self.lock();
        let slot = lru.touch(session, ttl);
        let before = slot.conversations.bytes();
        let dropped = slot.conversations.push(skill, turn, cap);
        let after = slot.conversations.bytes();
        lru.bytes = lru.bytes + after - before;
        if after == 0 {
            lru.remove(session);
        }
        let evicted = lru.evict(self.budget, session);
        Pushed { dropped, evicted }
    }

    /// Forgets every conversation of `session`.
    pub fn forget_session(&self, session: &str) {
        self.lock().remove(session);
    }

    /// The bytes `session`'s conversations hold.
    pub fn session_bytes(&self, session: &str) -> usize {
        self.lock()
            .sessions
            .get(session)
            .map_or(0, |s| s.conversations.bytes())
    }

    /// Bytes held, every session together.
    pub fn bytes(&self) -> usize {
        self.lock().bytes
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

    const O: usize = TURN_OVERHEAD;

    #[test]
    fn the_cap_drops_the_oldest_turns_of_the_growing_conversation() {
        let c = SessionConversations::default();
        assert_eq!(c.push("chat", turn("aaaa", "bbbb"), 20 + 2 * O), 0);
        assert_eq!(c.push("sum", turn("cc", "dd"), 20 + 2 * O), 0);
        assert_eq!(c.push("chat", turn("eeee", "ffff"), 19 + 2 * O), 1);
        assert_eq!(c.bytes(), 12 + 2 * O);
        let t = c.turns("chat");
        assert_eq!((t.len(), &*t[0].user), (1, "eeee"));
        assert_eq!(c.turns("sum").len(), 1);
        // Larger than the cap: not kept, counted.
        assert_eq!(
            c.push("chat", turn(&"x".repeat(30 + 2 * O), ""), 20 + 2 * O),
            1
        );
        assert_eq!(c.bytes(), 12 + 2 * O);
        assert_eq!(c.forget_oldest("chat", 5), 1);
        assert_eq!(c.bytes(), 4 + O);
        assert!(c.turns("chat").is_empty());
    }

    #[test]
    fn the_budget_drops_the_least_recently_used_sessions() {
        let hour = Duration::from_secs(3600);
        let m = ConversationMemory::new(3 * (100 + O));
        let t = || turn(&"u".repeat(50), &"a".repeat(50));
        for s in ["a", "b", "c"] {
            assert_eq!(m.push(s, "chat", t(), 1 << 20, hour), Pushed::default());
        }
        // "a" used again: "b" is now the least recently used.
        assert_eq!(m.turns("a", "chat").len(), 1);
        let p = m.push("d", "chat", t(), 1 << 20, hour);
        assert_eq!(
            p,
            Pushed {
                dropped: 0,
                evicted: 1
            }
        );
        assert!(m.turns("b", "chat").is_empty());
        assert_eq!(m.turns("a", "chat").len(), 1);
        assert_eq!(m.bytes(), 3 * (100 + O));
        // One session's growth never drops itself for the budget.
        let p = m.push("d", "chat", t(), 1 << 20, hour);
        assert_eq!(p.evicted, 1);
        assert!(m.bytes() <= 3 * (100 + O));
        assert_eq!(m.session_bytes("d"), 2 * (100 + O));
        // Idle past its TTL: dropped at the next change (not counted as evicted).
        let m = ConversationMemory::new(1 << 20);
        m.push("e", "chat", t(), 1 << 20, Duration::ZERO);
        std::thread::sleep(Duration::from_millis(2));
        let p = m.push("f", "chat", turn("", ""), 1 << 20, hour);
        assert_eq!((m.session_bytes("e"), p.evicted), (0, 0));
        assert_eq!(m.bytes(), O);
    }
}
