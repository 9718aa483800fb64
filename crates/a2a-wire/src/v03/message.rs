//! v0.3 `Message`, `Part` (`kind: text|data|file`) and `Role`.

use crate::serde_util::{kind_tag, Map};
use serde::ser::SerializeMap;
use serde::{de, Deserialize, Deserializer, Serialize, Serializer};

kind_tag! {
    /// `"kind": "message"`.
    MessageKind = "message"
}

/// Who sent a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    User,
    Agent,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Message {
    #[serde(default)]
    pub kind: MessageKind,
    pub message_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    pub role: Role,
    pub parts: Vec<Part>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extensions: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference_task_ids: Option<Vec<String>>,
    #[serde(flatten)]
    pub rest: Map,
}

/// The content of a v0.3 part, by its `kind`.
#[derive(Clone, Debug, PartialEq)]
pub enum PartContent {
    /// `kind: "text"`.
    Text(String),
    /// `kind: "data"`: an object (v0.3 allows nothing else).
    Data(Map),
    /// `kind: "file"`.
    File(FileContent),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Part {
    pub content: PartContent,
    pub metadata: Option<Map>,
    pub rest: Map,
}

/// A file part's `file`: bytes or a URI, with optional media type and name.
#[derive(Clone, Debug, PartialEq)]
pub struct FileContent {
    pub source: FileSource,
    /// `mimeType`.
    pub mime_type: Option<String>,
    pub name: Option<String>,
    pub rest: Map,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FileSource {
    /// `bytes`: base64, kept as text.
    Bytes(String),
    /// `uri`.
    Uri(String),
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PartIn {
    #[serde(default)]
    kind: Option<String>,
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    data: Option<Map>,
    #[serde(default)]
    file: Option<FileContent>,
    #[serde(default)]
    metadata: Option<Map>,
    #[serde(flatten)]
    rest: Map,
}

impl<'de> Deserialize<'de> for Part {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Part, D::Error> {
        let p = PartIn::deserialize(d)?;
        let content = match (p.kind.as_deref(), p.text, p.data, p.file) {
            (Some("text") | None, Some(t), None, None) => PartContent::Text(t),
            (Some("data") | None, None, Some(d), None) => PartContent::Data(d),
            (Some("file") | None, None, None, Some(f)) => PartContent::File(f),
            (Some(k @ ("text" | "data" | "file")), ..) => {
                return Err(de::Error::custom(format_args!(
                    "a `{k}` part has exactly its `{k}` member"
                )))
            }
            (Some(_), ..) => {
                return Err(de::Error::custom(
                    "a part's kind is \"text\", \"data\" or \"file\"",
                ))
            }
            (None, ..) => {
                return Err(de::Error::custom(
                    "a part has exactly one of `text`, `data` and `file`",
                ))
            }
        };
        Ok(Part {
            content,
            metadata: p.metadata,
            rest: p.rest,
        })
    }
}

impl Serialize for Part {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        match &self.content {
            PartContent::Text(t) => {
                m.serialize_entry("kind", "text")?;
                m.serialize_entry("text", t)?;
            }
            PartContent::Data(d) => {
                m.serialize_entry("kind", "data")?;
                m.serialize_entry("data", d)?;
            }
            PartContent::File(f) => {
                m.serialize_entry("kind", "file")?;
                m.serialize_entry("file", f)?;
            }
        }
        if let Some(md) = &self.metadata {
            m.serialize_entry("metadata", md)?;
        }
        for (k, v) in &self.rest {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct FileIn {
    #[serde(default)]
    bytes: Option<String>,
    #[serde(default)]
    uri: Option<String>,
    #[serde(default)]
    mime_type: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(flatten)]
    rest: Map,
}

impl<'de> Deserialize<'de> for FileContent {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<FileContent, D::Error> {
        let f = FileIn::deserialize(d)?;
        let source = match (f.bytes, f.uri) {
            (Some(b), None) => FileSource::Bytes(b),
            (None, Some(u)) => FileSource::Uri(u),
            _ => {
                return Err(de::Error::custom(
                    "a file has exactly one of `bytes` and `uri`",
                ))
            }
        };
        Ok(FileContent {
            source,
            mime_type: f.mime_type,
            name: f.name,
            rest: f.rest,
        })
    }
}

impl Serialize for FileContent {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        match &self.source {
            FileSource::Bytes(b) => m.serialize_entry("bytes", b)?,
            FileSource::Uri(u) => m.serialize_entry("uri", u)?,
        }
        if let Some(t) = &self.mime_type {
            m.serialize_entry("mimeType", t)?;
        }
        if let Some(n) = &self.name {
            m.serialize_entry("name", n)?;
        }
        for (k, v) in &self.rest {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn round(v: Value) -> Value {
        let p: Part = serde_json::from_value(v).unwrap();
        serde_json::to_value(p).unwrap()
    }

    #[test]
    fn parts() {
        for v in [
            json!({"kind": "text", "text": "hi", "metadata": {}}),
            json!({"kind": "data", "data": {"a": [1]}}),
            json!({"kind": "file", "file": {"bytes": "AP8=", "mimeType": "x/y", "name": "n"}}),
            json!({"kind": "file", "file": {"uri": "https://x"}, "other": true}),
        ] {
            assert_eq!(round(v.clone()), v);
        }
        // Without `kind`, read by the member present (as pydantic's union does).
        assert_eq!(
            round(json!({"text": "a"})),
            json!({"kind": "text", "text": "a"})
        );
        for bad in [
            json!({"kind": "text", "data": {}}),
            json!({"kind": "data", "data": [1]}),
            json!({"kind": "image", "text": "a"}),
            json!({"text": "a", "data": {}}),
            json!({}),
            json!({"kind": "file", "file": {"bytes": "a", "uri": "b"}}),
            json!({"kind": "file", "file": {}}),
        ] {
            assert!(
                serde_json::from_value::<Part>(bad.clone()).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn messages_check_their_kind() {
        let m = json!({"kind": "message", "messageId": "m", "role": "user",
            "parts": [{"kind": "text", "text": "x"}], "extensions": []});
        let msg: Message = serde_json::from_value(m.clone()).unwrap();
        assert_eq!(serde_json::to_value(&msg).unwrap(), m);
        let mut wrong = m.clone();
        wrong["kind"] = json!("task");
        assert!(serde_json::from_value::<Message>(wrong).is_err());
        let mut bad_role = m;
        bad_role["role"] = json!("ROLE_USER");
        assert!(serde_json::from_value::<Message>(bad_role).is_err());
    }
}
