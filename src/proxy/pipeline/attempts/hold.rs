//! Holds: money reserved against budgets while an attempt runs, settled with what it cost.
//! Where the money is kept (this process or Redis) is the budget store's business
//! (`crate::state::budget_store`); spend restored from the ledger at start is the core's
//! (`Proxy::restore_spend`).

use crate::config::BudgetConfig;
use crate::ldp::error::GatewayCode;
use crate::ldp::LdpError;
use crate::limits::BudgetExceeded;
use crate::proxy::pipeline::task::TaskCtx;
use crate::registry::Delegate;
use crate::session::ClientSession;
use crate::state::{BudgetStore, ConversationStore, Hold, Reserved};
use crate::tenant::Tenant;

impl super::Attempts<'_> {
    /// Reserves the delegate's declared cost against the tenant's and the session's budgets
    /// (refused, retryable, when the shared state does not answer: a budget is never
    /// guessed). An account the store has lost is seeded from the ledger, once.
    ///
    /// An OpenAI ingress request is a session of its own: `usd_per_session` caps each one
    /// (what it may hold), not the tenant's ingress traffic together.
    pub(crate) async fn reserve(
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
                format!("{e} (on a chat ingress, per request)"),
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
    pub(crate) fn held<'a>(&'a self, t: &TaskCtx<'a>, hold: Option<Hold>) -> Held<'a> {
        Held {
            budgets: &self.budgets,
            session: t.session,
            hold,
        }
    }

    /// What the task is expected to cost at `delegate`: for a token-priced (chat) delegate,
    /// its input (the conversation sent with it, the system prompt and tools) estimated in
    /// tokens plus the output its request allows (`Proxy::output_tokens`) at the declared
    /// prices, the input at the cache-write price where that is higher; else the card's price
    /// per call.
    async fn estimated_cost(&self, t: &TaskCtx<'_>, delegate: &Delegate) -> f64 {
        let upstream = &delegate.upstream;
        // What the request will allow (the attempt sends this bound).
        let output = upstream.output_tokens(t.task.chat, self.cfg.openai.default_max_tokens);
        // Priced by tokens (and not free): estimated from the input's size.
        let Some(prices) = upstream.token_prices() else {
            return self.declared_cost(delegate, t.task.skill).unwrap_or(0.0);
        };
        let input_bytes = match t.task.chat {
            Some(chat) => chat.prompt_bytes(),
            None => {
                let kept = self
                    .conversations
                    .session_bytes(&t.session.tenant, &t.session.id)
                    .await;
                t.task.input.get().len() + kept
            }
        };
        prices.most_cost(crate::chat::estimate_tokens(input_bytes), output)
    }
}

/// A task's budget hold while its attempt runs. Settled with what the attempt cost
/// ([`Held::settle`]); an attempt that never gets there — dropped (a deadline, a cancel,
/// shutdown) or unwinding from a panic — releases it on drop with nothing charged, so money
/// is never held until a restart.
#[must_use = "a hold is settled with what the attempt cost"]
pub(crate) struct Held<'a> {
    budgets: &'a crate::state::Budgets,
    session: &'a ClientSession,
    hold: Option<Hold>,
}

impl Held<'_> {
    /// Releases the hold and charges `charged` (what cannot be recorded now is retried in
    /// the background, as tracked work).
    pub(crate) async fn settle(mut self, charged: f64) {
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
