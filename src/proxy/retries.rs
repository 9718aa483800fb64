//! The retry budget: failover may add at most `retry_ratio` of recent tasks, plus a small
//! floor, so a failing fleet is not stampeded by retries.

use crate::config::FallbackConfig;
use std::sync::Mutex;
use tokio::time::Instant;

const BUCKETS: usize = 10;

/// Tasks and retries over a rolling window.
#[derive(Debug)]
pub struct RetryBudget {
    cfg: FallbackConfig,
    epoch: Instant,
    /// `(tasks, retries, bucket number)`.
    buckets: Mutex<[(u64, u64, u64); BUCKETS]>,
}

impl RetryBudget {
    /// An empty budget.
    pub fn new(cfg: FallbackConfig) -> RetryBudget {
        RetryBudget {
            cfg,
            epoch: Instant::now(),
            buckets: Mutex::new([(0, 0, 0); BUCKETS]),
        }
    }

    fn bucket_no(&self, now: Instant) -> u64 {
        let width = (self.cfg.window.as_millis() as u64 / BUCKETS as u64).max(1);
        now.saturating_duration_since(self.epoch).as_millis() as u64 / width
    }

    fn with<T>(&self, f: impl FnOnce(&mut [(u64, u64, u64); BUCKETS], u64) -> T) -> T {
        let n = self.bucket_no(Instant::now());
        let mut b = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        let slot = &mut b[(n % BUCKETS as u64) as usize];
        if slot.2 != n {
            *slot = (0, 0, n);
        }
        f(&mut b, n)
    }

    /// Counts one task (a deposit into the budget).
    pub fn task(&self) {
        self.with(|b, n| b[(n % BUCKETS as u64) as usize].0 += 1);
    }

    /// Takes one retry if the budget allows.
    pub fn try_retry(&self) -> bool {
        self.with(|b, n| {
            let (tasks, retries) = b
                .iter()
                .filter(|x| x.2 <= n && n - x.2 < BUCKETS as u64)
                .fold((0u64, 0u64), |(t, r), x| (t + x.0, r + x.1));
            let allowed = self.cfg.retry_ratio * tasks as f64 + f64::from(self.cfg.retry_floor);
            if (retries as f64) < allowed {
                b[(n % BUCKETS as u64) as usize].1 += 1;
                true
            } else {
                false
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn caps_retries_at_ratio_plus_floor_and_refills_with_time() {
        let b = RetryBudget::new(FallbackConfig {
            retry_ratio: 0.2,
            retry_floor: 2,
            window: Duration::from_secs(10),
        });
        for _ in 0..50 {
            b.task();
        }
        // 0.2 × 50 + 2 = 12 retries.
        let granted = (0..100).filter(|_| b.try_retry()).count();
        assert_eq!(granted, 12);
        tokio::time::advance(Duration::from_secs(11)).await;
        let granted = (0..100).filter(|_| b.try_retry()).count();
        assert_eq!(granted, 2, "only the floor once the tasks aged out");
    }
}
