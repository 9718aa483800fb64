//! A badness: the lower-is-better figure each score criterion is compared by, kept with its
//! logarithm. Its own room because the figures ([`super::constraints`], [`super::quality`])
//! work it out and the score ([`super::score`]) reads it: with it inside the score, the score
//! and the figures it scores imported each other.

/// A badness (see [`super::SCORING_RULE`]) with its natural logarithm, worked out where the
/// figure is kept (the card's figures once per card and policy, observed ones when they are
/// observed), so a decision takes no `ln` per candidate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bad {
    /// The badness, never negative.
    pub value: f64,
    /// `value.ln()`.
    pub ln: f64,
}

impl Bad {
    /// Quality `q`'s badness: its error rate `1 − q` (clamped to 0..1).
    #[inline]
    pub fn quality(q: f64) -> Bad {
        Bad::of((1.0 - q).clamp(0.0, 1.0))
    }

    /// A cost's or a latency's badness: the value, floored at 0.
    #[inline]
    pub fn amount(v: f64) -> Bad {
        Bad::of(v.max(0.0))
    }

    #[inline]
    fn of(value: f64) -> Bad {
        Bad {
            value,
            ln: value.ln(),
        }
    }
}
