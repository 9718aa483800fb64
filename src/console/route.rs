//! The explain page (`/ui/route?skill=&policy=&tenant=`): a routing decision as a table, one
//! row per delegate, a column per constraint with the value it compared, the score components,
//! the band and the pick; the same explanation as `/admin/route`.

use super::fleet::urlencode;
use super::page::{self, num, Viewer};
use super::Console;
use crate::routing::{Explanation, Picked, Trial};
use axum::extract::{Query, State};
use axum::response::Response;
use axum::Extension;
use maud::{html, Markup};
use serde::Deserialize;

/// The form's fields.
#[derive(Deserialize, Default)]
pub struct RouteForm {
    #[serde(default)]
    skill: Option<String>,
    #[serde(default)]
    policy: Option<String>,
    #[serde(default)]
    tenant: Option<String>,
}

fn given(v: &Option<String>) -> Option<&str> {
    v.as_deref().map(str::trim).filter(|v| !v.is_empty())
}

/// `GET /ui/route`.
pub async fn route(
    State(c): State<Console>,
    Extension(viewer): Extension<Viewer>,
    q: Result<Query<RouteForm>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let q = q.map(|Query(q)| q).unwrap_or_default();
    let index = c.app.registry.index();
    let skills = index.skills();
    let policies = c.app.proxy.policies();
    let (skill, policy, tenant) = (given(&q.skill), given(&q.policy), given(&q.tenant));
    let form = html! {
        form.filters method="get" action="/ui/route" {
            label { "Skill "
                select name="skill" {
                    @for s in &skills {
                        option value=(s) selected[skill == Some(*s)] { (s) }
                    }
                }
            }
            label { "Policy "
                select name="policy" {
                    option value="" selected[policy.is_none()] { "(as selected)" }
                    @for p in &policies.policies {
                        option value=(p.name.0) selected[policy == Some(p.name.0.as_str())] { (p.name.0) }
                    }
                }
            }
            label { "Tenant " input type="text" name="tenant" value=(tenant.unwrap_or("")) placeholder="anonymous"; }
            button type="submit" { "Explain" }
        }
    };
    let result = match skill {
        None => html! { p.note { "Pick a skill to see how a task for it would be routed now." } },
        Some(skill) => match c.app.proxy.explain(skill, policy, tenant, None) {
            Ok(x) => table(&x),
            Err(e) => html! { p.error role="alert" { (e.to_string()) } },
        },
    };
    page::render(
        "Explain a routing decision",
        "/ui/route",
        &viewer,
        html! { (form) (result) },
    )
}

fn table(x: &Explanation) -> Markup {
    let [wq, wc, wl] = x.weights;
    let columns: Vec<&'static str> = x
        .delegates
        .iter()
        .find(|d| !d.constraints.is_empty())
        .map(|d| {
            d.constraints
                .iter()
                .map(|c| c.constraint.as_str())
                .collect()
        })
        .unwrap_or_default();
    html! {
        p.summary {
            "Skill " strong { (x.skill) } " under policy " strong { (x.policy) }
            ": weights quality " (wq) ", cost " (wc) ", latency " (wl) "; tolerance " (x.tolerance) ". "
            @match &x.pick {
                Picked::Delegate(name) => { "Pick now: " strong.pick { a href={"/ui/fleet/" (urlencode(name))} { (name) } } " (random within the band)." }
                Picked::NoneEligible(why) => { span.bad { "No delegate eligible: " (why.to_string()) } }
            }
        }
        p.note { "Scores: " (x.scoring) }
        div.scroll {
            table.explain {
                thead { tr {
                    th { "Delegate" }
                    th.num { "Score" } th { "Band" }
                    th.num { "quality" } th.num { "cost" } th.num { "latency" }
                    th { "Notes" }
                    @for col in &columns { th { (col) } }
                } }
                tbody {
                    @for d in &x.delegates {
                        tr.picked[matches!(&x.pick, Picked::Delegate(n) if *n == d.delegate)] {
                            td { a href={"/ui/fleet/" (urlencode(&d.delegate))} { (d.delegate) } br; small { (d.delegate_id) } }
                            @if !d.offers_skill {
                                td colspan=(columns.len() + 6) { em { "does not offer the skill" } }
                            } @else {
                                td.num { strong { (num(d.score, 3)) } }
                                td { @if d.in_band { span.badge.ok { "in band" } } @else if d.score.is_some() { "outside" } @else { span.badge.bad { "not eligible" } } }
                                td.num { (num(d.components.map(|c| c.quality), 3)) }
                                td.num { (num(d.components.map(|c| c.cost), 3)) }
                                td.num { (num(d.components.map(|c| c.latency), 3)) }
                                td {
                                    @match d.trial {
                                        Some(Trial::Exploring) => { "exploring (unmeasured)" }
                                        Some(Trial::Probation) => { "on probation" }
                                        None => {}
                                    }
                                    @if let Some(r) = d.reliability { " reliability " (num(Some(r), 3)) }
                                    @if let Some(f) = &d.figures {
                                        @if let Some(o) = f.observed_quality { " observed " (num(Some(o.mean), 2)) " over " (num(Some(o.count), 1)) }
                                    }
                                }
                                @for col in &columns {
                                    @match d.constraints.iter().find(|c| c.constraint.as_str() == *col) {
                                        Some(c) => { td class=(if c.pass { "pass" } else { "fail" }) title=(c.detail) { (if c.pass { "✓ " } else { "✗ " }) (c.detail) } }
                                        None => { td { "–" } }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}
