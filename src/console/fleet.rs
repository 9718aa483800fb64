//! The fleet page (`/ui/fleet`, `/ui/`): every delegate with its kind, health, skills, declared
//! and observed figures, cost, jurisdiction, trust domain and load; and one delegate's page
//! with its card.

use super::page::{self, num, or_dash, Viewer};
use super::Console;
use crate::registry::Delegate;
use crate::registry::Phase;
use crate::upstream::Upstream;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::Extension;
use maud::{html, Markup};
use std::collections::BTreeSet;

/// The kind a delegate is called as.
pub fn kind(d: &Delegate) -> &'static str {
    match &d.upstream {
        Upstream::Ldp(_) => "ldp",
        Upstream::OpenAi(_) => "openai",
        Upstream::Anthropic(_) => "anthropic",
        Upstream::A2a(_) => "a2a",
    }
}

/// The health cell: state (coloured), the pause a 429 asked for, the ejection, the last error.
fn health(d: &Delegate) -> Markup {
    let snap = d.snapshot();
    let (class, label) = if !d.is_healthy() {
        ("bad", "down")
    } else {
        match snap.phase {
            Phase::Active => ("ok", "healthy"),
            Phase::Ejected => ("bad", "ejected"),
            Phase::Probing => ("warn", "probing"),
            Phase::SlowStart => ("warn", "slow start"),
        }
    };
    html! {
        span class={"badge " (class)} { (label) }
        @if let Some(p) = d.paused_for() {
            br; span.warn { "paused " (format!("{:.0}", p.as_secs_f64())) " s more (429)" }
        }
        @if let Some(ms) = snap.ejected_for_ms {
            br; span.bad { "ejected " (ms / 1000) " s more (" (snap.ejections) "×)" }
        }
        @if let Some(r) = snap.error_rate {
            br; small { "errors " (num(Some(r * 100.0), 0)) "% of " (snap.window_requests) }
        }
        @if let Some(e) = d.last_error() {
            br; small.err title=(e.as_str()) { "last error: " (e.as_str()) }
        }
    }
}

/// `GET /ui/fleet`.
pub async fn fleet(State(c): State<Console>, Extension(viewer): Extension<Viewer>) -> Response {
    let snapshot = c.app.registry.snapshot();
    let policies = c.app.proxy.policies();
    let verify_skills: BTreeSet<&str> = policies
        .policies
        .iter()
        .filter_map(|p| p.verify.as_ref().map(|v| v.skill.as_str()))
        .collect();
    let healthy = snapshot.iter().filter(|d| d.is_healthy()).count();
    let body = html! {
        p.summary { (snapshot.len()) " delegates, " (healthy) " healthy." }
        div.scroll { table.fleet {
            thead { tr {
                th { "Delegate" } th { "Kind" } th { "Health" } th { "Skill" }
                th.num { "Quality decl." } th.num { "obs. (n)" } th.num { "blend" }
                th.num { "Verifier rel." }
                th.num { "Latency decl." } th.num { "obs. (n)" }
                th.num { "Cost/call" } th { "Juris." } th { "Trust domain" }
                th.num { "In flight" }
            } }
            tbody {
                @for d in snapshot.iter() {
                    @let card = d.card();
                    @let snap = d.snapshot();
                    @let skills: Vec<String> = card.as_ref().map(|c| c.capabilities.iter().map(|s| s.name.clone()).collect()).unwrap_or_default();
                    @let rows = skills.len().max(1);
                    @for (i, skill) in skills.iter().map(Some).chain(skills.is_empty().then_some(None)).enumerate() {
                        tr.delegate[i == 0] {
                            @if i == 0 {
                                td rowspan=(rows) {
                                    a href={"/ui/fleet/" (urlencode(&d.name))} { (d.name) }
                                    @if let Some(card) = &card { br; small.card-name title="the card's name" { (card.name) } }
                                }
                                td rowspan=(rows) { (kind(d)) }
                                td rowspan=(rows) { (health(d)) }
                            }
                            @match (skill, card.as_ref()) {
                                (Some(skill), Some(card)) => {
                                    @let q = d.quality_at(card, skill);
                                    @let hints = card.effective_hints(skill);
                                    td { (skill) }
                                    td.num { (num(q.declared, 2)) }
                                    td.num { (q.observed.map_or_else(|| "–".to_owned(), |o| format!("{:.2} ({:.1})", o.mean, o.count))) }
                                    td.num { (num(q.blended, 2)) }
                                    td.num { (num(q.blended.filter(|_| verify_skills.contains(skill.as_str())), 2)) }
                                    td.num { (hints.as_ref().and_then(|h| h.latency_p50_ms).map_or_else(|| "–".to_owned(), |ms| format!("{ms} ms"))) }
                                    td.num { (snap.latency_ewma_ms.map_or_else(|| "–".to_owned(), |ms| format!("{ms:.0} ms"))) " (" (snap.samples) ")" }
                                    td.num { (cost(hints.as_ref())) }
                                }
                                _ => {
                                    td colspan="8" { em { "no card yet" } }
                                }
                            }
                            @if i == 0 {
                                td rowspan=(rows) { (or_dash(card.as_ref().and_then(|c| c.jurisdiction.as_deref()))) }
                                td rowspan=(rows) { (card.as_ref().map_or("–", |c| c.trust_domain.name.as_str())) }
                                td.num rowspan=(rows) { (snap.in_flight) (d.max_in_flight().map_or_else(String::new, |m| format!(" / {m}"))) }
                            }
                        }
                    }
                }
            }
        } }
    };
    page::render("Fleet", "/ui/fleet", &viewer, body)
}

/// A skill's declared cost per call, else its tier.
fn cost(h: Option<&crate::ldp::CapabilityHints>) -> String {
    match h {
        Some(h) => match (h.cost_per_call_usd, h.cost_tier) {
            (Some(usd), _) => format!("${usd:.6}"),
            (None, Some(tier)) => serde_json::to_value(tier)
                .ok()
                .and_then(|v| v.as_str().map(|s| format!("tier {s}")))
                .unwrap_or_else(|| "–".to_owned()),
            (None, None) => "–".to_owned(),
        },
        None => "–".to_owned(),
    }
}

/// A path segment with everything but unreserved characters percent-encoded.
pub fn urlencode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `GET /ui/fleet/{name}`: one delegate and its card as JSON.
pub async fn delegate(
    State(c): State<Console>,
    Extension(viewer): Extension<Viewer>,
    Path(name): Path<String>,
) -> Response {
    let Some(d) = c.app.registry.get(&name) else {
        return page::page(
            StatusCode::NOT_FOUND,
            "No such delegate",
            "/ui/fleet",
            &viewer,
            html! { p { "No delegate is named " code { (name) } "." } },
        );
    };
    let card = d.card();
    let card_json = card
        .as_deref()
        .and_then(|c| serde_json::to_string_pretty(c).ok());
    let snap = d.snapshot();
    let body = html! {
        dl.facts {
            dt { "Kind" } dd { (kind(&d)) }
            dt { "URL" } dd { code { (crate::secret::redact_url(&d.base_url)) } }
            dt { "Health" } dd { (health(&d)) }
            dt { "Weight" } dd { (d.weight) }
            dt { "In flight" } dd { (snap.in_flight) }
            dt { "Observed latency" } dd { (snap.latency_ewma_ms.map_or_else(|| "–".to_owned(), |ms| format!("{ms:.1} ms"))) " over " (snap.samples) " samples" }
            dt { "Failures in a row" } dd { (snap.consecutive_failures) }
            dt { "Last success" } dd { (or_dash(snap.last_success.as_deref())) }
            @for (k, v) in &d.labels {
                dt { "label " (k) } dd { (v) }
            }
        }
        h2 { "Card" }
        @match card_json {
            Some(j) => { pre.card { (j) } }
            None => { p { em { "No card fetched yet." } } }
        }
    };
    page::render(&format!("Delegate {}", d.name), "/ui/fleet", &viewer, body)
}
