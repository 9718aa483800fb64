//! Trust domains and the three RFC §7.2 checks.

use serde::{Deserialize, Deserializer, Serialize};

/// A named security boundary (RFC §7.1). Reads the object form or a bare string
/// (`"trust_domain": "acme-prod"`, which means no cross-domain trust).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct TrustDomain {
    /// Domain name.
    pub name: String,
    /// Whether sessions from other domains may be accepted at all.
    pub allow_cross_domain: bool,
    /// The other domains trusted when `allow_cross_domain` is true.
    pub trusted_peers: Vec<String>,
}

impl TrustDomain {
    /// A closed domain of this name.
    pub fn named(name: impl Into<String>) -> Self {
        TrustDomain {
            name: name.into(),
            allow_cross_domain: false,
            trusted_peers: Vec::new(),
        }
    }

    /// Whether this domain accepts a session initiated from `peer` (same name, or cross-domain
    /// allowed and `peer` listed).
    pub fn trusts(&self, peer: &str) -> bool {
        self.name == peer
            || (self.allow_cross_domain && self.trusted_peers.iter().any(|p| p == peer))
    }
}

impl Default for TrustDomain {
    fn default() -> Self {
        TrustDomain::named("default")
    }
}

impl<'de> Deserialize<'de> for TrustDomain {
    fn deserialize<D: Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Object {
            name: String,
            #[serde(default)]
            allow_cross_domain: bool,
            #[serde(default)]
            trusted_peers: Vec<String>,
        }
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Form {
            Name(String),
            Object(Object),
        }
        let domain = match Form::deserialize(de)? {
            Form::Name(name) => TrustDomain::named(name),
            Form::Object(o) => TrustDomain {
                name: o.name,
                allow_cross_domain: o.allow_cross_domain,
                trusted_peers: o.trusted_peers,
            },
        };
        if domain.name.trim().is_empty() {
            return Err(serde::de::Error::custom(
                "trust domain name must not be empty",
            ));
        }
        Ok(domain)
    }
}

/// Why a session may not be established between an initiator domain and a responder.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TrustViolation {
    /// §7.2 check 1: the initiator required a domain the responder is not in.
    #[error("required trust domain '{required}' does not match responder domain '{actual}'")]
    RequiredDomainMismatch {
        /// What the initiator required.
        required: String,
        /// The responder's domain.
        actual: String,
    },
    /// §7.2 check 2: different domains and the responder allows no cross-domain sessions.
    #[error(
        "trust domain '{initiator}' is not '{responder}', which allows no cross-domain sessions"
    )]
    CrossDomainNotAllowed {
        /// The initiator's domain.
        initiator: String,
        /// The responder's domain.
        responder: String,
    },
    /// §7.2 check 3: cross-domain allowed, but the initiator is not a trusted peer.
    #[error("trust domain '{initiator}' is not among the trusted peers of '{responder}'")]
    PeerNotTrusted {
        /// The initiator's domain.
        initiator: String,
        /// The responder's domain.
        responder: String,
    },
}

/// Whether [`check_session`] passes, without building its error (routing asks this of every
/// candidate).
pub fn session_allowed(responder: &TrustDomain, initiator: &str, required: Option<&str>) -> bool {
    required.is_none_or(|r| r == responder.name)
        && (initiator == responder.name
            || (responder.allow_cross_domain
                && responder.trusted_peers.iter().any(|p| p == initiator)))
}

/// The three RFC §7.2 checks, in order, for a responder in `responder` receiving a session
/// proposal from `initiator` that may require the responder to be in `required`.
pub fn check_session(
    responder: &TrustDomain,
    initiator: &str,
    required: Option<&str>,
) -> Result<(), TrustViolation> {
    if let Some(required) = required {
        if required != responder.name {
            return Err(TrustViolation::RequiredDomainMismatch {
                required: required.to_owned(),
                actual: responder.name.clone(),
            });
        }
    }
    if initiator == responder.name {
        return Ok(());
    }
    if !responder.allow_cross_domain {
        return Err(TrustViolation::CrossDomainNotAllowed {
            initiator: initiator.to_owned(),
            responder: responder.name.clone(),
        });
    }
    if !responder.trusted_peers.iter().any(|p| p == initiator) {
        return Err(TrustViolation::PeerNotTrusted {
            initiator: initiator.to_owned(),
            responder: responder.name.clone(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open(name: &str, peers: &[&str]) -> TrustDomain {
        TrustDomain {
            name: name.into(),
            allow_cross_domain: true,
            trusted_peers: peers.iter().map(|p| p.to_string()).collect(),
        }
    }

    #[test]
    fn reads_object_and_bare_string() {
        let a: TrustDomain = serde_json::from_str(r#""acme""#).unwrap();
        assert_eq!(a, TrustDomain::named("acme"));
        let b: TrustDomain = serde_json::from_str(
            r#"{"name":"acme","allow_cross_domain":true,"trusted_peers":["x"]}"#,
        )
        .unwrap();
        assert_eq!(b, open("acme", &["x"]));
        let c: TrustDomain = serde_json::from_str(r#"{"name":"acme"}"#).unwrap();
        assert_eq!(c, TrustDomain::named("acme"));
        assert!(serde_json::from_str::<TrustDomain>(r#""  ""#).is_err());
    }

    #[test]
    fn check_one_required_domain() {
        let r = check_session(&TrustDomain::named("a"), "a", Some("b"));
        assert!(matches!(
            r,
            Err(TrustViolation::RequiredDomainMismatch { .. })
        ));
        assert!(check_session(&TrustDomain::named("a"), "a", Some("a")).is_ok());
    }

    #[test]
    fn check_two_closed_domain() {
        let r = check_session(&TrustDomain::named("a"), "b", None);
        assert!(matches!(
            r,
            Err(TrustViolation::CrossDomainNotAllowed { .. })
        ));
    }

    #[test]
    fn check_three_trusted_peers() {
        assert!(check_session(&open("a", &["b"]), "b", None).is_ok());
        let r = check_session(&open("a", &["b"]), "c", None);
        assert!(matches!(r, Err(TrustViolation::PeerNotTrusted { .. })));
        assert!(open("a", &["b"]).trusts("b"));
        assert!(!TrustDomain::named("a").trusts("b"));
    }

    #[test]
    fn the_quick_answer_agrees_with_the_checks() {
        let domains = [TrustDomain::named("a"), open("a", &["b"]), open("a", &[])];
        for d in &domains {
            for initiator in ["a", "b", "c"] {
                for required in [None, Some("a"), Some("b")] {
                    assert_eq!(
                        session_allowed(d, initiator, required),
                        check_session(d, initiator, required).is_ok(),
                        "{d:?} {initiator} {required:?}"
                    );
                }
            }
        }
    }
}
