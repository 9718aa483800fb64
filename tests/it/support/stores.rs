//! The external stores of cluster mode on this machine: Postgres (a database of its own per
//! test) and Redis (a key prefix of its own per test), and the shared budget accounts as
//! Redis holds them.
//!
//! Postgres: `LDP_TEST_POSTGRES` (default `postgres://postgres@127.0.0.1:5432`). Redis:
//! `LDP_TEST_REDIS` (default `redis://127.0.0.1:6379`).

use ldp_gateway::cluster::{BudgetLimits, Cluster, Reserved, SharedReservation};
use ldp_gateway::config::ClusterConfig;
use std::sync::Arc;
use std::time::Duration;

pub fn postgres_base() -> String {
    std::env::var("LDP_TEST_POSTGRES")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432".into())
}

/// Runs `sql` on database `db` (`postgres` for the server) on a plain thread: the blocking
/// client refuses to run inside the test's runtime.
pub fn pg_sql(db: &str, sql: String) {
    let url = format!("{}/{db}", postgres_base());
    std::thread::spawn(move || {
        let mut c = postgres::Client::connect(&url, postgres::NoTls)
            .expect("Postgres at LDP_TEST_POSTGRES (default 127.0.0.1:5432) must be running");
        c.batch_execute(&sql).expect("sql");
    })
    .join()
    .expect("join");
}

/// A database of its own for one test, dropped at the end.
pub struct TempDb {
    pub name: String,
}

impl TempDb {
    pub fn new() -> TempDb {
        let name = format!("ldp_test_{}", uuid::Uuid::new_v4().simple());
        pg_sql("postgres", format!("CREATE DATABASE {name}"));
        TempDb { name }
    }

    pub fn url(&self) -> String {
        format!("{}/{}", postgres_base(), self.name)
    }
}

impl Drop for TempDb {
    fn drop(&mut self) {
        pg_sql(
            "postgres",
            format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name),
        );
    }
}

pub fn redis_url() -> String {
    std::env::var("LDP_TEST_REDIS").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

/// Cluster mode on the Redis at `url` for `replicas`, under a key prefix of its own, so
/// tests sharing one Redis never meet.
pub fn cluster(url: &str, replicas: u32) -> ClusterConfig {
    ClusterConfig {
        redis_url: Some(url.to_owned()),
        key_prefix: format!("ldptest:{}", uuid::Uuid::new_v4().simple()),
        // Generous: a loaded 2-core machine can hold a round trip past 200 ms, and a timed-out
        // shared check fails closed (seen once as a stray refusal in the budget test).
        redis_timeout: Duration::from_secs(2),
        replicas,
    }
}

/// The budget accounts replicas share, read and written through the gateway's own client.
pub struct SharedBudget(Arc<Cluster>);

impl SharedBudget {
    pub fn open(shared: &ClusterConfig) -> SharedBudget {
        let metrics = Arc::new(ldp_gateway::telemetry::Metrics::new().expect("metrics"));
        SharedBudget(
            Cluster::from_config(shared, metrics)
                .expect("cluster client")
                .expect("cluster mode"),
        )
    }

    /// What `tenant` spent today.
    pub async fn spent_today(&self, tenant: &str) -> f64 {
        self.0.spent(tenant).await.expect("spent").0
    }

    /// Holds `amount` of `tenant`'s `day_limit` for `session`; panics unless held.
    pub async fn hold(
        &self,
        tenant: &str,
        session: &str,
        day_limit: f64,
        amount: f64,
    ) -> SharedReservation {
        let limits = BudgetLimits {
            day: Some(day_limit),
            month: None,
            session: None,
        };
        let minute = Duration::from_secs(60);
        match self
            .0
            .reserve(tenant, session, minute, limits, amount, minute)
            .await
            .expect("reserve")
        {
            Reserved::Held(r) => r,
            other => panic!("{other:?}"),
        }
    }

    /// Settles `held` at `cost`.
    pub async fn settle(&self, held: &SharedReservation, cost: f64) {
        self.0.settle(held, cost).await.expect("settle");
    }
}
