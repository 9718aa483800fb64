//! The identity card of an A2A agent: its skills from the Agent Card's `skills` (restricted
//! to the declared ones when `[delegates.card] skills` is given); its identity from the RFC
//! §9.1 `ldp.*` labels in the `params` of a `capabilities.extensions[]` entry where the card
//! carries them; the rest (quality, prices, latency, jurisdiction, trust domain, model
//! family) from `[delegates.card]`. What the operator declared wins over what the agent
//! claims of itself (a trust domain, a jurisdiction); a label fills what is not declared.

use crate::config::DeclaredCard;
use crate::ldp::{Capability, CapabilityHints, ClaimType, IdentityCard, PayloadMode, TrustDomain};
use a2a_wire::AgentCard;
use serde_json::Value;
use std::collections::BTreeMap;

/// Most skills taken from one Agent Card; the rest are ignored.
pub const MAX_SKILLS: usize = 256;
/// Longest skill id, label value or description kept from an Agent Card, in bytes; a longer
/// skill id is skipped, a longer label or description is cut.
pub const MAX_TEXT: usize = 1024;

/// Why an Agent Card gives no usable LDP card.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum CardError {
    /// No skill of the card is offered (none, or none of the declared ones).
    #[error("the Agent Card offers no usable skill{}", if *.0 { " among the declared `skills`" } else { "" })]
    NoSkills(bool),
}

/// The `ldp.*` labels an Agent Card carries in a `capabilities.extensions[]` entry's
/// `params` (the first entry that has any), values as text.
pub fn labels(agent: &AgentCard) -> BTreeMap<String, String> {
    let Some(caps) = &agent.capabilities else {
        return BTreeMap::new();
    };
    for ext in &caps.extensions {
        let Some(params) = &ext.params else { continue };
        let found: BTreeMap<String, String> = params
            .iter()
            .filter(|(k, _)| k.starts_with("ldp.") && k.len() <= 64)
            .filter_map(|(k, v)| {
                let text = match v {
                    Value::String(s) => s.clone(),
                    Value::Number(n) => n.to_string(),
                    Value::Bool(b) => b.to_string(),
                    _ => return None,
                };
                Some((k.clone(), cut(&text)))
            })
            .take(32)
            .collect();
        if !found.is_empty() {
            return found;
        }
    }
    BTreeMap::new()
}

/// `s` within [`MAX_TEXT`] bytes, cut at a character boundary.
fn cut(s: &str) -> String {
    crate::ldp::text::cut(s, MAX_TEXT).to_owned()
}

/// The full LDP card of A2A delegate `name` at `url`, from its Agent Card and what was
/// declared. Its id is the `ldp.delegate_id` label, else `ldp:delegate:<name>`; its version
/// the `ldp.model_version` label, else the Agent Card's `version`; each skill carries the
/// declared quality, latency, the price of a typical call and whether the agent streams;
/// metadata says `kind = a2a` and the agent's name.
pub fn build(
    name: &str,
    url: &str,
    agent: &AgentCard,
    declared: Option<&DeclaredCard>,
) -> Result<IdentityCard, CardError> {
    let labels = labels(agent);
    let label = |k: &str| labels.get(k).filter(|v| !v.trim().is_empty()).cloned();
    let restrict = declared.map(|d| d.skills.as_slice()).unwrap_or_default();
    let p = declared
        .map(crate::upstream::declared::prices)
        .unwrap_or_default();
    let (typical_in, typical_out) = crate::upstream::declared::TYPICAL_CALL_TOKENS;
    let hints = CapabilityHints {
        quality: declared.and_then(|d| d.quality),
        latency_p50_ms: declared.and_then(|d| d.latency_p50_ms),
        cost_per_call_usd: Some(p.cost(typical_in, typical_out)),
        supports_streaming: Some(agent.streaming()),
        claim_type: Some(ClaimType::SelfClaimed),
        ..CapabilityHints::default()
    };
    let mut capabilities: Vec<Capability> = Vec::new();
    for s in agent.skills.iter().take(MAX_SKILLS) {
        let id = s.id.trim();
        let usable = !id.is_empty() && !id.contains('@') && id.len() <= MAX_TEXT;
        let wanted = restrict.is_empty() || restrict.iter().any(|r| r == id);
        if !usable || !wanted || capabilities.iter().any(|c| c.name == id) {
            continue;
        }
        let description = [s.name.as_str(), s.description.as_str()]
            .into_iter()
            .filter(|t| !t.is_empty())
            .collect::<Vec<_>>()
            .join(": ");
        capabilities.push(Capability {
            description: (!description.is_empty()).then(|| cut(&description)),
            domains: s.tags.iter().take(16).map(|t| cut(t)).collect(),
            hints: hints.clone(),
            ..Capability::named(id)
        });
    }
    if capabilities.is_empty() {
        return Err(CardError::NoSkills(!restrict.is_empty()));
    }
    let trust_domain = declared
        .and_then(|d| d.trust_domain.clone())
        .or_else(|| label("ldp.trust_domain").map(TrustDomain::named))
        .unwrap_or_default();
    let version = label("ldp.model_version").unwrap_or_else(|| cut(&agent.version));
    let mut metadata = BTreeMap::new();
    metadata.insert("kind".to_owned(), "a2a".to_owned());
    metadata.insert("agent_name".to_owned(), cut(&agent.name));
    metadata.insert("price_per_mtok_input".to_owned(), p.input.to_string());
    metadata.insert("price_per_mtok_output".to_owned(), p.output.to_string());
    let latency = declared.and_then(|d| d.latency_p50_ms);
    Ok(IdentityCard {
        delegate_id: label("ldp.delegate_id").unwrap_or_else(|| format!("ldp:delegate:{name}")),
        name: name.to_owned(),
        description: Some(if agent.description.is_empty() {
            format!("A2A agent at {url}")
        } else {
            cut(&agent.description)
        }),
        model_family: declared
            .and_then(|d| d.model_family.clone())
            .or_else(|| label("ldp.model_family"))
            .unwrap_or_else(|| cut(&agent.name)),
        model_version: version,
        weights_fingerprint: label("ldp.weights_fingerprint"),
        trust_domain,
        context_window: declared
            .and_then(|d| d.context_window)
            .or_else(|| label("ldp.context_window").and_then(|v| v.trim().parse().ok()))
            .filter(|w| *w > 0),
        reasoning_profile: label("ldp.reasoning_profile"),
        cost_profile: label("ldp.cost_profile"),
        latency_profile: latency
            .map(|ms| format!("p50:{ms}ms"))
            .or_else(|| label("ldp.latency_profile")),
        jurisdiction: declared
            .and_then(|d| d.jurisdiction.clone())
            .or_else(|| label("ldp.jurisdiction")),
        capabilities,
        // A message's text part; a frame goes as a data part.
        supported_payload_modes: vec![PayloadMode::Text],
        endpoint: Some(url.to_owned()),
        metadata,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn agent(v: Value) -> AgentCard {
        serde_json::from_value(v).unwrap()
    }

    fn declared(skills: &[&str]) -> DeclaredCard {
        DeclaredCard {
            skills: skills.iter().map(|s| (*s).to_owned()).collect(),
            quality: Some(0.7),
            price_per_mtok_input: Some(1.0),
            price_per_mtok_output: Some(2.0),
            price_per_mtok_cache_read: None,
            price_per_mtok_cache_write: None,
            latency_p50_ms: Some(300),
            jurisdiction: Some("eu-west".into()),
            trust_domain: None,
            context_window: None,
            model_family: None,
        }
    }

    #[test]
    fn an_agent_card_with_labels_becomes_an_ldp_card() {
        let a = agent(json!({
            "name": "Echo", "description": "echoes", "version": "2.1",
            "capabilities": {"streaming": true, "extensions": [
                {"uri": "urn:other", "params": {"x": 1}},
                {"uri": "urn:ldp", "params": {"ldp.delegate_id": "ldp:delegate:echo-7",
                    "ldp.model_family": "echo-family", "ldp.trust_domain": "lab",
                    "ldp.context_window": 4096, "ldp.jurisdiction": "us-east",
                    "ldp.weights_fingerprint": "abc", "other": "ignored"}}]},
            "skills": [{"id": "echo", "name": "Echo", "description": "says it back",
                "tags": ["t"]}, {"id": "bad@skill", "name": "x"}, {"id": "echo", "name": "dup"},
                {"id": "shout", "name": "Shout"}]
        }));
        let card = build("e", "http://h", &a, Some(&declared(&[]))).unwrap();
        assert_eq!(card.delegate_id, "ldp:delegate:echo-7");
        assert_eq!(card.model_family, "echo-family");
        assert_eq!(card.model_version, "2.1");
        assert_eq!(card.trust_domain, TrustDomain::named("lab"));
        assert_eq!(card.context_window, Some(4096));
        // Declared wins over the agent's own claim.
        assert_eq!(card.jurisdiction.as_deref(), Some("eu-west"));
        assert_eq!(card.weights_fingerprint.as_deref(), Some("abc"));
        let names: Vec<&str> = card.capabilities.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["echo", "shout"]);
        let h = card.effective_hints("echo").unwrap();
        assert_eq!(
            (h.quality, h.latency_p50_ms, h.supports_streaming),
            (Some(0.7), Some(300), Some(true))
        );
        assert!((h.cost_per_call_usd.unwrap() - 0.002).abs() < 1e-12);
        assert_eq!(card.metadata["kind"], "a2a");
        // Declared skills restrict the agent's.
        let only = build("e", "http://h", &a, Some(&declared(&["shout"]))).unwrap();
        assert_eq!(only.capabilities.len(), 1);
        assert_eq!(
            build("e", "http://h", &a, Some(&declared(&["nope"]))),
            Err(CardError::NoSkills(true))
        );
    }

    #[test]
    fn a_bare_card_gets_defaults_and_a_card_without_skills_is_refused() {
        let a = agent(json!({"name": "Bare", "version": "1", "skills": [{"id": "s"}]}));
        let card = build("b", "http://h", &a, None).unwrap();
        assert_eq!(card.delegate_id, "ldp:delegate:b");
        assert_eq!(card.model_family, "Bare");
        assert_eq!(card.trust_domain, TrustDomain::default());
        assert_eq!(
            card.effective_hints("s").unwrap().supports_streaming,
            Some(false)
        );
        let none = agent(json!({"name": "x"}));
        assert_eq!(
            build("b", "u", &none, None),
            Err(CardError::NoSkills(false))
        );
        let long = "é".repeat(MAX_TEXT);
        assert_eq!(cut(&long).len(), MAX_TEXT);
    }
}
