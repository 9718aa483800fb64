//! v1.0 `Task`, its status and artifacts, the streaming events and the two response
//! wrappers (spec §3.2.3, §4.1, §4.2).

use super::message::{Message, Part};
use crate::serde_util::{is_false, proto_enum, Map};
use serde::{Deserialize, Serialize};

proto_enum! {
    /// Where a task is in its life (`lf.a2a.v1.TaskState`).
    TaskState {
        Unspecified = (0, "TASK_STATE_UNSPECIFIED"),
        Submitted = (1, "TASK_STATE_SUBMITTED"),
        Working = (2, "TASK_STATE_WORKING"),
        Completed = (3, "TASK_STATE_COMPLETED"),
        Failed = (4, "TASK_STATE_FAILED"),
        Canceled = (5, "TASK_STATE_CANCELED"),
        InputRequired = (6, "TASK_STATE_INPUT_REQUIRED"),
        Rejected = (7, "TASK_STATE_REJECTED"),
        AuthRequired = (8, "TASK_STATE_AUTH_REQUIRED"),
    }
}

impl TaskState {
    /// Completed, failed, canceled or rejected: nothing more will happen (spec §3.2.2).
    pub fn is_terminal(&self) -> bool {
        matches!(
            self,
            TaskState::Completed | TaskState::Failed | TaskState::Canceled | TaskState::Rejected
        )
    }

    /// Input or auth required: the agent waits for the client (spec §3.2.2, "interrupted").
    pub fn is_interrupted(&self) -> bool {
        matches!(self, TaskState::InputRequired | TaskState::AuthRequired)
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskStatus {
    /// Left out when unspecified (ProtoJSON omits enum value 0).
    #[serde(default, skip_serializing_if = "TaskState::is_unspecified")]
    pub state: TaskState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<Message>,
    /// RFC 3339 UTC (`2026-03-01T12:00:00.123Z`; spec §5.6.1), kept as sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<String>,
    #[serde(flatten)]
    pub rest: Map,
}

impl TaskStatus {
    pub fn new(state: TaskState) -> TaskStatus {
        TaskStatus {
            state,
            message: None,
            timestamp: None,
            rest: Map::new(),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Task {
    pub id: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub context_id: String,
    pub status: TaskStatus,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub artifacts: Vec<Artifact>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub history: Vec<Message>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map>,
    #[serde(flatten)]
    pub rest: Map,
}

/// An output of a task.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Artifact {
    pub artifact_id: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    pub parts: Vec<Part>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extensions: Vec<String>,
    #[serde(flatten)]
    pub rest: Map,
}

/// A task changed state (streamed). v1.0 has no `final` flag: the stream ends after a
/// terminal or interrupted state.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskStatusUpdateEvent {
    pub task_id: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub context_id: String,
    pub status: TaskStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map>,
    #[serde(flatten)]
    pub rest: Map,
}

/// A task produced (a chunk of) an artifact (streamed).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskArtifactUpdateEvent {
    pub task_id: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub context_id: String,
    pub artifact: Artifact,
    /// Append these parts to the artifact of the same id sent before.
    #[serde(default, skip_serializing_if = "is_false")]
    pub append: bool,
    /// The last chunk of this artifact.
    #[serde(default, skip_serializing_if = "is_false")]
    pub last_chunk: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map>,
    #[serde(flatten)]
    pub rest: Map,
}

/// The `result` of `SendMessage`: a task or a direct message (`oneof payload`:
/// `{"task": …}` or `{"message": …}`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum SendMessageResponse {
    Task(Box<Task>),
    Message(Box<Message>),
}

/// The `result` of each SSE event of `SendStreamingMessage` and `SubscribeToTask` (spec
/// §3.2.3; `oneof payload`: `{"task": …}`, `{"message": …}`, `{"statusUpdate": …}`,
/// `{"artifactUpdate": …}`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum StreamResponse {
    Task(Box<Task>),
    Message(Box<Message>),
    StatusUpdate(Box<TaskStatusUpdateEvent>),
    ArtifactUpdate(Box<TaskArtifactUpdateEvent>),
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    #[test]
    fn states() {
        let s: TaskStatus = serde_json::from_value(json!({})).unwrap();
        assert_eq!(s.state, TaskState::Unspecified);
        assert_eq!(serde_json::to_value(&s).unwrap(), json!({}));
        let s: TaskStatus = serde_json::from_value(json!({"state": 3})).unwrap();
        assert!(s.state.is_terminal());
        assert_eq!(
            serde_json::to_value(&s).unwrap(),
            json!({"state": "TASK_STATE_COMPLETED"})
        );
        assert!(TaskState::AuthRequired.is_interrupted());
        assert!(!TaskState::Working.is_terminal());
    }

    #[test]
    fn stream_responses_are_one_of() {
        let v = json!({"statusUpdate": {"taskId": "t", "contextId": "c",
            "status": {"state": "TASK_STATE_WORKING"}}});
        let r: StreamResponse = serde_json::from_value(v.clone()).unwrap();
        assert!(matches!(r, StreamResponse::StatusUpdate(_)));
        assert_eq!(serde_json::to_value(&r).unwrap(), v);
        for bad in [
            json!({}),
            json!({"statusUpdate": {"taskId": "t", "status": {}}, "task": {}}),
            json!({"kind": "task"}),
        ] {
            assert!(
                serde_json::from_value::<StreamResponse>(bad.clone()).is_err(),
                "{bad}"
            );
        }
        let m =
            json!({"message": {"messageId": "m", "role": "ROLE_AGENT", "parts": [{"text": "a"}]}});
        let r: SendMessageResponse = serde_json::from_value(m.clone()).unwrap();
        assert_eq!(serde_json::to_value(&r).unwrap(), m);
    }

    #[test]
    fn unknown_members_pass_through() {
        let v = json!({"id": "t", "status": {"state": "TASK_STATE_PAUSED", "x": 1},
            "future": {"a": [1, 2.5]}});
        let t: Task = serde_json::from_value(v.clone()).unwrap();
        assert_eq!(
            t.status.state,
            TaskState::Unrecognized("TASK_STATE_PAUSED".into())
        );
        assert_eq!(t.rest["future"], json!({"a": [1, 2.5]}));
        assert_eq!(serde_json::to_value(&t).unwrap(), v);
        assert!(serde_json::from_value::<Task>(json!({"status": {}})).is_err());
        let _: Value = serde_json::to_value(&t).unwrap();
    }
}
