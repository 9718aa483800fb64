//! Payload translation across the hop, and recognising payload-mode failures.
//!
//! When the client's negotiated mode and the delegate's differ: a semantic frame becomes a
//! faithful text task (every field rendered), and text becomes a frame with
//! `task_type: "text"`. Other modes travel unchanged.

use crate::ldp::{Json, LdpError, PayloadMode};
use serde_json::{Map, Value};

/// `input` as it should be sent in `to` mode, given it was written in `from` mode. Only a
/// translation parses the input (and fails on text that is not a value, see [`Json`]);
/// otherwise its text travels as it came.
pub fn translate_input(
    input: &Json,
    from: PayloadMode,
    to: PayloadMode,
) -> Result<Json, serde_json::Error> {
    Ok(match (from, to) {
        (a, b) if a == b => input.clone(),
        (_, PayloadMode::Text) => Json::from(Value::String(render_text(&input.to_value()?))),
        (_, PayloadMode::SemanticFrame) => Json::from(to_frame(&input.to_value()?)),
        _ => input.clone(),
    })
}

/// A frame (or any JSON) as a text task: known frame fields first, in RFC order, then every
/// other field, so nothing the client sent is lost.
pub fn render_text(input: &Value) -> String {
    let obj = match input {
        Value::String(s) => return s.clone(),
        Value::Object(o) => o,
        other => return other.to_string(),
    };
    let mut out = String::new();
    let known = [
        ("instruction", "Instruction"),
        ("task_type", "Task type"),
        ("input", "Input"),
        ("expected_output_format", "Expected output format"),
    ];
    for (key, label) in known {
        if let Some(v) = obj.get(key) {
            push_line(&mut out, label, v);
        }
    }
    for (k, v) in obj {
        if !known.iter().any(|(key, _)| key == k) {
            push_line(&mut out, k, v);
        }
    }
    out
}

fn push_line(out: &mut String, label: &str, v: &Value) {
    if !out.is_empty() {
        out.push('\n');
    }
    out.push_str(label);
    out.push_str(": ");
    match v {
        Value::String(s) => out.push_str(s),
        other => out.push_str(&other.to_string()),
    }
}

/// Text (or any JSON) as a semantic frame. An object that already is a frame stays as it is.
pub fn to_frame(input: &Value) -> Value {
    if let Value::Object(o) = input {
        if o.get("task_type").is_some_and(Value::is_string)
            && o.get("instruction").is_some_and(Value::is_string)
        {
            return input.clone();
        }
    }
    let mut frame = Map::new();
    frame.insert("task_type".into(), Value::String("text".into()));
    let instruction = match input {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    frame.insert("instruction".into(), Value::String(instruction));
    if !input.is_string() {
        frame.insert("input".into(), input.clone());
    }
    Value::Object(frame)
}

/// Error codes delegates use for a payload-mode failure.
const MODE_CODES: [&str; 5] = [
    "PAYLOAD_MODE_FAILED",
    "PAYLOAD_MODE_UNSUPPORTED",
    "PAYLOAD_VALIDATION_FAILED",
    "MODE_VALIDATION_FAILED",
    "UNSUPPORTED_PAYLOAD_MODE",
];

/// Whether `error` says the task failed because of its payload mode `mode` (a known code, or
/// the RFC §4.2 wording "`<mode>` validation failed"), so falling back may help.
pub fn is_mode_failure(error: &LdpError, mode: PayloadMode) -> bool {
    if MODE_CODES.contains(&error.code.as_str()) {
        return true;
    }
    let msg = error.message.to_ascii_lowercase();
    msg.contains(&format!("{} validation failed", mode.as_str()))
        || (msg.contains(mode.as_str()) && msg.contains("payload mode"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ldp::{ErrorCategory, ErrorSeverity};
    use serde_json::json;

    #[test]
    fn frame_renders_every_field() {
        let t = render_text(&json!({
            "task_type": "classification", "instruction": "Classify sentiment",
            "input": "arrived on time", "labels": ["positive", "negative"]
        }));
        assert!(t.starts_with(
            "Instruction: Classify sentiment\nTask type: classification\nInput: arrived on time"
        ));
        assert!(t.contains("labels: [\"positive\",\"negative\"]"), "{t}");
    }

    #[test]
    fn text_becomes_a_text_frame() {
        assert_eq!(
            to_frame(&json!("hi")),
            json!({"task_type": "text", "instruction": "hi"})
        );
        let f = json!({"task_type": "a", "instruction": "b"});
        assert_eq!(to_frame(&f), f);
        let wrapped = to_frame(&json!({"prompt": "x"}));
        assert_eq!(wrapped["input"], json!({"prompt": "x"}));
    }

    #[test]
    fn unreadable_input_is_refused_only_when_it_must_be_translated() {
        let v: Json = serde_json::from_str(r#"{"n": 1e999}"#).unwrap();
        let same = translate_input(&v, PayloadMode::Text, PayloadMode::Text).unwrap();
        assert_eq!(same.get(), v.get());
        assert!(translate_input(&v, PayloadMode::SemanticFrame, PayloadMode::Text).is_err());
        assert!(translate_input(&v, PayloadMode::Text, PayloadMode::SemanticFrame).is_err());
    }

    #[test]
    fn same_mode_is_untouched() {
        // Spacing shows that the text travels as it came.
        let v: Json = serde_json::from_str(r#"{"a": 1}"#).unwrap();
        assert_eq!(
            translate_input(&v, PayloadMode::SemanticFrame, PayloadMode::SemanticFrame)
                .unwrap()
                .get(),
            r#"{"a": 1}"#
        );
        assert_eq!(
            translate_input(&v, PayloadMode::SemanticFrame, PayloadMode::Text).unwrap(),
            json!("a: 1")
        );
    }

    #[test]
    fn recognises_mode_failures() {
        let e = |code: &str, msg: &str| {
            LdpError::new(
                code,
                ErrorCategory::Runtime,
                ErrorSeverity::Error,
                false,
                msg,
            )
        };
        assert!(is_mode_failure(
            &e("PAYLOAD_MODE_FAILED", "x"),
            PayloadMode::SemanticFrame
        ));
        assert!(is_mode_failure(
            &e("TASK_FAILED", "semantic_frame validation failed"),
            PayloadMode::SemanticFrame
        ));
        assert!(!is_mode_failure(
            &e("TASK_FAILED", "out of memory"),
            PayloadMode::SemanticFrame
        ));
    }
}
