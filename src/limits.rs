//! Rate limits (governor: a GCRA per tenant, tenant × skill, policy and delegate) and budgets
//! (reserve at admission, settle after, so concurrent tasks cannot overshoot), in this
//! process; sharing them across replicas is decided by the layer above, which knows this one.

pub mod budget;

pub use budget::{BudgetBook, BudgetExceeded, Reservation};

use crate::config::RateConfig;
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultDirectRateLimiter, DefaultKeyedRateLimiter, Quota, RateLimiter};
use std::num::NonZeroU32;
use std::time::Duration;

/// Where a refusal came from (`ldp_gateway_rate_limited_total{scope}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// The tenant's request rate.
    Tenant,
    /// The tenant's rate for one skill.
    TenantSkill,
    /// The policy's `[limits]`.
    Policy,
    /// A delegate's limit (routing skips it; counted, never refused to the client alone).
    Delegate,
    /// The tenant's share of a bounded table (`crate::fair`) is full of running entries
    /// (A2A tasks, LADP agents still refilling or running).
    TenantShare,
    /// An LADP agent's message rate (`[ladp] rate_per_minute`, per tenant and sender).
    Agent,
}

impl Scope {
    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Tenant => "tenant",
            Scope::TenantSkill => "tenant_skill",
            Scope::Policy => "policy",
            Scope::Delegate => "delegate",
            Scope::TenantShare => "tenant_share",
            Scope::Agent => "ladp_agent",
        }
    }
}

/// The governor quota for `rate`, or `None` if the rate is not usable (not positive).
/// Never panics: governor keeps `period × burst` in `u64` nanoseconds, so the period is
/// clamped to `[1 ns, 1 / MIN_RPS]` and the burst to what fits beside it (validation refuses
/// such rates long before; this guards the arithmetic, not the policy).
fn quota(rate: &RateConfig) -> Option<Quota> {
    if !(rate.rps.is_finite() && rate.rps > 0.0) {
        return None;
    }
    let period_ns = (1e9 / rate.rps).clamp(1.0, 1e9 / crate::policy::MIN_RPS);
    let period = Duration::from_nanos(period_ns as u64);
    // Saturating casts: `f64 as u32` never panics.
    let burst = rate.burst.unwrap_or(rate.rps.ceil() as u32).max(1);
    let fits = ((u64::MAX / 2) as f64 / period_ns).min(f64::from(u32::MAX)) as u32;
    let burst = burst.min(fits.max(1));
    Quota::with_period(period)
        .map(|q| q.allow_burst(NonZeroU32::new(burst).unwrap_or(NonZeroU32::MIN)))
}

/// `rate` shared by `replicas`: each one's share (at least one admission per burst).
pub fn share(rate: &RateConfig, replicas: u32) -> RateConfig {
    let n = f64::from(replicas.max(1));
    let burst = rate.burst.unwrap_or(rate.rps.ceil() as u32).max(1);
    RateConfig {
        rps: rate.rps / n,
        burst: Some(((f64::from(burst) / n).floor() as u32).max(1)),
    }
}

/// One rate limit.
#[derive(Debug)]
pub struct RateLimit {
    limiter: DefaultDirectRateLimiter,
    /// The configuration it was built from (to notice changes on reload).
    pub rate: RateConfig,
}

impl RateLimit {
    /// A limiter for `rate` (`None` if the rate is not positive).
    pub fn new(rate: &RateConfig) -> Option<RateLimit> {
        Some(RateLimit {
            limiter: RateLimiter::direct(quota(rate)?),
            rate: *rate,
        })
    }

    /// Takes one token, or says how long until one is available.
    pub fn check(&self) -> Result<(), Duration> {
        self.limiter
            .check()
            .map_err(|not_until| not_until.wait_time_from(DefaultClock::default().now()))
    }
}

/// Direct limiters by key, each with its own rate (policy limits; the local fallbacks of
/// cluster mode). A limiter idle for as long as it takes to refill is dropped by
/// [`LimiterMap::retain_recent`]: a new one starts full, which is the state it had reached,
/// so dropping it changes no decision and the map holds only recently used keys.
#[derive(Default)]
pub struct LimiterMap {
    map: dashmap::DashMap<String, MapEntry>,
    epoch: std::sync::OnceLock<std::time::Instant>,
}

struct MapEntry {
    limit: std::sync::Arc<RateLimit>,
    last_used_ms: std::sync::atomic::AtomicU64,
}

impl LimiterMap {
    fn now_ms(&self) -> u64 {
        let epoch = self.epoch.get_or_init(std::time::Instant::now);
        u64::try_from(epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Takes one token from `key`'s limiter at `rate` (created, or replaced when the rate
    /// changed). A rate that is not positive admits.
    pub fn check(&self, key: &str, rate: &RateConfig) -> Result<(), Duration> {
        use std::sync::atomic::Ordering;
        let now = self.now_ms();
        if let Some(e) = self.map.get(key).filter(|e| e.limit.rate == *rate) {
            e.last_used_ms.store(now, Ordering::Relaxed);
            return e.limit.check();
        }
        let Some(limit) = RateLimit::new(rate) else {
            return Ok(());
        };
        let limit = std::sync::Arc::new(limit);
        self.map.insert(
            key.to_owned(),
            MapEntry {
                limit: limit.clone(),
                last_used_ms: std::sync::atomic::AtomicU64::new(now),
            },
        );
        limit.check()
    }

    /// Drops limiters idle long enough to be full again.
    pub fn retain_recent(&self) {
        use std::sync::atomic::Ordering;
        let now = self.now_ms();
        self.map.retain(|_, e| {
            let r = e.limit.rate;
            let burst = f64::from(r.burst.unwrap_or(r.rps.ceil() as u32).max(1));
            let refill_ms = (burst / r.rps * 1000.0).min(u64::MAX as f64) as u64;
            now.saturating_sub(e.last_used_ms.load(Ordering::Relaxed)) <= refill_ms
        });
        self.map.shrink_to_fit();
    }

    /// Keys held.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether none is held.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

/// A rate limit per key (skill); idle keys are dropped by [`KeyedRateLimit::cleanup`].
#[derive(Debug)]
pub struct KeyedRateLimit {
    limiter: DefaultKeyedRateLimiter<String>,
    /// The configuration it was built from.
    pub rate: RateConfig,
}

impl KeyedRateLimit {
    /// A keyed limiter for `rate`.
    pub fn new(rate: &RateConfig) -> Option<KeyedRateLimit> {
        Some(KeyedRateLimit {
            limiter: RateLimiter::keyed(quota(rate)?),
            rate: *rate,
        })
    }

    /// Takes one token for `key`.
    pub fn check(&self, key: &str) -> Result<(), Duration> {
        self.limiter
            .check_key(&key.to_owned())
            .map_err(|not_until| not_until.wait_time_from(DefaultClock::default().now()))
    }

    /// Forgets keys whose state is back to full.
    pub fn cleanup(&self) {
        self.limiter.retain_recent();
        self.limiter.shrink_to_fit();
    }

    /// Keys remembered.
    pub fn len(&self) -> usize {
        self.limiter.len()
    }

    /// Whether no key is remembered.
    pub fn is_empty(&self) -> bool {
        self.limiter.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admits_burst_then_refuses_with_a_wait() {
        let l = RateLimit::new(&RateConfig {
            rps: 10.0,
            burst: Some(3),
        })
        .unwrap();
        assert!((0..3).all(|_| l.check().is_ok()));
        let wait = l.check().unwrap_err();
        assert!(
            wait > Duration::ZERO && wait <= Duration::from_millis(100),
            "{wait:?}"
        );
        assert!(RateLimit::new(&RateConfig {
            rps: 0.0,
            burst: None
        })
        .is_none());
    }

    #[test]
    fn extreme_rates_never_panic() {
        for rps in [5.4e-11, 1e-300, f64::MIN_POSITIVE, 1e-6, 1e12, f64::MAX] {
            for burst in [None, Some(1), Some(u32::MAX)] {
                let r = RateConfig { rps, burst };
                let l = RateLimit::new(&r).unwrap();
                let _ = l.check();
                let k = KeyedRateLimit::new(&r).unwrap();
                let _ = k.check("a");
            }
        }
        use crate::policy::rate_ok;
        assert!(!rate_ok(5.4e-11) && !rate_ok(-1.0) && !rate_ok(f64::NAN) && !rate_ok(2e9));
        assert!(rate_ok(0.5) && rate_ok(1e-6));
    }

    #[test]
    fn limiter_map_forgets_only_keys_that_refilled() {
        let m = LimiterMap::default();
        let fast = RateConfig {
            rps: 1e6,
            burst: Some(1),
        };
        let slow = RateConfig {
            rps: 1e-3,
            burst: Some(1),
        };
        for i in 0..1000 {
            assert!(m.check(&format!("fast{i}"), &fast).is_ok());
        }
        assert!(m.check("slow", &slow).is_ok());
        assert!(m.check("slow", &slow).is_err());
        assert_eq!(m.len(), 1001);
        // 1 µs refill: gone at the first prune a millisecond later; the slow one must stay.
        let later = std::time::Instant::now() + Duration::from_millis(2);
        while std::time::Instant::now() < later {
            std::hint::spin_loop();
        }
        m.retain_recent();
        assert_eq!(m.len(), 1);
        assert!(m.check("slow", &slow).is_err(), "kept state still refuses");
    }

    #[test]
    fn keys_are_independent() {
        let l = KeyedRateLimit::new(&RateConfig {
            rps: 1.0,
            burst: Some(1),
        })
        .unwrap();
        assert!(l.check("a").is_ok());
        assert!(l.check("a").is_err());
        assert!(l.check("b").is_ok());
        assert_eq!(l.len(), 2);
    }
}
