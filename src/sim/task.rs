//! What the simulated model produces: payload validation, a deterministic output, tokens, cost
//! and provenance. Pure; the formulas are documented in the parent module.

use crate::ldp::{
    Capability, CostTier, DelegationContract, ErrorCategory, ErrorSeverity, IdentityCard, LdpError,
    PayloadMode, Provenance, VerificationStatus,
};
use serde_json::{json, Value};

/// Words of the input kept in the output's digest.
const DIGEST_WORDS: usize = 12;

/// Confidence reported when the skill declares no quality.
const DEFAULT_CONFIDENCE: f64 = 0.5;

/// The skill a verifier offers and judges.
pub(super) const VERIFY_SKILL: &str = "verify";

/// The capability a verifier adds to a card that lacks one named [`VERIFY_SKILL`].
pub(super) fn verify_capability(accuracy: Option<f64>) -> Capability {
    let mut cap = Capability::named(VERIFY_SKILL);
    cap.description =
        Some("Judges another delegate's output: {\"passed\", \"confidence\", \"reason\"}".into());
    cap.hints.quality = accuracy;
    cap
}

/// The input's `expected` field, if the input is an object that carries one.
pub(super) fn expected(input: &Value) -> Option<&Value> {
    input.as_object()?.get("expected")
}

/// The answer given for `expected`: itself when `right`, else `{"wrong": expected}` (never
/// equal to it).
fn answer_value(expected: &Value, right: bool) -> Value {
    if right {
        expected.clone()
    } else {
        json!({ "wrong": expected })
    }
}

/// [`output`] for an input carrying `expected`, with `answer` (right or wrong) added and the
/// answer as its `text`.
pub(super) fn answer(
    card: &IdentityCard,
    skill: &str,
    input: &Value,
    mode: PayloadMode,
    expected: &Value,
    right: bool,
) -> Value {
    let answer = answer_value(expected, right);
    let text = match &answer {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let mut out = output(card, skill, input, mode);
    out["text"] = Value::String(format!("{} ({skill}): {text}", card.name));
    out["answer"] = answer;
    out
}

/// What a verification task asks to be judged; see the parent module for its shape.
#[derive(Debug)]
pub(super) struct Verification<'a> {
    /// The original input's `expected`, if it had one.
    expected: Option<&'a Value>,
    /// The producer's output's `answer`, if it had one.
    answer: Option<&'a Value>,
    /// The original skill, for the reason.
    skill: &'a str,
}

/// A verdict: the output and whether it contradicts the truth.
#[derive(Debug)]
pub(super) struct Verdict {
    /// `{"passed", "confidence", "reason"}`.
    pub(super) output: Value,
    /// Whether it said `passed`.
    pub(super) passed: bool,
    /// Whether it contradicts the truth.
    pub(super) misjudged: bool,
}

/// Reads a verification task's input: an object with `input` and `output`.
pub(super) fn verification(input: &Value) -> Result<Verification<'_>, LdpError> {
    let bad = |why: &str| {
        failure(
            "INVALID_VERIFICATION_TASK",
            ErrorCategory::Runtime,
            false,
            format!(
                "a verify task's input must be {{\"input\": …, \"output\": …, \"skill\": \"…\"}}: {why}"
            ),
        )
    };
    let obj = input
        .as_object()
        .ok_or_else(|| bad("it is not an object"))?;
    let original = obj.get("input").ok_or_else(|| bad("`input` is missing"))?;
    let produced = obj
        .get("output")
        .ok_or_else(|| bad("`output` is missing"))?;
    Ok(Verification {
        expected: expected(original),
        answer: produced.as_object().and_then(|o| o.get("answer")),
        skill: obj.get("skill").and_then(Value::as_str).unwrap_or("?"),
    })
}

/// Judges `v` with confidence `accuracy`: the truth (answer equals expected) when `honest`,
/// else its opposite; without `expected`, passed.
pub(super) fn judge(v: &Verification<'_>, accuracy: f64, honest: bool) -> Verdict {
    let (passed, misjudged, reason) = match v.expected {
        None => (
            true,
            false,
            format!("nothing to check the {} output against", v.skill),
        ),
        Some(expected) => {
            let truth = v.answer == Some(expected);
            let passed = if honest { truth } else { !truth };
            let reason = match (passed, truth) {
                (true, true) => "the answer matches the expected one",
                (false, false) => "the answer differs from the expected one",
                (true, false) => "judged to match (misjudged: it differs)",
                (false, true) => "judged to differ (misjudged: it matches)",
            };
            (passed, !honest, format!("{}: {reason}", v.skill))
        }
    };
    Verdict {
        output: json!({ "passed": passed, "confidence": accuracy, "reason": reason }),
        passed,
        misjudged,
    }
}

/// A rubber stamp's verdict on `v`: passed, whatever the truth (misjudged when it differs).
pub(super) fn stamp(v: &Verification<'_>, confidence: f64) -> Verdict {
    let truth = v.expected.is_none_or(|e| v.answer == Some(e));
    Verdict {
        output: json!({ "passed": true, "confidence": confidence, "reason": format!("{}: looks fine", v.skill) }),
        passed: true,
        misjudged: !truth,
    }
}

/// A task failure with severity `error`.
pub(super) fn failure(
    code: &str,
    category: ErrorCategory,
    retryable: bool,
    message: impl Into<String>,
) -> LdpError {
    LdpError::new(code, category, ErrorSeverity::Error, retryable, message)
}

/// Checks the task's payload against its mode (RFC §4.2 failure wording, §4.4 required fields,
/// unless `frame_fields` is false).
pub(super) fn validate(
    mode: PayloadMode,
    input: &Value,
    card: &IdentityCard,
    fail_modes: &[PayloadMode],
    frame_fields: bool,
) -> Result<(), LdpError> {
    let fail = |why: String| {
        let message = format!("{mode} validation failed: {why}");
        failure(
            "PAYLOAD_MODE_FAILED",
            ErrorCategory::Runtime,
            false,
            message,
        )
    };
    if fail_modes.contains(&mode) {
        return Err(fail(format!(
            "this delegate is configured to reject {mode} payloads"
        )));
    }
    if mode != PayloadMode::Text && !card.supported_payload_modes.contains(&mode) {
        return Err(fail(format!(
            "{} does not support this mode",
            card.delegate_id
        )));
    }
    if mode == PayloadMode::SemanticFrame && frame_fields {
        if !input.is_object() {
            return Err(fail(
                "the input must be a JSON object with string `task_type` and `instruction`".into(),
            ));
        }
        let missing: Vec<&str> = ["task_type", "instruction"]
            .into_iter()
            .filter(|f| !input.get(f).is_some_and(Value::is_string))
            .collect();
        if !missing.is_empty() {
            let names: Vec<String> = missing.iter().map(|f| format!("`{f}`")).collect();
            return Err(fail(format!(
                "missing required string field {}",
                names.join(", ")
            )));
        }
    }
    Ok(())
}

/// The text a model would read: a string input as is, the usual text fields of an object, else
/// the JSON.
fn input_text(input: &Value) -> String {
    match input {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        Value::Object(o) => {
            let parts: Vec<&str> = ["instruction", "input", "text", "prompt", "query"]
                .iter()
                .filter_map(|k| o.get(*k).and_then(Value::as_str))
                .collect();
            if parts.is_empty() {
                input.to_string()
            } else {
                parts.join(" ")
            }
        }
        other => other.to_string(),
    }
}

/// The first few words of `text`, whitespace collapsed.
fn digest(text: &str) -> String {
    let words: Vec<&str> = text.split_whitespace().collect();
    if words.is_empty() {
        return "(empty input)".into();
    }
    let mut out = words
        .iter()
        .take(DIGEST_WORDS)
        .copied()
        .collect::<Vec<_>>()
        .join(" ");
    if words.len() > DIGEST_WORDS {
        out.push('…');
    }
    out
}

/// FNV-1a 64 of the input's JSON (in the output as `input_fingerprint`): lets a test check
/// that an input arrived unchanged.
pub fn fingerprint(input: &Value) -> String {
    let hash = input
        .to_string()
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
        });
    format!("{hash:016x}")
}

/// The deterministic output for `skill` on `input`.
pub(super) fn output(card: &IdentityCard, skill: &str, input: &Value, mode: PayloadMode) -> Value {
    let text = input_text(input);
    json!({
        "text": format!("{} ({skill}): {}", card.name, digest(&text)),
        "skill": skill,
        "delegate_id": card.delegate_id,
        "model_version": card.model_version,
        "payload_mode": mode,
        "input_chars": text.chars().count(),
        "input_fingerprint": fingerprint(input),
    })
}

/// `max(1, ceil(input JSON bytes / 4) + ceil(output text chars / 4))`.
pub(super) fn tokens(input: &Value, output: &Value) -> u64 {
    let input_len = input.to_string().len() as u64;
    let output_len = output
        .get("text")
        .and_then(Value::as_str)
        .map_or(0, |t| t.chars().count() as u64);
    (input_len.div_ceil(4) + output_len.div_ceil(4)).max(1)
}

/// The skill's price per call: its `cost_per_call_usd`, else its cost tier (capability hint or
/// card `cost_profile`) as 0.001 / 0.01 / 0.05 USD; `None` if the card says neither.
pub(super) fn price_per_call(card: &IdentityCard, skill: &str) -> Option<f64> {
    let hints = card.effective_hints(skill)?;
    hints.cost_per_call_usd.or(hints.cost_tier.map(|t| match t {
        CostTier::Low => 0.001,
        CostTier::Medium => 0.01,
        CostTier::High => 0.05,
    }))
}

/// `price × (1 + tokens / 1000)`, rounded to a nano-dollar.
pub(super) fn cost(price: f64, tokens: u64) -> f64 {
    let usd = price * (1.0 + tokens as f64 / 1000.0);
    (usd * 1e9).round() / 1e9
}

/// Provenance of a result produced in `session_id`.
pub(super) fn provenance(
    card: &IdentityCard,
    skill: &str,
    mode: PayloadMode,
    session_id: &str,
    tokens_used: u64,
    contract: Option<&DelegationContract>,
) -> Provenance {
    let mut p = Provenance::new(&card.delegate_id, &card.model_version, mode);
    p.confidence = Some(
        card.capability(skill)
            .and_then(|c| c.hints.quality)
            .unwrap_or(DEFAULT_CONFIDENCE),
    );
    p.verification_status = VerificationStatus::SelfVerified;
    p.verified = true;
    p.session_id = Some(session_id.to_owned());
    p.tokens_used = Some(tokens_used);
    p.cost_usd = price_per_call(card, skill).map(|price| cost(price, tokens_used));
    p.contract_id = contract
        .map(|c| c.contract_id.clone())
        .filter(|id| !id.is_empty());
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    fn card() -> IdentityCard {
        serde_json::from_value(json!({
            "delegate_id": "ldp:delegate:t", "name": "T", "model_family": "f", "model_version": "1",
            "trust_domain": "default", "cost_profile": "high",
            "supported_payload_modes": ["semantic_frame", "text"],
            "capabilities": [
                {"name": "priced", "quality": {"quality_score": 0.9, "cost_per_call_usd": 0.02}},
                {"name": "tiered", "cost_hint": "low"},
                {"name": "plain"}
            ]
        }))
        .unwrap()
    }

    #[test]
    fn price_prefers_usd_then_tier_then_card_profile() {
        let c = card();
        assert_eq!(price_per_call(&c, "priced"), Some(0.02));
        assert_eq!(price_per_call(&c, "tiered"), Some(0.001));
        assert_eq!(price_per_call(&c, "plain"), Some(0.05), "card cost_profile");
        assert_eq!(price_per_call(&c, "absent"), None);
        assert_eq!(cost(0.02, 500), 0.03);
    }

    #[test]
    fn no_price_means_no_cost() {
        let mut c = card();
        c.cost_profile = None;
        let p = provenance(&c, "plain", PayloadMode::Text, "s", 10, None);
        assert_eq!(p.cost_usd, None);
        assert_eq!(p.confidence, Some(DEFAULT_CONFIDENCE));
        assert_eq!(p.verification_status, VerificationStatus::SelfVerified);
    }

    #[test]
    fn semantic_frame_needs_task_type_and_instruction() {
        let c = card();
        let err = validate(
            PayloadMode::SemanticFrame,
            &json!({"task_type": "qa"}),
            &c,
            &[],
            true,
        )
        .unwrap_err();
        assert_eq!(err.code, "PAYLOAD_MODE_FAILED");
        assert_eq!(
            err.message,
            "semantic_frame validation failed: missing required string field `instruction`"
        );
        assert!(validate(PayloadMode::SemanticFrame, &json!("text"), &c, &[], true).is_err());
        let frame = json!({"task_type": "qa", "instruction": "say hi"});
        assert!(validate(PayloadMode::SemanticFrame, &frame, &c, &[], true).is_ok());
        assert!(validate(PayloadMode::Text, &json!(null), &c, &[], true).is_ok());
        assert!(validate(
            PayloadMode::Text,
            &json!("x"),
            &c,
            &[PayloadMode::Text],
            true
        )
        .is_err());
        assert!(validate(PayloadMode::SemanticFrame, &json!({}), &c, &[], false).is_ok());
        let err = validate(PayloadMode::SemanticGraph, &json!({}), &c, &[], true).unwrap_err();
        assert!(
            err.message
                .starts_with("semantic_graph validation failed: "),
            "{}",
            err.message
        );
    }

    #[test]
    fn output_is_deterministic_and_digested() {
        let c = card();
        let long = json!({"instruction": "one two three four five six seven eight nine ten eleven twelve thirteen"});
        let a = output(&c, "priced", &long, PayloadMode::Text);
        assert_eq!(a, output(&c, "priced", &long, PayloadMode::Text));
        assert_eq!(
            a["text"],
            "T (priced): one two three four five six seven eight nine ten eleven twelve…"
        );
        assert_ne!(
            a["input_fingerprint"],
            output(&c, "priced", &json!("x"), PayloadMode::Text)["input_fingerprint"]
        );
        assert!(tokens(&long, &a) > tokens(&json!(null), &json!({})));
        assert_eq!(tokens(&json!(null), &json!({})), 1);
    }

    #[test]
    fn wrong_answers_never_equal_the_expected_one() {
        let c = card();
        let input = json!({"instruction": "2+2", "expected": 4});
        let right = answer(&c, "plain", &input, PayloadMode::Text, &json!(4), true);
        assert_eq!(right["answer"], 4);
        assert_eq!(right["text"], "T (plain): 4");
        assert_eq!(right["input_fingerprint"], fingerprint(&input));
        for e in [json!(4), json!("x"), json!(null), json!({"wrong": 1})] {
            let wrong = answer(&c, "plain", &input, PayloadMode::Text, &e, false);
            assert_ne!(wrong["answer"], e);
        }
        assert_eq!(expected(&json!("expected")), None);
        assert_eq!(expected(&json!({"expected": null})), Some(&Value::Null));
    }

    #[test]
    fn verdicts_follow_the_truth_when_honest() {
        let task = |answer: Value| json!({"input": {"expected": "Paris"}, "output": {"answer": answer}, "skill": "qa"});
        let right = task(json!("Paris"));
        let wrong = task(json!("Lyon"));
        let judged = |input: &Value, honest| judge(&verification(input).unwrap(), 0.8, honest);
        let v = judged(&right, true);
        assert!(v.passed && !v.misjudged);
        assert_eq!(v.output["passed"], true);
        assert_eq!(v.output["confidence"], 0.8);
        assert!(v.output["reason"].as_str().unwrap().starts_with("qa: "));
        assert!(!judged(&wrong, true).passed);
        let v = judged(&wrong, false);
        assert!(v.passed && v.misjudged);
        assert!(!judged(&right, false).passed);
        let open = json!({"input": "free text", "output": {"text": "x"}});
        let v = judged(&open, false);
        assert!(v.passed && !v.misjudged, "no expected: passes");
        for bad in [json!("x"), json!({"output": {}}), json!({"input": {}})] {
            let err = verification(&bad).unwrap_err();
            assert_eq!(err.code, "INVALID_VERIFICATION_TASK");
        }
    }
}
