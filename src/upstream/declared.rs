//! The identity card of a delegate whose identity is declared (`[delegates.card]`): an
//! OpenAI-compatible or Anthropic model, which has no card of its own (an A2A agent's card
//! takes its prices from here too), so that routing, explain, `/admin/delegates` and every
//! policy constraint treat it like any delegate; and the per-token prices it declares.

use crate::chat::Usage;
use crate::config::DeclaredCard;
#[cfg(test)]
use crate::ldp::TrustDomain;
use crate::ldp::{Capability, CapabilityHints, ClaimType, IdentityCard, PayloadMode};
use std::collections::BTreeMap;

/// A typical call's tokens, input and output, by which a per-token price becomes the card's
/// per-call price (what routing compares across delegates). Budgets hold and charge the real
/// estimate and usage, not this.
pub const TYPICAL_CALL_TOKENS: (u64, u64) = (1000, 500);

/// USD per million tokens: input, output, and input read from or written to a prompt cache.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Prices {
    /// Per million input tokens (not from the cache).
    pub input: f64,
    /// Per million output tokens.
    pub output: f64,
    /// Per million input tokens read from the cache.
    pub cache_read: f64,
    /// Per million input tokens written to the cache.
    pub cache_write: f64,
}

impl Prices {
    /// What `prompt` input and `completion` output tokens cost (no cache).
    pub fn cost(&self, prompt: u64, completion: u64) -> f64 {
        (prompt as f64 * self.input + completion as f64 * self.output) / 1e6
    }

    /// The most `prompt` tokens in and `completion` out may cost: the input priced as a
    /// cache write where that costs more (a prompt marked for caching is written, not read).
    pub fn most_cost(&self, prompt: u64, completion: u64) -> f64 {
        (prompt as f64 * self.input.max(self.cache_write) + completion as f64 * self.output) / 1e6
    }

    /// What `u` costs: each count at its own price, the cache's apart from the input's (the
    /// usage counts them apart, so nothing is charged twice).
    pub fn cost_of(&self, u: &Usage) -> f64 {
        self.cost(u.input_tokens, u.output_tokens)
            + (u.cache_read_tokens as f64 * self.cache_read
                + u.cache_write_tokens as f64 * self.cache_write)
                / 1e6
    }

    /// Whether anything costs money.
    pub fn is_free(&self) -> bool {
        self.input == 0.0 && self.output == 0.0 && self.cache_read == 0.0 && self.cache_write == 0.0
    }
}

/// The card of an entry without `[delegates.card]` (`check` refuses one for a chat model; a
/// registration through the API has none).
pub static EMPTY_CARD: DeclaredCard = DeclaredCard {
    skills: Vec::new(),
    quality: None,
    price_per_mtok_input: None,
    price_per_mtok_output: None,
    price_per_mtok_cache_read: None,
    price_per_mtok_cache_write: None,
    latency_p50_ms: None,
    jurisdiction: None,
    trust_domain: None,
    context_window: None,
    model_family: None,
};

/// The declared prices (absent ones are 0; an absent cache price is the input price, so a
/// card that names none charges cached tokens as any input).
pub fn prices(card: &DeclaredCard) -> Prices {
    let input = card.price_per_mtok_input.unwrap_or(0.0);
    Prices {
        input,
        output: card.price_per_mtok_output.unwrap_or(0.0),
        cache_read: card.price_per_mtok_cache_read.unwrap_or(input),
        cache_write: card.price_per_mtok_cache_write.unwrap_or(input),
    }
}

/// The full LDP card of delegate `name` of `kind` (`openai`, `anthropic`) serving `model` at
/// `url`. Its id is `ldp:delegate:<name>`, its version the model; each skill carries the
/// declared quality, latency, the price of a typical call ([`TYPICAL_CALL_TOKENS`]) and
/// streaming; metadata says the kind and the per-token prices.
pub fn build(kind: &str, name: &str, url: &str, model: &str, card: &DeclaredCard) -> IdentityCard {
    let p = prices(card);
    let (typical_in, typical_out) = TYPICAL_CALL_TOKENS;
    let hints = CapabilityHints {
        quality: card.quality,
        latency_p50_ms: card.latency_p50_ms,
        cost_per_call_usd: Some(p.cost(typical_in, typical_out)),
        supports_streaming: Some(true),
        claim_type: Some(ClaimType::SelfClaimed),
        ..CapabilityHints::default()
    };
    let capabilities = card
        .skills
        .iter()
        .map(|s| Capability {
            hints: hints.clone(),
            ..Capability::named(s.as_str())
        })
        .collect();
    let mut metadata = BTreeMap::new();
    metadata.insert("kind".to_owned(), kind.to_owned());
    metadata.insert("model".to_owned(), model.to_owned());
    metadata.insert("price_per_mtok_input".to_owned(), p.input.to_string());
    metadata.insert("price_per_mtok_output".to_owned(), p.output.to_string());
    metadata.insert(
        "price_per_mtok_cache_read".to_owned(),
        p.cache_read.to_string(),
    );
    metadata.insert(
        "price_per_mtok_cache_write".to_owned(),
        p.cache_write.to_string(),
    );
    IdentityCard {
        delegate_id: format!("ldp:delegate:{name}"),
        name: name.to_owned(),
        description: Some(match kind {
            "anthropic" => format!("Anthropic model {model} at {url}"),
            _ => format!("OpenAI-compatible model {model} at {url}"),
        }),
        model_family: card
            .model_family
            .clone()
            .unwrap_or_else(|| model.to_owned()),
        model_version: model.to_owned(),
        weights_fingerprint: None,
        trust_domain: card.trust_domain.clone().unwrap_or_default(),
        context_window: card.context_window,
        reasoning_profile: None,
        cost_profile: None,
        latency_profile: card.latency_p50_ms.map(|ms| format!("p50:{ms}ms")),
        jurisdiction: card.jurisdiction.clone(),
        capabilities,
        // A chat model reads text; a frame is rendered to text for it (`translate`).
        supported_payload_modes: vec![PayloadMode::Text],
        endpoint: Some(url.to_owned()),
        metadata,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_declared_card_becomes_a_full_ldp_card() {
        let declared = DeclaredCard {
            skills: vec!["chat".into(), "summarize".into()],
            quality: Some(0.8),
            price_per_mtok_input: Some(0.15),
            price_per_mtok_output: Some(0.60),
            price_per_mtok_cache_read: None,
            price_per_mtok_cache_write: Some(0.3),
            latency_p50_ms: Some(800),
            jurisdiction: Some("us-east".into()),
            trust_domain: None,
            context_window: Some(128_000),
            model_family: Some("gpt-4o".into()),
        };
        let card = build("openai", "mini", "http://h/v1", "gpt-4o-mini", &declared);
        assert_eq!(card.delegate_id, "ldp:delegate:mini");
        assert_eq!(
            (card.model_family.as_str(), card.model_version.as_str()),
            ("gpt-4o", "gpt-4o-mini")
        );
        assert_eq!(card.trust_domain, TrustDomain::default());
        assert_eq!(card.context_window, Some(128_000));
        assert_eq!(card.capabilities.len(), 2);
        let h = card.effective_hints("summarize").unwrap();
        assert_eq!(h.quality, Some(0.8));
        assert_eq!(h.latency_p50_ms, Some(800));
        assert_eq!(h.supports_streaming, Some(true));
        // 1000 in at 0.15 + 500 out at 0.60 per million.
        let per_call = h.cost_per_call_usd.unwrap();
        assert!((per_call - 0.00045).abs() < 1e-12, "{per_call}");
        assert_eq!(card.metadata["kind"], "openai");
        assert_eq!(card.supported_payload_modes, [PayloadMode::Text]);
        let p = prices(&declared);
        assert!((p.cost(2_000_000, 1_000_000) - 0.90).abs() < 1e-12);
        // Cache reads at the input price (none declared), writes at their own; never twice.
        let u = Usage::with_cache(1_000_000, 0, 1_000_000, 1_000_000);
        assert!((p.cost_of(&u) - (0.15 + 0.15 + 0.3)).abs() < 1e-12);
        assert!(Prices::default().is_free() && !p.is_free());
    }
}
