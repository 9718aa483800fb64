//! LLMX senders' sequence numbers: the last `s` each sender of a tenant sent (a repeat is a
//! replay) and the gateway's numbering of its answers to it. Single node: one tenant-fair
//! table in this process ([`LocalSequences`]). Cluster mode: Redis ([`RedisSequences`]), so a
//! number used on one replica is refused on every other and the answers' numbers rise across
//! replicas. When Redis does not answer, the message is refused (retryable): a replay is
//! never guessed.

use super::StoreError;
use crate::fair::{Changed, FairTable, Kept, TableStats};
use std::future::Future;

mod redis;
pub use redis::RedisSequences;

/// One message's sequence number checked: `Err(last)` when it is not above the sender's
/// last, and the number of the gateway's answer to it (rising per tenant and sender).
pub type Checked = (Result<(), u64>, u64);

/// Keeps each tenant's senders' sequence numbers.
pub trait SequenceStore {
    /// Accepts `seq` from `tenant`'s sender `from` if it is above the last one accepted, and
    /// numbers the gateway's answer to that message (accepted or not), in one step.
    fn accept(
        &self,
        tenant: &str,
        from: &str,
        seq: u64,
    ) -> impl Future<Output = Result<Checked, StoreError>> + Send;

    /// The gateway's next number for an answer to `tenant`'s `to` (a message refused before
    /// its sequence number was read).
    fn next(&self, tenant: &str, to: &str) -> impl Future<Output = Result<u64, StoreError>> + Send;
}

/// The sequence store chosen at start.
pub enum Sequences {
    /// Single node.
    Local(LocalSequences),
    /// Cluster mode.
    Shared(RedisSequences),
}

impl Sequences {
    /// This process's table's figures (none in cluster mode, where Redis keeps them).
    pub fn local_stats(&self) -> Option<TableStats> {
        match self {
            Sequences::Local(l) => Some(l.stats()),
            Sequences::Shared(_) => None,
        }
    }
}

impl SequenceStore for Sequences {
    async fn accept(&self, tenant: &str, from: &str, seq: u64) -> Result<Checked, StoreError> {
        match self {
            Sequences::Local(l) => {
                let checked = l.check(tenant, from, seq);
                Ok((checked, l.next(tenant, from)))
            }
            Sequences::Shared(r) => r.accept(tenant, from, seq).await,
        }
    }

    async fn next(&self, tenant: &str, to: &str) -> Result<u64, StoreError> {
        match self {
            Sequences::Local(l) => Ok(l.next(tenant, to)),
            Sequences::Shared(r) => r.next(tenant, to).await,
        }
    }
}

/// What a single node remembers of one sender of a tenant: the last sequence number it sent,
/// and the last the gateway numbered an answer to it with.
#[derive(Debug, Default)]
struct Peer {
    last_in: Option<u64>,
    sent: u64,
}

impl Kept<String> for Peer {
    fn weight(&self, from: &String) -> usize {
        from.len() + std::mem::size_of::<Peer>()
    }
}

/// Single node: each tenant's senders in one tenant-fair table (a tenant over its share
/// forgets its least recently heard senders first, never another tenant's).
pub struct LocalSequences {
    peers: FairTable<String, Peer>,
}

impl LocalSequences {
    /// A table of at most `max_bytes`.
    pub fn new(max_bytes: usize) -> LocalSequences {
        LocalSequences {
            peers: FairTable::new(max_bytes, None),
        }
    }

    /// Accepts `seq` from `tenant`'s `from` if above its last one; `Err(last)` if not.
    pub fn check(&self, tenant: &str, from: &str, seq: u64) -> Result<(), u64> {
        let new = || Some((from.to_owned(), Peer::default()));
        let checked = self.peers.change(tenant, from, new, |p| match p.last_in {
            Some(last) if seq <= last => Err(last),
            _ => {
                p.last_in = Some(seq);
                Ok(())
            }
        });
        match checked {
            Changed::Kept(checked, _) => checked,
            // Never for entries this small (a refusal needs an entry over its tenant's
            // share): taken as a first message is.
            Changed::Absent | Changed::Refused(..) => Ok(()),
        }
    }

    /// The next number of an answer to `tenant`'s `to`, from 1.
    pub fn next(&self, tenant: &str, to: &str) -> u64 {
        let new = || Some((to.to_owned(), Peer::default()));
        match self.peers.change(tenant, to, new, |p| {
            p.sent += 1;
            p.sent
        }) {
            Changed::Kept(n, _) => n,
            Changed::Absent | Changed::Refused(..) => 1,
        }
    }

    /// The table's figures (its metrics).
    pub fn stats(&self) -> TableStats {
        self.peers.stats()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sequence numbers rise per tenant and sender; answers are numbered from 1 each.
    async fn rising(a: &Sequences, b: &Sequences) {
        assert_eq!(a.accept("t", "claude", 5).await.unwrap(), (Ok(()), 1));
        // The same number on the other replica is a replay; lower too.
        assert_eq!(b.accept("t", "claude", 5).await.unwrap(), (Err(5), 2));
        assert_eq!(a.accept("t", "claude", 4).await.unwrap(), (Err(5), 3));
        assert_eq!(b.accept("t", "claude", 6).await.unwrap(), (Ok(()), 4));
        assert_eq!(a.next("t", "claude").await.unwrap(), 5);
        // Another sender, another tenant: their own.
        assert_eq!(b.accept("t", "gemini", 1).await.unwrap(), (Ok(()), 1));
        assert_eq!(a.accept("u", "claude", 5).await.unwrap(), (Ok(()), 1));
        // Beyond f64's integers: compared exactly.
        let big = u64::MAX - 1;
        assert_eq!(a.accept("t", "big", big).await.unwrap().0, Ok(()));
        assert_eq!(b.accept("t", "big", big).await.unwrap().0, Err(big));
        assert_eq!(b.accept("t", "big", u64::MAX).await.unwrap().0, Ok(()));
    }

    #[tokio::test]
    async fn local_sequences_rise_per_tenant_and_sender() {
        let s = Sequences::Local(LocalSequences::new(1 << 20));
        rising(&s, &s).await;
    }

    #[tokio::test]
    async fn shared_sequences_rise_across_replicas() {
        let (redis, metrics) = crate::state::redis::testing::redis();
        let a = Sequences::Shared(RedisSequences::new(redis.clone(), 1 << 20, 1));
        let b = Sequences::Shared(RedisSequences::new(redis, 1 << 20, 1));
        let before = metrics.redis_calls.with_label_values(&["llmx_seq"]).get();
        rising(&a, &b).await;
        let calls = metrics.redis_calls.with_label_values(&["llmx_seq"]).get() - before;
        assert_eq!(calls, 10, "one round trip per check and per number");
    }

    /// A tenant flooding made-up senders forgets only its own: a quiet tenant's sender keeps
    /// its last number (its replay still refused).
    #[tokio::test]
    async fn a_flood_of_made_up_senders_stays_in_its_tenant() {
        let (redis, _) = crate::state::redis::testing::redis();
        // Two tenants configured; 64 senders' worth of bytes each.
        let bytes = 2 * 64 * super::redis::SENDER_BYTES;
        let s = Sequences::Shared(RedisSequences::new(redis, bytes as u64, 2));
        assert_eq!(s.accept("quiet", "alice", 7).await.unwrap().0, Ok(()));
        assert_eq!(s.accept("loud", "first", 7).await.unwrap().0, Ok(()));
        for i in 0..300 {
            let from = format!("made-up-{i}");
            assert_eq!(s.accept("loud", &from, 1).await.unwrap().0, Ok(()));
        }
        assert_eq!(s.accept("quiet", "alice", 7).await.unwrap().0, Err(7));
        // The loud tenant's oldest sender was forgotten for its newer ones.
        assert_eq!(s.accept("loud", "first", 7).await.unwrap().0, Ok(()));
        let Sequences::Shared(r) = &s else {
            unreachable!()
        };
        assert_eq!(r.senders("loud").await.unwrap(), 64);
        assert_eq!(r.senders("quiet").await.unwrap(), 1);
    }
}
