//! Conversions between the v0.3 and v1.0 shapes, as the SDK's compat layer converts
//! (`a2a/compat/v0_3/conversions.py`: `to_core_*` is `From<v03::X> for v1::X`, `to_compat_*`
//! is `From<v1::X> for v03::X`). The gateway works in v1.0 and answers v0.3 callers with
//! `From<v1::…>`; it reads a v0.3 agent's answers with `From<v03::…>`.
//!
//! Where the SDK's rules are lossy we follow them, so that both ends agree:
//! - v0.3 has no `filename`/`mediaType` on text and data parts: dropped.
//! - a v1.0 data part that is not an object becomes `{"value": …}` with
//!   `metadata.data_part_compat = true`, and back.
//! - a v0.3 empty `metadata`, `extensions` or `referenceTaskIds` becomes absent in v1.0 (the
//!   SDK tests truthiness); a v0.3 `historyLength` of 0 (no limit) becomes unset.
//! - v1.0 → v0.3 writes `blocking` (always: `!returnImmediately`), `append` and `lastChunk`
//!   (always) and `final` (true for completed, canceled, failed, rejected); v0.3 → v1.0 drops
//!   `final` and `kind`.
//! - v1.0 `tenant` has no v0.3 place: dropped. v0.3 `TaskQueryParams.metadata` and the
//!   metadata of `tasks/resubscribe` have no v1.0 place: dropped.
//! - a v0.3 timestamp ending in `+00:00` is written with `Z`; otherwise timestamps are kept
//!   as sent (the SDK re-formats them through `google.protobuf.Timestamp`).
//! - members neither version names (`rest`) are carried over as they came.

use crate::consts::DATA_PART_COMPAT_KEY;
use crate::serde_util::Map;
use crate::v03::{self, FileContent, FileSource};
use crate::v1;
use serde_json::Value;

fn non_empty<T>(v: Vec<T>) -> Option<Vec<T>> {
    (!v.is_empty()).then_some(v)
}

fn non_empty_str(s: String) -> Option<String> {
    (!s.is_empty()).then_some(s)
}

fn truthy(m: Option<Map>) -> Option<Map> {
    m.filter(|m| !m.is_empty())
}

// ---- parts and messages ----

impl From<v1::Part> for v03::Part {
    fn from(p: v1::Part) -> v03::Part {
        let mut metadata = p.metadata;
        let file = |source| {
            v03::PartContent::File(FileContent {
                source,
                mime_type: non_empty_str(p.media_type.clone()),
                name: non_empty_str(p.filename.clone()),
                rest: Map::new(),
            })
        };
        let content = match p.content {
            v1::PartContent::Text(t) => v03::PartContent::Text(t),
            v1::PartContent::Data(Value::Object(m)) => v03::PartContent::Data(m),
            v1::PartContent::Data(other) => {
                metadata
                    .get_or_insert_with(Map::new)
                    .insert(DATA_PART_COMPAT_KEY.into(), Value::Bool(true));
                let mut wrap = Map::new();
                wrap.insert("value".into(), other);
                v03::PartContent::Data(wrap)
            }
            v1::PartContent::Raw(b) => file(FileSource::Bytes(b)),
            v1::PartContent::Url(u) => file(FileSource::Uri(u)),
        };
        v03::Part {
            content,
            metadata,
            rest: p.rest,
        }
    }
}

impl From<v03::Part> for v1::Part {
    fn from(p: v03::Part) -> v1::Part {
        let part = |content, metadata, filename, media_type| v1::Part {
            content,
            metadata,
            filename,
            media_type,
            rest: Map::new(),
        };
        let mut out = match p.content {
            v03::PartContent::Text(t) => part(
                v1::PartContent::Text(t),
                p.metadata,
                String::new(),
                String::new(),
            ),
            v03::PartContent::Data(mut data) => {
                let mut metadata = p.metadata;
                let compat = metadata
                    .as_mut()
                    .and_then(|m| m.remove(DATA_PART_COMPAT_KEY))
                    .is_some_and(|v| v == Value::Bool(true));
                let value = match data.remove("value") {
                    Some(v) if compat => v,
                    other => {
                        if let Some(v) = other {
                            data.insert("value".into(), v);
                        }
                        Value::Object(data)
                    }
                };
                part(
                    v1::PartContent::Data(value),
                    truthy(metadata),
                    String::new(),
                    String::new(),
                )
            }
            v03::PartContent::File(f) => {
                let content = match f.source {
                    FileSource::Bytes(b) => v1::PartContent::Raw(b),
                    FileSource::Uri(u) => v1::PartContent::Url(u),
                };
                let mut p1 = part(
                    content,
                    p.metadata,
                    f.name.unwrap_or_default(),
                    f.mime_type.unwrap_or_default(),
                );
                p1.rest = f.rest;
                p1
            }
        };
        out.rest.extend(p.rest);
        out
    }
}

impl From<v1::Role> for v03::Role {
    /// User is user; anything else is the agent (as the SDK maps it).
    fn from(r: v1::Role) -> v03::Role {
        match r {
            v1::Role::User => v03::Role::User,
            _ => v03::Role::Agent,
        }
    }
}

impl From<v03::Role> for v1::Role {
    fn from(r: v03::Role) -> v1::Role {
        match r {
            v03::Role::User => v1::Role::User,
            v03::Role::Agent => v1::Role::Agent,
        }
    }
}

impl From<v1::Message> for v03::Message {
    fn from(m: v1::Message) -> v03::Message {
        v03::Message {
            kind: v03::MessageKind,
            message_id: m.message_id,
            context_id: non_empty_str(m.context_id),
            task_id: non_empty_str(m.task_id),
            role: m.role.into(),
            parts: m.parts.into_iter().map(Into::into).collect(),
            // `if core_msg.metadata`: an empty object is dropped (unlike on tasks).
            metadata: truthy(m.metadata),
            extensions: non_empty(m.extensions),
            reference_task_ids: non_empty(m.reference_task_ids),
            rest: m.rest,
        }
    }
}

impl From<v03::Message> for v1::Message {
    fn from(m: v03::Message) -> v1::Message {
        v1::Message {
            message_id: m.message_id,
            context_id: m.context_id.unwrap_or_default(),
            task_id: m.task_id.unwrap_or_default(),
            role: m.role.into(),
            parts: m.parts.into_iter().map(Into::into).collect(),
            metadata: truthy(m.metadata),
            extensions: m.extensions.unwrap_or_default(),
            reference_task_ids: m.reference_task_ids.unwrap_or_default(),
            rest: m.rest,
        }
    }
}

// ---- tasks ----

impl From<v1::TaskState> for v03::TaskState {
    /// A state v0.3 does not know (unspecified, or a newer one) is `unknown`.
    fn from(s: v1::TaskState) -> v03::TaskState {
        use v1::TaskState as S;
        match s {
            S::Submitted => v03::TaskState::Submitted,
            S::Working => v03::TaskState::Working,
            S::Completed => v03::TaskState::Completed,
            S::Failed => v03::TaskState::Failed,
            S::Canceled => v03::TaskState::Canceled,
            S::InputRequired => v03::TaskState::InputRequired,
            S::Rejected => v03::TaskState::Rejected,
            S::AuthRequired => v03::TaskState::AuthRequired,
            S::Unspecified | S::Unrecognized(_) => v03::TaskState::Unknown,
        }
    }
}

impl From<v03::TaskState> for v1::TaskState {
    fn from(s: v03::TaskState) -> v1::TaskState {
        use v03::TaskState as S;
        match s {
            S::Submitted => v1::TaskState::Submitted,
            S::Working => v1::TaskState::Working,
            S::Completed => v1::TaskState::Completed,
            S::Failed => v1::TaskState::Failed,
            S::Canceled => v1::TaskState::Canceled,
            S::InputRequired => v1::TaskState::InputRequired,
            S::Rejected => v1::TaskState::Rejected,
            S::AuthRequired => v1::TaskState::AuthRequired,
            S::Unknown => v1::TaskState::Unspecified,
        }
    }
}

impl From<v1::TaskStatus> for v03::TaskStatus {
    fn from(s: v1::TaskStatus) -> v03::TaskStatus {
        v03::TaskStatus {
            state: s.state.into(),
            message: s.message.map(Into::into),
            timestamp: s.timestamp,
            rest: s.rest,
        }
    }
}

impl From<v03::TaskStatus> for v1::TaskStatus {
    fn from(s: v03::TaskStatus) -> v1::TaskStatus {
        v1::TaskStatus {
            state: s.state.into(),
            message: s.message.map(Into::into),
            timestamp: s.timestamp.filter(|t| !t.is_empty()).map(|t| {
                match t.strip_suffix("+00:00") {
                    Some(head) => format!("{head}Z"),
                    None => t,
                }
            }),
            rest: s.rest,
        }
    }
}

impl From<v1::Artifact> for v03::Artifact {
    fn from(a: v1::Artifact) -> v03::Artifact {
        v03::Artifact {
            artifact_id: a.artifact_id,
            name: non_empty_str(a.name),
            description: non_empty_str(a.description),
            parts: a.parts.into_iter().map(Into::into).collect(),
            metadata: a.metadata,
            extensions: non_empty(a.extensions),
            rest: a.rest,
        }
    }
}

impl From<v03::Artifact> for v1::Artifact {
    fn from(a: v03::Artifact) -> v1::Artifact {
        v1::Artifact {
            artifact_id: a.artifact_id,
            name: a.name.unwrap_or_default(),
            description: a.description.unwrap_or_default(),
            parts: a.parts.into_iter().map(Into::into).collect(),
            metadata: truthy(a.metadata),
            extensions: a.extensions.unwrap_or_default(),
            rest: a.rest,
        }
    }
}

impl From<v1::Task> for v03::Task {
    fn from(t: v1::Task) -> v03::Task {
        v03::Task {
            kind: v03::TaskKind,
            id: t.id,
            context_id: t.context_id,
            status: t.status.into(),
            history: non_empty(t.history.into_iter().map(Into::into).collect()),
            artifacts: non_empty(t.artifacts.into_iter().map(Into::into).collect()),
            metadata: t.metadata,
            rest: t.rest,
        }
    }
}

impl From<v03::Task> for v1::Task {
    fn from(t: v03::Task) -> v1::Task {
        v1::Task {
            id: t.id,
            context_id: t.context_id,
            status: t.status.into(),
            artifacts: t
                .artifacts
                .unwrap_or_default()
                .into_iter()
                .map(Into::into)
                .collect(),
            history: t
                .history
                .unwrap_or_default()
                .into_iter()
                .map(Into::into)
                .collect(),
            metadata: truthy(t.metadata),
            rest: t.rest,
        }
    }
}

// ---- streaming events and results ----

impl From<v1::TaskStatusUpdateEvent> for v03::TaskStatusUpdateEvent {
    fn from(e: v1::TaskStatusUpdateEvent) -> v03::TaskStatusUpdateEvent {
        let status: v03::TaskStatus = e.status.into();
        v03::TaskStatusUpdateEvent {
            kind: v03::StatusUpdateKind,
            task_id: e.task_id,
            context_id: e.context_id,
            r#final: status.state.is_final(),
            status,
            metadata: e.metadata,
            rest: e.rest,
        }
    }
}

impl From<v03::TaskStatusUpdateEvent> for v1::TaskStatusUpdateEvent {
    fn from(e: v03::TaskStatusUpdateEvent) -> v1::TaskStatusUpdateEvent {
        v1::TaskStatusUpdateEvent {
            task_id: e.task_id,
            context_id: e.context_id,
            status: e.status.into(),
            metadata: truthy(e.metadata),
            rest: e.rest,
        }
    }
}

impl From<v1::TaskArtifactUpdateEvent> for v03::TaskArtifactUpdateEvent {
    fn from(e: v1::TaskArtifactUpdateEvent) -> v03::TaskArtifactUpdateEvent {
        v03::TaskArtifactUpdateEvent {
            kind: v03::ArtifactUpdateKind,
            task_id: e.task_id,
            context_id: e.context_id,
            artifact: e.artifact.into(),
            append: Some(e.append),
            last_chunk: Some(e.last_chunk),
            metadata: e.metadata,
            rest: e.rest,
        }
    }
}

impl From<v03::TaskArtifactUpdateEvent> for v1::TaskArtifactUpdateEvent {
    fn from(e: v03::TaskArtifactUpdateEvent) -> v1::TaskArtifactUpdateEvent {
        v1::TaskArtifactUpdateEvent {
            task_id: e.task_id,
            context_id: e.context_id,
            artifact: e.artifact.into(),
            append: e.append.unwrap_or(false),
            last_chunk: e.last_chunk.unwrap_or(false),
            metadata: truthy(e.metadata),
            rest: e.rest,
        }
    }
}

impl From<v1::StreamResponse> for v03::StreamResult {
    fn from(r: v1::StreamResponse) -> v03::StreamResult {
        match r {
            v1::StreamResponse::Task(t) => v03::StreamResult::Task(Box::new((*t).into())),
            v1::StreamResponse::Message(m) => v03::StreamResult::Message(Box::new((*m).into())),
            v1::StreamResponse::StatusUpdate(e) => {
                v03::StreamResult::StatusUpdate(Box::new((*e).into()))
            }
            v1::StreamResponse::ArtifactUpdate(e) => {
                v03::StreamResult::ArtifactUpdate(Box::new((*e).into()))
            }
        }
    }
}

impl From<v03::StreamResult> for v1::StreamResponse {
    fn from(r: v03::StreamResult) -> v1::StreamResponse {
        match r {
            v03::StreamResult::Task(t) => v1::StreamResponse::Task(Box::new((*t).into())),
            v03::StreamResult::Message(m) => v1::StreamResponse::Message(Box::new((*m).into())),
            v03::StreamResult::StatusUpdate(e) => {
                v1::StreamResponse::StatusUpdate(Box::new((*e).into()))
            }
            v03::StreamResult::ArtifactUpdate(e) => {
                v1::StreamResponse::ArtifactUpdate(Box::new((*e).into()))
            }
        }
    }
}

impl From<v1::SendMessageResponse> for v03::SendMessageResult {
    fn from(r: v1::SendMessageResponse) -> v03::SendMessageResult {
        match r {
            v1::SendMessageResponse::Task(t) => v03::SendMessageResult::Task(Box::new((*t).into())),
            v1::SendMessageResponse::Message(m) => {
                v03::SendMessageResult::Message(Box::new((*m).into()))
            }
        }
    }
}

impl From<v03::SendMessageResult> for v1::SendMessageResponse {
    fn from(r: v03::SendMessageResult) -> v1::SendMessageResponse {
        match r {
            v03::SendMessageResult::Task(t) => v1::SendMessageResponse::Task(Box::new((*t).into())),
            v03::SendMessageResult::Message(m) => {
                v1::SendMessageResponse::Message(Box::new((*m).into()))
            }
        }
    }
}

// ---- request params ----

impl From<v1::TaskPushNotificationConfig> for v03::PushNotificationConfig {
    fn from(c: v1::TaskPushNotificationConfig) -> v03::PushNotificationConfig {
        v03::PushNotificationConfig {
            url: c.url,
            id: non_empty_str(c.id),
            token: non_empty_str(c.token),
            authentication: c
                .authentication
                .map(|a| v03::PushNotificationAuthenticationInfo {
                    schemes: non_empty_str(a.scheme).into_iter().collect(),
                    credentials: non_empty_str(a.credentials),
                    rest: a.rest,
                }),
            rest: c.rest,
        }
    }
}

impl From<v03::PushNotificationConfig> for v1::TaskPushNotificationConfig {
    fn from(c: v03::PushNotificationConfig) -> v1::TaskPushNotificationConfig {
        v1::TaskPushNotificationConfig {
            tenant: String::new(),
            id: c.id.unwrap_or_default(),
            task_id: String::new(),
            url: c.url,
            token: c.token.unwrap_or_default(),
            authentication: c.authentication.map(|a| v1::AuthenticationInfo {
                // v1.0 has one scheme: the first.
                scheme: a.schemes.into_iter().next().unwrap_or_default(),
                credentials: a.credentials.unwrap_or_default(),
                rest: a.rest,
            }),
            rest: c.rest,
        }
    }
}

impl From<v1::SendMessageConfiguration> for v03::MessageSendConfiguration {
    fn from(c: v1::SendMessageConfiguration) -> v03::MessageSendConfiguration {
        v03::MessageSendConfiguration {
            accepted_output_modes: non_empty(c.accepted_output_modes),
            blocking: Some(!c.return_immediately),
            history_length: c.history_length.map(i64::from),
            push_notification_config: c.task_push_notification_config.map(Into::into),
            rest: c.rest,
        }
    }
}

/// A v0.3 history length in v1.0: unset for 0 (v0.3's "no limit") and for values outside
/// int32 (no v1.0 value says the same).
fn history_length(n: Option<i64>) -> Option<i32> {
    n.filter(|n| *n != 0).and_then(|n| i32::try_from(n).ok())
}

impl From<v03::MessageSendConfiguration> for v1::SendMessageConfiguration {
    fn from(c: v03::MessageSendConfiguration) -> v1::SendMessageConfiguration {
        v1::SendMessageConfiguration {
            accepted_output_modes: c.accepted_output_modes.unwrap_or_default(),
            task_push_notification_config: c.push_notification_config.map(Into::into),
            history_length: history_length(c.history_length),
            return_immediately: c.blocking.is_some_and(|b| !b),
            rest: c.rest,
        }
    }
}

impl From<v1::SendMessageRequest> for v03::MessageSendParams {
    fn from(r: v1::SendMessageRequest) -> v03::MessageSendParams {
        v03::MessageSendParams {
            message: r.message.into(),
            configuration: r.configuration.map(Into::into),
            metadata: r.metadata,
            rest: r.rest,
        }
    }
}

impl From<v03::MessageSendParams> for v1::SendMessageRequest {
    fn from(p: v03::MessageSendParams) -> v1::SendMessageRequest {
        v1::SendMessageRequest {
            tenant: String::new(),
            message: p.message.into(),
            configuration: p.configuration.map(Into::into),
            metadata: truthy(p.metadata),
            rest: p.rest,
        }
    }
}

impl From<v1::GetTaskRequest> for v03::TaskQueryParams {
    fn from(r: v1::GetTaskRequest) -> v03::TaskQueryParams {
        v03::TaskQueryParams {
            id: r.id,
            history_length: r.history_length.map(i64::from),
            metadata: None,
            rest: r.rest,
        }
    }
}

impl From<v03::TaskQueryParams> for v1::GetTaskRequest {
    fn from(p: v03::TaskQueryParams) -> v1::GetTaskRequest {
        v1::GetTaskRequest {
            tenant: String::new(),
            id: p.id,
            history_length: history_length(p.history_length),
            rest: p.rest,
        }
    }
}

impl From<v1::CancelTaskRequest> for v03::TaskIdParams {
    fn from(r: v1::CancelTaskRequest) -> v03::TaskIdParams {
        v03::TaskIdParams {
            id: r.id,
            metadata: r.metadata,
            rest: r.rest,
        }
    }
}

impl From<v03::TaskIdParams> for v1::CancelTaskRequest {
    fn from(p: v03::TaskIdParams) -> v1::CancelTaskRequest {
        v1::CancelTaskRequest {
            tenant: String::new(),
            id: p.id,
            metadata: truthy(p.metadata),
            rest: p.rest,
        }
    }
}

impl From<v1::SubscribeToTaskRequest> for v03::TaskIdParams {
    fn from(r: v1::SubscribeToTaskRequest) -> v03::TaskIdParams {
        v03::TaskIdParams {
            id: r.id,
            metadata: None,
            rest: r.rest,
        }
    }
}

impl From<v03::TaskIdParams> for v1::SubscribeToTaskRequest {
    fn from(p: v03::TaskIdParams) -> v1::SubscribeToTaskRequest {
        v1::SubscribeToTaskRequest {
            tenant: String::new(),
            id: p.id,
            rest: p.rest,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn to_v03<A, B>(v: Value) -> Value
    where
        A: serde::de::DeserializeOwned + Into<B>,
        B: serde::Serialize,
    {
        let a: A = serde_json::from_value(v).unwrap();
        serde_json::to_value(a.into()).unwrap()
    }

    #[test]
    fn data_parts_that_are_not_objects_are_wrapped_and_unwrapped() {
        let v03 = to_v03::<v1::Part, v03::Part>(json!({"data": [1, 2]}));
        assert_eq!(
            v03,
            json!({"kind": "data", "data": {"value": [1, 2]}, "metadata": {"data_part_compat": true}})
        );
        assert_eq!(to_v03::<v03::Part, v1::Part>(v03), json!({"data": [1, 2]}));
        // An object with a `value` member but no flag stays as it is.
        let plain = json!({"kind": "data", "data": {"value": 1}, "metadata": {"k": 1}});
        assert_eq!(
            to_v03::<v03::Part, v1::Part>(plain),
            json!({"data": {"value": 1}, "metadata": {"k": 1}})
        );
    }

    #[test]
    fn status_updates_gain_and_lose_final() {
        for (state, fin) in [
            ("TASK_STATE_COMPLETED", true),
            ("TASK_STATE_REJECTED", true),
            ("TASK_STATE_INPUT_REQUIRED", false),
            ("TASK_STATE_WORKING", false),
        ] {
            let e = json!({"taskId": "t", "contextId": "c", "status": {"state": state}});
            let v03 = to_v03::<v1::TaskStatusUpdateEvent, v03::TaskStatusUpdateEvent>(e.clone());
            assert_eq!(v03["final"], json!(fin), "{state}");
            assert_eq!(v03["kind"], json!("status-update"));
            assert_eq!(
                to_v03::<v03::TaskStatusUpdateEvent, v1::TaskStatusUpdateEvent>(v03),
                e
            );
        }
    }

    #[test]
    fn blocking_is_the_opposite_of_return_immediately() {
        let c = to_v03::<v1::SendMessageConfiguration, v03::MessageSendConfiguration>(
            json!({"returnImmediately": true}),
        );
        assert_eq!(c, json!({"blocking": false}));
        let back = to_v03::<v03::MessageSendConfiguration, v1::SendMessageConfiguration>(
            json!({"blocking": true, "historyLength": 0}),
        );
        assert_eq!(back, json!({}));
        let unset = to_v03::<v03::MessageSendConfiguration, v1::SendMessageConfiguration>(
            json!({"historyLength": 5000000000u64}),
        );
        assert_eq!(unset, json!({}));
    }

    #[test]
    fn timestamps_in_utc_offset_form_get_a_z() {
        let s = to_v03::<v03::TaskStatus, v1::TaskStatus>(
            json!({"state": "working", "timestamp": "2026-03-01T12:00:00.123+00:00"}),
        );
        assert_eq!(
            s,
            json!({"state": "TASK_STATE_WORKING", "timestamp": "2026-03-01T12:00:00.123Z"})
        );
    }
}
