//! JSON-RPC 2.0 envelopes as A2A uses them: requests, responses, error objects and codes.
//!
//! Sources: the A2A specification §5.4 (error code table), §9.3 (request), §9.5 (error
//! objects, `data` as an array of `@type` details); the SDK's server
//! (`a2a/server/routes/jsonrpc_dispatcher.py`: `handle_requests`, the order of its checks),
//! error models (`a2a/utils/errors.py`: `JSON_RPC_ERROR_CODE_MAP`, `A2A_ERROR_MAPPING`, the
//! default messages; `a2a/server/jsonrpc_models.py`), error bodies
//! (`a2a/server/request_handlers/response_helpers.py`: `build_error_response`;
//! `a2a/utils/error_handlers.py`: `build_error_details`) and v0.3 adapter
//! (`a2a/compat/v0_3/jsonrpc_adapter.py`: `_to_v03_jsonrpc_error`).

use crate::consts::{ERROR_DOMAIN, ERROR_INFO_TYPE, JSONRPC_VERSION};
use crate::serde_util::{present, Map};
use serde::de::{self, Deserializer, IgnoredAny};
use serde::{Deserialize, Serialize, Serializer};
use serde_json::value::RawValue;
use serde_json::{Number, Value};
use std::borrow::Cow;
use std::fmt;

/// The `"jsonrpc": "2.0"` member: written as is, read only as is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct JsonRpc2;

impl Serialize for JsonRpc2 {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(JSONRPC_VERSION)
    }
}

impl<'de> Deserialize<'de> for JsonRpc2 {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = Cow::<'de, str>::deserialize(d)?;
        if s == JSONRPC_VERSION {
            Ok(JsonRpc2)
        } else {
            Err(de::Error::custom("`jsonrpc` must be exactly \"2.0\""))
        }
    }
}

/// A request id: a string, an integer or `null` (JSON-RPC 2.0 §4; the SDK's server refuses
/// booleans, fractions and structures as ids, answering with `id: null`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Id {
    String(String),
    /// An integer (`i64` or `u64` range), kept as sent.
    Number(Number),
    #[default]
    Null,
}

impl From<&str> for Id {
    fn from(s: &str) -> Id {
        Id::String(s.to_owned())
    }
}

impl From<String> for Id {
    fn from(s: String) -> Id {
        Id::String(s)
    }
}

impl From<i64> for Id {
    fn from(n: i64) -> Id {
        Id::Number(n.into())
    }
}

impl fmt::Display for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Id::String(s) => write!(f, "{s:?}"),
            Id::Number(n) => write!(f, "{n}"),
            Id::Null => f.write_str("null"),
        }
    }
}

impl Serialize for Id {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Id::String(v) => s.serialize_str(v),
            Id::Number(n) => n.serialize(s),
            Id::Null => s.serialize_unit(),
        }
    }
}

impl<'de> Deserialize<'de> for Id {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match Value::deserialize(d)? {
            Value::String(s) => Ok(Id::String(s)),
            Value::Number(n) if n.is_i64() || n.is_u64() => Ok(Id::Number(n)),
            Value::Null => Ok(Id::Null),
            _ => Err(de::Error::custom(
                "a JSON-RPC id is a string, an integer or null",
            )),
        }
    }
}

/// `Some` for a present `id`, `Some(Id::Null)` for `"id": null` (absent stays `None`).
fn present_id<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Id>, D::Error> {
    Id::deserialize(d).map(Some)
}

/// `Some` for a present member, even `null` (for `result`, which may be `null`).
fn present_t<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
}

/// A JSON-RPC request as written by a client (and by the gateway calling an A2A agent).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Request<P = Box<RawValue>> {
    pub jsonrpc: JsonRpc2,
    /// `None`: no `id` member (a notification).
    #[serde(
        default,
        deserialize_with = "present_id",
        skip_serializing_if = "Option::is_none"
    )]
    pub id: Option<Id>,
    pub method: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<P>,
}

impl<P> Request<P> {
    pub fn new(id: impl Into<Id>, method: &str, params: P) -> Request<P> {
        Request {
            jsonrpc: JsonRpc2,
            id: Some(id.into()),
            method: method.to_owned(),
            params: Some(params),
        }
    }
}

/// Why a request body is not a JSON-RPC request, in the order the SDK's server checks.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    /// Not JSON (-32700). The SDK answers with `id: null`.
    #[error("invalid JSON: {0}")]
    Parse(#[source] serde_json::Error),
    /// JSON, but not one request object (-32600): a batch, a non-object, a missing or wrong
    /// `jsonrpc`, a missing or non-string `method`, an id that is not a string, integer or
    /// null, or `params` that is not an object.
    #[error("invalid request: {reason}")]
    Invalid {
        /// The request's id when it could be read (the answer carries it), else `Null`.
        id: Id,
        reason: &'static str,
    },
}

impl RequestError {
    pub fn code(&self) -> ErrorCode {
        match self {
            RequestError::Parse(_) => ErrorCode::JsonParse,
            RequestError::Invalid { .. } => ErrorCode::InvalidRequest,
        }
    }

    /// The id to answer with.
    pub fn id(&self) -> Id {
        match self {
            RequestError::Parse(_) => Id::Null,
            RequestError::Invalid { id, .. } => id.clone(),
        }
    }

    /// The JSON-RPC error object to answer with (plain, as the SDK's dispatcher writes its
    /// own -32700/-32600: no `data`).
    pub fn to_error(&self) -> ErrorObject {
        ErrorObject::new(self.code(), bounded(&self.to_string()))
    }
}

/// Why `params` do not fit the method (-32602).
#[derive(Debug, thiserror::Error)]
pub enum ParamsError {
    #[error("params must be a JSON object")]
    NotAnObject,
    #[error("invalid params: {0}")]
    Invalid(#[source] serde_json::Error),
}

impl ParamsError {
    /// The JSON-RPC error object to answer with: -32602, the reason (bounded in length: serde
    /// quotes offending values).
    pub fn to_error(&self) -> ErrorObject {
        ErrorObject::new(ErrorCode::InvalidParams, bounded(&self.to_string()))
    }
}

/// An error message cut to at most 512 bytes (at a character boundary).
fn bounded(s: &str) -> String {
    const MAX: usize = 512;
    if s.len() <= MAX {
        return s.to_owned();
    }
    let mut end = MAX;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

/// A request read from a body without copying or parsing its `params` (they are parsed once,
/// into the method's type, by [`IncomingRequest::params`]).
#[derive(Clone, Debug)]
pub struct IncomingRequest<'a> {
    /// `None`: no `id` member.
    pub id: Option<Id>,
    pub method: Cow<'a, str>,
    pub params: Option<&'a RawValue>,
}

/// The members of a request, each as its JSON text (`null` included: a present `null` is
/// `Some`).
#[derive(Deserialize)]
struct LooseRequest<'a> {
    #[serde(borrow, default, deserialize_with = "raw")]
    jsonrpc: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "raw")]
    id: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "raw")]
    method: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "raw")]
    params: Option<&'a RawValue>,
}

fn raw<'de, D: Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&'de RawValue>::deserialize(d).map(Some)
}

impl<'a> IncomingRequest<'a> {
    /// Reads one JSON-RPC request. Checks as the SDK's server does: JSON at all (-32700), one
    /// object and not a batch, `jsonrpc` exactly `"2.0"`, an id of an allowed type, a string
    /// `method` (-32600). Unknown members are ignored. Method names are not checked here
    /// ([`crate::Method::from_name`]; -32601).
    pub fn parse(body: &'a [u8]) -> Result<IncomingRequest<'a>, RequestError> {
        let invalid = |id: Id, reason| RequestError::Invalid { id, reason };
        match body.iter().find(|b| !b.is_ascii_whitespace()) {
            Some(b'{') => {}
            Some(b'[') => {
                serde_json::from_slice::<IgnoredAny>(body).map_err(RequestError::Parse)?;
                return Err(invalid(Id::Null, "batch requests are not supported"));
            }
            _ => {
                serde_json::from_slice::<IgnoredAny>(body).map_err(RequestError::Parse)?;
                return Err(invalid(Id::Null, "a request is a JSON object"));
            }
        }
        let loose: LooseRequest<'a> = serde_json::from_slice(body).map_err(|e| {
            if e.is_data() {
                // Valid JSON, but a member is repeated.
                invalid(Id::Null, "a member appears twice")
            } else {
                RequestError::Parse(e)
            }
        })?;
        let id = match loose.id {
            None => None,
            Some(raw) => match serde_json::from_str::<Id>(raw.get()) {
                Ok(id) => Some(id),
                Err(_) => return Err(invalid(Id::Null, "id must be a string, an integer or null")),
            },
        };
        let answer_id = id.clone().unwrap_or_default();
        let version = loose
            .jsonrpc
            .and_then(|raw| serde_json::from_str::<JsonRpc2>(raw.get()).ok());
        if version.is_none() {
            return Err(invalid(answer_id, "'jsonrpc' must be exactly '2.0'"));
        }
        let method = match loose.method {
            Some(raw) => match serde_json::from_str::<Cow<'a, str>>(raw.get()) {
                Ok(m) if !m.is_empty() => m,
                _ => return Err(invalid(answer_id, "method must be a non-empty string")),
            },
            None => return Err(invalid(answer_id, "method is required")),
        };
        Ok(IncomingRequest {
            id,
            method,
            params: loose.params,
        })
    }

    /// The params as `T` (absent params read as `{}`, as the SDK's server does; anything but
    /// an object is refused, so a struct is never filled from an array by position).
    pub fn params<T: Deserialize<'a>>(&self) -> Result<T, ParamsError> {
        let text: &'a str = match self.params {
            Some(raw) => raw.get(),
            None => "{}",
        };
        if !text.starts_with('{') {
            return Err(ParamsError::NotAnObject);
        }
        serde_json::from_str(text).map_err(ParamsError::Invalid)
    }
}

/// A JSON-RPC response: exactly one of `result` and `error` (see [`Response::outcome`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(bound(deserialize = "T: Deserialize<'de>"))]
pub struct Response<T = Box<RawValue>> {
    pub jsonrpc: JsonRpc2,
    /// The request's id (`null` when it could not be read).
    #[serde(default)]
    pub id: Id,
    #[serde(
        default = "none",
        deserialize_with = "present_t",
        skip_serializing_if = "Option::is_none"
    )]
    pub result: Option<T>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorObject>,
}

fn none<T>() -> Option<T> {
    None
}

impl<T> Response<T> {
    pub fn success(id: Id, result: T) -> Response<T> {
        Response {
            jsonrpc: JsonRpc2,
            id,
            result: Some(result),
            error: None,
        }
    }

    pub fn error(id: Id, error: ErrorObject) -> Response<T> {
        Response {
            jsonrpc: JsonRpc2,
            id,
            result: None,
            error: Some(error),
        }
    }

    /// The error if there is one (it wins, as in the SDK's client), else the result; `None`
    /// when the response has neither (not a JSON-RPC response: the caller's
    /// InvalidAgentResponse).
    pub fn outcome(self) -> Option<Result<T, ErrorObject>> {
        match (self.error, self.result) {
            (Some(e), _) => Some(Err(e)),
            (None, Some(r)) => Some(Ok(r)),
            (None, None) => None,
        }
    }
}

/// A JSON-RPC error object. In v1.0 `data` is an array of `@type` details whose first is a
/// `google.rpc.ErrorInfo` (spec §9.5, SDK `build_error_details`); in v0.3 it is free-form
/// (the SDK's v0.3 adapter writes the error's data object, or `null`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ErrorObject {
    pub code: i64,
    #[serde(default)]
    pub message: String,
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub data: Option<Value>,
}

impl ErrorObject {
    /// An error without `data` (the SDK's JSON-RPC-level errors: -32700, -32600, -32601 from
    /// its dispatcher).
    pub fn new(code: ErrorCode, message: impl Into<String>) -> ErrorObject {
        ErrorObject {
            code: code.code(),
            message: message.into(),
            data: None,
        }
    }

    /// An A2A error as the v1.0 SDK writes it: `data` = one `google.rpc.ErrorInfo` with the
    /// code's reason, the A2A domain and `metadata` (SDK `build_error_details`; the
    /// `BadRequest` detail it adds for field violations is the caller's to append).
    pub fn a2a(code: ErrorCode, message: impl Into<String>, metadata: Map) -> ErrorObject {
        let mut info = Map::new();
        info.insert("@type".into(), ERROR_INFO_TYPE.into());
        info.insert("reason".into(), code.reason().into());
        info.insert("domain".into(), ERROR_DOMAIN.into());
        info.insert("metadata".into(), Value::Object(metadata));
        ErrorObject {
            code: code.code(),
            message: message.into(),
            data: Some(Value::Array(vec![Value::Object(info)])),
        }
    }

    /// The known code, if it is one.
    pub fn known_code(&self) -> Option<ErrorCode> {
        ErrorCode::from_code(self.code)
    }

    /// The `metadata` of the first `google.rpc.ErrorInfo` detail of a v1.0 error.
    pub fn error_info_metadata(&self) -> Option<&Map> {
        self.data
            .as_ref()?
            .as_array()?
            .iter()
            .filter_map(Value::as_object)
            .find(|d| d.get("@type").and_then(Value::as_str) == Some(ERROR_INFO_TYPE))?
            .get("metadata")?
            .as_object()
    }

    /// This error for a v0.3 caller, as the SDK's v0.3 adapter writes it: a code v0.3 does not
    /// define (-32008, -32009, anything unknown) becomes -32603; `data` is the ErrorInfo
    /// metadata when there is some, else `null` (the adapter dumps `data: None` as `null`).
    pub fn to_v03(&self) -> ErrorObject {
        let code = match self.known_code() {
            Some(c) if c.in_v03() => self.code,
            _ => ErrorCode::Internal.code(),
        };
        let data = match self.error_info_metadata() {
            Some(m) if !m.is_empty() => Value::Object(m.clone()),
            _ => Value::Null,
        };
        ErrorObject {
            code,
            message: self.message.clone(),
            data: Some(data),
        }
    }
}

/// The error codes of A2A's JSON-RPC binding (spec §5.4, §9.5; SDK `JSON_RPC_ERROR_CODE_MAP`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    /// -32700: the body is not JSON.
    JsonParse,
    /// -32600: not a valid request object.
    InvalidRequest,
    /// -32601: no such method.
    MethodNotFound,
    /// -32602: the params do not fit the method.
    InvalidParams,
    /// -32603.
    Internal,
    /// -32001: no such task, or not the caller's (spec §3.3.2: do not tell them apart).
    TaskNotFound,
    /// -32002: the task is in a state that cannot be canceled.
    TaskNotCancelable,
    /// -32003: push notifications are not offered.
    PushNotificationNotSupported,
    /// -32004: an operation (or an aspect of it) the agent does not offer.
    UnsupportedOperation,
    /// -32005: a media type the agent does not accept or produce.
    ContentTypeNotSupported,
    /// -32006: an agent's answer does not fit the method.
    InvalidAgentResponse,
    /// -32007: an extended card is announced but not configured.
    ExtendedAgentCardNotConfigured,
    /// -32008 (new in v1.0): the card requires an extension the client did not declare.
    ExtensionSupportRequired,
    /// -32009 (new in v1.0): the `A2A-Version` is not spoken.
    VersionNotSupported,
}

impl ErrorCode {
    pub const ALL: [ErrorCode; 14] = [
        ErrorCode::JsonParse,
        ErrorCode::InvalidRequest,
        ErrorCode::MethodNotFound,
        ErrorCode::InvalidParams,
        ErrorCode::Internal,
        ErrorCode::TaskNotFound,
        ErrorCode::TaskNotCancelable,
        ErrorCode::PushNotificationNotSupported,
        ErrorCode::UnsupportedOperation,
        ErrorCode::ContentTypeNotSupported,
        ErrorCode::InvalidAgentResponse,
        ErrorCode::ExtendedAgentCardNotConfigured,
        ErrorCode::ExtensionSupportRequired,
        ErrorCode::VersionNotSupported,
    ];

    pub fn code(self) -> i64 {
        match self {
            ErrorCode::JsonParse => -32700,
            ErrorCode::InvalidRequest => -32600,
            ErrorCode::MethodNotFound => -32601,
            ErrorCode::InvalidParams => -32602,
            ErrorCode::Internal => -32603,
            ErrorCode::TaskNotFound => -32001,
            ErrorCode::TaskNotCancelable => -32002,
            ErrorCode::PushNotificationNotSupported => -32003,
            ErrorCode::UnsupportedOperation => -32004,
            ErrorCode::ContentTypeNotSupported => -32005,
            ErrorCode::InvalidAgentResponse => -32006,
            ErrorCode::ExtendedAgentCardNotConfigured => -32007,
            ErrorCode::ExtensionSupportRequired => -32008,
            ErrorCode::VersionNotSupported => -32009,
        }
    }

    pub fn from_code(code: i64) -> Option<ErrorCode> {
        ErrorCode::ALL.into_iter().find(|c| c.code() == code)
    }

    /// The SDK's default message for the error (`a2a/utils/errors.py`, the `message` of each
    /// `A2AError` class; the spec's §9.5 table words the JSON-RPC ones differently).
    pub fn default_message(self) -> &'static str {
        match self {
            ErrorCode::JsonParse => "Invalid JSON payload",
            ErrorCode::InvalidRequest => "Invalid Request",
            ErrorCode::MethodNotFound => "Method not found",
            ErrorCode::InvalidParams => "Invalid params",
            ErrorCode::Internal => "Internal error",
            ErrorCode::TaskNotFound => "Task not found",
            ErrorCode::TaskNotCancelable => "Task cannot be canceled",
            ErrorCode::PushNotificationNotSupported => "Push Notification is not supported",
            ErrorCode::UnsupportedOperation => "This operation is not supported",
            ErrorCode::ContentTypeNotSupported => "Incompatible content types",
            ErrorCode::InvalidAgentResponse => "Invalid agent response",
            ErrorCode::ExtendedAgentCardNotConfigured => {
                "Authenticated Extended Card is not configured"
            }
            ErrorCode::ExtensionSupportRequired => "Extension support required",
            ErrorCode::VersionNotSupported => "Version not supported",
        }
    }

    /// The `ErrorInfo.reason` (SDK `A2A_ERROR_MAPPING`; `UNKNOWN_ERROR` for a parse error,
    /// which that table lacks).
    pub fn reason(self) -> &'static str {
        match self {
            ErrorCode::JsonParse => "UNKNOWN_ERROR",
            ErrorCode::InvalidRequest => "INVALID_REQUEST",
            ErrorCode::MethodNotFound => "METHOD_NOT_FOUND",
            ErrorCode::InvalidParams => "INVALID_PARAMS",
            ErrorCode::Internal => "INTERNAL_ERROR",
            ErrorCode::TaskNotFound => "TASK_NOT_FOUND",
            ErrorCode::TaskNotCancelable => "TASK_NOT_CANCELABLE",
            ErrorCode::PushNotificationNotSupported => "PUSH_NOTIFICATION_NOT_SUPPORTED",
            ErrorCode::UnsupportedOperation => "UNSUPPORTED_OPERATION",
            ErrorCode::ContentTypeNotSupported => "CONTENT_TYPE_NOT_SUPPORTED",
            ErrorCode::InvalidAgentResponse => "INVALID_AGENT_RESPONSE",
            ErrorCode::ExtendedAgentCardNotConfigured => "EXTENDED_AGENT_CARD_NOT_CONFIGURED",
            ErrorCode::ExtensionSupportRequired => "EXTENSION_SUPPORT_REQUIRED",
            ErrorCode::VersionNotSupported => "VERSION_NOT_SUPPORTED",
        }
    }

    /// Whether v0.3 defines the code (its JSON Schema's `A2AError` union: the JSON-RPC codes
    /// and -32001…-32007).
    pub fn in_v03(self) -> bool {
        !matches!(
            self,
            ErrorCode::ExtensionSupportRequired | ErrorCode::VersionNotSupported
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(body: &str) -> Result<IncomingRequest<'_>, RequestError> {
        IncomingRequest::parse(body.as_bytes())
    }

    fn refused(body: &str) -> (i64, Id) {
        match parse(body) {
            Ok(r) => panic!("{body} accepted as {r:?}"),
            Err(e) => (e.code().code(), e.id()),
        }
    }

    #[test]
    fn reads_requests() {
        let r = parse(r#" {"jsonrpc":"2.0","id":"a","method":"SendMessage","params":{"x":1}}"#)
            .unwrap();
        assert_eq!(r.id, Some(Id::from("a")));
        assert_eq!(r.method, "SendMessage");
        assert_eq!(r.params.unwrap().get(), r#"{"x":1}"#);
        let r = parse(r#"{"jsonrpc":"2.0","id":null,"method":"tasks\/get"}"#).unwrap();
        assert_eq!(r.id, Some(Id::Null));
        assert_eq!(r.method, "tasks/get");
        let r = parse(r#"{"jsonrpc":"2.0","method":"GetTask","extra":[1]}"#).unwrap();
        assert_eq!(r.id, None);
        let r = parse(r#"{"jsonrpc":"2.0","id":18446744073709551615,"method":"m"}"#).unwrap();
        assert_eq!(
            serde_json::to_string(&r.id).unwrap(),
            "18446744073709551615"
        );
    }

    #[test]
    fn refuses_what_the_sdk_refuses() {
        assert_eq!(refused("{"), (-32700, Id::Null));
        assert_eq!(refused(""), (-32700, Id::Null));
        assert_eq!(refused("[1,"), (-32700, Id::Null));
        assert_eq!(refused("\"x\" y"), (-32700, Id::Null));
        assert_eq!(refused("[]"), (-32600, Id::Null));
        assert_eq!(refused(r#"[{"jsonrpc":"2.0"}]"#), (-32600, Id::Null));
        assert_eq!(refused("42"), (-32600, Id::Null));
        assert_eq!(refused(r#"{"id":1,"method":"m"}"#), (-32600, Id::from(1)));
        assert_eq!(
            refused(r#"{"jsonrpc":"1.0","id":"z","method":"m"}"#),
            (-32600, Id::from("z"))
        );
        assert_eq!(
            refused(r#"{"jsonrpc":2.0,"id":"z","method":"m"}"#),
            (-32600, Id::from("z"))
        );
        assert_eq!(
            refused(r#"{"jsonrpc":"2.0","id":1}"#),
            (-32600, Id::from(1))
        );
        assert_eq!(
            refused(r#"{"jsonrpc":"2.0","id":1,"method":""}"#),
            (-32600, Id::from(1))
        );
        assert_eq!(
            refused(r#"{"jsonrpc":"2.0","id":1,"method":7}"#),
            (-32600, Id::from(1))
        );
        for id in ["true", "1.5", "{}", "[1]"] {
            let body = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"m"}}"#);
            assert_eq!(refused(&body), (-32600, Id::Null), "{body}");
        }
        assert_eq!(
            refused(r#"{"jsonrpc":"2.0","id":1,"method":"a","method":"b"}"#).0,
            -32600
        );
    }

    #[test]
    fn params_are_an_object() {
        #[derive(Deserialize, Debug)]
        #[allow(dead_code)]
        struct P {
            id: String,
        }
        let r = parse(r#"{"jsonrpc":"2.0","id":1,"method":"m","params":["x"]}"#).unwrap();
        assert!(matches!(r.params::<P>(), Err(ParamsError::NotAnObject)));
        let r = parse(r#"{"jsonrpc":"2.0","id":1,"method":"m","params":null}"#).unwrap();
        assert!(matches!(r.params::<P>(), Err(ParamsError::NotAnObject)));
        let r = parse(r#"{"jsonrpc":"2.0","id":1,"method":"m"}"#).unwrap();
        let e = r.params::<P>().unwrap_err();
        assert_eq!(e.to_error().code, -32602);
        let r = parse(r#"{"jsonrpc":"2.0","id":1,"method":"m","params":{"id":"t"}}"#).unwrap();
        assert_eq!(r.params::<P>().unwrap().id, "t");
        let long = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"m","params":{{"id":{}}}}}"#,
            "1".repeat(5000)
        );
        let r = parse(&long).unwrap();
        assert!(r.params::<P>().unwrap_err().to_error().message.len() < 600);
    }

    #[test]
    fn responses() {
        let ok: Response<Value> =
            serde_json::from_str(r#"{"jsonrpc":"2.0","id":"x","result":null}"#).unwrap();
        assert_eq!(ok.clone().outcome(), Some(Ok(Value::Null)));
        assert_eq!(
            serde_json::to_value(&ok).unwrap(),
            json!({"jsonrpc": "2.0", "id": "x", "result": null})
        );
        let err: Response<Value> = serde_json::from_str(
            r#"{"jsonrpc":"2.0","id":3,"error":{"code":-32001,"message":"m","data":null}}"#,
        )
        .unwrap();
        assert_eq!(
            serde_json::to_value(&err).unwrap(),
            json!({"jsonrpc": "2.0", "id": 3, "error": {"code": -32001, "message": "m", "data": null}})
        );
        assert!(matches!(err.outcome(), Some(Err(e)) if e.code == -32001));
        let neither: Response<Value> = serde_json::from_str(r#"{"jsonrpc":"2.0","id":3}"#).unwrap();
        assert_eq!(neither.outcome(), None);
        assert!(serde_json::from_str::<Response<Value>>(r#"{"jsonrpc":"1","id":3}"#).is_err());
    }

    #[test]
    fn error_objects() {
        let mut md = Map::new();
        md.insert("taskId".into(), json!("t1"));
        let e = ErrorObject::a2a(ErrorCode::TaskNotFound, "Task not found", md);
        assert_eq!(
            serde_json::to_value(&e).unwrap(),
            json!({"code": -32001, "message": "Task not found", "data": [{
                "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                "reason": "TASK_NOT_FOUND", "domain": "a2a-protocol.org",
                "metadata": {"taskId": "t1"}}]})
        );
        assert_eq!(
            serde_json::to_value(e.to_v03()).unwrap(),
            json!({"code": -32001, "message": "Task not found", "data": {"taskId": "t1"}})
        );
        let v = ErrorObject::a2a(ErrorCode::VersionNotSupported, "no", Map::new());
        assert_eq!(
            serde_json::to_value(v.to_v03()).unwrap(),
            json!({"code": -32603, "message": "no", "data": null})
        );
        for c in ErrorCode::ALL {
            assert_eq!(ErrorCode::from_code(c.code()), Some(c));
        }
        assert_eq!(ErrorCode::from_code(-32010), None);
    }
}
