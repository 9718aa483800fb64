//! `[routing]`: the checks of [`RoutingParams`], a type `routing` owns (it stays pure and
//! benchable without the config).

use super::checks::Checks;
use crate::routing::RoutingParams;

pub(super) fn check(r: &RoutingParams, c: &mut Checks) {
    c.fraction("routing.missing_score", r.missing_score);
    for (tier, price) in [
        ("low", r.tier_prices.low),
        ("medium", r.tier_prices.medium),
        ("high", r.tier_prices.high),
    ] {
        if !(price.is_finite() && price >= 0.0) {
            c.push(
                format!("routing.tier_prices.{tier}"),
                format!("must be a non-negative number, got {price}"),
            );
        }
    }
    c.fraction("routing.panic_threshold", r.panic_threshold);
    c.fraction("routing.explore", r.explore);
    if !(r.budget_reserve_factor.is_finite() && (1.0..=100.0).contains(&r.budget_reserve_factor)) {
        c.push(
            "routing.budget_reserve_factor",
            format!(
                "must be between 1 and 100 (a reservation is the declared cost times this), got {}",
                r.budget_reserve_factor
            ),
        );
    }
}
