//! A2A 1.0 shapes: the ProtoJSON of `a2a.proto` (package `lf.a2a.v1`) as the SDK writes it
//! with `google.protobuf.json_format.MessageToDict` (`a2a/types/a2a_pb2.pyi`; spec §4, §5.5).
//!
//! ProtoJSON rules followed here: camelCase member names; enums by value name; a field at its
//! default (empty string, `false`, empty list, enum value 0) is left out, except fields with
//! explicit presence (`optional` in the proto: `historyLength`, `streaming`, …, and message
//! fields such as `metadata`), which are kept when set. So strings and lists that may be
//! absent are plain `String`/`Vec` (empty = absent) and presence-tracked fields are `Option`.
//!
//! Required by our readers (a missing one is an error): the ids that name an object
//! (`Message.messageId`, `Task.id`, `Artifact.artifactId`, an event's `taskId`, a request's
//! `id`), `Message.role` and `parts`, `Task.status`, `Artifact.parts`, an event's `status` or
//! `artifact`, `SendMessageRequest.message`. Everything else defaults. Members we do not
//! model are kept in `rest` and written back.
//!
//! Not accepted (where a full ProtoJSON parser would be): snake_case member names (the spec
//! requires camelCase, §5.5), `null` for a string, list or bool member, and int32 values
//! written as strings.

mod message;
mod params;
mod task;

pub use message::{Message, Part, PartContent, Role};
pub use params::{
    AuthenticationInfo, CancelTaskRequest, GetTaskRequest, SendMessageConfiguration,
    SendMessageRequest, SubscribeToTaskRequest, TaskPushNotificationConfig,
};
pub use task::{
    Artifact, SendMessageResponse, StreamResponse, Task, TaskArtifactUpdateEvent, TaskState,
    TaskStatus, TaskStatusUpdateEvent,
};
