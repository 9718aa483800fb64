//! Cluster mode's budget accounts read and written directly, outside a gateway (tests, tools):
//! the names these had before cluster mode's state moved, by concern, to [`crate::state`]
//! (limits, budgets, sessions, nonces, each with its Redis implementation there).

use crate::config::ClusterConfig;
use crate::state::budget_store::RedisBudgets;
use crate::state::redis::Redis;
use crate::state::BudgetStore;
use crate::telemetry::Metrics;
use std::sync::Arc;
use std::time::Duration;

pub use crate::state::budget_store::SharedReservation;
pub use crate::state::StoreError as ClusterError;

/// The outcome of a reservation in Redis.
pub type Reserved = crate::state::Reserved<SharedReservation>;

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

/// The budget accounts in the Redis a `[cluster]` section names.
pub struct Cluster {
    budgets: RedisBudgets,
}

impl Cluster {
    /// The accounts in `cfg`'s Redis (`None` without `redis_url`), connected lazily.
    pub fn from_config(
        cfg: &ClusterConfig,
        metrics: Arc<Metrics>,
    ) -> Result<Option<Arc<Cluster>>, ClusterError> {
        let Some(redis) = Redis::connect(cfg, metrics)? else {
            return Ok(None);
        };
        // Settles here are awaited by the caller, never retried in the background.
        let budgets = RedisBudgets::new(redis, Duration::ZERO, Default::default());
        Ok(Some(Arc::new(Cluster { budgets })))
    }

    /// Reserves `amount` for `tenant` and session `session` (which lives `session_ttl` past
    /// its last use) within `limits`, held at most `hold`.
    pub async fn reserve(
        &self,
        tenant: &str,
        session: &str,
        session_ttl: Duration,
        limits: BudgetLimits,
        amount: f64,
        hold: Duration,
    ) -> Result<Reserved, ClusterError> {
        let limits = crate::config::BudgetConfig {
            usd_per_day: limits.day,
            usd_per_month: limits.month,
            usd_per_session: limits.session,
        };
        self.budgets
            .reserve_for(tenant, session, session_ttl, &limits, amount, hold)
            .await
    }

    /// Releases a reservation and charges `actual`, once.
    pub async fn settle(&self, r: &SharedReservation, actual: f64) -> Result<(), ClusterError> {
        self.budgets.settle_once(r, actual).await
    }

    /// `(day spent, month spent)` of a tenant.
    pub async fn spent(&self, tenant: &str) -> Result<(f64, f64), ClusterError> {
        self.budgets.spent(tenant).await
    }
}
