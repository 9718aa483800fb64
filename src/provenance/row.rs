//! One ledger row, and the digest and redaction applied to what goes in it.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Result or failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// TASK_RESULT.
    Result,
    /// TASK_FAILED.
    Failed,
}

impl Outcome {
    /// The stored and exported value.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Result => "result",
            Outcome::Failed => "failed",
        }
    }
}

/// The front end a task came in through: a bounded set (a ledger column and a metric label).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Ingress {
    /// An LDP envelope (`/ldp/messages`, `/ldp/stream`).
    #[default]
    Ldp,
    /// The OpenAI-compatible `/v1/chat/completions`.
    Openai,
    /// The Anthropic-compatible `/v1/messages`.
    Anthropic,
    /// The LLMCP bridge.
    Llmcp,
    /// The LLMX bridge.
    Llmx,
    /// The LADP bridge.
    Ladp,
    /// The A2A front end.
    A2a,
}

impl Ingress {
    /// Every value, for metrics exported at 0 from the start. A new front end's value goes
    /// here too: the compiler stops a newcomer at `as_str`, just below, not here.
    pub const ALL: [Ingress; 7] = [
        Ingress::Ldp,
        Ingress::Openai,
        Ingress::Anthropic,
        Ingress::Llmcp,
        Ingress::Llmx,
        Ingress::Ladp,
        Ingress::A2a,
    ];

    /// The stored and exported value.
    pub fn as_str(self) -> &'static str {
        match self {
            Ingress::Ldp => "ldp",
            Ingress::Openai => "openai",
            Ingress::Anthropic => "anthropic",
            Ingress::Llmcp => "llmcp",
            Ingress::Llmx => "llmx",
            Ingress::Ladp => "ladp",
            Ingress::A2a => "a2a",
        }
    }

    /// The value named `s` (`ldp`, `openai`, …).
    pub fn parse(s: &str) -> Option<Ingress> {
        Ingress::ALL.into_iter().find(|i| i.as_str() == s)
    }

    /// The value stored as `s`; an unknown one (a newer build's) reads as `ldp`.
    pub fn from_stored(s: &str) -> Ingress {
        Ingress::parse(s).unwrap_or_default()
    }
}

/// Everything recorded about one task outcome.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LedgerRow {
    /// Client-side task id.
    pub task_id: String,
    /// The front end it came in through (rows written before the column: `ldp`).
    #[serde(default)]
    pub ingress: Ingress,
    /// Client session id (gateway-issued).
    pub session_id: String,
    /// The delegate's session id.
    pub upstream_session_id: Option<String>,
    /// Tenant.
    pub tenant: String,
    /// Skill.
    pub skill: String,
    /// Policy used.
    pub policy: Option<String>,
    /// Registry name of the delegate that answered last.
    pub delegate: Option<String>,
    /// Its card id.
    pub delegate_id: Option<String>,
    /// Its model version.
    pub model_version: Option<String>,
    /// Result or failure.
    pub outcome: Outcome,
    /// Error code for failures.
    pub error_code: Option<String>,
    /// Error message for failures.
    pub error_message: Option<String>,
    /// Routing score of the pick (none when the session's binding was reused).
    pub score: Option<f64>,
    /// Eligible candidates at the decision.
    pub candidates: Option<u32>,
    /// Upstream attempts.
    pub attempts: u32,
    /// Why each extra attempt happened.
    pub fallbacks: Vec<String>,
    /// Payload mode used upstream.
    pub payload_mode: Option<String>,
    /// Client-observed time, ms.
    pub latency_ms: f64,
    /// Time spent upstream, ms.
    pub upstream_ms: f64,
    /// Cost charged: reported if the delegate said, else declared.
    pub cost_usd: Option<f64>,
    /// Cost the delegate reported.
    pub reported_cost_usd: Option<f64>,
    /// Cost its card declares.
    pub declared_cost_usd: Option<f64>,
    /// Tokens used.
    pub tokens: Option<u64>,
    /// Confidence.
    pub confidence: Option<f64>,
    /// Verification status.
    pub verification_status: Option<String>,
    /// Start, RFC 3339.
    pub started_at: String,
    /// End, RFC 3339.
    pub finished_at: String,
    /// End, Unix ms (indexed).
    pub finished_ms: i64,
    /// SHA-256 of the output JSON text as the client received it (the delegate's bytes), hex.
    /// Rows written before 2026-11-23 hash the gateway's re-serialisation of the output.
    pub output_sha256: Option<String>,
    /// Provenance lineage as returned to the client.
    pub lineage: JsonText,
    /// Routing summary: policy, band, excluded constraints, notes.
    pub routing: JsonText,
    /// Redacted previews of input and output (only with `store_payloads`).
    pub payload: Option<JsonText>,
    /// A verified task's votes, every round's (none for a task not verified). Stored in the
    /// `votes` table beside the row, in the same transaction.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub votes: Vec<Vote>,
    /// The OpenTelemetry trace the task ran in (32 hex digits), when tracing is on: the row
    /// and the trace name each other (`/admin/provenance?trace_id=`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
    /// A chat delegate's token counts as charged, each kind apart (the cache's apart from
    /// the input's); `tokens` is their sum.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<TokenCounts>,
}

/// A chat delegate's token counts, as charged. Input excludes the cache's reads and writes,
/// which are priced apart.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenCounts {
    /// Input tokens not read from or written to a cache.
    pub input: u64,
    /// Output tokens.
    pub output: u64,
    /// Input tokens read from a cache.
    pub cache_read: u64,
    /// Input tokens written to a cache.
    pub cache_write: u64,
}

impl TokenCounts {
    /// The counts as stored (input, output, cache reads, cache writes): none unless the row
    /// has them (a row of an older schema, or of a delegate that is no chat model).
    pub fn read(stored: [Option<i64>; 4]) -> Option<TokenCounts> {
        let [input, output, cache_read, cache_write] = stored;
        let n = |v: Option<i64>| v.unwrap_or(0).max(0) as u64;
        input.map(|_| TokenCounts {
            input: n(input),
            output: n(output),
            cache_read: n(cache_read),
            cache_write: n(cache_write),
        })
    }
}

/// One verifier's vote on a producer's result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Vote {
    /// The verification round (1 for the first producer's result).
    pub round: u32,
    /// Registry name of the delegate whose result was judged.
    pub producer: String,
    /// The task's skill (the producer's).
    pub skill: String,
    /// Registry name of the verifier.
    pub verifier: String,
    /// Its decision.
    pub passed: bool,
    /// The confidence it reported (0..1), if any.
    pub confidence: Option<f64>,
    /// Its weight in the vote: the verifier's quality for the verify skill.
    pub weight: f64,
}

/// Where a piece of quality evidence came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EvidenceSource {
    /// A verifier's vote.
    Vote,
    /// A client's rating.
    Feedback,
    /// A calibration round's score of a verifier (its ledger row's `routing.calibration`):
    /// evidence of its reliability at the verify skill.
    Calibration,
}

/// One observation of a delegate's delivered quality at a skill, as learned quality is
/// rebuilt from the ledger: a vote (`score` 1 passed, 0 failed; `weight` its share of its
/// round's weight, so that a round of votes counts as one observation), a rating (`score`
/// 0..1, `weight` 1) or a verifier's calibration round (`score` its balanced accuracy,
/// `weight` the items it answered).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Evidence {
    /// The delegate judged (registry name).
    pub delegate: String,
    /// The skill.
    pub skill: String,
    /// 0 (bad) … 1 (good).
    pub score: f64,
    /// How much it counts.
    pub weight: f64,
    /// When, Unix ms.
    pub at_ms: i64,
    /// Vote, rating or calibration round.
    pub source: EvidenceSource,
    /// The tenant that gave a rating (none for a vote): whether it is shared evidence or
    /// that tenant's own is decided when it is learnt (`registry::quality`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rater: Option<String>,
}

/// A JSON document kept as its text: serialised once where the row is built, stored and
/// exported as is (no `Value` tree on the ledger's write path).
#[derive(Clone, Default, Serialize)]
#[serde(transparent)]
pub struct JsonText(Box<serde_json::value::RawValue>);

/// Read through a `Value`, so it also reads from `serde_json::from_value` (API clients); the
/// ledger's own read path uses [`JsonText::parse`].
impl<'de> Deserialize<'de> for JsonText {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<JsonText, D::Error> {
        serde_json::Value::deserialize(d).map(|v| JsonText::of(&v))
    }
}

impl JsonText {
    /// `v` serialised; `null` if it cannot be (maps with non-string keys).
    pub fn of<T: Serialize + ?Sized>(v: &T) -> JsonText {
        serde_json::value::to_raw_value(v)
            .map(JsonText)
            .unwrap_or_default()
    }

    /// Checks that `text` is one JSON document and keeps it.
    pub fn parse(text: &str) -> Result<JsonText, serde_json::Error> {
        serde_json::value::RawValue::from_string(text.to_owned()).map(JsonText)
    }

    /// The JSON text.
    pub fn get(&self) -> &str {
        self.0.get()
    }

    /// Parsed into a `Value` (for callers that inspect it).
    pub fn to_value(&self) -> serde_json::Value {
        serde_json::from_str(self.get()).unwrap_or(serde_json::Value::Null)
    }
}

impl PartialEq for JsonText {
    fn eq(&self, other: &JsonText) -> bool {
        self.get() == other.get()
    }
}

impl std::fmt::Debug for JsonText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.get())
    }
}

/// SHA-256 of the output's JSON text as it travelled (the delegate's bytes, which the
/// client receives unchanged), hex.
pub fn digest(v: &crate::ldp::Json) -> String {
    hex::encode(Sha256::digest(v.get().as_bytes()))
}

/// Keys whose values never reach the ledger.
const SECRET_KEYS: [&str; 8] = [
    "api_key",
    "apikey",
    "authorization",
    "password",
    "secret",
    "token",
    "access_token",
    "private_key",
];

/// Longest string kept in a preview.
const PREVIEW_CHARS: usize = 256;

/// A preview of `v`: secret-looking keys replaced by `"[redacted]"`, long strings cut.
pub fn redact_preview(v: &serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match v {
        Value::Object(o) => Value::Object(
            o.iter()
                .map(|(k, v)| {
                    let lower = k.to_ascii_lowercase();
                    if SECRET_KEYS.iter().any(|s| lower.contains(s)) {
                        (k.clone(), Value::String("[redacted]".into()))
                    } else {
                        (k.clone(), redact_preview(v))
                    }
                })
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().take(16).map(redact_preview).collect()),
        Value::String(s) if s.chars().count() > PREVIEW_CHARS => {
            Value::String(s.chars().take(PREVIEW_CHARS).chain("…".chars()).collect())
        }
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn previews_hide_secrets_and_cut_long_text() {
        let v = redact_preview(
            &json!({"api_key": "sk-canary", "nested": {"Authorization": "Bearer x"},
            "text": "a".repeat(1000)}),
        );
        let s = v.to_string();
        assert!(!s.contains("sk-canary") && !s.contains("Bearer x"), "{s}");
        assert!(v["text"].as_str().unwrap().chars().count() <= PREVIEW_CHARS + 1);
    }

    #[test]
    fn ingresses_are_the_metric_label_values_and_read_back() {
        let names = Ingress::ALL.map(Ingress::as_str);
        assert_eq!(names, crate::telemetry::INGRESSES);
        for i in Ingress::ALL {
            assert_eq!(Ingress::from_stored(i.as_str()), i);
            assert_eq!(serde_json::to_value(i).unwrap(), json!(i.as_str()));
        }
        assert_eq!(Ingress::from_stored("smtp"), Ingress::Ldp);
    }

    #[test]
    fn digest_is_stable_hex() {
        let d = digest(&json!({"a": 1}).into());
        assert_eq!(d.len(), 64);
        assert_eq!(d, digest(&json!({"a": 1}).into()));
        // The text as it travelled: sha256 of `{"a":1}`.
        assert_eq!(d, hex::encode(Sha256::digest(br#"{"a":1}"#)));
    }
}
