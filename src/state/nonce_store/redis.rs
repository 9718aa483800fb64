//! Replay nonces in Redis: freshness checked here, first use remembered in Redis (set if
//! absent), so a message replayed to another replica is refused too.

use super::{NonceRefusal, NonceStore};
use crate::ldp::replay::ReplayError;
use crate::ldp::Envelope;
use crate::state::redis::Redis;
use crate::state::StoreError;
use chrono::{DateTime, Utc};
use std::time::Duration;

/// Cluster mode: `{prefix}:nonce:{sha256(message id, nonce)}`, set if absent, for twice the
/// window (a timestamp may be up to a window in the future).
pub struct RedisNonces {
    redis: Redis,
    window: Duration,
}

impl RedisNonces {
    /// Nonces shared through `redis`, for messages within `window` of now.
    pub fn new(redis: Redis, window: Duration) -> RedisNonces {
        RedisNonces { redis, window }
    }

    /// Remembers a message id + nonce for twice the window: `true` the first time anywhere
    /// in the cluster, `false` for a replay.
    pub async fn remember(&self, message_id: &str, nonce: &str) -> Result<bool, StoreError> {
        // Hashed: a client's ids may be long; the key stays short and fixed.
        use sha2::Digest as _;
        let mut h = sha2::Sha256::new();
        h.update(message_id.as_bytes());
        h.update([0]);
        h.update(nonce.as_bytes());
        let key = self
            .redis
            .key(format_args!("nonce:{}", hex::encode(h.finalize())));
        let mut cmd = redis::cmd("SET");
        cmd.arg(key)
            .arg(1)
            .arg("NX")
            .arg("PX")
            .arg(self.window.as_millis().max(1) as u64 * 2);
        let set: Option<String> = self.redis.query("nonce", &cmd).await?;
        Ok(set.is_some())
    }
}

impl NonceStore for RedisNonces {
    async fn first_use(&self, env: &Envelope, now: DateTime<Utc>) -> Result<(), NonceRefusal> {
        crate::ldp::replay::check_fresh(&env.timestamp, now, self.window)?;
        let nonce = env.nonce.as_deref().unwrap_or("");
        if self.remember(&env.message_id, nonce).await? {
            Ok(())
        } else {
            Err(ReplayError::Replayed.into())
        }
    }
}
