//! Explaining a routing decision from the registry and the policies alone: what
//! `GET /admin/route` and `ldp-gateway route` print, with no gateway running.

use super::{quality, Registry};
use crate::policy::PolicySet;
use crate::routing::{self, Explanation, Need, RoutingParams};
use std::sync::Arc;

/// What to explain.
#[derive(Debug, Clone, Copy)]
pub struct ExplainQuery<'a> {
    /// The skill.
    pub skill: &'a str,
    /// The policy named by the caller (default: what selection would choose).
    pub policy: Option<&'a str>,
    /// The tenant, for `[match] tenants` (`anonymous` when the caller names none).
    pub tenant: &'a str,
    /// The client's trust domain (default: the gateway's own).
    pub client_domain: Option<&'a str>,
}

/// Why no explanation could be given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExplainError {
    /// Policy selection refused: an unknown policy named.
    #[error(transparent)]
    Policy(#[from] crate::policy::UnknownPolicy),
}

/// Explains the decision for `q` over `registry`'s current cards and health, under the
/// policy `policies` selects; `own_domain` is the gateway's trust domain, the client's when
/// `q` names none.
pub fn explain(
    registry: &Registry,
    policies: &PolicySet,
    params: &RoutingParams,
    own_domain: &str,
    q: &ExplainQuery<'_>,
) -> Result<Explanation, ExplainError> {
    let (policy, _) = policies
        .select(q.policy, None, q.skill, q.tenant)
        .map_err(ExplainError::Policy)?;
    let index = registry.index();
    let offers = index.offers(q.skill);
    let others: Vec<(String, String)> = registry
        .snapshot()
        .iter()
        .filter(|d| !offers.iter().any(|o| Arc::ptr_eq(&o.delegate, d)))
        .map(|d| {
            (
                d.name.clone(),
                d.card().map(|c| c.delegate_id.clone()).unwrap_or_default(),
            )
        })
        .collect();
    // The policy's verify skill is explained as choosing verifiers (their reliability and
    // floor); any other skill of a policy with `[verify]` as a verified task's (probation).
    let verify = policy.verify.as_ref();
    let choosing_verifiers = verify.is_some_and(|v| v.skill == q.skill);
    let need = Need {
        skill: q.skill,
        now_ms: quality::now_ms(),
        rater: (!choosing_verifiers).then_some(q.tenant),
        client_domain: q.client_domain.unwrap_or(own_domain),
        probation: verify.is_some() && !choosing_verifiers,
        min_reliability: verify
            .filter(|_| choosing_verifiers)
            .map(|v| v.min_reliability),
        ..Need::default()
    };
    Ok(routing::explain(offers, &others, policy, &need, params))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{DelegateConfig, OutlierConfig};

    #[test]
    fn an_unknown_policy_is_refused_and_a_cardless_fleet_explained() {
        let registry = Registry::from_config(
            &[DelegateConfig::new("http://127.0.0.1:9")],
            OutlierConfig::default(),
            false,
        )
        .unwrap();
        let set = PolicySet::builtin();
        let params = RoutingParams::default();
        let q = ExplainQuery {
            skill: "echo",
            policy: Some("zzz"),
            tenant: "anonymous",
            client_domain: None,
        };
        let e = explain(&registry, &set, &params, "default", &q).unwrap_err();
        assert_eq!(e.to_string(), "unknown policy 'zzz'");
        let q = ExplainQuery { policy: None, ..q };
        let x = explain(&registry, &set, &params, "default", &q).unwrap();
        assert_eq!(x.policy, "balanced");
        assert_eq!(x.delegates.len(), 1);
        assert!(!x.delegates[0].offers_skill);
        assert_eq!(
            x.pick,
            routing::Picked::NoneEligible(routing::NoEligible {
                skill: "echo".into(),
                offering: 0,
                excluded: Vec::new(),
            })
        );
    }
}
