//! The LADP bridge's state: each agent's message rate (§14) and the tasks each agent started
//! (for `status-request` and `halt`). Rates: a tenant-fair table in this process bounds the
//! agents tracked ([`crate::fair`]: one tenant's made-up senders fill its own share, never
//! another's) and, on a single node, decides; in cluster mode one GCRA per agent in Redis
//! (`crate::state::Limits`) decides for every replica. Tasks: the book store chosen at start
//! (`crate::state::Books`: a tenant-fair table here, or Redis shared by every replica).

use crate::config::{LadpConfig, RateConfig};
use crate::fair::{Changed, FairTable, Kept, TableStats};
use crate::ldp::TaskId;
use crate::limits::{RateLimit, Scope};
use crate::state::book_store::LocalBook;
use crate::state::{BookStore, Books, LimitStore, Limits, StoreError};
use std::time::Duration;

pub use crate::state::book_store::{Entry, Phase, Which, MAX_TASKS_PER_AGENT};

/// Longest `<sender>` accepted, in bytes (it keys the tables).
pub const MAX_SENDER_BYTES: usize = 256;

/// An agent's rate: kept while it has not refilled (a new one starts full, the state it
/// reaches), and never evicted before.
struct Rate {
    limit: RateLimit,
}

impl Kept<String> for Rate {
    fn weight(&self, sender: &String) -> usize {
        sender.len() + std::mem::size_of::<RateLimit>()
    }

    fn running(&self) -> bool {
        true
    }
}

/// The bridge's state, one per process (a field of the server's shared state).
pub struct LadpState {
    /// The rate of each agent, and how long one takes to refill (its entry's TTL).
    rate: Option<(RateConfig, FairTable<String, Rate>)>,
    /// Where the rate decides: the table's limiter, or Redis.
    rates: Limits,
    book: Books,
}

/// Why a message was not admitted by the rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RateRefusal {
    /// The agent sent its minute's worth: retry after this.
    Agent(Duration),
    /// The tenant's share of the agents tracked is full of agents still refilling: retry
    /// after this (when the first of them will have refilled), if known.
    Agents(Option<Duration>),
}

impl LadpState {
    /// A single node's state for `config` (`rate_per_minute` checked at load: 1 to 60 000);
    /// an agent's tasks are remembered at least as long as a task may run (`task_timeout`).
    pub fn new(config: &LadpConfig, task_timeout: Duration) -> LadpState {
        let bytes = usize::try_from(config.max_book_bytes).unwrap_or(usize::MAX);
        let ttl = crate::state::book_store::book_ttl(task_timeout);
        let book = Books::Local(LocalBook::new(bytes, ttl));
        LadpState::with_stores(
            config,
            Limits::Local(crate::state::limit_store::LocalLimits),
            book,
        )
    }

    /// The state for `config` with the rates and book chosen at start
    /// (`crate::state::BridgeStores`).
    pub fn with_stores(config: &LadpConfig, rates: Limits, book: Books) -> LadpState {
        let per_minute = config.rate_per_minute.max(1);
        let rate = RateConfig {
            rps: f64::from(per_minute) / 60.0,
            burst: Some(per_minute),
        };
        let bytes = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
        // A full burst refills in a minute: an agent idle that long is as a new one.
        let refilled = Some(Duration::from_secs(60));
        LadpState {
            rate: RateLimit::new(&rate)
                .map(|_| (rate, FairTable::new(bytes(config.max_rate_bytes), refilled))),
            rates,
            book,
        }
    }

    /// Takes one message from `tenant`'s agent `sender`'s allowance. The local table bounds
    /// the agents tracked; the rate store decides (on a single node, the table's limiter; in
    /// cluster mode the agent's GCRA in Redis, or while Redis does not answer a local one at
    /// rate ÷ replicas).
    pub async fn admit(&self, tenant: &str, sender: &str) -> Result<(), RateRefusal> {
        let Some((rate, table)) = &self.rate else {
            return Ok(());
        };
        let new = || RateLimit::new(rate).map(|limit| (sender.to_owned(), Rate { limit }));
        let local = match table.change(tenant, sender, new, |r| r.limit.check()) {
            Changed::Kept(checked, _) => checked,
            Changed::Refused(r, _) => return Err(RateRefusal::Agents(r.retry_after)),
            // A rate that cannot be built is no limit (the config check refuses such rates).
            Changed::Absent => return Ok(()),
        };
        let key = agent_key(tenant, sender);
        self.rates
            .admit(Scope::Agent, &key, rate, move || local)
            .await
            .map_err(RateRefusal::Agent)
    }

    /// Remembers `task_id`, started by `tenant`'s `sender` with the `task-init` of `msg_id`;
    /// `Ok(Err(wait))` when the tenant's share of the book is full of agents with running
    /// tasks (the wait, if known).
    pub async fn start(
        &self,
        tenant: &str,
        sender: &str,
        msg_id: i64,
        task_id: TaskId,
    ) -> Result<Result<(), Option<Duration>>, StoreError> {
        self.book.start(tenant, sender, msg_id, task_id).await
    }

    /// Records how `task_id` ended (if it is still remembered); a failure is logged (the task
    /// reads `running` until its agent expires).
    pub async fn finish(&self, tenant: &str, sender: &str, task_id: &TaskId, phase: Phase) {
        if let Err(e) = self.book.finish(tenant, sender, task_id, phase).await {
            tracing::warn!(error = %e, task_id = %task_id, "LADP task's end not recorded: the shared state did not answer");
        }
    }

    /// The remembered task `which` asks about, if any (the agent counts as heard from).
    pub async fn find(
        &self,
        tenant: &str,
        sender: &str,
        which: Which<'_>,
    ) -> Result<Option<Entry>, StoreError> {
        self.book.find(tenant, sender, which).await
    }

    /// The agent's tasks still running.
    pub async fn running(&self, tenant: &str, sender: &str) -> Result<Vec<TaskId>, StoreError> {
        self.book.running(tenant, sender).await
    }

    /// Agents remembered here (for tests and bounds; 0 in cluster mode).
    pub fn agents(&self) -> usize {
        self.book.local_agents()
    }

    /// The tables' figures (their metrics): the rates', then the book's (none kept here in
    /// cluster mode).
    pub fn stats(&self) -> (TableStats, TableStats) {
        let rates = self
            .rate
            .as_ref()
            .map(|(_, t)| t.stats())
            .unwrap_or_default();
        (rates, self.book.local_stats().unwrap_or_default())
    }
}

/// The key of `tenant`'s agent `sender`'s rate: both as digests, so no name reaches a key.
fn agent_key(tenant: &str, sender: &str) -> String {
    use crate::state::redis::Redis;
    format!("{}:{}", Redis::tenant_tag(tenant), Redis::name_tag(sender))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(per_minute: u32) -> LadpState {
        let config = LadpConfig {
            rate_per_minute: per_minute,
            ..LadpConfig::default()
        };
        LadpState::new(&config, Duration::from_secs(60))
    }

    #[tokio::test]
    async fn a_minute_s_worth_then_a_wait_per_tenant_and_sender() {
        let s = state(4);
        for _ in 0..4 {
            assert_eq!(s.admit("t", "a").await, Ok(()));
        }
        assert!(
            matches!(s.admit("t", "a").await, Err(RateRefusal::Agent(w)) if w > Duration::from_secs(1))
        );
        assert_eq!(s.admit("t", "b").await, Ok(()), "another sender");
        assert_eq!(s.admit("u", "a").await, Ok(()), "another tenant");
    }

    #[tokio::test]
    async fn tasks_are_found_finished_and_bounded() {
        let s = state(4);
        for i in 0..(MAX_TASKS_PER_AGENT as i64 + 5) {
            s.start("t", "a", i, TaskId::from(format!("task-{i}")))
                .await
                .unwrap()
                .unwrap();
        }
        assert_eq!(
            s.running("t", "a").await.unwrap().len(),
            MAX_TASKS_PER_AGENT
        );
        let last = TaskId::from(format!("task-{}", MAX_TASKS_PER_AGENT + 4));
        s.finish("t", "a", &last, Phase::Done).await;
        let e = s.find("t", "a", Which::Latest).await.unwrap().unwrap();
        assert_eq!((e.task_id, e.phase), (last, Phase::Done));
        assert_eq!(
            s.find("t", "a", Which::Msg(0)).await.unwrap(),
            None,
            "the oldest went"
        );
        assert_eq!(
            s.find("t", "a", Which::Task("task-6"))
                .await
                .unwrap()
                .unwrap()
                .msg_id,
            6
        );
        assert_eq!(
            s.find("u", "a", Which::Latest).await.unwrap(),
            None,
            "tenants apart"
        );
    }

    /// Another tenant's made-up senders neither lock a tenant's agents out of their rate nor
    /// make its running task forgotten.
    #[tokio::test]
    async fn a_flood_of_senders_stays_in_its_tenants_share() {
        let config = LadpConfig {
            rate_per_minute: 4,
            max_rate_bytes: 64 * 1024,
            max_book_bytes: 64 * 1024,
        };
        let s = LadpState::new(&config, Duration::from_secs(60));
        assert_eq!(s.admit("alpha", "a").await, Ok(()));
        s.start("alpha", "a", 1, TaskId::from("alpha-task"))
            .await
            .unwrap()
            .unwrap();
        let mut refused = 0;
        for i in 0..5000 {
            let sender = format!("made-up-{i}");
            match s.admit("beta", &sender).await {
                Ok(()) => {
                    if s.start("beta", &sender, 1, TaskId::from(format!("b{i}")))
                        .await
                        .unwrap()
                        .is_err()
                    {
                        refused += 1;
                    }
                }
                Err(RateRefusal::Agents(wait)) => {
                    assert!(wait.is_some_and(|w| w <= Duration::from_secs(60)));
                    refused += 1;
                }
                Err(other) => panic!("{other:?}"),
            }
        }
        assert!(refused > 4000, "{refused}");
        // Alpha's agent keeps its allowance and a new agent of alpha's is taken.
        assert_eq!(s.admit("alpha", "a").await, Ok(()));
        assert_eq!(s.admit("alpha", "b").await, Ok(()));
        assert_eq!(
            s.running("alpha", "a").await.unwrap(),
            [TaskId::from("alpha-task")]
        );
        let (rates, book) = s.stats();
        assert!(rates.refused > 0 && book.tenants == 2, "{rates:?} {book:?}");
    }
}
