//! The decision: survivors of the constraints, scored, the tolerance band, then the power of
//! two choices by load among near-equals.
//!
//! # Why a full scan, not a list sorted by static score
//!
//! A decision reads every offer of the skill once, and keeps no order between decisions. An
//! order sorted by the static score (cards and policy) cannot give the same decisions: the
//! score is relative (min–max of the logarithms over the *eligible* survivors,
//! [`super::score`]), so every offer's score moves with who is healthy, has room, is in the
//! session's trust domain, is under the contract's budget and deadline; observed latency and
//! learned quality replace the card's figures per offer and move between decisions; and the
//! pick reports how many offers each constraint excluded, and may explore an unmeasured offer
//! outside the band. None of that is known without reading each offer, so the band of a
//! sorted list would be a guess. What the scan costs per offer is kept small instead:
//!
//! - the card-only checks and the logarithms of the card's figures are worked out once per
//!   card and policy ([`Static`]); an observed latency carries its logarithm from when it was
//!   measured ([`super::Latency`]), learned quality its blend, plausible value and logarithm
//!   from when the evidence or its decay last moved ([`super::Evidence`]): a decision takes no
//!   `ln` and recomputes no posterior per offer. Each score is the same to the bit as one
//!   computed from scratch ([`scores`], which explain uses) except for learned quality, which
//!   is its reading of up to a thousandth of a half-life ago (3.6 s at the default hour): its
//!   decay over that time is under 0.07% of the evidence's weight;
//! - the cheap checks (card-only, health, tried, capacity, trust domain) come first, and the
//!   dynamic figures are read only for an offer still in the running or when a bound on them
//!   must be counted (`min_quality`, `max_latency_ms`, the contract's deadline);
//! - nothing is allocated: survivors and the band live in a buffer each thread reuses
//!   ([`Scratch`]), the exclusion counts in a fixed array ([`Exclusions`]).

use super::badness::Bad;
use super::constraints::{bound, evaluate_with};
use super::score::Scale;
use super::{
    evaluate, score, statics, Components, Constraint, Evaluation, Figures, Load, Need, Offer,
    RoutingParams, Scored, Static,
};
use crate::ldp::trust::session_allowed;
use crate::policy::Policy;
use std::cell::RefCell;

#[cfg(test)]
pub(super) mod reference;

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
    /// How many offers each constraint excluded.
    pub excluded: Exclusions,
    /// Whether the pick is a trial (`[routing] explore`), and which.
    pub trial: Option<Trial>,
    /// The chosen offer's score components (its trace span shows them).
    pub components: super::score::Components,
}

/// Per constraint, how many offers it excluded (a fixed array: a decision allocates nothing
/// for it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Exclusions([usize; Constraint::ALL.len()]);

impl Exclusions {
    /// `(constraint, offers it excluded)`, in [`Constraint::ALL`]'s order, for constraints
    /// that excluded any.
    pub fn iter(&self) -> impl Iterator<Item = (Constraint, usize)> + '_ {
        Constraint::ALL
            .into_iter()
            .zip(self.0.iter().copied())
            .filter(|(_, n)| *n > 0)
    }

    /// How many offers `c` excluded.
    pub fn of(&self, c: Constraint) -> usize {
        self.0[c as usize]
    }

    /// Whether no constraint excluded any offer.
    pub fn is_empty(&self) -> bool {
        self.0.iter().all(|n| *n == 0)
    }

    /// [`Exclusions::iter`] collected.
    pub fn to_vec(&self) -> Vec<(Constraint, usize)> {
        self.iter().collect()
    }
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
/// Allocates nothing unless nothing is eligible (see the module on what it reads per offer).
pub fn decide_with<O: Offer>(
    offers: &[O],
    statics: &[Static],
    policy: &Policy,
    need: &Need<'_>,
    params: &RoutingParams,
    rng: &mut fastrand::Rng,
) -> Result<Pick, NoEligible> {
    SCRATCH.with(|cell| match cell.try_borrow_mut() {
        Ok(mut scratch) => decide_in(&mut scratch, offers, statics, policy, need, params, rng),
        // Only if an `Offer` decided from inside a decision: a buffer of its own.
        Err(_) => decide_in(
            &mut Scratch::default(),
            offers,
            statics,
            policy,
            need,
            params,
            rng,
        ),
    })
}

/// One survivor of the constraints as the decision keeps it: what its score, a trial and the
/// pick read, its badness with the logarithms already taken.
#[derive(Debug, Clone, Copy)]
struct Candidate {
    /// Its index in the offers.
    index: usize,
    /// Quality's error rate, cost, latency (`None`: undeclared).
    bad: [Option<Bad>; 3],
    load: Load,
    /// Its observed latency (the power of two choices weighs queued work by it).
    observed_ms: Option<f64>,
    /// A trial may explore it ([`unmeasured`]).
    unmeasured: bool,
    score: f64,
}

/// The buffers a decision works in, one per thread and reused: no allocation per decision
/// once a thread has decided over its largest skill (they keep that size, about 140 bytes
/// per eligible offer).
#[derive(Debug, Default)]
struct Scratch {
    candidates: Vec<Candidate>,
    /// Positions in `candidates` of the top band.
    band: Vec<usize>,
    /// Per offer whose trust domain is the first of its kind, whether the session may use
    /// that domain ([`Static::domain`]).
    trust: Vec<bool>,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// What a scan counted besides its survivors.
struct Tally {
    excluded: [usize; Constraint::ALL.len()],
    /// Offers excluded by evidence alone (`need.probation` only): how many, the one a
    /// uniform draw kept (when `draw` was asked), and the best-evidenced one with its
    /// plausible quality.
    probation: usize,
    probation_drawn: Option<usize>,
    probation_best: Option<(usize, f64)>,
}

/// Every offer checked against every constraint, the survivors (eligible, outlier ejection
/// applied unless that would leave fewer than `panic_threshold` of them) into
/// `scratch.candidates` in the order [`survivors`] gives them; the same constraints, figures
/// and counts as [`evaluate_with`], read cheaply (see the module).
fn scan<O: Offer>(
    offers: &[O],
    statics: &[Static],
    policy: &Policy,
    need: &Need<'_>,
    params: &RoutingParams,
    mut draw: Option<&mut fastrand::Rng>,
    scratch: &mut Scratch,
) -> Tally {
    let Scratch {
        candidates: out,
        trust,
        ..
    } = scratch;
    out.clear();
    // Entries are written before they are read (a domain's first offer comes first).
    if trust.len() < offers.len() {
        trust.resize(offers.len(), false);
    }
    let mut t = Tally {
        excluded: [0; Constraint::ALL.len()],
        probation: 0,
        probation_drawn: None,
        probation_best: None,
    };
    let req = &policy.require;
    let unknown = !params.unknown_passes_bounds;
    let max_latency = req.max_latency_ms.map(|m| m as f64);
    let ms_left = need.contract_ms_left.map(|m| m as f64);
    // Whether an excluded offer's dynamic figures are still needed, for the counts.
    let latency_bound = max_latency.is_some() || ms_left.is_some();
    let quality_bound = req.min_quality.is_some() || need.min_reliability.is_some();
    let evidence_explores = need.probation && policy.verify.is_some();
    let mut ejected = 0usize;
    for (i, (o, st)) in offers.iter().zip(statics).enumerate() {
        let mut failed = st.failed;
        mark(&mut failed, Constraint::Healthy, !o.healthy());
        mark(
            &mut failed,
            Constraint::NotTried,
            !need.exclude.is_empty() && need.exclude.iter().any(|n| n == o.name()),
        );
        let load = o.load();
        mark(&mut failed, Constraint::Capacity, !load.has_room());
        let allowed = || {
            session_allowed(
                &o.card().trust_domain,
                need.client_domain,
                need.required_domain,
            )
        };
        // One check per distinct domain: an offer after its domain's first reads the answer.
        let trusted = match usize::try_from(st.domain).unwrap_or(usize::MAX) {
            r if r == i => {
                trust[i] = allowed();
                trust[i]
            }
            r if r < i => trust[r],
            _ => allowed(),
        };
        mark(&mut failed, Constraint::TrustDomain, !trusted);
        let running = failed == 0;
        let evidence = (running || quality_bound)
            .then(|| o.evidence(need.now_ms, need.rater, st.prior()))
            .flatten();
        let observed = (running || latency_bound)
            .then(|| o.observed_latency())
            .flatten();
        let (quality, plausible) =
            evidence.map_or((st.quality, st.quality), |e| (e.blend, e.plausible));
        let latency_ms = observed.map(|l| l.ms).or(st.declared_latency_ms);
        if let Some(min) = req.min_quality {
            mark(
                &mut failed,
                Constraint::MinQuality,
                bound(Some(min), plausible, unknown, |min, q| q >= min),
            );
        }
        mark(
            &mut failed,
            Constraint::MaxLatency,
            bound(max_latency, latency_ms, unknown, |max, l| l <= max),
        );
        mark(
            &mut failed,
            Constraint::ContractBudget,
            bound(
                need.contract_max_cost_usd,
                st.cost_usd,
                unknown,
                |max, c| c <= max,
            ),
        );
        mark(
            &mut failed,
            Constraint::ContractDeadline,
            bound(ms_left, latency_ms, unknown, |left, l| l <= left),
        );
        mark(
            &mut failed,
            Constraint::MinReliability,
            bound(need.min_reliability, quality, false, |min, r| r >= min),
        );
        if failed == 0 {
            ejected += usize::from(load.ejected);
            out.push(Candidate {
                index: i,
                bad: [
                    evidence.map_or(st.bad[0], |e| e.error),
                    st.bad[1],
                    observed.map(|l| l.bad).or(st.bad[2]),
                ],
                load,
                observed_ms: observed.map(|l| l.ms),
                unmeasured: observed.is_none()
                    || (evidence_explores
                        && evidence.is_none_or(|e| e.observed.count < EXPLORE_EVIDENCE)),
                score: 0.0,
            });
            continue;
        }
        // As `Evaluation::excluded_by_evidence`; an ejected delegate is failing now: no
        // trial, and it never serves as the last resort either.
        let by_evidence = failed == Constraint::MinQuality.bit()
            && evidence.is_some()
            && req
                .min_quality
                .is_some_and(|m| st.quality.is_some_and(|d| d >= m));
        if need.probation && !load.ejected && by_evidence {
            t.probation += 1;
            // Reservoir sampling: each one kept with probability 1/n.
            if let Some(rng) = draw.as_deref_mut() {
                if rng.usize(..t.probation) == 0 {
                    t.probation_drawn = Some(i);
                }
            }
            let q = plausible.unwrap_or(0.0);
            if t.probation_best.is_none_or(|(_, b)| q > b) {
                t.probation_best = Some((i, q));
            }
        }
        // Each set bit is a failed constraint (`Constraint as u16` is its bit).
        let mut bits = failed;
        while bits != 0 {
            t.excluded[bits.trailing_zeros() as usize] += 1;
            bits &= bits - 1;
        }
    }
    let n = out.len();
    if ejected > 0 && ((n - ejected) as f64) >= params.panic_threshold * n as f64 {
        let mut k = 0;
        while k < out.len() {
            if out[k].load.ejected {
                out.swap_remove(k);
            } else {
                k += 1;
            }
        }
        t.excluded[Constraint::NotEjected as usize] += ejected;
    }
    t
}

/// Sets `c`'s bit in `failed` when `bad`.
#[inline]
fn mark(failed: &mut u16, c: Constraint, bad: bool) {
    if bad {
        *failed |= c.bit();
    }
}

/// [`decide_with`] in `scratch`.
fn decide_in<O: Offer>(
    scratch: &mut Scratch,
    offers: &[O],
    statics: &[Static],
    policy: &Policy,
    need: &Need<'_>,
    params: &RoutingParams,
    rng: &mut fastrand::Rng,
) -> Result<Pick, NoEligible> {
    // A trial is drawn first (one draw per decision, none for verifiers or at explore 0),
    // so that the scan can also draw a probation candidate.
    let trying = need.min_reliability.is_none()
        && params.explore > 0.0
        && (params.explore >= 1.0 || rng.f64() < params.explore);
    let t = scan(
        offers,
        statics,
        policy,
        need,
        params,
        (trying && need.probation).then_some(&mut *rng),
        scratch,
    );
    let Scratch {
        candidates, band, ..
    } = scratch;
    let cs: &mut [Candidate] = candidates;
    if cs.is_empty() {
        // Evidence would leave the skill without a producer: the best-evidenced one serves
        // (the task is verified). Not for a re-run or a failover: those excluded others.
        if let Some((i, _)) = t.probation_best.filter(|_| need.exclude.is_empty()) {
            return Ok(trial_pick(
                &t,
                0,
                i,
                0.0,
                Components::default(),
                Trial::Probation,
            ));
        }
        return Err(NoEligible {
            skill: need.skill.to_owned(),
            offering: offers.len(),
            excluded: exclusions(&t.excluded),
        });
    }
    let mut scale = Scale::default();
    for c in cs.iter() {
        scale.add_bad(&c.bad);
    }
    let scale = scale.ready();
    let mut best = f64::MIN;
    for c in cs.iter_mut() {
        c.score = score(&scale.components_ln(&c.bad, params.missing_score), policy);
        best = best.max(c.score);
    }
    let cs: &[Candidate] = cs;
    let floor = best * (1.0 - policy.tolerance);
    if trying {
        if let Some((mut p, k)) = trial(cs, &t, floor, rng) {
            // An exploring pick is a survivor: its components are its trace span's.
            if let Some(k) = k {
                p.components = scale.components_ln(&cs[k].bad, params.missing_score);
            }
            return Ok(p);
        }
    }
    band.clear();
    band.extend((0..cs.len()).filter(|k| cs[*k].score >= floor));
    let band: &[usize] = band;
    let weight = |k: usize| offers[cs[k].index].weight().max(0.0) * cs[k].load.weight_factor;
    let first = (band.len() > 1).then(|| weighted(band, &weight, None, rng));
    // A weight of 0 takes no share while another in the band weighs anything: with no other
    // positive weight to draw, the first draw stands.
    let alone =
        first.is_some_and(|a| weight(a) > 0.0 && !band.iter().any(|&k| k != a && weight(k) > 0.0));
    let k = match first {
        None => band[0],
        Some(a) if alone => a,
        Some(a) => {
            let b = weighted(band, &weight, Some(a), rng);
            let cost = |k: usize| {
                let latency = cs[k].observed_ms.unwrap_or(0.0) + 1.0;
                (f64::from(cs[k].load.in_flight) + 1.0) * latency
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
        index: cs[k].index,
        score: cs[k].score,
        eligible: cs.len(),
        band: band.len(),
        excluded: Exclusions(t.excluded),
        trial: None,
        components: scale.components_ln(&cs[k].bad, params.missing_score),
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
/// unmeasured survivors outside the band and the probation candidates; with the survivor's
/// position when it explores one. Allocates nothing.
fn trial(
    cs: &[Candidate],
    t: &Tally,
    floor: f64,
    rng: &mut fastrand::Rng,
) -> Option<(Pick, Option<usize>)> {
    let exploring = |k: &usize| cs[*k].score < floor && cs[*k].unmeasured;
    let n = (0..cs.len()).filter(exploring).count();
    let total = n + usize::from(t.probation_drawn.is_some()) * t.probation;
    if total == 0 {
        return None;
    }
    let ticket = rng.usize(..total);
    match (0..cs.len()).filter(exploring).nth(ticket) {
        Some(k) => Some((
            trial_pick(
                t,
                cs.len(),
                cs[k].index,
                cs[k].score,
                Components::default(),
                Trial::Exploring,
            ),
            Some(k),
        )),
        None => t.probation_drawn.map(|i| {
            let p = trial_pick(t, cs.len(), i, 0.0, Components::default(), Trial::Probation);
            (p, None)
        }),
    }
}

/// A trial's pick of offer `index` (its band is none: it was not chosen on its score), out
/// of `eligible` survivors.
fn trial_pick(
    t: &Tally,
    eligible: usize,
    index: usize,
    score: f64,
    components: Components,
    trial: Trial,
) -> Pick {
    Pick {
        index,
        score,
        eligible,
        band: 0,
        excluded: Exclusions(t.excluded),
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
