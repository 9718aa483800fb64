//! `[[tenants]]`: keys, claimable trust domains, policies, limits, budgets and signing.

use super::checks::Checks;
use super::RateConfig;
use serde::{Deserialize, Serialize};
use std::collections::HashSet;

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
    /// Its ratings (`POST /ldp/feedback`) are shared evidence of delegates' quality, moving
    /// every tenant's routing and the verifier weights; otherwise they move its own routing
    /// only. For tenants the operator trusts to judge (its own QA, say).
    #[serde(default)]
    pub trusted_rater: bool,
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

/// The tenants whose ratings are shared evidence: those marked `trusted_rater`, or, without
/// `[[tenants]]`, the built-in `anonymous` (the only tenant: nobody else to affect).
pub fn trusted_raters(tenants: &[TenantConfig]) -> Vec<String> {
    if tenants.is_empty() {
        return vec!["anonymous".to_owned()];
    }
    tenants
        .iter()
        .filter(|t| t.trusted_rater)
        .map(|t| t.name.clone())
        .collect()
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
            trusted_rater: false,
        }
    }

    /// Checks entry `i` (`tenants[i]`) but for its name's uniqueness ([`check_all`]).
    fn check(&self, i: usize, c: &mut Checks) {
        for (k, h) in self.api_key_sha256.iter().enumerate() {
            if h.len() != 64 || !h.bytes().all(|b| b.is_ascii_hexdigit()) {
                c.push(
                    format!("tenants[{i}].api_key_sha256[{k}]"),
                    "must be 64 hex characters (`ldp-gateway hash-key` prints one)",
                );
            }
        }
        if self.api_key_sha256.is_empty() && self.name != "anonymous" {
            c.push(
                format!("tenants[{i}].api_key_sha256"),
                "a tenant needs at least one key (only `anonymous` may have none)",
            );
        }
        for (what, r) in [
            ("limits", &self.limits),
            ("skill_limits", &self.skill_limits),
        ] {
            if let Some(r) = r {
                c.rate(&format!("tenants[{i}].{what}"), r);
            }
        }
        let b = &self.budget;
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
        if let Some(m) = self.max_sessions {
            c.at_least(&format!("tenants[{i}].max_sessions"), m, 1);
        }
        if self
            .signing
            .as_ref()
            .is_some_and(|s| s.secret_env.trim().is_empty())
        {
            c.push(
                format!("tenants[{i}].signing.secret_env"),
                "must not be empty",
            );
        }
    }
}

/// Checks every entry; names must be present and unique.
pub(super) fn check_all(tenants: &[TenantConfig], c: &mut Checks) {
    let mut names = HashSet::new();
    for (i, t) in tenants.iter().enumerate() {
        if t.name.trim().is_empty() {
            c.push(format!("tenants[{i}].name"), "must not be empty");
        }
        if !names.insert(t.name.clone()) {
            c.push(
                format!("tenants[{i}].name"),
                format!("duplicate tenant '{}'", t.name),
            );
        }
        t.check(i, c);
    }
}
