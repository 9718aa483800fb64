//! The LADP bridge's per-process state: each agent's message rate (§14) and the tasks each
//! agent started (for `status-request` and `halt`), each a tenant-fair table
//! ([`crate::fair`]): one tenant's made-up senders fill its own share, never another's.

use crate::config::{LadpConfig, RateConfig};
use crate::fair::{Changed, FairTable, Kept, TableStats};
use crate::ldp::TaskId;
use crate::limits::RateLimit;
use std::collections::VecDeque;
use std::time::Duration;

/// Tasks remembered per agent; past it the oldest finished one (else the oldest) goes.
pub const MAX_TASKS_PER_AGENT: usize = 32;
/// Longest `<sender>` accepted, in bytes (it keys the tables).
pub const MAX_SENDER_BYTES: usize = 256;
/// How long an agent's tasks are remembered past its last message (at least; longer when
/// a task may run longer).
const BOOK_TTL: Duration = Duration::from_secs(3600);
/// What one remembered task weighs beyond its task id.
const TASK_BYTES: usize = 48;

/// Where a task of the bridge stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Submitted, no answer yet.
    Running,
    /// Answered with a result.
    Done,
    /// Answered with a failure (verification, cancel, refusal, …).
    Failed,
}

impl Phase {
    /// The `(phase …)` symbol of the `status` answer.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Running => "running",
            Phase::Done => "done",
            Phase::Failed => "failed",
        }
    }
}

/// One remembered task: the `task-init` that started it (its `<epoch-ms>`, the only id the
/// envelope has), its task id, its phase.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The `task-init`'s `<epoch-ms>`.
    pub msg_id: i64,
    /// The gateway's task id (its ledger row's).
    pub task_id: TaskId,
    /// Where it stands.
    pub phase: Phase,
}

/// An agent's remembered tasks, oldest first.
struct Agent {
    tasks: VecDeque<Entry>,
    ttl: Duration,
}

impl Kept<String> for Agent {
    fn weight(&self, sender: &String) -> usize {
        sender.len()
            + self
                .tasks
                .iter()
                .map(|e| e.task_id.len() + TASK_BYTES)
                .sum::<usize>()
    }

    /// An agent with a task running is never forgotten: its `halt` must find it.
    fn running(&self) -> bool {
        self.tasks.iter().any(|e| e.phase == Phase::Running)
    }

    fn ttl(&self) -> Option<Duration> {
        Some(self.ttl)
    }
}

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

/// Which remembered task a `status-request` asks about.
#[derive(Debug, Clone, Copy)]
pub enum Which<'a> {
    /// The agent's latest.
    Latest,
    /// By task id.
    Task(&'a str),
    /// By the `task-init`'s `<epoch-ms>`.
    Msg(i64),
}

/// The bridge's state, one per process (a field of the server's shared state).
pub struct LadpState {
    /// The rate of each agent, and how long one takes to refill (its entry's TTL).
    rate: Option<(RateConfig, FairTable<String, Rate>)>,
    book: FairTable<String, Agent>,
    book_ttl: Duration,
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
    /// The state for `config` (`rate_per_minute` checked at load: 1 to 60 000); an agent's
    /// tasks are remembered at least as long as a task may run (`task_timeout`).
    pub fn new(config: &LadpConfig, task_timeout: Duration) -> LadpState {
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
            book: FairTable::new(bytes(config.max_book_bytes), None),
            book_ttl: BOOK_TTL.max(task_timeout.saturating_mul(2)),
        }
    }

    /// Takes one message from `tenant`'s agent `sender`'s allowance.
    pub fn admit(&self, tenant: &str, sender: &str) -> Result<(), RateRefusal> {
        let Some((rate, table)) = &self.rate else {
            return Ok(());
        };
        let new = || RateLimit::new(rate).map(|limit| (sender.to_owned(), Rate { limit }));
        match table.change(tenant, sender, new, |r| r.limit.check()) {
            Changed::Kept(checked, _) => checked.map_err(RateRefusal::Agent),
            Changed::Refused(r, _) => Err(RateRefusal::Agents(r.retry_after)),
            // A rate that cannot be built is no limit (the config check refuses such rates).
            Changed::Absent => Ok(()),
        }
    }

    /// Remembers `task_id`, started by `tenant`'s `sender` with the `task-init` of `msg_id`;
    /// `Err` when the tenant's share of the book is full of agents with running tasks (the
    /// wait, if known).
    pub fn start(
        &self,
        tenant: &str,
        sender: &str,
        msg_id: i64,
        task_id: TaskId,
    ) -> Result<(), Option<Duration>> {
        let ttl = self.book_ttl;
        let new = || {
            let tasks = VecDeque::new();
            Some((sender.to_owned(), Agent { tasks, ttl }))
        };
        let started = self.book.change(tenant, sender, new, |agent| {
            if agent.tasks.len() >= MAX_TASKS_PER_AGENT {
                let gone = agent
                    .tasks
                    .iter()
                    .position(|e| e.phase != Phase::Running)
                    .unwrap_or(0);
                agent.tasks.remove(gone);
            }
            agent.tasks.retain(|e| e.msg_id != msg_id);
            agent.tasks.push_back(Entry {
                msg_id,
                task_id,
                phase: Phase::Running,
            });
        });
        match started {
            Changed::Kept(..) | Changed::Absent => Ok(()),
            Changed::Refused(r, _) => Err(r.retry_after),
        }
    }

    /// Records how `task_id` ended (if it is still remembered).
    pub fn finish(&self, tenant: &str, sender: &str, task_id: &TaskId, phase: Phase) {
        let _ = self.book.change(
            tenant,
            sender,
            || None,
            |agent| {
                if let Some(e) = agent.tasks.iter_mut().find(|e| &e.task_id == task_id) {
                    e.phase = phase;
                }
            },
        );
    }

    /// The remembered task `which` asks about, if any (the agent counts as heard from).
    pub fn find(&self, tenant: &str, sender: &str, which: Which<'_>) -> Option<Entry> {
        let found = self.book.change(
            tenant,
            sender,
            || None,
            |agent| {
                let mut tasks = agent.tasks.iter().rev();
                match which {
                    Which::Latest => tasks.next(),
                    Which::Task(id) => tasks.find(|e| e.task_id.as_str() == id),
                    Which::Msg(ms) => tasks.find(|e| e.msg_id == ms),
                }
                .cloned()
            },
        );
        match found {
            Changed::Kept(entry, _) => entry,
            Changed::Absent | Changed::Refused(..) => None,
        }
    }

    /// The agent's tasks still running.
    pub fn running(&self, tenant: &str, sender: &str) -> Vec<TaskId> {
        self.book
            .get(tenant, sender, |agent| {
                agent
                    .tasks
                    .iter()
                    .filter(|e| e.phase == Phase::Running)
                    .map(|e| e.task_id.clone())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Agents remembered (for tests and bounds).
    pub fn agents(&self) -> usize {
        self.book.len()
    }

    /// The tables' figures (their metrics): the rates', then the book's.
    pub fn stats(&self) -> (TableStats, TableStats) {
        let rates = self
            .rate
            .as_ref()
            .map(|(_, t)| t.stats())
            .unwrap_or_default();
        (rates, self.book.stats())
    }
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

    #[test]
    fn a_minute_s_worth_then_a_wait_per_tenant_and_sender() {
        let s = state(4);
        for _ in 0..4 {
            assert_eq!(s.admit("t", "a"), Ok(()));
        }
        assert!(
            matches!(s.admit("t", "a"), Err(RateRefusal::Agent(w)) if w > Duration::from_secs(1))
        );
        assert_eq!(s.admit("t", "b"), Ok(()), "another sender");
        assert_eq!(s.admit("u", "a"), Ok(()), "another tenant");
    }

    #[test]
    fn tasks_are_found_finished_and_bounded() {
        let s = state(4);
        for i in 0..(MAX_TASKS_PER_AGENT as i64 + 5) {
            s.start("t", "a", i, TaskId::from(format!("task-{i}")))
                .unwrap();
        }
        assert_eq!(s.running("t", "a").len(), MAX_TASKS_PER_AGENT);
        let last = TaskId::from(format!("task-{}", MAX_TASKS_PER_AGENT + 4));
        s.finish("t", "a", &last, Phase::Done);
        let e = s.find("t", "a", Which::Latest).unwrap();
        assert_eq!((e.task_id, e.phase), (last, Phase::Done));
        assert_eq!(s.find("t", "a", Which::Msg(0)), None, "the oldest went");
        assert_eq!(s.find("t", "a", Which::Task("task-6")).unwrap().msg_id, 6);
        assert_eq!(s.find("u", "a", Which::Latest), None, "tenants apart");
    }

    /// Another tenant's made-up senders neither lock a tenant's agents out of their rate nor
    /// make its running task forgotten.
    #[test]
    fn a_flood_of_senders_stays_in_its_tenants_share() {
        let config = LadpConfig {
            rate_per_minute: 4,
            max_rate_bytes: 64 * 1024,
            max_book_bytes: 64 * 1024,
        };
        let s = LadpState::new(&config, Duration::from_secs(60));
        assert_eq!(s.admit("alpha", "a"), Ok(()));
        s.start("alpha", "a", 1, TaskId::from("alpha-task"))
            .unwrap();
        let mut refused = 0;
        for i in 0..5000 {
            let sender = format!("made-up-{i}");
            match s.admit("beta", &sender) {
                Ok(()) => {
                    if s.start("beta", &sender, 1, TaskId::from(format!("b{i}")))
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
        assert_eq!(s.admit("alpha", "a"), Ok(()));
        assert_eq!(s.admit("alpha", "b"), Ok(()));
        assert_eq!(s.running("alpha", "a"), [TaskId::from("alpha-task")]);
        let (rates, book) = s.stats();
        assert!(rates.refused > 0 && book.tenants == 2, "{rates:?} {book:?}");
    }
}
