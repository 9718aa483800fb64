//! The policies page (`/ui/policies`): each policy as loaded, with its match, weights,
//! constraints, limits and `[verify]`; the last reload and its problems.

use super::page::{self, Viewer};
use super::Console;
use axum::extract::State;
use axum::response::Response;
use axum::Extension;
use maud::html;

fn list<T: std::fmt::Debug>(v: &[T]) -> String {
    if v.is_empty() {
        "–".to_owned()
    } else {
        v.iter()
            .map(|x| format!("{x:?}").trim_matches('"').to_owned())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

fn opt<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or_else(|| "–".to_owned(), |v| v.to_string())
}

/// `GET /ui/policies`.
pub async fn policies(State(c): State<Console>, Extension(viewer): Extension<Viewer>) -> Response {
    let set = c.app.proxy.policies();
    let reloads = &c.app.metrics.policy_reloads;
    let ok = reloads.with_label_values(&["ok"]).get();
    let refused = reloads.with_label_values(&["error"]).get();
    let body = html! {
        p.summary {
            (set.policies.len()) " policies loaded from " code { (c.app.config.policies.dir.display().to_string()) }
            "; default " strong { (set.default.0) } ". Reloads since start: " (ok) " applied, "
            span class=(if refused > 0 { "bad" } else { "" }) { (refused) " refused" } "."
        }
        @match c.app.proxy.last_reload() {
            None => { p.note { "No reload since start: these are the policies loaded at start." } }
            Some(r) => {
                @match &r.outcome {
                    Ok(n) => { p { "Last reload " (r.at) ": " span.badge.ok { "applied" } " (" (n) " policies)." } }
                    Err(problems) => {
                        div.error role="alert" {
                            p { "Last reload " (r.at) ": refused; the previous policies stay in force. Its problems:" }
                            ul { @for pr in problems { li { code { (pr) } } } }
                        }
                    }
                }
            }
        }
        @for p in &set.policies {
            section.policy {
                h2 { (p.name.0) @if p.name == set.default { " " span.badge.ok { "default" } } }
                @if !p.description.is_empty() { p { (p.description) } }
                dl.facts {
                    dt { "File" } dd { code { (p.source.display().to_string()) } }
                    dt { "Matches" } dd {
                        @match &p.matcher {
                            Some(m) => { "skills " (list(&m.skills.iter().map(|g| g.0.clone()).collect::<Vec<_>>())) "; tenants " (list(&m.tenants)) }
                            None => { "–" }
                        }
                    }
                    dt { "Weights" } dd { "quality " (p.weights.quality) ", cost " (p.weights.cost) ", latency " (p.weights.latency) }
                    dt { "Tolerance" } dd { (p.tolerance) }
                    dt { "Max attempts" } dd { (p.max_attempts) }
                    dt { "Limits" } dd { (p.limits.as_ref().map_or_else(|| "–".to_owned(), |l| format!("{} rps, burst {}", l.rps, l.burst))) }
                }
                h3 { "Constraints" }
                table.constraints {
                    tbody {
                        tr { th { "min_quality" } td { (opt(p.require.min_quality)) } }
                        tr { th { "max_cost_usd" } td { (opt(p.require.max_cost_usd)) } }
                        tr { th { "max_latency_ms" } td { (opt(p.require.max_latency_ms)) } }
                        tr { th { "min_context_window" } td { (opt(p.require.min_context_window)) } }
                        tr { th { "jurisdictions" } td { (list(&p.require.jurisdictions.iter().map(|g| g.0.clone()).collect::<Vec<_>>())) } }
                        tr { th { "deny_jurisdictions" } td { (list(&p.require.deny_jurisdictions.iter().map(|g| g.0.clone()).collect::<Vec<_>>())) } }
                        tr { th { "trust_domains" } td { (list(&p.require.trust_domains)) } }
                        tr { th { "payload_modes" } td { (list(&p.require.payload_modes)) } }
                        tr { th { "model_families" } td { (list(&p.require.model_families.iter().map(|g| g.0.clone()).collect::<Vec<_>>())) } }
                        tr { th { "deny_model_families" } td { (list(&p.require.deny_model_families.iter().map(|g| g.0.clone()).collect::<Vec<_>>())) } }
                    }
                }
                h3 { "[verify]" }
                @match &p.verify {
                    Some(v) => {
                        dl.facts {
                            dt { "skill" } dd { (v.skill) }
                            dt { "verifiers" } dd { (v.verifiers) }
                            dt { "threshold" } dd { (v.threshold) }
                            dt { "max_rounds" } dd { (v.max_rounds) }
                            dt { "sample" } dd { (v.sample) }
                            dt { "independent" } dd { (v.independent) }
                            dt { "min_reliability" } dd { (v.min_reliability) }
                            dt { "calibration" } dd { (if v.calibration.is_some() { "configured" } else { "–" }) }
                        }
                    }
                    None => { p { em { "No verification." } } }
                }
            }
        }
    };
    page::render("Policies", "/ui/policies", &viewer, body)
}
