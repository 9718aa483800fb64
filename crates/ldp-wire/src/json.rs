//! Task payloads (TASK_SUBMIT `input`, TASK_RESULT `output`) carried as JSON text.
//!
//! The gateway routes on a task's skill, session and contract, never on its payload, so the
//! payload is read without building a tree and written back verbatim: no `Value` maps to
//! allocate on the way in, no re-serialisation on the way out. Code that does look inside
//! (payload translation between modes, the whole-envelope signature, ledger previews, the
//! simulated delegate) parses on demand with [`Json::to_value`].
//!
//! Keeping the text checks only that it is one JSON value: a number out of `f64` range
//! (`1e999`) or a lone UTF-16 surrogate escape (`"\ud800"`) is kept and forwarded, while
//! [`Json::to_value`] refuses it. Every reader that needs the parsed form therefore handles
//! that error (a signature over such a payload fails; a translation refuses the task).

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::Value;

/// One JSON value, kept as the text it arrived in (or as serialised once when built here).
///
/// Equality is by meaning (both sides parsed), so `{"a": 1}` equals `{"a":1}`; the hot path
/// never compares payloads.
#[derive(Clone, Serialize)]
#[serde(transparent)]
pub struct Json(Box<RawValue>);

impl Json {
    /// JSON `null`.
    pub fn null() -> Json {
        Json(RawValue::NULL.to_owned())
    }

    /// `v`, serialised.
    pub fn from_value(v: &Value) -> Json {
        // A `Value` always serialises (its map keys are strings).
        serde_json::value::to_raw_value(v)
            .map(Json)
            .unwrap_or_else(|_| Json::null())
    }

    /// Checks that `text` is one JSON value and keeps it as it is.
    pub fn from_text(text: String) -> Result<Json, serde_json::Error> {
        RawValue::from_string(text).map(Json)
    }

    /// The JSON text, as received or written.
    pub fn get(&self) -> &str {
        self.0.get()
    }

    /// Parsed (for code that inspects the payload); an error for text that is JSON but not
    /// a [`Value`] (see the module comment).
    pub fn to_value(&self) -> Result<Value, serde_json::Error> {
        serde_json::from_str(self.get())
    }

    /// The string, if the value is a JSON string.
    pub fn as_string(&self) -> Option<String> {
        match self.get().as_bytes().first() {
            Some(b'"') => serde_json::from_str(self.get()).ok(),
            _ => None,
        }
    }

    /// Whether the value is `null`.
    pub fn is_null(&self) -> bool {
        self.get() == "null"
    }

    /// The same value in this crate's serialisation of its parsed form (object keys sorted,
    /// no whitespace, the last of duplicate keys): what [`super::signing`]'s whole-envelope
    /// MAC covers, so that key order and spacing on the wire do not change a signature.
    pub fn canonical(&self) -> Result<Json, serde_json::Error> {
        self.to_value().map(|v| Json::from_value(&v))
    }
}

impl<'de> Deserialize<'de> for Json {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Json, D::Error> {
        Box::<RawValue>::deserialize(d).map(Json)
    }
}

impl Default for Json {
    fn default() -> Json {
        Json::null()
    }
}

impl From<Value> for Json {
    fn from(v: Value) -> Json {
        Json::from_value(&v)
    }
}

impl From<&str> for Json {
    /// A JSON string holding `s`.
    fn from(s: &str) -> Json {
        Json::from_value(&Value::String(s.to_owned()))
    }
}

impl PartialEq for Json {
    fn eq(&self, other: &Json) -> bool {
        self.get() == other.get()
            || matches!((self.to_value(), other.to_value()), (Ok(a), Ok(b)) if a == b)
    }
}

impl PartialEq<Value> for Json {
    fn eq(&self, other: &Value) -> bool {
        self.to_value().is_ok_and(|v| v == *other)
    }
}

impl std::fmt::Debug for Json {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.get())
    }
}

impl std::fmt::Display for Json {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.get())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn text_travels_verbatim_and_compares_by_meaning() {
        let j: Json = serde_json::from_str(r#"{"b": [1, 2.5], "a": "x"}"#).unwrap();
        assert_eq!(j.get(), r#"{"b": [1, 2.5], "a": "x"}"#);
        assert_eq!(serde_json::to_string(&j).unwrap(), j.get());
        assert_eq!(j, json!({"a": "x", "b": [1, 2.5]}));
        assert_eq!(j, Json::from(json!({"a": "x", "b": [1, 2.5]})));
        assert_ne!(j, Json::from(json!({"a": "y", "b": [1, 2.5]})));
        assert_eq!(j.canonical().unwrap().get(), r#"{"a":"x","b":[1,2.5]}"#);
    }

    #[test]
    fn helpers() {
        assert!(Json::null().is_null());
        assert!(Json::default().is_null());
        assert_eq!(Json::from("hi").as_string().as_deref(), Some("hi"));
        assert_eq!(Json::from(json!(1)).as_string(), None);
        assert_eq!(Json::from_text("[1,".into()).ok(), None);
        assert_eq!(Json::from_text(" 7 ".into()).unwrap(), json!(7));
    }

    #[test]
    fn json_that_is_no_value_is_kept_but_never_read_as_one() {
        for text in [r#"{"n": 1e999}"#, r#""\ud800""#] {
            let j: Json = serde_json::from_str(text).unwrap();
            assert_eq!(j.get(), text);
            assert!(j.to_value().is_err(), "{text}");
            assert!(j.canonical().is_err(), "{text}");
            assert_ne!(j, Json::null(), "{text}");
            assert_ne!(j, Value::Null, "{text}");
        }
        let a: Json = serde_json::from_str(r#"[1e999]"#).unwrap();
        let b: Json = serde_json::from_str(r#"[2e999]"#).unwrap();
        assert_ne!(a, b);
    }

    #[test]
    fn inside_an_option_null_is_none() {
        #[derive(Deserialize)]
        struct S {
            #[serde(default)]
            j: Option<Json>,
        }
        let s: S = serde_json::from_str(r#"{"j": null}"#).unwrap();
        assert!(s.j.is_none());
        let s: S = serde_json::from_str(r#"{"j": {"k": [true]}}"#).unwrap();
        assert_eq!(s.j.unwrap().get(), r#"{"k": [true]}"#);
    }
}
