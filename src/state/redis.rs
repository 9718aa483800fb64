//! The Redis connection the shared stores use: keys under the gateway's prefix, a deadline on
//! every call, call and error counts per operation, reachability (`ldp_gateway_redis_up`).

use super::StoreError;
use crate::config::ClusterConfig;
use crate::telemetry::Metrics;
use redis::aio::ConnectionManager;
use redis::FromRedisValue;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// One lazily made, automatically re-made connection to Redis, shared by every store (cheap to
/// clone).
#[derive(Clone)]
pub struct Redis {
    inner: Arc<Inner>,
}

struct Inner {
    /// For the pub/sub connection ([`super::bus`]): the multiplexed one cannot subscribe.
    client: redis::Client,
    conn: ConnectionManager,
    prefix: String,
    deadline: Duration,
    metrics: Arc<Metrics>,
    up: AtomicBool,
}

impl Redis {
    /// The connection `cfg` names (`None` without `redis_url`). Connects lazily: a gateway
    /// starts while Redis is down and recovers when it returns.
    pub fn connect(
        cfg: &ClusterConfig,
        metrics: Arc<Metrics>,
    ) -> Result<Option<Redis>, StoreError> {
        let Some(url) = &cfg.redis_url else {
            return Ok(None);
        };
        let client = redis::Client::open(url.as_str())
            .map_err(|e| StoreError::Redis(format!("{}: {e}", crate::secret::redact_url(url))))?;
        let config = redis::aio::ConnectionManagerConfig::new()
            .set_connection_timeout(Some(cfg.redis_timeout.max(Duration::from_millis(200))))
            .set_response_timeout(Some(cfg.redis_timeout))
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_millis(500));
        let conn = ConnectionManager::new_lazy_with_config(client.clone(), config)
            .map_err(|e| StoreError::Redis(e.to_string()))?;
        metrics.redis_up.set(0);
        Ok(Some(Redis {
            inner: Arc::new(Inner {
                client,
                conn,
                prefix: cfg.key_prefix.clone(),
                deadline: cfg.redis_timeout,
                metrics,
                up: AtomicBool::new(false),
            }),
        }))
    }

    /// A key under this gateway's prefix.
    pub fn key(&self, parts: std::fmt::Arguments<'_>) -> String {
        format!("{}:{parts}", self.inner.prefix)
    }

    /// A tenant's name as it appears in keys: the first 16 hex digits of its SHA-256, so
    /// that no name can reach into another key's space.
    pub fn tenant_tag(tenant: &str) -> String {
        use sha2::Digest as _;
        let h = hex::encode(sha2::Sha256::digest(tenant.as_bytes()));
        h[..16].to_owned()
    }

    /// A new pub/sub connection (a subscriber's own), within the deadline.
    pub(crate) async fn pubsub(&self) -> Result<redis::aio::PubSub, StoreError> {
        let inner = &*self.inner;
        inner
            .metrics
            .redis_calls
            .with_label_values(&["bus_connect"])
            .inc();
        match tokio::time::timeout(
            inner.deadline.max(Duration::from_millis(200)),
            inner.client.get_async_pubsub(),
        )
        .await
        {
            Ok(Ok(p)) => Ok(p),
            Ok(Err(e)) => Err(StoreError::Redis(e.to_string())),
            Err(_) => Err(StoreError::Timeout(inner.deadline)),
        }
    }

    /// A name a client chose (an LLMX or LADP sender) as it appears in keys: the first 32 hex
    /// digits of its SHA-256, so no name reaches a key in clear or into another key's space.
    pub fn name_tag(name: &str) -> String {
        use sha2::Digest as _;
        let h = hex::encode(sha2::Sha256::digest(name.as_bytes()));
        h[..32].to_owned()
    }

    /// The metrics the stores count into.
    pub(crate) fn metrics(&self) -> &Metrics {
        &self.inner.metrics
    }

    /// Runs a script within the deadline.
    pub(crate) async fn invoke<T: FromRedisValue>(
        &self,
        op: &'static str,
        inv: &redis::ScriptInvocation<'_>,
    ) -> Result<T, StoreError> {
        let mut c = self.inner.conn.clone();
        self.timed(op, inv.invoke_async(&mut c)).await
    }

    /// Runs one command within the deadline.
    pub(crate) async fn query<T: FromRedisValue>(
        &self,
        op: &'static str,
        cmd: &redis::Cmd,
    ) -> Result<T, StoreError> {
        let mut c = self.inner.conn.clone();
        self.timed(op, cmd.query_async(&mut c)).await
    }

    /// Runs a pipeline within the deadline.
    pub(crate) async fn pipeline<T: FromRedisValue>(
        &self,
        op: &'static str,
        pipe: &redis::Pipeline,
    ) -> Result<T, StoreError> {
        let mut c = self.inner.conn.clone();
        self.timed(op, pipe.query_async(&mut c)).await
    }

    /// Whether Redis answers a PING now (`/readyz`).
    pub async fn ping(&self) -> bool {
        self.query::<String>("ping", &redis::cmd("PING"))
            .await
            .is_ok()
    }

    /// Awaits one call within the deadline, counting it and tracking reachability.
    async fn timed<T>(
        &self,
        op: &'static str,
        f: impl std::future::Future<Output = redis::RedisResult<T>>,
    ) -> Result<T, StoreError> {
        let inner = &*self.inner;
        inner.metrics.redis_calls.with_label_values(&[op]).inc();
        let out = match tokio::time::timeout(inner.deadline, f).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(StoreError::Redis(e.to_string())),
            Err(_) => Err(StoreError::Timeout(inner.deadline)),
        };
        let ok = out.is_ok();
        if inner.up.swap(ok, Ordering::AcqRel) != ok {
            inner.metrics.redis_up.set(i64::from(ok));
            if ok {
                tracing::info!("shared state (Redis) reachable");
            } else if let Err(e) = &out {
                tracing::warn!(error = %e, "shared state (Redis) unreachable");
            }
        }
        if let Err(e) = &out {
            inner.metrics.redis_errors.with_label_values(&[op]).inc();
            tracing::debug!(op, error = %e, "redis call failed");
        }
        out
    }
}

#[cfg(test)]
pub(crate) mod testing {
    //! A connection to the Redis on this machine (`LDP_TEST_REDIS`, as the integration tests)
    //! under a prefix of its own, for the stores' tests.

    use super::Redis;
    use crate::config::ClusterConfig;
    use std::sync::Arc;
    use std::time::Duration;

    /// The test Redis URL (`LDP_TEST_REDIS`, default the local one).
    pub fn url() -> String {
        std::env::var("LDP_TEST_REDIS").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
    }

    /// A config with a fresh prefix, so tests never share keys.
    pub fn config() -> ClusterConfig {
        ClusterConfig {
            redis_url: Some(url()),
            key_prefix: format!("ldptest:unit:{}", crate::ldp::new_id()),
            redis_timeout: Duration::from_secs(2),
            replicas: 1,
        }
    }

    /// A connection under a fresh prefix, and the metrics it counts into.
    pub fn redis() -> (Redis, Arc<crate::telemetry::Metrics>) {
        let metrics = Arc::new(crate::telemetry::Metrics::new().unwrap());
        let r = Redis::connect(&config(), metrics.clone()).unwrap().unwrap();
        (r, metrics)
    }
}
