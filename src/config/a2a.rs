//! `[a2a]`: the A2A bridge (`GET /.well-known/agent-card.json`, `POST /a2a`).

use super::checks::Checks;
use serde::{Deserialize, Serialize};

/// `[a2a]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct A2aConfig {
    /// The skill of a message that names none (`metadata.skill`, the message's or the
    /// request's); without it such a message is refused (-32602).
    pub default_skill: Option<String>,
    /// The Agent Card's `Cache-Control: max-age`, seconds (its skills follow the delegates'
    /// health, so not long).
    pub card_max_age_secs: u32,
    /// Bytes of A2A tasks kept (their snapshots with their output, for `GetTask`), every
    /// tenant together, shared out by tenant (`crate::fair`): a tenant over its share loses
    /// its oldest finished tasks first; a running task is never forgotten.
    pub max_task_bytes: u64,
    /// Bytes of A2A contexts kept (each the gateway session its tasks run in), shared out
    /// by tenant; a forgotten context's session is closed.
    pub max_context_bytes: u64,
}

impl Default for A2aConfig {
    fn default() -> Self {
        A2aConfig {
            default_skill: None,
            card_max_age_secs: 60,
            max_task_bytes: 64 << 20,
            max_context_bytes: 4 << 20,
        }
    }
}

/// The longest `card_max_age_secs` accepted (a day).
pub const MAX_CARD_MAX_AGE_SECS: u32 = 86_400;

impl A2aConfig {
    pub(super) fn check(&self, c: &mut Checks) {
        c.table_bytes("a2a.max_task_bytes", self.max_task_bytes);
        c.table_bytes("a2a.max_context_bytes", self.max_context_bytes);
        if self.card_max_age_secs > MAX_CARD_MAX_AGE_SECS {
            c.push(
                "a2a.card_max_age_secs",
                format!(
                    "must be at most {MAX_CARD_MAX_AGE_SECS}, got {}",
                    self.card_max_age_secs
                ),
            );
        }
        if self
            .default_skill
            .as_deref()
            .is_some_and(|s| s.trim().is_empty())
        {
            c.push("a2a.default_skill", "must not be empty".to_owned());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_skill_and_a_long_max_age_are_refused() {
        let mut c = Checks::default();
        A2aConfig::default().check(&mut c);
        assert!(c.out.is_empty(), "{:?}", c.out);
        A2aConfig {
            default_skill: Some(" ".into()),
            card_max_age_secs: 86_401,
            ..A2aConfig::default()
        }
        .check(&mut c);
        let keys: Vec<&str> = c.out.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["a2a.card_max_age_secs", "a2a.default_skill"]);
    }
}
