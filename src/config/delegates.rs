//! `[[delegates]]`: the delegates known at start, and the URL rule they (and registrations)
//! follow.

use super::checks::Checks;
use super::RateConfig;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashSet};

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

    /// Checks entry `i` (`delegates[i]`); names are checked across the list by [`check_all`].
    fn check(&self, i: usize, c: &mut Checks) {
        if let Err(reason) = normalize_url(&self.url) {
            c.push(format!("delegates[{i}].url"), reason.to_string());
        }
        if let Some(w) = self.weight {
            if !(w.is_finite() && w > 0.0) {
                c.push(
                    format!("delegates[{i}].weight"),
                    "must be a positive number",
                );
            }
        }
        if let Some(m) = self.max_in_flight {
            c.at_least(&format!("delegates[{i}].max_in_flight"), m as usize, 1);
        }
        if let Some(r) = &self.limits {
            c.rate(&format!("delegates[{i}].limits"), r);
        }
        if self.name.as_ref().is_some_and(|n| n.trim().is_empty()) {
            c.push(format!("delegates[{i}].name"), "must not be empty");
        }
    }
}

/// Checks every entry, and that registry names (the URL when unnamed) are unique.
pub(super) fn check_all(delegates: &[DelegateConfig], c: &mut Checks) {
    let mut names = HashSet::new();
    for (i, d) in delegates.iter().enumerate() {
        d.check(i, c);
        let name = d.name.clone().unwrap_or_else(|| d.url.clone());
        if !names.insert(name.clone()) {
            c.push(
                format!("delegates[{i}].name"),
                format!("duplicate delegate '{name}'"),
            );
        }
    }
}

/// Delegate URLs are read as the client reads them: `ldp://` is `http://`, the trailing slash
/// goes (see [`ldp_client::base_url`]).
pub use ldp_client::{base_url as normalize_url, UrlError};
