//! Choosing a delegate for a task. Pure: it sees cards and health, never sockets or clocks.
//!
//! This is the seam the policy engine replaces: today the pick is the highest declared
//! quality among healthy delegates that offer the skill and pass the trust-domain rules.

use crate::ldp::trust::check_session;
use crate::ldp::IdentityCard;

/// A delegate as routing sees it.
#[derive(Debug, Clone, Copy)]
pub struct Candidate<'a> {
    /// Registry name.
    pub name: &'a str,
    /// Its current card, if fetched.
    pub card: Option<&'a IdentityCard>,
    /// Whether it is up.
    pub healthy: bool,
}

/// What a task needs.
#[derive(Debug, Clone, Copy)]
pub struct Need<'a> {
    /// The skill.
    pub skill: &'a str,
    /// The client's verified trust domain (C): the delegate's domain must trust it.
    pub client_domain: &'a str,
    /// The domain the session requires its delegates to be in (R).
    pub required_domain: Option<&'a str>,
}

/// Quality assumed for a card that declares none: neither rewarded nor zeroed.
pub const NEUTRAL_QUALITY: f64 = 0.5;

/// Why nothing could be picked; the message names the skill and what excluded the rest.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct NoEligible(pub String);

/// Whether the delegate may serve `need` at all.
pub fn admits(card: &IdentityCard, need: &Need<'_>) -> bool {
    card.capability(need.skill).is_some()
        && check_session(&card.trust_domain, need.client_domain, need.required_domain).is_ok()
}

/// The index of the chosen candidate.
pub fn pick(candidates: &[Candidate<'_>], need: &Need<'_>) -> Result<usize, NoEligible> {
    let mut best: Option<(usize, f64)> = None;
    let (mut offering, mut offering_healthy) = (0usize, 0usize);
    for (i, c) in candidates.iter().enumerate() {
        let Some(card) = c.card else { continue };
        let Some(cap) = card.capability(need.skill) else {
            continue;
        };
        offering += 1;
        if !c.healthy {
            continue;
        }
        offering_healthy += 1;
        if check_session(&card.trust_domain, need.client_domain, need.required_domain).is_err() {
            continue;
        }
        let q = cap.hints.quality.unwrap_or(NEUTRAL_QUALITY);
        if best.is_none_or(|(_, b)| q > b) {
            best = Some((i, q));
        }
    }
    best.map(|(i, _)| i).ok_or_else(|| {
        let skill = need.skill;
        NoEligible(if offering == 0 {
            format!("no delegate offers skill '{skill}'")
        } else if offering_healthy == 0 {
            format!("{offering} delegate(s) offer skill '{skill}' but none is healthy")
        } else {
            let r = need
                .required_domain
                .map(|r| format!(" and is in required domain '{r}'"))
                .unwrap_or_default();
            format!(
                "{offering_healthy} healthy delegate(s) offer skill '{skill}' but none trusts client domain '{}'{r}",
                need.client_domain
            )
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ldp::{Capability, TrustDomain};

    fn card(id: &str, domain: &str, skill: &str, q: Option<f64>) -> IdentityCard {
        let mut cap = Capability::named(skill);
        cap.hints.quality = q;
        serde_json::from_value::<IdentityCard>(serde_json::json!({
            "delegate_id": id, "name": id, "model_family": "f", "model_version": "1",
            "trust_domain": domain, "capabilities": []
        }))
        .map(|mut c| {
            c.capabilities.push(cap);
            c.trust_domain = TrustDomain::named(domain);
            c
        })
        .unwrap()
    }

    #[test]
    fn highest_quality_healthy_trusted_wins() {
        let a = card("a", "default", "s", Some(0.9));
        let b = card("b", "default", "s", Some(0.7));
        let c = card("c", "other", "s", Some(0.99));
        let d = card("d", "default", "s", Some(0.95));
        let cands = [
            Candidate {
                name: "a",
                card: Some(&a),
                healthy: true,
            },
            Candidate {
                name: "b",
                card: Some(&b),
                healthy: true,
            },
            Candidate {
                name: "c",
                card: Some(&c),
                healthy: true,
            },
            Candidate {
                name: "d",
                card: Some(&d),
                healthy: false,
            },
        ];
        let need = Need {
            skill: "s",
            client_domain: "default",
            required_domain: None,
        };
        assert_eq!(pick(&cands, &need), Ok(0));
    }

    #[test]
    fn missing_quality_is_neutral_not_zero() {
        let a = card("a", "default", "s", None);
        let b = card("b", "default", "s", Some(0.4));
        let cands = [
            Candidate {
                name: "b",
                card: Some(&b),
                healthy: true,
            },
            Candidate {
                name: "a",
                card: Some(&a),
                healthy: true,
            },
        ];
        let need = Need {
            skill: "s",
            client_domain: "default",
            required_domain: None,
        };
        assert_eq!(pick(&cands, &need), Ok(1));
    }

    #[test]
    fn reasons_name_the_skill() {
        let a = card("a", "other", "s", Some(0.9));
        let cands = [Candidate {
            name: "a",
            card: Some(&a),
            healthy: true,
        }];
        let need = Need {
            skill: "x",
            client_domain: "default",
            required_domain: None,
        };
        assert_eq!(
            pick(&cands, &need).unwrap_err().0,
            "no delegate offers skill 'x'"
        );
        let need = Need {
            skill: "s",
            client_domain: "default",
            required_domain: None,
        };
        assert!(pick(&cands, &need)
            .unwrap_err()
            .0
            .contains("none trusts client domain 'default'"));
        let down = [Candidate {
            name: "a",
            card: Some(&a),
            healthy: false,
        }];
        assert!(pick(&down, &need)
            .unwrap_err()
            .0
            .contains("none is healthy"));
    }
}
