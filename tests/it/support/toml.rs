//! A config as the TOML file the real binary reads: through its JSON form (the crate's
//! `toml` dependency only parses), every section a table, nested tables inline, `None`s out.

use serde::Serialize;
use serde_json::Value;
use std::fmt::Write as _;

/// `value` (a struct of sections) as TOML text.
pub fn to_toml(value: &impl Serialize) -> String {
    let Value::Object(top) = serde_json::to_value(value).expect("serialisable") else {
        panic!("a config serialises to a table");
    };
    let mut out = String::new();
    // Plain keys first: after the first `[table]` header every key belongs to that table.
    for (k, v) in &top {
        if !is_table(v) && !is_table_array(v) {
            if let Some(v) = inline(v) {
                writeln!(out, "{} = {v}", key(k)).expect("write");
            }
        }
    }
    for (k, v) in &top {
        if is_table(v) {
            writeln!(out, "[{}]", key(k)).expect("write");
            body(&mut out, v);
        } else if is_table_array(v) {
            for item in v.as_array().into_iter().flatten() {
                writeln!(out, "[[{}]]", key(k)).expect("write");
                body(&mut out, item);
            }
        }
    }
    out
}

fn is_table(v: &Value) -> bool {
    v.is_object()
}

fn is_table_array(v: &Value) -> bool {
    v.as_array()
        .is_some_and(|a| !a.is_empty() && a.iter().all(Value::is_object))
}

/// The keys of one table, one a line.
fn body(out: &mut String, table: &Value) {
    for (k, v) in table.as_object().into_iter().flatten() {
        if let Some(v) = inline(v) {
            writeln!(out, "{} = {v}", key(k)).expect("write");
        }
    }
}

/// A value on one line; `None` for a null (TOML has none: the key is left out).
fn inline(v: &Value) -> Option<String> {
    Some(match v {
        Value::Null => return None,
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        // JSON string escapes are TOML basic-string escapes.
        Value::String(s) => serde_json::to_string(s).expect("string"),
        Value::Array(items) => {
            let items: Vec<String> = items.iter().filter_map(inline).collect();
            format!("[{}]", items.join(", "))
        }
        Value::Object(map) => {
            let pairs: Vec<String> = map
                .iter()
                .filter_map(|(k, v)| inline(v).map(|v| format!("{} = {v}", key(k))))
                .collect();
            format!("{{ {} }}", pairs.join(", "))
        }
    })
}

fn key(k: &str) -> String {
    let bare = !k.is_empty()
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if bare {
        k.to_owned()
    } else {
        serde_json::to_string(k).expect("key")
    }
}
