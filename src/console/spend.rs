//! The spend page (`/ui/spend`): tasks and cost per tenant, policy and delegate over the last
//! hour, day and 30 days (the ledger's spend breakdown), and each tenant's budgets used
//! against their limits (the spend query budgets are restored from), drawn as SVG bars by the
//! server.

use super::page::{self, Viewer};
use super::Console;
use crate::provenance::SpendRow;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use axum::Extension;
use maud::{html, Markup};
use std::collections::BTreeMap;

/// What spend is summed by.
#[derive(Clone, Copy)]
enum By {
    Tenant,
    Policy,
    Delegate,
}

/// `rows` summed by `by`: (name, tasks, cost), most costly first.
fn group(rows: &[SpendRow], by: By) -> Vec<(String, u64, f64)> {
    let mut sums: BTreeMap<&str, (u64, f64)> = BTreeMap::new();
    for r in rows {
        let key = match by {
            By::Tenant => r.tenant.as_str(),
            By::Policy => r.policy.as_deref().unwrap_or("(none)"),
            By::Delegate => r.delegate.as_deref().unwrap_or("(none)"),
        };
        let e = sums.entry(key).or_insert((0, 0.0));
        e.0 += r.tasks;
        e.1 += r.cost_usd;
    }
    let mut out: Vec<(String, u64, f64)> = sums
        .into_iter()
        .map(|(k, (t, c))| (k.to_owned(), t, c))
        .collect();
    out.sort_by(|a, b| b.2.total_cmp(&a.2).then_with(|| b.1.cmp(&a.1)));
    out
}

/// The windows shown: label and length in ms.
const WINDOWS: [(&str, i64); 3] = [
    ("Last hour", 3_600_000),
    ("Last 24 hours", 86_400_000),
    ("Last 30 days", 30 * 86_400_000),
];

/// Horizontal bars, one per `(label, value)`, scaled to the largest (or `max`).
fn bars(items: &[(String, f64)], max: Option<f64>) -> Markup {
    let top = max
        .unwrap_or(0.0)
        .max(items.iter().map(|(_, v)| *v).fold(0.0, f64::max));
    let row_h = 22;
    let h = (items.len().max(1) * row_h) as u32;
    html! {
        svg.bars width="560" height=(h) viewBox={"0 0 560 " (h)} role="img" aria-label="spend bars" {
            @for (i, (label, v)) in items.iter().enumerate() {
                @let y = (i * row_h) as u32;
                @let w = if top > 0.0 { (v / top * 300.0).clamp(0.0, 300.0) } else { 0.0 };
                text x="0" y=(y + 15) { (label) }
                rect x="130" y=(y + 3) width=(format!("{w:.1}")) height="16" {}
                text x=(format!("{:.1}", 136.0 + w)) y=(y + 15) { (format!("${v:.6}")) }
            }
        }
    }
}

/// `GET /ui/spend`.
pub async fn spend(State(c): State<Console>, Extension(viewer): Extension<Viewer>) -> Response {
    let now = chrono::Utc::now();
    let now_ms = now.timestamp_millis();
    let (day, month) = crate::limits::budget::period_starts(now);
    let mut windows: Vec<(&str, Vec<SpendRow>)> = Vec::new();
    for (label, len) in WINDOWS {
        match c.app.ledger.spend_breakdown(now_ms - len).await {
            Ok(rows) => windows.push((label, rows)),
            Err(e) => {
                return page::page(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "Spend",
                    "/ui/spend",
                    &viewer,
                    html! { p.error role="alert" { "The ledger could not be read: " (e.client_message()) } },
                )
            }
        }
    }
    let (today, this_month) = match (
        c.app.ledger.spend_since(day).await,
        c.app.ledger.spend_since(month).await,
    ) {
        (Ok(d), Ok(m)) => (
            d.into_iter().collect::<BTreeMap<_, _>>(),
            m.into_iter().collect::<BTreeMap<_, _>>(),
        ),
        (Err(e), _) | (_, Err(e)) => {
            return page::page(
                StatusCode::SERVICE_UNAVAILABLE,
                "Spend",
                "/ui/spend",
                &viewer,
                html! { p.error role="alert" { "The ledger could not be read: " (e.client_message()) } },
            )
        }
    };
    let tenants = c.app.proxy.tenants();
    let budgeted: Vec<_> = tenants
        .all()
        .iter()
        .filter(|t| t.budget.usd_per_day.is_some() || t.budget.usd_per_month.is_some())
        .collect();
    let body = html! {
        p.note { "Tasks finished and cost charged, from the ledger (the sum of each task's cost)." }
        @for (label, rows) in &windows {
            h2 { (label) }
            @if rows.is_empty() { p { em { "No tasks." } } }
            @else {
                div.windows {
                    @for (by, name) in [(By::Tenant, "tenant"), (By::Policy, "policy"), (By::Delegate, "delegate")] {
                        @let per = group(rows, by);
                        section.window {
                            h3 { "per " (name) }
                            table.spend {
                                thead { tr { th { (name) } th.num { "Tasks" } th.num { "Cost" } } }
                                tbody { @for (k, tasks, cost) in &per { tr { td { (k) } td.num { (tasks) } td.num { (format!("${cost:.6}")) } } } }
                            }
                            (bars(&per.iter().map(|(k, _, v)| (k.clone(), *v)).collect::<Vec<_>>(), None))
                        }
                    }
                }
            }
        }
        h2 { "Budgets" }
        @if budgeted.is_empty() {
            p { em { "No tenant has a daily or monthly budget." } }
        } @else {
            table.budgets {
                thead { tr { th { "Tenant" } th.num { "Today (UTC)" } th.num { "Daily limit" } th.num { "This month" } th.num { "Monthly limit" } th { "Used" } } }
                tbody {
                    @for t in &budgeted {
                        @let d = today.get(&t.name).copied().unwrap_or(0.0);
                        @let m = this_month.get(&t.name).copied().unwrap_or(0.0);
                        @let used = [ (d, t.budget.usd_per_day), (m, t.budget.usd_per_month) ]
                            .iter().filter_map(|(v, l)| l.filter(|l| *l > 0.0).map(|l| v / l)).fold(0.0, f64::max);
                        tr {
                            td { (t.name) }
                            td.num { (format!("${d:.6}")) }
                            td.num { (t.budget.usd_per_day.map_or_else(|| "–".to_owned(), |l| format!("${l:.2}"))) }
                            td.num { (format!("${m:.6}")) }
                            td.num { (t.budget.usd_per_month.map_or_else(|| "–".to_owned(), |l| format!("${l:.2}"))) }
                            td {
                                @let class = if used >= 1.0 { "bad" } else if used >= 0.8 { "warn" } else { "ok" };
                                svg.meter width="160" height="14" viewBox="0 0 160 14" role="img" aria-label={(format!("{:.0}", used * 100.0)) "% used"} {
                                    rect.track x="0" y="0" width="160" height="14" {}
                                    rect class=(class) x="0" y="0" width=(format!("{:.1}", (used * 160.0).clamp(0.0, 160.0))) height="14" {}
                                }
                                " " (format!("{:.0}%", used * 100.0))
                            }
                        }
                    }
                }
            }
        }
    };
    page::render("Spend", "/ui/spend", &viewer, body)
}
