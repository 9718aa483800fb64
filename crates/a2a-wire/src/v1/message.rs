//! v1.0 `Message`, `Part` and `Role` (spec §4.1.4–4.1.6).

use crate::serde_util::{present, proto_enum, Map};
use serde::ser::SerializeMap;
use serde::{de, Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

proto_enum! {
    /// Who sent a message (`lf.a2a.v1.Role`).
    Role {
        Unspecified = (0, "ROLE_UNSPECIFIED"),
        /// The client.
        User = (1, "ROLE_USER"),
        /// The agent.
        Agent = (2, "ROLE_AGENT"),
    }
}

/// One message between client and agent.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Message {
    pub message_id: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub context_id: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub task_id: String,
    pub role: Role,
    pub parts: Vec<Part>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map>,
    /// URIs of the extensions that contributed to this message.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extensions: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reference_task_ids: Vec<String>,
    #[serde(flatten)]
    pub rest: Map,
}

impl Message {
    /// A message of `parts` from `role`, with nothing else set.
    pub fn new(message_id: impl Into<String>, role: Role, parts: Vec<Part>) -> Message {
        Message {
            message_id: message_id.into(),
            context_id: String::new(),
            task_id: String::new(),
            role,
            parts,
            metadata: None,
            extensions: Vec::new(),
            reference_task_ids: Vec::new(),
            rest: Map::new(),
        }
    }
}

/// The content of a part: the proto's `oneof content`. Exactly one per part; a part with none
/// or with two is refused when read.
#[derive(Clone, Debug, PartialEq)]
pub enum PartContent {
    Text(String),
    /// File bytes, base64 as ProtoJSON writes `bytes` (kept as text: the gateway forwards
    /// files, it does not open them).
    Raw(String),
    /// A file by URL.
    Url(String),
    /// Structured data: any JSON value (`google.protobuf.Value`), `null` included.
    Data(Value),
}

/// A piece of a message or artifact.
#[derive(Clone, Debug, PartialEq)]
pub struct Part {
    pub content: PartContent,
    pub metadata: Option<Map>,
    /// Empty: absent.
    pub filename: String,
    /// Empty: absent.
    pub media_type: String,
    pub rest: Map,
}

impl Part {
    fn of(content: PartContent) -> Part {
        Part {
            content,
            metadata: None,
            filename: String::new(),
            media_type: String::new(),
            rest: Map::new(),
        }
    }

    pub fn text(text: impl Into<String>) -> Part {
        Part::of(PartContent::Text(text.into()))
    }

    pub fn data(data: Value) -> Part {
        Part::of(PartContent::Data(data))
    }

    /// The text, if this is a text part.
    pub fn as_text(&self) -> Option<&str> {
        match &self.content {
            PartContent::Text(t) => Some(t),
            _ => None,
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PartIn {
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    raw: Option<String>,
    #[serde(default)]
    url: Option<String>,
    #[serde(default, deserialize_with = "present")]
    data: Option<Value>,
    #[serde(default)]
    metadata: Option<Map>,
    #[serde(default)]
    filename: String,
    #[serde(default)]
    media_type: String,
    #[serde(flatten)]
    rest: Map,
}

impl<'de> Deserialize<'de> for Part {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Part, D::Error> {
        let p = PartIn::deserialize(d)?;
        let mut content = [
            p.text.map(PartContent::Text),
            p.raw.map(PartContent::Raw),
            p.url.map(PartContent::Url),
            p.data.map(PartContent::Data),
        ]
        .into_iter()
        .flatten();
        let first = content.next();
        if content.next().is_some() {
            return Err(de::Error::custom(
                "a part has exactly one of `text`, `raw`, `url` and `data`, not several",
            ));
        }
        let Some(content) = first else {
            return Err(de::Error::custom(
                "a part has one of `text`, `raw`, `url` or `data`",
            ));
        };
        Ok(Part {
            content,
            metadata: p.metadata,
            filename: p.filename,
            media_type: p.media_type,
            rest: p.rest,
        })
    }
}

impl Serialize for Part {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        match &self.content {
            PartContent::Text(t) => m.serialize_entry("text", t)?,
            PartContent::Raw(r) => m.serialize_entry("raw", r)?,
            PartContent::Url(u) => m.serialize_entry("url", u)?,
            PartContent::Data(v) => m.serialize_entry("data", v)?,
        }
        if let Some(md) = &self.metadata {
            m.serialize_entry("metadata", md)?;
        }
        if !self.filename.is_empty() {
            m.serialize_entry("filename", &self.filename)?;
        }
        if !self.media_type.is_empty() {
            m.serialize_entry("mediaType", &self.media_type)?;
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
    use serde_json::json;

    fn round(v: Value) -> Value {
        let p: Part = serde_json::from_value(v).unwrap();
        serde_json::to_value(p).unwrap()
    }

    #[test]
    fn parts_round_trip() {
        for v in [
            json!({"text": ""}),
            json!({"text": "hi", "metadata": {}, "x-future": [1]}),
            json!({"data": null}),
            json!({"data": [1, "x"], "mediaType": "application/json"}),
            json!({"raw": "AP8=", "filename": "a.bin", "mediaType": "application/octet-stream"}),
            json!({"url": "https://x/y.png", "mediaType": "image/png"}),
        ] {
            assert_eq!(round(v.clone()), v);
        }
    }

    #[test]
    fn parts_have_one_content() {
        for v in [
            json!({}),
            json!({"metadata": {}}),
            json!({"text": "a", "url": "b"}),
        ] {
            assert!(serde_json::from_value::<Part>(v.clone()).is_err(), "{v}");
        }
    }

    #[test]
    fn roles() {
        let m: Message =
            serde_json::from_value(json!({"messageId": "m", "role": 2, "parts": [{"text": "x"}]}))
                .unwrap();
        assert_eq!(m.role, Role::Agent);
        let m: Message =
            serde_json::from_value(json!({"messageId": "m", "role": "ROLE_ROBOT", "parts": []}))
                .unwrap();
        assert_eq!(m.role, Role::Unrecognized("ROLE_ROBOT".into()));
        assert_eq!(serde_json::to_value(&m).unwrap()["role"], "ROLE_ROBOT");
        for bad in [json!(9), json!(true), json!(null)] {
            let v = json!({"messageId": "m", "role": bad, "parts": []});
            assert!(serde_json::from_value::<Message>(v).is_err());
        }
    }
}
