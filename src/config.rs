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
    pub outlier: crate::registry::OutlierConfig,
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
}

impl Default for SecurityConfig {
    fn default() -> Self {
        SecurityConfig {
            replay_window: Duration::from_secs(300),
            replay_capacity: 1_000_000,
            max_json_depth: 64,
            max_sessions: 100_000,
            registration_allow: Vec::new(),
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
    pub durability: crate::provenance::Durability,
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
            durability: crate::provenance::Durability::Commit,
            store_payloads: false,
            retention: Duration::from_secs(30 * 24 * 3600),
            prune_every: Duration::from_secs(3600),
            queue_capacity: 10_000,
            cost_discrepancy_ratio: 2.0,
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
        let problems = cfg.problems(&path.display().to_string());
        if problems.is_empty() {
            Ok(cfg)
        } else {
            Err(ConfigError::Invalid(problems))
        }
    }

    /// Every problem with the values, each as `origin: key: reason`.
    pub fn problems(&self, origin: &str) -> Vec<String> {
        let mut out = Vec::new();
        if self.server.body_limit_bytes == 0 {
            out.push(format!(
                "{origin}: server.body_limit_bytes: must be at least 1"
            ));
        }
        if self.identity.delegate_id.trim().is_empty() {
            out.push(format!("{origin}: identity.delegate_id: must not be empty"));
        }
        if self.discovery.poll_interval.is_zero() {
            out.push(format!(
                "{origin}: discovery.poll_interval: must be longer than 0s"
            ));
        }
        let p = &self.provenance;
        if p.queue_capacity == 0 {
            out.push(format!(
                "{origin}: provenance.queue_capacity: must be at least 1"
            ));
        }
        if !(p.cost_discrepancy_ratio.is_finite() && p.cost_discrepancy_ratio >= 1.0) {
            out.push(format!(
                "{origin}: provenance.cost_discrepancy_ratio: must be at least 1, got {}",
                p.cost_discrepancy_ratio
            ));
        }
        if p.prune_every.is_zero() {
            out.push(format!(
                "{origin}: provenance.prune_every: must be longer than 0s"
            ));
        }
        let c = &self.cluster;
        if let Some(url) = &c.redis_url {
            if !url.starts_with("redis://") {
                out.push(format!(
                    "{origin}: cluster.redis_url: must start with redis://, got '{}'",
                    crate::provenance::redact_url(url)
                ));
            }
        }
        if c.replicas == 0 {
            out.push(format!("{origin}: cluster.replicas: must be at least 1"));
        }
        if c.redis_timeout.is_zero() {
            out.push(format!(
                "{origin}: cluster.redis_timeout: must be longer than 0s"
            ));
        }
        if c.key_prefix.is_empty() || c.key_prefix.contains(char::is_whitespace) {
            out.push(format!(
                "{origin}: cluster.key_prefix: must be non-empty, without spaces"
            ));
        }
        if !p.store.starts_with("sqlite:") && !crate::provenance::is_postgres(&p.store) {
            out.push(format!(
                "{origin}: provenance.store: unsupported store '{}' (use sqlite://PATH or postgres://…)",
                crate::provenance::redact_url(&p.store)
            ));
        }
        let r = &self.routing;
        if !(0.0..=1.0).contains(&r.missing_score) {
            out.push(format!(
                "{origin}: routing.missing_score: must be between 0 and 1, got {}",
                r.missing_score
            ));
        }
        for (tier, price) in [
            ("low", r.tier_prices.low),
            ("medium", r.tier_prices.medium),
            ("high", r.tier_prices.high),
        ] {
            if !(price.is_finite() && price >= 0.0) {
                out.push(format!("{origin}: routing.tier_prices.{tier}: must be a non-negative number, got {price}"));
            }
        }
        if self.sessions.sweep_interval.is_zero() {
            out.push(format!(
                "{origin}: sessions.sweep_interval: must be longer than 0s"
            ));
        }
        let mut tenants = std::collections::HashSet::new();
        for (i, t) in self.tenants.iter().enumerate() {
            if t.name.trim().is_empty() {
                out.push(format!("{origin}: tenants[{i}].name: must not be empty"));
            }
            if !tenants.insert(t.name.clone()) {
                out.push(format!(
                    "{origin}: tenants[{i}].name: duplicate tenant '{}'",
                    t.name
                ));
            }
            for (k, h) in t.api_key_sha256.iter().enumerate() {
                if h.len() != 64 || !h.bytes().all(|b| b.is_ascii_hexdigit()) {
                    out.push(format!(
                        "{origin}: tenants[{i}].api_key_sha256[{k}]: must be 64 hex characters (`ldp-gateway hash-key` prints one)"
                    ));
                }
            }
            if t.api_key_sha256.is_empty() && t.name != "anonymous" {
                out.push(format!(
                    "{origin}: tenants[{i}].api_key_sha256: a tenant needs at least one key (only `anonymous` may have none)"
                ));
            }
            for (what, r) in [("limits", &t.limits), ("skill_limits", &t.skill_limits)] {
                if let Some(r) = r {
                    if !(r.rps.is_finite() && r.rps > 0.0) {
                        out.push(format!(
                            "{origin}: tenants[{i}].{what}.rps: must be greater than 0"
                        ));
                    }
                }
            }
            let b = &t.budget;
            for (what, v) in [
                ("usd_per_day", b.usd_per_day),
                ("usd_per_month", b.usd_per_month),
                ("usd_per_session", b.usd_per_session),
            ] {
                if v.is_some_and(|v| !(v.is_finite() && v >= 0.0)) {
                    out.push(format!(
                        "{origin}: tenants[{i}].budget.{what}: must not be negative"
                    ));
                }
            }
        }
        let mut names = std::collections::HashSet::new();
        for (i, d) in self.delegates.iter().enumerate() {
            if let Err(reason) = normalize_url(&d.url) {
                out.push(format!("{origin}: delegates[{i}].url: {reason}"));
            }
            if let Some(w) = d.weight {
                if !(w.is_finite() && w > 0.0) {
                    out.push(format!(
                        "{origin}: delegates[{i}].weight: must be a positive number"
                    ));
                }
            }
            let name = d.name.clone().unwrap_or_else(|| d.url.clone());
            if !names.insert(name.clone()) {
                out.push(format!(
                    "{origin}: delegates[{i}].name: duplicate delegate '{name}'"
                ));
            }
        }
        out
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
                "f.toml: cluster.replicas: must be at least 1",
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
