//! The decision: survivors of the constraints, scored, the tolerance band, then the power of
//! two choices by load among near-equals.

use super::constraints::evaluate_with;
use super::score::Scale;
use super::{
    evaluate, score, statics, Components, Constraint, Evaluation, Figures, Load, Need, Offer,
    RoutingParams, Scored, Static,
};
use crate::policy::Policy;

/// The outcome of a decision on the hot path.
#[derive(Debug, Clone, PartialEq)]
pub struct Pick {
    /// Index of the chosen offer.
    pub index: usize,
    /// Its score.
    pub score: f64,
    /// How many offers passed every constraint.
    pub eligible: usize,
    /// How many shared the top band.
    pub band: usize,
    /// `(constraint, offers it excluded)`, for constraints that excluded any.
    pub excluded: Vec<(Constraint, usize)>,
    /// The chosen offer's score components (its trace span shows them).
    pub components: super::score::Components,
}

/// Why nothing could be picked: the skill, and per constraint how many offers it excluded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoEligible {
    /// The skill asked for.
    pub skill: String,
    /// How many delegates offer it.
    pub offering: usize,
    /// `(constraint, offers it excluded)`, for constraints that excluded any.
    pub excluded: Vec<(Constraint, usize)>,
}

impl std::fmt::Display for NoEligible {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.offering == 0 {
            return write!(f, "no delegate offers skill '{}'", self.skill);
        }
        write!(
            f,
            "{} delegate(s) offer skill '{}' but none passes the constraints (",
            self.offering, self.skill
        )?;
        for (i, (c, n)) in self.excluded.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{}: {n} excluded", c.as_str())?;
        }
        f.write_str(")")
    }
}

/// The offers that pass every constraint, with outlier ejection applied unless that would
/// leave fewer than `panic_threshold` of them (then the ejected stay: route to all).
struct Survivors {
    index: Vec<usize>,
    figures: Vec<Figures>,
    loads: Vec<Load>,
    excluded: [usize; Constraint::ALL.len()],
    evaluated: usize,
}

fn survivors<O: Offer>(
    offers: &[O],
    statics: &[Static],
    policy: &Policy,
    need: &Need<'_>,
    params: &RoutingParams,
) -> Survivors {
    let cap = offers.len().min(64);
    let mut s = Survivors {
        index: Vec::with_capacity(cap),
        figures: Vec::with_capacity(cap),
        loads: Vec::with_capacity(cap),
        excluded: [0; Constraint::ALL.len()],
        evaluated: offers.len(),
    };
    let mut ejected = 0usize;
    for (i, (o, st)) in offers.iter().zip(statics).enumerate() {
        let (e, load) = evaluate_with(o, st, policy, need, params);
        if e.eligible() {
            ejected += usize::from(load.ejected);
            s.index.push(i);
            s.figures.push(e.figures);
            s.loads.push(load);
        } else {
            // Each set bit is a failed constraint (`Constraint as u16` is its bit).
            let mut bits = e.failed;
            while bits != 0 {
                s.excluded[bits.trailing_zeros() as usize] += 1;
                bits &= bits - 1;
            }
        }
    }
    let n = s.index.len();
    if ejected > 0 && ((n - ejected) as f64) >= params.panic_threshold * n as f64 {
        let mut k = 0;
        while k < s.index.len() {
            if s.loads[k].ejected {
                s.index.swap_remove(k);
                s.figures.swap_remove(k);
                s.loads.swap_remove(k);
            } else {
                k += 1;
            }
        }
        s.excluded[Constraint::NotEjected as usize] += ejected;
    }
    s
}

fn exclusions(counts: &[usize; Constraint::ALL.len()]) -> Vec<(Constraint, usize)> {
    Constraint::ALL
        .into_iter()
        .zip(counts.iter().copied())
        .filter(|(_, n)| *n > 0)
        .collect()
}

/// Picks one of `band` (positions in the survivors) at random, weighted by `weight`,
/// skipping `not`; uniform if every weight is zero.
fn weighted(
    band: &[usize],
    weight: &dyn Fn(usize) -> f64,
    not: Option<usize>,
    rng: &mut fastrand::Rng,
) -> usize {
    let total: f64 = band
        .iter()
        .filter(|k| Some(**k) != not)
        .map(|k| weight(*k))
        .sum();
    let others = band.iter().copied().filter(|k| Some(*k) != not);
    if total <= 0.0 {
        let n = band.len() - usize::from(not.is_some_and(|x| band.contains(&x)));
        return others.clone().nth(rng.usize(..n.max(1))).unwrap_or(band[0]);
    }
    let mut ticket = rng.f64() * total;
    let mut last = band[0];
    for k in others {
        let w = weight(k);
        if ticket < w {
            return k;
        }
        ticket -= w;
        last = k;
    }
    last
}

/// Chooses among `offers` (the delegates offering `need.skill`): filter by every hard
/// constraint and outlier ejection, score the rest, then among those within
/// `policy.tolerance` of the best, the power of two random choices: two drawn by weight
/// (× slow-start factor), the one with less work queued — (in flight + 1) × observed latency
/// — wins (ties go to a weighted coin). An unmeasured delegate counts as fast, so it gets
/// explored, but its in-flight count still spreads the load.
pub fn decide<O: Offer>(
    offers: &[O],
    policy: &Policy,
    need: &Need<'_>,
    params: &RoutingParams,
    rng: &mut fastrand::Rng,
) -> Result<Pick, NoEligible> {
    decide_with(
        offers,
        &statics(offers, policy, params),
        policy,
        need,
        params,
        rng,
    )
}

/// [`decide`] given every offer's [`Static`] part (`statics[i]` is `offers[i]`'s, computed
/// under this `policy` and `params`): the hot path's entry, with the card-only checks done.
pub fn decide_with<O: Offer>(
    offers: &[O],
    statics: &[Static],
    policy: &Policy,
    need: &Need<'_>,
    params: &RoutingParams,
    rng: &mut fastrand::Rng,
) -> Result<Pick, NoEligible> {
    let s = survivors(offers, statics, policy, need, params);
    if s.index.is_empty() {
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
        excluded: if s.index.len() == s.evaluated {
            Vec::new()
        } else {
            exclusions(&s.excluded)
        },
        components: scale.components(&s.figures[k], params.missing_score),
    })
}

/// What [`decide`] computed, for explain and tests: every offer's evaluation (with
/// `NotEjected` marked where ejection applied), the scores of the survivors in offer order
/// (`None` for the rest), and the band floor.
pub fn scores<O: Offer>(
    offers: &[O],
    policy: &Policy,
    need: &Need<'_>,
    params: &RoutingParams,
) -> Scored {
    let s = survivors(
        offers,
        &statics(offers, policy, params),
        policy,
        need,
        params,
    );
    let mut evals: Vec<Evaluation> = offers
        .iter()
        .map(|o| evaluate(o, policy, need, params))
        .collect();
    if s.excluded[Constraint::NotEjected as usize] > 0 {
        for (i, e) in evals.iter_mut().enumerate() {
            if e.eligible() && !s.index.contains(&i) {
                e.failed |= Constraint::NotEjected.bit();
            }
        }
    }
    let mut scale = Scale::default();
    for f in &s.figures {
        scale.add(f);
    }
    let scale = scale.ready();
    let mut scored: Vec<Option<(Components, f64)>> = vec![None; offers.len()];
    for (k, &i) in s.index.iter().enumerate() {
        let c = scale.components(&s.figures[k], params.missing_score);
        scored[i] = Some((c, score(&c, policy)));
    }
    let best = scored
        .iter()
        .flatten()
        .map(|(_, s)| *s)
        .fold(f64::MIN, f64::max);
    (evals, scored, best * (1.0 - policy.tolerance))
}
