//! The weighted score: quality, cost and latency normalised across the candidates.

use super::Figures;
use crate::policy::Policy;
use serde::Serialize;

/// Normalised score components, each in 0..=1 (1 = best in the candidate set).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Components {
    /// Quality ÷ best quality.
    pub quality: f64,
    /// Cheapest cost ÷ this cost.
    pub cost: f64,
    /// Fastest latency ÷ this latency.
    pub latency: f64,
}

/// Best figures among eligible candidates, the scale for normalising.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Scale {
    max_quality: Option<f64>,
    min_cost: Option<f64>,
    min_latency: Option<f64>,
}

impl Scale {
    pub(super) fn add(&mut self, f: &Figures) {
        if let Some(q) = f.quality {
            self.max_quality = Some(self.max_quality.map_or(q, |m| m.max(q)));
        }
        if let Some(c) = f.cost_usd {
            self.min_cost = Some(self.min_cost.map_or(c, |m| m.min(c)));
        }
        if let Some(l) = f.latency_ms {
            self.min_latency = Some(self.min_latency.map_or(l, |m| m.min(l)));
        }
    }

    pub(super) fn components(&self, f: &Figures, missing: f64) -> Components {
        // Small epsilons keep free (0 USD) and instant (0 ms) delegates finite and best.
        const COST_EPS: f64 = 1e-6;
        const LAT_EPS: f64 = 1.0;
        let quality = match (f.quality, self.max_quality) {
            (Some(q), Some(m)) if m > 0.0 => (q / m).clamp(0.0, 1.0),
            (Some(_), _) => 1.0,
            (None, _) => missing,
        };
        let cost = match (f.cost_usd, self.min_cost) {
            (Some(c), Some(m)) => ((m + COST_EPS) / (c + COST_EPS)).clamp(0.0, 1.0),
            _ => missing,
        };
        let latency = match (f.latency_ms, self.min_latency) {
            (Some(l), Some(m)) => ((m + LAT_EPS) / (l + LAT_EPS)).clamp(0.0, 1.0),
            _ => missing,
        };
        Components {
            quality,
            cost,
            latency,
        }
    }
}

/// The weighted score of some components under `policy` (0..=1).
pub fn score(c: &Components, policy: &Policy) -> f64 {
    let w = &policy.weights;
    let total = w.quality + w.cost + w.latency;
    if total <= 0.0 {
        return 0.0;
    }
    (w.quality * c.quality + w.cost * c.cost + w.latency * c.latency) / total
}
