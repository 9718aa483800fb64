//! LLMX senders' sequence numbers in Redis, per tenant (`{t}`, a digest of its name): one hash
//! of its senders (`{p}:llmx:{t}:peers`, each field a digest of the sender's name, its value
//! `<last s>,<answers numbered>`) and their order of last change (`{p}:llmx:{t}:order`, a
//! sorted set by Redis time). A check is one script: it forgets the tenant's senders idle past
//! the TTL, compares `s` with the last one exactly (as decimal text: a `u64` does not fit a
//! Lua number), records it if above, and numbers the answer. A new sender past the tenant's
//! bound (`[llmx] max_sender_bytes` divided by the configured tenants) makes room by
//! forgetting the same tenant's least recently heard sender: another tenant's are never
//! touched.

use super::{Checked, SequenceStore};
use crate::state::redis::Redis;
use crate::state::StoreError;
use std::sync::LazyLock;
use std::time::Duration;

/// What one remembered sender weighs in Redis (its field, value and order entry), the unit of
/// the per-tenant bound.
pub const SENDER_BYTES: usize = 128;

/// How long a sender is remembered past its last message: longer than any replay worth
/// refusing (a forgotten sender's next message is taken as a first one, as on a single node
/// once the table forgets it).
pub const SENDER_TTL: Duration = Duration::from_secs(24 * 3600);

/// KEYS: the tenant's senders, their order. ARGV: the sender's field, `in` (check `s`, then
/// number the answer) or `out` (number only), `s` (decimal), the tenant's bound (senders), the
/// TTL (ms). Returns `{accepted (1|0), last s when refused, the answer's number}`.
static SEQ: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(
        r"
local peers, order = KEYS[1], KEYS[2]
local f, op, s, cap, ttl = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
for _, old in ipairs(redis.call('ZRANGEBYSCORE', order, '-inf', now - ttl, 'LIMIT', 0, 64)) do
  redis.call('HDEL', peers, old)
  redis.call('ZREM', order, old)
end
local v = redis.call('HGET', peers, f)
local last, sent = '', 0
if v then
  local i = string.find(v, ',', 1, true)
  last = string.sub(v, 1, i - 1)
  sent = tonumber(string.sub(v, i + 1))
end
local accepted, refused = 1, ''
if op == 'in' then
  if last ~= '' and not (#s > #last or (#s == #last and s > last)) then
    accepted, refused = 0, last
  else
    last = s
  end
end
sent = sent + 1
if not v then
  while redis.call('HLEN', peers) >= cap do
    local first = redis.call('ZRANGE', order, 0, 0)
    if #first == 0 then break end
    redis.call('HDEL', peers, first[1])
    redis.call('ZREM', order, first[1])
  end
end
redis.call('HSET', peers, f, last .. ',' .. string.format('%d', sent))
redis.call('ZADD', order, now, f)
redis.call('PEXPIRE', peers, ttl)
redis.call('PEXPIRE', order, ttl)
return {accepted, refused, string.format('%d', sent)}
",
    )
});

/// Cluster mode: the sequence numbers every replica checks and writes.
pub struct RedisSequences {
    redis: Redis,
    /// Senders a tenant may have remembered.
    per_tenant: u64,
}

impl RedisSequences {
    /// Sequence numbers in `redis`, `max_bytes` shared out by the `tenants` configured (at
    /// least one sender each).
    pub fn new(redis: Redis, max_bytes: u64, tenants: usize) -> RedisSequences {
        let tenants = u64::try_from(tenants.max(1)).unwrap_or(u64::MAX);
        RedisSequences {
            redis,
            per_tenant: (max_bytes / tenants / SENDER_BYTES as u64).max(1),
        }
    }

    fn keys(&self, tenant: &str) -> [String; 2] {
        let t = Redis::tenant_tag(tenant);
        [
            self.redis.key(format_args!("llmx:{t}:peers")),
            self.redis.key(format_args!("llmx:{t}:order")),
        ]
    }

    async fn call(
        &self,
        tenant: &str,
        from: &str,
        seq: Option<u64>,
    ) -> Result<Checked, StoreError> {
        let [peers, order] = self.keys(tenant);
        let mut inv = SEQ.prepare_invoke();
        inv.key(peers)
            .key(order)
            .arg(Redis::name_tag(from))
            .arg(if seq.is_some() { "in" } else { "out" })
            .arg(seq.unwrap_or(0).to_string())
            .arg(self.per_tenant)
            .arg(SENDER_TTL.as_millis() as u64);
        let (accepted, last, n): (i64, String, String) =
            self.redis.invoke("llmx_seq", &inv).await?;
        let bad = |what: &str| StoreError::Redis(format!("a stored sequence number: {what}"));
        let n = n.parse::<u64>().map_err(|_| bad(&n))?;
        if accepted == 1 {
            return Ok((Ok(()), n));
        }
        let last = last.parse::<u64>().map_err(|_| bad(&last))?;
        Ok((Err(last), n))
    }

    /// Senders `tenant` has remembered (tests and diagnostics).
    pub async fn senders(&self, tenant: &str) -> Result<u64, StoreError> {
        let [peers, _] = self.keys(tenant);
        self.redis
            .query("llmx_senders", redis::cmd("HLEN").arg(peers))
            .await
    }
}

impl SequenceStore for RedisSequences {
    async fn accept(&self, tenant: &str, from: &str, seq: u64) -> Result<Checked, StoreError> {
        self.call(tenant, from, Some(seq)).await
    }

    async fn next(&self, tenant: &str, to: &str) -> Result<u64, StoreError> {
        Ok(self.call(tenant, to, None).await?.1)
    }
}
