//! Blended quality: what a card declares, weighted by how the claim was made, plus what the
//! gateway has observed (verifier votes and client ratings), which dominates once there is
//! enough of it.
//!
//! The blend is a Beta posterior's mean: the declared quality stands for `k` observations
//! (its claim type's weight, [`claim_weight`]), the evidence for its own (decayed) count:
//! `(k · declared + Σ w·score) / (k + Σ w)`. A card that declares nothing counts as one
//! observation of [`UNDECLARED_PRIOR`] once there is evidence; with neither, quality stays
//! unknown (routing's `missing_score`).
//!
//! `min_quality` gives the evidence the benefit of its doubt ([`plausible`]): a delegate is
//! excluded once its blend, plus one standard deviation of the posterior, falls below the
//! bound. Three votes cannot exclude an honest delegate for one misjudgement, while a
//! delegate right half the time is out after a handful of votes.

use super::badness::Bad;
use crate::ldp::ClaimType;
use serde::Serialize;

/// What the gateway has observed of a delegate's quality at a skill.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Observed {
    /// The evidence's weighted mean score, 0..1.
    pub mean: f64,
    /// How much evidence that is: the sum of its weights, decayed with age.
    pub count: f64,
}

/// The prior of a card that declares no quality, once evidence exists: one observation at 0.5.
pub const UNDECLARED_PRIOR: f64 = 0.5;

/// How many observations a declared quality is worth, by how the claim was made: a
/// delegate's word about itself counts for little, a third party's or a benchmark's for
/// more. Ten failed votes outweigh a self-claim five to one.
pub fn claim_weight(claim: Option<ClaimType>) -> f64 {
    match claim.unwrap_or_default() {
        ClaimType::SelfClaimed => 2.0,
        ClaimType::RuntimeObserved => 5.0,
        ClaimType::IssuerAttested | ClaimType::ExternallyBenchmarked => 10.0,
    }
}

/// The quality routing uses: the declared quality and the evidence blended (see the module).
pub fn blend(
    declared: Option<f64>,
    claim: Option<ClaimType>,
    observed: Option<Observed>,
) -> Option<f64> {
    let observed = observed.filter(|o| o.count > 0.0 && o.mean.is_finite());
    match (declared, observed) {
        (d, None) => d,
        (d, Some(o)) => {
            let (prior, k) = match d {
                Some(q) => (q, claim_weight(claim)),
                None => (UNDECLARED_PRIOR, 1.0),
            };
            Some(((k * prior + o.count * o.mean) / (k + o.count)).clamp(0.0, 1.0))
        }
    }
}

/// The highest quality the evidence still makes plausible: the blend plus one standard
/// deviation of its Beta posterior, `sqrt(b (1 − b) / (k + n + 1))`; the declared quality
/// when there is no evidence. What `min_quality` is compared with.
pub fn plausible(
    declared: Option<f64>,
    claim: Option<ClaimType>,
    observed: Option<Observed>,
) -> Option<f64> {
    let b = blend(declared, claim, observed)?;
    let Some(o) = observed.filter(|o| o.count > 0.0 && o.mean.is_finite()) else {
        return Some(b);
    };
    let k = declared.map_or(1.0, |_| claim_weight(claim));
    let sd = (b * (1.0 - b) / (k + o.count + 1.0)).max(0.0).sqrt();
    Some((b + sd).min(1.0))
}

/// What a card says of its quality at a skill: the prior evidence is blended with.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Prior {
    /// The declared quality.
    pub declared: Option<f64>,
    /// How the claim was made.
    pub claim: Option<ClaimType>,
}

/// Learned quality as routing reads it: the evidence, and what it makes of the card's claim
/// ([`blend`], [`plausible`], and the blend's error rate with its logarithm, the score's
/// scale). Worked out once per piece of evidence and kept (the registry refreshes it when
/// evidence arrives or its decay moves it), so a decision recomputes no posterior.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Evidence {
    /// What was observed.
    pub observed: Observed,
    /// [`blend`] of the prior and `observed`.
    pub blend: Option<f64>,
    /// [`plausible`] of the prior and `observed`.
    pub plausible: Option<f64>,
    /// The blend's badness (error rate `1 − blend`) with its logarithm.
    pub error: Option<Bad>,
}

impl Evidence {
    /// What `observed` makes of `prior`.
    pub fn of(prior: Prior, observed: Observed) -> Evidence {
        let blend = blend(prior.declared, prior.claim, Some(observed));
        Evidence {
            observed,
            blend,
            plausible: plausible(prior.declared, prior.claim, Some(observed)),
            error: blend.map(Bad::quality),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obs(mean: f64, count: f64) -> Option<Observed> {
        Some(Observed { mean, count })
    }

    #[test]
    fn no_evidence_is_the_declared_quality() {
        assert_eq!(blend(Some(0.9), None, None), Some(0.9));
        assert_eq!(blend(None, None, None), None);
        assert_eq!(blend(Some(0.9), None, obs(0.1, 0.0)), Some(0.9));
    }

    #[test]
    fn evidence_dominates_once_there_is_enough() {
        let self_claim = Some(ClaimType::SelfClaimed);
        let few = blend(Some(0.95), self_claim, obs(0.5, 2.0)).unwrap();
        let many = blend(Some(0.95), self_claim, obs(0.5, 40.0)).unwrap();
        assert!((few - 0.725).abs() < 1e-9, "{few}");
        assert!(many < 0.53, "{many}");
        assert!(many < 0.8, "a liar falls below a min_quality of 0.8");
    }

    #[test]
    fn one_dissent_does_not_exclude_an_honest_delegate_but_a_liar_goes() {
        let own = Some(ClaimType::SelfClaimed);
        // An honest 0.9 after one misjudged vote: still plausibly above 0.8.
        let honest = plausible(Some(0.9), own, obs(0.0, 0.95)).unwrap();
        assert!(honest >= 0.8, "{honest}");
        assert!(blend(Some(0.9), own, obs(0.0, 0.95)).unwrap() < 0.8);
        // A 0.95 claim right half the time, after six votes: out.
        let liar = plausible(Some(0.95), own, obs(0.5, 6.0)).unwrap();
        assert!(liar < 0.8, "{liar}");
        assert_eq!(plausible(Some(0.7), own, None), Some(0.7));
        assert_eq!(plausible(None, None, None), None);
    }

    #[test]
    fn a_benchmarked_claim_counts_for_more_than_a_self_claim() {
        let e = obs(0.5, 10.0);
        let own = blend(Some(0.95), Some(ClaimType::SelfClaimed), e).unwrap();
        let bench = blend(Some(0.95), Some(ClaimType::ExternallyBenchmarked), e).unwrap();
        assert!(bench > own, "{bench} > {own}");
        assert_eq!(blend(None, None, obs(1.0, 1.0)), Some(0.75));
    }
}
