//! The conversations the gateway keeps for chat delegates (OpenAI-compatible ones). Such an endpoint keeps no
//! state, so the gateway keeps, per client session and skill, the user and assistant turns of
//! the session's tasks and sends them with each new task: bounded by the session's memory cap
//! (the oldest turns go first), when a request is built by the delegate's context window, and
//! across every session by a budget shared out by tenant ([`ConversationMemory`], a
//! tenant-fair table, [`crate::fair`]: a tenant over its share loses its least recently used
//! sessions' conversations first, a tenant within its share loses none to another's volume).
//! Cluster mode keeps them in Redis instead (`state/conversation_store/redis.rs`).

use crate::chat::Turn;
use crate::fair::{Changed, FairTable, Kept, TableStats};
use std::collections::VecDeque;
use std::time::Duration;

/// Every conversation of one client session, by skill, and the bytes they hold together.
#[derive(Debug)]
pub struct SessionConversations {
    /// Few skills per session: a short list beats a map.
    by_skill: Vec<(Box<str>, VecDeque<Turn>)>,
    bytes: usize,
    /// How long the session's conversations outlive its last use (the session's idle TTL).
    ttl: Duration,
}

impl SessionConversations {
    /// No conversation yet, kept `ttl` past its last use.
    pub fn new(ttl: Duration) -> SessionConversations {
        SessionConversations {
            by_skill: Vec::new(),
            bytes: 0,
            ttl,
        }
    }

    /// The turns of `skill`, oldest first (shared text: nothing is copied).
    pub fn turns(&self, skill: &str) -> Vec<Turn> {
        self.by_skill
            .iter()
            .find(|(s, _)| &**s == skill)
            .map(|(_, t)| t.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Forgets the `n` oldest turns of `skill` (they no longer fit the context window);
    /// how many were forgotten.
    pub fn forget_oldest(&mut self, skill: &str, n: usize) -> usize {
        let Some((_, turns)) = self.by_skill.iter_mut().find(|(s, _)| &**s == skill) else {
            return 0;
        };
        let n = n.min(turns.len());
        for t in turns.drain(..n) {
            self.bytes -= t.bytes();
        }
        n
    }

    /// Adds a turn to `skill`'s conversation, then forgets the oldest turns of it until the
    /// session holds at most `cap` bytes; how many were forgotten. A turn larger than the cap
    /// is not kept (and counts as one forgotten).
    pub fn push(&mut self, skill: &str, turn: Turn, cap: usize) -> usize {
        if turn.bytes() > cap {
            return 1;
        }
        let i = match self.by_skill.iter().position(|(s, _)| &**s == skill) {
            Some(i) => i,
            None => {
                self.by_skill.push((skill.into(), VecDeque::new()));
                self.by_skill.len() - 1
            }
        };
        self.bytes += turn.bytes();
        let mut dropped = 0;
        // The other skills' turns stay: this conversation pays for its own growth.
        let turns = &mut self.by_skill[i].1;
        turns.push_back(turn);
        while self.bytes > cap {
            let Some(old) = turns.pop_front() else { break };
            self.bytes -= old.bytes();
            dropped += 1;
        }
        dropped
    }

    /// Bytes of text held.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

impl Kept<String> for SessionConversations {
    fn weight(&self, session: &String) -> usize {
        session.len() + self.bytes
    }

    fn ttl(&self) -> Option<Duration> {
        Some(self.ttl)
    }
}

/// What a turn added to a session's conversation cost.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pushed {
    /// Turns of the session forgotten for its memory cap (the new one counts if it was larger
    /// than the cap, or found no room in its tenant's share).
    pub dropped: usize,
    /// Sessions whose conversations were dropped for the budget (tenants over their share).
    pub evicted: usize,
}

/// Every session's conversations on this node, by tenant, within one byte budget shared out
/// by tenant: when a turn takes the total past it, the least recently used sessions of the
/// tenant most over its share are dropped; a session idle past its TTL is dropped when met.
pub struct ConversationMemory {
    table: FairTable<String, SessionConversations>,
}

impl ConversationMemory {
    /// A memory of at most `budget` bytes of turns.
    pub fn new(budget: usize) -> ConversationMemory {
        ConversationMemory {
            table: FairTable::new(budget, None),
        }
    }

    /// The turns of `tenant`'s `session`'s conversation of `skill`, oldest first (a use of
    /// the session).
    pub fn turns(&self, tenant: &str, session: &str, skill: &str) -> Vec<Turn> {
        match self
            .table
            .change(tenant, session, || None, |c| c.turns(skill))
        {
            Changed::Kept(turns, _) => turns,
            Changed::Absent | Changed::Refused(..) => Vec::new(),
        }
    }

    /// Forgets the `n` oldest turns of `tenant`'s `session`'s `skill`; how many were forgotten.
    pub fn forget_oldest(&self, tenant: &str, session: &str, skill: &str, n: usize) -> usize {
        match self
            .table
            .change(tenant, session, || None, |c| c.forget_oldest(skill, n))
        {
            Changed::Kept(n, _) => n,
            Changed::Absent | Changed::Refused(..) => 0,
        }
    }

    /// Adds a turn to `tenant`'s `session`'s conversation of `skill` within the session's
    /// `cap`, the session living `ttl` past its last use; then makes room within the budget.
    pub fn push(
        &self,
        tenant: &str,
        session: &str,
        skill: &str,
        turn: Turn,
        cap: usize,
        ttl: Duration,
    ) -> Pushed {
        let made = || Some((session.to_owned(), SessionConversations::new(ttl)));
        let pushed = self.table.change(tenant, session, made, |c| {
            c.ttl = ttl;
            c.push(skill, turn, cap)
        });
        match pushed {
            Changed::Kept(dropped, evicted) => {
                // A new session's first turn over the cap left it empty: not kept.
                let empty = dropped > 0
                    && self
                        .table
                        .get(tenant, session, |c| c.bytes() == 0)
                        .unwrap_or(false);
                if empty {
                    self.table.remove(tenant, session);
                }
                Pushed {
                    dropped,
                    evicted: evicted.len(),
                }
            }
            Changed::Refused(_, evicted) => Pushed {
                dropped: 1,
                evicted: evicted.len(),
            },
            Changed::Absent => Pushed::default(),
        }
    }

    /// Forgets every conversation of `tenant`'s `session`.
    pub fn forget_session(&self, tenant: &str, session: &str) {
        self.table.remove(tenant, session);
    }

    /// The bytes `tenant`'s `session`'s conversations hold.
    pub fn session_bytes(&self, tenant: &str, session: &str) -> usize {
        self.table
            .get(tenant, session, SessionConversations::bytes)
            .unwrap_or(0)
    }

    /// Bytes held, every session together (text and each session's overhead).
    pub fn bytes(&self) -> usize {
        self.table.bytes()
    }

    /// The table's figures (its metrics).
    pub fn stats(&self) -> TableStats {
        self.table.stats()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chat::TURN_OVERHEAD;
    use crate::fair::ENTRY_OVERHEAD;

    fn turn(u: &str, a: &str) -> Turn {
        Turn {
            user: u.into(),
            assistant: a.into(),
        }
    }

    const O: usize = TURN_OVERHEAD;
    const HOUR: Duration = Duration::from_secs(3600);

    #[test]
    fn the_cap_drops_the_oldest_turns_of_the_growing_conversation() {
        let mut c = SessionConversations::new(HOUR);
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

    /// What one session of a one-letter id holding one 100-byte turn weighs in the table.
    const SESSION: usize = 1 + 100 + O + ENTRY_OVERHEAD;

    #[test]
    fn the_budget_drops_the_least_recently_used_sessions() {
        let m = ConversationMemory::new(3 * SESSION);
        let t = || turn(&"u".repeat(50), &"a".repeat(50));
        for s in ["a", "b", "c"] {
            assert_eq!(
                m.push("t", s, "chat", t(), 1 << 20, HOUR),
                Pushed::default()
            );
        }
        // "a" used again: "b" is now the least recently used.
        assert_eq!(m.turns("t", "a", "chat").len(), 1);
        let p = m.push("t", "d", "chat", t(), 1 << 20, HOUR);
        assert_eq!(
            p,
            Pushed {
                dropped: 0,
                evicted: 1
            }
        );
        assert!(m.turns("t", "b", "chat").is_empty());
        assert_eq!(m.turns("t", "a", "chat").len(), 1);
        assert_eq!(m.bytes(), 3 * SESSION);
        // One session's growth never drops itself for the budget.
        let p = m.push("t", "d", "chat", t(), 1 << 20, HOUR);
        assert_eq!(p.evicted, 1);
        assert!(m.bytes() <= 3 * SESSION);
        assert_eq!(m.session_bytes("t", "d"), 2 * (100 + O));
        // Idle past its TTL: dropped at the next change (not counted as evicted).
        let m = ConversationMemory::new(1 << 20);
        m.push("t", "e", "chat", t(), 1 << 20, Duration::ZERO);
        std::thread::sleep(Duration::from_millis(2));
        let p = m.push("t", "f", "chat", turn("", ""), 1 << 20, HOUR);
        assert_eq!((m.session_bytes("t", "e"), p.evicted), (0, 0));
        assert_eq!(m.bytes(), 1 + O + ENTRY_OVERHEAD);
    }

    /// Another tenant's flood of sessions leaves a tenant's live conversation whole.
    #[test]
    fn another_tenants_sessions_do_not_drop_a_live_conversation() {
        let m = ConversationMemory::new(100 * SESSION);
        for i in 0..10 {
            m.push(
                "alpha",
                "live",
                "chat",
                turn(&"u".repeat(50), &"a".repeat(50)),
                1 << 20,
                HOUR,
            );
            assert_eq!(m.turns("alpha", "live", "chat").len(), i + 1);
        }
        for i in 0..2200 {
            m.push(
                "beta",
                &format!("s{i}"),
                "chat",
                turn(&"u".repeat(50), &"a".repeat(50)),
                1 << 20,
                HOUR,
            );
        }
        assert_eq!(m.turns("alpha", "live", "chat").len(), 10);
        assert!(m.bytes() <= 100 * SESSION);
        assert!(m.stats().evicted_over_share >= 2000);
        // The same session id in another tenant is another conversation.
        assert!(m.turns("beta", "live", "chat").is_empty());
    }
}
