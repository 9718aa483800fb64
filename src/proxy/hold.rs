//! Holds: money reserved against budgets while a task runs, settled with what it cost; spend
//! restored from the ledger at start. Where the money is kept (this process or Redis) is the
//! budget store's business (`crate::state::budget_store`).

use super::task::TaskCtx;
use super::Proxy;
use crate::config::BudgetConfig;
use crate::ldp::error::GatewayCode;
use crate::ldp::LdpError;
use crate::limits::BudgetExceeded;
use crate::provenance::LedgerError;
use crate::registry::Delegate;
use crate::session::ClientSession;
use crate::state::{BudgetStore, ConversationStore, Hold, Reserved, StoreError};
use crate::tenant::Tenant;

/// Why a tenant's spend could not be seeded from the ledger.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SeedError {
    /// The ledger could not be read.
    #[error("past spend not read from the ledger: {0}")]
    Ledger(#[from] LedgerError),
    /// The budget store did not take it.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl Proxy {
    /// Reserves the delegate's declared cost against the tenant's and the session's budgets
    /// (refused, retryable, when the shared state does not answer: a budget is never
    /// guessed). An account the store has lost is seeded from the ledger, once.
    ///
    /// An OpenAI ingress request is a session of its own: `usd_per_session` caps each one
    /// (what it may hold), not the tenant's ingress traffic together.
    pub(super) async fn reserve(
        &self,
        t: &TaskCtx<'_>,
        delegate: &Delegate,
    ) -> Result<Option<Hold>, LdpError> {
        let (session, tenant): (&ClientSession, &Tenant) = (t.session, t.tenant);
        let per_request = t.task.chat.is_some();
        let request_cap = tenant.budget.usd_per_session.filter(|_| per_request);
        let ingress_limits;
        let b = if per_request {
            ingress_limits = BudgetConfig {
                usd_per_session: None,
                ..tenant.budget.clone()
            };
            &ingress_limits
        } else {
            &tenant.budget
        };
        if b.usd_per_day.is_none()
            && b.usd_per_month.is_none()
            && b.usd_per_session.is_none()
            && request_cap.is_none()
        {
            return Ok(None);
        }
        let amount =
            self.estimated_cost(t, delegate).await * self.cfg.routing.budget_reserve_factor;
        if let Some(limit) = request_cap.filter(|limit| amount > limit + 1e-12) {
            let e = BudgetExceeded {
                which: "session",
                limit,
                spent: 0.0,
                reserved: 0.0,
                asked: amount,
            };
            return Err(LdpError::gateway(
                GatewayCode::BudgetExceeded,
                format!("{e} (on the OpenAI ingress, per request)"),
            ));
        }
        if b.usd_per_day.is_none() && b.usd_per_month.is_none() && b.usd_per_session.is_none() {
            return Ok(None);
        }
        let unavailable = |e: &dyn std::fmt::Display| {
            LdpError::gateway(GatewayCode::Unavailable, format!("budget not checked: {e}"))
        };
        for seeded in [false, true] {
            let reserved = self
                .budgets
                .reserve(&tenant.name, b, session, amount)
                .await
                .map_err(|e| unavailable(&e))?;
            match reserved {
                Reserved::Held(h) => return Ok(Some(h)),
                Reserved::Exceeded(e) => {
                    return Err(LdpError::gateway(
                        GatewayCode::BudgetExceeded,
                        e.to_string(),
                    ))
                }
                Reserved::Unseeded if !seeded => {
                    self.seed_spend(&tenant.name)
                        .await
                        .map_err(|e| unavailable(&e))?;
                }
                Reserved::Unseeded => break,
            }
        }
        Err(unavailable(&"the tenant's spend could not be seeded"))
    }

    /// Holds `hold` for an attempt at `t`: settled by [`Held::settle`], or released with
    /// nothing charged if the attempt is dropped or unwinds first.
    pub(super) fn held<'a>(&'a self, t: &TaskCtx<'a>, hold: Option<Hold>) -> Held<'a> {
        Held {
            budgets: &self.budgets,
            session: t.session,
            hold,
        }
    }

    /// What the task is expected to cost at `delegate`: for a token-priced (OpenAI-backed)
    /// delegate, its input (and the conversation sent with it) estimated in tokens plus the
    /// output its request allows (`Proxy::output_tokens`) at the declared prices; else the
    /// card's price per call.
    async fn estimated_cost(&self, t: &TaskCtx<'_>, delegate: &Delegate) -> f64 {
        let upstream = &delegate.upstream;
        // What the request will allow (the attempt sends this bound).
        let output = upstream.output_tokens(t.task.chat, self.cfg.openai.default_max_tokens);
        // Priced by tokens (and not free): estimated from the input's size.
        let Some(prices) = upstream.token_prices() else {
            return self.declared_cost(delegate, t.task.skill).unwrap_or(0.0);
        };
        let input_bytes = match t.task.chat {
            Some(chat) => chat.messages.iter().map(|m| m.text().len()).sum(),
            None => {
                let kept = self
                    .conversations
                    .session_bytes(&t.session.tenant, &t.session.id)
                    .await;
                t.task.input.get().len() + kept
            }
        };
        prices.cost(
            crate::upstream::openai::estimate_tokens(input_bytes),
            output,
        )
    }

    /// The card's price for `skill`: the declared price, else its cost tier's price.
    pub(super) fn declared_cost(&self, delegate: &Delegate, skill: &str) -> Option<f64> {
        let h = delegate.card()?.effective_hints(skill)?;
        h.cost_per_call_usd
            .or_else(|| h.cost_tier.map(|t| self.cfg.routing.tier_prices.of(t)))
    }
}

/// A task's budget hold while its attempt runs. Settled with what the attempt cost
/// ([`Held::settle`]); an attempt that never gets there — dropped (a deadline, a cancel,
/// shutdown) or unwinding from a panic — releases it on drop with nothing charged, so money
/// is never held until a restart.
#[must_use = "a hold is settled with what the attempt cost"]
pub(super) struct Held<'a> {
    budgets: &'a crate::state::Budgets,
    session: &'a ClientSession,
    hold: Option<Hold>,
}

impl Held<'_> {
    /// Releases the hold and charges `charged` (what cannot be recorded now is retried in
    /// the background, as tracked work).
    pub(super) async fn settle(mut self, charged: f64) {
        if let Some(hold) = self.hold.take() {
            self.budgets.settle(hold, self.session, charged).await;
        }
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        if let Some(hold) = self.hold.take() {
            if std::thread::panicking() {
                tracing::warn!("budget hold released while a task unwound");
            }
            self.budgets.release(hold, self.session);
        }
    }
}

impl Proxy {
    /// Restores each budgeted tenant's spend for the current UTC day and month from the
    /// ledger, so budgets survive a restart. In cluster mode every replica reads the same
    /// shared ledger; the first one seeds Redis.
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
            if let Err(e) = self
                .budgets
                .seed(&t.name, spend_of(&d, &t.name), spend_of(&m, &t.name))
                .await
            {
                tracing::warn!(tenant = %t.name, error = %e, "spend not restored into the shared state");
            }
        }
    }

    /// Seeds `tenant`'s day and month accounts from the ledger (cluster mode: Redis lost
    /// them, or was away when the replicas started). Replicas racing here write the same
    /// sums; the first wins.
    pub(crate) async fn seed_spend(&self, tenant: &str) -> Result<(), SeedError> {
        let (day, month) = crate::limits::budget::period_starts(chrono::Utc::now());
        let d = self.ledger.spend_since(day).await?;
        let m = self.ledger.spend_since(month).await?;
        tracing::info!(tenant, "seeding shared budget accounts from the ledger");
        self.budgets
            .seed(tenant, spend_of(&d, tenant), spend_of(&m, tenant))
            .await?;
        Ok(())
    }
}

/// `tenant`'s sum in a ledger spend list (0 if it spent nothing).
fn spend_of(spend: &[(String, f64)], tenant: &str) -> f64 {
    spend
        .iter()
        .find(|(n, _)| n == tenant)
        .map_or(0.0, |(_, s)| *s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{BudgetConfig, Config};
    use crate::session::{NewSession, SessionTable};
    use crate::state::{BudgetStore, Reserved, Stores};
    use std::time::Duration;

    #[tokio::test]
    async fn a_hold_is_released_when_its_attempt_unwinds_or_is_dropped() {
        let budgets = Stores::local(&Config::default()).budgets;
        let table = SessionTable::default();
        let session = table.open(NewSession {
            owner: "o".into(),
            tenant: "acme".into(),
            client_domain: "default".into(),
            required_domain: None,
            payload: crate::ldp::NegotiatedPayload::text(),
            policy: None,
            ttl: Duration::from_secs(60),
        });
        let limits = BudgetConfig {
            usd_per_day: Some(1.0),
            ..BudgetConfig::default()
        };
        let hold = || async {
            match budgets
                .reserve("acme", &limits, &session, 0.6)
                .await
                .unwrap()
            {
                Reserved::Held(h) => Some(h),
                other => panic!("not held: {other:?}"),
            }
        };
        // An attempt that panics while it holds 0.6 of the 1.0.
        let first = hold().await;
        let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _held = Held {
                budgets: &budgets,
                session: &session,
                hold: first,
            };
            panic!("a bug while the attempt runs");
        }));
        assert!(unwound.is_err());
        // An attempt dropped before it settles (a deadline, shutdown).
        let second = hold().await;
        drop(Held {
            budgets: &budgets,
            session: &session,
            hold: second,
        });
        // Both released, nothing charged: 0.6 fits again, and is settled as it cost.
        let third = Held {
            budgets: &budgets,
            session: &session,
            hold: hold().await,
        };
        third.settle(0.25).await;
        assert!((budgets.spent("acme").await.unwrap().0 - 0.25).abs() < 1e-9);
    }
}
