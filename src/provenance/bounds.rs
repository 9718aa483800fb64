//! Caps on what a delegate reports beside its output — its provenance (lineage, evidence,
//! contract violations, free text) and a failure's message and partial output — applied as
//! its answer is read, before anything is kept: in the answer relayed to the client, the
//! status store and the ledger row. A cut is said in a note the caller records in the row.
//! And the weight of an answer as kept (for byte-bounded stores).

use crate::ldp::{Body, Envelope, LdpError, Provenance};

/// Lineage entries kept from a delegate (the gateway's own hop is added after).
pub const MAX_LINEAGE: usize = 32;
/// Evidence references kept.
pub const MAX_EVIDENCE: usize = 32;
/// Contract violation codes kept.
pub const MAX_VIOLATIONS: usize = 32;
/// Longest identifier kept (ids, versions, steps, timestamps, codes), in bytes.
pub const MAX_ID_BYTES: usize = 256;
/// Longest free text kept (notes, summaries, URIs, an error's message), in bytes.
pub const MAX_TEXT_BYTES: usize = 4096;
/// Largest partial output kept with a failure (its JSON text), in bytes.
pub const MAX_PARTIAL_OUTPUT_BYTES: usize = 64 * 1024;

/// Fixed weight of one kept record beside its text (an entry, a reference, a field).
const RECORD_OVERHEAD: usize = 64;

/// Caps the provenance or the error `body` carries (a delegate's answer); what was cut, as
/// one note, if anything was.
pub fn cap_answer(body: &mut Body) -> Option<String> {
    let mut cut = Cuts::default();
    match body {
        Body::TaskResult {
            provenance: Some(p),
            ..
        } => cap_provenance(p, &mut cut),
        Body::TaskFailed { error, .. } => cap_error(error, &mut cut),
        _ => {}
    }
    cut.note()
}

/// What was cut, by part.
#[derive(Default)]
struct Cuts(Vec<String>);

impl Cuts {
    fn note(self) -> Option<String> {
        (!self.0.is_empty()).then(|| format!("delegate's answer cut: {}", self.0.join(", ")))
    }

    fn list<T>(&mut self, what: &str, v: &mut Vec<T>, max: usize) {
        if v.len() > max {
            self.0.push(format!("{what} {} → {max}", v.len()));
            v.truncate(max);
            v.shrink_to_fit();
        }
    }
}

/// Cuts `s` to at most `max` bytes (on a character boundary); whether it was cut.
fn cut(s: &mut String, max: usize) -> bool {
    if !crate::ldp::text::truncate(s, max) {
        return false;
    }
    s.shrink_to_fit();
    true
}

fn cut_opt(s: &mut Option<String>, max: usize) -> bool {
    s.as_mut().is_some_and(|s| cut(s, max))
}

fn cap_provenance(p: &mut Provenance, cuts: &mut Cuts) {
    cuts.list("lineage entries", &mut p.lineage, MAX_LINEAGE);
    cuts.list("evidence references", &mut p.evidence, MAX_EVIDENCE);
    cuts.list(
        "contract violations",
        &mut p.contract_violations,
        MAX_VIOLATIONS,
    );
    let mut long = false;
    for s in [&mut p.produced_by, &mut p.model_version] {
        long |= cut(s, MAX_ID_BYTES);
    }
    for s in [&mut p.session_id, &mut p.timestamp, &mut p.contract_id] {
        long |= cut_opt(s, MAX_ID_BYTES);
    }
    for v in &mut p.contract_violations {
        long |= cut(v, MAX_ID_BYTES);
    }
    for e in &mut p.lineage {
        for s in [&mut e.delegate_id, &mut e.model_version, &mut e.step] {
            long |= cut(s, MAX_ID_BYTES);
        }
        for s in [&mut e.timestamp, &mut e.policy, &mut e.routed_to] {
            long |= cut_opt(s, MAX_ID_BYTES);
        }
        long |= cut_opt(&mut e.note, MAX_TEXT_BYTES);
    }
    for e in &mut p.evidence {
        long |= cut(&mut e.source, MAX_ID_BYTES) | cut(&mut e.kind, MAX_ID_BYTES);
        long |= cut_opt(&mut e.decision, MAX_ID_BYTES);
        long |= cut_opt(&mut e.uri, MAX_TEXT_BYTES) | cut_opt(&mut e.summary, MAX_TEXT_BYTES);
    }
    if long {
        cuts.0.push("long provenance fields".into());
    }
}

fn cap_error(e: &mut LdpError, cuts: &mut Cuts) {
    if cut(&mut e.code, MAX_ID_BYTES) {
        cuts.0.push("error code".into());
    }
    if cut(&mut e.message, MAX_TEXT_BYTES) {
        cuts.0.push("error message".into());
    }
    if let Some(partial) = &e.partial_output {
        let bytes = json_weight(partial);
        if bytes > MAX_PARTIAL_OUTPUT_BYTES {
            cuts.0
                .push(format!("partial output of about {bytes} bytes dropped"));
            e.partial_output = None;
        }
    }
}

/// About how many bytes `env` holds when kept: its output, provenance or error, and a fixed
/// part (its ids and header fields), within a small factor of its JSON text.
pub fn envelope_weight(env: &Envelope) -> usize {
    let head = env.message_id.len()
        + env.session_id.len()
        + env.from.len()
        + env.to.len()
        + env.timestamp.len()
        + 4 * RECORD_OVERHEAD;
    head + match &env.body {
        Body::TaskResult {
            output, provenance, ..
        } => output.get().len() + provenance.as_ref().map_or(0, provenance_weight),
        Body::TaskFailed { error, .. } => error_weight(error),
        Body::TaskUpdate { message, .. } => message.as_ref().map_or(0, String::len),
        _ => 0,
    }
}

fn opt(s: &Option<String>) -> usize {
    s.as_ref().map_or(0, String::len)
}

/// About how many bytes a provenance record holds.
pub fn provenance_weight(p: &Provenance) -> usize {
    let lineage: usize = p
        .lineage
        .iter()
        .map(|e| {
            e.delegate_id.len()
                + e.model_version.len()
                + e.step.len()
                + opt(&e.timestamp)
                + opt(&e.policy)
                + opt(&e.routed_to)
                + opt(&e.note)
                + RECORD_OVERHEAD
        })
        .sum();
    let evidence: usize = p
        .evidence
        .iter()
        .map(|e| {
            e.source.len()
                + e.kind.len()
                + opt(&e.uri)
                + opt(&e.summary)
                + opt(&e.decision)
                + RECORD_OVERHEAD
        })
        .sum();
    let violations: usize = p.contract_violations.iter().map(|v| v.len() + 8).sum();
    p.produced_by.len()
        + p.model_version.len()
        + opt(&p.session_id)
        + opt(&p.timestamp)
        + opt(&p.contract_id)
        + lineage
        + evidence
        + violations
        + 4 * RECORD_OVERHEAD
}

fn error_weight(e: &LdpError) -> usize {
    e.code.len()
        + e.message.len()
        + e.partial_output.as_ref().map_or(0, json_weight)
        + RECORD_OVERHEAD
}

/// About how many bytes a JSON value's text takes (strings and keys by length, every other
/// node a few bytes), without serialising it.
pub fn json_weight(v: &serde_json::Value) -> usize {
    use serde_json::Value;
    let mut total = 0;
    let mut stack = vec![v];
    while let Some(v) = stack.pop() {
        total += match v {
            Value::String(s) => s.len() + 2,
            Value::Array(a) => {
                stack.extend(a.iter());
                2 + a.len()
            }
            Value::Object(o) => {
                stack.extend(o.values());
                2 + o.keys().map(|k| k.len() + 4).sum::<usize>()
            }
            _ => 8,
        };
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ldp::provenance::EvidenceRef;
    use crate::ldp::{ErrorCategory, ErrorSeverity, LineageEntry, PayloadMode, VerificationStatus};

    fn hop(note: &str) -> LineageEntry {
        LineageEntry {
            delegate_id: "d".repeat(1000),
            model_version: "v".into(),
            step: "answer".into(),
            timestamp: None,
            verification_status: VerificationStatus::Unverified,
            policy: None,
            routed_to: None,
            attempts: None,
            note: Some(note.into()),
        }
    }

    fn big_provenance() -> Provenance {
        let mut p = Provenance::new("x".repeat(100_000), "v", PayloadMode::Text);
        p.lineage = (0..10_000).map(|_| hop("n")).collect();
        p.evidence = (0..10_000)
            .map(|_| EvidenceRef {
                source: "s".into(),
                kind: "k".into(),
                uri: None,
                summary: Some("é".repeat(5000)),
                decision: None,
                weight: None,
                confidence: None,
            })
            .collect();
        p
    }

    fn result(p: Provenance) -> Envelope {
        Envelope::new(
            "s",
            "d",
            "gw",
            Body::TaskResult {
                task_id: "t".into(),
                output: crate::ldp::Json::from_value(&serde_json::json!("out")),
                provenance: Some(p),
            },
            PayloadMode::Text,
        )
    }

    #[test]
    fn the_weight_follows_the_json_text() {
        for env in [
            result(big_provenance()),
            result(Provenance::new("a", "b", PayloadMode::Text)),
        ] {
            let text = serde_json::to_string(&env).unwrap().len();
            let w = envelope_weight(&env);
            assert!(
                w >= text / 2 && w <= text * 4,
                "weight {w}, JSON {text} bytes"
            );
        }
        let mut e = LdpError::new(
            "X",
            ErrorCategory::Runtime,
            ErrorSeverity::Error,
            false,
            "m",
        );
        e.partial_output = Some(serde_json::json!({"a": ["x".repeat(10_000), 1, null]}));
        let text = serde_json::to_string(&e).unwrap().len();
        let w = error_weight(&e);
        assert!(
            w >= text / 2 && w <= text * 4,
            "weight {w}, JSON {text} bytes"
        );
    }

    #[test]
    fn a_delegates_provenance_and_failure_are_capped_and_the_cut_is_said() {
        let mut body = result(big_provenance()).body;
        let note = cap_answer(&mut body).unwrap();
        assert!(note.contains("lineage entries 10000 → 32"), "{note}");
        assert!(note.contains("evidence references 10000 → 32"), "{note}");
        assert!(note.contains("long provenance fields"), "{note}");
        let Body::TaskResult {
            provenance: Some(p),
            ..
        } = &body
        else {
            panic!()
        };
        assert!(provenance_weight(p) < 200_000, "{}", provenance_weight(p));
        assert!(p.evidence[0].summary.as_ref().unwrap().len() <= MAX_TEXT_BYTES);
        let mut failed = Body::TaskFailed {
            task_id: "t".into(),
            error: LdpError {
                partial_output: Some(serde_json::json!("p".repeat(1 << 20))),
                ..LdpError::new(
                    "X",
                    ErrorCategory::Runtime,
                    ErrorSeverity::Error,
                    false,
                    "m".repeat(1 << 20),
                )
            },
        };
        let note = cap_answer(&mut failed).unwrap();
        assert!(note.contains("partial output"), "{note}");
        // Small answers are untouched.
        let mut small = result(Provenance::new("a", "b", PayloadMode::Text)).body;
        assert_eq!(cap_answer(&mut small), None);
    }
}
