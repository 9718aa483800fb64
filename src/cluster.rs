//! Cluster mode: the state every replica must agree on, in Redis. Each operation is one
//! atomic round trip (a Lua script or a single command) on Redis' own clock, every key has a
//! TTL, and every call has a deadline (`[cluster] redis_timeout`, 50 ms by default).
//!
//! | state | keys | when Redis does not answer |
//! |---|---|---|
//! | rate limits (GCRA) | `{p}:rl:{scope}:{key}` | each replica admits limit ÷ `replicas` locally (counted) |
//! | budgets (reserve, settle) | `{p}:budget:{tenant}:day:{n}`, `…:month:{n}`, `{p}:budget:session:{id}` | refused, retryable |
//! | client sessions and their upstream bindings | `{p}:session:{id}`, `{p}:session:{id}:bindings` | refused, retryable |
//! | replay nonces | `{p}:nonce:{message id}:{nonce}` | refused, retryable |
//!
//! The connection is made lazily and re-made automatically after a failure.

use crate::config::{ClusterConfig, RateConfig};
use crate::limits::BudgetExceeded;
use crate::telemetry::Metrics;
use redis::aio::ConnectionManager;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Why a shared-state operation did not happen.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ClusterError {
    /// No answer within the deadline.
    #[error("the shared state (Redis) did not answer within {0:?}")]
    Timeout(Duration),
    /// Redis answered with an error or the connection failed.
    #[error("the shared state (Redis) is unavailable: {0}")]
    Redis(String),
}

/// GCRA over Redis' clock. KEYS[1]: the limit's key. ARGV: emission interval (ms), burst.
/// Returns `{1, '0'}` (admitted) or `{0, wait_ms}`.
const GCRA: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local interval = tonumber(ARGV[1])
local tolerance = interval * tonumber(ARGV[2])
local tat = tonumber(redis.call('GET', KEYS[1]) or now)
if tat < now then tat = now end
local new_tat = tat + interval
local allow_at = new_tat - tolerance
if now < allow_at then
  return {0, tostring(allow_at - now)}
end
redis.call('SET', KEYS[1], tostring(new_tat), 'PX', math.ceil(new_tat - now) + 1000)
return {1, '0'}
";

/// Budget reservation. KEYS: day, month, session accounts (hashes: `spent`, and one field
/// `r:{id}` = `amount|expiry ms` per reservation held). ARGV: amount, the three limits
/// (negative: none), the three TTLs (s), the reservation id, how long it may be held (ms).
/// Expired reservations (a replica died mid-task, a reply was lost) are dropped as they are
/// met. Returns `{'ok'}`, `{'unseeded'}` (a budgeted day or month account has no spend from the
/// ledger yet: seed it and ask again) or `{which, limit, spent, reserved}`.
const RESERVE: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local amount = tonumber(ARGV[1])
for i = 1, 2 do
  if tonumber(ARGV[1 + i]) >= 0 and redis.call('HEXISTS', KEYS[i], 'spent') == 0 then
    return {'unseeded'}
  end
end
local names = {'daily', 'monthly', 'session'}
for i = 1, 3 do
  local fields = redis.call('HGETALL', KEYS[i])
  local spent, reserved = 0, 0
  for j = 1, #fields, 2 do
    local f = fields[j]
    if f == 'spent' then
      spent = tonumber(fields[j + 1])
    elseif string.sub(f, 1, 2) == 'r:' then
      local a, exp = string.match(fields[j + 1], '([^|]+)|(.+)')
      if tonumber(exp) < now then
        redis.call('HDEL', KEYS[i], f)
      else
        reserved = reserved + tonumber(a)
      end
    end
  end
  local limit = tonumber(ARGV[1 + i])
  if limit >= 0 and spent + reserved + amount > limit + 1e-12 then
    return {names[i], tostring(limit), tostring(spent), tostring(reserved)}
  end
end
local held = ARGV[1] .. '|' .. tostring(now + tonumber(ARGV[9]))
for i = 1, 3 do
  redis.call('HSET', KEYS[i], 'r:' .. ARGV[8], held)
  redis.call('EXPIRE', KEYS[i], ARGV[4 + i])
end
return {'ok'}
";

/// Settlement, idempotent. KEYS: the reservation's three accounts and its settled marker.
/// ARGV: reservation id, actual cost, the three TTLs (s). The first call releases the
/// reservation and charges the cost (to accounts that hold spend); a repeat does nothing.
const SETTLE: &str = r"
if not redis.call('SET', KEYS[4], '1', 'NX', 'EX', 86400) then return 0 end
for i = 1, 3 do
  redis.call('HDEL', KEYS[i], 'r:' .. ARGV[1])
  if i == 3 or redis.call('HEXISTS', KEYS[i], 'spent') == 1 then
    redis.call('HINCRBYFLOAT', KEYS[i], 'spent', ARGV[2])
  end
  redis.call('EXPIRE', KEYS[i], ARGV[2 + i])
end
return 1
";

/// Restores spend from the ledger unless another replica already did. KEYS: day, month.
/// ARGV: day spent, month spent, day TTL, month TTL.
const RESTORE: &str = r"
for i = 1, 2 do
  redis.call('HSETNX', KEYS[i], 'spent', ARGV[i])
  redis.call('EXPIRE', KEYS[i], ARGV[2 + i])
end
return 1
";

/// Session touch. KEYS: the session, its bindings, its budget account. Returns `{session
/// json, {skill, binding json, …}}` after restarting the TTLs (the session's own `ttl_ms`; the
/// budget account an hour more, so a live session's spend is never forgotten), or nil.
const TOUCH: &str = r"
local s = redis.call('GET', KEYS[1])
if not s then return nil end
local ttl = cjson.decode(s)['ttl_ms']
redis.call('PEXPIRE', KEYS[1], ttl)
redis.call('PEXPIRE', KEYS[2], ttl)
redis.call('PEXPIRE', KEYS[3], ttl + 3600000)
return {s, redis.call('HGETALL', KEYS[2])}
";

/// First binding of a skill. KEYS: the bindings hash. ARGV: skill, binding json, TTL (ms).
/// Sets it if absent (nil back); otherwise returns the binding already there.
const FIRST_BINDING: &str = r"
if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2]) == 1 then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return nil
end
return redis.call('HGET', KEYS[1], ARGV[1])
";

/// Session close. KEYS: the session, its bindings. ARGV: the owner. Deletes both if the owner
/// matches and returns the bindings `{skill, json, …}`; nil otherwise.
const CLOSE: &str = r"
local s = redis.call('GET', KEYS[1])
if not s or cjson.decode(s)['owner'] ~= ARGV[1] then return nil end
local b = redis.call('HGETALL', KEYS[2])
redis.call('DEL', KEYS[1], KEYS[2])
return b
";

/// A reservation made in Redis: its id and the accounts it holds money in.
#[derive(Debug, Clone)]
#[must_use = "a reservation must be settled"]
pub struct SharedReservation {
    id: String,
    keys: [String; 3],
    ttls: [u64; 3],
}

/// The outcome of a budget reservation.
#[derive(Debug)]
pub enum Reserved {
    /// Held; settle it when the task ends.
    Held(SharedReservation),
    /// A budget would be exceeded.
    Exceeded(BudgetExceeded),
    /// The tenant's day or month account has not been seeded from the ledger (Redis lost
    /// it, or was down when the replicas started): seed it with [`Cluster::restore_spend`].
    Unseeded,
}

/// Budget limits of one reservation (`None`: no such budget).
#[derive(Debug, Clone, Copy)]
pub struct BudgetLimits {
    /// Per UTC day.
    pub day: Option<f64>,
    /// Per UTC month.
    pub month: Option<f64>,
    /// Per session.
    pub session: Option<f64>,
}

/// Redis-backed shared state.
pub struct Cluster {
    conn: ConnectionManager,
    prefix: String,
    deadline: Duration,
    replicas: u32,
    metrics: Arc<Metrics>,
    up: AtomicBool,
    gcra: redis::Script,
    reserve: redis::Script,
    settle: redis::Script,
    restore: redis::Script,
    touch: redis::Script,
    close: redis::Script,
    first_binding: redis::Script,
}

/// How long day and month accounts outlive their period.
const DAY_TTL: u64 = 2 * 86_400;
const MONTH_TTL: u64 = 32 * 86_400;

impl Cluster {
    /// Shared state per `cfg` (`None` without `redis_url`). Connects lazily: a gateway starts
    /// while Redis is down and recovers when it returns.
    pub fn from_config(
        cfg: &ClusterConfig,
        metrics: Arc<Metrics>,
    ) -> Result<Option<Arc<Cluster>>, ClusterError> {
        let Some(url) = &cfg.redis_url else {
            return Ok(None);
        };
        let client = redis::Client::open(url.as_str()).map_err(|e| {
            ClusterError::Redis(format!("{}: {e}", crate::provenance::redact_url(url)))
        })?;
        let config = redis::aio::ConnectionManagerConfig::new()
            .set_connection_timeout(Some(cfg.redis_timeout.max(Duration::from_millis(200))))
            .set_response_timeout(Some(cfg.redis_timeout))
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_millis(500));
        let conn = ConnectionManager::new_lazy_with_config(client, config)
            .map_err(|e| ClusterError::Redis(e.to_string()))?;
        metrics.redis_up.set(0);
        Ok(Some(Arc::new(Cluster {
            conn,
            prefix: cfg.key_prefix.clone(),
            deadline: cfg.redis_timeout,
            replicas: cfg.replicas.max(1),
            metrics,
            up: AtomicBool::new(false),
            gcra: redis::Script::new(GCRA),
            reserve: redis::Script::new(RESERVE),
            settle: redis::Script::new(SETTLE),
            restore: redis::Script::new(RESTORE),
            touch: redis::Script::new(TOUCH),
            close: redis::Script::new(CLOSE),
            first_binding: redis::Script::new(FIRST_BINDING),
        })))
    }

    /// Replicas sharing the limits (the local fallback divides by this).
    pub fn replicas(&self) -> u32 {
        self.replicas
    }

    /// A key under this gateway's prefix.
    pub fn key(&self, parts: std::fmt::Arguments<'_>) -> String {
        format!("{}:{parts}", self.prefix)
    }

    /// Runs one Redis call within the deadline, counting it and tracking reachability.
    async fn call<T>(
        &self,
        op: &'static str,
        f: impl std::future::Future<Output = redis::RedisResult<T>>,
    ) -> Result<T, ClusterError> {
        self.metrics.redis_calls.with_label_values(&[op]).inc();
        let out = match tokio::time::timeout(self.deadline, f).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(ClusterError::Redis(e.to_string())),
            Err(_) => Err(ClusterError::Timeout(self.deadline)),
        };
        let ok = out.is_ok();
        if self.up.swap(ok, Ordering::AcqRel) != ok {
            self.metrics.redis_up.set(i64::from(ok));
            if ok {
                tracing::info!("shared state (Redis) reachable");
            } else if let Err(e) = &out {
                tracing::warn!(error = %e, "shared state (Redis) unreachable");
            }
        }
        if let Err(e) = &out {
            self.metrics.redis_errors.with_label_values(&[op]).inc();
            tracing::debug!(op, error = %e, "redis call failed");
        }
        out
    }

    /// Whether Redis answers a PING now (`/readyz`).
    pub async fn ping(&self) -> bool {
        let mut c = self.conn.clone();
        self.call("ping", redis::cmd("PING").query_async::<String>(&mut c))
            .await
            .is_ok()
    }

    /// One admission under `rate` for the limit at `key` (e.g. `tenant:acme`), shared by
    /// every replica: `Ok(Ok(()))` admitted, `Ok(Err(wait))` refused.
    pub async fn admit(
        &self,
        key: &str,
        rate: &RateConfig,
    ) -> Result<Result<(), Duration>, ClusterError> {
        if !(rate.rps.is_finite() && rate.rps > 0.0) {
            return Ok(Ok(()));
        }
        let burst = rate.burst.unwrap_or(rate.rps.ceil() as u32).max(1);
        let interval_ms = 1000.0 / rate.rps;
        let mut c = self.conn.clone();
        let full = self.key(format_args!("rl:{key}"));
        let mut inv = self.gcra.key(full);
        inv.arg(interval_ms).arg(burst);
        let (admitted, wait): (i64, Option<String>) =
            self.call("rate_limit", inv.invoke_async(&mut c)).await?;
        if admitted == 1 {
            return Ok(Ok(()));
        }
        let ms = wait
            .and_then(|w| w.parse::<f64>().ok())
            .unwrap_or(interval_ms);
        // Whatever Redis answered (`inf`, `NaN`, huge), the wait converts without panicking.
        let wait = Duration::try_from_secs_f64(ms / 1000.0).unwrap_or(if ms > 0.0 {
            Duration::from_secs(86_400)
        } else {
            Duration::ZERO
        });
        Ok(Err(wait))
    }

    fn accounts(&self, tenant: &str, session: &str) -> [String; 3] {
        let now = chrono::Utc::now();
        let (day, month) = crate::limits::budget::period_keys(now);
        [
            self.key(format_args!("budget:{tenant}:day:{day}")),
            self.key(format_args!("budget:{tenant}:month:{month}")),
            self.key(format_args!("budget:session:{session}")),
        ]
    }

    /// Reserves `amount` against the tenant's day and month budgets and the session's,
    /// atomically across replicas, or says which would be exceeded. The reservation is held
    /// at most `hold` (longer than any task may take), so money a lost settle would strand
    /// comes back by itself.
    pub async fn reserve(
        &self,
        tenant: &str,
        session: &str,
        session_ttl: Duration,
        limits: BudgetLimits,
        amount: f64,
        hold: Duration,
    ) -> Result<Reserved, ClusterError> {
        let amount = amount.max(0.0);
        let keys = self.accounts(tenant, session);
        let ttls = [DAY_TTL, MONTH_TTL, session_ttl.as_secs().max(1) + 3600];
        let id = crate::ldp::new_message_id();
        let mut inv = self.reserve.prepare_invoke();
        for k in &keys {
            inv.key(k);
        }
        inv.arg(amount);
        for l in [limits.day, limits.month, limits.session] {
            inv.arg(l.unwrap_or(-1.0));
        }
        for t in ttls {
            inv.arg(t);
        }
        inv.arg(&id).arg(hold.as_millis().max(1) as u64);
        let mut c = self.conn.clone();
        let out: Vec<String> = self
            .call("budget_reserve", inv.invoke_async(&mut c))
            .await?;
        match out.as_slice() {
            [ok] if ok == "ok" => Ok(Reserved::Held(SharedReservation { id, keys, ttls })),
            [unseeded] if unseeded == "unseeded" => Ok(Reserved::Unseeded),
            [which, limit, spent, reserved] => {
                let num = |s: &String| s.parse::<f64>().unwrap_or(0.0);
                let which = match which.as_str() {
                    "daily" => "daily",
                    "monthly" => "monthly",
                    _ => "session",
                };
                Ok(Reserved::Exceeded(BudgetExceeded {
                    which,
                    limit: num(limit),
                    spent: num(spent),
                    reserved: num(reserved),
                    asked: amount,
                }))
            }
            other => Err(ClusterError::Redis(format!(
                "unexpected budget answer {other:?}"
            ))),
        }
    }

    /// Releases a reservation and charges `actual`. Idempotent: a retry after a lost reply
    /// charges nothing twice.
    pub async fn settle(&self, r: &SharedReservation, actual: f64) -> Result<(), ClusterError> {
        let mut inv = self.settle.prepare_invoke();
        for k in &r.keys {
            inv.key(k);
        }
        inv.key(self.key(format_args!("budget:settled:{}", r.id)));
        inv.arg(&r.id).arg(actual.max(0.0));
        for t in r.ttls {
            inv.arg(t);
        }
        let mut c = self.conn.clone();
        self.call("budget_settle", inv.invoke_async::<i64>(&mut c))
            .await
            .map(|_| ())
    }

    /// Seeds a tenant's day and month spend (from the ledger) unless already present.
    pub async fn restore_spend(
        &self,
        tenant: &str,
        day_spent: f64,
        month_spent: f64,
    ) -> Result<(), ClusterError> {
        let keys = self.accounts(tenant, "");
        let mut inv = self.restore.key(&keys[0]);
        inv.key(&keys[1])
            .arg(day_spent)
            .arg(month_spent)
            .arg(DAY_TTL)
            .arg(MONTH_TTL);
        let mut c = self.conn.clone();
        self.call("budget_restore", inv.invoke_async::<i64>(&mut c))
            .await
            .map(|_| ())
    }

    /// `(day spent, month spent)` of a tenant.
    pub async fn spent(&self, tenant: &str) -> Result<(f64, f64), ClusterError> {
        let keys = self.accounts(tenant, "");
        let mut pipe = redis::pipe();
        pipe.hget(&keys[0], "spent").hget(&keys[1], "spent");
        let mut c = self.conn.clone();
        let (d, m): (Option<f64>, Option<f64>) =
            self.call("budget_read", pipe.query_async(&mut c)).await?;
        Ok((d.unwrap_or(0.0), m.unwrap_or(0.0)))
    }

    /// Remembers a signed message's id + nonce for `window`: `true` the first time anywhere
    /// in the cluster, `false` for a replay.
    pub async fn first_use(
        &self,
        message_id: &str,
        nonce: &str,
        window: Duration,
    ) -> Result<bool, ClusterError> {
        // Hashed: a client's ids may be long; the key stays short and fixed.
        use sha2::Digest as _;
        let mut h = sha2::Sha256::new();
        h.update(message_id.as_bytes());
        h.update([0]);
        h.update(nonce.as_bytes());
        let key = self.key(format_args!("nonce:{}", hex::encode(h.finalize())));
        let mut cmd = redis::cmd("SET");
        cmd.arg(key)
            .arg(1)
            .arg("NX")
            .arg("PX")
            .arg(window.as_millis().max(1) as u64 * 2);
        let mut c = self.conn.clone();
        let set: Option<String> = self.call("nonce", cmd.query_async(&mut c)).await?;
        Ok(set.is_some())
    }

    fn session_keys(&self, id: &str) -> (String, String) {
        (
            self.key(format_args!("session:{id}")),
            self.key(format_args!("session:{id}:bindings")),
        )
    }

    /// Stores a new client session (it lives `ttl` past its last use, on any replica).
    pub async fn put_session(&self, id: &str, s: &SharedSession) -> Result<(), ClusterError> {
        let (key, _) = self.session_keys(id);
        let json = serde_json::to_string(s).map_err(|e| ClusterError::Redis(e.to_string()))?;
        let mut cmd = redis::cmd("SET");
        cmd.arg(key).arg(json).arg("PX").arg(s.ttl_ms.max(1));
        let mut c = self.conn.clone();
        self.call("session_put", cmd.query_async::<()>(&mut c))
            .await
    }

    /// A session and its upstream bindings, touched (its idle clock restarts everywhere);
    /// `None` if it does not exist (never opened, expired or closed by any replica).
    pub async fn touch_session(
        &self,
        id: &str,
    ) -> Result<Option<(SharedSession, Vec<(String, SharedBinding)>)>, ClusterError> {
        let (key, bindings) = self.session_keys(id);
        let mut inv = self.touch.key(key);
        inv.key(bindings)
            .key(self.key(format_args!("budget:session:{id}")));
        let mut c = self.conn.clone();
        let out: Option<(String, Vec<(String, String)>)> =
            self.call("session_touch", inv.invoke_async(&mut c)).await?;
        let Some((json, pairs)) = out else {
            return Ok(None);
        };
        let session: SharedSession =
            serde_json::from_str(&json).map_err(|e| ClusterError::Redis(e.to_string()))?;
        Ok(Some((session, parse_bindings(pairs))))
    }

    /// Records the upstream binding of `skill` in session `id`.
    pub async fn put_binding(
        &self,
        id: &str,
        skill: &str,
        b: &SharedBinding,
        ttl: Duration,
    ) -> Result<(), ClusterError> {
        let (_, key) = self.session_keys(id);
        let json = serde_json::to_string(b).map_err(|e| ClusterError::Redis(e.to_string()))?;
        let mut pipe = redis::pipe();
        pipe.atomic()
            .hset(&key, skill, json)
            .ignore()
            .pexpire(&key, ttl.as_millis().max(1) as i64)
            .ignore();
        let mut c = self.conn.clone();
        self.call("binding_put", pipe.query_async::<()>(&mut c))
            .await
    }

    /// Records the binding of `skill` in session `id` unless one is there already; returns
    /// the one that was there.
    pub async fn put_first_binding(
        &self,
        id: &str,
        skill: &str,
        b: &SharedBinding,
        ttl: Duration,
    ) -> Result<Option<SharedBinding>, ClusterError> {
        let (_, key) = self.session_keys(id);
        let json = serde_json::to_string(b).map_err(|e| ClusterError::Redis(e.to_string()))?;
        let mut inv = self.first_binding.key(key);
        inv.arg(skill).arg(json).arg(ttl.as_millis().max(1) as u64);
        let mut c = self.conn.clone();
        let there: Option<String> = self
            .call("binding_put_first", inv.invoke_async(&mut c))
            .await?;
        Ok(there.and_then(|j| serde_json::from_str(&j).ok()))
    }

    /// Forgets the binding of `skill` in session `id`.
    pub async fn remove_binding(&self, id: &str, skill: &str) -> Result<(), ClusterError> {
        let (_, key) = self.session_keys(id);
        let mut cmd = redis::cmd("HDEL");
        cmd.arg(key).arg(skill);
        let mut c = self.conn.clone();
        self.call("binding_remove", cmd.query_async::<i64>(&mut c))
            .await
            .map(|_| ())
    }

    /// Closes session `id` for every replica if `owner` opened it; returns its bindings (to
    /// close upstream), or `None` if there was no such session of that owner.
    pub async fn close_session(
        &self,
        id: &str,
        owner: &str,
    ) -> Result<Option<Vec<(String, SharedBinding)>>, ClusterError> {
        let (key, bindings) = self.session_keys(id);
        let mut inv = self.close.key(key);
        inv.key(bindings).arg(owner);
        let mut c = self.conn.clone();
        let out: Option<Vec<(String, String)>> =
            self.call("session_close", inv.invoke_async(&mut c)).await?;
        Ok(out.map(parse_bindings))
    }

    /// Whether session `id` still exists anywhere.
    pub async fn session_exists(&self, id: &str) -> Result<bool, ClusterError> {
        let (key, _) = self.session_keys(id);
        let mut cmd = redis::cmd("EXISTS");
        cmd.arg(key);
        let mut c = self.conn.clone();
        let n: i64 = self.call("session_exists", cmd.query_async(&mut c)).await?;
        Ok(n > 0)
    }
}

/// A bindings hash as `(skill, binding)`; an entry that does not parse is skipped (the
/// session then opens a new upstream session for that skill).
fn parse_bindings(pairs: Vec<(String, String)>) -> Vec<(String, SharedBinding)> {
    pairs
        .into_iter()
        .filter_map(|(skill, b)| Some((skill, serde_json::from_str(&b).ok()?)))
        .collect()
}

/// A client session as every replica sees it.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct SharedSession {
    /// Tenant and envelope `from` of the opener.
    pub owner: String,
    /// Its tenant.
    pub tenant: String,
    /// Verified client domain.
    pub client_domain: String,
    /// Required delegate domain.
    pub required_domain: Option<String>,
    /// Negotiated with the client.
    pub payload: crate::ldp::NegotiatedPayload,
    /// Named policy.
    pub policy: Option<String>,
    /// Idle TTL, ms.
    pub ttl_ms: u64,
}

/// A session's upstream binding for one skill, as every replica sees it.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct SharedBinding {
    /// The delegate's registry name.
    pub delegate: String,
    /// The upstream session with it.
    pub upstream: crate::upstream::UpstreamSession,
}
