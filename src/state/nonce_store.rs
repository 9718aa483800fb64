//! Replay nonces of signed messages: on a single node this process's `ReplayGuard`
//! (`crate::ldp::replay`); in cluster mode freshness is checked here and first use in Redis, so
//! a message replayed to another replica is refused too.

use super::StoreError;
use crate::ldp::replay::{ReplayError, ReplayGuard};
use crate::ldp::Envelope;
use chrono::{DateTime, Utc};
use std::future::Future;
use std::time::Duration;

mod redis;
pub use redis::RedisNonces;

/// Why a signed message was not accepted.
#[derive(Debug, Clone, thiserror::Error)]
pub enum NonceRefusal {
    /// Stale, replayed, or not to be remembered (the client's fault or too many: 401).
    #[error(transparent)]
    Rejected(#[from] ReplayError),
    /// The shared state did not answer: not checked (503, retryable).
    #[error(transparent)]
    Unavailable(#[from] StoreError),
}

/// Remembers the signed messages accepted within the replay window.
pub trait NonceStore {
    /// Accepts `env` (a signed message whose signature was verified) if its timestamp is
    /// within the window of `now` and its message id + nonce were not seen within it, and
    /// remembers it.
    fn first_use(
        &self,
        env: &Envelope,
        now: DateTime<Utc>,
    ) -> impl Future<Output = Result<(), NonceRefusal>> + Send;
}

/// The nonces chosen at start.
pub enum Nonces {
    /// Single node.
    Local(LocalNonces),
    /// Cluster mode.
    Shared(RedisNonces),
}

impl NonceStore for Nonces {
    async fn first_use(&self, env: &Envelope, now: DateTime<Utc>) -> Result<(), NonceRefusal> {
        match self {
            Nonces::Local(l) => l.first_use(env, now).await,
            Nonces::Shared(r) => r.first_use(env, now).await,
        }
    }
}

/// Single node: the replay guard in this process.
#[derive(Debug)]
pub struct LocalNonces(ReplayGuard);

impl LocalNonces {
    /// Remembers messages for `window`, at most `capacity` at once.
    pub fn new(window: Duration, capacity: usize) -> LocalNonces {
        LocalNonces(ReplayGuard::new(window, capacity))
    }
}

impl NonceStore for LocalNonces {
    fn first_use(
        &self,
        env: &Envelope,
        now: DateTime<Utc>,
    ) -> impl Future<Output = Result<(), NonceRefusal>> + Send {
        std::future::ready(self.0.check_envelope(env, now).map_err(NonceRefusal::from))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ldp::{Body, PayloadMode};
    use crate::state::redis::Redis;

    fn signed_looking(nonce: &str) -> Envelope {
        let hello = Body::Hello {
            delegate_id: "client".into(),
            supported_modes: vec![],
        };
        let mut env = Envelope::new("s", "client", "gateway", hello, PayloadMode::Text);
        env.nonce = Some(nonce.to_owned());
        env
    }

    /// Checks the store's answers; returns a message it accepted.
    async fn replay_is_refused(store: &Nonces) -> Envelope {
        let now = Utc::now();
        let env = signed_looking("n1");
        store.first_use(&env, now).await.unwrap();
        let again = store.first_use(&env, now).await.unwrap_err();
        assert!(
            matches!(again, NonceRefusal::Rejected(ReplayError::Replayed)),
            "{again:?}"
        );
        // Another nonce with the same message id is another message.
        let mut other = env.clone();
        other.nonce = Some("n2".into());
        store.first_use(&other, now).await.unwrap();
        // Stale: outside the window.
        let late = now + chrono::TimeDelta::seconds(3600);
        let stale = store
            .first_use(&signed_looking("n3"), late)
            .await
            .unwrap_err();
        assert!(
            matches!(stale, NonceRefusal::Rejected(ReplayError::Stale { .. })),
            "{stale:?}"
        );
        env
    }

    #[tokio::test]
    async fn local_nonces_refuse_replays_and_stale_messages() {
        let store = Nonces::Local(LocalNonces::new(Duration::from_secs(60), 100));
        replay_is_refused(&store).await;
    }

    #[tokio::test]
    async fn shared_nonces_refuse_a_replay_sent_to_another_replica() {
        let (redis, _) = crate::state::redis::testing::redis();
        let store = Nonces::Shared(RedisNonces::new(redis.clone(), Duration::from_secs(60)));
        let env = replay_is_refused(&store).await;
        let replica = Nonces::Shared(RedisNonces::new(redis, Duration::from_secs(60)));
        let e = replica.first_use(&env, Utc::now()).await.unwrap_err();
        assert!(
            matches!(e, NonceRefusal::Rejected(ReplayError::Replayed)),
            "{e:?}"
        );
    }

    #[tokio::test]
    async fn shared_nonces_are_unavailable_when_redis_is_silent() {
        let mut cfg = crate::state::redis::testing::config();
        cfg.redis_url = Some("redis://127.0.0.1:1".into());
        let metrics = std::sync::Arc::new(crate::telemetry::Metrics::new().unwrap());
        let redis = Redis::connect(&cfg, metrics).unwrap().unwrap();
        let store = Nonces::Shared(RedisNonces::new(redis, Duration::from_secs(60)));
        let e = store
            .first_use(&signed_looking("n"), Utc::now())
            .await
            .unwrap_err();
        assert!(matches!(e, NonceRefusal::Unavailable(_)), "{e:?}");
    }
}
