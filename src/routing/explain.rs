//! Explaining a decision: every delegate, every constraint with the value it compared, the
//! score components, the band of near-equals and the pick.

use super::decide::unmeasured;
use super::{
    decide, scores, Components, Constraint, Figures, Need, NoEligible, Offer, RoutingParams, Trial,
    SCORING_RULE,
};
use crate::policy::Policy;
use serde::{Serialize, Serializer};

/// One constraint's verdict for one delegate.
#[derive(Debug, Clone, Serialize)]
pub struct ConstraintRow {
    /// Which constraint.
    pub constraint: Constraint,
    /// Whether it passed.
    pub pass: bool,
    /// The comparison, e.g. `quality 0.72 >= 0.70`.
    pub detail: String,
}

/// One delegate in an explanation.
#[derive(Debug, Clone, Serialize)]
pub struct RowView {
    /// Registry name.
    pub delegate: String,
    /// Card id.
    pub delegate_id: String,
    /// Whether it offers the skill at all.
    pub offers_skill: bool,
    /// Its figures (when it offers the skill).
    pub figures: Option<Figures>,
    /// Every constraint (when it offers the skill).
    pub constraints: Vec<ConstraintRow>,
    /// Score components (when eligible).
    pub components: Option<Components>,
    /// Weighted score (when eligible).
    pub score: Option<f64>,
    /// Within tolerance of the best.
    pub in_band: bool,
    /// A trial it may get (`[routing] explore`): exploring (eligible, outside the band,
    /// unmeasured) or on probation (excluded by quality evidence alone; verified tasks).
    pub trial: Option<Trial>,
    /// Choosing verifiers: its reliability (its blended quality at the verify skill, the
    /// weight of its vote).
    pub reliability: Option<f64>,
}

/// What a decision picked now. Serialized as `{"Ok": name}` or `{"Err": reason}`, the shape
/// the admin API and `ldp-gateway route --json` have always printed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum Picked {
    /// The delegate's registry name (random within the band).
    #[serde(rename = "Ok")]
    Delegate(String),
    /// No delegate is eligible, and why.
    #[serde(rename = "Err")]
    NoneEligible(#[serde(serialize_with = "as_text")] NoEligible),
}

fn as_text<S: Serializer>(e: &NoEligible, ser: S) -> Result<S::Ok, S::Error> {
    ser.collect_str(e)
}

/// A full explanation.
#[derive(Debug, Clone, Serialize)]
pub struct Explanation {
    /// The skill.
    pub skill: String,
    /// The policy used.
    pub policy: String,
    /// Its weights, for reading the scores.
    pub weights: [f64; 3],
    /// Its tolerance.
    pub tolerance: f64,
    /// How figures become score components ([`SCORING_RULE`]).
    pub scoring: &'static str,
    /// Every delegate.
    pub delegates: Vec<RowView>,
    /// Names within tolerance of the best score.
    pub band: Vec<String>,
    /// The delegate a decision picked now (random within the band), or why none.
    pub pick: Picked,
}

fn fmt_opt(v: Option<f64>, unit: &str) -> String {
    v.map_or_else(|| "undeclared".to_owned(), |v| format!("{v}{unit}"))
}

/// `0.62 (declared 0.95, observed 0.40 over 12.0; plausibly up to 0.75)`, or the declared
/// quality alone.
fn quality_text(f: &Figures) -> String {
    let blended = f.quality.map(|q| format!("{q:.3}"));
    match f.observed_quality {
        None => fmt_opt(f.declared_quality, ""),
        Some(o) => format!(
            "{} (declared {}, observed {:.3} over {:.1}; plausibly up to {:.3})",
            blended.as_deref().unwrap_or("undeclared"),
            fmt_opt(f.declared_quality, ""),
            o.mean,
            o.count,
            f.plausible_quality().unwrap_or(0.0)
        ),
    }
}

fn detail<O: Offer>(c: Constraint, o: &O, f: &Figures, policy: &Policy, need: &Need<'_>) -> String {
    let card = o.card();
    let r = &policy.require;
    let globs = |g: &[crate::policy::Glob]| {
        g.iter()
            .map(|g| g.0.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    match c {
        Constraint::Healthy => if o.healthy() { "up" } else { "down" }.to_owned(),
        Constraint::NotTried if need.exclude.is_empty() => "first attempt".into(),
        Constraint::NotTried => format!("already tried: [{}]", need.exclude.join(", ")),
        Constraint::NotEjected => {
            let l = o.load();
            if l.ejected {
                "ejected by outlier detection".into()
            } else if l.probing {
                "probing after an ejection".into()
            } else if l.weight_factor < 1.0 {
                format!("slow start, share x{:.2}", l.weight_factor)
            } else {
                "in service".into()
            }
        }
        Constraint::Capacity => {
            let l = o.load();
            match (l.max_in_flight, l.probing) {
                (_, true) => format!("{} in flight, probing allows 1", l.in_flight),
                (Some(m), _) => format!("{} in flight < max {m}", l.in_flight),
                (None, _) => format!("{} in flight, no limit", l.in_flight),
            }
        }
        Constraint::TrustDomain => format!(
            "delegate domain '{}' vs client domain '{}'{}",
            card.trust_domain.name,
            need.client_domain,
            need.required_domain
                .map(|r| format!(", required '{r}'"))
                .unwrap_or_default()
        ),
        Constraint::PolicyTrustDomains if r.trust_domains.is_empty() => "no constraint".into(),
        Constraint::PolicyTrustDomains => {
            format!(
                "'{}' in [{}]",
                card.trust_domain.name,
                r.trust_domains.join(", ")
            )
        }
        Constraint::Jurisdiction
            if r.jurisdictions.is_empty() && r.deny_jurisdictions.is_empty() =>
        {
            "no constraint".into()
        }
        Constraint::Jurisdiction => format!(
            "'{}' allow [{}] deny [{}]",
            card.jurisdiction.as_deref().unwrap_or("undeclared"),
            globs(&r.jurisdictions),
            globs(&r.deny_jurisdictions)
        ),
        Constraint::MinQuality => match r.min_quality {
            None => "no constraint".into(),
            Some(m) => format!("quality {} >= {m}", quality_text(f)),
        },
        Constraint::MaxCost => match r.max_cost_usd {
            None => "no constraint".into(),
            Some(m) => format!("cost {} <= {m} USD", fmt_opt(f.cost_usd, " USD")),
        },
        Constraint::MaxLatency => match r.max_latency_ms {
            None => "no constraint".into(),
            Some(m) => format!(
                "latency {} ({:?}) <= {m} ms",
                fmt_opt(f.latency_ms.map(|l| l.round()), " ms"),
                f.latency_source
            ),
        },
        Constraint::PayloadModes if r.payload_modes.is_empty() => "no constraint".into(),
        Constraint::PayloadModes => format!(
            "supports [{}], needs one of [{}]",
            card.supported_payload_modes
                .iter()
                .map(|m| m.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            r.payload_modes
                .iter()
                .map(|m| m.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Constraint::ContextWindow => match r.min_context_window {
            None => "no constraint".into(),
            Some(m) => format!(
                "context {} >= {m}",
                fmt_opt(card.context_window.map(|c| c as f64), "")
            ),
        },
        Constraint::ModelFamily
            if r.model_families.is_empty() && r.deny_model_families.is_empty() =>
        {
            "no constraint".into()
        }
        Constraint::ModelFamily => format!(
            "'{}' allow [{}] deny [{}]",
            card.model_family,
            globs(&r.model_families),
            globs(&r.deny_model_families)
        ),
        Constraint::ContractBudget => match need.contract_max_cost_usd {
            None => "no contract budget".into(),
            Some(m) => format!("cost {} <= contract {m} USD", fmt_opt(f.cost_usd, " USD")),
        },
        Constraint::ContractDeadline => match need.contract_ms_left {
            None => "no contract deadline".into(),
            Some(m) => format!(
                "latency {} <= {m} ms left",
                fmt_opt(f.latency_ms.map(|l| l.round()), " ms")
            ),
        },
        Constraint::MinReliability => match need.min_reliability {
            None => "not a verifier choice".into(),
            Some(m) => format!("reliability {} >= {m}", quality_text(f)),
        },
    }
}

/// Explains the decision for `need` under `policy` over `offers` (delegates offering the
/// skill); `others` are `(name, delegate_id)` of delegates that do not offer it.
pub fn explain<O: Offer>(
    offers: &[O],
    others: &[(String, String)],
    policy: &Policy,
    need: &Need<'_>,
    params: &RoutingParams,
) -> Explanation {
    let (evals, scored, floor) = scores(offers, policy, need, params);
    let mut delegates = Vec::with_capacity(offers.len() + others.len());
    let mut band = Vec::new();
    for ((o, e), s) in offers.iter().zip(&evals).zip(&scored) {
        let in_band = s.is_some_and(|(_, score)| score >= floor);
        if in_band {
            band.push(o.name().to_owned());
        }
        let trial = if need.min_reliability.is_some() || params.explore <= 0.0 {
            None
        } else if s.is_some() && !in_band && unmeasured(o, &e.figures, policy, need) {
            Some(Trial::Exploring)
        } else if need.probation && e.excluded_by_evidence(policy.require.min_quality) {
            Some(Trial::Probation)
        } else {
            None
        };
        delegates.push(RowView {
            delegate: o.name().to_owned(),
            delegate_id: o.card().delegate_id.clone(),
            offers_skill: true,
            figures: Some(e.figures),
            constraints: Constraint::ALL
                .into_iter()
                .map(|c| ConstraintRow {
                    constraint: c,
                    pass: !e.failed(c),
                    detail: detail(c, o, &e.figures, policy, need),
                })
                .collect(),
            components: s.map(|(c, _)| c),
            score: s.map(|(_, s)| s),
            in_band,
            trial,
            reliability: need.min_reliability.and(e.figures.quality),
        });
    }
    for (name, id) in others {
        delegates.push(RowView {
            delegate: name.clone(),
            delegate_id: id.clone(),
            offers_skill: false,
            figures: None,
            constraints: Vec::new(),
            components: None,
            score: None,
            in_band: false,
            trial: None,
            reliability: None,
        });
    }
    let mut rng = fastrand::Rng::new();
    let pick = match decide(offers, policy, need, params, &mut rng) {
        Ok(p) => Picked::Delegate(offers[p.index].name().to_owned()),
        Err(e) => Picked::NoneEligible(e),
    };
    let w = policy.weights;
    Explanation {
        skill: need.skill.to_owned(),
        policy: policy.name.0.clone(),
        weights: [w.quality, w.cost, w.latency],
        tolerance: policy.tolerance,
        scoring: SCORING_RULE,
        delegates,
        band,
        pick,
    }
}

impl Explanation {
    /// A plain-text table for the terminal.
    pub fn to_table(&self) -> String {
        use std::fmt::Write;
        let mut out = String::new();
        let [wq, wc, wl] = self.weights;
        let _ = writeln!(
            out,
            "skill '{}' under policy '{}' (weights quality {wq}, cost {wc}, latency {wl}; tolerance {})",
            self.skill, self.policy, self.tolerance
        );
        let _ = writeln!(out, "scores: {}", self.scoring);
        for d in &self.delegates {
            let _ = write!(out, "\n{} ({})", d.delegate, d.delegate_id);
            if !d.offers_skill {
                let _ = writeln!(out, ": does not offer the skill");
                continue;
            }
            match (d.score, d.components) {
                (Some(s), Some(c)) => {
                    let _ = writeln!(
                        out,
                        ": score {s:.3} (quality {:.3}, cost {:.3}, latency {:.3}){}",
                        c.quality,
                        c.cost,
                        c.latency,
                        if d.in_band { "  [in band]" } else { "" }
                    );
                }
                _ => {
                    let _ = writeln!(out, ": not eligible");
                }
            }
            if let Some(f) = &d.figures {
                let observed = f.observed_quality.map_or_else(
                    || "none".to_owned(),
                    |o| format!("{:.3} over {:.1}", o.mean, o.count),
                );
                let _ = writeln!(
                    out,
                    "  quality: declared {}, observed {observed}, blended {}",
                    fmt_opt(f.declared_quality, ""),
                    f.quality
                        .map_or_else(|| "undeclared".to_owned(), |q| format!("{q:.3}"))
                );
            }
            if let Some(r) = d.reliability {
                let _ = writeln!(out, "  reliability: {r:.3} (the weight of its vote)");
            }
            match d.trial {
                Some(Trial::Exploring) => {
                    let _ = writeln!(out, "  exploring: unmeasured, may get trial tasks");
                }
                Some(Trial::Probation) => {
                    let _ = writeln!(
                        out,
                        "  on probation: excluded by evidence alone, may get verified trial tasks"
                    );
                }
                None => {}
            }
            for c in &d.constraints {
                let _ = writeln!(
                    out,
                    "  {} {:<20} {}",
                    if c.pass { "pass" } else { "FAIL" },
                    c.constraint.as_str(),
                    c.detail
                );
            }
        }
        let _ = writeln!(out, "\nband: [{}]", self.band.join(", "));
        match &self.pick {
            Picked::Delegate(p) => {
                let _ = writeln!(out, "pick: {p}");
            }
            Picked::NoneEligible(e) => {
                let _ = writeln!(out, "pick: none — {e}");
            }
        }
        out
    }
}
