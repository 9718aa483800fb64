//! The bridges' requests and answers, shared by the load bench (`load.rs`) and the
//! allocation bench (`allocs.rs`).

use bytes::Bytes;

/// The bridges of other agent protocols (issues 26 and 27), each sent the same echo task as the
/// LDP rows' in its protocol: a `laika.llmcp` v1 request, an LLMX `HEADER` + `REQ`, a LADP
/// `task-init`, an A2A v1.0 `SendMessage` (no `contextId`).
#[derive(Clone, Copy)]
pub enum Bridge {
    Llmcp,
    Llmx,
    Ladp,
    A2a,
}

/// The bridge rows' names (the load bench's `--only bridges` selects them all).
pub const BRIDGE_PATHS: [&str; 4] = ["llmcp", "llmx", "ladp", "a2a"];
/// The bridges, in the order of [`BRIDGE_PATHS`].
pub const BRIDGES: [Bridge; 4] = [Bridge::Llmcp, Bridge::Llmx, Bridge::Ladp, Bridge::A2a];

impl Bridge {
    /// The bench row's name.
    pub fn name(self) -> &'static str {
        BRIDGE_PATHS[self as usize]
    }

    /// Where the gateway serves it.
    pub fn path(self) -> &'static str {
        match self {
            Bridge::Llmcp => "/llmcp",
            Bridge::Llmx => "/llmx",
            Bridge::Ladp => "/ladp",
            Bridge::A2a => "/a2a",
        }
    }

    /// Request `i` of the connection whose sender is `sender` (LLMX sequence numbers and
    /// LADP rate limits are per sender; A2A message ids unique).
    pub fn body(self, sender: &str, i: u64) -> Bytes {
        let text = match self {
            Bridge::Llmcp => serde_json::json!({
                "protocol": {"name": "laika.llmcp", "version": 1},
                "id": format!("req-{i}"),
                "type": "request",
                "created_at": "2026-01-28T12:34:56.789Z",
                "conversation": {"id": sender, "turn": i},
                "sender": {"role": "agent"},
                "input": {
                    "user_message": {"id": format!("u-{i}"), "text": "hello"},
                    "task": {"name": "echo", "args": {}}
                },
                "output": {"format": "markdown"}
            })
            .to_string(),
            Bridge::Llmx => format!(
                "HEADER:{{f:{sender},t:gateway,s:{i}}}\nREQ:{{o:\"hello\",pr:3,exp:[\"echo\"]}}\n"
            ),
            Bridge::Ladp => {
                format!("(msg task-init {sender} gateway {i} (data (skill echo) (task \"hello\")))")
            }
            Bridge::A2a => serde_json::json!({
                "jsonrpc": "2.0", "id": i, "method": "SendMessage",
                "params": {"message": {"messageId": format!("{sender}-{i}"), "role": "ROLE_USER",
                    "parts": [{"text": "hello"}], "metadata": {"skill": "echo"}}}
            })
            .to_string(),
        };
        Bytes::from(text)
    }

    /// Whether the answer is the task's result in the bridge's protocol.
    pub fn answered(self, a: &ldp_client::transport::HttpAnswer) -> bool {
        if !a.head.status.is_success() {
            return false;
        }
        let body = String::from_utf8_lossy(&a.body);
        match self {
            Bridge::Llmcp => serde_json::from_str::<serde_json::Value>(&body)
                .is_ok_and(|v| v["type"] == "response" && v["assistant"].is_object()),
            Bridge::Llmx => body.contains("OBS:") && body.contains("s:OK"),
            Bridge::Ladp => body.contains("synthesis"),
            Bridge::A2a => body.contains("TASK_STATE_COMPLETED"),
        }
    }
}
