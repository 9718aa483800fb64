//! A value that must never be shown: `Debug` and `Display` print `[redacted]`, and it does not
//! implement `Serialize`, so it cannot reach logs, metrics, error bodies or the ledger by
//! accident.

use std::fmt;

/// A secret (API key, HMAC secret, admin token).
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(Vec<u8>);

impl Secret {
    /// Wraps `bytes`.
    pub fn new(bytes: impl Into<Vec<u8>>) -> Secret {
        Secret(bytes.into())
    }

    /// Reads the secret from environment variable `var` (`None` if unset or empty).
    pub fn from_env(var: &str) -> Option<Secret> {
        std::env::var(var)
            .ok()
            .filter(|v| !v.is_empty())
            .map(Secret::new)
    }

    /// The bytes, for the one place that needs them (HMAC keys, comparisons).
    pub fn expose(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret([redacted])")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}
