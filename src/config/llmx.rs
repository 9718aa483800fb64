//! `[llmx]`: the LLMX bridge (`POST /llmx`): what it remembers of each sender.

use super::checks::Checks;
use serde::{Deserialize, Serialize};

/// `[llmx]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LlmxConfig {
    /// Bytes of senders remembered (the last sequence number each sent, and the gateway's
    /// own numbering of its answers to each), every tenant together, shared out by tenant
    /// (`crate::fair`): a tenant over its share forgets its least recently heard senders
    /// first, and a forgotten sender's next message starts its numbering afresh.
    pub max_sender_bytes: u64,
}

impl Default for LlmxConfig {
    fn default() -> Self {
        LlmxConfig {
            max_sender_bytes: 4 << 20,
        }
    }
}

impl LlmxConfig {
    pub(super) fn check(&self, c: &mut Checks) {
        c.table_bytes("llmx.max_sender_bytes", self.max_sender_bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_bound_below_64_kib_is_refused() {
        let mut c = Checks::default();
        LlmxConfig::default().check(&mut c);
        assert!(c.out.is_empty(), "{:?}", c.out);
        LlmxConfig {
            max_sender_bytes: 1000,
        }
        .check(&mut c);
        assert_eq!(
            c.out,
            [(
                "llmx.max_sender_bytes".into(),
                "must be between 65536 (64 KiB) and 1099511627776 (1 TiB), got 1000".into()
            )]
        );
    }
}
