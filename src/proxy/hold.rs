//! Holds: money reserved against budgets while a task runs, settled with what it cost; spend
//! restored from the ledger at start.

use super::Proxy;
use crate::ldp::error::GatewayCode;
use crate::ldp::LdpError;
use crate::registry::Delegate;
use crate::session::ClientSession;
use crate::tenant::Tenant;
use std::time::Duration;

/// Money held against budgets while a task runs.
pub(super) enum Held {
    /// In this process.
    Local(crate::limits::Reservation),
    /// In Redis (cluster mode).
    Shared(crate::cluster::SharedReservation),
}

impl Proxy {
    /// Reserves the delegate's declared cost against the tenant's and the session's budgets:
    /// in this process, or in cluster mode atomically across replicas (refused, retryable,
    /// when Redis does not answer: a budget is never guessed).
    pub(super) async fn reserve(
        &self,
        session: &ClientSession,
        tenant: &Tenant,
        delegate: &Delegate,
        skill: &str,
    ) -> Result<Option<Held>, LdpError> {
        let b = &tenant.budget;
        if b.usd_per_day.is_none() && b.usd_per_month.is_none() && b.usd_per_session.is_none() {
            return Ok(None);
        }
        let declared = self.declared_cost(delegate, skill).unwrap_or(0.0);
        let amount = declared * self.cfg.routing.budget_reserve_factor;
        let exceeded = |e: crate::limits::BudgetExceeded| {
            LdpError::gateway(GatewayCode::BudgetExceeded, e.to_string())
        };
        let Some(c) = &self.cluster else {
            return self
                .budgets
                .reserve(&tenant.name, b, &session.spend, amount)
                .map(|r| Some(Held::Local(r)))
                .map_err(exceeded);
        };
        let limits = crate::cluster::BudgetLimits {
            day: b.usd_per_day,
            month: b.usd_per_month,
            session: b.usd_per_session,
        };
        let unavailable = |e: String| {
            LdpError::gateway(GatewayCode::Unavailable, format!("budget not checked: {e}"))
        };
        // Longer than any task may take: a reservation stranded by a lost reply lapses.
        let hold = self.cfg.upstream.task_timeout * 2 + Duration::from_secs(60);
        for seeded in [false, true] {
            let reserved = c
                .reserve(&tenant.name, &session.id, session.ttl, limits, amount, hold)
                .await
                .map_err(|e| unavailable(e.to_string()))?;
            match reserved {
                crate::cluster::Reserved::Held(r) => return Ok(Some(Held::Shared(r))),
                crate::cluster::Reserved::Exceeded(e) => return Err(exceeded(e)),
                crate::cluster::Reserved::Unseeded if !seeded => {
                    self.seed_spend(&tenant.name).await.map_err(unavailable)?;
                }
                crate::cluster::Reserved::Unseeded => break,
            }
        }
        Err(unavailable("the tenant's spend could not be seeded".into()))
    }

    /// Settles a reservation held in Redis. Settling is idempotent, so a failed attempt is
    /// retried in the background (the reservation itself lapses after its hold time), as
    /// tracked work so that shutdown waits for it.
    pub(super) async fn settle_shared(&self, r: crate::cluster::SharedReservation, charged: f64) {
        let Some(c) = &self.cluster else { return };
        if c.settle(&r, charged).await.is_ok() {
            return;
        }
        let c = c.clone();
        self.spawn_tracked(async move {
            for wait in [100, 1_000, 5_000, 30_000] {
                tokio::time::sleep(Duration::from_millis(wait)).await;
                if c.settle(&r, charged).await.is_ok() {
                    return;
                }
            }
            tracing::error!(charged, "budget settle not recorded in the shared state");
        });
    }

    /// The card's price for `skill`: the declared price, else its cost tier's price.
    pub(super) fn declared_cost(&self, delegate: &Delegate, skill: &str) -> Option<f64> {
        let h = delegate.card()?.effective_hints(skill)?;
        h.cost_per_call_usd
            .or_else(|| h.cost_tier.map(|t| self.cfg.routing.tier_prices.of(t)))
    }
}

impl Proxy {
    /// Restores each budgeted tenant's spend for the current UTC day and month from the
    /// ledger, so budgets survive a restart.
    pub async fn restore_spend(&self) {
        let budgeted = self
            .tenants
            .all()
            .iter()
            .any(|t| t.budget.usd_per_day.is_some() || t.budget.usd_per_month.is_some());
        if !budgeted {
            return;
        }
        let (day, month) = crate::limits::budget::period_starts(chrono::Utc::now());
        let (Ok(d), Ok(m)) = (
            self.ledger.spend_since(day).await,
            self.ledger.spend_since(month).await,
        ) else {
            tracing::warn!("could not read past spend from the ledger; budgets start from zero");
            return;
        };
        for t in self.tenants.all() {
            let find = |v: &[(String, f64)]| {
                v.iter()
                    .find(|(n, _)| *n == t.name)
                    .map_or(0.0, |(_, s)| *s)
            };
            match &self.cluster {
                // Every replica reads the same shared ledger; the first one seeds Redis.
                Some(c) => {
                    if let Err(e) = c.restore_spend(&t.name, find(&d), find(&m)).await {
                        tracing::warn!(tenant = %t.name, error = %e, "spend not restored into the shared state");
                    }
                }
                None => self.budgets.restore(&t.name, find(&d), find(&m)),
            }
        }
    }

    /// Cluster mode: seeds `tenant`'s day and month accounts in Redis from the ledger (Redis
    /// lost them, or was away when the replicas started). Replicas racing here write the
    /// same sums; the first wins.
    pub(crate) async fn seed_spend(&self, tenant: &str) -> Result<(), String> {
        let Some(c) = &self.cluster else {
            return Ok(());
        };
        let (day, month) = crate::limits::budget::period_starts(chrono::Utc::now());
        let d = self
            .ledger
            .spend_since(day)
            .await
            .map_err(|e| e.to_string())?;
        let m = self
            .ledger
            .spend_since(month)
            .await
            .map_err(|e| e.to_string())?;
        let find =
            |v: &[(String, f64)]| v.iter().find(|(n, _)| n == tenant).map_or(0.0, |(_, s)| *s);
        tracing::info!(tenant, "seeding shared budget accounts from the ledger");
        c.restore_spend(tenant, find(&d), find(&m))
            .await
            .map_err(|e| e.to_string())
    }
}
