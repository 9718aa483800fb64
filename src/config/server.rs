//! `[server]`: the LDP listener, its request deadlines and its connection bounds.

use super::checks::Checks;
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::time::Duration;

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

impl ServerConfig {
    pub(super) fn check(&self, c: &mut Checks) {
        c.at_least("server.body_limit_bytes", self.body_limit_bytes, 1);
        c.positive("server.header_read_timeout", self.header_read_timeout);
        c.positive("server.body_read_timeout", self.body_read_timeout);
        c.bounded("server.shutdown_grace", self.shutdown_grace);
        c.at_least_duration(
            "server.write_timeout",
            self.write_timeout,
            Duration::from_millis(100),
        );
        c.at_least("server.max_connections", self.max_connections, 1);
    }
}
