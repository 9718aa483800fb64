//! The ledger pages: recent tasks (`/ui/ledger`, filtered by query parameters and paged 50 at
//! a time through the ledger's own query, as `/admin/provenance`), and one task
//! (`/ui/ledger/{task_id}`) with its provenance, routing, attempts, votes, cost and tokens.

use super::fleet::urlencode;
use super::page::{self, num, or_dash, usd, Viewer};
use super::Console;
use crate::provenance::{Ingress, JsonText, LedgerRow, Outcome};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::Extension;
use maud::{html, Markup};
use serde::Deserialize;

/// Rows per page.
pub const PAGE: u32 = 50;

/// The filters, as query parameters (every one optional; an empty one is no filter).
#[derive(Deserialize, Default, Clone)]
pub struct Filters {
    #[serde(default)]
    tenant: Option<String>,
    #[serde(default)]
    skill: Option<String>,
    #[serde(default)]
    policy: Option<String>,
    #[serde(default)]
    delegate: Option<String>,
    #[serde(default)]
    ingress: Option<String>,
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    trace_id: Option<String>,
    #[serde(default)]
    since: Option<String>,
    #[serde(default)]
    offset: Option<u32>,
}

fn given(v: &Option<String>) -> Option<String> {
    v.as_deref()
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(str::to_owned)
}

/// Why the filters cannot be used.
#[derive(Debug, thiserror::Error)]
enum FilterError {
    /// Not a front end's name.
    #[error("ingress must be one of ldp, openai, anthropic, llmcp, llmx, ladp, a2a; got '{0}'")]
    Ingress(String),
    /// Neither `result` nor `failed`.
    #[error("status must be result or failed; got '{0}'")]
    Status(String),
    /// A bad `since`.
    #[error(transparent)]
    Since(#[from] crate::provenance::query::SinceError),
}

impl Filters {
    /// The ledger query these filters make (one page from `offset`).
    fn query(&self) -> Result<crate::provenance::Query, FilterError> {
        let ingress = match given(&self.ingress) {
            Some(i) => Some(Ingress::parse(&i).ok_or(FilterError::Ingress(i))?),
            None => None,
        };
        let outcome = match given(&self.status).as_deref() {
            Some("result") => Some(Outcome::Result),
            Some("failed") => Some(Outcome::Failed),
            Some(other) => return Err(FilterError::Status(other.to_owned())),
            None => None,
        };
        let since_ms = match given(&self.since) {
            Some(s) => Some(crate::provenance::query::parse_since(
                &s,
                chrono::Utc::now().timestamp_millis(),
            )?),
            None => None,
        };
        Ok(crate::provenance::Query {
            tenant: given(&self.tenant),
            skill: given(&self.skill),
            policy: given(&self.policy),
            delegate: given(&self.delegate),
            ingress,
            outcome,
            trace_id: given(&self.trace_id).map(|t| t.to_ascii_lowercase()),
            since_ms,
            limit: Some(PAGE),
            offset: self.offset,
            ..Default::default()
        })
    }

    /// The query string of these filters at `offset`.
    fn href(&self, offset: u32) -> String {
        let mut parts = Vec::new();
        for (k, v) in [
            ("tenant", &self.tenant),
            ("skill", &self.skill),
            ("policy", &self.policy),
            ("delegate", &self.delegate),
            ("ingress", &self.ingress),
            ("status", &self.status),
            ("trace_id", &self.trace_id),
            ("since", &self.since),
        ] {
            if let Some(v) = given(v) {
                parts.push(format!("{k}={}", urlencode(&v)));
            }
        }
        if offset > 0 {
            parts.push(format!("offset={offset}"));
        }
        format!("/ui/ledger?{}", parts.join("&"))
    }

    fn form(&self) -> Markup {
        let text = |name: &'static str, label: &'static str, v: &Option<String>| {
            html! { label { (label) " " input type="text" name=(name) value=(v.as_deref().unwrap_or("")); } }
        };
        let ingress = given(&self.ingress);
        let status = given(&self.status);
        html! {
            form.filters method="get" action="/ui/ledger" {
                (text("tenant", "Tenant", &self.tenant))
                (text("skill", "Skill", &self.skill))
                (text("policy", "Policy", &self.policy))
                (text("delegate", "Delegate", &self.delegate))
                label { "Ingress "
                    select name="ingress" {
                        option value="" { "any" }
                        @for i in Ingress::ALL {
                            option value=(i.as_str()) selected[ingress.as_deref() == Some(i.as_str())] { (i.as_str()) }
                        }
                    }
                }
                label { "Status "
                    select name="status" {
                        option value="" { "any" }
                        @for s in ["result", "failed"] {
                            option value=(s) selected[status.as_deref() == Some(s)] { (s) }
                        }
                    }
                }
                (text("trace_id", "Trace id", &self.trace_id))
                label { "Since " input type="text" name="since" value=(self.since.as_deref().unwrap_or("")) placeholder="1h or RFC 3339"; }
                button type="submit" { "Filter" }
                " " a href="/ui/ledger" { "clear" }
            }
        }
    }
}

fn outcome(row: &LedgerRow) -> Markup {
    match row.outcome {
        Outcome::Result => html! { span.badge.ok { "result" } },
        Outcome::Failed => {
            html! { span.badge.bad { "failed" } " " small { (or_dash(row.error_code.as_deref())) } }
        }
    }
}

/// `GET /ui/ledger`.
pub async fn ledger(
    State(c): State<Console>,
    Extension(viewer): Extension<Viewer>,
    q: Result<Query<Filters>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let f = match q {
        Ok(Query(f)) => f,
        Err(e) => {
            let f = Filters::default();
            let body = html! { (f.form()) p.error role="alert" { (e.body_text()) } };
            return page::page(
                StatusCode::BAD_REQUEST,
                "Ledger",
                "/ui/ledger",
                &viewer,
                body,
            );
        }
    };
    let query = match f.query() {
        Ok(q) => q,
        Err(e) => {
            let body = html! { (f.form()) p.error role="alert" { (e.to_string()) } };
            return page::page(
                StatusCode::BAD_REQUEST,
                "Ledger",
                "/ui/ledger",
                &viewer,
                body,
            );
        }
    };
    let offset = query.offset.unwrap_or(0);
    let rows = match c.app.ledger.query(query).await {
        Ok(rows) => rows,
        Err(e) => {
            let body = html! { (f.form()) p.error role="alert" { "The ledger could not be read: " (e.client_message()) } };
            return page::page(
                StatusCode::SERVICE_UNAVAILABLE,
                "Ledger",
                "/ui/ledger",
                &viewer,
                body,
            );
        }
    };
    let body = html! {
        (f.form())
        p.summary { "Tasks " (offset + 1) "–" (offset + rows.len() as u32) ", newest first." }
        div.scroll {
            table.ledger {
                thead { tr {
                    th { "Finished" } th { "Task" } th { "Tenant" } th { "Skill" } th { "Policy" }
                    th { "Delegate" } th { "Ingress" } th { "Status" } th.num { "Attempts" }
                    th.num { "Latency" } th.num { "Cost" } th.num { "Tokens" }
                } }
                tbody {
                    @for r in &rows {
                        tr {
                            td { small { (r.finished_at) } }
                            td { a href={"/ui/ledger/" (urlencode(&r.task_id))} { (r.task_id) } }
                            td { (r.tenant) }
                            td { (r.skill) }
                            td { (or_dash(r.policy.as_deref())) }
                            td { (or_dash(r.delegate.as_deref())) }
                            td { (r.ingress.as_str()) }
                            td { (outcome(r)) }
                            td.num { (r.attempts) }
                            td.num { (format!("{:.0} ms", r.latency_ms)) }
                            td.num { (usd(r.cost_usd)) }
                            td.num { (r.tokens.map_or_else(|| "–".to_owned(), |t| t.to_string())) }
                        }
                    }
                    @if rows.is_empty() {
                        tr { td colspan="12" { em { "No tasks match." } } }
                    }
                }
            }
        }
        nav.pager aria-label="Pages" {
            @if offset > 0 {
                a href=(f.href(offset.saturating_sub(PAGE))) rel="prev" { "← newer" }
            }
            @if rows.len() as u32 == PAGE {
                a href=(f.href(offset + PAGE)) rel="next" { "older →" }
            }
        }
    };
    page::render("Ledger", "/ui/ledger", &viewer, body)
}

fn pretty(j: &JsonText) -> String {
    serde_json::from_str::<serde_json::Value>(j.get())
        .ok()
        .and_then(|v| serde_json::to_string_pretty(&v).ok())
        .unwrap_or_else(|| j.get().to_owned())
}

fn one(r: &LedgerRow) -> Markup {
    html! {
        section.task {
            h2 { "Session " code { (r.session_id) } }
            dl.facts {
                dt { "Status" } dd { (outcome(r)) @if let Some(m) = &r.error_message { " " (m) } }
                dt { "Tenant" } dd { (r.tenant) }
                dt { "Ingress" } dd { (r.ingress.as_str()) }
                dt { "Skill" } dd { (r.skill) }
                dt { "Policy" } dd { (or_dash(r.policy.as_deref())) }
                dt { "Delegate" } dd.delegate {
                    @match &r.delegate {
                        Some(d) => { a href={"/ui/fleet/" (urlencode(d))} { (d) } }
                        None => { "–" }
                    }
                    " " small { (or_dash(r.delegate_id.as_deref())) " " (or_dash(r.model_version.as_deref())) }
                }
                dt { "Routing" } dd { "score " (num(r.score, 3)) ", " (r.candidates.map_or_else(|| "–".to_owned(), |c| c.to_string())) " candidates" }
                dt { "Attempts" } dd { (r.attempts) }
                dt { "Fallbacks" } dd {
                    @if r.fallbacks.is_empty() { "none" }
                    @else { ol { @for f in &r.fallbacks { li { (f) } } } }
                }
                dt { "Payload mode" } dd { (or_dash(r.payload_mode.as_deref())) }
                dt { "Latency" } dd { (format!("{:.1} ms", r.latency_ms)) " (upstream " (format!("{:.1} ms", r.upstream_ms)) ")" }
                dt { "Cost" } dd.cost { (usd(r.cost_usd)) " (reported " (usd(r.reported_cost_usd)) ", declared " (usd(r.declared_cost_usd)) ")" }
                dt { "Tokens" } dd {
                    (r.tokens.map_or_else(|| "–".to_owned(), |t| t.to_string()))
                    @if let Some(u) = r.usage { " (input " (u.input) ", output " (u.output) ", cache read " (u.cache_read) ", cache write " (u.cache_write) ")" }
                }
                dt { "Confidence" } dd { (num(r.confidence, 3)) }
                dt { "Verification" } dd { (or_dash(r.verification_status.as_deref())) }
                dt { "Trace id" } dd { code { (or_dash(r.trace_id.as_deref())) } }
                dt { "Started" } dd { (r.started_at) }
                dt { "Finished" } dd { (r.finished_at) }
                dt { "Output SHA-256" } dd { code { (or_dash(r.output_sha256.as_deref())) } }
            }
            @if !r.votes.is_empty() {
                h3 { "Verification votes" }
                table {
                    thead { tr { th.num { "Round" } th { "Producer" } th { "Verifier" } th { "Skill" } th { "Vote" } th.num { "Confidence" } th.num { "Weight" } } }
                    tbody {
                        @for v in &r.votes {
                            tr {
                                td.num { (v.round) } td { (v.producer) } td { (v.verifier) } td { (v.skill) }
                                td { @if v.passed { span.badge.ok { "pass" } } @else { span.badge.bad { "fail" } } }
                                td.num { (num(v.confidence, 2)) } td.num { (num(Some(v.weight), 2)) }
                            }
                        }
                    }
                }
            }
            h3 { "Routing" }
            pre { (pretty(&r.routing)) }
            h3 { "Lineage" }
            pre { (pretty(&r.lineage)) }
            @if let Some(p) = &r.payload {
                h3 { "Payload previews (redacted)" }
                pre { (pretty(p)) }
            }
        }
    }
}

/// `GET /ui/ledger/{task_id}`: every row of that task id (one per session that used it).
pub async fn task(
    State(c): State<Console>,
    Extension(viewer): Extension<Viewer>,
    Path(task_id): Path<String>,
) -> Response {
    let q = crate::provenance::Query {
        task_id: Some(task_id.clone()),
        limit: Some(10),
        ..Default::default()
    };
    let (rows, feedback) = match (
        c.app.ledger.query(q).await,
        c.app.ledger.feedback(&task_id).await,
    ) {
        (Ok(rows), Ok(fb)) => (rows, fb),
        (Err(e), _) | (_, Err(e)) => {
            return page::page(
                StatusCode::SERVICE_UNAVAILABLE,
                "Task",
                "/ui/ledger",
                &viewer,
                html! { p.error role="alert" { "The ledger could not be read: " (e.client_message()) } },
            )
        }
    };
    let title = format!("Task {task_id}");
    if rows.is_empty() {
        return page::page(
            StatusCode::NOT_FOUND,
            &title,
            "/ui/ledger",
            &viewer,
            html! { p { "No task with this id is in the ledger." } },
        );
    }
    let body = html! {
        @for r in &rows { (one(r)) }
        @if !feedback.is_empty() {
            h2 { "Ratings" }
            table {
                thead { tr { th { "Tenant" } th.num { "Score" } th { "Delegate" } th { "When" } } }
                tbody { @for f in &feedback { tr { td { (f.tenant) } td.num { (num(Some(f.score), 2)) } td { (or_dash(f.delegate.as_deref())) } td { (f.created_at) } } } }
            }
        }
    };
    page::render(&title, "/ui/ledger", &viewer, body)
}
