//! `[ladp]`: the LADP bridge (`POST /ladp`): its per-agent message rate (seed §14).

use super::checks::Checks;
use serde::{Deserialize, Serialize};

/// `[ladp]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LadpConfig {
    /// Messages one agent (a tenant's `<sender>`) may send per minute, every type counted
    /// (§14: "≤ 4 msgs/agent/minute"); a full minute's worth may come at once.
    pub rate_per_minute: u32,
    /// Bytes of agents' rates kept at once, every tenant together, shared out by tenant
    /// (`crate::fair`): an agent's rate is kept until it has refilled; a tenant whose share
    /// is full of agents still refilling has its new agents refused (429, `Retry-After`).
    pub max_rate_bytes: u64,
    /// Bytes of agents' remembered tasks (for `status-request` and `halt`), shared out by
    /// tenant; an agent with a running task is never forgotten.
    pub max_book_bytes: u64,
}

impl Default for LadpConfig {
    fn default() -> Self {
        LadpConfig {
            rate_per_minute: 4,
            max_rate_bytes: 4 << 20,
            max_book_bytes: 16 << 20,
        }
    }
}

/// The highest `rate_per_minute` accepted (a thousand a second is no per-agent limit).
pub const MAX_RATE_PER_MINUTE: u32 = 60_000;

impl LadpConfig {
    pub(super) fn check(&self, c: &mut Checks) {
        c.table_bytes("ladp.max_rate_bytes", self.max_rate_bytes);
        c.table_bytes("ladp.max_book_bytes", self.max_book_bytes);
        if !(1..=MAX_RATE_PER_MINUTE).contains(&self.rate_per_minute) {
            c.push(
                "ladp.rate_per_minute",
                format!(
                    "must be between 1 and {MAX_RATE_PER_MINUTE}, got {}",
                    self.rate_per_minute
                ),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_and_absurd_rates_are_refused() {
        for (rate, ok) in [
            (0, false),
            (1, true),
            (4, true),
            (60_000, true),
            (60_001, false),
        ] {
            let mut c = Checks::default();
            LadpConfig {
                rate_per_minute: rate,
                ..LadpConfig::default()
            }
            .check(&mut c);
            if ok {
                assert!(c.out.is_empty(), "{rate}: {:?}", c.out);
            } else {
                assert_eq!(
                    c.out,
                    [(
                        "ladp.rate_per_minute".into(),
                        format!("must be between 1 and 60000, got {rate}")
                    )]
                );
            }
        }
    }
}
