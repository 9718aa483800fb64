//! Logging set-up and the one `Metrics` struct that owns every Prometheus collector.

use prometheus::{IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry};

/// Installs the global subscriber once; later calls do nothing.
pub fn init() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}

/// Every collector the gateway exports, registered once in its own registry. Labels are
/// bounded: delegate names, policy names, reasons — never a session or task id.
pub struct Metrics {
    registry: Registry,
    /// `ldp_gateway_routing_decisions_total{policy,delegate}`.
    pub routing_decisions: IntCounterVec,
    /// `ldp_gateway_delegate_up{delegate}`.
    pub delegate_up: IntGaugeVec,
    /// `ldp_gateway_sessions_active`.
    pub sessions_active: IntGauge,
    /// `ldp_gateway_policy_reloads_total{result}`: `ok` or `error`.
    pub policy_reloads: IntCounterVec,
    /// `ldp_gateway_policy_reload_failures_total`.
    pub policy_reload_failures: IntCounter,
}

impl Metrics {
    /// Builds and registers every collector.
    pub fn new() -> Result<Metrics, prometheus::Error> {
        let registry = Registry::new();
        let routing_decisions = IntCounterVec::new(
            Opts::new(
                "ldp_gateway_routing_decisions_total",
                "Routing decisions by policy and chosen delegate",
            ),
            &["policy", "delegate"],
        )?;
        let delegate_up = IntGaugeVec::new(
            Opts::new(
                "ldp_gateway_delegate_up",
                "1 if the delegate's card was fetched at the last poll",
            ),
            &["delegate"],
        )?;
        let sessions_active = IntGauge::new("ldp_gateway_sessions_active", "Open client sessions")?;
        let policy_reloads = IntCounterVec::new(
            Opts::new(
                "ldp_gateway_policy_reloads_total",
                "Policy reloads by result",
            ),
            &["result"],
        )?;
        let policy_reload_failures = IntCounter::new(
            "ldp_gateway_policy_reload_failures_total",
            "Policy reloads refused because a file had problems (the old set stayed)",
        )?;
        registry.register(Box::new(routing_decisions.clone()))?;
        registry.register(Box::new(delegate_up.clone()))?;
        registry.register(Box::new(sessions_active.clone()))?;
        registry.register(Box::new(policy_reloads.clone()))?;
        registry.register(Box::new(policy_reload_failures.clone()))?;
        Ok(Metrics {
            registry,
            routing_decisions,
            delegate_up,
            sessions_active,
            policy_reloads,
            policy_reload_failures,
        })
    }

    /// The Prometheus text exposition of every collector.
    pub fn render(&self) -> String {
        let mut buf = String::new();
        let encoder = prometheus::TextEncoder::new();
        if let Err(e) = encoder.encode_utf8(&self.registry.gather(), &mut buf) {
            tracing::error!(error = %e, "metrics encoding failed");
        }
        buf
    }
}
