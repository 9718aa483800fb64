//! `[security]`: replay protection, request shape bounds and who may be registered.

use super::checks::Checks;
use serde::{Deserialize, Serialize};
use std::time::Duration;

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
    /// Whether clients are told a delegate's registry name, its URL when it has no configured
    /// `name`, in provenance, progress, errors and every front end's answer. Off: clients see
    /// its configured `name`, else its card's `delegate_id`, never an address (which tells a
    /// tenant where the operator's delegates listen).
    pub expose_delegate_addresses: bool,
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
            expose_delegate_addresses: false,
        }
    }
}

impl SecurityConfig {
    pub(super) fn check(&self, c: &mut Checks) {
        c.positive("security.replay_window", self.replay_window);
        c.at_least("security.replay_capacity", self.replay_capacity, 1);
        c.at_least("security.max_json_depth", self.max_json_depth, 1);
        c.at_least("security.max_sessions", self.max_sessions, 1);
        c.at_least("security.max_id_bytes", self.max_id_bytes, 16);
        for (i, entry) in self.registration_allow.iter().enumerate() {
            if entry.trim().is_empty() {
                c.push(
                    format!("security.registration_allow[{i}]"),
                    "must not be empty",
                );
            }
        }
    }
}
