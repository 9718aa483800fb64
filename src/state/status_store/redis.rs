//! Recent tasks in Redis: each task's state a field of one hash (`{p}:status:entries`, keyed
//! by a SHA-256 of the client's scope, `from` and task id; `r` and the session id while it
//! runs, `d` and the answer's JSON once answered), with the order of changes
//! (`{p}:status:changes`, a sorted set by Redis time) and the bytes they weigh together
//! (`{p}:status:bytes`). A change is one script that drops entries older than the TTL and the
//! oldest while over the byte bound; a read is one script that ignores an expired entry.

use super::StatusStore;
use crate::ldp::{Envelope, SessionId, TaskId};
use crate::recent::{StatusKey, TaskStatus};
use crate::state::redis::Redis;
use crate::state::StoreError;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

/// A change. KEYS: the entries, the changes, the bytes. ARGV: the field, the value, the
/// bound (bytes), the TTL (ms). Returns 1. An entry weighs its field, its value and 256 bytes
/// (as `recent::ENTRY_OVERHEAD`).
static SET: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(
        r"
local f, v, max, ttl = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local over = 256
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local old = redis.call('HSTRLEN', KEYS[1], f)
local delta = #v + #f + over
if redis.call('HEXISTS', KEYS[1], f) == 1 then delta = delta - (old + #f + over) end
redis.call('HSET', KEYS[1], f, v)
redis.call('ZADD', KEYS[2], now, f)
local total = redis.call('INCRBY', KEYS[3], delta)
while true do
  local first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
  if #first == 0 then break end
  if total <= max and tonumber(first[2]) >= now - ttl then break end
  local len = redis.call('HSTRLEN', KEYS[1], first[1])
  if redis.call('HDEL', KEYS[1], first[1]) == 1 then
    total = redis.call('INCRBY', KEYS[3], -(len + #first[1] + over))
  end
  redis.call('ZREM', KEYS[2], first[1])
end
if total < 0 then redis.call('SET', KEYS[3], 0) end
for i = 1, 3 do redis.call('PEXPIRE', KEYS[i], ttl) end
return 1
",
    )
});

/// A read. KEYS: the entries, the changes. ARGV: the field, the TTL (ms). The value unless
/// absent or changed longer than the TTL ago.
static GET: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(
        r"
local s = redis.call('ZSCORE', KEYS[2], ARGV[1])
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

    fn keys(&self) -> [String; 3] {
        [
            self.redis.key(format_args!("status:entries")),
            self.redis.key(format_args!("status:changes")),
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
        let [_, _, total] = self.keys();
        let v: Option<i64> = self
            .redis
            .query("status_bytes", redis::cmd("GET").arg(total))
            .await?;
        Ok(v.unwrap_or(0).max(0) as u64)
    }

    async fn set(&self, scope: &str, from: &str, task: &TaskId, value: Vec<u8>) {
        let [entries, changes, bytes] = self.keys();
        let mut inv = SET.prepare_invoke();
        inv.key(entries)
            .key(changes)
            .key(bytes)
            .arg(Self::field(scope, from, task))
            .arg(value)
            .arg(self.max_bytes)
            .arg(self.ttl.as_millis().max(1) as u64);
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
        let [entries, changes, _] = self.keys();
        let mut inv = GET.prepare_invoke();
        inv.key(entries)
            .key(changes)
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
