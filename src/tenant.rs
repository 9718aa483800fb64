//! Tenants: who a client is (its API key's SHA-256), which trust domains it may claim, which
//! policies it may use, its limits, budgets and signing secret.

use crate::config::{BudgetConfig, TenantConfig};
use crate::limits::{KeyedRateLimit, RateLimit};
use crate::secret::{with_key_hash, Secret};
use std::collections::HashMap;
use std::sync::Arc;

/// Name of the keyless tenant.
pub const ANONYMOUS: &str = "anonymous";

/// One tenant at run time.
#[derive(Debug)]
pub struct Tenant {
    /// Name.
    pub name: String,
    /// Domains its clients may claim; `None` for the built-in anonymous tenant, whose claims
    /// the gateway's own trust domain judges instead (RFC §7.2).
    pub trust_domains: Option<Vec<String>>,
    /// Policies it may use (empty: all).
    pub policies: Vec<String>,
    /// Its default policy.
    pub default_policy: Option<String>,
    /// Its request rate.
    pub limit: Option<RateLimit>,
    /// Its per-skill task rate.
    pub skill_limit: Option<KeyedRateLimit>,
    /// Its spend limits.
    pub budget: BudgetConfig,
    /// Signing secret and whether signatures are required.
    pub signing: Option<(Secret, bool)>,
    /// Most open sessions.
    pub max_sessions: Option<usize>,
}

impl Tenant {
    /// The built-in tenant of a gateway without `[[tenants]]`.
    pub fn builtin_anonymous() -> Tenant {
        Tenant {
            name: ANONYMOUS.into(),
            trust_domains: None,
            policies: Vec::new(),
            default_policy: None,
            limit: None,
            skill_limit: None,
            budget: BudgetConfig::default(),
            signing: None,
            max_sessions: None,
        }
    }

    /// Whether it may use `policy`.
    pub fn may_use(&self, policy: &str) -> bool {
        self.policies.is_empty() || self.policies.iter().any(|p| p == policy)
    }
}

/// Why a request is not authenticated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// No `Authorization: Bearer` and no keyless tenant.
    #[error("missing API key (Authorization: Bearer <key>)")]
    Missing,
    /// The key matches no tenant.
    #[error("unknown API key")]
    Unknown,
}

/// Why the tenants cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TenantError {
    /// The variable holding a tenant's signing secret is not set.
    #[error("tenant '{tenant}': signing secret variable {var} is not set")]
    SigningSecretUnset {
        /// The tenant.
        tenant: String,
        /// The variable.
        var: String,
    },
}

/// Every tenant, found by the hash of its key.
#[derive(Debug)]
pub struct Tenants {
    by_key_hash: HashMap<String, Arc<Tenant>>,
    keyless: Option<Arc<Tenant>>,
    all: Vec<Arc<Tenant>>,
}

impl Tenants {
    /// Builds the tenants; no `[[tenants]]` means one built-in keyless `anonymous`.
    pub fn from_config(cfg: &[TenantConfig]) -> Result<Tenants, TenantError> {
        if cfg.is_empty() {
            let anon = Arc::new(Tenant::builtin_anonymous());
            return Ok(Tenants {
                by_key_hash: HashMap::new(),
                keyless: Some(anon.clone()),
                all: vec![anon],
            });
        }
        let mut by_key_hash = HashMap::new();
        let mut keyless = None;
        let mut all = Vec::new();
        for t in cfg {
            let signing = match &t.signing {
                Some(s) => Some((
                    Secret::from_env(&s.secret_env).ok_or_else(|| {
                        TenantError::SigningSecretUnset {
                            tenant: t.name.clone(),
                            var: s.secret_env.clone(),
                        }
                    })?,
                    s.required,
                )),
                None => None,
            };
            let tenant = Arc::new(Tenant {
                name: t.name.clone(),
                trust_domains: Some(t.trust_domains.clone()),
                policies: t.policies.clone(),
                default_policy: t.default_policy.clone(),
                limit: t.limits.as_ref().and_then(RateLimit::new),
                skill_limit: t.skill_limits.as_ref().and_then(KeyedRateLimit::new),
                budget: t.budget.clone(),
                signing,
                max_sessions: t.max_sessions,
            });
            for h in &t.api_key_sha256 {
                by_key_hash.insert(h.to_ascii_lowercase(), tenant.clone());
            }
            if t.api_key_sha256.is_empty() && t.name == ANONYMOUS {
                keyless = Some(tenant.clone());
            }
            all.push(tenant);
        }
        Ok(Tenants {
            by_key_hash,
            keyless,
            all,
        })
    }

    /// Whether `[[tenants]]` were configured.
    pub fn configured(&self) -> bool {
        !(self.all.len() == 1 && self.all[0].trust_domains.is_none())
    }

    /// Every tenant.
    pub fn all(&self) -> &[Arc<Tenant>] {
        &self.all
    }

    /// The tenant of a request from its `Authorization` header value. Without `[[tenants]]`
    /// every caller is `anonymous` (a key, if sent, is ignored); with tenants, a key must be
    /// known, and no key at all is only accepted by a keyless tenant named `anonymous`.
    pub fn authenticate(&self, authorization: Option<&str>) -> Result<Arc<Tenant>, AuthError> {
        let key = authorization.and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        });
        self.authenticate_key(key)
    }

    /// The tenant of API key `key` (as sent: an `x-api-key` header's value), as
    /// [`Self::authenticate`] finds it.
    pub fn authenticate_key(&self, key: Option<&str>) -> Result<Arc<Tenant>, AuthError> {
        if !self.configured() {
            return self.keyless.clone().ok_or(AuthError::Missing);
        }
        let key = key.map(str::trim).filter(|k| !k.is_empty());
        match key {
            None => self.keyless.clone().ok_or(AuthError::Missing),
            Some(k) => {
                with_key_hash(k, |h| self.by_key_hash.get(h).cloned()).ok_or(AuthError::Unknown)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::secret::hash_key;

    fn tenant(name: &str, key: Option<&str>) -> TenantConfig {
        TenantConfig {
            api_key_sha256: key.map(|k| vec![hash_key(k)]).unwrap_or_default(),
            trust_domains: vec!["default".into()],
            ..TenantConfig::new(name)
        }
    }

    #[test]
    fn keys_find_their_tenant_and_anonymous_needs_a_keyless_tenant() {
        let t = Tenants::from_config(&[tenant("acme", Some("k-acme"))]).unwrap();
        assert_eq!(t.authenticate(Some("Bearer k-acme")).unwrap().name, "acme");
        assert_eq!(
            t.authenticate(Some("Bearer nope")).unwrap_err(),
            AuthError::Unknown
        );
        assert_eq!(t.authenticate(None).unwrap_err(), AuthError::Missing);
        let t =
            Tenants::from_config(&[tenant("acme", Some("k")), tenant("anonymous", None)]).unwrap();
        assert_eq!(t.authenticate(None).unwrap().name, "anonymous");
        let none = Tenants::from_config(&[]).unwrap();
        assert_eq!(none.authenticate(None).unwrap().name, "anonymous");
        assert!(!none.configured());
    }
}
