//! Rate limits (governor: a GCRA per tenant, tenant × skill, policy and delegate) and budgets
//! (reserve at admission, settle after, so concurrent tasks cannot overshoot).

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
}

impl Scope {
    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Tenant => "tenant",
            Scope::TenantSkill => "tenant_skill",
            Scope::Policy => "policy",
            Scope::Delegate => "delegate",
        }
    }
}

fn quota(rate: &RateConfig) -> Option<Quota> {
    if !(rate.rps.is_finite() && rate.rps > 0.0) {
        return None;
    }
    let burst = rate.burst.unwrap_or(rate.rps.ceil() as u32).max(1);
    let period = Duration::from_secs_f64(1.0 / rate.rps);
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
