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

use super::redis::Redis;
use super::StoreError;
use crate::config::BudgetConfig;
use crate::limits::{BudgetBook, BudgetExceeded, Reservation};
use crate::session::ClientSession;
use std::future::Future;
use std::sync::LazyLock;
use std::time::Duration;

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

/// Budget reservation. KEYS: day, month, session accounts (hashes: `spent`, and one field
/// `r:{id}` = `amount|expiry ms` per reservation held). ARGV: amount, the three limits
/// (negative: none), the three TTLs (s), the reservation id, how long it may be held (ms).
/// Expired reservations (a replica died mid-task, a reply was lost) are dropped as they are
/// met. Returns `{'ok'}`, `{'unseeded'}` (a budgeted day or month account has no spend from the
/// ledger yet: seed it and ask again) or `{which, limit, spent, reserved}`.
static RESERVE: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(
        r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local amount = tonumber(ARGV[1])
for i = 1, 2 do
  if tonumber(ARGV[1 + i]) >= 0 and redis.call('HEXISTS', KEYS[i], 'spent') == 0 then
    return {'unseeded'}
  end
end
local names = {'daily', 'monthly', 'session'}
for i = 1, 3 do
  local fields = redis.call('HGETALL', KEYS[i])
  local spent, reserved = 0, 0
  for j = 1, #fields, 2 do
    local f = fields[j]
    if f == 'spent' then
      spent = tonumber(fields[j + 1])
    elseif string.sub(f, 1, 2) == 'r:' then
      local a, exp = string.match(fields[j + 1], '([^|]+)|(.+)')
      if tonumber(exp) < now then
        redis.call('HDEL', KEYS[i], f)
      else
        reserved = reserved + tonumber(a)
      end
    end
  end
  local limit = tonumber(ARGV[1 + i])
  if limit >= 0 and spent + reserved + amount > limit + 1e-12 then
    return {names[i], tostring(limit), tostring(spent), tostring(reserved)}
  end
end
local held = ARGV[1] .. '|' .. tostring(now + tonumber(ARGV[9]))
for i = 1, 3 do
  redis.call('HSET', KEYS[i], 'r:' .. ARGV[8], held)
  redis.call('EXPIRE', KEYS[i], ARGV[4 + i])
end
return {'ok'}
",
    )
});

/// Settlement, idempotent. KEYS: the reservation's three accounts and its settled marker.
/// ARGV: reservation id, actual cost, the three TTLs (s). The first call releases the
/// reservation and charges the cost (to accounts that hold spend); a repeat does nothing.
static SETTLE: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(
        r"
if not redis.call('SET', KEYS[4], '1', 'NX', 'EX', 86400) then return 0 end
for i = 1, 3 do
  redis.call('HDEL', KEYS[i], 'r:' .. ARGV[1])
  if i == 3 or redis.call('HEXISTS', KEYS[i], 'spent') == 1 then
    redis.call('HINCRBYFLOAT', KEYS[i], 'spent', ARGV[2])
  end
  redis.call('EXPIRE', KEYS[i], ARGV[2 + i])
end
return 1
",
    )
});

/// Restores spend from the ledger unless another replica already did. KEYS: day, month.
/// ARGV: day spent, month spent, day TTL, month TTL.
static RESTORE: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(
        r"
for i = 1, 2 do
  redis.call('HSETNX', KEYS[i], 'spent', ARGV[i])
  redis.call('EXPIRE', KEYS[i], ARGV[2 + i])
end
return 1
",
    )
});

/// How long day and month accounts outlive their period.
const DAY_TTL: u64 = 2 * 86_400;
const MONTH_TTL: u64 = 32 * 86_400;

/// The session's budget account (a session touch keeps it alive as long as the session).
pub(super) fn session_account(redis: &Redis, session_id: &str) -> String {
    redis.key(format_args!("budget:session:{session_id}"))
}

/// A reservation made in Redis: its id and the accounts it holds money in.
#[derive(Debug, Clone)]
#[must_use = "a reservation must be settled"]
pub struct SharedReservation {
    id: String,
    keys: [String; 3],
    ttls: [u64; 3],
}

/// Cluster mode: the accounts in Redis.
#[derive(Clone)]
pub struct RedisBudgets {
    redis: Redis,
    hold: Duration,
    tasks: tokio_util::task::TaskTracker,
}

impl RedisBudgets {
    /// Budgets shared through `redis`. A reservation is held at most `hold` (longer than any
    /// task may take), so money a lost settle would strand comes back by itself; settles
    /// retried in the background are tracked by `tasks` (shutdown waits for them).
    pub fn new(redis: Redis, hold: Duration, tasks: tokio_util::task::TaskTracker) -> Self {
        RedisBudgets { redis, hold, tasks }
    }

    fn accounts(&self, tenant: &str, session: &str) -> [String; 3] {
        let (day, month) = crate::limits::budget::period_keys(chrono::Utc::now());
        [
            self.redis.key(format_args!("budget:{tenant}:day:{day}")),
            self.redis
                .key(format_args!("budget:{tenant}:month:{month}")),
            session_account(&self.redis, session),
        ]
    }

    /// Reserves `amount` against the tenant's day and month budgets and session
    /// `session_id`'s (which lives `session_ttl` past its last use), held at most `hold`.
    pub async fn reserve_for(
        &self,
        tenant: &str,
        session_id: &str,
        session_ttl: Duration,
        limits: &BudgetConfig,
        amount: f64,
        hold: Duration,
    ) -> Result<Reserved<SharedReservation>, StoreError> {
        let amount = amount.max(0.0);
        let keys = self.accounts(tenant, session_id);
        let ttls = [DAY_TTL, MONTH_TTL, session_ttl.as_secs().max(1) + 3600];
        let id = crate::ldp::new_message_id();
        let mut inv = RESERVE.prepare_invoke();
        for k in &keys {
            inv.key(k);
        }
        inv.arg(amount);
        for l in [
            limits.usd_per_day,
            limits.usd_per_month,
            limits.usd_per_session,
        ] {
            inv.arg(l.unwrap_or(-1.0));
        }
        for t in ttls {
            inv.arg(t);
        }
        inv.arg(&id).arg(hold.as_millis().max(1) as u64);
        let out: Vec<String> = self.redis.invoke("budget_reserve", &inv).await?;
        match out.as_slice() {
            [ok] if ok == "ok" => Ok(Reserved::Held(SharedReservation { id, keys, ttls })),
            [unseeded] if unseeded == "unseeded" => Ok(Reserved::Unseeded),
            [which, limit, spent, reserved] => {
                let num = |s: &String| s.parse::<f64>().unwrap_or(0.0);
                let which = match which.as_str() {
                    "daily" => "daily",
                    "monthly" => "monthly",
                    _ => "session",
                };
                Ok(Reserved::Exceeded(BudgetExceeded {
                    which,
                    limit: num(limit),
                    spent: num(spent),
                    reserved: num(reserved),
                    asked: amount,
                }))
            }
            other => Err(StoreError::Redis(format!(
                "unexpected budget answer {other:?}"
            ))),
        }
    }

    /// Releases a reservation and charges `actual`, once: a retry after a lost reply charges
    /// nothing twice.
    pub async fn settle_once(&self, r: &SharedReservation, actual: f64) -> Result<(), StoreError> {
        let mut inv = SETTLE.prepare_invoke();
        for k in &r.keys {
            inv.key(k);
        }
        inv.key(self.redis.key(format_args!("budget:settled:{}", r.id)));
        inv.arg(&r.id).arg(actual.max(0.0));
        for t in r.ttls {
            inv.arg(t);
        }
        self.redis
            .invoke::<i64>("budget_settle", &inv)
            .await
            .map(|_| ())
    }
}

impl BudgetStore for RedisBudgets {
    type Hold = SharedReservation;

    async fn reserve(
        &self,
        tenant: &str,
        limits: &BudgetConfig,
        session: &ClientSession,
        amount: f64,
    ) -> Result<Reserved<SharedReservation>, StoreError> {
        self.reserve_for(tenant, &session.id, session.ttl, limits, amount, self.hold)
            .await
    }

    /// A settle that fails is retried in the background (idempotent), as tracked work.
    async fn settle(&self, hold: SharedReservation, _session: &ClientSession, actual: f64) {
        if self.settle_once(&hold, actual).await.is_ok() {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let this = self.clone();
        self.tasks.spawn_on(
            async move {
                for wait in [100, 1_000, 5_000, 30_000] {
                    tokio::time::sleep(Duration::from_millis(wait)).await;
                    if this.settle_once(&hold, actual).await.is_ok() {
                        return;
                    }
                }
                tracing::error!(actual, "budget settle not recorded in the shared state");
            },
            &rt,
        );
    }

    async fn seed(&self, tenant: &str, day_spent: f64, month_spent: f64) -> Result<(), StoreError> {
        let keys = self.accounts(tenant, "");
        let mut inv = RESTORE.key(&keys[0]);
        inv.key(&keys[1])
            .arg(day_spent)
            .arg(month_spent)
            .arg(DAY_TTL)
            .arg(MONTH_TTL);
        self.redis
            .invoke::<i64>("budget_restore", &inv)
            .await
            .map(|_| ())
    }

    async fn spent(&self, tenant: &str) -> Result<(f64, f64), StoreError> {
        let keys = self.accounts(tenant, "");
        let mut pipe = redis::pipe();
        pipe.hget(&keys[0], "spent").hget(&keys[1], "spent");
        let (d, m): (Option<f64>, Option<f64>) = self.redis.pipeline("budget_read", &pipe).await?;
        Ok((d.unwrap_or(0.0), m.unwrap_or(0.0)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::{NewSession, SessionTable};

    fn session(table: &SessionTable) -> std::sync::Arc<ClientSession> {
        table.open(NewSession {
            owner: "o".into(),
            tenant: "acme".into(),
            client_domain: "default".into(),
            required_domain: None,
            payload: crate::ldp::NegotiatedPayload::text(),
            policy: None,
            ttl: Duration::from_secs(60),
        })
    }

    fn daily(limit: f64) -> BudgetConfig {
        BudgetConfig {
            usd_per_day: Some(limit),
            usd_per_month: None,
            usd_per_session: Some(0.8),
        }
    }

    /// Reserve, exceed, settle, read: what either store must answer.
    async fn holds_and_refuses(store: &Budgets) {
        let table = SessionTable::default();
        let (s1, s2) = (session(&table), session(&table));
        let limits = daily(1.0);
        let Reserved::Held(a) = store.reserve("acme", &limits, &s1, 0.5).await.unwrap() else {
            panic!("first reservation refused")
        };
        let Reserved::Exceeded(e) = store.reserve("acme", &limits, &s1, 0.4).await.unwrap() else {
            panic!("session budget not enforced")
        };
        assert_eq!(e.which, "session");
        let Reserved::Held(b) = store.reserve("acme", &limits, &s2, 0.4).await.unwrap() else {
            panic!("second session refused")
        };
        let Reserved::Exceeded(e) = store.reserve("acme", &limits, &s2, 0.2).await.unwrap() else {
            panic!("daily budget not enforced")
        };
        assert_eq!(e.which, "daily");
        assert!((e.reserved - 0.9).abs() < 1e-9, "{e:?}");
        store.settle(a, &s1, 0.25).await;
        store.settle(b, &s2, 0.0).await;
        let (day, _) = store.spent("acme").await.unwrap();
        assert!((day - 0.25).abs() < 1e-9, "{day}");
        assert!(matches!(
            store.reserve("acme", &limits, &s2, 0.7).await.unwrap(),
            Reserved::Held(_)
        ));
    }

    #[tokio::test]
    async fn local_budgets_hold_refuse_and_settle() {
        let store = Budgets::Local(LocalBudgets::default());
        store.seed("acme", 0.0, 0.0).await.unwrap();
        holds_and_refuses(&store).await;
        assert!((store.book().spent("acme").0 - 0.25).abs() < 1e-9);
    }

    fn redis_budgets() -> (RedisBudgets, Redis) {
        let (redis, _) = crate::state::redis::testing::redis();
        let tasks = tokio_util::task::TaskTracker::new();
        (
            RedisBudgets::new(redis.clone(), Duration::from_secs(60), tasks),
            redis,
        )
    }

    #[tokio::test]
    async fn shared_budgets_ask_to_be_seeded_then_hold_refuse_and_settle() {
        let (r, _) = redis_budgets();
        let store = Budgets::Shared(r);
        let table = SessionTable::default();
        let s = session(&table);
        assert!(matches!(
            store.reserve("acme", &daily(1.0), &s, 0.1).await.unwrap(),
            Reserved::Unseeded
        ));
        store.seed("acme", 0.0, 0.0).await.unwrap();
        // A second seed (another replica, later) does not overwrite.
        store.seed("acme", 5.0, 5.0).await.unwrap();
        assert_eq!(store.spent("acme").await.unwrap(), (0.0, 0.0));
        holds_and_refuses(&store).await;
        assert!(
            store.book().spent("acme") == (0.0, 0.0),
            "no local book in cluster mode"
        );
    }

    #[tokio::test]
    async fn a_shared_settle_counts_once_and_unsettled_holds_lapse() {
        let (r, _) = redis_budgets();
        r.seed("acme", 0.0, 0.0).await.unwrap();
        let limits = daily(1.0);
        let Reserved::Held(h) = r
            .reserve_for(
                "acme",
                "s1",
                Duration::from_secs(60),
                &limits,
                0.5,
                Duration::from_secs(60),
            )
            .await
            .unwrap()
        else {
            panic!("refused")
        };
        r.settle_once(&h, 0.3).await.unwrap();
        r.settle_once(&h, 0.3).await.unwrap();
        assert!((r.spent("acme").await.unwrap().0 - 0.3).abs() < 1e-9);
        // Held for 1 ms and never settled: gone by the next reservation that meets it.
        let Reserved::Held(_lost) = r
            .reserve_for(
                "acme",
                "s2",
                Duration::from_secs(60),
                &limits,
                0.7,
                Duration::from_millis(1),
            )
            .await
            .unwrap()
        else {
            panic!("refused")
        };
        let mut held = false;
        for _ in 0..200 {
            tokio::time::sleep(Duration::from_millis(5)).await;
            if let Reserved::Held(_) = r
                .reserve_for(
                    "acme",
                    "s3",
                    Duration::from_secs(60),
                    &limits,
                    0.7,
                    Duration::from_secs(60),
                )
                .await
                .unwrap()
            {
                held = true;
                break;
            }
        }
        assert!(held, "the lapsed hold was never released");
    }
}
