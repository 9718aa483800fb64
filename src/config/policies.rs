//! `[policies]`: where the policy files are and which one applies by default.

use super::checks::Checks;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// `[policies]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PoliciesConfig {
    /// Folder of `*.toml` policies.
    pub dir: PathBuf,
    /// Policy used when no other applies.
    pub default: String,
}

impl Default for PoliciesConfig {
    fn default() -> Self {
        PoliciesConfig {
            dir: PathBuf::from("policies"),
            default: "balanced".into(),
        }
    }
}

impl PoliciesConfig {
    pub(super) fn check(&self, c: &mut Checks) {
        if self.default.trim().is_empty() {
            c.push("policies.default", "must not be empty");
        }
    }
}
