//! The tool-call validator (tool schema version 1): the seed's tools and their argument
//! keys and types. Unknown tool names and unknown keys are refused, as the seed's rollout
//! rules say ("the validator is authoritative"); so are missing required keys and values of
//! the wrong type.

use crate::error::ToolError;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The tool schema version these tools are.
pub const TOOLS_SCHEMA_VERSION: u32 = 1;

/// A proposed tool call: `{ "name": "browser.click", "arguments": { "handleId": "…" } }`.
/// No key beyond these two (the seed: "must not include keys beyond the schema").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolCall {
    pub name: String,
    #[serde(default)]
    pub arguments: Map<String, Value>,
}

/// An argument's type.
#[derive(Debug, Clone, Copy)]
enum Ty {
    Str,
    /// An integer (`int` in the seed).
    Int,
    /// Any number.
    Num,
    Bool,
    Obj,
    StrList,
    OneOf(&'static [&'static str]),
    /// `collection.add_sources`'s `sources`: `{type: "url", url, title?}` or
    /// `{type: "note", title?, text}`.
    Sources,
}

/// One argument: its key, type, and whether it is required.
type Param = (&'static str, Ty, bool);

const R: bool = true;
const O: bool = false;

/// Every tool of schema version 1, by name.
const TOOLS: &[(&str, &[Param])] = &[
    (
        "browser.observe_dom",
        &[
            ("maxChars", Ty::Int, O),
            ("maxElements", Ty::Int, O),
            ("maxBlocks", Ty::Int, O),
            ("maxPrimaryChars", Ty::Int, O),
            ("maxOutline", Ty::Int, O),
            ("maxOutlineChars", Ty::Int, O),
            ("maxItems", Ty::Int, O),
            ("maxItemChars", Ty::Int, O),
            ("maxComments", Ty::Int, O),
            ("maxCommentChars", Ty::Int, O),
            ("rootHandleId", Ty::Str, O),
        ],
    ),
    ("browser.get_selection_links", &[("maxLinks", Ty::Int, O)]),
    ("browser.click", &[("handleId", Ty::Str, R)]),
    (
        "browser.type",
        &[("handleId", Ty::Str, R), ("text", Ty::Str, R)],
    ),
    (
        "browser.select",
        &[("handleId", Ty::Str, R), ("value", Ty::Str, R)],
    ),
    ("browser.scroll", &[("deltaY", Ty::Num, R)]),
    ("browser.open_tab", &[("url", Ty::Str, R)]),
    ("browser.navigate", &[("url", Ty::Str, R)]),
    ("browser.back", &[]),
    ("browser.forward", &[]),
    ("browser.refresh", &[]),
    (
        "search",
        &[
            ("query", Ty::Str, R),
            ("engine", Ty::Str, O),
            ("newTab", Ty::Bool, O),
        ],
    ),
    (
        "artifact.save",
        &[
            ("title", Ty::Str, R),
            ("markdown", Ty::Str, R),
            ("tags", Ty::StrList, O),
            ("redaction", Ty::OneOf(&["default", "none"]), O),
        ],
    ),
    (
        "artifact.share",
        &[
            ("artifactId", Ty::Str, R),
            (
                "format",
                Ty::OneOf(&["markdown", "text", "json", "csv", "pdf"]),
                R,
            ),
            ("filename", Ty::Str, O),
            (
                "target",
                Ty::OneOf(&["share_sheet", "clipboard", "file"]),
                O,
            ),
        ],
    ),
    (
        "artifact.open",
        &[
            ("artifactId", Ty::Str, R),
            ("target", Ty::OneOf(&["workspace", "browser"]), O),
            ("newTab", Ty::Bool, O),
        ],
    ),
    (
        "integration.invoke",
        &[
            ("integration", Ty::Str, R),
            ("operation", Ty::Str, R),
            ("payload", Ty::Obj, R),
            ("idempotencyKey", Ty::Str, O),
        ],
    ),
    (
        "app.calculate",
        &[("expression", Ty::Str, R), ("precision", Ty::Num, O)],
    ),
    (
        "collection.create",
        &[("title", Ty::Str, R), ("tags", Ty::StrList, O)],
    ),
    (
        "collection.add_sources",
        &[("collectionId", Ty::Str, R), ("sources", Ty::Sources, R)],
    ),
    ("collection.list_sources", &[("collectionId", Ty::Str, R)]),
    (
        "source.capture",
        &[
            ("collectionId", Ty::Str, R),
            ("url", Ty::Str, R),
            ("mode", Ty::OneOf(&["auto", "article", "list"]), O),
            ("maxChars", Ty::Int, O),
        ],
    ),
    ("source.refresh", &[("sourceId", Ty::Str, R)]),
    ("transform.list_types", &[]),
    (
        "transform.run",
        &[
            ("collectionId", Ty::Str, R),
            ("type", Ty::Str, R),
            ("config", Ty::Obj, O),
        ],
    ),
];

/// The names of every known tool, in the seed's order.
pub fn names() -> impl Iterator<Item = &'static str> {
    TOOLS.iter().map(|(name, _)| *name)
}

/// Checks `call` against its tool's schema.
pub fn validate(call: &ToolCall) -> Result<(), ToolError> {
    let Some((_, params)) = TOOLS.iter().find(|(name, _)| *name == call.name) else {
        return Err(ToolError::UnknownTool(cut(&call.name)));
    };
    for key in call.arguments.keys() {
        if !params.iter().any(|(k, _, _)| k == key) {
            return Err(ToolError::UnknownKey {
                tool: call.name.clone(),
                key: cut(key),
            });
        }
    }
    for &(key, ty, required) in params.iter() {
        match call.arguments.get(key) {
            None if required => {
                return Err(ToolError::Missing {
                    tool: call.name.clone(),
                    key,
                })
            }
            None => {}
            Some(v) if fits(v, ty) => {}
            Some(_) => {
                return Err(ToolError::WrongType {
                    tool: call.name.clone(),
                    key,
                    expected: describe(ty),
                })
            }
        }
    }
    Ok(())
}

fn fits(v: &Value, ty: Ty) -> bool {
    match ty {
        Ty::Str => v.is_string(),
        Ty::Int => v.is_i64() || v.is_u64(),
        Ty::Num => v.is_number(),
        Ty::Bool => v.is_boolean(),
        Ty::Obj => v.is_object(),
        Ty::StrList => v.as_array().is_some_and(|a| a.iter().all(Value::is_string)),
        Ty::OneOf(allowed) => v.as_str().is_some_and(|s| allowed.contains(&s)),
        Ty::Sources => v.as_array().is_some_and(|a| a.iter().all(fits_source)),
    }
}

/// One source of `collection.add_sources`, with no key beyond its variant's.
fn fits_source(v: &Value) -> bool {
    let Some(o) = v.as_object() else {
        return false;
    };
    let str_or_absent = |k: &str| o.get(k).is_none_or(Value::is_string);
    let only = |keys: &[&str]| o.keys().all(|k| keys.contains(&k.as_str()));
    match o.get("type").and_then(Value::as_str) {
        Some("url") => {
            o.get("url").is_some_and(Value::is_string)
                && str_or_absent("title")
                && only(&["type", "url", "title"])
        }
        Some("note") => {
            o.get("text").is_some_and(Value::is_string)
                && str_or_absent("title")
                && only(&["type", "title", "text"])
        }
        _ => false,
    }
}

fn describe(ty: Ty) -> String {
    match ty {
        Ty::Str => "a string".into(),
        Ty::Int => "an integer".into(),
        Ty::Num => "a number".into(),
        Ty::Bool => "a boolean".into(),
        Ty::Obj => "an object".into(),
        Ty::StrList => "an array of strings".into(),
        Ty::OneOf(allowed) => format!("one of {}", allowed.join(", ")),
        Ty::Sources => "an array of {type: url, url, title?} or {type: note, title?, text}".into(),
    }
}

/// A name from the model, cut for an error message.
fn cut(s: &str) -> String {
    const MAX: usize = 64;
    match s.char_indices().nth(MAX) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn call(v: Value) -> ToolCall {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn the_seeds_calls_pass() {
        for v in [
            json!({"name": "browser.click", "arguments": {"handleId": "laika-1"}}),
            json!({"name": "browser.back", "arguments": {}}),
            json!({"name": "browser.refresh"}),
            json!({"name": "browser.scroll", "arguments": {"deltaY": -120.5}}),
            json!({"name": "search", "arguments": {"query": "q", "newTab": true}}),
            json!({"name": "artifact.share", "arguments": {"artifactId": "a", "format": "csv"}}),
            json!({"name": "collection.add_sources", "arguments": {"collectionId": "c",
                "sources": [{"type": "url", "url": "https://x"}, {"type": "note", "text": "t"}]}}),
        ] {
            validate(&call(v.clone())).unwrap_or_else(|e| panic!("{v}: {e}"));
        }
        assert_eq!(names().count(), TOOLS.len());
    }

    #[test]
    fn the_validator_refuses_what_is_not_in_the_schema() {
        let cases = [
            (
                json!({"name": "shell.exec", "arguments": {}}),
                "unknown tool",
            ),
            (json!({"name": "browser.click", "arguments": {}}), "missing"),
            (
                json!({"name": "browser.click", "arguments": {"handleId": 1}}),
                "a string",
            ),
            (
                json!({"name": "browser.observe_dom", "arguments": {"maxChars": 1.5}}),
                "an integer",
            ),
            (
                json!({"name": "artifact.share", "arguments": {"artifactId": "a", "format": "exe"}}),
                "one of",
            ),
            (
                json!({"name": "collection.add_sources", "arguments": {"collectionId": "c",
                    "sources": [{"type": "url", "url": "u", "extra": 1}]}}),
                "an array of",
            ),
            (
                json!({"name": "browser.back", "arguments": {"force": true}}),
                "unknown key",
            ),
        ];
        for (v, why) in cases {
            let e = validate(&call(v.clone())).unwrap_err().to_string();
            assert!(e.contains(why), "{v}: {e}");
        }
    }
}
