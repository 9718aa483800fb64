//! Gateway configuration: defaults → TOML file → `LDP_GATEWAY_…` environment (figment).
//!
//! The root [`Config`] and its loading live here; each section is a file of `config/` with
//! its type(s), defaults and validation, so a new setting is added in one room.

mod a2a;
mod admin;
mod anthropic;
mod checks;
mod cluster;
mod delegates;
mod discovery;
mod fallback;
mod identity;
mod ladp;
mod llmx;
mod openai;
mod outlier;
mod policies;
mod provenance;
mod quality;
mod rate;
mod routing;
mod security;
mod server;
mod sessions;
mod task_status;
mod telemetry;
mod tenants;
mod upstream;

pub use a2a::A2aConfig;
pub use admin::AdminConfig;
pub use anthropic::AnthropicConfig;
pub use cluster::ClusterConfig;
pub use delegates::{
    normalize_url, AnthropicAuth, DeclaredCard, DelegateConfig, DelegateKind, MaxTokensParam,
    UrlError,
};
pub use discovery::DiscoveryConfig;
pub use fallback::FallbackConfig;
pub use identity::IdentityConfig;
pub use ladp::LadpConfig;
pub use llmx::LlmxConfig;
pub use openai::OpenAiConfig;
pub use outlier::OutlierConfig;
pub use policies::PoliciesConfig;
pub use provenance::{is_postgres, Durability, ProvenanceConfig, DEFAULT_JOURNAL_MAX_BYTES};
pub use quality::QualityConfig;
pub use rate::RateConfig;
pub use security::SecurityConfig;
pub use server::ServerConfig;
pub use sessions::SessionsConfig;
pub use task_status::TaskStatusConfig;
pub use telemetry::TelemetryConfig;
pub use tenants::{trusted_raters, BudgetConfig, SigningConfig, TenantConfig};
pub use upstream::UpstreamConfig;

use checks::Checks;
use figment::providers::{Env, Format, Serialized, Toml};
use figment::Figment;
use serde::{Deserialize, Serialize};
use std::path::Path;

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
    /// Recent task outcomes kept for status queries.
    pub task_status: TaskStatusConfig,
    /// Calls to delegates.
    pub upstream: UpstreamConfig,
    /// Delegates known at start.
    pub delegates: Vec<DelegateConfig>,
    /// OpenAI-backed delegates and the OpenAI-compatible ingress.
    pub openai: OpenAiConfig,
    /// The Anthropic-compatible ingress.
    pub anthropic: AnthropicConfig,
    /// Policy files.
    pub policies: PoliciesConfig,
    /// How routing treats prices, missing hints and unknown values.
    pub routing: crate::routing::RoutingParams,
    /// Outlier detection: when a failing delegate is cut out and how it comes back.
    pub outlier: OutlierConfig,
    /// Failover: the retry budget.
    pub fallback: FallbackConfig,
    /// Learned quality: how evidence fades and is shared.
    pub quality: QualityConfig,
    /// Tenants: keys, trust domains, policies, limits, budgets, signing. None: every client
    /// is the built-in `anonymous` tenant.
    pub tenants: Vec<TenantConfig>,
    /// Signatures and replay protection.
    pub security: SecurityConfig,
    /// Provenance ledger.
    pub provenance: ProvenanceConfig,
    /// Cluster mode: state shared by every replica in Redis.
    pub cluster: ClusterConfig,
    /// The LADP bridge (`POST /ladp`).
    pub ladp: LadpConfig,
    /// The LLMX bridge (`POST /llmx`).
    pub llmx: LlmxConfig,
    /// The A2A bridge (`POST /a2a`, the Agent Card).
    pub a2a: A2aConfig,
    /// OpenTelemetry traces (OTLP export, off by default).
    pub telemetry: TelemetryConfig,
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
        let mut cfg: Config = Figment::from(Serialized::defaults(Config::default()))
            .merge(Toml::file(path))
            .merge(Env::prefixed("LDP_GATEWAY_").split("__"))
            .extract()
            .map_err(|e| ConfigError::Load(Box::new(e)))?;
        cfg.telemetry.apply_env(|name| std::env::var(name).ok());
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
        self.server.check(&mut c);
        self.identity.check(&mut c);
        self.discovery.check(&mut c);
        self.sessions.check(&mut c);
        self.task_status.check(&mut c);
        self.upstream.check(&mut c);
        self.openai.check(&mut c);
        self.ladp.check(&mut c);
        self.llmx.check(&mut c);
        self.a2a.check(&mut c);
        self.telemetry.check(&mut c);
        self.provenance.check(&mut c);
        self.cluster.check(&mut c);
        // Beside `cluster.redis_url` (both name where shared state lives): `check` has always
        // listed them in this order.
        self.provenance.check_store(&mut c);
        routing::check(&self.routing, &mut c);
        self.outlier.check(&mut c);
        self.fallback.check(&mut c);
        self.quality.check(&mut c);
        self.security.check(&mut c);
        self.policies.check(&mut c);
        tenants::check_all(&self.tenants, &mut c);
        delegates::check_all(&self.delegates, &mut c);
        c.out
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
/// file sets it; else, inside a list entry, the line of the nearest enclosing table or
/// inline table the file sets (a required key left out); else none (a default, or a value
/// from the environment).
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
    let mut in_entry = false;
    for part in key.split('.') {
        let (name, index) = match part.split_once('[') {
            Some((n, i)) => (n, i.trim_end_matches(']').parse::<usize>().ok()),
            None => (part, None),
        };
        // A key left out of a list entry (a required one, such as an OpenAI-backed
        // delegate's `model`): the entry's line. Left out of a section, the value came from
        // a default or the environment: no line.
        let Some((k, mut v)) = table.get_key_value(name) else {
            return found.filter(|_| in_entry);
        };
        found = Some(line(k.span().start));
        if let Some(i) = index {
            let DeValue::Array(items) = v.get_ref() else {
                return found;
            };
            let Some(item) = items.get(i) else {
                return found;
            };
            v = item;
            in_entry = true;
            found = Some(line(v.span().start));
        }
        match v.get_ref() {
            DeValue::Table(t) => table = t,
            _ => return found,
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

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
    fn a_key_left_out_is_placed_at_what_encloses_it() {
        let text = "[server]\nlisten = \"x\"\n\n[[delegates]]\nurl = \"u\"\n[delegates.card]\nskills = []\n";
        assert_eq!(line_of(text, "server.listen"), Some(2));
        // Not in the file, outside any list entry: a default or the environment, no line.
        assert_eq!(line_of(text, "server.write_timeout"), None);
        assert_eq!(line_of(text, "delegates[0].model"), Some(4));
        assert_eq!(line_of(text, "delegates[0].card.quality"), Some(6));
        assert_eq!(line_of(text, "delegates[1].url"), Some(4));
        assert_eq!(line_of(text, "tenants[0].name"), None);
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
