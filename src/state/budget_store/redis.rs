//! Budgets in Redis: per-tenant day and month accounts and per-session accounts, reserved and
//! settled by one Lua script each (atomic across replicas, on Redis' clock), seeded from the
//! ledger when Redis lost them.

use super::{BudgetStore, Reserved};
use crate::config::BudgetConfig;
use crate::limits::BudgetExceeded;
use crate::session::ClientSession;
use crate::state::redis::Redis;
use crate::state::StoreError;
use std::sync::LazyLock;
use std::time::Duration;

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
pub(in crate::state) fn session_account(redis: &Redis, session_id: &str) -> String {
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

impl RedisBudgets {
    /// Settles `hold` in the background (tracked work), after each of `waits` (ms) until it
    /// is recorded; nothing outside a runtime (it lapses after its hold time then).
    pub(in crate::state) fn settle_later(
        &self,
        hold: SharedReservation,
        actual: f64,
        waits: &'static [u64],
    ) {
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let this = self.clone();
        self.tasks.spawn_on(
            async move {
                for wait in waits {
                    tokio::time::sleep(Duration::from_millis(*wait)).await;
                    if this.settle_once(&hold, actual).await.is_ok() {
                        return;
                    }
                }
                tracing::error!(actual, "budget settle not recorded in the shared state");
            },
            &rt,
        );
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
        self.settle_later(hold, actual, &[100, 1_000, 5_000, 30_000]);
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
