//! Names fixed by the A2A specification and the reference SDK: paths, headers, versions,
//! protocol bindings, media types and error-detail types.
//!
//! Sources: the A2A specification (`a2aproject/A2A`, `docs/specification.md` at v1.0.x, and
//! the `v0.2.6`/`v0.3.0` tags for the older paths) and the Python SDK `a2a-sdk==1.3.0`
//! (`a2a/utils/constants.py`, `a2a/utils/error_handlers.py`, `a2a/extensions/common.py`,
//! `a2a/compat/v0_3/extension_headers.py`).

/// Where an agent serves its Agent Card (spec §8.2 "Well-Known URI", RFC 8615; SDK
/// `AGENT_CARD_WELL_KNOWN_PATH`). The v0.3.0 specification already uses this path.
pub const AGENT_CARD_PATH: &str = "/.well-known/agent-card.json";

/// The older card path: the A2A specification up to v0.2.6 (§5.3 "Recommended Location")
/// names `/.well-known/agent.json`; `a2a-sdk` 0.3.x kept it as
/// `PREV_AGENT_CARD_WELL_KNOWN_PATH` and many agents of that era still serve only it. The
/// v1.0 SDK no longer knows it. A card fetcher tries [`AGENT_CARD_PATH`] first.
pub const LEGACY_AGENT_CARD_PATH: &str = "/.well-known/agent.json";

/// The request header naming the protocol version the client speaks, `Major.Minor` (spec
/// §3.6.1, §14.2.1; SDK `VERSION_HEADER`). Case-insensitive as every HTTP header name (the
/// SDK's v0.3 transports send it lower-case). An absent or empty header means 0.3 (spec
/// §3.6.2 "Agents MUST interpret empty value as 0.3 version"); see
/// [`crate::ProtocolVersion::from_header`]. The v1.0 SDK's clients send `1.0` on every request
/// (`ClientFactory` sets it as a default header of their HTTP client), its v0.3 transports
/// `0.3`. Its server checks the header per method family (`a2a/utils/version_validator.py`,
/// applied in `jsonrpc_dispatcher.py` and `jsonrpc_adapter.py`): v1.0 method names need major
/// version 1, v0.3 names major 0, so a v1.0 method sent without the header is refused with
/// VersionNotSupported (-32009), which a v0.3 caller receives as -32603 (v0.3 has no -32009).
pub const VERSION_HEADER: &str = "A2A-Version";

/// The request header listing the extension URIs the client uses, comma-separated (spec
/// §3.2.6; SDK `HTTP_EXTENSION_HEADER`).
pub const EXTENSIONS_HEADER: &str = "A2A-Extensions";

/// The v0.3 name of [`EXTENSIONS_HEADER`] (SDK `LEGACY_HTTP_EXTENSION_HEADER`); the SDK's
/// v0.3 peers send and accept both.
pub const LEGACY_EXTENSIONS_HEADER: &str = "X-A2A-Extensions";

/// Protocol version 1.0 as written in `A2A-Version` and `AgentInterface.protocolVersion`
/// (SDK `PROTOCOL_VERSION_1_0`).
pub const PROTOCOL_VERSION_1_0: &str = "1.0";

/// Protocol version 0.3 (SDK `PROTOCOL_VERSION_0_3`). v0.3 cards wrote `"0.3.0"` in
/// `protocolVersion`; the patch part never matters (spec §3.6).
pub const PROTOCOL_VERSION_0_3: &str = "0.3";

/// `AgentInterface.protocolBinding` of the JSON-RPC binding (spec §9; SDK `TransportProtocol`).
/// Also v0.3's `preferredTransport`/`transport` value; v0.3 cards default to it.
pub const BINDING_JSONRPC: &str = "JSONRPC";
/// The HTTP+JSON (REST) binding (spec §11).
pub const BINDING_HTTP_JSON: &str = "HTTP+JSON";
/// The gRPC binding (spec §10).
pub const BINDING_GRPC: &str = "GRPC";

/// The `jsonrpc` member of every JSON-RPC 2.0 request and response. The SDK's server refuses
/// anything else with -32600.
pub const JSONRPC_VERSION: &str = "2.0";

/// Content type of JSON-RPC requests and answers (spec §9.1).
pub const JSON_MEDIA_TYPE: &str = "application/json";
/// Content type of a streamed answer (`SendStreamingMessage`, `SubscribeToTask`): Server-Sent
/// Events, each `data:` one JSON-RPC response whose `result` is a `StreamResponse` (spec §9.4.2).
pub const SSE_MEDIA_TYPE: &str = "text/event-stream";
/// The media type the spec registers for A2A payloads (spec §14.1.1; SDK
/// `A2A_JSON_MEDIA_TYPE`, used by the HTTP+JSON binding).
pub const A2A_JSON_MEDIA_TYPE: &str = "application/a2a+json";

/// The SSE `event:` name the v1.0 SDK server gives an event whose data is a JSON-RPC error
/// (`a2a/server/routes/jsonrpc_dispatcher.py`, `_create_response`). Its v0.3 adapter sends
/// errors as plain `data:` events.
pub const SSE_ERROR_EVENT: &str = "error";

/// `@type` of the `google.rpc.ErrorInfo` detail the SDK puts first in a v1.0 error's `data`
/// array (spec §9.5; SDK `ERROR_INFO_TYPE`).
pub const ERROR_INFO_TYPE: &str = "type.googleapis.com/google.rpc.ErrorInfo";
/// `@type` of a `google.rpc.BadRequest` detail (field violations of -32602; spec §9.5).
pub const BAD_REQUEST_TYPE: &str = "type.googleapis.com/google.rpc.BadRequest";
/// `domain` of the SDK's `ErrorInfo` details (SDK `A2A_DOMAIN`).
pub const ERROR_DOMAIN: &str = "a2a-protocol.org";

/// The metadata key the SDK sets on a v0.3 data part that wraps a v1.0 data value which is
/// not an object (`{"value": …}`; `a2a/compat/v0_3/conversions.py`, `to_compat_part`).
pub const DATA_PART_COMPAT_KEY: &str = "data_part_compat";
