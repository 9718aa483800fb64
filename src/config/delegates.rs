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

/// Why a delegate URL cannot be called.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UrlError {
    /// `https://` in a build without the `tls` feature.
    #[error("https:// needs the gateway built with `--features tls`")]
    NeedsTls,
    /// Not `http://`, `https://` or `ldp://` (the URL as given).
    #[error("'{0}' must start with http://, https:// or ldp://")]
    Scheme(String),
    /// Nothing between the scheme and the path (the URL as given).
    #[error("'{0}' has no host")]
    NoHost(String),
}

/// Turns a delegate URL into the HTTP base URL the gateway calls: `ldp://` becomes `http://`
/// (LDP's plain HTTP transport), the trailing slash goes.
pub fn normalize_url(url: &str) -> Result<String, UrlError> {
    let url = url.trim();
    let rest = if let Some(r) = url.strip_prefix("ldp://") {
        format!("http://{r}")
    } else if url.starts_with("http://") {
        url.to_owned()
    } else if url.starts_with("https://") {
        if !cfg!(feature = "tls") {
            return Err(UrlError::NeedsTls);
        }
        url.to_owned()
    } else {
        return Err(UrlError::Scheme(url.to_owned()));
    };
    let host = rest.split("://").nth(1).unwrap_or("");
    if host.is_empty() || host.starts_with('/') {
        return Err(UrlError::NoHost(url.to_owned()));
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
    fn url_problems_keep_their_wording() {
        assert_eq!(
            normalize_url(" ftp://h ").unwrap_err().to_string(),
            "'ftp://h' must start with http://, https:// or ldp://"
        );
        assert_eq!(
            normalize_url("http:///x").unwrap_err().to_string(),
            "'http:///x' has no host"
        );
    }
}
