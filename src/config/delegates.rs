//! `[[delegates]]`: the delegates known at start, and the URL rule they (and registrations)
//! follow.

use super::checks::Checks;
use super::RateConfig;
use crate::ldp::TrustDomain;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashSet};

/// What a delegate speaks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DelegateKind {
    /// LDP: it serves its own identity card and sessions.
    #[default]
    Ldp,
    /// An OpenAI-compatible chat-completions server; its identity is declared in
    /// `[delegates.card]`.
    OpenAi,
    /// An A2A agent: its identity is built from its Agent Card, completed by
    /// `[delegates.card]`.
    A2a,
    /// An Anthropic Messages API server; its identity is declared in `[delegates.card]`.
    Anthropic,
}

/// How an Anthropic delegate is sent its key.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AnthropicAuth {
    /// `x-api-key: <key>`, as Anthropic's API takes it.
    #[default]
    XApiKey,
    /// `Authorization: Bearer <key>` (API version `2026-10-21`, and servers that take only it).
    Bearer,
}

/// The request field an OpenAI-backed delegate is sent its output bound in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MaxTokensParam {
    /// `max_tokens`: every OpenAI-compatible server reads it.
    MaxTokens,
    /// `max_completion_tokens`: OpenAI's newer name, the only one its reasoning models take.
    MaxCompletionTokens,
}

/// `[delegates.card]`: the identity an operator declares for an OpenAI-backed delegate, which
/// has no card of its own, or completes for an A2A agent, whose Agent Card says nothing of
/// quality, prices or trust. The gateway builds a full LDP identity card from it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DeclaredCard {
    /// The skills it offers (at least one for an OpenAI-backed delegate; for an A2A agent,
    /// optional: when given, only these of its Agent Card's skills are offered).
    #[serde(default)]
    pub skills: Vec<String>,
    /// Quality 0..1.
    #[serde(default)]
    pub quality: Option<f64>,
    /// USD per million input (prompt) tokens.
    #[serde(default)]
    pub price_per_mtok_input: Option<f64>,
    /// USD per million output (completion) tokens.
    #[serde(default)]
    pub price_per_mtok_output: Option<f64>,
    /// USD per million input tokens read from the provider's prompt cache (default: the
    /// input price).
    #[serde(default)]
    pub price_per_mtok_cache_read: Option<f64>,
    /// USD per million input tokens written to the provider's prompt cache (default: the
    /// input price).
    #[serde(default)]
    pub price_per_mtok_cache_write: Option<f64>,
    /// Median latency, ms.
    #[serde(default)]
    pub latency_p50_ms: Option<u64>,
    /// Jurisdiction (`us-east`, …).
    #[serde(default)]
    pub jurisdiction: Option<String>,
    /// Its trust domain (default: the closed domain `default`).
    #[serde(default)]
    pub trust_domain: Option<TrustDomain>,
    /// Context window in tokens (bounds the conversation sent with each task).
    #[serde(default)]
    pub context_window: Option<u64>,
    /// Model family (default: the `model`).
    #[serde(default)]
    pub model_family: Option<String>,
}

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
    /// `"ldp"` (default), `"openai"`, `"anthropic"` or `"a2a"`.
    #[serde(default)]
    pub kind: DelegateKind,
    /// OpenAI-backed or Anthropic: the upstream model name sent with every request.
    #[serde(default)]
    pub model: Option<String>,
    /// OpenAI-backed, Anthropic or A2A: the environment variable holding the API key (sent
    /// as `Authorization: Bearer`; to an Anthropic delegate as `auth` says).
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// OpenAI-backed: the declared identity; A2A: what completes the Agent Card's.
    #[serde(default)]
    pub card: Option<DeclaredCard>,
    /// OpenAI-backed: the field every request's output bound is sent in (default: the one
    /// an ingress client named, else `max_tokens`).
    #[serde(default)]
    pub max_tokens_param: Option<MaxTokensParam>,
    /// Anthropic: how the key is sent (`x-api-key`, the default, or `bearer`).
    #[serde(default)]
    pub auth: Option<AnthropicAuth>,
    /// Anthropic: the `anthropic-version` sent (default `2023-06-01`).
    #[serde(default)]
    pub anthropic_version: Option<String>,
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
            kind: DelegateKind::Ldp,
            model: None,
            api_key_env: None,
            card: None,
            max_tokens_param: None,
            auth: None,
            anthropic_version: None,
        }
    }

    /// The name it is registered, labelled and recorded under: `name`, else its URL with
    /// any password masked (a URL is a label in `/metrics`, readable without a token).
    pub fn registry_name(&self) -> String {
        self.name
            .clone()
            .unwrap_or_else(|| crate::secret::redact_url(&self.url))
    }

    /// Checks entry `i` (`delegates[i]`); names are checked across the list by [`check_all`].
    fn check(&self, i: usize, c: &mut Checks) {
        match normalize_url(&self.url) {
            Ok(_) => {}
            Err(reason @ UrlError::Userinfo(_)) => c.push(
                format!("delegates[{i}].url"),
                format!("{reason} (an OpenAI-backed delegate's key goes in api_key_env)"),
            ),
            Err(reason) => c.push(format!("delegates[{i}].url"), reason.to_string()),
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
        match self.kind {
            DelegateKind::Ldp => {
                for (key, set) in [
                    ("model", self.model.is_some()),
                    ("api_key_env", self.api_key_env.is_some()),
                    ("card", self.card.is_some()),
                    ("max_tokens_param", self.max_tokens_param.is_some()),
                ] {
                    if set {
                        c.push(
                            format!("delegates[{i}].{key}"),
                            "only for kind = \"openai\" or \"anthropic\" (an LDP delegate serves its own card)",
                        );
                    }
                }
            }
            DelegateKind::OpenAi => self.check_chat(i, "openai", c),
            DelegateKind::Anthropic => self.check_chat(i, "anthropic", c),
            DelegateKind::A2a => self.check_a2a(i, c),
        }
        if self.kind != DelegateKind::Anthropic {
            for (key, set) in [
                ("auth", self.auth.is_some()),
                ("anthropic_version", self.anthropic_version.is_some()),
            ] {
                if set {
                    c.push(
                        format!("delegates[{i}].{key}"),
                        "only for kind = \"anthropic\"",
                    );
                }
            }
        }
    }

    /// An A2A entry: no model, no signing secret, no output-bound field; an API key variable
    /// that can be one; a declared card (optional) with sane values.
    fn check_a2a(&self, i: usize, c: &mut Checks) {
        let at = |key: &str| format!("delegates[{i}].{key}");
        for (key, set) in [
            ("model", self.model.is_some()),
            ("signing_secret_env", self.signing_secret_env.is_some()),
            ("max_tokens_param", self.max_tokens_param.is_some()),
        ] {
            if set {
                c.push(
                    at(key),
                    "not for kind = \"a2a\" (an A2A agent is called by its Agent Card)",
                );
            }
        }
        self.check_key_var(i, c);
        if let Some(card) = &self.card {
            check_declared(i, card, c);
        }
    }

    /// A chat model's entry (`kind`, `openai` or `anthropic`): a model, a declared card with
    /// sane values, an environment variable name that can be one, and no LDP-only setting.
    fn check_chat(&self, i: usize, kind: &str, c: &mut Checks) {
        let at = |key: &str| format!("delegates[{i}].{key}");
        if self.model.as_ref().is_none_or(|m| m.trim().is_empty()) {
            c.push(
                at("model"),
                format!("required for kind = \"{kind}\" (the upstream model)"),
            );
        }
        if self.signing_secret_env.is_some() {
            c.push(
                at("signing_secret_env"),
                "only for LDP delegates (a chat endpoint verifies no signature)",
            );
        }
        if self.kind == DelegateKind::Anthropic {
            if self.max_tokens_param.is_some() {
                c.push(
                    at("max_tokens_param"),
                    "only for kind = \"openai\" (Anthropic's API takes `max_tokens`)",
                );
            }
            let header_safe = |v: &str| !v.is_empty() && v.bytes().all(|b| b.is_ascii_graphic());
            if self
                .anthropic_version
                .as_deref()
                .is_some_and(|v| !header_safe(v))
            {
                c.push(
                    at("anthropic_version"),
                    "must be an API version such as \"2023-06-01\"",
                );
            }
        }
        self.check_key_var(i, c);
        let Some(card) = &self.card else {
            c.push(
                at("card"),
                format!("required for kind = \"{kind}\": [delegates.card] with at least `skills`"),
            );
            return;
        };
        if card.skills.is_empty() {
            c.push(at("card.skills"), "must name at least one skill");
        }
        check_declared(i, card, c);
    }

    /// `api_key_env` names an environment variable.
    fn check_key_var(&self, i: usize, c: &mut Checks) {
        if let Some(var) = &self.api_key_env {
            let valid = !var.is_empty()
                && var
                    .chars()
                    .all(|ch| ch.is_ascii_alphanumeric() || ch == '_');
            if !valid {
                c.push(
                    format!("delegates[{i}].api_key_env"),
                    "must be an environment variable name ([A-Za-z0-9_]+)",
                );
            }
        }
    }
}

/// The values of entry `i`'s declared card (skills named properly, quality a fraction, prices
/// and the window sane, the trust domain named).
fn check_declared(i: usize, card: &DeclaredCard, c: &mut Checks) {
    let at = |key: &str| format!("delegates[{i}].{key}");
    if card
        .skills
        .iter()
        .any(|s| s.trim().is_empty() || s.contains('@'))
    {
        c.push(
            at("card.skills"),
            "skill names must be non-empty, without '@'",
        );
    }
    if let Some(q) = card.quality {
        c.fraction(&at("card.quality"), q);
    }
    for (key, price) in [
        ("card.price_per_mtok_input", card.price_per_mtok_input),
        ("card.price_per_mtok_output", card.price_per_mtok_output),
        (
            "card.price_per_mtok_cache_read",
            card.price_per_mtok_cache_read,
        ),
        (
            "card.price_per_mtok_cache_write",
            card.price_per_mtok_cache_write,
        ),
    ] {
        if price.is_some_and(|p| !(p.is_finite() && p >= 0.0)) {
            c.push(at(key), "must be a number of USD, 0 or more");
        }
    }
    if card.context_window == Some(0) {
        c.push(at("card.context_window"), "must be at least 1 token");
    }
    if card
        .trust_domain
        .as_ref()
        .is_some_and(|d| d.name.trim().is_empty())
    {
        c.push(at("card.trust_domain"), "must have a name");
    }
}

/// Checks every entry, and that registry names (the URL when unnamed) are unique.
pub(super) fn check_all(delegates: &[DelegateConfig], c: &mut Checks) {
    let mut names = HashSet::new();
    for (i, d) in delegates.iter().enumerate() {
        d.check(i, c);
        let name = d.registry_name();
        if !names.insert(name.clone()) {
            c.push(
                format!("delegates[{i}].name"),
                format!("duplicate delegate '{name}'"),
            );
        }
    }
}

/// Delegate URLs are read as the client reads them: `ldp://` is `http://`, the trailing slash
/// goes (see [`ldp_client::base_url`]).
pub use ldp_client::{base_url as normalize_url, UrlError};

#[cfg(test)]
mod tests {
    use super::*;

    fn openai() -> DelegateConfig {
        DelegateConfig {
            kind: DelegateKind::OpenAi,
            model: Some("m".into()),
            card: Some(DeclaredCard {
                skills: vec!["chat".into()],
                quality: Some(0.8),
                price_per_mtok_input: Some(0.15),
                price_per_mtok_output: Some(0.6),
                price_per_mtok_cache_read: None,
                price_per_mtok_cache_write: None,
                latency_p50_ms: None,
                jurisdiction: None,
                trust_domain: None,
                context_window: Some(8000),
                model_family: None,
            }),
            ..DelegateConfig::new("http://127.0.0.1:4000/v1")
        }
    }

    fn problems(d: &DelegateConfig) -> Vec<(String, String)> {
        let mut c = Checks::default();
        d.check(0, &mut c);
        c.out
    }

    #[test]
    fn a2a_entries_need_no_card_and_refuse_openai_and_ldp_only_keys() {
        let entry: DelegateConfig = serde_json::from_value(serde_json::json!({
            "url": "http://agent:9999", "kind": "a2a", "card": {"quality": 0.7}
        }))
        .unwrap();
        assert_eq!(entry.kind, DelegateKind::A2a);
        assert!(problems(&entry).is_empty(), "{:?}", problems(&entry));
        assert!(problems(&DelegateConfig {
            kind: DelegateKind::A2a,
            ..DelegateConfig::new("http://agent:9999")
        })
        .is_empty());
        let mut bad = entry;
        bad.model = Some("m".into());
        bad.signing_secret_env = Some("S".into());
        bad.api_key_env = Some("NOT A VAR".into());
        if let Some(card) = bad.card.as_mut() {
            card.skills = vec!["a@b".into()];
            card.quality = Some(3.0);
        }
        let keys: Vec<String> = problems(&bad).into_iter().map(|(k, _)| k).collect();
        assert_eq!(
            keys,
            [
                "delegates[0].model",
                "delegates[0].signing_secret_env",
                "delegates[0].api_key_env",
                "delegates[0].card.skills",
                "delegates[0].card.quality",
            ]
        );
        assert_eq!(
            problems(&bad)[0].1,
            "not for kind = \"a2a\" (an A2A agent is called by its Agent Card)"
        );
    }

    #[test]
    fn credentials_in_a_url_are_refused_without_being_shown() {
        let d = DelegateConfig::new("http://admin:hunter2@127.0.0.1:9/x");
        assert_eq!(
            problems(&d),
            [(
                "delegates[0].url".to_owned(),
                "'http://***@127.0.0.1:9/x' carries credentials (user:password@ before the host), \
                 which are never sent and would be shown wherever the URL is: give the URL \
                 without them (an OpenAI-backed delegate's key goes in api_key_env)"
                    .to_owned()
            )]
        );
        // An unnamed delegate is named by its URL: never with the password.
        assert_eq!(d.registry_name(), "http://admin:***@127.0.0.1:9/x");
    }

    #[test]
    fn openai_entries_are_checked_key_by_key() {
        assert!(problems(&openai()).is_empty(), "{:?}", problems(&openai()));
        let mut d = openai();
        d.model = None;
        d.api_key_env = Some("NOT A VAR".into());
        d.signing_secret_env = Some("S".into());
        if let Some(card) = d.card.as_mut() {
            card.skills = vec!["a@b".into()];
            card.quality = Some(2.0);
            card.price_per_mtok_output = Some(-1.0);
            card.context_window = Some(0);
        }
        let keys: Vec<String> = problems(&d).into_iter().map(|(k, _)| k).collect();
        assert_eq!(
            keys,
            [
                "delegates[0].model",
                "delegates[0].signing_secret_env",
                "delegates[0].api_key_env",
                "delegates[0].card.skills",
                "delegates[0].card.quality",
                "delegates[0].card.price_per_mtok_output",
                "delegates[0].card.context_window",
            ]
        );
        d.card = None;
        assert!(problems(&d).iter().any(|(k, _)| k == "delegates[0].card"));
        // LDP entries serve their own card: OpenAI-only keys are refused.
        let ldp = DelegateConfig {
            model: Some("m".into()),
            card: openai().card,
            max_tokens_param: Some(MaxTokensParam::MaxCompletionTokens),
            ..DelegateConfig::new("http://127.0.0.1:4000")
        };
        let keys: Vec<String> = problems(&ldp).into_iter().map(|(k, _)| k).collect();
        assert_eq!(
            keys,
            [
                "delegates[0].model",
                "delegates[0].card",
                "delegates[0].max_tokens_param"
            ]
        );
        // The field's two names, as an operator writes them.
        let entry: DelegateConfig = serde_json::from_value(serde_json::json!({
            "url": "http://x/v1", "kind": "openai", "max_tokens_param": "max_completion_tokens"
        }))
        .unwrap();
        assert_eq!(
            entry.max_tokens_param,
            Some(MaxTokensParam::MaxCompletionTokens)
        );
    }
}
