//! v0.3 `Task`, its status and artifacts, the streaming events (`kind: status-update`,
//! `artifact-update`) and the results of `message/send` and `message/stream`.

use super::message::{Message, MessageKind, Part};
use crate::serde_util::{kind_tag, Map};
use serde::{de, Deserialize, Deserializer, Serialize};
use serde_json::Value;

kind_tag! {
    /// `"kind": "task"`.
    TaskKind = "task"
}
kind_tag! {
    /// `"kind": "status-update"`.
    StatusUpdateKind = "status-update"
}
kind_tag! {
    /// `"kind": "artifact-update"`.
    ArtifactUpdateKind = "artifact-update"
}

/// v0.3 task states. `unknown` is v1.0's `TASK_STATE_UNSPECIFIED`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TaskState {
    Submitted,
    Working,
    InputRequired,
    Completed,
    Canceled,
    Failed,
    Rejected,
    AuthRequired,
    Unknown,
}

impl TaskState {
    /// Completed, canceled, failed or rejected: the states the SDK marks `final` in a status
    /// update (`to_compat_task_status_update_event`).
    pub fn is_final(self) -> bool {
        matches!(
            self,
            TaskState::Completed | TaskState::Canceled | TaskState::Failed | TaskState::Rejected
        )
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskStatus {
    pub state: TaskState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<Message>,
    /// ISO 8601, kept as sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<String>,
    #[serde(flatten)]
    pub rest: Map,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Task {
    #[serde(default)]
    pub kind: TaskKind,
    pub id: String,
    pub context_id: String,
    pub status: TaskStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history: Option<Vec<Message>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifacts: Option<Vec<Artifact>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map>,
    #[serde(flatten)]
    pub rest: Map,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Artifact {
    pub artifact_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    pub parts: Vec<Part>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extensions: Option<Vec<String>>,
    #[serde(flatten)]
    pub rest: Map,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskStatusUpdateEvent {
    #[serde(default)]
    pub kind: StatusUpdateKind,
    pub task_id: String,
    pub context_id: String,
    pub status: TaskStatus,
    /// The last event of the stream.
    pub r#final: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map>,
    #[serde(flatten)]
    pub rest: Map,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskArtifactUpdateEvent {
    #[serde(default)]
    pub kind: ArtifactUpdateKind,
    pub task_id: String,
    pub context_id: String,
    pub artifact: Artifact,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub append: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_chunk: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map>,
    #[serde(flatten)]
    pub rest: Map,
}

/// The `result` of `message/send`: a task or a message, told apart by `kind`.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub enum SendMessageResult {
    Task(Box<Task>),
    Message(Box<Message>),
}

/// The `result` of one SSE event of `message/stream` and `tasks/resubscribe`.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub enum StreamResult {
    Task(Box<Task>),
    Message(Box<Message>),
    StatusUpdate(Box<TaskStatusUpdateEvent>),
    ArtifactUpdate(Box<TaskArtifactUpdateEvent>),
}

/// The `kind` of a v0.3 result, or the one the SDK's client infers when it is missing
/// (`a2a/compat/v0_3/jsonrpc_transport.py`: `taskId` with `final` is a status update,
/// `messageId` a message, `id` a task; we add `artifact` for an artifact update).
fn result_kind(m: &Map) -> Option<&str> {
    if let Some(k) = m.get("kind") {
        return k.as_str();
    }
    if m.contains_key("taskId") && m.contains_key("final") {
        Some(StatusUpdateKind::VALUE)
    } else if m.contains_key("messageId") {
        Some(MessageKind::VALUE)
    } else if m.contains_key("id") {
        Some(TaskKind::VALUE)
    } else if m.contains_key("taskId") && m.contains_key("artifact") {
        Some(ArtifactUpdateKind::VALUE)
    } else {
        None
    }
}

fn from_map<T: for<'a> Deserialize<'a>, E: de::Error>(m: Map) -> Result<T, E> {
    serde_json::from_value(Value::Object(m)).map_err(E::custom)
}

impl<'de> Deserialize<'de> for StreamResult {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<StreamResult, D::Error> {
        let m = Map::deserialize(d)?;
        match result_kind(&m) {
            Some(TaskKind::VALUE) => from_map(m).map(StreamResult::Task),
            Some(MessageKind::VALUE) => from_map(m).map(StreamResult::Message),
            Some(StatusUpdateKind::VALUE) => from_map(m).map(StreamResult::StatusUpdate),
            Some(ArtifactUpdateKind::VALUE) => from_map(m).map(StreamResult::ArtifactUpdate),
            _ => Err(de::Error::custom(
                "a stream result's kind is \"task\", \"message\", \"status-update\" or \"artifact-update\"",
            )),
        }
    }
}

impl<'de> Deserialize<'de> for SendMessageResult {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<SendMessageResult, D::Error> {
        let m = Map::deserialize(d)?;
        match result_kind(&m) {
            Some(TaskKind::VALUE) => from_map(m).map(SendMessageResult::Task),
            Some(MessageKind::VALUE) => from_map(m).map(SendMessageResult::Message),
            _ => Err(de::Error::custom(
                "a message/send result's kind is \"task\" or \"message\"",
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn results_by_kind_or_by_shape() {
        let su = json!({"kind": "status-update", "taskId": "t", "contextId": "c",
            "status": {"state": "input-required"}, "final": false});
        let r: StreamResult = serde_json::from_value(su.clone()).unwrap();
        assert!(matches!(r, StreamResult::StatusUpdate(_)));
        assert_eq!(serde_json::to_value(&r).unwrap(), su);
        let mut no_kind = su.clone();
        no_kind.as_object_mut().unwrap().remove("kind");
        let r: StreamResult = serde_json::from_value(no_kind).unwrap();
        assert_eq!(serde_json::to_value(&r).unwrap(), su);
        let au = json!({"taskId": "t", "contextId": "c", "artifact": {"artifactId": "a",
            "parts": [{"kind": "text", "text": "x"}]}, "lastChunk": true});
        let r: StreamResult = serde_json::from_value(au).unwrap();
        assert!(matches!(r, StreamResult::ArtifactUpdate(_)));
        let t =
            json!({"kind": "task", "id": "t", "contextId": "c", "status": {"state": "unknown"}});
        let r: SendMessageResult = serde_json::from_value(t.clone()).unwrap();
        assert_eq!(serde_json::to_value(&r).unwrap(), t);
        for bad in [
            json!({}),
            json!({"kind": "status-update", "id": "t"}),
            json!([1]),
        ] {
            assert!(
                serde_json::from_value::<StreamResult>(bad.clone()).is_err(),
                "{bad}"
            );
        }
        assert!(serde_json::from_value::<SendMessageResult>(su).is_err());
    }
}
