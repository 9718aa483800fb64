//! Gateway configuration: defaults → TOML file → `LDP_GATEWAY_…` environment (figment).

use crate::ldp::TrustDomain;
use figment::providers::{Env, Format, Serialized, Toml};
use figment::Figment;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The whole configuration. Unknown keys are errors, so a typo never passes silently.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// LDP listener.
    pub server: ServerConfig,
    /// Operations listener.
    pub admin: AdminConfig,
    /// The gateway's own identity card.
    pub identity: IdentityConfig,
    /// Card polling.
    pub discovery: DiscoveryConfig,
    /// Client sessions.
    pub sessions: SessionsConfig,
    /// Calls to delegates.
    pub upstream: UpstreamConfig,
    /// Delegates known at start.
    pub delegates: Vec<DelegateConfig>,
    /// Policy files.
    pub policies: PoliciesConfig,
    /// How routing treats prices, missing hints and unknown values.
    pub routing: crate::routing::RoutingParams,
    /// Outlier detection: when a failing delegate is cut out and how it comes back.
    pub outlier: OutlierConfig,
    /// Failover: the retry budget.
    pub fallback: FallbackConfig,
    /// Tenants: keys, trust domains, policies, limits, budgets, signing. None: every client
    /// is the built-in `anonymous` tenant.
    pub tenants: Vec<TenantConfig>,
    /// Signatures and replay protection.
    pub security: SecurityConfig,
    /// Provenance ledger.
    pub provenance: ProvenanceConfig,
    /// Cluster mode: state shared by every replica in Redis.
    pub cluster: ClusterConfig,
}

/// `[cluster]`: without `redis_url` the gateway is a single node with its embedded state.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClusterConfig {
    /// `redis://[:password@]host:port[/db]`: rate limits, budgets, client sessions and replay
    /// nonces shared by every replica.
    pub redis_url: Option<String>,
    /// Prefix of every key the gateway writes (several gateways may share one Redis).
    pub key_prefix: String,
    /// Deadline of every Redis call.
    #[serde(with = "humantime_serde")]
    pub redis_timeout: Duration,
    /// Replicas sharing the limits: while Redis is unreachable, each replica admits
    /// limit ÷ replicas locally.
    pub replicas: u32,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            redis_url: None,
            key_prefix: "ldp".into(),
            redis_timeout: Duration::from_millis(50),
            replicas: 1,
        }
    }
}

/// `[server]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    /// Address for LDP traffic.
    pub listen: SocketAddr,
    /// Largest accepted request body, bytes.
    pub body_limit_bytes: usize,
    /// On shutdown, how long in-flight requests may take to finish before they are cut.
    #[serde(with = "humantime_serde")]
    pub shutdown_grace: Duration,
    /// Deadline for reading a whole request head (slow-header clients are cut off).
    #[serde(with = "humantime_serde")]
    pub header_read_timeout: Duration,
    /// Deadline for reading a whole request body.
    #[serde(with = "humantime_serde")]
    pub body_read_timeout: Duration,
    /// A connection whose answer makes no write progress for this long (the client does not
    /// read) is closed.
    #[serde(with = "humantime_serde")]
    pub write_timeout: Duration,
    /// Most open connections per listener; connections over it are closed at once.
    pub max_connections: usize,
}

/// `[admin]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AdminConfig {
    /// Address for `/metrics`, `/healthz`, `/readyz`, `/admin/*`.
    pub listen: SocketAddr,
    /// Name of the environment variable holding the admin bearer token.
    pub token_env: String,
}

/// `[identity]`: the gateway's own card.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct IdentityConfig {
    /// `ldp:delegate:…` id.
    pub delegate_id: String,
    /// Display name.
    pub name: String,
    /// The gateway's trust domain.
    pub trust_domain: TrustDomain,
    /// Model family shown on the card.
    pub model_family: String,
    /// Version shown on the card (default: the crate version).
    pub model_version: Option<String>,
    /// Context window shown on the card (default: the largest among healthy delegates).
    pub context_window: Option<u64>,
    /// Public URL written into the card's `endpoint`.
    pub public_url: Option<String>,
}

/// `[discovery]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DiscoveryConfig {
    /// How often every card is re-fetched.
    #[serde(with = "humantime_serde")]
    pub poll_interval: Duration,
    /// Deadline of one card fetch.
    #[serde(with = "humantime_serde")]
    pub fetch_timeout: Duration,
    /// Largest card read; a larger one is refused (the delegate is down until it shrinks).
    pub max_card_bytes: usize,
    /// Most capabilities a card may list; a card with more is refused.
    pub max_capabilities: usize,
    /// Most card fetches in flight at once during a poll.
    pub concurrency: usize,
}

/// `[sessions]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SessionsConfig {
    /// Idle TTL when the proposal names none (RFC default 3600 s).
    #[serde(with = "humantime_serde")]
    pub default_ttl: Duration,
    /// Ceiling on any proposed TTL.
    #[serde(with = "humantime_serde")]
    pub max_ttl: Duration,
    /// How often expired sessions are swept (and their upstream sessions closed).
    #[serde(with = "humantime_serde")]
    pub sweep_interval: Duration,
}

/// `[upstream]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct UpstreamConfig {
    /// TCP connect deadline.
    #[serde(with = "humantime_serde")]
    pub connect_timeout: Duration,
    /// Deadline of one upstream handshake message (HELLO, SESSION_PROPOSE, SESSION_CLOSE).
    #[serde(with = "humantime_serde")]
    pub handshake_timeout: Duration,
    /// Ceiling on one upstream task.
    #[serde(with = "humantime_serde")]
    pub task_timeout: Duration,
    /// Most gateways a task may pass through (the `x-ldp-hops` header counts them), so that
    /// gateways chained into a loop refuse the task instead of calling each other forever.
    pub max_hops: usize,
}

/// One `[[delegates]]` entry.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DelegateConfig {
    /// `http(s)://host:port[/path]` or `ldp://host:port[/path]`.
    pub url: String,
    /// Registry name (default: the URL).
    #[serde(default)]
    pub name: Option<String>,
    /// Relative share among near-equals.
    #[serde(default)]
    pub weight: Option<f64>,
    /// Free-form labels.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Most tasks in flight at once; a full delegate is skipped, not queued behind
    /// (default: the card's `metadata.max_in_flight`, else no limit).
    #[serde(default)]
    pub max_in_flight: Option<u32>,
    /// Rate limit protecting the delegate: when it is reached, routing skips the delegate.
    #[serde(default)]
    pub limits: Option<RateConfig>,
    /// Environment variable holding the secret that signs messages to this delegate.
    #[serde(default)]
    pub signing_secret_env: Option<String>,
}

/// A rate: sustained requests per second and a burst.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateConfig {
    /// Sustained rate.
    pub rps: f64,
    /// Burst size (default: the rate rounded up).
    #[serde(default)]
    pub burst: Option<u32>,
}

/// One `[[tenants]]` entry.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantConfig {
    /// Tenant name (metrics, ledger, `[match] tenants`).
    pub name: String,
    /// SHA-256 (hex) of each API key; keys themselves are never stored.
    #[serde(default)]
    pub api_key_sha256: Vec<String>,
    /// Trust domains this tenant's clients may claim (first = default claim).
    #[serde(default)]
    pub trust_domains: Vec<String>,
    /// Policies it may use (empty: all).
    #[serde(default)]
    pub policies: Vec<String>,
    /// Its default policy.
    #[serde(default)]
    pub default_policy: Option<String>,
    /// Requests per second for the tenant (every LDP message).
    #[serde(default)]
    pub limits: Option<RateConfig>,
    /// Tasks per second per skill for the tenant.
    #[serde(default)]
    pub skill_limits: Option<RateConfig>,
    /// Spend limits.
    #[serde(default)]
    pub budget: BudgetConfig,
    /// Envelope signatures from this tenant's clients.
    #[serde(default)]
    pub signing: Option<SigningConfig>,
    /// Most open sessions at once.
    #[serde(default)]
    pub max_sessions: Option<usize>,
}

/// Spend limits in USD; absent means unlimited.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BudgetConfig {
    /// Per UTC day.
    #[serde(default)]
    pub usd_per_day: Option<f64>,
    /// Per UTC month.
    #[serde(default)]
    pub usd_per_month: Option<f64>,
    /// Per client session.
    #[serde(default)]
    pub usd_per_session: Option<f64>,
}

/// A tenant's signature requirement.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SigningConfig {
    /// Environment variable holding the shared HMAC secret.
    pub secret_env: String,
    /// Unsigned messages are refused (else they pass, and signed ones are still checked).
    #[serde(default)]
    pub required: bool,
}

/// `[security]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SecurityConfig {
    /// Signed messages must be this fresh, and a message id + nonce is refused twice within it.
    #[serde(with = "humantime_serde")]
    pub replay_window: Duration,
    /// Most nonces remembered; beyond it, new signed messages are refused, never forgotten.
    pub replay_capacity: usize,
    /// Deepest JSON nesting accepted in a request.
    pub max_json_depth: usize,
    /// Most open sessions overall.
    pub max_sessions: usize,
    /// Hosts (exact names) and CIDRs that `POST /admin/delegates` may register; empty: any.
    pub registration_allow: Vec<String>,
    /// Longest id a client may send (message, session and task ids, `from`, skill, nonce):
    /// the gateway stores them per session and in the ledger, so their size is bounded.
    pub max_id_bytes: usize,
}

impl Default for SecurityConfig {
    fn default() -> Self {
        SecurityConfig {
            replay_window: Duration::from_secs(300),
            replay_capacity: 1_000_000,
            max_json_depth: 64,
            max_sessions: 100_000,
            registration_allow: Vec::new(),
            max_id_bytes: 256,
        }
    }
}

impl DelegateConfig {
    /// A delegate at `url` with defaults.
    pub fn new(url: impl Into<String>) -> Self {
        DelegateConfig {
            url: url.into(),
            name: None,
            weight: None,
            labels: BTreeMap::new(),
            max_in_flight: None,
            limits: None,
            signing_secret_env: None,
        }
    }
}

impl TenantConfig {
    /// A tenant named `name` with no keys, domains, limits or budget (fill in the rest).
    pub fn new(name: impl Into<String>) -> Self {
        TenantConfig {
            name: name.into(),
            api_key_sha256: Vec::new(),
            trust_domains: Vec::new(),
            policies: Vec::new(),
            default_policy: None,
            limits: None,
            skill_limits: None,
            budget: BudgetConfig::default(),
            signing: None,
            max_sessions: None,
        }
    }
}

/// `[fallback]`: how much extra load failover may add.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FallbackConfig {
    /// Retries allowed as a fraction of recent tasks.
    pub retry_ratio: f64,
    /// Retries always allowed per window, however few tasks there were.
    pub retry_floor: u32,
    /// The window the budget counts over.
    #[serde(with = "humantime_serde")]
    pub window: Duration,
}

impl Default for FallbackConfig {
    fn default() -> Self {
        FallbackConfig {
            retry_ratio: 0.2,
            retry_floor: 10,
            window: Duration::from_secs(10),
        }
    }
}

/// `[policies]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PoliciesConfig {
    /// Folder of `*.toml` policies.
    pub dir: PathBuf,
    /// Policy used when no other applies.
    pub default: String,
}

/// `[provenance]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProvenanceConfig {
    /// Store URL: `sqlite://PATH` (relative to the working directory), `sqlite:///ABS`,
    /// `sqlite::memory:`, or `postgres://user[:password]@host:port/db` (cluster mode).
    pub store: String,
    /// `commit` (answer after the row commits), `fsync` (and power-loss safe), `async`.
    pub durability: Durability,
    /// Store redacted previews of inputs and outputs.
    pub store_payloads: bool,
    /// Rows older than this are pruned in the background.
    #[serde(with = "humantime_serde")]
    pub retention: Duration,
    /// How often retention runs.
    #[serde(with = "humantime_serde")]
    pub prune_every: Duration,
    /// Rows the writer's queue holds before `commit` waits (back-pressure) or `async` drops.
    pub queue_capacity: usize,
    /// Reported and declared cost disagreeing by more than this factor count as a discrepancy.
    pub cost_discrepancy_ratio: f64,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 8700)),
            body_limit_bytes: 1024 * 1024,
            shutdown_grace: Duration::from_secs(30),
            header_read_timeout: Duration::from_secs(5),
            body_read_timeout: Duration::from_secs(10),
            write_timeout: Duration::from_secs(30),
            max_connections: 10_000,
        }
    }
}

impl Default for AdminConfig {
    fn default() -> Self {
        AdminConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 8701)),
            token_env: "LDP_ADMIN_TOKEN".into(),
        }
    }
}

impl Default for IdentityConfig {
    fn default() -> Self {
        IdentityConfig {
            delegate_id: "ldp:delegate:gateway".into(),
            name: "LDP Gateway".into(),
            trust_domain: TrustDomain::default(),
            model_family: "ldp-gateway".into(),
            model_version: None,
            context_window: None,
            public_url: None,
        }
    }
}

impl Default for DiscoveryConfig {
    fn default() -> Self {
        DiscoveryConfig {
            poll_interval: Duration::from_secs(10),
            fetch_timeout: Duration::from_secs(2),
            max_card_bytes: 1024 * 1024,
            max_capabilities: 1024,
            concurrency: 16,
        }
    }
}

impl Default for SessionsConfig {
    fn default() -> Self {
        SessionsConfig {
            default_ttl: Duration::from_secs(3600),
            max_ttl: Duration::from_secs(24 * 3600),
            sweep_interval: Duration::from_secs(1),
        }
    }
}

impl Default for UpstreamConfig {
    fn default() -> Self {
        UpstreamConfig {
            connect_timeout: Duration::from_secs(2),
            handshake_timeout: Duration::from_secs(5),
            task_timeout: Duration::from_secs(120),
            max_hops: 8,
        }
    }
}

impl Default for PoliciesConfig {
    fn default() -> Self {
        PoliciesConfig {
            dir: PathBuf::from("policies"),
            default: "balanced".into(),
        }
    }
}

impl Default for ProvenanceConfig {
    fn default() -> Self {
        ProvenanceConfig {
            store: "sqlite://data/provenance.db".into(),
            durability: Durability::Commit,
            store_payloads: false,
            retention: Duration::from_secs(30 * 24 * 3600),
            prune_every: Duration::from_secs(3600),
            queue_capacity: 10_000,
            cost_discrepancy_ratio: 2.0,
        }
    }
}

/// How hard the ledger tries not to lose a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Durability {
    /// Answer after commit (process-crash safe).
    #[default]
    Commit,
    /// Answer after an fsync'd commit (power-loss safe).
    Fsync,
    /// Answer at once; rows may be lost.
    Async,
}

/// Whether `store` names a Postgres ledger.
pub fn is_postgres(store: &str) -> bool {
    store.starts_with("postgres://") || store.starts_with("postgresql://")
}

/// `[outlier]`: when a delegate is cut out and how it comes back.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OutlierConfig {
    /// Consecutive failures that eject.
    pub consecutive_failures: u32,
    /// Error rate over `window` that ejects (with at least `min_requests` in it).
    pub error_rate: f64,
    /// Requests needed in the window before the error rate counts.
    pub min_requests: u32,
    /// The rolling error window.
    #[serde(with = "humantime_serde")]
    pub window: Duration,
    /// First ejection period; each further ejection doubles it.
    #[serde(with = "humantime_serde")]
    pub base_ejection: Duration,
    /// Longest ejection period.
    #[serde(with = "humantime_serde")]
    pub max_ejection: Duration,
    /// After a successful probe, the share ramps from 10% to 100% over this.
    #[serde(with = "humantime_serde")]
    pub slow_start: Duration,
    /// Time constant of the latency EWMA: a sample this old weighs 1/e of a fresh one.
    #[serde(with = "humantime_serde")]
    pub latency_decay: Duration,
}

impl Default for OutlierConfig {
    fn default() -> Self {
        OutlierConfig {
            consecutive_failures: 5,
            error_rate: 0.5,
            min_requests: 10,
            window: Duration::from_secs(10),
            base_ejection: Duration::from_secs(5),
            max_ejection: Duration::from_secs(300),
            slow_start: Duration::from_secs(10),
            latency_decay: Duration::from_secs(10),
        }
    }
}

/// Why a configuration cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file or environment does not parse into [`Config`].
    #[error("{0}")]
    Load(Box<figment::Error>),
    /// It parses, but values are unusable; one line per problem.
    #[error("{}", .0.join("\n"))]
    Invalid(Vec<String>),
}

impl Config {
    /// Loads `path` (which must exist) layered over the defaults, then the environment.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        if !path.exists() {
            return Err(ConfigError::Invalid(vec![format!(
                "{}: file not found",
                path.display()
            )]));
        }
        let cfg: Config = Figment::from(Serialized::defaults(Config::default()))
            .merge(Toml::file(path))
            .merge(Env::prefixed("LDP_GATEWAY_").split("__"))
            .extract()
            .map_err(|e| ConfigError::Load(Box::new(e)))?;
        let issues = cfg.issues();
        if issues.is_empty() {
            return Ok(cfg);
        }
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let file = path.display();
        Err(ConfigError::Invalid(
            issues
                .into_iter()
                .map(|(key, reason)| match line_of(&text, &key) {
                    Some(line) => format!("{file}:{line}: {key}: {reason}"),
                    // Not in the file: a default or an `LDP_GATEWAY_…` variable.
                    None => format!("{file}: {key}: {reason}"),
                })
                .collect(),
        ))
    }

    /// Every problem with the values, each as `origin: key: reason`.
    pub fn problems(&self, origin: &str) -> Vec<String> {
        self.issues()
            .into_iter()
            .map(|(key, reason)| format!("{origin}: {key}: {reason}"))
            .collect()
    }

    /// Every problem with the values as `(dotted key, reason)`: every duration, rate, size
    /// and ratio is checked here, so that nothing unusable reaches a conversion at run time.
    pub fn issues(&self) -> Vec<(String, String)> {
        let mut c = Checks::default();
        let s = &self.server;
        c.at_least("server.body_limit_bytes", s.body_limit_bytes, 1);
        c.positive("server.header_read_timeout", s.header_read_timeout);
        c.positive("server.body_read_timeout", s.body_read_timeout);
        c.bounded("server.shutdown_grace", s.shutdown_grace);
        c.at_least_duration(
            "server.write_timeout",
            s.write_timeout,
            Duration::from_millis(100),
        );
        c.at_least("server.max_connections", s.max_connections, 1);
        if self.identity.delegate_id.trim().is_empty() {
            c.push("identity.delegate_id", "must not be empty");
        }
        c.positive("discovery.poll_interval", self.discovery.poll_interval);
        c.positive("discovery.fetch_timeout", self.discovery.fetch_timeout);
        c.at_least(
            "discovery.max_card_bytes",
            self.discovery.max_card_bytes,
            1024,
        );
        c.at_least(
            "discovery.max_capabilities",
            self.discovery.max_capabilities,
            1,
        );
        c.at_least("discovery.concurrency", self.discovery.concurrency, 1);
        let ss = &self.sessions;
        c.at_least_duration(
            "sessions.default_ttl",
            ss.default_ttl,
            Duration::from_secs(1),
        );
        c.at_least_duration("sessions.max_ttl", ss.max_ttl, Duration::from_secs(1));
        c.no_longer(
            ("sessions.default_ttl", ss.default_ttl),
            ("sessions.max_ttl", ss.max_ttl),
        );
        c.positive("sessions.sweep_interval", ss.sweep_interval);
        let u = &self.upstream;
        c.positive("upstream.connect_timeout", u.connect_timeout);
        c.positive("upstream.handshake_timeout", u.handshake_timeout);
        c.positive("upstream.task_timeout", u.task_timeout);
        c.at_least("upstream.max_hops", u.max_hops, 1);
        let p = &self.provenance;
        c.at_least("provenance.queue_capacity", p.queue_capacity, 1);
        if !(p.cost_discrepancy_ratio.is_finite() && p.cost_discrepancy_ratio >= 1.0) {
            c.push(
                "provenance.cost_discrepancy_ratio",
                format!("must be at least 1, got {}", p.cost_discrepancy_ratio),
            );
        }
        c.positive("provenance.prune_every", p.prune_every);
        c.positive("provenance.retention", p.retention);
        let cl = &self.cluster;
        if let Some(url) = &cl.redis_url {
            if !url.starts_with("redis://") {
                c.push(
                    "cluster.redis_url",
                    format!(
                        "must start with redis://, got '{}'",
                        crate::secret::redact_url(url)
                    ),
                );
            }
        }
        c.at_least("cluster.replicas", cl.replicas as usize, 1);
        c.positive("cluster.redis_timeout", cl.redis_timeout);
        if cl.key_prefix.is_empty() || cl.key_prefix.contains(char::is_whitespace) {
            c.push("cluster.key_prefix", "must be non-empty, without spaces");
        }
        if !p.store.starts_with("sqlite:") && !is_postgres(&p.store) {
            c.push(
                "provenance.store",
                format!(
                    "unsupported store '{}' (use sqlite://PATH or postgres://…)",
                    crate::secret::redact_url(&p.store)
                ),
            );
        }
        let r = &self.routing;
        c.fraction("routing.missing_score", r.missing_score);
        for (tier, price) in [
            ("low", r.tier_prices.low),
            ("medium", r.tier_prices.medium),
            ("high", r.tier_prices.high),
        ] {
            if !(price.is_finite() && price >= 0.0) {
                c.push(
                    format!("routing.tier_prices.{tier}"),
                    format!("must be a non-negative number, got {price}"),
                );
            }
        }
        c.fraction("routing.panic_threshold", r.panic_threshold);
        if !(r.budget_reserve_factor.is_finite()
            && (1.0..=100.0).contains(&r.budget_reserve_factor))
        {
            c.push(
                "routing.budget_reserve_factor",
                format!(
                    "must be between 1 and 100 (a reservation is the declared cost times this), got {}",
                    r.budget_reserve_factor
                ),
            );
        }
        let o = &self.outlier;
        c.at_least(
            "outlier.consecutive_failures",
            o.consecutive_failures as usize,
            1,
        );
        if !(o.error_rate.is_finite() && o.error_rate > 0.0 && o.error_rate <= 1.0) {
            c.push(
                "outlier.error_rate",
                format!("must be greater than 0 and at most 1, got {}", o.error_rate),
            );
        }
        c.at_least("outlier.min_requests", o.min_requests as usize, 1);
        c.positive("outlier.window", o.window);
        c.positive("outlier.base_ejection", o.base_ejection);
        c.positive("outlier.max_ejection", o.max_ejection);
        c.no_longer(
            ("outlier.base_ejection", o.base_ejection),
            ("outlier.max_ejection", o.max_ejection),
        );
        c.bounded("outlier.slow_start", o.slow_start);
        c.positive("outlier.latency_decay", o.latency_decay);
        let f = &self.fallback;
        if !(f.retry_ratio.is_finite() && (0.0..=1000.0).contains(&f.retry_ratio)) {
            c.push(
                "fallback.retry_ratio",
                format!("must be between 0 and 1000, got {}", f.retry_ratio),
            );
        }
        c.positive("fallback.window", f.window);
        let sec = &self.security;
        c.positive("security.replay_window", sec.replay_window);
        c.at_least("security.replay_capacity", sec.replay_capacity, 1);
        c.at_least("security.max_json_depth", sec.max_json_depth, 1);
        c.at_least("security.max_sessions", sec.max_sessions, 1);
        c.at_least("security.max_id_bytes", sec.max_id_bytes, 16);
        for (i, entry) in sec.registration_allow.iter().enumerate() {
            if entry.trim().is_empty() {
                c.push(
                    format!("security.registration_allow[{i}]"),
                    "must not be empty",
                );
            }
        }
        if self.policies.default.trim().is_empty() {
            c.push("policies.default", "must not be empty");
        }
        let mut tenants = std::collections::HashSet::new();
        for (i, t) in self.tenants.iter().enumerate() {
            if t.name.trim().is_empty() {
                c.push(format!("tenants[{i}].name"), "must not be empty");
            }
            if !tenants.insert(t.name.clone()) {
                c.push(
                    format!("tenants[{i}].name"),
                    format!("duplicate tenant '{}'", t.name),
                );
            }
            for (k, h) in t.api_key_sha256.iter().enumerate() {
                if h.len() != 64 || !h.bytes().all(|b| b.is_ascii_hexdigit()) {
                    c.push(
                        format!("tenants[{i}].api_key_sha256[{k}]"),
                        "must be 64 hex characters (`ldp-gateway hash-key` prints one)",
                    );
                }
            }
            if t.api_key_sha256.is_empty() && t.name != "anonymous" {
                c.push(
                    format!("tenants[{i}].api_key_sha256"),
                    "a tenant needs at least one key (only `anonymous` may have none)",
                );
            }
            for (what, r) in [("limits", &t.limits), ("skill_limits", &t.skill_limits)] {
                if let Some(r) = r {
                    c.rate(&format!("tenants[{i}].{what}"), r);
                }
            }
            let b = &t.budget;
            for (what, v) in [
                ("usd_per_day", b.usd_per_day),
                ("usd_per_month", b.usd_per_month),
                ("usd_per_session", b.usd_per_session),
            ] {
                if v.is_some_and(|v| !(v.is_finite() && v >= 0.0)) {
                    c.push(
                        format!("tenants[{i}].budget.{what}"),
                        "must not be negative",
                    );
                }
            }
            if let Some(m) = t.max_sessions {
                c.at_least(&format!("tenants[{i}].max_sessions"), m, 1);
            }
            if t.signing
                .as_ref()
                .is_some_and(|s| s.secret_env.trim().is_empty())
            {
                c.push(
                    format!("tenants[{i}].signing.secret_env"),
                    "must not be empty",
                );
            }
        }
        let mut names = std::collections::HashSet::new();
        for (i, d) in self.delegates.iter().enumerate() {
            if let Err(reason) = normalize_url(&d.url) {
                c.push(format!("delegates[{i}].url"), reason);
            }
            if let Some(w) = d.weight {
                if !(w.is_finite() && w > 0.0) {
                    c.push(
                        format!("delegates[{i}].weight"),
                        "must be a positive number",
                    );
                }
            }
            if let Some(m) = d.max_in_flight {
                c.at_least(&format!("delegates[{i}].max_in_flight"), m as usize, 1);
            }
            if let Some(r) = &d.limits {
                c.rate(&format!("delegates[{i}].limits"), r);
            }
            if d.name.as_ref().is_some_and(|n| n.trim().is_empty()) {
                c.push(format!("delegates[{i}].name"), "must not be empty");
            }
            let name = d.name.clone().unwrap_or_else(|| d.url.clone());
            if !names.insert(name.clone()) {
                c.push(
                    format!("delegates[{i}].name"),
                    format!("duplicate delegate '{name}'"),
                );
            }
        }
        c.out
    }
}

/// The longest duration any setting may have: beyond it a deadline added to a clock
/// reading could overflow, and no operator means it.
const MAX_DURATION: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// Collects `(key, reason)` problems with the shared wording.
#[derive(Default)]
struct Checks {
    out: Vec<(String, String)>,
}

impl Checks {
    fn push(&mut self, key: impl Into<String>, reason: impl Into<String>) {
        self.out.push((key.into(), reason.into()));
    }

    /// At most [`MAX_DURATION`].
    fn bounded(&mut self, key: &str, d: Duration) {
        if d > MAX_DURATION {
            self.push(
                key,
                format!(
                    "must be at most 100 years, got {}",
                    humantime::format_duration(d)
                ),
            );
        }
    }

    /// Longer than zero (and bounded).
    fn positive(&mut self, key: &str, d: Duration) {
        if d.is_zero() {
            self.push(key, "must be longer than 0s");
        }
        self.bounded(key, d);
    }

    /// At least `min` (and bounded).
    fn at_least_duration(&mut self, key: &str, d: Duration, min: Duration) {
        if d < min {
            self.push(
                key,
                format!(
                    "must be at least {}, got {}",
                    humantime::format_duration(min),
                    humantime::format_duration(d)
                ),
            );
        }
        self.bounded(key, d);
    }

    /// `shorter` (key, value) no longer than `longer`.
    fn no_longer(&mut self, shorter: (&str, Duration), longer: (&str, Duration)) {
        if shorter.1 > longer.1 {
            self.push(
                shorter.0,
                format!(
                    "must not be longer than {} ({}), got {}",
                    longer.0,
                    humantime::format_duration(longer.1),
                    humantime::format_duration(shorter.1)
                ),
            );
        }
    }

    /// A count or size of at least `min`.
    fn at_least(&mut self, key: &str, n: usize, min: usize) {
        if n < min {
            self.push(key, format!("must be at least {min}, got {n}"));
        }
    }

    /// A number between 0 and 1.
    fn fraction(&mut self, key: &str, x: f64) {
        if !(x.is_finite() && (0.0..=1.0).contains(&x)) {
            self.push(key, format!("must be between 0 and 1, got {x}"));
        }
    }

    /// A rate the limiters can use, with a burst of at least one.
    fn rate(&mut self, key: &str, r: &RateConfig) {
        if !crate::policy::rate_ok(r.rps) {
            self.push(
                format!("{key}.rps"),
                format!("{}, got {}", crate::policy::RATE_RANGE, r.rps),
            );
        }
        if r.burst == Some(0) {
            self.push(format!("{key}.burst"), "must be at least 1, got 0");
        }
    }
}

/// Validates `path` and the policy directory it names, as `ldp-gateway check` does; empty
/// when all is well.
pub fn check_file(path: &Path) -> Vec<String> {
    match Config::load(path) {
        Ok(cfg) => match crate::policy::load_dir(&cfg.policies.dir, &cfg.policies.default) {
            Ok(_) => Vec::new(),
            Err(problems) => problems.iter().map(ToString::to_string).collect(),
        },
        Err(ConfigError::Invalid(p)) => p,
        Err(ConfigError::Load(e)) => e
            .into_iter()
            .map(|e| {
                let key = e.path.join(".");
                let key = if key.is_empty() {
                    "(top level)".to_owned()
                } else {
                    key
                };
                format!("{}: {key}: {}", path.display(), e.kind)
            })
            .collect(),
    }
}

/// The 1-based line of the dotted `key` (`tenants[1].limits.rps`) in TOML `text`, if the
/// file sets it; the line of the nearest enclosing table or inline table it does set
/// otherwise.
fn line_of(text: &str, key: &str) -> Option<usize> {
    use toml::de::{DeTable, DeValue};
    let doc = DeTable::parse(text).ok()?;
    let line = |offset: usize| {
        text.as_bytes()[..offset.min(text.len())]
            .iter()
            .filter(|b| **b == b'\n')
            .count()
            + 1
    };
    let mut table: &DeTable<'_> = doc.get_ref();
    let mut found = None;
    for part in key.split('.') {
        let (name, index) = match part.split_once('[') {
            Some((n, i)) => (n, i.trim_end_matches(']').parse::<usize>().ok()),
            None => (part, None),
        };
        let (k, mut v) = table.get_key_value(name)?;
        found = Some(line(k.span().start));
        if let Some(i) = index {
            let DeValue::Array(items) = v.get_ref() else {
                return found;
            };
            v = items.get(i)?;
            found = Some(line(v.span().start));
        }
        match v.get_ref() {
            DeValue::Table(t) => table = t,
            _ => return found,
        }
    }
    found
}

/// Turns a delegate URL into the HTTP base URL the gateway calls: `ldp://` becomes `http://`
/// (LDP's plain HTTP transport), the trailing slash goes.
pub fn normalize_url(url: &str) -> Result<String, String> {
    let url = url.trim();
    let rest = if let Some(r) = url.strip_prefix("ldp://") {
        format!("http://{r}")
    } else if url.starts_with("http://") {
        url.to_owned()
    } else if url.starts_with("https://") {
        if !cfg!(feature = "tls") {
            return Err("https:// needs the gateway built with `--features tls`".into());
        }
        url.to_owned()
    } else {
        return Err(format!(
            "'{url}' must start with http://, https:// or ldp://"
        ));
    };
    let host = rest.split("://").nth(1).unwrap_or("");
    if host.is_empty() || host.starts_with('/') {
        return Err(format!("'{url}' has no host"));
    }
    Ok(rest.trim_end_matches('/').to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ldp_scheme_becomes_http() {
        assert_eq!(normalize_url("ldp://h:9/x/").unwrap(), "http://h:9/x");
        assert_eq!(normalize_url("http://h:9").unwrap(), "http://h:9");
        assert!(normalize_url("ftp://h").is_err());
        assert!(normalize_url("ldp://").is_err());
    }

    #[test]
    fn cluster_problems_are_named_and_secrets_redacted() {
        let mut c = Config::default();
        c.cluster.redis_url = Some("http://:hunter2@redis:6379".into());
        c.cluster.replicas = 0;
        c.cluster.redis_timeout = Duration::ZERO;
        c.cluster.key_prefix = "has space".into();
        c.provenance.store = "mysql://u:hunter2@db/x".into();
        let p = c.problems("f.toml");
        assert_eq!(
            p,
            [
                "f.toml: cluster.redis_url: must start with redis://, got 'http://:***@redis:6379'",
                "f.toml: cluster.replicas: must be at least 1, got 0",
                "f.toml: cluster.redis_timeout: must be longer than 0s",
                "f.toml: cluster.key_prefix: must be non-empty, without spaces",
                "f.toml: provenance.store: unsupported store 'mysql://u:***@db/x' (use sqlite://PATH or postgres://…)",
            ]
        );
        c.cluster = ClusterConfig {
            redis_url: Some("redis://127.0.0.1:6379".into()),
            ..ClusterConfig::default()
        };
        c.provenance.store = "postgres://ldp@127.0.0.1/ldp".into();
        assert!(c.problems("f.toml").is_empty());
    }

    #[test]
    fn problems_are_all_reported() {
        let mut c = Config::default();
        c.delegates.push(DelegateConfig::new("ftp://x"));
        c.delegates.push(DelegateConfig {
            weight: Some(-1.0),
            ..DelegateConfig::new("http://a")
        });
        c.delegates.push(DelegateConfig::new("http://a"));
        c.discovery.poll_interval = Duration::ZERO;
        let p = c.problems("f.toml");
        assert_eq!(p.len(), 4, "{p:?}");
        assert!(p.iter().any(|l| l.starts_with("f.toml: delegates[0].url:")));
        assert!(p
            .iter()
            .any(|l| l == "f.toml: delegates[2].name: duplicate delegate 'http://a'"));
    }

    #[test]
    fn unknown_keys_are_rejected() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("g.toml");
        std::fs::write(&f, "[server]\nlisten = \"127.0.0.1:1\"\nlisten_typo = 1\n").unwrap();
        let p = check_file(&f);
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(
            p[0].contains("g.toml: server.listen_typo: unknown field"),
            "{p:?}"
        );
    }
}
