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
    /// Whether the pick is a trial (`[routing] explore`), and which.
    pub trial: Option<Trial>,
    /// The chosen offer's score components (its trace span shows them).
    pub components: super::score::Components,
}

/// A pick made to measure rather than on the score (at most `[routing] explore` of the
/// decisions, or probation as the last resort).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Trial {
    /// Eligible but outside the band and unmeasured: no observed latency, or (a verified
    /// task) under [`EXPLORE_EVIDENCE`] of quality evidence.
    Exploring,
    /// Excluded by quality evidence alone, tried on a verified task so it can win its way
    /// back (or, when evidence excludes every producer, the best-evidenced one serves).
    Probation,
}

impl Trial {
    /// Stable name for logs, explain and the ledger.
    pub fn as_str(self) -> &'static str {
        match self {
            Trial::Exploring => "exploring",
            Trial::Probation => "probation",
        }
    }
}

/// Quality evidence (decayed count) under which a producer of a verified task is still
/// explored.
pub const EXPLORE_EVIDENCE: f64 = 3.0;

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
    /// Offers excluded by evidence alone (`need.probation` only): how many, the one a
    /// uniform draw kept (when `draw` was asked), and the best-evidenced one with its
    /// plausible quality.
    probation: usize,
    probation_drawn: Option<usize>,
    probation_best: Option<(usize, f64)>,
}

fn survivors<O: Offer>(
    offers: &[O],
    statics: &[Static],
    policy: &Policy,
    need: &Need<'_>,
    params: &RoutingParams,
    mut draw: Option<&mut fastrand::Rng>,
) -> Survivors {
    let cap = offers.len().min(64);
    let mut s = Survivors {
        index: Vec::with_capacity(cap),
        figures: Vec::with_capacity(cap),
        loads: Vec::with_capacity(cap),
        excluded: [0; Constraint::ALL.len()],
        evaluated: offers.len(),
        probation: 0,
        probation_drawn: None,
        probation_best: None,
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
            // An ejected delegate is failing now: no trial, and it never serves as the last
            // resort either.
            if need.probation && !load.ejected && e.excluded_by_evidence(policy.require.min_quality)
            {
                s.probation += 1;
                // Reservoir sampling: each one kept with probability 1/n.
                if let Some(rng) = draw.as_deref_mut() {
                    if rng.usize(..s.probation) == 0 {
                        s.probation_drawn = Some(i);
                    }
                }
                let q = e.figures.plausible_quality().unwrap_or(0.0);
                if s.probation_best.is_none_or(|(_, b)| q > b) {
                    s.probation_best = Some((i, q));
                }
            }
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
        excluded: if s.index.len() == s.evaluated {
            Vec::new()
        } else {
            exclusions(&s.excluded)
        },
        trial: None,
        components: scale.components(&s.figures[k], params.missing_score),
    })
}

/// Whether survivor `k` is unmeasured: no observed latency, or, for a verified task under
/// `[verify]`, under [`EXPLORE_EVIDENCE`] of quality evidence.
pub(super) fn unmeasured<O: Offer>(o: &O, f: &Figures, policy: &Policy, need: &Need<'_>) -> bool {
    o.observed_latency_ms().is_none()
        || (need.probation
            && policy.verify.is_some()
            && f.observed_quality
                .is_none_or(|q| q.count < EXPLORE_EVIDENCE))
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
        excluded: exclusions(&s.excluded),
        trial: Some(trial),
        components,
    }
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
        None,
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
