//! Budgets in USD per tenant (UTC day and month) and per session: a task reserves its
//! candidate's declared cost (× a safety factor) before it is sent and settles to the actual
//! cost after, all under one lock per tenant, so concurrent tasks cannot overshoot.

use crate::config::BudgetConfig;
use dashmap::DashMap;
use std::sync::Mutex;

/// Which budget refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{which} budget of {limit} USD would be exceeded ({spent:.6} spent, {reserved:.6} reserved, {asked:.6} asked)")]
pub struct BudgetExceeded {
    /// `daily`, `monthly` or `session`.
    pub which: &'static str,
    /// The limit.
    pub limit: f64,
    /// Spent so far.
    pub spent: f64,
    /// Held by tasks in flight.
    pub reserved: f64,
    /// This task's reservation.
    pub asked: f64,
}

#[derive(Debug, Default, Clone, Copy)]
struct Period {
    key: i64,
    spent: f64,
    reserved: f64,
}

impl Period {
    fn roll(&mut self, key: i64) {
        if self.key != key {
            *self = Period {
                key,
                spent: 0.0,
                reserved: self.reserved,
            };
        }
    }
}

#[derive(Debug, Default)]
struct Account {
    day: Period,
    month: Period,
}

/// Spend per session: `(spent, reserved)`.
#[derive(Debug, Default)]
pub struct SessionSpend(Mutex<(f64, f64)>);

/// A reservation to settle with [`BudgetBook::settle`].
#[derive(Debug)]
#[must_use = "a reservation must be settled"]
pub struct Reservation {
    tenant: String,
    amount: f64,
    day: i64,
    month: i64,
}

/// All tenants' spend.
#[derive(Debug, Default)]
pub struct BudgetBook {
    accounts: DashMap<String, Mutex<Account>>,
}

fn day_key(now: chrono::DateTime<chrono::Utc>) -> i64 {
    now.timestamp().div_euclid(86_400)
}

fn month_key(now: chrono::DateTime<chrono::Utc>) -> i64 {
    use chrono::Datelike;
    i64::from(now.year()) * 12 + i64::from(now.month0())
}

/// The numbers of the UTC day and month `now` falls in (the shared accounts' keys).
pub fn period_keys(now: chrono::DateTime<chrono::Utc>) -> (i64, i64) {
    (day_key(now), month_key(now))
}

/// Start of the current UTC day and month, Unix ms (for restoring spend from the ledger).
pub fn period_starts(now: chrono::DateTime<chrono::Utc>) -> (i64, i64) {
    use chrono::{Datelike, TimeZone};
    let day = day_key(now) * 86_400_000;
    let month = chrono::Utc
        .with_ymd_and_hms(now.year(), now.month(), 1, 0, 0, 0)
        .single()
        .map_or(day, |t| t.timestamp_millis());
    (day, month)
}

fn check(
    which: &'static str,
    limit: Option<f64>,
    spent: f64,
    reserved: f64,
    asked: f64,
) -> Result<(), BudgetExceeded> {
    match limit {
        Some(limit) if spent + reserved + asked > limit + 1e-12 => Err(BudgetExceeded {
            which,
            limit,
            spent,
            reserved,
            asked,
        }),
        _ => Ok(()),
    }
}

impl BudgetBook {
    /// Restores a tenant's spend (from the ledger at start).
    pub fn restore(&self, tenant: &str, day_spent: f64, month_spent: f64) {
        let now = chrono::Utc::now();
        let acct = self.accounts.entry(tenant.to_owned()).or_default();
        let mut a = acct.lock().unwrap_or_else(|p| p.into_inner());
        a.day = Period {
            key: day_key(now),
            spent: day_spent,
            reserved: 0.0,
        };
        a.month = Period {
            key: month_key(now),
            spent: month_spent,
            reserved: 0.0,
        };
    }

    /// Reserves `amount` against the tenant's and the session's budgets, or says which one
    /// would be exceeded.
    pub fn reserve(
        &self,
        tenant: &str,
        limits: &BudgetConfig,
        session: &SessionSpend,
        amount: f64,
    ) -> Result<Reservation, BudgetExceeded> {
        let amount = amount.max(0.0);
        let now = chrono::Utc::now();
        let (dk, mk) = (day_key(now), month_key(now));
        let acct = self.accounts.entry(tenant.to_owned()).or_default();
        let mut a = acct.lock().unwrap_or_else(|p| p.into_inner());
        a.day.roll(dk);
        a.month.roll(mk);
        let mut s = session.0.lock().unwrap_or_else(|p| p.into_inner());
        check(
            "daily",
            limits.usd_per_day,
            a.day.spent,
            a.day.reserved,
            amount,
        )?;
        check(
            "monthly",
            limits.usd_per_month,
            a.month.spent,
            a.month.reserved,
            amount,
        )?;
        check("session", limits.usd_per_session, s.0, s.1, amount)?;
        a.day.reserved += amount;
        a.month.reserved += amount;
        s.1 += amount;
        Ok(Reservation {
            tenant: tenant.to_owned(),
            amount,
            day: dk,
            month: mk,
        })
    }

    /// Releases the reservation and charges `actual` (0 for a failed task).
    pub fn settle(&self, r: Reservation, session: &SessionSpend, actual: f64) {
        let actual = actual.max(0.0);
        if let Some(acct) = self.accounts.get(&r.tenant) {
            let mut guard = acct.lock().unwrap_or_else(|p| p.into_inner());
            let a = &mut *guard;
            for (p, key) in [(&mut a.day, r.day), (&mut a.month, r.month)] {
                p.reserved = (p.reserved - r.amount).max(0.0);
                if p.key == key {
                    p.spent += actual;
                }
            }
        }
        let mut s = session.0.lock().unwrap_or_else(|p| p.into_inner());
        s.1 = (s.1 - r.amount).max(0.0);
        s.0 += actual;
    }

    /// `(day spent, month spent)` of a tenant.
    pub fn spent(&self, tenant: &str) -> (f64, f64) {
        self.accounts.get(tenant).map_or((0.0, 0.0), |acct| {
            let a = acct.lock().unwrap_or_else(|p| p.into_inner());
            (a.day.spent, a.month.spent)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_prevent_overshoot_and_name_the_budget() {
        let book = BudgetBook::default();
        let limits = BudgetConfig {
            usd_per_day: Some(1.0),
            usd_per_month: None,
            usd_per_session: Some(0.5),
        };
        let s1 = SessionSpend::default();
        let s2 = SessionSpend::default();
        let r1 = book.reserve("t", &limits, &s1, 0.4).unwrap();
        let e = book.reserve("t", &limits, &s1, 0.2).unwrap_err();
        assert_eq!(e.which, "session");
        let r2 = book.reserve("t", &limits, &s2, 0.4).unwrap();
        let e = book
            .reserve("t", &limits, &SessionSpend::default(), 0.3)
            .unwrap_err();
        assert_eq!(e.which, "daily");
        book.settle(r1, &s1, 0.1);
        book.settle(r2, &s2, 0.0);
        assert!((book.spent("t").0 - 0.1).abs() < 1e-12);
        assert!(book
            .reserve("t", &limits, &SessionSpend::default(), 0.45)
            .is_ok());
    }

    #[test]
    fn concurrent_reservations_never_exceed_the_limit() {
        let book = std::sync::Arc::new(BudgetBook::default());
        let limits = BudgetConfig {
            usd_per_day: Some(1.0),
            usd_per_month: None,
            usd_per_session: None,
        };
        let granted: usize = std::thread::scope(|s| {
            let handles: Vec<_> = (0..50)
                .map(|_| {
                    let book = book.clone();
                    let limits = limits.clone();
                    s.spawn(move || {
                        let spend = SessionSpend::default();
                        match book.reserve("t", &limits, &spend, 0.03) {
                            Ok(r) => {
                                book.settle(r, &spend, 0.03);
                                1
                            }
                            Err(_) => 0,
                        }
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap_or(0)).sum()
        });
        assert_eq!(granted, 33);
        assert!(book.spent("t").0 <= 1.0 + 1e-9);
    }
}
