//! Golden tests of the A2A wire types (`a2a-wire`) against the reference SDK, `a2a-sdk` 1.3.0.
//!
//! `tests/interop/a2a_golden.py emit` builds sample objects with the SDK's own types and prints
//! them as the SDK puts them on the wire (v1.0 ProtoJSON, the v0.3 compat shapes, JSON-RPC
//! requests, responses and errors), with the SDK's conversion of each into the other version.
//! Here each is read into our type and written back, converted with our `From` impls, and
//! rebuilt with our builders (errors, served cards, card interfaces); then
//! `a2a_golden.py check` has the SDK parse all of it strictly (unknown members refused, the
//! canonical form required) and compare it with its own objects. The checked-in snapshots of
//! `crates/a2a-wire/tests/snapshots/` go through the same check.
//!
//! The interpreter is `$LDP_PY_A2A` (`eval "$(bash .ci/run venvs)"` sets it), else the venv
//! `.ci/run` leaves in its cache; without either the test prints a skip note and passes,
//! unless `LDP_INTEROP_REQUIRED=1` (CI), where it fails.

use crate::support::process::{output_with_input, output_within, py_script, text, ROOT};
use ::a2a_wire::{v03, v1, AgentCard, ErrorCode, ErrorObject, IncomingRequest, Method, Response};
use ::a2a_wire::{Dialect, Request};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A cold start of the SDK (protobuf, pydantic) on a loaded 2-core machine: generous.
const PY_WITHIN: Duration = Duration::from_secs(120);

/// The A2A venv's interpreter, or `None` (after a note) when there is none and it is not
/// required.
fn a2a_python() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("LDP_PY_A2A").filter(|v| !v.is_empty()) {
        let p = PathBuf::from(p);
        assert!(
            p.exists(),
            "LDP_PY_A2A={} does not exist; rebuild the venvs with `bash .ci/run venvs`",
            p.display()
        );
        return Some(p);
    }
    let cache = std::env::var_os("LDP_CI_CACHE")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache/ldp-gateway-ci")));
    if let Some(p) = cache.map(|c| c.join("venv-a2a/bin/python")) {
        if p.exists() {
            return Some(p);
        }
    }
    let required = std::env::var("LDP_INTEROP_REQUIRED").is_ok_and(|v| v == "1");
    assert!(
        !required,
        "LDP_PY_A2A is not set and no venv-a2a exists, but LDP_INTEROP_REQUIRED=1: build it \
         with `eval \"$(bash .ci/run venvs)\"`"
    );
    eprintln!(
        "skipping the A2A wire golden tests: LDP_PY_A2A is not set and no venv-a2a exists; \
         `eval \"$(bash .ci/run venvs)\"` enables them"
    );
    None
}

/// Reads `v` (as text, the way it arrives) into `T` and writes it back.
fn round<T: DeserializeOwned + Serialize>(v: &Value) -> Result<Value, String> {
    let t: T = serde_json::from_str(&v.to_string()).map_err(|e| format!("read: {e}"))?;
    serde_json::to_value(&t).map_err(|e| format!("write: {e}"))
}

/// Reads `v` into `A`, converts it to `B` and writes that.
fn conv<A: DeserializeOwned + Into<B>, B: Serialize>(v: &Value) -> Result<Value, String> {
    let a: A = serde_json::from_str(&v.to_string()).map_err(|e| format!("read: {e}"))?;
    serde_json::to_value(a.into()).map_err(|e| format!("write: {e}"))
}

fn round_typed(ty: &str, v: &Value, case: &Value) -> Result<Value, String> {
    match ty {
        "v1.AgentCard" | "v03.AgentCard" | "served.AgentCard" => round::<AgentCard>(v),
        "v1.Message" => round::<v1::Message>(v),
        "v1.Task" => round::<v1::Task>(v),
        "v1.TaskStatusUpdateEvent" => round::<v1::TaskStatusUpdateEvent>(v),
        "v1.TaskArtifactUpdateEvent" => round::<v1::TaskArtifactUpdateEvent>(v),
        "v1.StreamResponse" => round::<v1::StreamResponse>(v),
        "v1.SendMessageResponse" => round::<v1::SendMessageResponse>(v),
        "v1.SendMessageRequest" => round::<v1::SendMessageRequest>(v),
        "v1.GetTaskRequest" => round::<v1::GetTaskRequest>(v),
        "v1.CancelTaskRequest" => round::<v1::CancelTaskRequest>(v),
        "v1.SubscribeToTaskRequest" => round::<v1::SubscribeToTaskRequest>(v),
        "v03.Message" => round::<v03::Message>(v),
        "v03.Task" => round::<v03::Task>(v),
        "v03.TaskStatusUpdateEvent" => round::<v03::TaskStatusUpdateEvent>(v),
        "v03.TaskArtifactUpdateEvent" => round::<v03::TaskArtifactUpdateEvent>(v),
        "v03.StreamResult" => round::<v03::StreamResult>(v),
        "v03.SendMessageResult" => round::<v03::SendMessageResult>(v),
        "v03.MessageSendParams" => round::<v03::MessageSendParams>(v),
        "v03.TaskQueryParams" => round::<v03::TaskQueryParams>(v),
        "v03.TaskIdParams" => round::<v03::TaskIdParams>(v),
        "jsonrpc.Request" => round_request(v),
        "jsonrpc.Response" => round_response(v, case["method"].as_str().unwrap_or_default()),
        "jsonrpc.Error" => round::<Response<Value>>(v),
        other => Err(format!("no Rust type for {other}")),
    }
}

fn convert(from: &str, to: &str, v: &Value) -> Result<Value, String> {
    match (from, to) {
        ("v1.AgentCard", "v03.AgentCard") => {
            let card: AgentCard = serde_json::from_value(v.clone()).map_err(|e| e.to_string())?;
            card.v03_card()
                .ok_or_else(|| "no v0.3 interface".to_owned())
        }
        ("v1.Message", _) => conv::<v1::Message, v03::Message>(v),
        ("v1.Task", _) => conv::<v1::Task, v03::Task>(v),
        ("v1.TaskStatusUpdateEvent", _) => {
            conv::<v1::TaskStatusUpdateEvent, v03::TaskStatusUpdateEvent>(v)
        }
        ("v1.TaskArtifactUpdateEvent", _) => {
            conv::<v1::TaskArtifactUpdateEvent, v03::TaskArtifactUpdateEvent>(v)
        }
        ("v1.StreamResponse", _) => conv::<v1::StreamResponse, v03::StreamResult>(v),
        ("v1.SendMessageResponse", _) => conv::<v1::SendMessageResponse, v03::SendMessageResult>(v),
        ("v1.SendMessageRequest", _) => conv::<v1::SendMessageRequest, v03::MessageSendParams>(v),
        ("v1.GetTaskRequest", _) => conv::<v1::GetTaskRequest, v03::TaskQueryParams>(v),
        ("v1.CancelTaskRequest", _) => conv::<v1::CancelTaskRequest, v03::TaskIdParams>(v),
        ("v1.SubscribeToTaskRequest", _) => {
            conv::<v1::SubscribeToTaskRequest, v03::TaskIdParams>(v)
        }
        ("v03.Message", _) => conv::<v03::Message, v1::Message>(v),
        ("v03.Task", _) => conv::<v03::Task, v1::Task>(v),
        ("v03.TaskStatusUpdateEvent", _) => {
            conv::<v03::TaskStatusUpdateEvent, v1::TaskStatusUpdateEvent>(v)
        }
        ("v03.TaskArtifactUpdateEvent", _) => {
            conv::<v03::TaskArtifactUpdateEvent, v1::TaskArtifactUpdateEvent>(v)
        }
        ("v03.StreamResult", _) => conv::<v03::StreamResult, v1::StreamResponse>(v),
        ("v03.MessageSendParams", _) => conv::<v03::MessageSendParams, v1::SendMessageRequest>(v),
        ("v03.TaskQueryParams", _) => conv::<v03::TaskQueryParams, v1::GetTaskRequest>(v),
        ("v03.TaskIdParams", "v1.CancelTaskRequest") => {
            conv::<v03::TaskIdParams, v1::CancelTaskRequest>(v)
        }
        ("v03.TaskIdParams", "v1.SubscribeToTaskRequest") => {
            conv::<v03::TaskIdParams, v1::SubscribeToTaskRequest>(v)
        }
        _ => Err(format!("no conversion from {from} to {to}")),
    }
}

/// Reads a request body as the gateway's ingress will (`IncomingRequest::parse`, the method's
/// params type) and writes the request back.
fn round_request(v: &Value) -> Result<Value, String> {
    let body = v.to_string();
    let req = IncomingRequest::parse(body.as_bytes()).map_err(|e| e.to_string())?;
    let (method, dialect) =
        Method::from_name(&req.method).ok_or_else(|| format!("unknown method {}", req.method))?;
    fn typed<'a, T: serde::Deserialize<'a> + Serialize>(
        req: &IncomingRequest<'a>,
    ) -> Result<Value, String> {
        let params: T = req.params().map_err(|e| e.to_string())?;
        serde_json::to_value(params).map_err(|e| e.to_string())
    }
    let params = match (dialect, method) {
        (Dialect::V1, Method::SendMessage | Method::SendStreamingMessage) => {
            typed::<v1::SendMessageRequest>(&req)?
        }
        (Dialect::V1, Method::GetTask) => typed::<v1::GetTaskRequest>(&req)?,
        (Dialect::V1, Method::CancelTask) => typed::<v1::CancelTaskRequest>(&req)?,
        (Dialect::V1, Method::SubscribeToTask) => typed::<v1::SubscribeToTaskRequest>(&req)?,
        (Dialect::V03, Method::SendMessage | Method::SendStreamingMessage) => {
            typed::<v03::MessageSendParams>(&req)?
        }
        (Dialect::V03, Method::GetTask) => typed::<v03::TaskQueryParams>(&req)?,
        (Dialect::V03, Method::CancelTask | Method::SubscribeToTask) => {
            typed::<v03::TaskIdParams>(&req)?
        }
        other => return Err(format!("no params type for {other:?}")),
    };
    let out = Request {
        jsonrpc: ::a2a_wire::jsonrpc::JsonRpc2,
        id: req.id.clone(),
        method: req.method.to_string(),
        params: Some(params),
    };
    serde_json::to_value(out).map_err(|e| e.to_string())
}

fn round_response(v: &Value, method: &str) -> Result<Value, String> {
    match Method::from_name(method) {
        Some((Method::SendMessage, Dialect::V1)) => round::<Response<v1::SendMessageResponse>>(v),
        Some((Method::SendStreamingMessage | Method::SubscribeToTask, Dialect::V1)) => {
            round::<Response<v1::StreamResponse>>(v)
        }
        Some((Method::GetTask | Method::CancelTask, Dialect::V1)) => round::<Response<v1::Task>>(v),
        Some((Method::SendMessage, Dialect::V03)) => round::<Response<v03::SendMessageResult>>(v),
        Some((Method::SendStreamingMessage | Method::SubscribeToTask, Dialect::V03)) => {
            round::<Response<v03::StreamResult>>(v)
        }
        Some((Method::GetTask | Method::CancelTask, Dialect::V03)) => {
            round::<Response<v03::Task>>(v)
        }
        other => Err(format!("no result type for {method} ({other:?})")),
    }
}

/// The error the SDK wrote, rebuilt with our builder from its code and ErrorInfo metadata
/// (and the code's default message), and its v0.3 form by our `to_v03`.
fn built_errors(v: &Value) -> Result<(Value, Value), String> {
    let resp: Response<Value> = serde_json::from_value(v.clone()).map_err(|e| e.to_string())?;
    let err = resp.error.clone().ok_or("no error")?;
    let code = err.known_code().ok_or("unknown code")?;
    let metadata = err.error_info_metadata().cloned().unwrap_or_default();
    let ours = ErrorObject::a2a(code, code.default_message(), metadata);
    let v1 = serde_json::to_value(Response::<Value>::error(resp.id.clone(), ours))
        .map_err(|e| e.to_string())?;
    let v03 = serde_json::to_value(Response::<Value>::error(resp.id, err.to_v03()))
        .map_err(|e| e.to_string())?;
    Ok((v1, v03))
}

/// Everything our side writes for one golden case: `(kind, json)` pairs, or why it could not.
fn run_case(case: &Value) -> Vec<(String, Result<Value, String>)> {
    let ty = case["type"].as_str().unwrap_or_default();
    let v = &case["json"];
    let mut out = vec![("roundtrip".to_owned(), round_typed(ty, v, case))];
    for kind in ["to_v03", "to_v1"] {
        if let Some(to) = case.get(kind) {
            let to_ty = to["type"].as_str().unwrap_or_default();
            out.push((kind.to_owned(), convert(ty, to_ty, v)));
        }
    }
    let expect = &case["expect"];
    if expect.get("served").is_some() {
        let card = serde_json::from_value::<AgentCard>(v.clone()).map_err(|e| e.to_string());
        out.push(("served".to_owned(), card.map(|c| c.served_json())));
    }
    if expect.get("interfaces").is_some() {
        let card = serde_json::from_value::<AgentCard>(v.clone()).map_err(|e| e.to_string());
        let interfaces =
            card.and_then(|c| serde_json::to_value(c.interfaces()).map_err(|e| e.to_string()));
        out.push(("interfaces".to_owned(), interfaces));
    }
    if ty == "jsonrpc.Error" && expect.get("v03").is_some() {
        match built_errors(v) {
            Ok((v1, v03)) => {
                out.push(("built_error".to_owned(), Ok(v1)));
                out.push(("built_error_v03".to_owned(), Ok(v03)));
            }
            Err(e) => out.push(("built_error".to_owned(), Err(e))),
        }
    }
    out
}

/// The checked-in snapshots, `<type>__<name>.json`, as `(file name, type, json)`.
fn snapshots() -> Vec<(String, String, Value)> {
    let dir = Path::new(ROOT).join("crates/a2a-wire/tests/snapshots");
    let mut out = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let Some(stem) = name.strip_suffix(".json") else {
            continue;
        };
        let (ty, _) = stem
            .split_once("__")
            .unwrap_or_else(|| panic!("snapshot {name} is not named <type>__<name>.json"));
        let json = serde_json::from_str(&std::fs::read_to_string(&path).unwrap())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        out.push((name.clone(), ty.to_owned(), json));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wire_types_agree_with_the_sdk() {
    let Some(py) = a2a_python() else { return };
    let mut emit = py_script(&py, "a2a_golden.py");
    emit.arg("emit");
    let out = output_within(emit, PY_WITHIN).await;
    assert!(
        out.status.success(),
        "a2a_golden.py emit failed:\n{}",
        text(&out.stderr)
    );
    let emitted: Value = serde_json::from_slice(&out.stdout).expect("emit prints JSON");
    let cases = emitted["cases"].as_array().expect("cases");
    assert!(cases.len() > 80, "only {} golden cases", cases.len());

    let mut results = Vec::new();
    let mut ours_failed = Vec::new();
    for case in cases {
        let name = case["name"].as_str().unwrap_or_default();
        for (kind, r) in run_case(case) {
            match r {
                Ok(json) => results.push(json!({"name": name, "kind": kind, "json": json})),
                Err(e) => ours_failed.push(format!("{name} ({kind}): {e}")),
            }
        }
    }
    let snaps = snapshots();
    assert!(snaps.len() >= 10, "only {} snapshots", snaps.len());
    for (name, ty, json) in &snaps {
        results.push(json!({"name": name, "kind": "snapshot", "type": ty, "json": json}));
    }
    assert!(
        ours_failed.is_empty(),
        "our types refused what the SDK wrote:\n{}",
        ours_failed.join("\n")
    );

    let mut check = py_script(&py, "a2a_golden.py");
    check.arg("check");
    let input = json!({"results": results}).to_string().into_bytes();
    let out = output_with_input(check, input, PY_WITHIN).await;
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|_| {
        panic!(
            "a2a_golden.py check printed no summary (exit {:?}):\n{}\n{}",
            out.status.code(),
            text(&out.stdout),
            text(&out.stderr)
        )
    });
    let failures = summary["failures"].as_array().cloned().unwrap_or_default();
    let report: Vec<String> = failures
        .iter()
        .map(|f| {
            format!(
                "{} ({}): {}",
                f["name"],
                f["kind"],
                f["error"].as_str().unwrap_or("")
            )
        })
        .collect();
    assert!(
        out.status.success() && summary["ok"] == json!(true),
        "the SDK disagrees with our JSON in {} of {} results:\n{}",
        failures.len(),
        results.len(),
        report.join("\n\n")
    );
    assert_eq!(summary["checked"], json!(results.len()));
    eprintln!(
        "a2a_wire: {} SDK cases, {} results and {} snapshots agreed",
        cases.len(),
        results.len(),
        snaps.len()
    );
}

/// What the SDK's JSON-RPC client sends carries the `A2A-Version` our constants name, and the
/// SDK's constants match ours (paths, header names, versions, bindings, the error-detail
/// domain): read from the SDK module by module, not from memory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn constants_match_the_sdk() {
    use ::a2a_wire::consts::*;
    let Some(py) = a2a_python() else { return };
    let code = r#"
import json
import a2a.server.routes
from a2a.utils import constants as c
from a2a.utils import error_handlers as h
from a2a.utils.errors import JSON_RPC_ERROR_CODE_MAP, A2A_ERROR_REASONS
from a2a.extensions.common import HTTP_EXTENSION_HEADER
from a2a.compat.v0_3.extension_headers import LEGACY_HTTP_EXTENSION_HEADER
from a2a.server.routes.jsonrpc_dispatcher import JsonRpcDispatcher
from a2a.compat.v0_3.jsonrpc_adapter import JSONRPC03Adapter, _V03_ERROR_CODES
print(json.dumps({
  "card": c.AGENT_CARD_WELL_KNOWN_PATH, "version_header": c.VERSION_HEADER,
  "v1": c.PROTOCOL_VERSION_1_0, "v03": c.PROTOCOL_VERSION_0_3, "current": c.PROTOCOL_VERSION_CURRENT,
  "bindings": [c.TransportProtocol.JSONRPC.value, c.TransportProtocol.HTTP_JSON.value, c.TransportProtocol.GRPC.value],
  "media": c.A2A_JSON_MEDIA_TYPE, "ext": HTTP_EXTENSION_HEADER, "legacy_ext": LEGACY_HTTP_EXTENSION_HEADER,
  "error_info": h.ERROR_INFO_TYPE, "bad_request": h.BAD_REQUEST_TYPE, "domain": h.A2A_DOMAIN,
  "v1_methods": sorted(JsonRpcDispatcher.METHOD_TO_MODEL), "v03_methods": sorted(JSONRPC03Adapter.METHOD_TO_MODEL),
  "codes": {cls.__name__: code for cls, code in JSON_RPC_ERROR_CODE_MAP.items()},
  "reasons": {cls.__name__: r for cls, r in A2A_ERROR_REASONS.items()},
  "messages": {cls.__name__: cls.message for cls in JSON_RPC_ERROR_CODE_MAP},
  "v03_codes": sorted(_V03_ERROR_CODES),
}))
"#;
    let out = output_within(crate::support::process::py_code(&py, code), PY_WITHIN).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let sdk: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(sdk["card"], AGENT_CARD_PATH);
    assert_eq!(sdk["version_header"], VERSION_HEADER);
    assert_eq!(sdk["v1"], PROTOCOL_VERSION_1_0);
    assert_eq!(sdk["current"], PROTOCOL_VERSION_1_0);
    assert_eq!(sdk["v03"], PROTOCOL_VERSION_0_3);
    assert_eq!(
        sdk["bindings"],
        json!([BINDING_JSONRPC, BINDING_HTTP_JSON, BINDING_GRPC])
    );
    assert_eq!(sdk["media"], A2A_JSON_MEDIA_TYPE);
    assert_eq!(sdk["ext"], EXTENSIONS_HEADER);
    assert_eq!(sdk["legacy_ext"], LEGACY_EXTENSIONS_HEADER);
    assert_eq!(sdk["error_info"], ERROR_INFO_TYPE);
    assert_eq!(sdk["bad_request"], BAD_REQUEST_TYPE);
    assert_eq!(sdk["domain"], ERROR_DOMAIN);

    for (dialect, key) in [(Dialect::V1, "v1_methods"), (Dialect::V03, "v03_methods")] {
        let mut ours: Vec<&str> = Method::ALL.iter().filter_map(|m| m.name(dialect)).collect();
        ours.sort_unstable();
        assert_eq!(sdk[key], json!(ours), "{key}");
    }

    // Error classes by name: code, ErrorInfo reason and default message.
    let by_class = [
        ("TaskNotFoundError", ErrorCode::TaskNotFound),
        ("TaskNotCancelableError", ErrorCode::TaskNotCancelable),
        (
            "PushNotificationNotSupportedError",
            ErrorCode::PushNotificationNotSupported,
        ),
        ("UnsupportedOperationError", ErrorCode::UnsupportedOperation),
        (
            "ContentTypeNotSupportedError",
            ErrorCode::ContentTypeNotSupported,
        ),
        ("InvalidAgentResponseError", ErrorCode::InvalidAgentResponse),
        (
            "ExtendedAgentCardNotConfiguredError",
            ErrorCode::ExtendedAgentCardNotConfigured,
        ),
        (
            "ExtensionSupportRequiredError",
            ErrorCode::ExtensionSupportRequired,
        ),
        ("VersionNotSupportedError", ErrorCode::VersionNotSupported),
        ("InvalidParamsError", ErrorCode::InvalidParams),
        ("InvalidRequestError", ErrorCode::InvalidRequest),
        ("MethodNotFoundError", ErrorCode::MethodNotFound),
        ("InternalError", ErrorCode::Internal),
        ("JSONParseError", ErrorCode::JsonParse),
    ];
    assert_eq!(sdk["codes"].as_object().unwrap().len(), by_class.len());
    for (class, code) in by_class {
        assert_eq!(sdk["codes"][class], json!(code.code()), "{class}");
        assert_eq!(
            sdk["messages"][class],
            json!(code.default_message()),
            "{class}"
        );
        let reason = sdk["reasons"]
            .get(class)
            .cloned()
            .unwrap_or(json!("UNKNOWN_ERROR"));
        assert_eq!(reason, json!(code.reason()), "{class}");
    }
    let v03_codes: Vec<i64> = ErrorCode::ALL
        .iter()
        .filter(|c| c.in_v03())
        .map(|c| c.code())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    assert_eq!(sdk["v03_codes"], json!(v03_codes));
}
