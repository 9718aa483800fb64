//! The conversations kept for OpenAI-backed delegates, by client session and skill. Single
//! node: this process's [`ConversationMemory`] (`memory.rs`). Cluster mode:
//! Redis, so a session's next task continues its conversation on any replica. Both are bounded
//! per session (`openai.session_memory_bytes`) and all together (`openai.memory_bytes`, the
//! least recently used sessions' conversations dropped first), and end with the session's
//! idle TTL. When Redis does not answer, a task runs without its earlier turns and its own
//! turn is not kept (logged; the Redis error is counted).

use crate::chat::Turn;

mod memory;
pub use memory::{ConversationMemory, Pushed, SessionConversations};
use std::future::Future;
use std::time::Duration;

mod redis;
pub use redis::RedisConversations;

/// Keeps the turns of each client session's conversations, by the session's tenant (whose
/// share of the budget they count against).
pub trait ConversationStore {
    /// The turns of `tenant`'s `session`'s conversation of `skill`, oldest first.
    fn turns(
        &self,
        tenant: &str,
        session: &str,
        skill: &str,
    ) -> impl Future<Output = Vec<Turn>> + Send;

    /// Forgets the `n` oldest turns of `tenant`'s `session`'s `skill`; how many were
    /// forgotten.
    fn forget_oldest(
        &self,
        tenant: &str,
        session: &str,
        skill: &str,
        n: usize,
    ) -> impl Future<Output = usize> + Send;

    /// Adds a turn to `tenant`'s `session`'s conversation of `skill`, within the session's
    /// `cap` and the budget; the session lives `ttl` past its last use.
    fn push(
        &self,
        tenant: &str,
        session: &str,
        skill: &str,
        turn: Turn,
        cap: usize,
        ttl: Duration,
    ) -> impl Future<Output = Pushed> + Send;

    /// The bytes `tenant`'s `session`'s conversations hold (for a budget hold's estimate).
    fn session_bytes(&self, tenant: &str, session: &str) -> impl Future<Output = usize> + Send;

    /// Forgets every conversation of `tenant`'s `session` (closed or expired): nothing of it
    /// is kept past the session.
    fn forget_session(&self, tenant: &str, session: &str) -> impl Future<Output = ()> + Send;
}

/// The conversations chosen at start.
pub enum Conversations {
    /// Single node.
    Local(ConversationMemory),
    /// Cluster mode.
    Shared(RedisConversations),
}

impl Conversations {
    /// Bytes this process holds (`None` in cluster mode, where Redis holds them).
    pub fn local_bytes(&self) -> Option<usize> {
        match self {
            Conversations::Local(m) => Some(m.bytes()),
            Conversations::Shared(_) => None,
        }
    }

    /// This process's table's figures (none in cluster mode).
    pub fn local_stats(&self) -> Option<crate::fair::TableStats> {
        match self {
            Conversations::Local(m) => Some(m.stats()),
            Conversations::Shared(_) => None,
        }
    }
}

impl ConversationStore for Conversations {
    async fn turns(&self, tenant: &str, session: &str, skill: &str) -> Vec<Turn> {
        match self {
            Conversations::Local(m) => m.turns(tenant, session, skill),
            Conversations::Shared(r) => r.turns(tenant, session, skill).await,
        }
    }

    async fn forget_oldest(&self, tenant: &str, session: &str, skill: &str, n: usize) -> usize {
        match self {
            Conversations::Local(m) => m.forget_oldest(tenant, session, skill, n),
            Conversations::Shared(r) => r.forget_oldest(tenant, session, skill, n).await,
        }
    }

    async fn push(
        &self,
        tenant: &str,
        session: &str,
        skill: &str,
        turn: Turn,
        cap: usize,
        ttl: Duration,
    ) -> Pushed {
        match self {
            Conversations::Local(m) => m.push(tenant, session, skill, turn, cap, ttl),
            Conversations::Shared(r) => r.push(tenant, session, skill, turn, cap, ttl).await,
        }
    }

    async fn session_bytes(&self, tenant: &str, session: &str) -> usize {
        match self {
            Conversations::Local(m) => m.session_bytes(tenant, session),
            Conversations::Shared(r) => r.session_bytes(tenant, session).await,
        }
    }

    async fn forget_session(&self, tenant: &str, session: &str) {
        match self {
            Conversations::Local(m) => m.forget_session(tenant, session),
            Conversations::Shared(r) => r.forget_session(tenant, session).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn turn(n: usize) -> Turn {
        Turn {
            user: format!("question {n}").into(),
            assistant: "a".repeat(1000).into(),
        }
    }

    /// Checks the store's bounds: per session, then all together.
    async fn bounded(store: &Conversations, other: &Conversations) {
        let hour = Duration::from_secs(3600);
        let p = store
            .push("acme", "s1", "chat", turn(1), 10_000, hour)
            .await;
        assert_eq!(p, Pushed::default());
        store.push("acme", "s1", "sum", turn(2), 10_000, hour).await;
        // Another replica (or the same node) reads the same conversation.
        let t = other.turns("acme", "s1", "chat").await;
        assert_eq!(t.len(), 1);
        assert_eq!(&*t[0].user, "question 1");
        assert_eq!(other.turns("acme", "s1", "sum").await.len(), 1);
        assert!(other.session_bytes("acme", "s1").await >= 2000);
        // The session's cap drops its oldest turns.
        let mut dropped = 0;
        for i in 0..20 {
            dropped += store
                .push("acme", "s1", "chat", turn(i), 5_000, hour)
                .await
                .dropped;
        }
        assert!(dropped >= 15, "{dropped}");
        assert!(store.session_bytes("acme", "s1").await <= 5_000);
        // Forgotten for the context window.
        let n = store.turns("acme", "s1", "chat").await.len();
        assert_eq!(store.forget_oldest("acme", "s1", "chat", 2).await, 2);
        assert_eq!(store.turns("acme", "s1", "chat").await.len(), n - 2);
        // The budget (20 kB here) drops the least recently used sessions.
        let mut evicted = 0;
        for s in 0..40 {
            let p = store
                .push("acme", &format!("x{s}"), "chat", turn(s), 5_000, hour)
                .await;
            evicted += p.evicted;
        }
        assert!(evicted >= 20, "{evicted}");
        assert!(
            store.turns("acme", "s1", "chat").await.is_empty(),
            "the oldest session went first"
        );
        assert_eq!(store.turns("acme", "x39", "chat").await.len(), 1);
    }

    /// A tenant's flood of sessions leaves another tenant's conversation (within its share)
    /// whole; the flooding tenant loses its own least recently used sessions.
    async fn a_flood_keeps_to_its_share(store: &Conversations) {
        let hour = Duration::from_secs(3600);
        store
            .push("alpha", "live", "chat", turn(0), 10_000, hour)
            .await;
        let mut evicted = 0;
        for s in 0..40 {
            evicted += store
                .push("beta", &format!("b{s}"), "chat", turn(s), 5_000, hour)
                .await
                .evicted;
        }
        assert!(evicted >= 20, "{evicted}");
        assert_eq!(store.turns("alpha", "live", "chat").await.len(), 1);
        assert!(store.turns("beta", "b0", "chat").await.is_empty());
        assert_eq!(store.turns("beta", "b39", "chat").await.len(), 1);
        // Another tenant's session of the same id is another conversation.
        assert!(store.turns("beta", "live", "chat").await.is_empty());
    }

    #[tokio::test]
    async fn local_conversations_are_shared_out_by_tenant() {
        let m = Conversations::Local(ConversationMemory::new(20_000));
        a_flood_keeps_to_its_share(&m).await;
        assert!(m.local_bytes().unwrap() <= 20_000);
    }

    #[tokio::test]
    async fn shared_conversations_are_shared_out_by_tenant() {
        let (redis, _) = crate::state::redis::testing::redis();
        let r = RedisConversations::new(redis, 20_000, Duration::from_secs(3600));
        let m = Conversations::Shared(r);
        a_flood_keeps_to_its_share(&m).await;
        let Conversations::Shared(r) = &m else {
            unreachable!()
        };
        assert!(r.total_bytes().await.unwrap() <= 20_000);
    }

    #[tokio::test]
    async fn local_conversations_are_bounded_per_session_and_together() {
        let m = Conversations::Local(ConversationMemory::new(20_000));
        bounded(&m, &m).await;
        assert!(m.local_bytes().unwrap() <= 20_000);
    }

    #[tokio::test]
    async fn shared_conversations_are_read_by_another_replica_and_bounded() {
        let (redis, _) = crate::state::redis::testing::redis();
        let a = Conversations::Shared(RedisConversations::new(
            redis.clone(),
            20_000,
            Duration::from_secs(3600),
        ));
        let b = Conversations::Shared(RedisConversations::new(
            redis.clone(),
            20_000,
            Duration::from_secs(3600),
        ));
        bounded(&a, &b).await;
        let Conversations::Shared(r) = &a else {
            unreachable!()
        };
        assert!(r.total_bytes().await.unwrap() <= 20_000);
    }
}
