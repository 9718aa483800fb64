//! Ledger queries (admin API and `ldp-gateway provenance`) and their CSV/JSON output.

use super::{Ingress, LedgerRow};
use serde::Deserialize;

/// Filters; every present field must match. Newest rows first.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Query {
    /// Client session id.
    pub session_id: Option<String>,
    /// Client task id.
    pub task_id: Option<String>,
    /// Delegate registry name.
    pub delegate: Option<String>,
    /// Tenant.
    pub tenant: Option<String>,
    /// The front end tasks came in through (`ldp`, `openai`, …).
    pub ingress: Option<Ingress>,
    /// The OpenTelemetry trace id (32 hex digits).
    pub trace_id: Option<String>,
    /// Skill.
    #[serde(default)]
    pub skill: Option<String>,
    /// Policy used.
    #[serde(default)]
    pub policy: Option<String>,
    /// Result or failure.
    #[serde(default)]
    pub outcome: Option<super::Outcome>,
    /// Rows finished at or after this Unix ms.
    #[serde(skip)]
    pub since_ms: Option<i64>,
    /// Page size (default 100, at most 10,000).
    #[serde(default, deserialize_with = "whole_number")]
    pub limit: Option<u32>,
    /// Rows to skip.
    #[serde(default, deserialize_with = "whole_number")]
    pub offset: Option<u32>,
}

impl Query {
    /// The text filters present, each with the ledger column it must equal (both backends
    /// build their `WHERE` from this).
    pub fn text_filters(&self) -> impl Iterator<Item = (&'static str, &str)> {
        [
            ("session_id", &self.session_id),
            ("task_id", &self.task_id),
            ("delegate", &self.delegate),
            ("tenant", &self.tenant),
        ]
        .into_iter()
        .filter_map(|(col, v)| v.as_deref().map(|v| (col, v)))
        .chain(self.ingress.map(|i| ("ingress", i.as_str())))
        .chain(self.trace_id.as_deref().map(|t| ("trace_id", t)))
        .chain(self.skill.as_deref().map(|v| ("skill", v)))
        .chain(self.policy.as_deref().map(|v| ("policy", v)))
        .chain(self.outcome.map(|o| ("outcome", o.as_str())))
    }
}

/// A number given as a number or as text. The admin API reads `Query` through
/// `#[serde(flatten)]`, which hands query-string values over as strings only.
fn whole_number<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum NumberOrText {
        Number(u32),
        Text(String),
    }
    match Option::<NumberOrText>::deserialize(d)? {
        None => Ok(None),
        Some(NumberOrText::Number(n)) => Ok(Some(n)),
        Some(NumberOrText::Text(s)) => s
            .parse()
            .map(Some)
            .map_err(|_| serde::de::Error::custom(format!("expected a whole number, got '{s}'"))),
    }
}

impl Query {
    /// The page size in force.
    pub fn page(&self) -> u32 {
        self.limit.unwrap_or(100).clamp(1, 10_000)
    }
}

/// Tasks and cost of one (tenant, policy, delegate) since a time: a line of
/// [`crate::provenance::LedgerHandle::spend_breakdown`].
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct SpendRow {
    /// Tenant.
    pub tenant: String,
    /// Policy used (none: refused before one was chosen).
    pub policy: Option<String>,
    /// Delegate that answered last (none: no delegate reached).
    pub delegate: Option<String>,
    /// Tasks finished.
    pub tasks: u64,
    /// Their total `cost_usd`.
    pub cost_usd: f64,
}

/// A `since` value that is neither a duration nor an RFC 3339 time (the value given).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`since` must be a duration like 1h or an RFC 3339 time, got '{0}'")]
pub struct SinceError(pub String);

/// Parses a `since` value: a duration back from now (`1h`, `30m`) or an RFC 3339 time.
pub fn parse_since(s: &str, now_ms: i64) -> Result<i64, SinceError> {
    if let Ok(d) = humantime::parse_duration(s) {
        return Ok(now_ms - d.as_millis() as i64);
    }
    chrono::DateTime::parse_from_rfc3339(s)
        .map(|t| t.timestamp_millis())
        .map_err(|_| SinceError(s.to_owned()))
}

/// Output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Format {
    /// JSON object `{rows: […]}`.
    #[default]
    Json,
    /// CSV with a header line.
    Csv,
}

const CSV_COLUMNS: [&str; 27] = [
    "finished_at",
    "task_id",
    "ingress",
    "session_id",
    "upstream_session_id",
    "tenant",
    "skill",
    "policy",
    "delegate",
    "delegate_id",
    "model_version",
    "outcome",
    "error_code",
    "score",
    "candidates",
    "attempts",
    "payload_mode",
    "latency_ms",
    "cost_usd",
    "reported_cost_usd",
    "declared_cost_usd",
    "tokens",
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "output_sha256",
];

fn csv_field(out: &mut String, v: &str) {
    if v.contains([',', '"', '\n', '\r']) {
        out.push('"');
        out.push_str(&v.replace('"', "\"\""));
        out.push('"');
    } else {
        out.push_str(v);
    }
}

fn opt<T: ToString>(v: &Option<T>) -> String {
    v.as_ref().map(ToString::to_string).unwrap_or_default()
}

/// Rows as CSV (the main columns; JSON has everything).
pub fn to_csv(rows: &[LedgerRow]) -> String {
    let mut out = CSV_COLUMNS.join(",");
    out.push('\n');
    for r in rows {
        let fields = [
            r.finished_at.clone(),
            r.task_id.clone(),
            r.ingress.as_str().to_owned(),
            r.session_id.clone(),
            opt(&r.upstream_session_id),
            r.tenant.clone(),
            r.skill.clone(),
            opt(&r.policy),
            opt(&r.delegate),
            opt(&r.delegate_id),
            opt(&r.model_version),
            r.outcome.as_str().to_owned(),
            opt(&r.error_code),
            opt(&r.score),
            opt(&r.candidates),
            r.attempts.to_string(),
            opt(&r.payload_mode),
            format!("{:.3}", r.latency_ms),
            opt(&r.cost_usd),
            opt(&r.reported_cost_usd),
            opt(&r.declared_cost_usd),
            opt(&r.tokens),
            opt(&r.usage.map(|u| u.input)),
            opt(&r.usage.map(|u| u.output)),
            opt(&r.usage.map(|u| u.cache_read)),
            opt(&r.usage.map(|u| u.cache_write)),
            opt(&r.output_sha256),
        ];
        for (i, f) in fields.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            csv_field(&mut out, f);
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_reads_durations_and_times() {
        assert_eq!(parse_since("1h", 10_000_000), Ok(10_000_000 - 3_600_000));
        assert_eq!(parse_since("1970-01-01T00:00:01Z", 0), Ok(1000));
        assert!(parse_since("yesterday", 0).is_err());
    }

    #[test]
    fn csv_quotes_what_needs_it() {
        let mut s = String::new();
        csv_field(&mut s, "a,\"b\"");
        assert_eq!(s, "\"a,\"\"b\"\"\"");
    }
}
