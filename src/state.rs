//! The state the gateway decides with, one store per concern, each a trait with a local and a
//! Redis implementation; which one is chosen once, at start, from `[cluster]`: without
//! `redis_url` everything lives in this process, with it every replica shares it.
//!
//! | concern | store (trait → chosen enum) | single node | cluster mode (Redis keys) | when Redis does not answer |
//! |---|---|---|---|---|
//! | rate limits | [`LimitStore`] → [`Limits`] | the caller's governor limiter (`crate::limits`) | one GCRA per limit, `{p}:rl:{scope}:{key}` | each replica admits limit ÷ `replicas` locally (counted) |
//! | budgets | [`BudgetStore`] → [`Budgets`] | the `BudgetBook` (`crate::limits::budget`) | `{p}:budget:{tenant}:day:{n}`, `…:month:{n}`, `{p}:budget:session:{id}` | reservations refused, retryable; settles retried in the background |
//! | client sessions | [`SessionStore`] → [`Sessions`] | the `SessionTable` (`crate::session`) | `{p}:session:{id}`, `{p}:session:{id}:bindings` | refused, retryable |
//! | replay nonces | [`NonceStore`] → [`Nonces`] | the `ReplayGuard` (`crate::ldp::replay`) | `{p}:nonce:{hash}` | refused, retryable (503) |
//! | task statuses (status queries) | [`StatusStore`] → [`Statuses`] | the `RecentTasks` (`crate::recent`) | the tenant-fair map ([`fair_map`]) `{p}:status:entries`, per tenant `{p}:status:t:{t}:idle`, `:run`, `{p}:status:tenants`, `{p}:status:bytes` | a query answered `SHARED_STATE_UNAVAILABLE` (retryable); a change skipped (logged) |
//! | conversations for OpenAI-backed delegates | [`ConversationStore`] → [`Conversations`] | the `ConversationMemory` (`crate::upstream::openai::conversation`) | `{p}:conv:s:{session}`, `{p}:conv:lru`, `{p}:conv:sizes`, `{p}:conv:bytes` | the task runs without its earlier turns; its own is not kept (logged) |
//! | A2A tasks and contexts (`GetTask`, `CancelTask`, `SubscribeToTask`, a `contextId`'s session) | [`a2a_store::SharedA2a`], behind the front end's own tables | the A2A front end's tenant-fair tables | the tenant-fair maps ([`fair_map`]) `{p}:a2a:task:…` (a snapshot per task) and `{p}:a2a:ctx:…` (each context's session); a change publishes its events on `{p}:bus:a2a` in the same script | a read or cancel answered -32603 (retry); a change not shared (logged); a context's session not found starts a new one |
//! | notes between replicas (cancels of a task running elsewhere, A2A events) | [`bus::Bus`] | none (one process) | pub/sub `{p}:bus:cancel`, `{p}:bus:a2a`, `{p}:bus:r:{replica}` (answers), a subscriber connection per replica | a cancel reaches only this replica's tasks; a follower on another replica hears no event until the bus is back |
//! | calibration rounds (one per interval for the cluster) | [`lease::Lease`] | every `every` since the last round | `{p}:lease:calibration:{skill}:{reference}:{window}`, `SET NX PX every` | no round runs; the lease is asked for again at the next tick |
//! | LLMX senders' sequence numbers and the answers' numbering | [`SequenceStore`] → [`Sequences`] (in [`BridgeStores`]) | a tenant-fair table (`sequence_store.rs`) | per tenant `{p}:llmx:{t}:peers` (sender digest → last `s`, answers numbered), `{p}:llmx:{t}:order` | the message refused, retryable (NACK, 503) |
//! | LADP agents' rates | [`LimitStore`] → [`Limits`] (in [`BridgeStores`]; the local tenant-fair table still bounds the agents tracked) | the table's own limiter per agent | one GCRA per agent, `{p}:rl:ladp_agent:{t}:{a}` | each replica admits rate ÷ `replicas` locally (counted) |
//! | LADP book (each agent's tasks, for `status-request` and `halt`) | [`BookStore`] → [`Books`] (in [`BridgeStores`]) | a tenant-fair table (`book_store.rs`) | per tenant and agent `{p}:ladp:book:{t}:a:{a}`; per tenant `…:{t}:idle`, `…:run`, `…:w`, `…:bytes` | `task-init`, `status-request`, `halt` refused, retryable (503); a task's end not recorded (logged) |
//!
//! Each concern is a file (`limit_store.rs`, `budget_store.rs`, `session_store.rs`, `nonce_store.rs`, …: the trait,
//! the enum, the local implementation) and a folder holding its Redis implementation
//! (`budget_store/redis.rs`, …): how budgets are shared is changed in `budget_store/redis.rs`. Each Redis
//! operation is one atomic round trip (a Lua script or a single command) on Redis' own clock,
//! every key has a TTL, every call has a deadline (`[cluster] redis_timeout`), and the
//! connection (`redis.rs`, shared by the core's stores; the bridges' have one of their own) is made
//! lazily and re-made after a failure.
//!
//! Why traits with `-> impl Future` and an enum rather than `dyn`: a `dyn` async method boxes
//! a future per call, and admission runs on every request. The enum matches once per call and
//! a single node's answers are ready futures, so its hot path stays allocation-free.

pub mod a2a_store;
pub mod book_store;
pub mod budget_store;
pub mod bus;
pub mod conversation_store;
pub mod fair_map;
pub mod lease;
pub mod limit_store;
pub mod nonce_store;
pub mod redis;
pub mod sequence_store;
pub mod session_store;
pub mod status_store;

pub use book_store::{BookStore, Books};
pub use budget_store::{BudgetStore, Budgets, Hold, Reserved};
pub use conversation_store::{ConversationStore, Conversations};
pub use limit_store::{LimitStore, Limits};
pub use nonce_store::{NonceRefusal, NonceStore, Nonces};
pub use sequence_store::{SequenceStore, Sequences};
pub use session_store::{Found, OpenError, SessionStore, Sessions};
pub use status_store::{StatusStore, Statuses};

use crate::config::Config;
use crate::registry::Registry;
use crate::telemetry::Metrics;
use std::sync::Arc;
use std::time::Duration;

/// Why a shared-state operation did not happen.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// No answer within the deadline.
    #[error("the shared state (Redis) did not answer within {0:?}")]
    Timeout(Duration),
    /// Redis answered with an error, the connection failed, or an answer did not parse.
    #[error("the shared state (Redis) is unavailable: {0}")]
    Redis(String),
}

/// The stores, chosen together.
pub struct Stores {
    /// Rate-limit admission.
    pub limits: Limits,
    /// Money held and spent.
    pub budgets: Budgets,
    /// Client sessions and their upstream bindings.
    pub sessions: Sessions,
    /// Replay nonces of signed messages.
    pub nonces: Nonces,
    /// Conversations kept for OpenAI-backed delegates.
    pub conversations: Conversations,
    /// Recent tasks, for status queries.
    pub statuses: Statuses,
    /// The shared connection, in cluster mode (only `/readyz` asks it directly).
    pub redis: Option<redis::Redis>,
    /// Cluster mode: notes between replicas (cancels, A2A events).
    pub bus: Option<bus::Bus>,
}

impl Stores {
    /// A single node's stores, all in this process.
    pub fn local(cfg: &Config) -> Stores {
        Stores {
            limits: Limits::Local(limit_store::LocalLimits),
            budgets: Budgets::Local(budget_store::LocalBudgets::default()),
            sessions: Sessions::Local(session_store::LocalSessions::default()),
            nonces: Nonces::Local(nonce_store::LocalNonces::new(
                cfg.security.replay_window,
                cfg.security.replay_capacity,
            )),
            conversations: Conversations::Local(
                crate::state::conversation_store::ConversationMemory::new(
                    usize::try_from(cfg.openai.memory_bytes).unwrap_or(usize::MAX),
                ),
            ),
            statuses: Statuses::Local(crate::recent::RecentTasks::new(
                cfg.task_status.ttl,
                cfg.task_status.max_bytes,
            )),
            redis: None,
            bus: None,
        }
    }

    /// The stores `cfg` asks for: shared through Redis when `[cluster] redis_url` is set,
    /// else [`Stores::local`]. Shared sessions resolve their delegates in `registry`;
    /// background settles are tracked by `tasks`.
    pub fn from_config(
        cfg: &Config,
        registry: Arc<Registry>,
        metrics: Arc<Metrics>,
        tasks: tokio_util::task::TaskTracker,
    ) -> Result<Stores, StoreError> {
        let Some(redis) = redis::Redis::connect(&cfg.cluster, metrics)? else {
            return Ok(Stores::local(cfg));
        };
        // Longer than any task may take: a reservation stranded by a lost reply lapses.
        let hold = cfg.upstream.task_timeout * 2 + Duration::from_secs(60);
        Ok(Stores {
            limits: Limits::Shared(limit_store::RedisLimits::new(
                redis.clone(),
                cfg.cluster.replicas,
            )),
            budgets: Budgets::Shared(budget_store::RedisBudgets::new(redis.clone(), hold, tasks)),
            sessions: Sessions::Shared(session_store::RedisSessions::new(redis.clone(), registry)),
            nonces: Nonces::Shared(nonce_store::RedisNonces::new(
                redis.clone(),
                cfg.security.replay_window,
            )),
            conversations: Conversations::Shared(conversation_store::RedisConversations::new(
                redis.clone(),
                cfg.openai.memory_bytes,
                cfg.sessions.max_ttl,
            )),
            statuses: Statuses::Shared(status_store::RedisStatuses::new(
                redis.clone(),
                cfg.task_status.ttl,
                cfg.task_status.max_bytes,
            )),
            bus: Some(bus::Bus::new(redis.clone())),
            redis: Some(redis),
        })
    }
}

/// The front ends' stores (LLMX senders, LADP agents), chosen with [`Stores`] and handed to
/// the front ends rather than the core.
pub struct BridgeStores {
    /// LLMX senders' sequence numbers.
    pub sequences: Sequences,
    /// LADP agents' rates (the local table's limiter decides on a single node).
    pub agent_rates: Limits,
    /// LADP agents' tasks.
    pub books: Books,
}

impl BridgeStores {
    /// A single node's, all in this process.
    pub fn local(cfg: &Config) -> BridgeStores {
        let bytes = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
        BridgeStores {
            sequences: Sequences::Local(sequence_store::LocalSequences::new(bytes(
                cfg.llmx.max_sender_bytes,
            ))),
            agent_rates: Limits::Local(limit_store::LocalLimits),
            books: Books::Local(book_store::LocalBook::new(
                bytes(cfg.ladp.max_book_bytes),
                book_store::book_ttl(cfg.upstream.task_timeout),
            )),
        }
    }

    /// Shared through Redis when `[cluster] redis_url` is set, else [`BridgeStores::local`].
    /// Each tenant's bound is the table's divided by the tenants configured. The bridges have
    /// a connection of their own: an LADP `halt` (the book read, the agent's rate) is never
    /// queued behind a slow call of the task pipeline's on the [`Stores`]' connection.
    pub fn from_config(cfg: &Config, metrics: Arc<Metrics>) -> Result<BridgeStores, StoreError> {
        let Some(redis) = redis::Redis::connect(&cfg.cluster, metrics)? else {
            return Ok(BridgeStores::local(cfg));
        };
        let tenants = cfg.tenants.len().max(1);
        Ok(BridgeStores {
            sequences: Sequences::Shared(sequence_store::RedisSequences::new(
                redis.clone(),
                cfg.llmx.max_sender_bytes,
                tenants,
            )),
            agent_rates: Limits::Shared(limit_store::RedisLimits::new(
                redis.clone(),
                cfg.cluster.replicas,
            )),
            books: Books::Shared(book_store::RedisBook::new(
                redis.clone(),
                cfg.ladp.max_book_bytes,
                tenants,
                book_store::book_ttl(cfg.upstream.task_timeout),
            )),
        })
    }
}
