//! v1.0 request messages: the JSON-RPC `params` of `SendMessage`/`SendStreamingMessage`,
//! `GetTask`, `CancelTask` and `SubscribeToTask` (spec §3.2.1, §3.2.2, §9.4).

use super::message::Message;
use crate::serde_util::{is_false, Map};
use serde::{Deserialize, Serialize};

/// Params of `SendMessage` and `SendStreamingMessage`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SendMessageRequest {
    /// Multi-tenant agents' tenant (also a path segment in the REST binding).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub tenant: String,
    pub message: Message,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub configuration: Option<SendMessageConfiguration>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map>,
    #[serde(flatten)]
    pub rest: Map,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SendMessageConfiguration {
    /// Media types the client accepts in the answer.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub accepted_output_modes: Vec<String>,
    /// Push notifications for this task (the gateway answers -32003).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_push_notification_config: Option<TaskPushNotificationConfig>,
    /// Unset: the agent's default; 0: no history; n: the last n messages (spec §3.2.4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history_length: Option<i32>,
    /// Answer at once (in `SUBMITTED`/`WORKING`) instead of at a terminal or interrupted
    /// state. v1.0 replaced v0.3's `blocking` (which meant the opposite) with it.
    #[serde(default, skip_serializing_if = "is_false")]
    pub return_immediately: bool,
    #[serde(flatten)]
    pub rest: Map,
}

/// Where and how an agent should push a task's updates.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskPushNotificationConfig {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub tenant: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub id: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub task_id: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub url: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub token: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authentication: Option<AuthenticationInfo>,
    #[serde(flatten)]
    pub rest: Map,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AuthenticationInfo {
    /// An HTTP authentication scheme (`Bearer`, …); v0.3 had a list `schemes`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub scheme: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub credentials: String,
    #[serde(flatten)]
    pub rest: Map,
}

/// Params of `GetTask`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GetTaskRequest {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub tenant: String,
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history_length: Option<i32>,
    #[serde(flatten)]
    pub rest: Map,
}

/// Params of `CancelTask`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CancelTaskRequest {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub tenant: String,
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map>,
    #[serde(flatten)]
    pub rest: Map,
}

/// Params of `SubscribeToTask`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubscribeToTaskRequest {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub tenant: String,
    pub id: String,
    #[serde(flatten)]
    pub rest: Map,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn send_message_params() {
        let v = json!({"message": {"messageId": "m", "role": "ROLE_USER",
            "parts": [{"text": "hi"}], "metadata": {"skill": "summarize"}},
            "configuration": {"historyLength": 0, "returnImmediately": true,
            "acceptedOutputModes": ["text/plain"]}, "metadata": {}});
        let p: SendMessageRequest = serde_json::from_value(v.clone()).unwrap();
        let c = p.configuration.as_ref().unwrap();
        assert_eq!(c.history_length, Some(0));
        assert!(c.return_immediately);
        assert_eq!(serde_json::to_value(&p).unwrap(), v);
        assert!(serde_json::from_value::<SendMessageRequest>(json!({})).is_err());
        assert!(serde_json::from_value::<GetTaskRequest>(json!({"historyLength": 2})).is_err());
        assert!(serde_json::from_value::<GetTaskRequest>(
            json!({"id": "t", "historyLength": 3000000000u64})
        )
        .is_err());
    }
}
