//! The LADP book: the tasks each agent (a tenant's `<sender>`) started, for `status-request`
//! and `halt`. Single node: one tenant-fair table in this process ([`LocalBook`]). Cluster
//! mode: Redis ([`RedisBook`]), so a `status-request` or a `halt` on any replica finds a task
//! started on another. Both remember [`MAX_TASKS_PER_AGENT`] tasks an agent, never forget an
//! agent with a task running (it still expires), and bound each tenant's agents in bytes.
//! When Redis does not answer, a `task-init`, `status-request` or `halt` is refused
//! (retryable): a task nobody could halt is not started, and no phase is guessed; a task's
//! end not recorded is logged (its entry reads `running` until it expires).

use super::StoreError;
use crate::fair::{Changed, FairTable, Kept, TableStats};
use crate::ldp::TaskId;
use std::collections::VecDeque;
use std::future::Future;
use std::time::Duration;

mod redis;
pub use redis::RedisBook;

/// Tasks remembered per agent; past it the oldest finished one (else the oldest) goes.
pub const MAX_TASKS_PER_AGENT: usize = 32;
/// How long an agent's tasks are remembered past its last message (at least; longer when
/// a task may run longer).
const BOOK_TTL: Duration = Duration::from_secs(3600);
/// What one remembered task weighs beyond its task id.
const TASK_BYTES: usize = 48;

/// How long an agent's tasks are remembered when a task may run `task_timeout`: an hour, or
/// twice the longest task.
pub fn book_ttl(task_timeout: Duration) -> Duration {
    BOOK_TTL.max(task_timeout.saturating_mul(2))
}

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

    /// Its letter in the shared book.
    fn letter(self) -> char {
        match self {
            Phase::Running => 'r',
            Phase::Done => 'd',
            Phase::Failed => 'f',
        }
    }

    fn of_letter(c: char) -> Option<Phase> {
        match c {
            'r' => Some(Phase::Running),
            'd' => Some(Phase::Done),
            'f' => Some(Phase::Failed),
            _ => None,
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

impl Which<'_> {
    /// The task asked about among an agent's, oldest first.
    fn pick<'e>(self, tasks: impl DoubleEndedIterator<Item = &'e Entry>) -> Option<&'e Entry> {
        let mut tasks = tasks.rev();
        match self {
            Which::Latest => tasks.next(),
            Which::Task(id) => tasks.find(|e| e.task_id.as_str() == id),
            Which::Msg(ms) => tasks.find(|e| e.msg_id == ms),
        }
    }
}

/// `Err(wait)` from [`BookStore::start`]: the tenant's share of the book is full of agents
/// with running tasks (retry after the wait, if known).
pub type Full = Option<Duration>;

/// Keeps each agent's tasks.
pub trait BookStore {
    /// Remembers `task_id`, started by `tenant`'s `sender` with the `task-init` of `msg_id`.
    fn start(
        &self,
        tenant: &str,
        sender: &str,
        msg_id: i64,
        task_id: TaskId,
    ) -> impl Future<Output = Result<Result<(), Full>, StoreError>> + Send;

    /// Records how `task_id` ended (if it is still remembered).
    fn finish(
        &self,
        tenant: &str,
        sender: &str,
        task_id: &TaskId,
        phase: Phase,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// The remembered task `which` asks about, if any (the agent counts as heard from).
    fn find(
        &self,
        tenant: &str,
        sender: &str,
        which: Which<'_>,
    ) -> impl Future<Output = Result<Option<Entry>, StoreError>> + Send;

    /// The agent's tasks still running.
    fn running(
        &self,
        tenant: &str,
        sender: &str,
    ) -> impl Future<Output = Result<Vec<TaskId>, StoreError>> + Send;
}

/// The book chosen at start.
pub enum Books {
    /// Single node.
    Local(LocalBook),
    /// Cluster mode.
    Shared(RedisBook),
}

impl Books {
    /// This process's table's figures (none in cluster mode).
    pub fn local_stats(&self) -> Option<TableStats> {
        match self {
            Books::Local(l) => Some(l.stats()),
            Books::Shared(_) => None,
        }
    }

    /// Agents this process remembers (0 in cluster mode).
    pub fn local_agents(&self) -> usize {
        match self {
            Books::Local(l) => l.agents(),
            Books::Shared(_) => 0,
        }
    }
}

impl BookStore for Books {
    async fn start(
        &self,
        tenant: &str,
        sender: &str,
        msg_id: i64,
        task_id: TaskId,
    ) -> Result<Result<(), Full>, StoreError> {
        match self {
            Books::Local(l) => Ok(l.start(tenant, sender, msg_id, task_id)),
            Books::Shared(r) => r.start(tenant, sender, msg_id, task_id).await,
        }
    }

    async fn finish(
        &self,
        tenant: &str,
        sender: &str,
        task_id: &TaskId,
        phase: Phase,
    ) -> Result<(), StoreError> {
        match self {
            Books::Local(l) => {
                l.finish(tenant, sender, task_id, phase);
                Ok(())
            }
            Books::Shared(r) => r.finish(tenant, sender, task_id, phase).await,
        }
    }

    async fn find(
        &self,
        tenant: &str,
        sender: &str,
        which: Which<'_>,
    ) -> Result<Option<Entry>, StoreError> {
        match self {
            Books::Local(l) => Ok(l.find(tenant, sender, which)),
            Books::Shared(r) => r.find(tenant, sender, which).await,
        }
    }

    async fn running(&self, tenant: &str, sender: &str) -> Result<Vec<TaskId>, StoreError> {
        match self {
            Books::Local(l) => Ok(l.running(tenant, sender)),
            Books::Shared(r) => r.running(tenant, sender).await,
        }
    }
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

/// Single node: the agents in one tenant-fair table.
pub struct LocalBook {
    book: FairTable<String, Agent>,
    ttl: Duration,
}

impl LocalBook {
    /// A book of at most `max_bytes`, each agent kept `ttl` past its last message.
    pub fn new(max_bytes: usize, ttl: Duration) -> LocalBook {
        LocalBook {
            book: FairTable::new(max_bytes, None),
            ttl,
        }
    }

    /// See [`BookStore::start`].
    pub fn start(
        &self,
        tenant: &str,
        sender: &str,
        msg_id: i64,
        task_id: TaskId,
    ) -> Result<(), Full> {
        let ttl = self.ttl;
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

    /// See [`BookStore::finish`].
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

    /// See [`BookStore::find`].
    pub fn find(&self, tenant: &str, sender: &str, which: Which<'_>) -> Option<Entry> {
        let found = self.book.change(
            tenant,
            sender,
            || None,
            |agent| which.pick(agent.tasks.iter()).cloned(),
        );
        match found {
            Changed::Kept(entry, _) => entry,
            Changed::Absent | Changed::Refused(..) => None,
        }
    }

    /// See [`BookStore::running`].
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

    /// Agents remembered.
    pub fn agents(&self) -> usize {
        self.book.len()
    }

    /// The table's figures (its metrics).
    pub fn stats(&self) -> TableStats {
        self.book.stats()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Tasks found by latest, task id and msg id, finished, bounded per agent, kept apart by
    /// tenant; written through `a`, read through `b`.
    async fn found_finished_and_bounded(a: &Books, b: &Books) {
        for i in 0..(MAX_TASKS_PER_AGENT as i64 + 5) {
            let id = TaskId::from(format!("task-{i}"));
            a.start("t", "a", i, id).await.unwrap().unwrap();
        }
        assert_eq!(
            b.running("t", "a").await.unwrap().len(),
            MAX_TASKS_PER_AGENT
        );
        let last = TaskId::from(format!("task-{}", MAX_TASKS_PER_AGENT + 4));
        b.finish("t", "a", &last, Phase::Done).await.unwrap();
        let e = a.find("t", "a", Which::Latest).await.unwrap().unwrap();
        assert_eq!((e.task_id, e.phase), (last, Phase::Done));
        assert_eq!(
            b.find("t", "a", Which::Msg(0)).await.unwrap(),
            None,
            "the oldest went"
        );
        let e = b
            .find("t", "a", Which::Task("task-6"))
            .await
            .unwrap()
            .unwrap();
        assert_eq!((e.msg_id, e.phase), (6, Phase::Running));
        assert_eq!(
            b.find("u", "a", Which::Latest).await.unwrap(),
            None,
            "tenants apart"
        );
        assert_eq!(
            b.find("t", "b", Which::Latest).await.unwrap(),
            None,
            "agents apart"
        );
    }

    #[tokio::test]
    async fn a_local_book_finds_finishes_and_bounds() {
        let s = Books::Local(LocalBook::new(1 << 20, BOOK_TTL));
        found_finished_and_bounded(&s, &s).await;
    }

    #[tokio::test]
    async fn a_shared_book_is_read_by_another_replica() {
        let (redis, _) = crate::state::redis::testing::redis();
        let a = Books::Shared(RedisBook::new(redis.clone(), 1 << 20, 1, BOOK_TTL));
        let b = Books::Shared(RedisBook::new(redis, 1 << 20, 1, BOOK_TTL));
        found_finished_and_bounded(&a, &b).await;
    }

    /// A tenant flooding made-up agents forgets only its own finished ones: a quiet tenant's
    /// running task stays findable, and the flooding tenant's own running agents are never
    /// forgotten (its new agents refused once its share is full of them).
    #[tokio::test]
    async fn a_flood_of_made_up_agents_stays_in_its_tenant() {
        let (redis, _) = crate::state::redis::testing::redis();
        let s = Books::Shared(RedisBook::new(redis, 2 * 4096, 2, BOOK_TTL));
        s.start("quiet", "a", 1, "quiet-task".into())
            .await
            .unwrap()
            .unwrap();
        s.start("loud", "runner", 1, "loud-running".into())
            .await
            .unwrap()
            .unwrap();
        let mut refused = 0;
        for i in 0..400 {
            let agent = format!("made-up-{i}");
            let id = TaskId::from(format!("loud-{i}"));
            match s.start("loud", &agent, 1, id.clone()).await.unwrap() {
                Ok(()) if i % 2 == 0 => s.finish("loud", &agent, &id, Phase::Done).await.unwrap(),
                Ok(()) => {}
                Err(wait) => {
                    assert!(wait.is_some_and(|w| w <= BOOK_TTL), "{wait:?}");
                    refused += 1;
                }
            }
        }
        assert!(refused > 100, "{refused}");
        assert_eq!(
            s.running("quiet", "a").await.unwrap(),
            [TaskId::from("quiet-task")]
        );
        assert_eq!(
            s.running("loud", "runner").await.unwrap(),
            [TaskId::from("loud-running")]
        );
        // The quiet tenant's new agent is still taken.
        s.start("quiet", "b", 2, "quiet-2".into())
            .await
            .unwrap()
            .unwrap();
        let Books::Shared(r) = &s else { unreachable!() };
        let loud = r.tenant_bytes("loud").await.unwrap();
        assert!(loud > 2048 && loud <= 4096, "{loud}");
    }
}
