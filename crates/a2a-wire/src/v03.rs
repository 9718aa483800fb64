//! A2A 0.3 shapes: the JSON Schema of the v0.3 specification (`specification/json/a2a.json`
//! at tag `v0.3.0`), as the SDK's compat layer models and writes it (`a2a/compat/v0_3/types.py`,
//! dumped with `model_dump(mode="json", by_alias=True, exclude_none=True)`).
//!
//! Unlike v1.0: objects carry a `kind` discriminator (`"task"`, `"message"`,
//! `"status-update"`, `"artifact-update"`; parts `"text"`, `"data"`, `"file"`), enums are
//! lower-case (`"user"`, `"input-required"`), a file part nests `file: {bytes|uri, mimeType,
//! name}`, data parts hold objects only, status updates carry `final`, a request's
//! configuration says `blocking` rather than `returnImmediately`, and absent is not the same as
//! empty (`None` fields are left out, empty lists and `false` are written). A missing `kind`
//! is read as the SDK's client reads it (by the members present); written, `kind` is always
//! there.

mod message;
mod params;
mod task;

pub use message::{FileContent, FileSource, Message, MessageKind, Part, PartContent, Role};
pub use params::{
    MessageSendConfiguration, MessageSendParams, PushNotificationAuthenticationInfo,
    PushNotificationConfig, TaskIdParams, TaskQueryParams,
};
pub use task::{
    Artifact, ArtifactUpdateKind, SendMessageResult, StatusUpdateKind, StreamResult, Task,
    TaskArtifactUpdateEvent, TaskKind, TaskState, TaskStatus, TaskStatusUpdateEvent,
};
