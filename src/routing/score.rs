//! The weighted score: quality, cost and latency normalised across the candidates.
//!
//! The rule ([`RULE`]): each criterion is a "badness" (quality's error rate `1 − q`, the cost,
//! the latency), placed on a log scale between the best and the worst of the eligible
//! candidates that declare it — the best scores 1, the worst 0 (min–max of the logarithms),
//! equal values all 1 — so every criterion spans the same range and the weights alone say
//! which one matters. On a log scale a ratio counts the same anywhere: half the price (or half
//! the errors) is the same step at 0.001 USD as at 1 USD, and scaling every price (or latency)
//! by one factor changes no component. Values within a factor of 2 are not stretched to the
//! full range (the divisor is at least ln 2): near-equal candidates stay near-equal and share
//! the tolerance band. A value below a thousandth of the worst (free, instant, flawless)
//! counts as that thousandth.

use super::badness::Bad;
use super::Figures;
use crate::policy::Policy;
use serde::Serialize;

/// The normalisation rule in one line, for explain and the admin API.
pub const RULE: &str = "each criterion (quality as its error rate 1-q, cost, latency) is placed \
on a log scale between the best (1) and the worst (0) eligible candidate, equal values all 1; \
values within a factor of 2 are not stretched to the full range; a value under 1/1000 of the \
worst counts as 1/1000 of it; an undeclared value scores [routing] missing_score";

/// Values within this factor of each other are not stretched to the full 0..1.
const MIN_RATIO: f64 = 2.0;
/// A value below this fraction of the worst (0 USD, 0 ms, quality 1) counts as this fraction.
const FLOOR: f64 = 1e-3;

/// Normalised score components, each in 0..=1 (1 = best in the candidate set); all 0 for a
/// pick not made on its score (a probation trial).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Components {
    /// Error rate `1 − quality`, min–max normalised on a log scale (see [`RULE`]).
    pub quality: f64,
    /// Cost, likewise.
    pub cost: f64,
    /// Latency, likewise.
    pub latency: f64,
}

/// The least and greatest badness of one criterion among the candidates declaring it.
#[derive(Debug, Clone, Copy, Default)]
struct Span(Option<(f64, f64)>);

impl Span {
    #[inline]
    fn add(&mut self, bad: f64) {
        self.0 = Some(
            self.0
                .map_or((bad, bad), |(lo, hi)| (lo.min(bad), hi.max(bad))),
        );
    }

    /// The normalisation this spread gives (see [`RULE`]); `None`: every value scores 1.
    fn norm(&self) -> Option<Norm> {
        let (lo, hi) = self.0?;
        if hi <= 0.0 {
            return None;
        }
        let floor = hi * FLOOR;
        let ln_lo = lo.max(floor).ln();
        Some(Norm {
            floor,
            ln_floor: floor.ln(),
            ln_lo,
            divisor: (hi.ln() - ln_lo).max(MIN_RATIO.ln()),
        })
    }
}

/// One criterion's normalisation, computed once per decision.
#[derive(Debug, Clone, Copy)]
struct Norm {
    floor: f64,
    ln_floor: f64,
    ln_lo: f64,
    divisor: f64,
}

impl Norm {
    /// 1 for the least badness, 0 for the greatest once they differ by a factor of 2 or more,
    /// on a log scale.
    fn component(&self, bad: f64) -> f64 {
        (1.0 - (bad.max(self.floor).ln() - self.ln_lo) / self.divisor).clamp(0.0, 1.0)
    }

    /// [`Norm::component`] of a badness whose logarithm is known: no `ln` taken, and the
    /// same value to the bit (`ln(max(bad, floor))` is `ln bad` or `ln floor`).
    #[inline]
    fn component_ln(&self, bad: Bad) -> f64 {
        let ln = if bad.value >= self.floor {
            bad.ln
        } else {
            self.ln_floor
        };
        (1.0 - (ln - self.ln_lo) / self.divisor).clamp(0.0, 1.0)
    }
}

/// What lower-is-better figure each criterion is compared by (never negative).
fn badness(f: &Figures) -> [Option<f64>; 3] {
    [
        f.quality.map(|q| (1.0 - q).clamp(0.0, 1.0)),
        f.cost_usd.map(|c| c.max(0.0)),
        f.latency_ms.map(|l| l.max(0.0)),
    ]
}

/// The spread of each criterion among eligible candidates, the scale for normalising.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Scale([Span; 3]);

impl Scale {
    pub(super) fn add(&mut self, f: &Figures) {
        for (span, bad) in self.0.iter_mut().zip(badness(f)) {
            if let Some(b) = bad {
                span.add(b);
            }
        }
    }

    /// Adds one candidate's badness per criterion (`None`: undeclared).
    #[inline]
    pub(super) fn add_bad(&mut self, bad: &[Option<Bad>; 3]) {
        for (span, bad) in self.0.iter_mut().zip(bad) {
            if let Some(b) = bad {
                span.add(b.value);
            }
        }
    }

    /// The normalisation of each criterion, once the candidates are all added.
    pub(super) fn ready(&self) -> Ready {
        Ready(self.0.map(|span| span.norm()))
    }
}

/// A [`Scale`] ready to normalise candidates.
#[derive(Debug, Clone, Copy)]
pub(super) struct Ready([Option<Norm>; 3]);

impl Ready {
    pub(super) fn components(&self, f: &Figures, missing: f64) -> Components {
        let [quality, cost, latency] = badness(f);
        let [q, c, l] = &self.0;
        let of = |norm: &Option<Norm>, bad: Option<f64>| match (norm, bad) {
            (_, None) => missing,
            (None, Some(_)) => 1.0,
            (Some(n), Some(b)) => n.component(b),
        };
        Components {
            quality: of(q, quality),
            cost: of(c, cost),
            latency: of(l, latency),
        }
    }
}

impl Ready {
    /// [`Ready::components`] of a candidate's badness with its logarithms: the same values,
    /// no `ln` taken.
    #[inline]
    pub(super) fn components_ln(&self, bad: &[Option<Bad>; 3], missing: f64) -> Components {
        let of = |norm: &Option<Norm>, bad: &Option<Bad>| match (norm, bad) {
            (_, None) => missing,
            (None, Some(_)) => 1.0,
            (Some(n), Some(b)) => n.component_ln(*b),
        };
        let [q, c, l] = &self.0;
        Components {
            quality: of(q, &bad[0]),
            cost: of(c, &bad[1]),
            latency: of(l, &bad[2]),
        }
    }
}

/// The weighted score of some components under `policy` (0..=1).
#[inline]
pub fn score(c: &Components, policy: &Policy) -> f64 {
    let w = &policy.weights;
    let total = w.quality + w.cost + w.latency;
    if total <= 0.0 {
        return 0.0;
    }
    (w.quality * c.quality + w.cost * c.cost + w.latency * c.latency) / total
}
