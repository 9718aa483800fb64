//! Rate limits in Redis: one GCRA per limit on Redis' clock, shared by every replica, and the
//! local fallback at limit ÷ `replicas` while Redis does not answer.

use super::LimitStore;
use crate::config::RateConfig;
use crate::limits::{LimiterMap, Scope};
use crate::state::redis::Redis;
use crate::state::StoreError;
use std::sync::LazyLock;
use std::time::Duration;

/// GCRA over Redis' clock. KEYS[1]: the limit's key. ARGV: emission interval (ms), burst.
/// Returns `{1, '0'}` (admitted) or `{0, wait_ms}`.
static GCRA: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(
        r"
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
",
    )
});

/// Cluster mode: every replica shares each limit (`{prefix}:rl:{scope}:{key}`).
pub struct RedisLimits {
    redis: Redis,
    replicas: u32,
    /// Local limiters at limit ÷ replicas, used while Redis does not answer.
    fallback: LimiterMap,
}

impl RedisLimits {
    /// Limits shared through `redis` by `replicas` gateways.
    pub fn new(redis: Redis, replicas: u32) -> RedisLimits {
        RedisLimits {
            redis,
            replicas: replicas.max(1),
            fallback: LimiterMap::default(),
        }
    }

    /// One admission by the shared limit at `key` (e.g. `tenant:acme`): `Ok(Ok(()))`
    /// admitted, `Ok(Err(wait))` refused, `Err` when Redis did not answer.
    pub async fn admit_shared(
        &self,
        key: &str,
        rate: &RateConfig,
    ) -> Result<Result<(), Duration>, StoreError> {
        if !(rate.rps.is_finite() && rate.rps > 0.0) {
            return Ok(Ok(()));
        }
        let burst = rate.burst.unwrap_or(rate.rps.ceil() as u32).max(1);
        let interval_ms = 1000.0 / rate.rps;
        let mut inv = GCRA.key(self.redis.key(format_args!("rl:{key}")));
        inv.arg(interval_ms).arg(burst);
        let (admitted, wait): (i64, Option<String>) = self.redis.invoke("rate_limit", &inv).await?;
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
}

impl LimitStore for RedisLimits {
    /// Shared by every replica; while Redis does not answer, a local limiter at limit ÷
    /// replicas decides (counted in `ldp_gateway_rate_limit_local_fallbacks_total`).
    async fn admit<F>(
        &self,
        scope: Scope,
        key: &str,
        rate: &RateConfig,
        _local: F,
    ) -> Result<(), Duration>
    where
        F: FnOnce() -> Result<(), Duration> + Send,
    {
        let key = format!("{}:{key}", scope.as_str());
        match self.admit_shared(&key, rate).await {
            Ok(decided) => decided,
            Err(_) => {
                self.redis
                    .metrics()
                    .rate_limit_fallbacks
                    .with_label_values(&[scope.as_str()])
                    .inc();
                let share = crate::limits::share(rate, self.replicas);
                self.fallback.check(&key, &share)
            }
        }
    }

    fn prune(&self) {
        self.fallback.retain_recent();
    }

    fn keys(&self) -> usize {
        self.fallback.len()
    }
}
