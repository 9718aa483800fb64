//! Budgets in USD (per tenant per UTC day and month, per session): a task's declared cost is
//! reserved before it is sent and settled to what it cost after, so concurrent tasks cannot
//! overshoot. Single node: the `BudgetBook` (`crate::limits::budget`). Cluster mode: accounts
//! in Redis — `{p}:budget:{tenant}:day:{n}`, `…:month:{n}`, `{p}:budget:session:{id}` —
//! reserved and settled by one script each, atomically across replicas.
//!
//! When Redis does not answer, a reservation is refused (retryable: a budget is never
//! guessed), and a settle is retried in the background (it is idempotent; a reservation that
//! is never settled lapses after its hold time). Redis may lose a tenant's day or month
//! account: a reservation then answers [`Reserved::Unseeded`], and the caller seeds it from the
//! ledger ([`BudgetStore::seed`]) and asks again.

use super::StoreError;
use crate::config::BudgetConfig;
use crate::limits::{BudgetBook, BudgetExceeded, Reservation};
use crate::session::ClientSession;
use std::future::Future;
use std::sync::LazyLock;

mod redis;
pub(super) use redis::session_account;
pub use redis::{RedisBudgets, SharedReservation};

/// The outcome of a reservation.
#[derive(Debug)]
pub enum Reserved<H> {
    /// Held; settle it when the task ends.
    Held(H),
    /// A budget would be exceeded.
    Exceeded(BudgetExceeded),
    /// The tenant's day or month account holds no spend yet (Redis lost it, or was down when
    /// the replicas started): seed it with [`BudgetStore::seed`] and ask again.
    Unseeded,
}

/// Holds money against budgets while tasks run.
pub trait BudgetStore {
    /// Money held by one reservation.
    type Hold: Send;

    /// Reserves `amount` against `tenant`'s day and month budgets and `session`'s, within
    /// `limits`, or says which would be exceeded.
    fn reserve(
        &self,
        tenant: &str,
        limits: &BudgetConfig,
        session: &ClientSession,
        amount: f64,
    ) -> impl Future<Output = Result<Reserved<Self::Hold>, StoreError>> + Send;

    /// Releases `hold` and charges `actual` (0 for a failed task). Never fails: what cannot
    /// be recorded now is retried in the background.
    fn settle(
        &self,
        hold: Self::Hold,
        session: &ClientSession,
        actual: f64,
    ) -> impl Future<Output = ()> + Send;

    /// Sets `tenant`'s spend this UTC day and month (read from the ledger) unless already
    /// known: the first replica to seed wins.
    fn seed(
        &self,
        tenant: &str,
        day_spent: f64,
        month_spent: f64,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// `(day spent, month spent)` of `tenant`.
    fn spent(&self, tenant: &str) -> impl Future<Output = Result<(f64, f64), StoreError>> + Send;
}

/// The budgets chosen at start.
pub enum Budgets {
    /// Single node.
    Local(LocalBudgets),
    /// Cluster mode.
    Shared(RedisBudgets),
}

/// A hold of either kind (one store only ever settles its own).
#[derive(Debug)]
#[must_use = "a reservation must be settled"]
pub enum Hold {
    /// In this process.
    Local(Reservation),
    /// In Redis.
    Shared(SharedReservation),
}

/// The book of a gateway that keeps none (cluster mode), for [`Budgets::book`].
static NO_BOOK: LazyLock<BudgetBook> = LazyLock::new(BudgetBook::default);

impl Budgets {
    /// This process's budget book: a single node's spend; empty in cluster mode, whose spend
    /// is in Redis ([`BudgetStore::spent`]).
    pub fn book(&self) -> &BudgetBook {
        match self {
            Budgets::Local(l) => &l.book,
            Budgets::Shared(_) => &NO_BOOK,
        }
    }
}

impl Budgets {
    /// Releases `hold` with nothing charged, without waiting: for a hold whose task was
    /// dropped or unwound before it could settle (the local book at once; Redis in the
    /// background, as tracked work).
    pub fn release(&self, hold: Hold, session: &ClientSession) {
        match (self, hold) {
            (Budgets::Local(l), Hold::Local(h)) => l.book.settle(h, &session.spend, 0.0),
            (Budgets::Shared(r), Hold::Shared(h)) => r.settle_later(h, 0.0, &[0, 1_000, 5_000]),
            (Budgets::Local(_), Hold::Shared(_)) | (Budgets::Shared(_), Hold::Local(_)) => {
                tracing::error!("a budget hold was released in a store that did not make it");
            }
        }
    }
}

impl BudgetStore for Budgets {
    type Hold = Hold;

    async fn reserve(
        &self,
        tenant: &str,
        limits: &BudgetConfig,
        session: &ClientSession,
        amount: f64,
    ) -> Result<Reserved<Hold>, StoreError> {
        Ok(match self {
            Budgets::Local(l) => match l.reserve(tenant, limits, session, amount).await? {
                Reserved::Held(h) => Reserved::Held(Hold::Local(h)),
                Reserved::Exceeded(e) => Reserved::Exceeded(e),
                Reserved::Unseeded => Reserved::Unseeded,
            },
            Budgets::Shared(r) => match r.reserve(tenant, limits, session, amount).await? {
                Reserved::Held(h) => Reserved::Held(Hold::Shared(h)),
                Reserved::Exceeded(e) => Reserved::Exceeded(e),
                Reserved::Unseeded => Reserved::Unseeded,
            },
        })
    }

    async fn settle(&self, hold: Hold, session: &ClientSession, actual: f64) {
        match (self, hold) {
            (Budgets::Local(l), Hold::Local(h)) => l.settle(h, session, actual).await,
            (Budgets::Shared(r), Hold::Shared(h)) => r.settle(h, session, actual).await,
            // Not reachable: the store is chosen once, at start, and makes every hold.
            (Budgets::Local(_), Hold::Shared(_)) | (Budgets::Shared(_), Hold::Local(_)) => {
                tracing::error!("a budget hold was settled in a store that did not make it");
            }
        }
    }

    async fn seed(&self, tenant: &str, day_spent: f64, month_spent: f64) -> Result<(), StoreError> {
        match self {
            Budgets::Local(l) => l.seed(tenant, day_spent, month_spent).await,
            Budgets::Shared(r) => r.seed(tenant, day_spent, month_spent).await,
        }
    }

    async fn spent(&self, tenant: &str) -> Result<(f64, f64), StoreError> {
        match self {
            Budgets::Local(l) => l.spent(tenant).await,
            Budgets::Shared(r) => r.spent(tenant).await,
        }
    }
}

/// Single node: the budget book in this process (every answer immediate).
#[derive(Debug, Default)]
pub struct LocalBudgets {
    book: BudgetBook,
}

impl BudgetStore for LocalBudgets {
    type Hold = Reservation;

    fn reserve(
        &self,
        tenant: &str,
        limits: &BudgetConfig,
        session: &ClientSession,
        amount: f64,
    ) -> impl Future<Output = Result<Reserved<Reservation>, StoreError>> + Send {
        let out = match self.book.reserve(tenant, limits, &session.spend, amount) {
            Ok(r) => Reserved::Held(r),
            Err(e) => Reserved::Exceeded(e),
        };
        std::future::ready(Ok(out))
    }

    fn settle(
        &self,
        hold: Reservation,
        session: &ClientSession,
        actual: f64,
    ) -> impl Future<Output = ()> + Send {
        self.book.settle(hold, &session.spend, actual);
        std::future::ready(())
    }

    /// At start, before any task: the book's day and month are set to these sums.
    fn seed(
        &self,
        tenant: &str,
        day_spent: f64,
        month_spent: f64,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        self.book.restore(tenant, day_spent, month_spent);
        std::future::ready(Ok(()))
    }

    fn spent(&self, tenant: &str) -> impl Future<Output = Result<(f64, f64), StoreError>> + Send {
        std::future::ready(Ok(self.book.spent(tenant)))
    }
}

#[cfg(test)]
mod tests;
