//! The spend page (`/ui/spend`): cost per tenant over the last hour, day and 30 days, and each
//! tenant's budgets used against their limits, from the ledger's spend query (the one budgets
//! are restored from), drawn as SVG bars by the server.

use super::page::{self, Viewer};
use super::Console;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use axum::Extension;
use maud::{html, Markup};
use std::collections::BTreeMap;

/// The windows shown: label and length in ms.
const WINDOWS: [(&str, i64); 3] = [
    ("last hour", 3_600_000),
    ("last 24 h", 86_400_000),
    ("last 30 days", 30 * 86_400_000),
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
    let mut windows: Vec<(&str, Vec<(String, f64)>)> = Vec::new();
    for (label, len) in WINDOWS {
        match c.app.ledger.spend_since(now_ms - len).await {
            Ok(mut per) => {
                per.sort_by(|a, b| b.1.total_cmp(&a.1));
                windows.push((label, per));
            }
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
        p.note { "Cost charged per tenant, from the ledger (the sum of each task's cost)." }
        div.windows {
            @for (label, per) in &windows {
                section.window {
                    h2 { "Cost per tenant, " (label) }
                    @if per.is_empty() { p { em { "Nothing spent." } } }
                    @else {
                        table.spend {
                            thead { tr { th { "Tenant" } th.num { "Cost" } } }
                            tbody { @for (t, v) in per { tr { td { (t) } td.num { (format!("${v:.6}")) } } } }
                        }
                        (bars(per, None))
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
