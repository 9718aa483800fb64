//! The decision as the full scan over vectors made it before [`super::decide_with`] read
//! offers through [`super::Scratch`]: the oracle its decisions are checked against
//! (`routing::proptests`).

use super::super::score::Scale;
use super::super::{score, Components, Need, Offer, RoutingParams, Static};
use super::{
    exclusions, survivors, unmeasured, weighted, Exclusions, NoEligible, Pick, Survivors, Trial,
};
use crate::policy::Policy;

/// The decision as it was made before the scan ([`super::decide_with`]): every offer
/// evaluated from scratch, its figures and scores collected in vectors.
pub(crate) fn decide_with<O: Offer>(
    offers: &[O],
    statics: &[Static],
    policy: &Policy,
    need: &Need<'_>,
    params: &RoutingParams,
    rng: &mut fastrand::Rng,
) -> Result<Pick, NoEligible> {
    // A trial is drawn first (one draw per decision, none for verifiers or at explore 0),
    // so that the survivors' pass can also draw a probation candidate.
    let trying = need.min_reliability.is_none()
        && params.explore > 0.0
        && (params.explore >= 1.0 || rng.f64() < params.explore);
    let s = survivors(
        offers,
        statics,
        policy,
        need,
        params,
        (trying && need.probation).then_some(&mut *rng),
    );
    if s.index.is_empty() {
        // Evidence would leave the skill without a producer: the best-evidenced one serves
        // (the task is verified). Not for a re-run or a failover: those excluded others.
        if let Some((i, _)) = s.probation_best.filter(|_| need.exclude.is_empty()) {
            return Ok(trial_pick(
                &s,
                i,
                0.0,
                Components::default(),
                Trial::Probation,
            ));
        }
        return Err(NoEligible {
            skill: need.skill.to_owned(),
            offering: offers.len(),
            excluded: exclusions(&s.excluded),
        });
    }
    let mut scale = Scale::default();
    for f in &s.figures {
        scale.add(f);
    }
    let scale = scale.ready();
    let scores: Vec<f64> = s
        .figures
        .iter()
        .map(|f| score(&scale.components(f, params.missing_score), policy))
        .collect();
    let best = scores.iter().copied().fold(f64::MIN, f64::max);
    let floor = best * (1.0 - policy.tolerance);
    if trying {
        if let Some(mut p) = trial(offers, &s, &scores, floor, policy, need, rng) {
            // An exploring pick is a survivor: its components are its trace span's.
            if let Some(k) = s.index.iter().position(|&i| i == p.index) {
                p.components = scale.components(&s.figures[k], params.missing_score);
            }
            return Ok(p);
        }
    }
    let band: Vec<usize> = (0..scores.len()).filter(|k| scores[*k] >= floor).collect();
    let weight = |k: usize| offers[s.index[k]].weight().max(0.0) * s.loads[k].weight_factor;
    let first = (band.len() > 1).then(|| weighted(&band, &weight, None, rng));
    // A weight of 0 takes no share while another in the band weighs anything: with no other
    // positive weight to draw, the first draw stands.
    let alone =
        first.is_some_and(|a| weight(a) > 0.0 && !band.iter().any(|&k| k != a && weight(k) > 0.0));
    let k = match first {
        None => band[0],
        Some(a) if alone => a,
        Some(a) => {
            let b = weighted(&band, &weight, Some(a), rng);
            let cost = |k: usize| {
                let latency = offers[s.index[k]].observed_latency_ms().unwrap_or(0.0) + 1.0;
                (f64::from(s.loads[k].in_flight) + 1.0) * latency
            };
            let (ca, cb) = (cost(a), cost(b));
            if (ca - cb).abs() <= 1e-9 * ca.max(cb) {
                let (wa, wb) = (weight(a), weight(b));
                if wa + wb <= 0.0 || rng.f64() * (wa + wb) < wa {
                    a
                } else {
                    b
                }
            } else if ca < cb {
                a
            } else {
                b
            }
        }
    };
    Ok(Pick {
        index: s.index[k],
        score: scores[k],
        eligible: s.index.len(),
        band: band.len(),
        excluded: if s.index.len() == offers.len() {
            Exclusions::default()
        } else {
            Exclusions(s.excluded)
        },
        trial: None,
        components: scale.components(&s.figures[k], params.missing_score),
    })
}

/// The trial a drawn decision makes, if any candidate calls for one: uniformly among the
/// unmeasured survivors outside the band and the probation candidates. Allocates nothing.
fn trial<O: Offer>(
    offers: &[O],
    s: &Survivors,
    scores: &[f64],
    floor: f64,
    policy: &Policy,
    need: &Need<'_>,
    rng: &mut fastrand::Rng,
) -> Option<Pick> {
    let exploring = |k: &usize| {
        scores[*k] < floor && unmeasured(&offers[s.index[*k]], &s.figures[*k], policy, need)
    };
    let n = (0..s.index.len()).filter(exploring).count();
    let total = n + usize::from(s.probation_drawn.is_some()) * s.probation;
    if total == 0 {
        return None;
    }
    let ticket = rng.usize(..total);
    match (0..s.index.len()).filter(exploring).nth(ticket) {
        Some(k) => Some(trial_pick(
            s,
            s.index[k],
            scores[k],
            Components::default(),
            Trial::Exploring,
        )),
        None => s
            .probation_drawn
            .map(|i| trial_pick(s, i, 0.0, Components::default(), Trial::Probation)),
    }
}

/// A trial's pick of offer `index` (its band is none: it was not chosen on its score).
fn trial_pick(
    s: &Survivors,
    index: usize,
    score: f64,
    components: Components,
    trial: Trial,
) -> Pick {
    Pick {
        index,
        score,
        eligible: s.index.len(),
        band: 0,
        excluded: Exclusions(s.excluded),
        trial: Some(trial),
        components,
    }
}
