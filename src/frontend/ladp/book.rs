//! The LADP bridge's per-process state: each agent's message rate (§14) and the tasks each
//! agent started (for `status-request` and `halt`), both bounded by constants.

use crate::config::{LadpConfig, RateConfig};
use crate::ldp::TaskId;
use crate::limits::KeyedRateLimit;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// Agents (tenant × sender) whose rate is tracked at once; past it (after dropping the
/// limiters that are full again) a new message is refused as rate-limited.
pub const MAX_RATE_KEYS: usize = 16_384;
/// Agents whose tasks are remembered; past it the least recently heard from is forgotten.
pub const MAX_AGENTS: usize = 4_096;
/// Tasks remembered per agent; past it the oldest finished one (else the oldest) goes.
pub const MAX_TASKS_PER_AGENT: usize = 32;
/// Longest `<sender>` accepted, in bytes (it keys the maps above).
pub const MAX_SENDER_BYTES: usize = 256;
/// Rate checks between two sweeps of the idle limiters.
const SWEEP_EVERY: u64 = 1024;

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

#[derive(Default)]
struct Agent {
    /// When it was last heard from ([`Book::tick`]).
    last: u64,
    tasks: VecDeque<Entry>,
}

#[derive(Default)]
struct Book {
    agents: HashMap<(String, String), Agent>,
    tick: u64,
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
    limiter: Option<KeyedRateLimit>,
    checks: AtomicU64,
    book: Mutex<Book>,
}

/// Why a message was not admitted by the rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RateRefusal {
    /// The agent sent its minute's worth: retry after this.
    Agent(Duration),
    /// Too many agents are tracked at once.
    Agents,
}

impl LadpState {
    /// The state for `config` (`rate_per_minute` checked at load: 1 to 60 000).
    pub fn new(config: &LadpConfig) -> LadpState {
        let per_minute = config.rate_per_minute.max(1);
        let rate = RateConfig {
            rps: f64::from(per_minute) / 60.0,
            burst: Some(per_minute),
        };
        LadpState {
            limiter: KeyedRateLimit::new(&rate),
            checks: AtomicU64::new(0),
            book: Mutex::new(Book::default()),
        }
    }

    /// Takes one message from `tenant`'s agent `sender`'s allowance.
    pub fn admit(&self, tenant: &str, sender: &str) -> Result<(), RateRefusal> {
        let Some(limiter) = &self.limiter else {
            return Ok(());
        };
        let n = self.checks.fetch_add(1, Ordering::Relaxed);
        if n % SWEEP_EVERY == SWEEP_EVERY - 1 || limiter.len() >= MAX_RATE_KEYS {
            limiter.cleanup();
        }
        if limiter.len() >= MAX_RATE_KEYS {
            return Err(RateRefusal::Agents);
        }
        limiter
            .check(&rate_key(tenant, sender))
            .map_err(RateRefusal::Agent)
    }

    /// Remembers `task_id`, started by `tenant`'s `sender` with the `task-init` of `msg_id`.
    pub fn start(&self, tenant: &str, sender: &str, msg_id: i64, task_id: TaskId) {
        self.with_book(|b| {
            let tick = b.touch();
            if !b.agents.contains_key(&key(tenant, sender)) && b.agents.len() >= MAX_AGENTS {
                // Least recently heard from: a linear scan, only when full.
                if let Some(k) = b
                    .agents
                    .iter()
                    .min_by_key(|(_, a)| a.last)
                    .map(|(k, _)| k.clone())
                {
                    b.agents.remove(&k);
                }
            }
            let agent = b.agents.entry(key(tenant, sender)).or_default();
            agent.last = tick;
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
    }

    /// Records how `task_id` ended (if it is still remembered).
    pub fn finish(&self, tenant: &str, sender: &str, task_id: &TaskId, phase: Phase) {
        self.with_book(|b| {
            if let Some(e) = b
                .agents
                .get_mut(&key(tenant, sender))
                .and_then(|a| a.tasks.iter_mut().find(|e| &e.task_id == task_id))
            {
                e.phase = phase;
            }
        });
    }

    /// The remembered task `which` asks about, if any.
    pub fn find(&self, tenant: &str, sender: &str, which: Which<'_>) -> Option<Entry> {
        self.with_book(|b| {
            let tick = b.touch();
            let agent = b.agents.get_mut(&key(tenant, sender))?;
            agent.last = tick;
            let mut tasks = agent.tasks.iter().rev();
            match which {
                Which::Latest => tasks.next(),
                Which::Task(id) => tasks.find(|e| e.task_id.as_str() == id),
                Which::Msg(ms) => tasks.find(|e| e.msg_id == ms),
            }
            .cloned()
        })
    }

    /// The agent's tasks still running.
    pub fn running(&self, tenant: &str, sender: &str) -> Vec<TaskId> {
        self.with_book(|b| {
            b.agents
                .get(&key(tenant, sender))
                .map(|a| {
                    a.tasks
                        .iter()
                        .filter(|e| e.phase == Phase::Running)
                        .map(|e| e.task_id.clone())
                        .collect()
                })
                .unwrap_or_default()
        })
    }

    /// Agents remembered (for tests and bounds).
    pub fn agents(&self) -> usize {
        self.with_book(|b| b.agents.len())
    }

    fn with_book<T>(&self, f: impl FnOnce(&mut Book) -> T) -> T {
        // A panic while the lock was held leaves a book still worth reading.
        let mut guard = self.book.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut guard)
    }
}

impl Book {
    fn touch(&mut self) -> u64 {
        self.tick += 1;
        self.tick
    }
}

fn key(tenant: &str, sender: &str) -> (String, String) {
    (tenant.to_owned(), sender.to_owned())
}

/// Tenant names hold no NUL: the pair keys one limiter unambiguously.
fn rate_key(tenant: &str, sender: &str) -> String {
    format!("{tenant}\0{sender}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(per_minute: u32) -> LadpState {
        LadpState::new(&LadpConfig {
            rate_per_minute: per_minute,
        })
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
            s.start("t", "a", i, TaskId::from(format!("task-{i}")));
        }
        assert_eq!(s.running("t", "a").len(), MAX_TASKS_PER_AGENT);
        let last = TaskId::from(format!("task-{}", MAX_TASKS_PER_AGENT + 4));
        s.finish("t", "a", &last, Phase::Done);
        let e = s.find("t", "a", Which::Latest).unwrap();
        assert_eq!((e.task_id, e.phase), (last, Phase::Done));
        assert_eq!(s.find("t", "a", Which::Msg(0)), None, "the oldest went");
        assert_eq!(s.find("t", "a", Which::Task("task-6")).unwrap().msg_id, 6);
        assert_eq!(s.find("u", "a", Which::Latest), None, "tenants apart");
        for i in 0..MAX_AGENTS + 3 {
            s.start("t", &format!("agent-{i}"), 0, TaskId::from("x"));
        }
        assert_eq!(s.agents(), MAX_AGENTS);
    }
}
