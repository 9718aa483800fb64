//! The assistant's part of a response (`assistant`: title, render doc tree or Markdown,
//! citations), tool calls, and a model's answer read and checked against the response
//! schema — or taken whole as Markdown, the seed's fallback.

use crate::error::AnswerError;
use crate::tools::ToolCall;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Deepest render tree accepted (the root is level 1).
pub const MAX_RENDER_DEPTH: usize = 32;
/// Most nodes of a render tree.
pub const MAX_RENDER_NODES: usize = 10_000;
/// Most citations of one answer.
pub const MAX_CITATIONS: usize = 256;
/// Most tool calls of one answer.
pub const MAX_TOOL_CALLS: usize = 64;

/// `assistant`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Assistant {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// The answer as a doc tree (required in JSON mode unless `markdown` is there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub render: Option<Node>,
    /// The answer as Markdown (Markdown mode, the lenient JSON fallback, the parse fallback).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub markdown: Option<String>,
    #[serde(default)]
    pub citations: Vec<Citation>,
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

impl Assistant {
    /// The whole of `text` as Markdown, no citations: the seed's fallback.
    pub fn markdown(text: impl Into<String>) -> Assistant {
        Assistant {
            markdown: Some(text.into()),
            ..Assistant::default()
        }
    }
}

/// A node of the render doc tree: `{ "type": "doc" | "paragraph" | "text" | …, "children"?,
/// "text"? }`. Node types beyond the seed's three are kept (the renderer decides).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Node {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub children: Option<Vec<Node>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

/// One citation: `source_id` and/or `doc_id`, `url`, `quote`, and optionally a `locator`
/// and a `confidence` in 0..=1.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Citation {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub doc_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quote: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub locator: Option<Locator>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confidence: Option<f64>,
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

/// `locator`: where in the source the evidence is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Locator {
    #[serde(rename = "type")]
    pub kind: LocatorType,
    pub value: String,
}

/// `locator.type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LocatorType {
    TextFragment,
    SectionHeading,
}

/// `output.format`: JSON (the default) or Markdown (read-only tasks: no tool calls).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    #[default]
    Json,
    Markdown,
}

/// A model's answer that passed the checks.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelAnswer {
    pub assistant: Assistant,
    pub tool_calls: Vec<ToolCall>,
}

/// Reads a model's answer in JSON mode: one JSON object (an outer Markdown code fence is
/// stripped) holding `assistant` and optionally `tool_calls` — the whole response packet or
/// just those two; the envelope fields are the gateway's to set and are ignored. Checked:
/// `assistant.render` (a doc tree rooted at `doc`) or `assistant.markdown`, the citations,
/// and every tool call against the validator ([`crate::tools::validate`]).
pub fn read_answer(text: &str) -> Result<ModelAnswer, AnswerError> {
    let json = strip_fence(text);
    let value: Value =
        serde_json::from_str(json).map_err(|e| AnswerError::NotJson(e.to_string()))?;
    let Value::Object(mut obj) = value else {
        return Err(AnswerError::NotObject);
    };
    let assistant = obj.remove("assistant").ok_or(AnswerError::NoAssistant)?;
    let assistant: Assistant = serde_json::from_value(assistant)
        .map_err(|e| AnswerError::Schema(format!("assistant: {e}")))?;
    let tool_calls = match obj.remove("tool_calls") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(calls)) => {
            if calls.len() > MAX_TOOL_CALLS {
                return Err(AnswerError::Schema(format!(
                    "more than {MAX_TOOL_CALLS} tool calls"
                )));
            }
            let mut out = Vec::with_capacity(calls.len());
            for (i, c) in calls.into_iter().enumerate() {
                let call: ToolCall = serde_json::from_value(c)
                    .map_err(|e| AnswerError::Schema(format!("tool_calls[{i}]: {e}")))?;
                crate::tools::validate(&call).map_err(|e| AnswerError::Tool(i, e))?;
                out.push(call);
            }
            out
        }
        Some(_) => return Err(AnswerError::Schema("tool_calls must be an array".into())),
    };
    check_assistant(&assistant)?;
    Ok(ModelAnswer {
        assistant,
        tool_calls,
    })
}

/// Reads a model's answer in Markdown mode: the text is the Markdown, unless it is a valid
/// JSON answer (the seed: the host may still accept JSON), whose assistant is taken without
/// its tool calls (none are allowed in Markdown mode).
pub fn read_markdown(text: &str) -> Assistant {
    match read_answer(text) {
        Ok(answer) => answer.assistant,
        Err(_) => Assistant::markdown(text),
    }
}

/// How a model's answer is read for `format`; a JSON answer that fails is `Err`.
pub fn read(text: &str, format: Format) -> Result<ModelAnswer, AnswerError> {
    match format {
        Format::Json => read_answer(text),
        Format::Markdown => Ok(ModelAnswer {
            assistant: read_markdown(text),
            tool_calls: Vec::new(),
        }),
    }
}

/// `text` trimmed, without one outer code fence (```` ```json … ``` ````) if it has one.
fn strip_fence(text: &str) -> &str {
    let t = text.trim();
    let Some(inner) = t.strip_prefix("```").and_then(|r| r.strip_suffix("```")) else {
        return t;
    };
    // The fence's first line is its info string (`json`, or nothing).
    match inner.split_once('\n') {
        Some((info, body)) if !info.contains('{') => body.trim(),
        _ => inner.trim(),
    }
}

/// The assistant's checks: content present, a well-formed bounded tree, sound citations.
fn check_assistant(a: &Assistant) -> Result<(), AnswerError> {
    match (&a.render, &a.markdown) {
        (None, None) => {
            return Err(AnswerError::Schema(
                "assistant needs `render` (a doc tree) or `markdown`".into(),
            ))
        }
        (Some(root), _) => check_tree(root)?,
        (None, Some(_)) => {}
    }
    if a.citations.len() > MAX_CITATIONS {
        return Err(AnswerError::Schema(format!(
            "more than {MAX_CITATIONS} citations"
        )));
    }
    for (i, c) in a.citations.iter().enumerate() {
        if c.source_id.is_none() && c.doc_id.is_none() {
            return Err(AnswerError::Schema(format!(
                "citations[{i}] names neither `source_id` nor `doc_id`"
            )));
        }
        if c.confidence.is_some_and(|x| !(0.0..=1.0).contains(&x)) {
            return Err(AnswerError::Schema(format!(
                "citations[{i}].confidence must be within 0..1"
            )));
        }
    }
    Ok(())
}

/// The render tree: rooted at `doc`, at most [`MAX_RENDER_DEPTH`] deep and
/// [`MAX_RENDER_NODES`] nodes. Walked with an explicit stack.
pub fn check_tree(root: &Node) -> Result<(), AnswerError> {
    if root.kind != "doc" {
        return Err(AnswerError::Schema(format!(
            "assistant.render must be a `doc` node, not `{}`",
            root.kind
        )));
    }
    let mut stack = vec![(root, 1usize)];
    let mut nodes = 0usize;
    while let Some((node, depth)) = stack.pop() {
        nodes += 1;
        if nodes > MAX_RENDER_NODES {
            return Err(AnswerError::Schema(format!(
                "assistant.render has more than {MAX_RENDER_NODES} nodes"
            )));
        }
        if depth > MAX_RENDER_DEPTH {
            return Err(AnswerError::Schema(format!(
                "assistant.render is deeper than {MAX_RENDER_DEPTH} levels"
            )));
        }
        if node.kind.is_empty() {
            return Err(AnswerError::Schema(
                "a render node has an empty `type`".into(),
            ));
        }
        for child in node.children.iter().flatten() {
            stack.push((child, depth + 1));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fenced_answer_is_read() {
        let text = "```json\n{\"assistant\": {\"markdown\": \"hi\"}}\n```";
        let a = read_answer(text).unwrap();
        assert_eq!(a.assistant.markdown.as_deref(), Some("hi"));
        assert!(a.tool_calls.is_empty());
    }

    #[test]
    fn answers_that_break_the_schema_are_refused() {
        let cases = [
            ("not json", "not JSON"),
            ("[1]", "not a JSON object"),
            ("{}", "no `assistant`"),
            (r#"{"assistant": {}}"#, "`render`"),
            (r#"{"assistant": {"render": {"type": "p"}}}"#, "`doc` node"),
            (
                r#"{"assistant": {"markdown": "x", "citations": [{"url": "u"}]}}"#,
                "neither",
            ),
            (
                r#"{"assistant": {"markdown": "x", "citations": [{"doc_id": "d", "confidence": 2}]}}"#,
                "0..1",
            ),
            (
                r#"{"assistant": {"markdown": "x"}, "tool_calls": [{"name": "rm.rf", "arguments": {}}]}"#,
                "unknown tool `rm.rf`",
            ),
            (
                r#"{"assistant": {"markdown": "x"}, "tool_calls": [{"name": "browser.click", "arguments": {"handleId": "a", "x": 1}}]}"#,
                "unknown key `x`",
            ),
            (
                r#"{"assistant": {"markdown": "x"}, "tool_calls": [{"name": "browser.back", "arguments": {}, "why": "y"}]}"#,
                "unknown field `why`",
            ),
        ];
        for (text, why) in cases {
            let e = read_answer(text).unwrap_err().to_string();
            assert!(e.contains(why), "{text}: {e}");
        }
    }

    #[test]
    fn a_deep_tree_is_refused_without_recursion() {
        let mut node = Node {
            kind: "text".into(),
            children: None,
            text: Some("x".into()),
            rest: Map::new(),
        };
        for _ in 0..MAX_RENDER_DEPTH {
            node = Node {
                kind: "paragraph".into(),
                children: Some(vec![node]),
                text: None,
                rest: Map::new(),
            };
        }
        node.kind = "doc".into();
        let e = check_tree(&node).unwrap_err().to_string();
        assert!(e.contains("deeper"), "{e}");
    }

    #[test]
    fn markdown_mode_takes_text_or_a_valid_json_answer_without_tools() {
        assert_eq!(
            read_markdown("## Hi\n\n- x").markdown.as_deref(),
            Some("## Hi\n\n- x")
        );
        let json = r#"{"assistant": {"markdown": "m"}, "tool_calls": [{"name": "browser.back"}]}"#;
        let a = read(json, Format::Markdown).unwrap();
        assert_eq!(a.assistant.markdown.as_deref(), Some("m"));
        assert!(a.tool_calls.is_empty());
    }
}
