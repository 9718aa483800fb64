//! The packets: the envelope every packet shares, the request, the response and the error
//! packet (the gateway's own: the seed defines none). Fields the gateway does not read are
//! kept in `rest` and written back as they came.

use crate::answer::{Assistant, Format};
use crate::tools::ToolCall;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// `protocol.name` of every packet.
pub const PROTOCOL_NAME: &str = "laika.llmcp";
/// The one `protocol.version` read and written.
pub const PROTOCOL_VERSION: u64 = 1;

/// `protocol`: `{ "name": "laika.llmcp", "version": 1 }`. The version is kept as it came
/// (a string or a float is unsupported, not unreadable).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Protocol {
    pub name: String,
    pub version: Value,
}

impl Protocol {
    /// `laika.llmcp` version 1.
    pub fn v1() -> Protocol {
        Protocol {
            name: PROTOCOL_NAME.to_owned(),
            version: Value::from(PROTOCOL_VERSION),
        }
    }

    /// Whether this is `laika.llmcp` version 1.
    pub fn is_supported(&self) -> bool {
        self.name == PROTOCOL_NAME && self.version.as_u64() == Some(PROTOCOL_VERSION)
    }
}

/// `type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PacketType {
    Request,
    Response,
    /// The gateway's error packet (not in the seed).
    Error,
}

/// `conversation`: the id that groups turns and this turn's number.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Conversation {
    pub id: String,
    pub turn: u64,
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

/// `sender.role`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    User,
    Agent,
    Assistant,
    Tool,
}

/// `sender`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sender {
    pub role: Role,
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

impl Sender {
    /// `{ "role": role }`.
    pub fn new(role: Role) -> Sender {
        Sender {
            role,
            rest: Map::new(),
        }
    }
}

/// A request packet (`type: "request"`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Request {
    pub protocol: Protocol,
    pub id: String,
    #[serde(rename = "type")]
    pub kind: PacketType,
    pub created_at: String,
    pub conversation: Conversation,
    pub sender: Sender,
    pub input: Input,
    #[serde(default)]
    pub context: Context,
    #[serde(default)]
    pub output: Output,
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

/// `input`: what the user wants and what the agent wants done.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Input {
    /// Absent for a task with no user turn (a transform the agent runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_message: Option<UserMessage>,
    pub task: Task,
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

/// `input.user_message`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UserMessage {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    pub text: String,
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

/// `input.task`: its name (`web.summarize`) and arguments.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Task {
    pub name: String,
    #[serde(default)]
    pub args: Map<String, Value>,
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

/// `context`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Context {
    #[serde(default)]
    pub documents: Vec<Document>,
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

/// One context document. `content` is a typed object (`doc_type`, `url`, `title`,
/// `markdown`, …) kept whole.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Document {
    pub doc_id: String,
    pub kind: String,
    /// `"untrusted"` for anything derived from web content; absent is read as untrusted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trust: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<Value>,
    #[serde(default)]
    pub content: Value,
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

impl Document {
    /// Whether the document is data only: anything but an explicit `"trusted"`.
    pub fn is_untrusted(&self) -> bool {
        self.trust.as_deref() != Some("trusted")
    }
}

/// `output`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Output {
    #[serde(default)]
    pub format: Format,
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

/// A response packet (`type: "response"`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Response {
    pub protocol: Protocol,
    pub id: String,
    #[serde(rename = "type")]
    pub kind: PacketType,
    pub created_at: String,
    pub conversation: Conversation,
    pub sender: Sender,
    pub in_reply_to: InReplyTo,
    pub assistant: Assistant,
    /// Proposals only: the receiving agent's policy gate decides; nobody here runs them.
    #[serde(default)]
    pub tool_calls: Vec<ToolCall>,
    /// Fields the seed does not define (the gateway's `ldp_gateway` provenance).
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

/// `in_reply_to`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InReplyTo {
    pub request_id: String,
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

impl InReplyTo {
    /// `{ "request_id": id }`.
    pub fn new(request_id: impl Into<String>) -> InReplyTo {
        InReplyTo {
            request_id: request_id.into(),
            rest: Map::new(),
        }
    }
}

impl Response {
    /// The answer to `req`: its conversation, `sender.role = "assistant"`, `in_reply_to`
    /// its id.
    pub fn answering(
        req: &Request,
        id: String,
        created_at: String,
        assistant: Assistant,
        tool_calls: Vec<ToolCall>,
    ) -> Response {
        Response {
            protocol: Protocol::v1(),
            id,
            kind: PacketType::Response,
            created_at,
            conversation: req.conversation.clone(),
            sender: Sender::new(Role::Assistant),
            in_reply_to: InReplyTo::new(req.id.clone()),
            assistant,
            tool_calls,
            rest: Map::new(),
        }
    }
}

/// The gateway's error packet (`type: "error"`): the seed defines no error form, so this is
/// the response envelope with an `error` object in place of `assistant`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorPacket {
    pub protocol: Protocol,
    pub id: String,
    #[serde(rename = "type")]
    pub kind: PacketType,
    pub created_at: String,
    /// The request's, when it could be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation: Option<Conversation>,
    pub sender: Sender,
    /// The request's id, when it could be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_reply_to: Option<InReplyTo>,
    pub error: ErrorBody,
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

/// `error` of an error packet.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// A stable, upper-case code (`BAD_REQUEST`, `UNSUPPORTED_PROTOCOL`, the gateway's LDP
    /// codes).
    pub code: String,
    pub message: String,
    /// Whether the same request may succeed later.
    pub retryable: bool,
    /// The protocols understood (on `UNSUPPORTED_PROTOCOL`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub supported: Option<Vec<Protocol>>,
}

/// What could be read of a packet that may be malformed: its id and conversation, for the
/// error packet that answers it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Probe {
    pub id: Option<String>,
    pub conversation: Option<Conversation>,
}

impl Probe {
    /// Reads what it can; nothing when the bytes are not a JSON object.
    pub fn of(bytes: &[u8]) -> Probe {
        #[derive(Deserialize)]
        struct Loose {
            #[serde(default)]
            id: Option<Value>,
            #[serde(default)]
            conversation: Option<Value>,
        }
        let Ok(loose) = serde_json::from_slice::<Loose>(bytes) else {
            return Probe::default();
        };
        Probe {
            id: loose
                .id
                .and_then(|v| v.as_str().map(str::to_owned))
                .filter(|id| id.len() <= crate::MAX_ID_BYTES),
            conversation: loose
                .conversation
                .and_then(|v| serde_json::from_value(v).ok())
                .filter(|c: &Conversation| c.id.len() <= crate::MAX_ID_BYTES),
        }
    }
}

impl ErrorPacket {
    /// An error answering what `probe` read of a request.
    pub fn new(probe: Probe, id: String, created_at: String, error: ErrorBody) -> ErrorPacket {
        ErrorPacket {
            protocol: Protocol::v1(),
            id,
            kind: PacketType::Error,
            created_at,
            conversation: probe.conversation,
            sender: Sender::new(Role::Assistant),
            in_reply_to: probe.id.map(InReplyTo::new),
            error,
            rest: Map::new(),
        }
    }
}
