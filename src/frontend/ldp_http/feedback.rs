//! `POST /ldp/feedback`: a tenant rates one of its own tasks, once; the rating is stored in
//! the ledger beside the task's row and learnt as evidence of the delegate's quality.

use crate::frontend::api_error::{ApiError, ErrorKind};
use crate::frontend::request::{read_json_body, refuse, request_ctx};
use crate::frontend::AppState;
use crate::ldp::error::GatewayCode;
use crate::provenance::{Feedback, Given, LedgerError};
use axum::body::Body as HttpBody;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Map, Value};

/// A rating as the client sent it, checked.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Rating {
    pub task_id: String,
    pub score: f64,
    pub given: Given,
}

fn bad(message: impl Into<String>) -> ApiError {
    ApiError::new(GatewayCode::BadRequest, message)
}

/// Reads `{"task_id": "…", "score": 0..1}` or `{"task_id": "…", "outcome": "good"|"bad"}`;
/// every refusal names the field. Read by hand rather than derived: serde's type errors do
/// not say which field they are about.
pub(super) fn parse(bytes: &[u8], max_id_bytes: usize) -> Result<Rating, ApiError> {
    let body: Map<String, Value> = match serde_json::from_slice::<Value>(bytes) {
        Ok(Value::Object(m)) => m,
        Ok(_) => return Err(bad("the body must be a JSON object")),
        Err(e) => return Err(bad(format!("the body is not JSON: {e}"))),
    };
    if let Some(k) = body
        .keys()
        .find(|k| !matches!(k.as_str(), "task_id" | "score" | "outcome"))
    {
        return Err(bad(format!(
            "unknown field `{k}` (expected task_id and one of score, outcome)"
        )));
    }
    let task_id = match body.get("task_id") {
        None => return Err(bad("missing field `task_id`")),
        Some(Value::String(t)) if t.is_empty() => return Err(bad("`task_id` is empty")),
        Some(Value::String(t)) if t.len() > max_id_bytes => {
            return Err(bad(format!(
                "`task_id` is longer than {max_id_bytes} bytes"
            )))
        }
        Some(Value::String(t)) => t.clone(),
        Some(_) => return Err(bad("`task_id` must be a string")),
    };
    let (score, given) = match (body.get("score"), body.get("outcome")) {
        (Some(_), Some(_)) => return Err(bad("give one of `score` or `outcome`, not both")),
        (None, None) => return Err(bad("missing field `score` or `outcome`")),
        (Some(s), None) => match s.as_f64() {
            Some(x) if (0.0..=1.0).contains(&x) => (x, Given::Score),
            _ => {
                return Err(bad(format!(
                    "`score` must be a number from 0 to 1, got {s}"
                )))
            }
        },
        (None, Some(o)) => match o.as_str() {
            Some("good") => (1.0, Given::Good),
            Some("bad") => (0.0, Given::Bad),
            _ => {
                return Err(bad(format!(
                    "`outcome` must be \"good\" or \"bad\", got {o}"
                )))
            }
        },
    };
    Ok(Rating {
        task_id,
        score,
        given,
    })
}

/// A ledger failure as the client hears it (busy or slow: 503, worth retrying).
fn ledger_error(e: &LedgerError) -> ApiError {
    ApiError::from(e)
}

/// Rates a task: the tenant's own task only (another tenant's task and an unknown one are
/// the same 404, so task ids cannot be probed), once (409).
pub(crate) async fn feedback(
    State(s): State<AppState>,
    headers: HeaderMap,
    body: HttpBody,
) -> Response {
    match rate(&s, &headers, body).await {
        Ok(stored) => (
            StatusCode::OK,
            Json(json!({
                "task_id": stored.task_id,
                "score": stored.score,
                "outcome": stored.outcome,
            })),
        )
            .into_response(),
        Err(e) => refuse(e),
    }
}

async fn rate(s: &AppState, headers: &HeaderMap, body: HttpBody) -> Result<Feedback, ApiError> {
    let ctx = request_ctx(s, headers)?;
    let bytes = read_json_body(s, headers, body).await?;
    let rating = parse(&bytes, s.config.security.max_id_bytes)?;
    // Each rating costs a ledger read and a commit: the tenant's rate limit applies.
    s.proxy.admit_request(&ctx).await?;
    let tenant = ctx.tenant.name.to_string();
    // The ledger's row decides whose task it is: it survives a restart and, on Postgres,
    // every replica sees it.
    let task = s
        .ledger
        .task_of(&tenant, &rating.task_id)
        .await
        .map_err(|e| ledger_error(&e))?
        .ok_or_else(|| {
            ApiError::new(
                GatewayCode::TaskNotFound,
                format!("no task '{}'", rating.task_id),
            )
        })?;
    let now = chrono::Utc::now();
    let fb = Feedback {
        task_id: rating.task_id,
        tenant,
        score: rating.score,
        outcome: rating.given,
        delegate: task.delegate,
        skill: task.skill,
        created_at: now.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        created_ms: now.timestamp_millis(),
    };
    if !s
        .ledger
        .rate(fb.clone())
        .await
        .map_err(|e| ledger_error(&e))?
    {
        return Err(ApiError::of(
            ErrorKind::Conflict,
            format!("task '{}' is rated already", fb.task_id),
        ));
    }
    s.metrics
        .feedback
        .with_label_values(&[fb.outcome.as_str()])
        .inc();
    // The rating is evidence of what the delegate delivered (routing's learned quality):
    // the tenant's own, or shared when the operator trusts it as a rater.
    if let Some(delegate) = &fb.delegate {
        s.registry
            .observe_rating(delegate, &fb.skill, &fb.tenant, fb.score, fb.created_ms);
    }
    rate_verifiers(s, &fb).await;
    Ok(fb)
}

/// A trusted rater's rating of a verified task is also evidence of its verifiers'
/// judgement (their reliability): the row's last round of votes is read back (one more
/// ledger read, for trusted raters only). A failed read only loses that evidence.
async fn rate_verifiers(s: &AppState, fb: &Feedback) {
    if !s.registry.trusted_rater(&fb.tenant) {
        return;
    }
    let q = crate::provenance::Query {
        task_id: Some(fb.task_id.clone()),
        tenant: Some(fb.tenant.clone()),
        limit: Some(1),
        ..Default::default()
    };
    let Ok(rows) = s.ledger.query(q).await else {
        return;
    };
    let Some(row) = rows.into_iter().next().filter(|r| !r.votes.is_empty()) else {
        return;
    };
    let policies = s.proxy.policies();
    let Some(verify) = row
        .policy
        .as_deref()
        .and_then(|p| policies.get(p))
        .and_then(|p| p.verify.as_ref())
    else {
        return;
    };
    let last = row.votes.iter().map(|v| v.round).max().unwrap_or(0);
    let votes: Vec<_> = row.votes.into_iter().filter(|v| v.round == last).collect();
    s.registry
        .observe_rating_of_votes(&votes, &verify.skill, &fb.tenant, fb.score, fb.created_ms);
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly")]

    use super::*;

    fn refused(body: &str) -> String {
        parse(body.as_bytes(), 16)
            .unwrap_err()
            .error()
            .message
            .clone()
    }

    #[test]
    fn ratings_are_read_and_every_refusal_names_its_field() {
        let r = parse(br#"{"task_id": "t1", "outcome": "good"}"#, 16).unwrap();
        assert_eq!(
            (r.task_id.as_str(), r.score, r.given),
            ("t1", 1.0, Given::Good)
        );
        let r = parse(br#"{"task_id": "t1", "outcome": "bad"}"#, 16).unwrap();
        assert_eq!((r.score, r.given), (0.0, Given::Bad));
        let r = parse(br#"{"task_id": "t1", "score": 0.25}"#, 16).unwrap();
        assert_eq!((r.score, r.given), (0.25, Given::Score));
        assert!(parse(br#"{"task_id": "t1", "score": 1}"#, 16).is_ok());
        for (body, field) in [
            (r#"{"score": 0.5}"#, "`task_id`"),
            (r#"{"task_id": 7, "score": 0.5}"#, "`task_id`"),
            (r#"{"task_id": "", "score": 0.5}"#, "`task_id`"),
            (
                r#"{"task_id": "12345678901234567", "score": 0.5}"#,
                "`task_id`",
            ),
            (r#"{"task_id": "t"}"#, "`score` or `outcome`"),
            (r#"{"task_id": "t", "score": 1.5}"#, "`score`"),
            (r#"{"task_id": "t", "score": -0.1}"#, "`score`"),
            (r#"{"task_id": "t", "score": "high"}"#, "`score`"),
            (r#"{"task_id": "t", "outcome": "great"}"#, "`outcome`"),
            (r#"{"task_id": "t", "outcome": 1}"#, "`outcome`"),
            (
                r#"{"task_id": "t", "score": 1, "outcome": "good"}"#,
                "`score` or `outcome`",
            ),
            (r#"{"task_id": "t", "score": 1, "extra": 2}"#, "`extra`"),
        ] {
            let m = refused(body);
            assert!(m.contains(field), "{body}: {m}");
        }
        assert!(refused("[1]").contains("object"));
        assert!(refused("{").contains("not JSON"));
    }
}
