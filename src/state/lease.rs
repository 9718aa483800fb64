//! Leases in Redis: a periodic job done by one replica of the cluster per interval, not by
//! each. Intervals are windows of wall-clock time counted from the Unix epoch, so every
//! replica agrees which one it is in without talking to the others; a job's lease for one
//! window is one key, taken by one atomic `SET key holder NX PX interval`: the replica that
//! sets it does the job, the others find it set and skip that window. The key lapses by
//! itself, after the window has passed; a holder that could not do the job gives it up.
//!
//! Used by calibration rounds (`proxy/calibrate.rs`): key `{p}:lease:calibration:{skill}:
//! {reference}:{window}`, the reference path as the first 16 hex digits of its SHA-256.

use super::redis::Redis;
use super::StoreError;
use std::sync::LazyLock;
use std::time::Duration;

/// Deletes a lease only if its holder is the caller's (another replica may have taken it
/// once it lapsed).
static GIVE_UP: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(
        "if redis.call('GET', KEYS[1]) == ARGV[1] then \
         return redis.call('DEL', KEYS[1]) else return 0 end",
    )
});

/// The window of length `every` that `now_ms` (Unix ms) falls in (`every` of zero counts as
/// a millisecond).
pub fn window(now_ms: i64, every: Duration) -> i64 {
    let every = i64::try_from(every.as_millis()).unwrap_or(i64::MAX).max(1);
    now_ms.div_euclid(every)
}

/// One job's lease in one window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    key: String,
}

impl Lease {
    /// The lease of calibrating `skill`'s verifiers against `reference` in `window`.
    pub fn calibration(redis: &Redis, skill: &str, reference: &str, window: i64) -> Lease {
        use sha2::Digest as _;
        let h = hex::encode(sha2::Sha256::digest(reference.as_bytes()));
        Lease {
            key: redis.key(format_args!(
                "lease:calibration:{skill}:{}:{window}",
                &h[..16]
            )),
        }
    }

    /// Takes the lease for `ttl` (the window's length) as `holder`: true when this replica
    /// won it and is to do the job, false when another one holds it.
    pub async fn take(
        &self,
        redis: &Redis,
        holder: &str,
        ttl: Duration,
    ) -> Result<bool, StoreError> {
        let ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1);
        let mut cmd = redis::cmd("SET");
        cmd.arg(&self.key).arg(holder).arg("NX").arg("PX").arg(ms);
        let set: Option<String> = redis.query("lease", &cmd).await?;
        Ok(set.is_some())
    }

    /// Gives the lease up, if `holder` still holds it (one script: read and delete at once),
    /// so that the window's job may be tried again.
    pub async fn give_up(&self, redis: &Redis, holder: &str) -> Result<(), StoreError> {
        let mut inv = GIVE_UP.prepare_invoke();
        inv.key(&self.key).arg(holder);
        let _: i64 = redis.invoke("lease", &inv).await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::redis::testing;

    #[test]
    fn windows_are_counted_from_the_epoch() {
        let s = Duration::from_secs(2);
        assert_eq!(window(0, s), 0);
        assert_eq!(window(1_999, s), 0);
        assert_eq!(window(2_000, s), 1);
        assert_eq!(window(-1, s), -1);
        assert_eq!(window(5, Duration::ZERO), 5);
    }

    #[tokio::test]
    async fn one_holder_per_window_and_a_lease_given_up_is_free_again() {
        let (redis, metrics) = testing::redis();
        let minute = Duration::from_secs(60);
        let lease = Lease::calibration(&redis, "verify", "/policies/qa.jsonl", 7);
        assert!(lease.take(&redis, "a", minute).await.unwrap());
        assert!(!lease.take(&redis, "b", minute).await.unwrap());
        // Another window, skill or reference is another lease.
        for other in [
            Lease::calibration(&redis, "verify", "/policies/qa.jsonl", 8),
            Lease::calibration(&redis, "judge", "/policies/qa.jsonl", 7),
            Lease::calibration(&redis, "verify", "/policies/other.jsonl", 7),
        ] {
            assert_ne!(other, lease);
            assert!(other.take(&redis, "b", minute).await.unwrap());
        }
        // Only its holder gives it up.
        lease.give_up(&redis, "b").await.unwrap();
        assert!(!lease.take(&redis, "b", minute).await.unwrap());
        lease.give_up(&redis, "a").await.unwrap();
        assert!(lease.take(&redis, "b", minute).await.unwrap());
        // It lapses by itself, after the window's length.
        let short = Lease::calibration(&redis, "verify", "/policies/qa.jsonl", 9);
        assert!(short
            .take(&redis, "a", Duration::from_secs(2))
            .await
            .unwrap());
        let mut pttl = redis::cmd("PTTL");
        pttl.arg(&short.key);
        let left: i64 = redis.query("test", &pttl).await.unwrap();
        assert!((1..=2_000).contains(&left), "{left} ms");
        let calls = metrics.redis_calls.with_label_values(&["lease"]).get();
        assert_eq!(calls, 10);
    }
}
