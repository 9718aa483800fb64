//! JSON-RPC method names of both protocol versions.
//!
//! v1.0: PascalCase names equal to the gRPC methods (spec §5.3, §9.1 "Method Naming"); the
//! SDK's `JsonRpcTransport` sends them (`a2a/client/transports/jsonrpc.py`) with `params` =
//! `MessageToDict(request)`, the ProtoJSON of the request message (`SendMessageRequest`,
//! `GetTaskRequest`, …), and its server maps them in `JsonRpcDispatcher.METHOD_TO_MODEL`
//! (`a2a/server/routes/jsonrpc_dispatcher.py`). v0.3: slash names (v0.3.0 spec §7; SDK
//! `JSONRPC03Adapter.METHOD_TO_MODEL`, `a2a/compat/v0_3/jsonrpc_adapter.py`), with v0.3
//! params (`MessageSendParams`, `TaskQueryParams`, `TaskIdParams`).

use crate::version::Dialect;

/// `SendMessage` (v1.0).
pub const SEND_MESSAGE: &str = "SendMessage";
/// `SendStreamingMessage` (v1.0): answered with SSE.
pub const SEND_STREAMING_MESSAGE: &str = "SendStreamingMessage";
/// `GetTask` (v1.0).
pub const GET_TASK: &str = "GetTask";
/// `ListTasks` (v1.0 only; v0.3 offered it over gRPC/REST, not JSON-RPC).
pub const LIST_TASKS: &str = "ListTasks";
/// `CancelTask` (v1.0).
pub const CANCEL_TASK: &str = "CancelTask";
/// `SubscribeToTask` (v1.0): answered with SSE.
pub const SUBSCRIBE_TO_TASK: &str = "SubscribeToTask";
pub const CREATE_TASK_PUSH_NOTIFICATION_CONFIG: &str = "CreateTaskPushNotificationConfig";
pub const GET_TASK_PUSH_NOTIFICATION_CONFIG: &str = "GetTaskPushNotificationConfig";
pub const LIST_TASK_PUSH_NOTIFICATION_CONFIGS: &str = "ListTaskPushNotificationConfigs";
pub const DELETE_TASK_PUSH_NOTIFICATION_CONFIG: &str = "DeleteTaskPushNotificationConfig";
pub const GET_EXTENDED_AGENT_CARD: &str = "GetExtendedAgentCard";

/// `message/send` (v0.3).
pub const V03_SEND_MESSAGE: &str = "message/send";
/// `message/stream` (v0.3): answered with SSE.
pub const V03_SEND_STREAMING_MESSAGE: &str = "message/stream";
/// `tasks/get` (v0.3).
pub const V03_GET_TASK: &str = "tasks/get";
/// `tasks/cancel` (v0.3).
pub const V03_CANCEL_TASK: &str = "tasks/cancel";
/// `tasks/resubscribe` (v0.3): answered with SSE.
pub const V03_SUBSCRIBE_TO_TASK: &str = "tasks/resubscribe";
pub const V03_SET_TASK_PUSH_NOTIFICATION_CONFIG: &str = "tasks/pushNotificationConfig/set";
pub const V03_GET_TASK_PUSH_NOTIFICATION_CONFIG: &str = "tasks/pushNotificationConfig/get";
pub const V03_LIST_TASK_PUSH_NOTIFICATION_CONFIGS: &str = "tasks/pushNotificationConfig/list";
pub const V03_DELETE_TASK_PUSH_NOTIFICATION_CONFIG: &str = "tasks/pushNotificationConfig/delete";
pub const V03_GET_EXTENDED_AGENT_CARD: &str = "agent/getAuthenticatedExtendedCard";

/// One A2A operation, whichever name it arrived under.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Method {
    SendMessage,
    SendStreamingMessage,
    GetTask,
    ListTasks,
    CancelTask,
    SubscribeToTask,
    CreateTaskPushNotificationConfig,
    GetTaskPushNotificationConfig,
    ListTaskPushNotificationConfigs,
    DeleteTaskPushNotificationConfig,
    GetExtendedAgentCard,
}

impl Method {
    pub const ALL: [Method; 11] = [
        Method::SendMessage,
        Method::SendStreamingMessage,
        Method::GetTask,
        Method::ListTasks,
        Method::CancelTask,
        Method::SubscribeToTask,
        Method::CreateTaskPushNotificationConfig,
        Method::GetTaskPushNotificationConfig,
        Method::ListTaskPushNotificationConfigs,
        Method::DeleteTaskPushNotificationConfig,
        Method::GetExtendedAgentCard,
    ];

    /// The method's name in `dialect`; `None` where that version has no JSON-RPC method for it
    /// (`ListTasks` in v0.3).
    pub fn name(self, dialect: Dialect) -> Option<&'static str> {
        use Method::*;
        Some(match (dialect, self) {
            (Dialect::V1, SendMessage) => SEND_MESSAGE,
            (Dialect::V1, SendStreamingMessage) => SEND_STREAMING_MESSAGE,
            (Dialect::V1, GetTask) => GET_TASK,
            (Dialect::V1, ListTasks) => LIST_TASKS,
            (Dialect::V1, CancelTask) => CANCEL_TASK,
            (Dialect::V1, SubscribeToTask) => SUBSCRIBE_TO_TASK,
            (Dialect::V1, CreateTaskPushNotificationConfig) => CREATE_TASK_PUSH_NOTIFICATION_CONFIG,
            (Dialect::V1, GetTaskPushNotificationConfig) => GET_TASK_PUSH_NOTIFICATION_CONFIG,
            (Dialect::V1, ListTaskPushNotificationConfigs) => LIST_TASK_PUSH_NOTIFICATION_CONFIGS,
            (Dialect::V1, DeleteTaskPushNotificationConfig) => DELETE_TASK_PUSH_NOTIFICATION_CONFIG,
            (Dialect::V1, GetExtendedAgentCard) => GET_EXTENDED_AGENT_CARD,
            (Dialect::V03, SendMessage) => V03_SEND_MESSAGE,
            (Dialect::V03, SendStreamingMessage) => V03_SEND_STREAMING_MESSAGE,
            (Dialect::V03, GetTask) => V03_GET_TASK,
            (Dialect::V03, ListTasks) => return None,
            (Dialect::V03, CancelTask) => V03_CANCEL_TASK,
            (Dialect::V03, SubscribeToTask) => V03_SUBSCRIBE_TO_TASK,
            (Dialect::V03, CreateTaskPushNotificationConfig) => {
                V03_SET_TASK_PUSH_NOTIFICATION_CONFIG
            }
            (Dialect::V03, GetTaskPushNotificationConfig) => V03_GET_TASK_PUSH_NOTIFICATION_CONFIG,
            (Dialect::V03, ListTaskPushNotificationConfigs) => {
                V03_LIST_TASK_PUSH_NOTIFICATION_CONFIGS
            }
            (Dialect::V03, DeleteTaskPushNotificationConfig) => {
                V03_DELETE_TASK_PUSH_NOTIFICATION_CONFIG
            }
            (Dialect::V03, GetExtendedAgentCard) => V03_GET_EXTENDED_AGENT_CARD,
        })
    }

    /// The operation and the dialect of a method name (exact, case-sensitive, as both SDK
    /// servers match); `None` for an unknown name (-32601).
    pub fn from_name(name: &str) -> Option<(Method, Dialect)> {
        for dialect in [Dialect::V1, Dialect::V03] {
            for m in Method::ALL {
                if m.name(dialect) == Some(name) {
                    return Some((m, dialect));
                }
            }
        }
        None
    }

    /// Whether the answer is an SSE stream rather than one JSON-RPC response.
    pub fn is_streaming(self) -> bool {
        matches!(self, Method::SendStreamingMessage | Method::SubscribeToTask)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_are_distinct() {
        let mut seen = std::collections::HashSet::new();
        for d in [Dialect::V1, Dialect::V03] {
            for m in Method::ALL {
                if let Some(n) = m.name(d) {
                    assert!(seen.insert(n), "{n} twice");
                    assert_eq!(Method::from_name(n), Some((m, d)));
                }
            }
        }
        assert_eq!(seen.len(), 21);
        assert_eq!(Method::from_name("sendMessage"), None);
        assert_eq!(Method::from_name("tasks/list"), None);
        assert_eq!(
            Method::from_name("tasks/resubscribe"),
            Some((Method::SubscribeToTask, Dialect::V03))
        );
    }
}
