//! A gateway for one test, built with the knobs it needs and started on ephemeral loopback
//! ports, in this process (`spawn`) or as the real binary (`spawn_process`, the way to give
//! it environment variables: secrets are read from the environment).
//!
//! The gateway's and proxy's accessors (registry, sessions, budgets, policies, tracked work) are
//! reached through [`TestGateway`]'s methods only, so a change to them is fixed here.

use super::client::Client;
use super::ledger;
use super::metrics::Scrape;
use super::process::{Serve, Served, ROOT};
use ldp_gateway::config::{Config, DelegateConfig, TenantConfig};
use ldp_gateway::provenance::LedgerRow;
use ldp_gateway::registry::Delegate;
use ldp_gateway::server::Gateway;
use ldp_gateway::sim::{SimHandle, SimOptions};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// How long a new gateway may take to see its delegates healthy.
const HEALTHY_WITHIN: Duration = Duration::from_secs(30);

/// An admin-token variable nobody sets: an in-process gateway reads the token from its own
/// environment, which the developer's shell may fill.
const NO_ADMIN_TOKEN: &str = "LDP_TEST_ADMIN_TOKEN_NEVER_SET";

/// A change to the config, applied when the gateway is built.
type Tweak<'a> = Box<dyn FnOnce(&mut Config) + Send + 'a>;

/// A delegate the gateway is configured with, in order (`d0`, `d1`, …, but for an entry
/// given whole, which keeps its own name).
enum Upstream {
    Url(String),
    Sim(Box<SimOptions>),
    Entry(Box<DelegateConfig>),
}

/// Builds a [`TestGateway`]. Defaults: loopback listeners on free ports, hourly card polls,
/// the shipped policies, a SQLite ledger in a directory of its own, delegates named `d0`,
/// `d1`… in the order given, and every one of them healthy before `spawn` returns.
pub struct Builder<'a> {
    config: Config,
    upstreams: Vec<Upstream>,
    healthy: Option<usize>,
    policies: Vec<(String, String)>,
    tweaks: Vec<Tweak<'a>>,
    env: Vec<(String, String)>,
    log: Option<String>,
}

impl<'a> Builder<'a> {
    /// A delegate at `url`.
    pub fn delegate(mut self, url: &str) -> Builder<'a> {
        self.upstreams.push(Upstream::Url(url.to_owned()));
        self
    }

    /// Delegates at `urls`.
    pub fn delegates(self, urls: &[String]) -> Builder<'a> {
        urls.iter().fold(self, |b, u| b.delegate(u))
    }

    /// A simulated delegate the gateway starts and owns ([`TestGateway::sim`]).
    pub fn sim(mut self, opts: SimOptions) -> Builder<'a> {
        self.upstreams.push(Upstream::Sim(Box::new(opts)));
        self
    }

    /// A whole `[[delegates]]` entry (an OpenAI-backed one, say: `support::openai::entry`),
    /// named as it says; it counts among the delegates that must be healthy.
    pub fn entry(mut self, entry: DelegateConfig) -> Builder<'a> {
        self.upstreams.push(Upstream::Entry(Box::new(entry)));
        self
    }

    /// How many delegates must be healthy before `spawn` returns (default: all).
    pub fn healthy(mut self, n: usize) -> Builder<'a> {
        self.healthy = Some(n);
        self
    }

    pub fn tenant(mut self, t: TenantConfig) -> Builder<'a> {
        self.config.tenants.push(t);
        self
    }

    /// A policy file: the gateway then loads only the files given this way, from a folder of
    /// its own, instead of the shipped policies.
    pub fn policy(mut self, file: &str, toml: &str) -> Builder<'a> {
        self.policies.push((file.to_owned(), toml.to_owned()));
        self
    }

    /// Any other knob, applied last (after the delegates are filled in).
    pub fn config(mut self, tweak: impl FnOnce(&mut Config) + Send + 'a) -> Builder<'a> {
        self.tweaks.push(Box::new(tweak));
        self
    }

    /// An environment variable of the gateway process ([`Builder::spawn_process`] only).
    pub fn env(mut self, key: &str, value: &str) -> Builder<'a> {
        self.env.push((key.to_owned(), value.to_owned()));
        self
    }

    /// `RUST_LOG` of the gateway process ([`Builder::spawn_process`] only; default `warn`).
    pub fn log(mut self, filter: &str) -> Builder<'a> {
        self.log = Some(filter.to_owned());
        self
    }

    /// Starts the simulated delegates and writes the final config (ledger and policies in
    /// `dir`); the simulators and how many delegates must be healthy.
    async fn prepare(&mut self, dir: &Path) -> (Vec<SimHandle>, usize) {
        let mut sims = Vec::new();
        let mut entries = Vec::new();
        for (i, u) in std::mem::take(&mut self.upstreams).into_iter().enumerate() {
            let url = match u {
                Upstream::Url(url) => url,
                Upstream::Sim(opts) => {
                    let s = super::sim(*opts).await;
                    let url = s.url();
                    sims.push(s);
                    url
                }
                Upstream::Entry(entry) => {
                    entries.push(*entry);
                    continue;
                }
            };
            entries.push(DelegateConfig {
                name: Some(format!("d{i}")),
                ..DelegateConfig::new(url)
            });
        }
        let c = &mut self.config;
        c.provenance.store = format!("sqlite://{}", dir.join("ledger.db").display());
        if !self.policies.is_empty() {
            let policies = dir.join("policies");
            std::fs::create_dir(&policies).expect("policies dir");
            for (file, text) in &self.policies {
                std::fs::write(policies.join(file), text).expect("write policy");
            }
            c.policies.dir = policies;
        }
        let n = entries.len();
        c.delegates = entries;
        for tweak in self.tweaks.drain(..) {
            tweak(c);
        }
        // A Postgres ledger's journal goes to the test's folder, not the working directory's.
        if ldp_gateway::provenance::is_postgres(&c.provenance.store) {
            let journals = dir.join("journal").display().to_string();
            c.provenance.journal_dir.get_or_insert(journals);
        }
        (sims, self.healthy.unwrap_or(n))
    }

    /// Starts the gateway in this process and waits for its delegates.
    pub async fn spawn(mut self) -> TestGateway {
        assert!(
            self.env.is_empty() && self.log.is_none(),
            "env and log apply to spawn_process only"
        );
        let dir = tempfile::tempdir().expect("gateway dir");
        let (sims, healthy) = self.prepare(dir.path()).await;
        let gateway = Gateway::start(self.config)
            .await
            .unwrap_or_else(|e| panic!("gateway starts: {e}"));
        assert!(
            gateway.wait_healthy(healthy, HEALTHY_WITHIN).await,
            "{healthy} delegates did not come up"
        );
        TestGateway {
            gateway: Some(gateway),
            sims,
            dir: Some(dir),
        }
    }

    /// Writes this config as the TOML file the real binary reads, with its ledger
    /// (`ledger.db`) and policies in `dir`; the file's path. For tests that run `serve`
    /// themselves ([`super::process::Serve`]); [`Builder::sim`] is not supported here.
    pub async fn config_file(mut self, dir: &Path) -> PathBuf {
        assert!(
            self.upstreams
                .iter()
                .all(|u| !matches!(u, Upstream::Sim(_))),
            "a config file takes delegate URLs and entries"
        );
        self.prepare(dir).await;
        let path = dir.join("gateway.toml");
        std::fs::write(&path, super::toml::to_toml(&self.config)).expect("write config");
        path
    }

    /// Starts the real binary (`ldp-gateway serve`) on this config, written as TOML, with the
    /// environment given by [`Builder::env`], and waits for its delegates. The simulated
    /// delegates of [`Builder::sim`] are not supported here (start them with `support::sim`).
    pub async fn spawn_process(mut self) -> Served {
        let dir = tempfile::tempdir().expect("gateway dir");
        let healthy = self.healthy.unwrap_or(self.upstreams.len());
        let (env, log) = (std::mem::take(&mut self.env), self.log.take());
        let path = self.config_file(dir.path()).await;
        let mut serve = Serve::new(&path);
        for (k, v) in &env {
            serve = serve.env(k, v);
        }
        if let Some(filter) = &log {
            serve = serve.log(filter);
        }
        let mut served = serve.start().await;
        served.dir = Some(dir);
        let admin = served.admin();
        let up = super::eventually_async(HEALTHY_WITHIN, || async {
            let r = admin.get("/readyz").await;
            r.json["healthy_delegates"].as_u64() >= Some(healthy as u64)
        })
        .await;
        assert!(up, "{healthy} delegates did not come up");
        served
    }
}

/// A running in-process gateway, its simulated delegates and its files.
///
/// End it with [`TestGateway::shutdown`]: its ledger writer outlives a plain drop (until the
/// test's runtime ends) and would put the removed ledger file back, so a drop without
/// shutdown fails the test (unless it is already failing).
pub struct TestGateway {
    gateway: Option<Gateway>,
    sims: Vec<SimHandle>,
    dir: Option<tempfile::TempDir>,
}

impl std::ops::Deref for TestGateway {
    type Target = Gateway;

    fn deref(&self) -> &Gateway {
        self.gateway.as_ref().expect("running")
    }
}

impl Drop for TestGateway {
    fn drop(&mut self) {
        if self.gateway.is_some() && !std::thread::panicking() {
            // Keep the files rather than race the writer that would recreate them.
            if let Some(dir) = self.dir.take() {
                let _ = dir.keep();
            }
            panic!("a TestGateway was dropped without shutdown()");
        }
    }
}

impl TestGateway {
    pub fn builder<'a>() -> Builder<'a> {
        let mut config = Config::default();
        config.server.listen = "127.0.0.1:0".parse().expect("addr");
        config.admin.listen = "127.0.0.1:0".parse().expect("addr");
        config.admin.token_env = NO_ADMIN_TOKEN.into();
        config.discovery.poll_interval = Duration::from_secs(3600);
        config.policies.dir = Path::new(ROOT).join("policies");
        // Trials (`[routing] explore`) are random picks off the score: off, so a test of
        // anything else sees the score's choice; the tests of exploration turn it on.
        config.routing.explore = 0.0;
        Builder {
            config,
            upstreams: Vec::new(),
            healthy: None,
            policies: Vec::new(),
            tweaks: Vec::new(),
            env: Vec::new(),
            log: None,
        }
    }

    /// Shuts the gateway down gracefully (its ledger closed), then removes its files.
    pub async fn shutdown(mut self) {
        if let Some(gateway) = self.gateway.take() {
            gateway.shutdown().await;
        }
        for s in std::mem::take(&mut self.sims) {
            s.shutdown().await;
        }
        drop(self.dir.take());
    }

    /// The `i`-th simulated delegate the builder started.
    pub fn sim(&self, i: usize) -> &SimHandle {
        &self.sims[i]
    }

    /// An LDP client of this gateway.
    pub fn client(&self) -> Client {
        Client::new(&self.ldp_url())
    }

    /// A client of the admin listener.
    pub fn admin(&self) -> Client {
        Client::new(&self.admin_url())
    }

    /// The ledger row of `task_id`: there must be one (written by the time the answer came;
    /// polled briefly for the read side).
    pub async fn ledger_row(&self, task_id: &str) -> LedgerRow {
        let query = format!("task_id={task_id}");
        let found = super::eventually_async(Duration::from_secs(10), || async {
            self.ledger(&query).await.len() == 1
        })
        .await;
        let rows = self.ledger(&query).await;
        assert!(found, "one row for {task_id}: {rows:?}");
        rows.into_iter().next().expect("one row")
    }

    /// `GET /metrics`.
    pub async fn metrics(&self) -> Scrape {
        Scrape(self.admin().get("/metrics").await.text())
    }

    /// `GET /readyz`: status and body.
    pub async fn ready(&self) -> (u16, Value) {
        let r = self.admin().get("/readyz").await;
        (r.status, r.json)
    }

    /// Ledger rows for `query` through `GET /admin/provenance` (newest first).
    pub async fn ledger(&self, query: &str) -> Vec<LedgerRow> {
        ledger::page(&self.admin(), query).await.0
    }

    // ---- the proxy's state, for what the API does not show ----

    /// A delegate of the registry, by name.
    pub fn delegate(&self, name: &str) -> Option<Arc<Delegate>> {
        self.registry().get(name)
    }

    /// Delegates healthy now.
    pub fn healthy_count(&self) -> usize {
        self.registry().healthy_count()
    }

    /// Client sessions open now.
    pub fn sessions(&self) -> usize {
        self.proxy().sessions().len()
    }

    /// Client sessions `tenant` holds now.
    pub fn tenant_sessions(&self, tenant: &str) -> usize {
        self.proxy().sessions().tenant_count(tenant)
    }

    /// What `tenant` spent today, as the budget book holds it.
    pub fn spent_today(&self, tenant: &str) -> f64 {
        self.proxy().budgets().spent(tenant).0
    }

    /// Keys in the rate limiters now.
    pub fn limiter_keys(&self) -> usize {
        self.proxy().limiter_keys()
    }

    /// Whether a policy of that name is loaded.
    pub fn has_policy(&self, name: &str) -> bool {
        self.proxy().policies().get(name).is_some()
    }

    /// Runs `fut` as work a request left behind (shutdown waits for it).
    pub fn spawn_tracked(&self, fut: impl std::future::Future<Output = ()> + Send + 'static) {
        self.proxy().spawn_tracked(fut).expect("tracked");
    }
}
