//! A tenant-fair map in Redis, shared by the stores that keep entries per client (task
//! statuses, A2A tasks and contexts), as the local tables are shared out (`crate::fair`):
//! under a namespace `{ns}`, each entry a field of one hash (`{p}:{ns}:entries`, keyed by a
//! SHA-256 of its parts, so no client text reaches a key); per tenant (`{t}`, a digest of its
//! name) the order of changes of its done entries (`{p}:{ns}:t:{t}:idle`) and of its running
//! ones (`{p}:{ns}:t:{t}:run`), sorted sets by Redis time; every tenant's bytes
//! (`{p}:{ns}:tenants`) and the total (`{p}:{ns}:bytes`). A value starting with `r` runs,
//! any other is done. A change is one script: it drops the tenant's entries older than the
//! TTL, then, while over the byte bound, the oldest done entry of the tenant most over its
//! share (the bound divided by the tenants holding entries) — never a running entry, never a
//! tenant's within its share. A read is one script that ignores an expired entry.

use crate::state::redis::Redis;
use crate::state::StoreError;
use std::sync::LazyLock;
use std::time::Duration;

/// A change. KEYS: the entries, the tenant's answered and running orders, the tenants'
/// bytes, the total. ARGV: the field, the value, the bound (bytes), the TTL (ms), `1` when
/// the entry runs, the tenant's digest, the prefix of the tenants' keys (`…:t:`), `1` to
/// leave a done entry (its value starts with `d`) as it is, a channel to publish a message
/// on once written (or empty) and the message. Returns 1 when written, 0 when left. An entry
/// weighs its field, its value and 256 bytes (as the local store counts).
static SET: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(
        r"
local f, v, max, ttl = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local running, me, pre = ARGV[5] == '1', ARGV[6], ARGV[7]
local over = 256
if ARGV[8] == '1' then
  local old = redis.call('HGET', KEYS[1], f)
  if old and string.sub(old, 1, 1) == 'd' then return 0 end
end
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
if ARGV[9] ~= '' then redis.call('PUBLISH', ARGV[9], ARGV[10]) end
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

/// One namespace's tenant-fair map.
pub struct RedisFairMap {
    redis: Redis,
    ns: &'static str,
    ttl: Duration,
    max_bytes: u64,
}

/// A message published by the change that writes an entry (in the same round trip).
pub struct Publish {
    /// The channel.
    pub channel: String,
    /// The message.
    pub message: Vec<u8>,
}

impl RedisFairMap {
    /// The map `ns` in `redis`: entries kept `ttl` after their last change, at most
    /// `max_bytes` together.
    pub fn new(redis: Redis, ns: &'static str, ttl: Duration, max_bytes: u64) -> RedisFairMap {
        RedisFairMap {
            redis,
            ns,
            ttl,
            max_bytes,
        }
    }

    /// The entries, `scope`'s done and running orders, the tenants' bytes, the total.
    fn keys(&self, scope: &str) -> [String; 5] {
        let (ns, t) = (self.ns, Redis::tenant_tag(scope));
        [
            self.redis.key(format_args!("{ns}:entries")),
            self.redis.key(format_args!("{ns}:t:{t}:idle")),
            self.redis.key(format_args!("{ns}:t:{t}:run")),
            self.redis.key(format_args!("{ns}:tenants")),
            self.redis.key(format_args!("{ns}:bytes")),
        ]
    }

    /// The field of an entry: its parts hashed.
    pub fn field(parts: &[&str]) -> String {
        use sha2::Digest as _;
        let mut h = sha2::Sha256::new();
        for part in parts {
            h.update(part.as_bytes());
            h.update([0]);
        }
        hex::encode(h.finalize())
    }

    /// What the entries weigh, as Redis accounts them.
    pub async fn total_bytes(&self) -> Result<u64, StoreError> {
        let [.., total] = self.keys("");
        let v: Option<i64> = self
            .redis
            .query("fair_map_bytes", redis::cmd("GET").arg(total))
            .await?;
        Ok(v.unwrap_or(0).max(0) as u64)
    }

    /// Writes `scope`'s entry `field` (running when `value` starts with `r`), unless `guard`
    /// and the entry is done; publishes `publish` once written. Whether it was written.
    pub async fn set(
        &self,
        op: &'static str,
        scope: &str,
        field: &str,
        value: &[u8],
        guard: bool,
        publish: Option<Publish>,
    ) -> Result<bool, StoreError> {
        let running = value.first() == Some(&b'r');
        let [entries, idle, run, tenants, bytes] = self.keys(scope);
        let (channel, message) =
            publish.map_or((String::new(), Vec::new()), |p| (p.channel, p.message));
        let mut inv = SET.prepare_invoke();
        inv.key(entries)
            .key(idle)
            .key(run)
            .key(tenants)
            .key(bytes)
            .arg(field)
            .arg(value)
            .arg(self.max_bytes)
            .arg(self.ttl.as_millis().max(1) as u64)
            .arg(if running { "1" } else { "0" })
            .arg(Redis::tenant_tag(scope))
            .arg(self.redis.key(format_args!("{}:t:", self.ns)))
            .arg(if guard { "1" } else { "0" })
            .arg(channel)
            .arg(message);
        let written: i64 = self.redis.invoke(op, &inv).await?;
        Ok(written == 1)
    }

    /// `scope`'s entry `field`, unless absent or changed longer than the TTL ago.
    pub async fn get(
        &self,
        op: &'static str,
        scope: &str,
        field: &str,
    ) -> Result<Option<Vec<u8>>, StoreError> {
        let [entries, idle, run, _, _] = self.keys(scope);
        let mut inv = GET.prepare_invoke();
        inv.key(entries)
            .key(idle)
            .key(run)
            .arg(field)
            .arg(self.ttl.as_millis().max(1) as u64);
        self.redis.invoke(op, &inv).await
    }
}
