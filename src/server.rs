//! HTTP: the LDP listener and the admin listener, and the running gateway's handle.
//!
//! Middleware order on the LDP listener: connection cap and write deadline (`conn`) → the one
//! layer of `router.rs` (request counted, tracing span, panic caught in the route's protocol)
//! → the route's front end (`crate::frontend`: body limit, parse, the task, the answer in its
//! protocol). Every route, its metric label and the protocol its panics are answered in come
//! from one table (`router.rs`).

mod admin;
mod conn;
mod reload;
mod router;

use crate::config::{Config, ConfigError};
use crate::provenance::Ledger;
use crate::proxy::Proxy;
use crate::registry::Registry;
use crate::telemetry::otel::Otel;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use crate::frontend::api_error::{telling, ApiError, ErrorKind, Telling};
pub use crate::frontend::{AppState, Shared};
pub use admin::admin_router;
pub use conn::{OpenConnections, WriteDeadline};
pub use reload::Hangup;
pub use router::router;

/// Why the gateway could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// Bad configuration.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The policy directory has problems (each `file:line: key: reason`).
    #[error("policy problems:\n{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n"))]
    Policies(Vec<crate::policy::PolicyProblem>),
    /// The provenance store could not be opened.
    #[error("provenance: {0}")]
    Ledger(#[from] crate::provenance::LedgerError),
    /// The metrics registry refused a collector.
    #[error("metrics: {0}")]
    Metrics(#[from] prometheus::Error),
    /// Cluster mode could not be set up (a bad `redis_url`).
    #[error("cluster: {0}")]
    Cluster(#[from] crate::state::StoreError),
    /// A listener could not bind.
    #[error("cannot listen on {addr}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
}

/// A running gateway: both listeners, the card poller and the session sweeper.
pub struct Gateway {
    ldp_addr: SocketAddr,
    admin_addr: SocketAddr,
    ldp_connections: OpenConnections,
    proxy: Arc<Proxy>,
    registry: Arc<Registry>,
    upstream: crate::upstream::UpstreamClient,
    metrics: Arc<crate::telemetry::Metrics>,
    ledger: Ledger,
    grace: Duration,
    shutdown: watch::Sender<bool>,
    /// Set (or dropped) when shutdown is over: the serving threads may then end their
    /// runtimes, and with them the work their requests left behind.
    ended: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
    otel: Option<Arc<Otel>>,
    /// What the handlers are given (the route table's tests build routers from it).
    #[cfg(test)]
    state: AppState,
}

impl Gateway {
    /// Binds both listeners, fetches every card once, then serves in the background.
    pub async fn start(config: Config) -> Result<Gateway, ServerError> {
        // First of all: from here on a SIGHUP is kept for the reload watcher, not fatal.
        Self::start_with_hangup(config, Hangup::listen()).await
    }

    /// [`Gateway::start`] with a SIGHUP listener made earlier (by `serve`, before it loads the
    /// config), so that a SIGHUP at any moment of start-up becomes a reload once it is up.
    pub async fn start_with_hangup(config: Config, hangup: Hangup) -> Result<Gateway, ServerError> {
        let problems = config.problems("config");
        if !problems.is_empty() {
            return Err(ConfigError::Invalid(problems).into());
        }
        let config = Arc::new(config);
        // Copied to the serving threads (`conn::spawn_threads`).
        let bind_err = |source| ServerError::Bind {
            addr: config.server.listen,
            source,
        };
        let ldp_std = conn::std_listener(config.server.listen).map_err(bind_err)?;
        let ldp_listener = ldp_std
            .try_clone()
            .and_then(TcpListener::from_std)
            .map_err(bind_err)?;
        let admin_listener = bind(config.admin.listen).await?;
        let ldp_addr = ldp_listener
            .local_addr()
            .map_err(|source| ServerError::Bind {
                addr: config.server.listen,
                source,
            })?;
        let admin_addr = admin_listener
            .local_addr()
            .map_err(|source| ServerError::Bind {
                addr: config.admin.listen,
                source,
            })?;
        let registry = Arc::new(
            Registry::from_config(
                &config.delegates,
                config.outlier,
                config.security.expose_delegate_addresses,
            )
            .map_err(|e| ConfigError::Invalid(vec![e.to_string()]))?,
        );
        let policies = crate::policy::load_dir(&config.policies.dir, &config.policies.default)
            .map_err(ServerError::Policies)?;
        let metrics = Arc::new(crate::telemetry::Metrics::new()?);
        let otel = start_tracing(&config.telemetry, &metrics)?;
        for d in &config.delegates {
            let (operation, provider) = match d.kind {
                crate::config::DelegateKind::OpenAi => ("chat", "openai"),
                crate::config::DelegateKind::A2a => ("invoke_agent", "a2a"),
                crate::config::DelegateKind::Anthropic => ("chat", "anthropic"),
                crate::config::DelegateKind::Ldp => ("invoke_agent", "ldp"),
            };
            metrics.gen_ai_known(operation, provider, d.model.as_deref().unwrap_or_default());
        }
        let p = &config.provenance;
        // Opening may block (a Postgres connection, the journal's replay): off the runtime's
        // threads.
        let (store, durability) = (p.store.clone(), p.durability);
        let journal_dir = p.journal_dir().to_owned();
        let opened = tokio::task::spawn_blocking(move || {
            crate::provenance::open(&store, durability, &journal_dir)
        })
        .await
        .map_err(|e| {
            crate::provenance::LedgerError::Write(format!("opening the store failed: {e}"))
        })??
        .with_journal_max(p.journal_max_bytes);
        let ledger = Ledger::start_opened(opened, p.durability, p.queue_capacity, metrics.clone());
        let tenants = crate::tenant::Tenants::from_config(&config.tenants)
            .map_err(|e| ConfigError::Invalid(vec![e.to_string()]))?;
        let upstream = crate::proxy::upstream_client(&config);
        let proxy = Proxy::new(crate::proxy::Parts {
            cfg: config.clone(),
            registry: registry.clone(),
            policies,
            metrics: metrics.clone(),
            ledger: ledger.handle(),
            tenants,
            upstream: upstream.clone(),
        });
        // Chosen once: this process's state, or Redis shared with the other replicas.
        let stores = crate::state::Stores::from_config(
            &config,
            registry.clone(),
            metrics.clone(),
            proxy.tasks().clone(),
        )?;
        // The front ends' own (LLMX senders, LADP agents), chosen the same way.
        let bridges = crate::state::BridgeStores::from_config(&config, metrics.clone())?;
        let proxy = Arc::new(proxy.with_stores(stores));
        proxy.restore_spend().await;
        registry.set_quality_half_life(config.quality.half_life);
        registry.set_trusted_raters(crate::config::trusted_raters(&config.tenants));
        registry
            .restore_quality(&ledger.handle(), &config.quality)
            .await;
        for d in &config.delegates {
            if let Some(var) = &d.signing_secret_env {
                let secret = crate::secret::Secret::from_env(var).ok_or_else(|| {
                    ConfigError::Invalid(vec![format!(
                        "delegates: signing secret variable {var} for {} is not set",
                        d.registry_name()
                    )])
                })?;
                let base = crate::config::normalize_url(&d.url)
                    .map_err(|e| ConfigError::Invalid(vec![e.to_string()]))?;
                upstream.sign_for(&base, secret);
            }
        }
        registry.count_poll_panics(metrics.panics.with_label_values(&["card_poll"]));
        registry
            .poll_all(&upstream, config.discovery.fetch_timeout, true)
            .await;

        let (shutdown, rx) = watch::channel(false);
        let state = AppState::new(Shared {
            proxy: proxy.clone(),
            registry: registry.clone(),
            ledger: ledger.handle(),
            metrics: metrics.clone(),
            upstream: upstream.clone(),
            config: config.clone(),
            public_url: format!("http://{ldp_addr}").into(),
            llmx: crate::frontend::llmx::LlmxState::with_store(bridges.sequences),
            ladp: crate::frontend::ladp::LadpState::with_stores(
                &config.ladp,
                bridges.agent_rates,
                bridges.books,
            ),
            a2a: crate::frontend::a2a::A2aState::new(&config.a2a).with_shared(proxy.bus().map(
                |bus| {
                    crate::state::a2a_store::SharedA2a::new(
                        bus.clone(),
                        config.a2a.max_task_bytes,
                        config.a2a.max_context_bytes,
                        config.upstream.task_timeout,
                        config.sessions.max_ttl,
                    )
                },
            )),
            otel: otel.clone(),
        });
        let mut tasks = Vec::new();
        tasks.extend(crate::frontend::a2a::spawn_shared_events(
            state.clone(),
            rx.clone(),
        ));
        // Cluster mode: notes between replicas (cancels, A2A events), subscribed before the
        // first request is taken (at most a few deadlines: a gateway starts while Redis is
        // down, and subscribes when it returns).
        if let Some(bus) = proxy.bus() {
            tasks.push(bus.spawn(rx.clone()));
            let within = (config.cluster.redis_timeout * 10).max(Duration::from_secs(1));
            if !bus.wait_ready(within).await {
                tracing::warn!("the replicas' bus (Redis pub/sub) is not up yet; cancels reach only this replica's tasks until it is");
            }
        }
        tasks.extend(proxy.clone().spawn_cancel_listener(rx.clone()));
        tasks.push(registry.clone().spawn_poller(
            upstream.clone(),
            config.discovery.poll_interval,
            config.discovery.fetch_timeout,
            rx.clone(),
        ));
        tasks.push(spawn_sweeper(
            proxy.clone(),
            config.sessions.sweep_interval,
            rx.clone(),
        ));
        tasks.push(reload::spawn_watcher(
            proxy.clone(),
            config.policies.dir.clone(),
            hangup,
            rx.clone(),
        ));
        let opts = conn::ConnOptions::of(&config.server);
        let ldp_connections = OpenConnections::default();
        let app = router(state.clone());
        // Thread per core: this runtime serves too, so one thread fewer than the CPUs this
        // process may run on.
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let (ended, ended_rx) = watch::channel(false);
        let serving = conn::spawn_threads(
            &ldp_std,
            cores - 1,
            &app,
            opts,
            &ldp_connections,
            &rx,
            &ended_rx,
        )
        .map_err(|source| ServerError::Bind {
            addr: ldp_addr,
            source,
        })?;
        drop(ldp_std);
        tasks.push(conn::spawn_server(
            ldp_listener,
            app,
            opts,
            ldp_connections.clone(),
            rx.clone(),
        ));
        tasks.extend(serving);
        #[cfg(test)]
        let kept = state.clone();
        // The admin listener has its own count: a flood on the LDP port leaves it reachable.
        tasks.push(conn::spawn_server(
            admin_listener,
            admin_router(state),
            opts,
            OpenConnections::default(),
            rx,
        ));
        tracing::info!(ldp = %ldp_addr, admin = %admin_addr, delegates = registry.snapshot().len(),
            healthy = registry.healthy_count(), "gateway listening");
        tasks.push(
            ledger
                .handle()
                .spawn_pruner(p.retention, p.prune_every, shutdown.subscribe()),
        );
        // Calibration rounds of verifiers (policies' `[verify.calibration]`): one at start.
        tasks.push(proxy.clone().spawn_calibration(shutdown.subscribe()));
        // Replicas share one ledger: each learns from the votes and ratings of all.
        if crate::config::is_postgres(&p.store) {
            tasks.push(registry.clone().spawn_quality_refresh(
                ledger.handle(),
                config.quality.clone(),
                shutdown.subscribe(),
            ));
        }
        Ok(Gateway {
            ldp_addr,
            admin_addr,
            ldp_connections,
            proxy,
            registry,
            upstream,
            metrics,
            ledger,
            grace: config.server.shutdown_grace,
            shutdown,
            ended,
            tasks,
            otel,
            #[cfg(test)]
            state: kept,
        })
    }

    /// Base URL of the LDP listener.
    pub fn ldp_url(&self) -> String {
        format!("http://{}", self.ldp_addr)
    }

    /// Base URL of the admin listener.
    pub fn admin_url(&self) -> String {
        format!("http://{}", self.admin_addr)
    }

    /// Connections open on the LDP listener now.
    pub fn open_connections(&self) -> usize {
        self.ldp_connections.get()
    }

    /// The gateway core (tests inspect sessions, budgets and limiters through it).
    pub fn proxy(&self) -> &Arc<Proxy> {
        &self.proxy
    }

    /// The delegates.
    pub fn registry(&self) -> &Arc<Registry> {
        &self.registry
    }

    /// The metrics.
    pub fn metrics(&self) -> &Arc<crate::telemetry::Metrics> {
        &self.metrics
    }

    /// A handle on the ledger.
    pub fn ledger(&self) -> crate::provenance::LedgerHandle {
        self.ledger.handle()
    }

    /// Re-fetches every card now, instead of waiting for the next poll.
    pub async fn refresh_cards(&self) {
        let timeout = Duration::from_secs(2);
        self.registry.poll_all(&self.upstream, timeout, true).await;
    }

    /// Waits until at least `n` delegates are healthy, re-polling cards; false on timeout.
    pub async fn wait_healthy(&self, n: usize, timeout: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if self.registry.healthy_count() >= n {
                return true;
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            self.refresh_cards().await;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Stops accepting, lets in-flight requests and the work they left behind (tasks whose
    /// client went away, upstream closes, settle retries) finish within the grace period,
    /// closes upstream sessions, then commits every queued provenance row.
    pub async fn shutdown(self) {
        let _ = self.shutdown.send(true);
        let grace = self.grace;
        let deadline = tokio::time::Instant::now() + grace;
        for mut t in self.tasks {
            if tokio::time::timeout_at(deadline, &mut t).await.is_err() {
                tracing::warn!(
                    ?grace,
                    "in-flight requests still running at the shutdown deadline; cutting them"
                );
                t.abort();
            }
        }
        // After the listeners: requests still running could add tracked work until now.
        let tracked = self.proxy.tasks();
        tracked.close();
        if tokio::time::timeout_at(deadline, tracked.wait())
            .await
            .is_err()
        {
            // They cannot be aborted one by one; they end with the runtime, their rows unwritten.
            tracing::warn!(
                ?grace,
                left = tracked.len(),
                "background work still running at the shutdown deadline; leaving it"
            );
        }
        self.proxy.close_everything().await;
        let lost = self.ledger.close(Duration::from_secs(10)).await;
        // Last: the spans of the work above are exported too, within their own grace.
        if let Some(otel) = &self.otel {
            otel.shutdown(TRACE_FLUSH_GRACE).await;
        }
        let _ = self.ended.send(true);
        tracing::info!(provenance_rows_lost = lost, "gateway stopped");
    }
}

/// How long shutdown waits for the last spans to be exported: a collector that is down or
/// slow never holds the gateway's exit longer.
const TRACE_FLUSH_GRACE: Duration = Duration::from_secs(2);

/// The tracer for `[telemetry]`, or none when no endpoint is set. The export headers are read
/// from `headers_env` now: a variable that is unset or unreadable stops the start (its value
/// is never shown).
fn start_tracing(
    t: &crate::config::TelemetryConfig,
    metrics: &crate::telemetry::Metrics,
) -> Result<Option<Arc<Otel>>, ServerError> {
    let Some(endpoint) = &t.otlp_endpoint else {
        return Ok(None);
    };
    let headers = match &t.headers_env {
        None => Vec::new(),
        Some(var) => {
            let invalid = |why: String| {
                ConfigError::Invalid(vec![format!("telemetry.headers_env: {var}: {why}")])
            };
            let text = std::env::var(var).map_err(|_| invalid("is not set".into()))?;
            crate::telemetry::otel::parse_headers(&text).map_err(invalid)?
        }
    };
    let settings = crate::telemetry::otel::ExportSettings {
        endpoint: endpoint.trim_end_matches('/').to_owned(),
        service_name: t.service_name.clone(),
        headers,
    };
    tracing::info!(endpoint = %crate::secret::redact_url(endpoint), ratio = t.sample_ratio,
        "exporting traces");
    Ok(Some(Otel::start(
        settings,
        t.sample_ratio,
        t.capture_content,
        metrics.otel_spans_dropped.clone(),
    )))
}

async fn bind(addr: SocketAddr) -> Result<TcpListener, ServerError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| ServerError::Bind { addr, source })
}

fn spawn_sweeper(
    proxy: Arc<Proxy>,
    every: Duration,
    mut rx: watch::Receiver<bool>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => { proxy.housekeep().await; }
                _ = rx.changed() => return,
            }
        }
    })
}
