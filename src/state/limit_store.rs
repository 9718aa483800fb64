//! Rate-limit admission: on a single node the limiter the caller holds decides (the tenant's,
//! the delegate's, the policy's, in `crate::limits`); in cluster mode one GCRA in Redis, shared
//! by every replica, and while Redis does not answer a local limiter at limit ÷ `replicas`.

use crate::config::RateConfig;
use crate::limits::Scope;
use std::future::Future;
use std::time::Duration;

mod redis;
pub use redis::RedisLimits;

/// Decides admissions.
pub trait LimitStore {
    /// One admission by the limit `rate` of `scope` at `key` (a tenant, a delegate, a policy,
    /// `tenant × skill`): `Ok(())` admitted, `Err(wait)` refused until `wait` has passed.
    /// `local` takes a token from this process's limiter for the same limit.
    fn admit<F>(
        &self,
        scope: Scope,
        key: &str,
        rate: &RateConfig,
        local: F,
    ) -> impl Future<Output = Result<(), Duration>> + Send
    where
        F: FnOnce() -> Result<(), Duration> + Send;

    /// Forgets limiter state that has refilled (the sweeper calls it).
    fn prune(&self);

    /// Limiter keys held by the store itself (tests and diagnostics).
    fn keys(&self) -> usize;
}

/// The limits chosen at start.
pub enum Limits {
    /// Single node.
    Local(LocalLimits),
    /// Cluster mode.
    Shared(RedisLimits),
}

impl LimitStore for Limits {
    async fn admit<F>(
        &self,
        scope: Scope,
        key: &str,
        rate: &RateConfig,
        local: F,
    ) -> Result<(), Duration>
    where
        F: FnOnce() -> Result<(), Duration> + Send,
    {
        match self {
            Limits::Local(l) => l.admit(scope, key, rate, local).await,
            Limits::Shared(r) => r.admit(scope, key, rate, local).await,
        }
    }

    fn prune(&self) {
        match self {
            Limits::Local(l) => l.prune(),
            Limits::Shared(r) => r.prune(),
        }
    }

    fn keys(&self) -> usize {
        match self {
            Limits::Local(l) => l.keys(),
            Limits::Shared(r) => r.keys(),
        }
    }
}

/// Single node: the caller's own limiter decides, with no state here (and no allocation).
#[derive(Debug, Default)]
pub struct LocalLimits;

impl LimitStore for LocalLimits {
    fn admit<F>(
        &self,
        _scope: Scope,
        _key: &str,
        _rate: &RateConfig,
        local: F,
    ) -> impl Future<Output = Result<(), Duration>> + Send
    where
        F: FnOnce() -> Result<(), Duration> + Send,
    {
        std::future::ready(local())
    }

    fn prune(&self) {}

    fn keys(&self) -> usize {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::redis::Redis;

    fn rate(rps: f64, burst: u32) -> RateConfig {
        RateConfig {
            rps,
            burst: Some(burst),
        }
    }

    #[tokio::test]
    async fn local_limits_ask_the_callers_limiter() {
        let l = Limits::Local(LocalLimits);
        let r = rate(1.0, 1);
        assert_eq!(l.admit(Scope::Tenant, "t", &r, || Ok(())).await, Ok(()));
        let wait = Duration::from_millis(7);
        assert_eq!(
            l.admit(Scope::Tenant, "t", &r, || Err(wait)).await,
            Err(wait)
        );
        assert_eq!(l.keys(), 0);
    }

    #[tokio::test]
    async fn a_shared_limit_is_one_gcra_for_every_replica() {
        let (redis, _) = crate::state::redis::testing::redis();
        let a = Limits::Shared(RedisLimits::new(redis.clone(), 2));
        let b = Limits::Shared(RedisLimits::new(redis, 2));
        let r = rate(0.001, 3);
        let never = || -> Result<(), Duration> { panic!("the local limiter is not asked") };
        for l in [&a, &b, &a] {
            assert_eq!(l.admit(Scope::Tenant, "acme", &r, never).await, Ok(()));
        }
        let wait = b.admit(Scope::Tenant, "acme", &r, never).await.unwrap_err();
        assert!(wait > Duration::from_secs(100), "{wait:?}");
        // Another key, and another scope with the same key, have limits of their own.
        assert!(a.admit(Scope::Policy, "acme", &r, never).await.is_ok());
        assert!(a.admit(Scope::Tenant, "other", &r, never).await.is_ok());
        assert_eq!(a.keys(), 0, "no fallback was needed");
    }

    #[tokio::test]
    async fn while_redis_is_silent_each_replica_admits_its_share_and_counts_it() {
        let mut cfg = crate::state::redis::testing::config();
        // Nothing listens there: every call fails at once.
        cfg.redis_url = Some("redis://127.0.0.1:1".into());
        cfg.redis_timeout = Duration::from_millis(200);
        let metrics = std::sync::Arc::new(crate::telemetry::Metrics::new().unwrap());
        let redis = Redis::connect(&cfg, metrics.clone()).unwrap().unwrap();
        let l = Limits::Shared(RedisLimits::new(redis, 3));
        let r = rate(0.001, 6);
        let mut admitted = 0;
        for _ in 0..5 {
            if l.admit(Scope::Tenant, "acme", &r, || Ok(())).await.is_ok() {
                admitted += 1;
            }
        }
        assert_eq!(admitted, 2, "a third of the burst of 6");
        assert_eq!(l.keys(), 1);
        let fallbacks = metrics
            .rate_limit_fallbacks
            .with_label_values(&["tenant"])
            .get();
        assert_eq!(fallbacks, 5);
    }
}
