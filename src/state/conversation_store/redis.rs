//! Conversations in Redis, shared out by tenant as the local table is (`crate::fair`): each
//! session's turns in one list (`{p}:conv:s:{t}:{session}`, `{t}` a digest of the tenant's
//! name, oldest first, each element its skill's tag and the turn as JSON, expiring with the
//! session's idle TTL); per tenant its sessions by last use (`{p}:conv:t:{t}:lru`, a sorted
//! set) and their bytes (`{p}:conv:t:{t}:sizes`, a hash); every tenant's bytes
//! (`{p}:conv:tenants`, a hash) and the total (`{p}:conv:bytes`). Each change is one script.
//! Over the session's cap its oldest turns go (every skill's, oldest first); over the budget
//! the least recently used sessions of the tenant most over its share (the budget divided by
//! the tenants holding conversations) are deleted, never those of a tenant within its share
//! (keys the script derives from the prefix: one Redis, not Redis Cluster, as every store
//! here).

use super::ConversationStore;
use crate::chat::Turn;
use crate::state::conversation_store::Pushed;
use crate::state::redis::Redis;
use crate::state::StoreError;
use std::sync::LazyLock;
use std::time::Duration;

/// Length of a skill's tag at the head of each element.
const TAG: usize = 16;

/// A turn. KEYS: the session's list, the tenant's use order, the tenant's sizes, the tenants'
/// bytes, the total. ARGV: the element, the session's cap, its TTL (ms), the budget, the
/// session id, the prefix of the tenants' keys (`…:conv:`), how long the bookkeeping lives
/// (ms), the tenant's digest. Returns `{dropped, evicted}`.
static PUSH: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(
        r"
local el, cap, ttl, budget = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local sid, pre, keep, me = ARGV[5], ARGV[6], tonumber(ARGV[7]), ARGV[8]
local over = 32
local w = #el + over
if w > cap then return {1, 0} end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if redis.call('EXISTS', KEYS[1]) == 0 then
  local stale = tonumber(redis.call('HGET', KEYS[3], sid) or '0')
  if stale ~= 0 then
    redis.call('DECRBY', KEYS[5], stale)
    redis.call('HINCRBY', KEYS[4], me, -stale)
  end
  redis.call('HDEL', KEYS[3], sid)
end
redis.call('RPUSH', KEYS[1], el)
local size = redis.call('HINCRBY', KEYS[3], sid, w)
redis.call('HINCRBY', KEYS[4], me, w)
local total = redis.call('INCRBY', KEYS[5], w)
local dropped = 0
while size > cap do
  local old = redis.call('LPOP', KEYS[1])
  if not old then break end
  size = redis.call('HINCRBY', KEYS[3], sid, -(#old + over))
  redis.call('HINCRBY', KEYS[4], me, -(#old + over))
  total = redis.call('INCRBY', KEYS[5], -(#old + over))
  dropped = dropped + 1
end
redis.call('PEXPIRE', KEYS[1], ttl)
redis.call('ZADD', KEYS[2], now, sid)
local evicted = 0
while total > budget do
  local all = redis.call('HGETALL', KEYS[4])
  local n = 0
  for i = 1, #all, 2 do
    if tonumber(all[i + 1]) > 0 then n = n + 1 end
  end
  local share = math.floor(budget / math.max(n, 1))
  local victim, victim_sid, most = nil, nil, 0
  for i = 1, #all, 2 do
    local tag, bytes = all[i], tonumber(all[i + 1])
    if bytes > share and bytes - share > most then
      local order = redis.call('ZRANGE', pre .. 't:' .. tag .. ':lru', 0, 1)
      local first = order[1]
      if tag == me and first == sid then first = order[2] end
      if first then victim, victim_sid, most = tag, first, bytes - share end
    end
  end
  if not victim then break end
  local tpre = pre .. 't:' .. victim
  local b = tonumber(redis.call('HGET', tpre .. ':sizes', victim_sid) or '0')
  redis.call('HDEL', tpre .. ':sizes', victim_sid)
  redis.call('ZREM', tpre .. ':lru', victim_sid)
  if redis.call('DEL', pre .. 's:' .. victim .. ':' .. victim_sid) == 1 then evicted = evicted + 1 end
  if redis.call('HINCRBY', KEYS[4], victim, -b) <= 0 then redis.call('HDEL', KEYS[4], victim) end
  total = redis.call('INCRBY', KEYS[5], -b)
end
if total < 0 then redis.call('SET', KEYS[5], 0) end
for i = 2, 5 do redis.call('PEXPIRE', KEYS[i], keep) end
return {dropped, evicted}
",
    )
});

/// A read. KEYS: the session's list, the use order. ARGV: the session id. The list; the
/// session counts as used.
static TURNS: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(
        r"
local l = redis.call('LRANGE', KEYS[1], 0, -1)
if #l > 0 then
  local t = redis.call('TIME')
  redis.call('ZADD', KEYS[2], 'XX', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000), ARGV[1])
end
return l
",
    )
});

/// Forgets a skill's oldest turns. KEYS: the session's list, the tenant's sizes, the total,
/// the tenants' bytes. ARGV: the skill's tag, how many, the session id, the tenant's digest.
/// Returns how many were forgotten.
static FORGET: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(
        r"
local l = redis.call('LRANGE', KEYS[1], 0, -1)
local n, removed, freed, kept = tonumber(ARGV[2]), 0, 0, {}
for _, e in ipairs(l) do
  if removed < n and string.sub(e, 1, 16) == ARGV[1] then
    removed = removed + 1
    freed = freed + #e + 32
  else
    kept[#kept + 1] = e
  end
end
if removed == 0 then return 0 end
local ttl = redis.call('PTTL', KEYS[1])
redis.call('DEL', KEYS[1])
for _, e in ipairs(kept) do redis.call('RPUSH', KEYS[1], e) end
if #kept > 0 and ttl > 0 then redis.call('PEXPIRE', KEYS[1], ttl) end
redis.call('HINCRBY', KEYS[2], ARGV[3], -freed)
redis.call('DECRBY', KEYS[3], freed)
if redis.call('HINCRBY', KEYS[4], ARGV[4], -freed) <= 0 then redis.call('HDEL', KEYS[4], ARGV[4]) end
return removed
",
    )
});

/// Forgets a session's conversations. KEYS: the session's list, the tenant's use order, the
/// tenant's sizes, the total, the tenants' bytes. ARGV: the session id, the tenant's digest.
static DROP: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(
        r"
local b = tonumber(redis.call('HGET', KEYS[3], ARGV[1]) or '0')
redis.call('HDEL', KEYS[3], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('DEL', KEYS[1])
if b ~= 0 and redis.call('DECRBY', KEYS[4], b) < 0 then redis.call('SET', KEYS[4], 0) end
if b ~= 0 and redis.call('HINCRBY', KEYS[5], ARGV[2], -b) <= 0 then redis.call('HDEL', KEYS[5], ARGV[2]) end
return b
",
    )
});

/// Cluster mode: the conversations every replica reads and writes.
pub struct RedisConversations {
    redis: Redis,
    budget: u64,
    /// How long the bookkeeping outlives its last change: past any session's TTL.
    keep: Duration,
}

/// A turn as stored.
#[derive(serde::Serialize, serde::Deserialize)]
struct Stored<'a> {
    #[serde(borrow)]
    u: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    a: std::borrow::Cow<'a, str>,
}

use crate::state::redis::Redis as Keys;

/// A tenant's name as it appears in keys.
fn tenant_tag(tenant: &str) -> String {
    Keys::tenant_tag(tenant)
}

fn tag(skill: &str) -> String {
    use sha2::Digest as _;
    let h = hex::encode(sha2::Sha256::digest(skill.as_bytes()));
    h[..TAG].to_owned()
}

impl RedisConversations {
    /// Conversations in `redis` within `budget` bytes; sessions live at most `max_ttl`.
    pub fn new(redis: Redis, budget: u64, max_ttl: Duration) -> RedisConversations {
        RedisConversations {
            redis,
            budget,
            keep: max_ttl + Duration::from_secs(3600),
        }
    }

    fn list(&self, tenant: &str, session: &str) -> String {
        self.redis
            .key(format_args!("conv:s:{}:{session}", tenant_tag(tenant)))
    }

    /// The tenant's use order and sizes, the tenants' bytes, the total.
    fn index(&self, tenant: &str) -> (String, String, String, String) {
        let t = tenant_tag(tenant);
        (
            self.redis.key(format_args!("conv:t:{t}:lru")),
            self.redis.key(format_args!("conv:t:{t}:sizes")),
            self.redis.key(format_args!("conv:tenants")),
            self.redis.key(format_args!("conv:bytes")),
        )
    }

    /// The total Redis accounts for, every session together.
    pub async fn total_bytes(&self) -> Result<u64, StoreError> {
        let total = self.redis.key(format_args!("conv:bytes"));
        let v: Option<i64> = self
            .redis
            .query("conv_bytes", redis::cmd("GET").arg(total))
            .await?;
        Ok(v.unwrap_or(0).max(0) as u64)
    }

    async fn try_turns(
        &self,
        tenant: &str,
        session: &str,
        skill: &str,
    ) -> Result<Vec<Turn>, StoreError> {
        let (lru, _, _, _) = self.index(tenant);
        let mut inv = TURNS.prepare_invoke();
        inv.key(self.list(tenant, session)).key(lru).arg(session);
        let items: Vec<Vec<u8>> = self.redis.invoke("conv_turns", &inv).await?;
        let tag = tag(skill);
        let mut out = Vec::new();
        for item in &items {
            let Some(json) = item.strip_prefix(tag.as_bytes()) else {
                continue;
            };
            let s: Stored<'_> =
                serde_json::from_slice(json).map_err(|e| StoreError::Redis(e.to_string()))?;
            out.push(Turn {
                user: s.u.as_ref().into(),
                assistant: s.a.as_ref().into(),
            });
        }
        Ok(out)
    }

    async fn try_push(
        &self,
        tenant: &str,
        session: &str,
        skill: &str,
        turn: &Turn,
        cap: usize,
        ttl: Duration,
    ) -> Result<Pushed, StoreError> {
        let mut element = tag(skill).into_bytes();
        let stored = Stored {
            u: std::borrow::Cow::Borrowed(&turn.user),
            a: std::borrow::Cow::Borrowed(&turn.assistant),
        };
        serde_json::to_writer(&mut element, &stored)
            .map_err(|e| StoreError::Redis(e.to_string()))?;
        let (lru, sizes, tenants, total) = self.index(tenant);
        let mut inv = PUSH.prepare_invoke();
        inv.key(self.list(tenant, session))
            .key(lru)
            .key(sizes)
            .key(tenants)
            .key(total)
            .arg(element)
            .arg(cap)
            .arg(ttl.as_millis().max(1) as u64)
            .arg(self.budget)
            .arg(session)
            .arg(self.redis.key(format_args!("conv:")))
            .arg(self.keep.as_millis() as u64)
            .arg(tenant_tag(tenant));
        let (dropped, evicted): (usize, usize) = self.redis.invoke("conv_push", &inv).await?;
        Ok(Pushed { dropped, evicted })
    }
}

fn logged<T: Default>(what: &str, r: Result<T, StoreError>) -> T {
    r.unwrap_or_else(|e| {
        tracing::warn!(error = %e, "conversation {what} skipped: the shared state did not answer");
        T::default()
    })
}

impl ConversationStore for RedisConversations {
    async fn turns(&self, tenant: &str, session: &str, skill: &str) -> Vec<Turn> {
        logged("read", self.try_turns(tenant, session, skill).await)
    }

    async fn forget_oldest(&self, tenant: &str, session: &str, skill: &str, n: usize) -> usize {
        let (_, sizes, tenants, total) = self.index(tenant);
        let mut inv = FORGET.prepare_invoke();
        inv.key(self.list(tenant, session))
            .key(sizes)
            .key(total)
            .key(tenants)
            .arg(tag(skill))
            .arg(n)
            .arg(session)
            .arg(tenant_tag(tenant));
        logged("trim", self.redis.invoke("conv_forget", &inv).await)
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
        // A turn weighs its element (tag and JSON) and 32 bytes (`TURN_OVERHEAD` locally).
        logged(
            "write",
            self.try_push(tenant, session, skill, &turn, cap, ttl).await,
        )
    }

    async fn forget_session(&self, tenant: &str, session: &str) {
        let (lru, sizes, tenants, total) = self.index(tenant);
        let mut inv = DROP.prepare_invoke();
        inv.key(self.list(tenant, session))
            .key(lru)
            .key(sizes)
            .key(total)
            .key(tenants)
            .arg(session)
            .arg(tenant_tag(tenant));
        let dropped: Result<i64, _> = self.redis.invoke("conv_drop", &inv).await;
        logged("drop", dropped.map(|_| ()));
    }

    async fn session_bytes(&self, tenant: &str, session: &str) -> usize {
        let (_, sizes, _, _) = self.index(tenant);
        let v: Result<Option<i64>, _> = self
            .redis
            .query("conv_size", redis::cmd("HGET").arg(sizes).arg(session))
            .await;
        logged("size", v).unwrap_or(0).max(0) as usize
    }
}
