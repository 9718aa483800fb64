//! Recent tasks in Redis, shared out by tenant as the local table is (`crate::fair`): each
//! task's state a field of one hash (`{p}:status:entries`, keyed by a SHA-256 of the client's
//! scope, `from` and task id; `r` and the session id while it runs, `d` and the answer's JSON
//! once answered); per tenant (`{t}`, a digest of its name) the order of changes of its
//! answered tasks (`{p}:status:t:{t}:idle`) and of its running ones (`{p}:status:t:{t}:run`),
//! sorted sets by Redis time; every tenant's bytes (`{p}:status:tenants`) and the total
//! (`{p}:status:bytes`). A change is one script: it drops the tenant's entries older than the
//! TTL, then, while over the byte bound, the oldest answered entry of the tenant most over its
//! share (the bound divided by the tenants holding entries) — never a running task's, never a
//! tenant's within its share. A read is one script that ignores an expired entry.

use super::StatusStore;
use crate::ldp::{Envelope, SessionId, TaskId};
use crate::recent::{StatusKey, TaskStatus};
use crate::state::redis::Redis;
use crate::state::StoreError;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

/// A change. KEYS: the entries, the tenant's answered and running orders, the tenants'
/// bytes, the total. ARGV: the field, the value, the bound (bytes), the TTL (ms), `1` when
/// the task runs, the tenant's digest, the prefix of the tenants' keys (`…:status:t:`).
/// Returns 1. An entry weighs its field, its value and 256 bytes (as the local store counts).
static SET: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(
        r"
local f, v, max, ttl = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local running, me, pre = ARGV[5] == '1', ARGV[6], ARGV[7]
local over = 256
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local delta = #v + #f + over
if redis.call('HEXISTS', KEYS[1], f) == 1 then
  delta = delta - (redis.call('HSTRLEN', KEYS[1], f) + #f + over)
end
redis.call('HSET', KEYS[1], f, v)
redis.call('ZREM', KEYS[2], f)
redis.call('ZREM', KEYS[3], f)
if running then redis.call('ZADD', KEYS[3], now, f) else redis.call('ZADD', KEYS[2], now, f) end
local total = redis.call('INCRBY', KEYS[5], delta)
redis.call('HINCRBY', KEYS[4], me, delta)
local function drop(tag, field)
  local len = redis.call('HSTRLEN', KEYS[1], field)
  local gone = redis.call('HDEL', KEYS[1], field)
  redis.call('ZREM', pre .. tag .. ':idle', field)
  redis.call('ZREM', pre .. tag .. ':run', field)
  if gone == 1 then
    local w = len + #field + over
    total = redis.call('INCRBY', KEYS[5], -w)
    if redis.call('HINCRBY', KEYS[4], tag, -w) <= 0 then redis.call('HDEL', KEYS[4], tag) end
  end
end
local function expire(tag)
  for _, kind in ipairs({':idle', ':run'}) do
    while true do
      local first = redis.call('ZRANGE', pre .. tag .. kind, 0, 0, 'WITHSCORES')
      if #first == 0 or tonumber(first[2]) >= now - ttl then break end
      drop(tag, first[1])
    end
  end
end
expire(me)
if total > max then
  local all = redis.call('HGETALL', KEYS[4])
  for i = 1, #all, 2 do expire(all[i]) end
end
while total > max do
  local all = redis.call('HGETALL', KEYS[4])
  local n = #all / 2
  local share = math.floor(max / math.max(n, 1))
  local victim, field, most = nil, nil, 0
  for i = 1, #all, 2 do
    local tag, b = all[i], tonumber(all[i + 1])
    if b > share and b - share > most then
      local order = redis.call('ZRANGE', pre .. tag .. ':idle', 0, 1)
      local first = order[1]
      if tag == me and first == f then first = order[2] end
      if first then
        victim, field, most = tag, first, b - share
      elseif tag ~= me and redis.call('ZCARD', pre .. tag .. ':run') == 0 then
        -- Bytes of a tenant whose orders expired: nothing is left to count.
        total = redis.call('INCRBY', KEYS[5], -b)
        redis.call('HDEL', KEYS[4], tag)
      end
    end
  end
  if not victim then break end
  drop(victim, field)
end
if total < 0 then redis.call('SET', KEYS[5], 0) end
for i = 1, 5 do redis.call('PEXPIRE', KEYS[i], ttl) end
return 1
",
    )
});

/// A read. KEYS: the entries, the tenant's answered and running orders. ARGV: the field,
/// the TTL (ms). The value unless absent or changed longer than the TTL ago.
static GET: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(
        r"
local s = redis.call('ZSCORE', KEYS[2], ARGV[1]) or redis.call('ZSCORE', KEYS[3], ARGV[1])
if not s then return false end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if tonumber(s) < now - tonumber(ARGV[2]) then return false end
return redis.call('HGET', KEYS[1], ARGV[1])
",
    )
});

/// Cluster mode: the statuses every replica reads and writes.
pub struct RedisStatuses {
    redis: Redis,
    ttl: Duration,
    max_bytes: u64,
}

impl RedisStatuses {
    /// Statuses in `redis`, each kept `ttl` after its last change, at most `max_bytes` together.
    pub fn new(redis: Redis, ttl: Duration, max_bytes: u64) -> RedisStatuses {
        RedisStatuses {
            redis,
            ttl,
            max_bytes,
        }
    }

    /// The entries, `scope`'s answered and running orders, the tenants' bytes, the total.
    fn keys(&self, scope: &str) -> [String; 5] {
        let t = Redis::tenant_tag(scope);
        [
            self.redis.key(format_args!("status:entries")),
            self.redis.key(format_args!("status:t:{t}:idle")),
            self.redis.key(format_args!("status:t:{t}:run")),
            self.redis.key(format_args!("status:tenants")),
            self.redis.key(format_args!("status:bytes")),
        ]
    }

    /// The field of a client's task: its parts hashed, so no client text reaches a key.
    fn field(scope: &str, from: &str, task: &str) -> String {
        use sha2::Digest as _;
        let mut h = sha2::Sha256::new();
        for part in [scope, from, task] {
            h.update(part.as_bytes());
            h.update([0]);
        }
        hex::encode(h.finalize())
    }

    /// What the entries weigh, as Redis accounts them.
    pub async fn total_bytes(&self) -> Result<u64, StoreError> {
        let total = self.redis.key(format_args!("status:bytes"));
        let v: Option<i64> = self
            .redis
            .query("status_bytes", redis::cmd("GET").arg(total))
            .await?;
        Ok(v.unwrap_or(0).max(0) as u64)
    }

    async fn set(&self, scope: &str, from: &str, task: &TaskId, value: Vec<u8>) {
        let running = value.first() == Some(&b'r');
        let [entries, idle, run, tenants, bytes] = self.keys(scope);
        let mut inv = SET.prepare_invoke();
        inv.key(entries)
            .key(idle)
            .key(run)
            .key(tenants)
            .key(bytes)
            .arg(Self::field(scope, from, task))
            .arg(value)
            .arg(self.max_bytes)
            .arg(self.ttl.as_millis().max(1) as u64)
            .arg(if running { "1" } else { "0" })
            .arg(Redis::tenant_tag(scope))
            .arg(self.redis.key(format_args!("status:t:")));
        let r: Result<i64, _> = self.redis.invoke("status_set", &inv).await;
        if let Err(e) = r {
            tracing::warn!(error = %e, task_id = %task, "task status not shared: the shared state did not answer");
        }
    }
}

impl StatusStore for RedisStatuses {
    async fn running(&self, scope: &str, from: &str, task: &TaskId, session: SessionId) {
        let mut value = b"r".to_vec();
        value.extend_from_slice(session.as_str().as_bytes());
        self.set(scope, from, task, value).await;
    }

    async fn done(&self, scope: &str, from: &str, task: &TaskId, answer: Arc<Envelope>) {
        let mut value = b"d".to_vec();
        if let Err(e) = serde_json::to_writer(&mut value, &*answer) {
            tracing::warn!(error = %e, "task status not shared: the answer did not serialise");
            return;
        }
        self.set(scope, from, task, value).await;
    }

    async fn get(&self, key: &StatusKey) -> Result<Option<TaskStatus>, StoreError> {
        let (scope, from, task) = key.parts();
        let [entries, idle, run, _, _] = self.keys(scope);
        let mut inv = GET.prepare_invoke();
        inv.key(entries)
            .key(idle)
            .key(run)
            .arg(Self::field(scope, from, task))
            .arg(self.ttl.as_millis().max(1) as u64);
        let v: Option<Vec<u8>> = self.redis.invoke("status_get", &inv).await?;
        let Some(v) = v else { return Ok(None) };
        match v.split_first() {
            Some((b'r', session)) => {
                let session = String::from_utf8_lossy(session).into_owned();
                Ok(Some(TaskStatus::Running(session.into())))
            }
            Some((b'd', json)) => {
                let env = Envelope::from_slice(json)
                    .map_err(|e| StoreError::Redis(format!("a stored answer: {e}")))?;
                Ok(Some(TaskStatus::Done(Arc::new(env))))
            }
            _ => Err(StoreError::Redis("a stored status of no known kind".into())),
        }
    }
}
