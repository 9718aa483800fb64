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
}

impl Default for LadpConfig {
    fn default() -> Self {
        LadpConfig { rate_per_minute: 4 }
    }
}

/// The highest `rate_per_minute` accepted (a thousand a second is no per-agent limit).
pub const MAX_RATE_PER_MINUTE: u32 = 60_000;

impl LadpConfig {
    pub(super) fn check(&self, c: &mut Checks) {
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
