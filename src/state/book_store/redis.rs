//! The LADP book in Redis, per tenant (`{t}`, a digest of its name) and agent (`{a}`, a
//! digest of its `<sender>`): the agent's tasks, oldest first, a list of `<phase letter>|<msg
//! id>|<task id>` (`{p}:ladp:book:{t}:a:{a}`); the tenant's agents by last change, those with a
//! task running (`{p}:ladp:book:{t}:run`) and the others (`…:idle`), sorted sets by Redis time;
//! each agent's weight (`…:w`) and the tenant's total (`…:bytes`). A start is one script: it
//! forgets the tenant's agents idle past the TTL, adds the task (dropping the agent's oldest
//! finished task past 32), and while the tenant is over its bound (`[ladp] max_book_bytes`
//! divided by the configured tenants) forgets its least recently changed agent without a
//! running task; with none left, the task is refused with the wait until the tenant's oldest
//! running agent expires. Another tenant's agents are never touched. A finish, a find and a
//! `halt`'s read are one script each.

use super::{BookStore, Entry, Full, Phase, Which, MAX_TASKS_PER_AGENT, TASK_BYTES};
use crate::ldp::TaskId;
use crate::state::redis::Redis;
use crate::state::StoreError;
use std::sync::LazyLock;
use std::time::Duration;

/// KEYS: the agent's tasks, the tenant's idle and running orders, weights, total. ARGV: the
/// agent's digest, the msg id, the task id, the tenant's bound (bytes), the TTL (ms), tasks an
/// agent, the prefix of the tenant's agents' keys, the sender's length, a task's overhead.
/// Returns `{1, 0}` started or `{0, wait_ms}` (-1: unknown) refused.
static START: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(
        r"
local a, msg, task = ARGV[1], ARGV[2], ARGV[3]
local cap, ttl, most, pre = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]), ARGV[7]
local base, over = tonumber(ARGV[8]), tonumber(ARGV[9])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function drop(x)
  local w = tonumber(redis.call('HGET', KEYS[4], x) or '0')
  redis.call('DEL', pre .. x)
  redis.call('HDEL', KEYS[4], x)
  redis.call('ZREM', KEYS[2], x)
  redis.call('ZREM', KEYS[3], x)
  redis.call('DECRBY', KEYS[5], w)
end
for _, z in ipairs({KEYS[2], KEYS[3]}) do
  for _, x in ipairs(redis.call('ZRANGEBYSCORE', z, '-inf', now - ttl, 'LIMIT', 0, 64)) do
    drop(x)
  end
end
local kept = {}
for _, e in ipairs(redis.call('LRANGE', KEYS[1], 0, -1)) do
  if string.match(e, '^.|([^|]*)|') ~= msg then table.insert(kept, e) end
end
if #kept >= most then
  local gone = 1
  for i, e in ipairs(kept) do
    if string.sub(e, 1, 1) ~= 'r' then gone = i break end
  end
  table.remove(kept, gone)
end
table.insert(kept, 'r|' .. msg .. '|' .. task)
local w = base
for _, e in ipairs(kept) do w = w + #e + over end
local old = tonumber(redis.call('HGET', KEYS[4], a) or '0')
local total = tonumber(redis.call('GET', KEYS[5]) or '0')
while total - old + w > cap do
  local first = redis.call('ZRANGE', KEYS[2], 0, 1)
  local victim = first[1]
  if victim == a then victim = first[2] end
  if not victim then
    local run = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
    local wait = -1
    if #run > 0 then wait = math.max(0, math.ceil(tonumber(run[2]) + ttl - now)) end
    return {0, wait}
  end
  drop(victim)
  total = tonumber(redis.call('GET', KEYS[5]) or '0')
end
redis.call('DEL', KEYS[1])
redis.call('RPUSH', KEYS[1], unpack(kept))
redis.call('HSET', KEYS[4], a, w)
redis.call('INCRBY', KEYS[5], w - old)
redis.call('ZREM', KEYS[2], a)
redis.call('ZADD', KEYS[3], now, a)
for i = 1, 5 do redis.call('PEXPIRE', KEYS[i], ttl) end
return {1, 0}
",
    )
});

/// KEYS: as [`START`]'s. ARGV: the agent's digest, the TTL (ms), the task id and its phase
/// letter (a finish) or nothing (a read). Returns the agent's tasks (after the change),
/// oldest first; the agent counts as heard from.
static TOUCH: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(
        r"
local a, ttl, task, phase = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4]
local tasks = redis.call('LRANGE', KEYS[1], 0, -1)
if #tasks == 0 then return tasks end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local running = false
for i, e in ipairs(tasks) do
  if task and string.match(e, '^.|[^|]*|(.*)$') == task then
    e = phase .. string.sub(e, 2)
    tasks[i] = e
    redis.call('LSET', KEYS[1], i - 1, e)
  end
  if string.sub(e, 1, 1) == 'r' then running = true end
end
if running then
  redis.call('ZREM', KEYS[2], a)
  redis.call('ZADD', KEYS[3], now, a)
else
  redis.call('ZREM', KEYS[3], a)
  redis.call('ZADD', KEYS[2], now, a)
end
for i = 1, 5 do redis.call('PEXPIRE', KEYS[i], ttl) end
return tasks
",
    )
});

/// Cluster mode: the book every replica reads and writes.
pub struct RedisBook {
    redis: Redis,
    /// Bytes a tenant's agents may weigh.
    per_tenant: u64,
    ttl: Duration,
}

impl RedisBook {
    /// The book in `redis`: `max_bytes` shared out by the `tenants` configured, each agent
    /// kept `ttl` past its last message.
    pub fn new(redis: Redis, max_bytes: u64, tenants: usize, ttl: Duration) -> RedisBook {
        let tenants = u64::try_from(tenants.max(1)).unwrap_or(u64::MAX);
        RedisBook {
            redis,
            per_tenant: max_bytes / tenants,
            ttl,
        }
    }

    /// The agent's tasks, the tenant's idle and running orders, weights, total; the agent's
    /// digest; the prefix of the tenant's agents' keys.
    fn keys(&self, tenant: &str, sender: &str) -> ([String; 5], String, String) {
        let t = Redis::tenant_tag(tenant);
        let a = Redis::name_tag(sender);
        let pre = self.redis.key(format_args!("ladp:book:{t}:a:"));
        let keys = [
            format!("{pre}{a}"),
            self.redis.key(format_args!("ladp:book:{t}:idle")),
            self.redis.key(format_args!("ladp:book:{t}:run")),
            self.redis.key(format_args!("ladp:book:{t}:w")),
            self.redis.key(format_args!("ladp:book:{t}:bytes")),
        ];
        (keys, a, pre)
    }

    fn ttl_ms(&self) -> u64 {
        self.ttl.as_millis().max(1) as u64
    }

    /// The agent's tasks (after recording `finished`'s phase), oldest first.
    async fn touch(
        &self,
        op: &'static str,
        tenant: &str,
        sender: &str,
        finished: Option<(&TaskId, Phase)>,
    ) -> Result<Vec<Entry>, StoreError> {
        let (keys, a, _) = self.keys(tenant, sender);
        let mut inv = TOUCH.prepare_invoke();
        for k in keys {
            inv.key(k);
        }
        inv.arg(a).arg(self.ttl_ms());
        if let Some((task, phase)) = finished {
            inv.arg(task.as_str()).arg(phase.letter().to_string());
        }
        let tasks: Vec<String> = self.redis.invoke(op, &inv).await?;
        tasks.iter().map(|t| parse(t)).collect()
    }

    /// What `tenant`'s agents weigh (tests and diagnostics).
    pub async fn tenant_bytes(&self, tenant: &str) -> Result<u64, StoreError> {
        let (keys, _, _) = self.keys(tenant, "");
        let v: Option<i64> = self
            .redis
            .query("ladp_book_bytes", redis::cmd("GET").arg(&keys[4]))
            .await?;
        Ok(v.unwrap_or(0).max(0) as u64)
    }
}

/// One stored task.
fn parse(stored: &str) -> Result<Entry, StoreError> {
    let bad = || StoreError::Redis(format!("a stored LADP task: {stored:?}"));
    let mut parts = stored.splitn(3, '|');
    let phase = parts
        .next()
        .and_then(|p| p.chars().next())
        .and_then(Phase::of_letter)
        .ok_or_else(bad)?;
    let msg_id = parts.next().and_then(|m| m.parse().ok()).ok_or_else(bad)?;
    let task_id = parts.next().ok_or_else(bad)?;
    Ok(Entry {
        msg_id,
        task_id: TaskId::from(task_id),
        phase,
    })
}

impl BookStore for RedisBook {
    async fn start(
        &self,
        tenant: &str,
        sender: &str,
        msg_id: i64,
        task_id: TaskId,
    ) -> Result<Result<(), Full>, StoreError> {
        let (keys, a, pre) = self.keys(tenant, sender);
        let mut inv = START.prepare_invoke();
        for k in keys {
            inv.key(k);
        }
        inv.arg(a)
            .arg(msg_id)
            .arg(task_id.as_str())
            .arg(self.per_tenant)
            .arg(self.ttl_ms())
            .arg(MAX_TASKS_PER_AGENT)
            .arg(pre)
            .arg(sender.len())
            .arg(TASK_BYTES);
        let (started, wait): (i64, i64) = self.redis.invoke("ladp_book_start", &inv).await?;
        if started == 1 {
            return Ok(Ok(()));
        }
        let wait = u64::try_from(wait).ok().map(Duration::from_millis);
        Ok(Err(wait))
    }

    async fn finish(
        &self,
        tenant: &str,
        sender: &str,
        task_id: &TaskId,
        phase: Phase,
    ) -> Result<(), StoreError> {
        self.touch("ladp_book_finish", tenant, sender, Some((task_id, phase)))
            .await
            .map(drop)
    }

    async fn find(
        &self,
        tenant: &str,
        sender: &str,
        which: Which<'_>,
    ) -> Result<Option<Entry>, StoreError> {
        let tasks = self.touch("ladp_book_read", tenant, sender, None).await?;
        Ok(which.pick(tasks.iter()).cloned())
    }

    async fn running(&self, tenant: &str, sender: &str) -> Result<Vec<TaskId>, StoreError> {
        let tasks = self.touch("ladp_book_read", tenant, sender, None).await?;
        Ok(tasks
            .into_iter()
            .filter(|e| e.phase == Phase::Running)
            .map(|e| e.task_id)
            .collect())
    }
}
