//! `[admin]`: the operations listener (metrics, health, admin API).

use serde::{Deserialize, Serialize};
use std::net::SocketAddr;

/// `[admin]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AdminConfig {
    /// Address for `/metrics`, `/healthz`, `/readyz`, `/admin/*`.
    pub listen: SocketAddr,
    /// Name of the environment variable holding the admin bearer token.
    pub token_env: String,
}

impl Default for AdminConfig {
    fn default() -> Self {
        AdminConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 8701)),
            token_env: "LDP_ADMIN_TOKEN".into(),
        }
    }
}
