#!/usr/bin/env python3
"""Golden A2A objects written by the `a2a-sdk` (1.3.0) itself, and a strict checker of ours.

Run with the A2A venv's interpreter (`$LDP_PY_A2A`, built by `.ci/run venvs`):

    a2a_golden.py emit    prints {"cases": [...]}: sample objects built with the SDK's own
                          types (AgentCards, Messages, Tasks in every state, status and
                          artifact events, stream and send responses, request params, JSON-RPC
                          requests/responses of each method, errors), each as JSON the way the
                          SDK puts it on the wire: `json_format.MessageToDict` for v1.0 (as its
                          JSON-RPC transport and server do), `model_dump(mode="json",
                          by_alias=True, exclude_none=True)` of its compat models for v0.3, its
                          own error and card builders. Cases may name what the SDK converts
                          them to in the other version (`to_v03`, `to_v1`) and what else the
                          Rust side must reproduce (`expect`).
    a2a_golden.py check   reads {"results": [...]} (what the Rust types wrote) on stdin, has
                          the SDK parse each strictly and compare it with the expected object,
                          prints {"ok": bool, "checked": n, "failures": [...]} and exits 1 on
                          any failure.

Strict means: v1.0 JSON goes through `json_format.ParseDict` without `ignore_unknown_fields`
(an unknown member fails), must equal the expected message, and must be in the canonical
form `MessageToDict` writes (no defaults written out); v0.3 JSON must validate with the
compat pydantic model and dump back to exactly itself (nothing extra, nothing missing), and
equal the expected JSON. Numbers compare by value (`1 == 1.0`), as ProtoJSON treats them.
"""

import copy
import datetime
import json
import sys

# The JSON-RPC routes first: importing the v0.3 adapter on its own trips a circular import.
import a2a.server.routes  # noqa: F401
from a2a.client.card_resolver import parse_agent_card
from a2a.client.transports.jsonrpc import JsonRpcTransport
from a2a.compat.v0_3 import conversions as cv
from a2a.compat.v0_3 import types as t3
from a2a.compat.v0_3.jsonrpc_adapter import JSONRPC03Adapter, _to_v03_jsonrpc_error
from a2a.server import jsonrpc_models
from a2a.server.request_handlers.response_helpers import (
    agent_card_to_dict,
    build_error_response,
)
from a2a.server.routes.jsonrpc_dispatcher import JsonRpcDispatcher
from a2a.types import a2a_pb2 as pb
from a2a.utils import errors as E
from google.protobuf import json_format
from jsonrpc.jsonrpc2 import JSONRPC20Request, JSONRPC20Response


def v1(msg):
    """ProtoJSON as the SDK writes it."""
    return json_format.MessageToDict(msg)


def v03(model):
    """v0.3 JSON as the SDK's compat layer writes it."""
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


def ts(*args):
    t = pb.TaskStatus().timestamp
    t.FromDatetime(datetime.datetime(*args))
    return t


def value(v):
    out = pb.Part().data
    json_format.ParseDict(v, out)
    return out


# ---------------------------------------------------------------- v1.0 sample objects

EXT_URI = "https://ldp.example/a2a/ext/identity/v1"


def card_full():
    s = pb.SecurityScheme
    return pb.AgentCard(
        name="LDP Gateway",
        description="One endpoint in front of many LLM delegates.",
        version="0.1.0",
        supported_interfaces=[
            pb.AgentInterface(url="http://127.0.0.1:8080/a2a", protocol_binding="JSONRPC", protocol_version="1.0"),
            pb.AgentInterface(url="http://127.0.0.1:8080/a2a", protocol_binding="JSONRPC", protocol_version="0.3"),
            pb.AgentInterface(url="http://127.0.0.1:8080/rest", protocol_binding="HTTP+JSON", protocol_version="0.3", tenant="acme"),
        ],
        provider=pb.AgentProvider(url="https://example.org", organization="Example"),
        documentation_url="https://example.org/docs",
        icon_url="https://example.org/icon.png",
        capabilities=pb.AgentCapabilities(
            streaming=True,
            push_notifications=False,
            extended_agent_card=False,
            extensions=[
                pb.AgentExtension(
                    uri=EXT_URI,
                    description="LDP identity of the gateway",
                    required=False,
                    params={"ldp.delegate_id": "ldp:delegate:gateway", "ldp.trust_domain": "default", "ldp.quality": 0.9, "ldp.skills": ["summarize"]},
                ),
                pb.AgentExtension(uri="https://example.org/ext/required", required=True),
            ],
        ),
        security_schemes={
            "bearer": s(http_auth_security_scheme=pb.HTTPAuthSecurityScheme(scheme="Bearer", bearer_format="opaque", description="tenant key")),
            "apiKey": s(api_key_security_scheme=pb.APIKeySecurityScheme(location="header", name="X-API-Key", description="key")),
            "oauth": s(oauth2_security_scheme=pb.OAuth2SecurityScheme(
                flows=pb.OAuthFlows(client_credentials=pb.ClientCredentialsOAuthFlow(token_url="https://auth.example/token", scopes={"read": "Read tasks"})),
                oauth2_metadata_url="https://auth.example/.well-known/oauth-authorization-server")),
            "authcode": s(oauth2_security_scheme=pb.OAuth2SecurityScheme(
                description="browser login",
                flows=pb.OAuthFlows(authorization_code=pb.AuthorizationCodeOAuthFlow(
                    authorization_url="https://auth.example/authorize", token_url="https://auth.example/token",
                    refresh_url="https://auth.example/refresh", scopes={"read": "Read", "write": "Write"}, pkce_required=True)))),
            "device": s(oauth2_security_scheme=pb.OAuth2SecurityScheme(
                flows=pb.OAuthFlows(device_code=pb.DeviceCodeOAuthFlow(
                    device_authorization_url="https://auth.example/device", token_url="https://auth.example/token", scopes={"read": "Read"})))),
            "oidc": s(open_id_connect_security_scheme=pb.OpenIdConnectSecurityScheme(open_id_connect_url="https://auth.example/.well-known/openid-configuration")),
            "mtls": s(mtls_security_scheme=pb.MutualTlsSecurityScheme(description="client certificates")),
        },
        security_requirements=[
            pb.SecurityRequirement(schemes={"bearer": pb.StringList()}),
            pb.SecurityRequirement(schemes={"oauth": pb.StringList(list=["read"]), "mtls": pb.StringList()}),
        ],
        default_input_modes=["text/plain", "application/json"],
        default_output_modes=["text/plain", "application/json"],
        skills=[
            pb.AgentSkill(
                id="summarize", name="Summarize", description="Summarizes text.", tags=["text", "summary"],
                examples=["Summarize this article"], input_modes=["text/plain"], output_modes=["text/plain", "application/json"],
                security_requirements=[pb.SecurityRequirement(schemes={"bearer": pb.StringList()})],
            ),
            pb.AgentSkill(id="translate", name="Translate", description="Translates text.", tags=["text"]),
        ],
        signatures=[pb.AgentCardSignature(protected="eyJhbGciOiJFUzI1NiJ9", signature="c2lnbmF0dXJl", header={"kid": "key-1"})],
    )


def card_v1_only():
    return pb.AgentCard(
        name="Echo", description="Echoes.", version="1.0.0",
        supported_interfaces=[pb.AgentInterface(url="http://127.0.0.1:9000/", protocol_binding="JSONRPC", protocol_version="1.0")],
        capabilities=pb.AgentCapabilities(streaming=False),
        default_input_modes=["text/plain"], default_output_modes=["text/plain"],
        skills=[pb.AgentSkill(id="echo", name="Echo", description="Echoes the input.", tags=["test"])],
    )


def msg_user():
    return pb.Message(
        message_id="m-1", context_id="ctx-1", task_id="t-1", role=pb.ROLE_USER,
        parts=[
            pb.Part(text="Summarize the attached report.", metadata={"lang": "en"}),
            pb.Part(data=value({"max_words": 100, "style": ["brief", "neutral"], "strict": True, "none": None})),
            pb.Part(raw=b"\x00\x01binary\xff", filename="report.bin", media_type="application/octet-stream"),
            pb.Part(url="https://files.example/report.pdf", filename="report.pdf", media_type="application/pdf"),
        ],
        metadata={"skill": "summarize", "policy": "cheap", "nested": {"a": [1, 2.5, "x"]}},
        extensions=[EXT_URI],
        reference_task_ids=["t-0"],
    )


def msg_agent():
    return pb.Message(
        message_id="m-2", context_id="ctx-1", role=pb.ROLE_AGENT,
        parts=[pb.Part(data=value([1, "two", None, {"x": True}])), pb.Part(data=value("just a string")), pb.Part(data=value(3.5)), pb.Part(text="")],
    )


def msg_minimal():
    return pb.Message(message_id="m-3", role=pb.ROLE_USER, parts=[pb.Part(text="hi")])


def status(state, message=None, stamp=None):
    st = pb.TaskStatus(state=state)
    if message is not None:
        st.message.CopyFrom(message)
    if stamp is not None:
        st.timestamp.CopyFrom(stamp)
    return st


def agent_text(mid, text):
    return pb.Message(message_id=mid, role=pb.ROLE_AGENT, parts=[pb.Part(text=text)])


def artifact_text():
    return pb.Artifact(
        artifact_id="a-1", name="summary", description="The summary",
        parts=[pb.Part(text="A short summary.")], metadata={"tokens": 42}, extensions=[EXT_URI],
    )


def artifact_data():
    return pb.Artifact(artifact_id="a-2", parts=[pb.Part(data=value({"score": 0.93, "labels": ["ok"]}), media_type="application/json")])


def tasks():
    stamp = ts(2026, 3, 1, 12, 0, 0, 123000)
    provenance = {"ldp_provenance": {"produced_by": "ldp:delegate:sim-fast", "model_version": "sim-1.0",
                                     "verification": {"status": "verified", "votes": [{"by": "v1", "score": 0.9}]},
                                     "cost_usd": 0.001, "latency_ms": 20}}
    return {
        "task_submitted": pb.Task(id="t-1", context_id="ctx-1", status=status(pb.TASK_STATE_SUBMITTED, stamp=stamp)),
        "task_working": pb.Task(id="t-1", context_id="ctx-1", status=status(
            pb.TASK_STATE_WORKING, agent_text("s-1", "routed to ldp:delegate:sim-fast"), ts(2026, 3, 1, 12, 0, 0, 123456))),
        "task_completed": pb.Task(
            id="t-1", context_id="ctx-1", status=status(pb.TASK_STATE_COMPLETED, stamp=ts(2026, 3, 1, 12, 0, 1)),
            artifacts=[artifact_text(), artifact_data()], history=[msg_user(), msg_agent()], metadata=provenance),
        "task_failed": pb.Task(id="t-2", context_id="ctx-1", status=status(
            pb.TASK_STATE_FAILED, agent_text("s-2", "TASK_FAILED: UPSTREAM_ERROR"))),
        "task_rejected": pb.Task(id="t-3", context_id="ctx-2", status=status(
            pb.TASK_STATE_REJECTED, agent_text("s-3", "BUDGET_EXCEEDED: the contract budget is spent"))),
        "task_canceled": pb.Task(id="t-4", context_id="ctx-2", status=status(pb.TASK_STATE_CANCELED)),
        "task_input_required": pb.Task(id="t-5", context_id="ctx-3", status=status(
            pb.TASK_STATE_INPUT_REQUIRED, agent_text("s-5", "Which language?"))),
        "task_auth_required": pb.Task(id="t-6", context_id="ctx-3", status=status(pb.TASK_STATE_AUTH_REQUIRED)),
        "task_unspecified": pb.Task(id="t-7", context_id="ctx-4", status=pb.TaskStatus()),
        "task_empty_metadata": pb.Task(id="t-8", context_id="ctx-4", status=status(pb.TASK_STATE_WORKING),
                                       metadata={}, artifacts=[pb.Artifact(artifact_id="a-3", parts=[pb.Part(text="x")], metadata={})]),
    }


def status_events():
    return {
        "status_working": pb.TaskStatusUpdateEvent(
            task_id="t-1", context_id="ctx-1", status=status(pb.TASK_STATE_WORKING, agent_text("s-9", "routed to sim-fast")),
            metadata={"delegate": "ldp:delegate:sim-fast"}),
        "status_completed": pb.TaskStatusUpdateEvent(
            task_id="t-1", context_id="ctx-1", status=status(pb.TASK_STATE_COMPLETED, stamp=ts(2026, 3, 1, 12, 0, 2))),
        "status_input_required": pb.TaskStatusUpdateEvent(
            task_id="t-5", context_id="ctx-3", status=status(pb.TASK_STATE_INPUT_REQUIRED)),
    }


def artifact_events():
    return {
        "artifact_chunk": pb.TaskArtifactUpdateEvent(
            task_id="t-1", context_id="ctx-1", artifact=pb.Artifact(artifact_id="a-1", parts=[pb.Part(text="A short ")]),
            append=True, last_chunk=False, metadata={"seq": 1}),
        "artifact_last": pb.TaskArtifactUpdateEvent(
            task_id="t-1", context_id="ctx-1", artifact=artifact_text(), last_chunk=True),
        "artifact_plain": pb.TaskArtifactUpdateEvent(task_id="t-1", context_id="ctx-1", artifact=artifact_data()),
    }


def send_requests():
    return {
        "send_full": pb.SendMessageRequest(
            tenant="acme", message=msg_user(),
            configuration=pb.SendMessageConfiguration(
                accepted_output_modes=["text/plain"], history_length=0, return_immediately=True,
                task_push_notification_config=pb.TaskPushNotificationConfig(
                    url="https://client.example/cb", token="tok", id="cfg-1",
                    authentication=pb.AuthenticationInfo(scheme="Bearer", credentials="secret"))),
            metadata={"skill": "summarize"}),
        "send_minimal": pb.SendMessageRequest(message=msg_minimal()),
        "send_history": pb.SendMessageRequest(message=msg_minimal(), configuration=pb.SendMessageConfiguration(history_length=5)),
        "send_empty_config": pb.SendMessageRequest(message=msg_minimal(), configuration=pb.SendMessageConfiguration(), metadata={}),
    }


# ---------------------------------------------------------------- v0.3 sample objects


def v03_message():
    return t3.Message(
        message_id="m-30", role=t3.Role.user, context_id="ctx-30", metadata={}, extensions=[], reference_task_ids=[],
        parts=[
            t3.Part(root=t3.TextPart(text="hello", metadata={})),
            t3.Part(root=t3.DataPart(data={"k": [1, 2]}, metadata={"m": 1})),
            t3.Part(root=t3.DataPart(data={"value": [1, 2]}, metadata={"data_part_compat": True})),
            t3.Part(root=t3.DataPart(data={"z": 1}, metadata={})),
            t3.Part(root=t3.FilePart(file=t3.FileWithBytes(bytes="aGVsbG8="))),
            t3.Part(root=t3.FilePart(file=t3.FileWithUri(uri="https://files.example/x.png", mime_type="image/png", name="x.png"), metadata={"a": 1})),
        ],
    )


def v03_task():
    return t3.Task(
        id="t-30", context_id="ctx-30",
        status=t3.TaskStatus(state=t3.TaskState.working, timestamp="2026-03-01T12:00:00.123+00:00",
                             message=t3.Message(message_id="s-30", role=t3.Role.agent, parts=[t3.Part(root=t3.TextPart(text="working"))])),
        history=[v03_message()],
        artifacts=[t3.Artifact(artifact_id="a-30", name="n", parts=[t3.Part(root=t3.TextPart(text="x"))], metadata={}, extensions=["e"])],
        metadata={},
    )


def v03_task_unknown():
    return t3.Task(id="t-31", context_id="ctx-31", status=t3.TaskStatus(state=t3.TaskState.unknown), metadata={"k": "v"})


def v03_status_event():
    return t3.TaskStatusUpdateEvent(task_id="t-30", context_id="ctx-30", final=True, metadata={"x": 1},
                                    status=t3.TaskStatus(state=t3.TaskState.completed, timestamp="2026-03-01T12:00:01Z"))


def v03_artifact_event():
    return t3.TaskArtifactUpdateEvent(task_id="t-30", context_id="ctx-30",
                                      artifact=t3.Artifact(artifact_id="a-30", parts=[t3.Part(root=t3.TextPart(text="y"))]))


def v03_send_params():
    return {
        "v03_send_full": t3.MessageSendParams(
            message=v03_message(), metadata={"skill": "summarize"},
            configuration=t3.MessageSendConfiguration(
                accepted_output_modes=["text/plain"], blocking=False, history_length=0,
                push_notification_config=t3.PushNotificationConfig(
                    url="https://client.example/cb", token="tok",
                    authentication=t3.PushNotificationAuthenticationInfo(schemes=["Bearer", "Basic"], credentials="c")))),
        "v03_send_blocking": t3.MessageSendParams(
            message=t3.Message(message_id="m-31", role=t3.Role.user, parts=[t3.Part(root=t3.TextPart(text="hi"))]),
            configuration=t3.MessageSendConfiguration(blocking=True, history_length=3), metadata={}),
    }


# ---------------------------------------------------------------- cases

V1_TYPES = {
    "v1.AgentCard": pb.AgentCard,
    "v1.Message": pb.Message,
    "v1.Task": pb.Task,
    "v1.TaskStatusUpdateEvent": pb.TaskStatusUpdateEvent,
    "v1.TaskArtifactUpdateEvent": pb.TaskArtifactUpdateEvent,
    "v1.StreamResponse": pb.StreamResponse,
    "v1.SendMessageResponse": pb.SendMessageResponse,
    "v1.SendMessageRequest": pb.SendMessageRequest,
    "v1.GetTaskRequest": pb.GetTaskRequest,
    "v1.CancelTaskRequest": pb.CancelTaskRequest,
    "v1.SubscribeToTaskRequest": pb.SubscribeToTaskRequest,
}

V03_TYPES = {
    "v03.AgentCard": t3.AgentCard,
    "v03.Message": t3.Message,
    "v03.Task": t3.Task,
    "v03.TaskStatusUpdateEvent": t3.TaskStatusUpdateEvent,
    "v03.TaskArtifactUpdateEvent": t3.TaskArtifactUpdateEvent,
    "v03.MessageSendParams": t3.MessageSendParams,
    "v03.TaskQueryParams": t3.TaskQueryParams,
    "v03.TaskIdParams": t3.TaskIdParams,
}

# The v1.0 JSON-RPC result of each method (`JsonRpcDispatcher`).
V1_RESULTS = {
    "SendMessage": pb.SendMessageResponse,
    "SendStreamingMessage": pb.StreamResponse,
    "SubscribeToTask": pb.StreamResponse,
    "GetTask": pb.Task,
    "CancelTask": pb.Task,
}

# The v0.3 JSON-RPC response model of each method (`JSONRPC03Adapter`).
V03_RESPONSES = {
    "message/send": t3.SendMessageResponse,
    "message/stream": t3.SendStreamingMessageResponse,
    "tasks/resubscribe": t3.SendStreamingMessageResponse,
    "tasks/get": t3.GetTaskResponse,
    "tasks/cancel": t3.CancelTaskResponse,
}

A2A_ERRORS = [
    E.TaskNotFoundError, E.TaskNotCancelableError, E.PushNotificationNotSupportedError,
    E.UnsupportedOperationError, E.ContentTypeNotSupportedError, E.InvalidAgentResponseError,
    E.ExtendedAgentCardNotConfiguredError, E.ExtensionSupportRequiredError,
    E.VersionNotSupportedError, E.InvalidParamsError, E.InvalidRequestError,
    E.MethodNotFoundError, E.InternalError,
]


def cases():
    out = []

    def add(name, ty, js, **extra):
        out.append({"name": name, "type": ty, "json": js, **extra})

    # Cards.
    full = card_full()
    add("card_full", "v1.AgentCard", v1(full),
        to_v03={"type": "v03.AgentCard", "json": v03(cv.to_compat_agent_card(full))},
        expect={"served": agent_card_to_dict(card_full())})
    add("card_v1_only", "v1.AgentCard", v1(card_v1_only()), expect={"served": agent_card_to_dict(card_v1_only())})
    add("card_served", "served.AgentCard", agent_card_to_dict(card_full()))
    compat_card = v03(cv.to_compat_agent_card(full))
    add("card_v03", "v03.AgentCard", compat_card,
        expect={"interfaces": v1(parse_agent_card(copy.deepcopy(compat_card)))["supportedInterfaces"]})
    bare_v03 = {"name": "Old", "description": "d", "version": "1", "url": "http://h/rpc", "capabilities": {},
                "defaultInputModes": [], "defaultOutputModes": [], "skills": [],
                "additionalInterfaces": [{"url": "http://h/grpc", "transport": "GRPC"}]}
    add("card_v03_defaults", "v03.AgentCard", bare_v03, lenient=True,
        expect={"interfaces": v1(parse_agent_card(copy.deepcopy(bare_v03)))["supportedInterfaces"]})

    # Messages, tasks, events (each with the SDK's v0.3 conversion).
    empty_md = pb.Message(message_id="m-4", role=pb.ROLE_USER, parts=[pb.Part(text="x")], metadata={})
    for name, m in [("msg_user", msg_user()), ("msg_agent", msg_agent()), ("msg_minimal", msg_minimal()),
                    ("msg_empty_metadata", empty_md)]:
        add(name, "v1.Message", v1(m), to_v03={"type": "v03.Message", "json": v03(cv.to_compat_message(m))})
    for name, t in tasks().items():
        add(name, "v1.Task", v1(t), to_v03={"type": "v03.Task", "json": v03(cv.to_compat_task(t))})
    for name, e in status_events().items():
        add(name, "v1.TaskStatusUpdateEvent", v1(e),
            to_v03={"type": "v03.TaskStatusUpdateEvent", "json": v03(cv.to_compat_task_status_update_event(e))})
    for name, e in artifact_events().items():
        add(name, "v1.TaskArtifactUpdateEvent", v1(e),
            to_v03={"type": "v03.TaskArtifactUpdateEvent", "json": v03(cv.to_compat_task_artifact_update_event(e))})

    # The streaming wrapper and the SendMessage result, both ways.
    t = tasks()
    stream = {
        "stream_task": pb.StreamResponse(task=t["task_working"]),
        "stream_message": pb.StreamResponse(message=msg_agent()),
        "stream_status": pb.StreamResponse(status_update=status_events()["status_completed"]),
        "stream_artifact": pb.StreamResponse(artifact_update=artifact_events()["artifact_chunk"]),
    }
    for name, sr in stream.items():
        add(name, "v1.StreamResponse", v1(sr),
            to_v03={"type": "v03.StreamResult", "json": v03(cv.to_compat_stream_response(sr, "r")).get("result")})
    sends = {"send_task": pb.SendMessageResponse(task=t["task_completed"]), "send_message": pb.SendMessageResponse(message=msg_agent())}
    for name, r in sends.items():
        add(name, "v1.SendMessageResponse", v1(r),
            to_v03={"type": "v03.SendMessageResult", "json": v03(cv.to_compat_send_message_response(r, "r")).get("result")})

    # Request params.
    for name, r in send_requests().items():
        add(name, "v1.SendMessageRequest", v1(r),
            to_v03={"type": "v03.MessageSendParams", "json": v03(cv.to_compat_send_message_request(r, "r").params)})
    for name, r in {"get_task": pb.GetTaskRequest(id="t-1", history_length=2), "get_task_plain": pb.GetTaskRequest(id="t-1"),
                    "get_task_zero": pb.GetTaskRequest(id="t-1", history_length=0, tenant="acme")}.items():
        add(name, "v1.GetTaskRequest", v1(r),
            to_v03={"type": "v03.TaskQueryParams", "json": v03(cv.to_compat_get_task_request(r, "r").params)})
    cancel = pb.CancelTaskRequest(id="t-1", metadata={"reason": "user"})
    add("cancel_task", "v1.CancelTaskRequest", v1(cancel),
        to_v03={"type": "v03.TaskIdParams", "json": v03(cv.to_compat_cancel_task_request(cancel, "r").params)})
    sub = pb.SubscribeToTaskRequest(id="t-1")
    add("subscribe", "v1.SubscribeToTaskRequest", v1(sub),
        to_v03={"type": "v03.TaskIdParams", "json": v03(cv.to_compat_subscribe_to_task_request(sub, "r").params)})

    # v0.3 originals, with the SDK's v1.0 conversion.
    m = v03_message()
    add("v03_message", "v03.Message", v03(m), to_v1={"type": "v1.Message", "json": v1(cv.to_core_message(m))})
    for name, task in [("v03_task", v03_task()), ("v03_task_unknown", v03_task_unknown())]:
        add(name, "v03.Task", v03(task), to_v1={"type": "v1.Task", "json": v1(cv.to_core_task(task))})
    e = v03_status_event()
    add("v03_status", "v03.TaskStatusUpdateEvent", v03(e),
        to_v1={"type": "v1.TaskStatusUpdateEvent", "json": v1(cv.to_core_task_status_update_event(e))})
    e = v03_artifact_event()
    add("v03_artifact", "v03.TaskArtifactUpdateEvent", v03(e),
        to_v1={"type": "v1.TaskArtifactUpdateEvent", "json": v1(cv.to_core_task_artifact_update_event(e))})
    for name, p in v03_send_params().items():
        req = t3.SendMessageRequest(id="r", params=p)
        add(name, "v03.MessageSendParams", v03(p), to_v1={"type": "v1.SendMessageRequest", "json": v1(cv.to_core_send_message_request(req))})
    q = t3.TaskQueryParams(id="t-1", history_length=0, metadata={"k": 1})
    add("v03_get_zero", "v03.TaskQueryParams", v03(q),
        to_v1={"type": "v1.GetTaskRequest", "json": v1(cv.to_core_get_task_request(t3.GetTaskRequest(id="r", params=q)))})
    q = t3.TaskQueryParams(id="t-1", history_length=4)
    add("v03_get", "v03.TaskQueryParams", v03(q),
        to_v1={"type": "v1.GetTaskRequest", "json": v1(cv.to_core_get_task_request(t3.GetTaskRequest(id="r", params=q)))})
    ip = t3.TaskIdParams(id="t-1", metadata={"why": "done"})
    add("v03_cancel", "v03.TaskIdParams", v03(ip),
        to_v1={"type": "v1.CancelTaskRequest", "json": v1(cv.to_core_cancel_task_request(t3.CancelTaskRequest(id="r", params=ip)))})
    add("v03_resubscribe", "v03.TaskIdParams", v03(ip),
        to_v1={"type": "v1.SubscribeToTaskRequest", "json": v1(cv.to_core_subscribe_to_task_request(t3.TaskResubscriptionRequest(id="r", params=ip)))})
    for name, res in [("v03_result_task", t3.SendStreamingMessageSuccessResponse(result=v03_task())),
                      ("v03_result_status", t3.SendStreamingMessageSuccessResponse(result=v03_status_event())),
                      ("v03_result_artifact", t3.SendStreamingMessageSuccessResponse(result=v03_artifact_event())),
                      ("v03_result_message", t3.SendStreamingMessageSuccessResponse(result=v03_message()))]:
        add(name, "v03.StreamResult", v03(res)["result"], to_v1={"type": "v1.StreamResponse", "json": v1(cv.to_core_stream_response(res))})

    # JSON-RPC requests as the v1.0 client sends them (`JsonRpcTransport`: JSONRPC20Request with
    # MessageToDict params), string and integer ids.
    sr = send_requests()
    v1_requests = [
        ("SendMessage", sr["send_full"], "req-1"),
        ("SendStreamingMessage", sr["send_minimal"], 7),
        ("GetTask", pb.GetTaskRequest(id="t-1", history_length=2), "req-3"),
        ("CancelTask", pb.CancelTaskRequest(id="t-1"), "req-4"),
        ("SubscribeToTask", pb.SubscribeToTaskRequest(id="t-1"), 0),
    ]
    for method, req, rid in v1_requests:
        add(f"rpc_{method}", "jsonrpc.Request", dict(JSONRPC20Request(method=method, params=v1(req), _id=rid).data))
    # As the v0.3 client sends them (the compat models' dumps: jsonrpc, id, method, params).
    v03_requests = [
        ("message/send", cv.to_compat_send_message_request(sr["send_full"], "r-1")),
        ("message/stream", t3.SendStreamingMessageRequest(id="r-2", params=cv.to_compat_send_message_request(sr["send_minimal"], "r-2").params)),
        ("tasks/get", cv.to_compat_get_task_request(pb.GetTaskRequest(id="t-1", history_length=2), 3)),
        ("tasks/cancel", cv.to_compat_cancel_task_request(pb.CancelTaskRequest(id="t-1", metadata={"a": 1}), "r-4")),
        ("tasks/resubscribe", cv.to_compat_subscribe_to_task_request(pb.SubscribeToTaskRequest(id="t-1"), "r-5")),
    ]
    for method, req in v03_requests:
        add(f"rpc03_{method}", "jsonrpc.Request", v03(req))

    # JSON-RPC responses as the v1.0 server writes them, and as its v0.3 adapter does.
    v1_results = [
        ("SendMessage", v1(pb.SendMessageResponse(task=t["task_completed"])), "req-1"),
        ("SendMessage", v1(pb.SendMessageResponse(message=msg_agent())), "req-1b"),
        ("SendStreamingMessage", v1(stream["stream_status"]), 7),
        ("GetTask", v1(t["task_input_required"]), "req-3"),
        ("CancelTask", v1(t["task_canceled"]), "req-4"),
        ("SubscribeToTask", v1(stream["stream_artifact"]), 0),
    ]
    for i, (method, result, rid) in enumerate(v1_results):
        add(f"rpc_result_{i}_{method}", "jsonrpc.Response", dict(JSONRPC20Response(result=result, _id=rid).data), method=method)
    v03_results = [
        ("message/send", cv.to_compat_send_message_response(pb.SendMessageResponse(task=t["task_completed"]), "r-1")),
        ("message/stream", cv.to_compat_stream_response(stream["stream_status"], "r-2")),
        ("tasks/get", t3.GetTaskResponse(root=t3.GetTaskSuccessResponse(id=3, result=cv.to_compat_task(t["task_failed"])))),
        ("tasks/cancel", t3.CancelTaskResponse(root=t3.CancelTaskSuccessResponse(id="r-4", result=cv.to_compat_task(t["task_canceled"])))),
    ]
    for i, (method, resp) in enumerate(v03_results):
        add(f"rpc03_result_{i}", "jsonrpc.Response", v03(resp), method=method)

    # Errors: every A2A error as the v1.0 server writes it (`build_error_response`), and as
    # the v0.3 adapter writes it (`_to_v03_jsonrpc_error`, dumped with its `data: null`).
    for cls in A2A_ERRORS:
        data = {"taskId": "t-9", "detail": [1, 2]} if cls in (E.TaskNotFoundError, E.InvalidParamsError) else None
        err = cls(data=data)
        v1_err = build_error_response("req-err", err)
        v03_err = {"jsonrpc": "2.0", "id": "req-err", "error": _to_v03_jsonrpc_error(err).model_dump(by_alias=True)}
        add(f"error_{cls.__name__}", "jsonrpc.Error", v1_err, expect={"v03": v03_err, "message": err.message})
        add(f"error03_{cls.__name__}", "jsonrpc.Error", v03_err)
    # The dispatcher's own JSON-RPC errors (no details).
    for name, err, rid in [("parse", jsonrpc_models.JSONParseError(message="Expecting value: line 1 column 1 (char 0)"), None),
                           ("invalid_request", jsonrpc_models.InvalidRequestError(message="Batch requests are not supported"), 5),
                           ("method_not_found", jsonrpc_models.MethodNotFoundError(), "x")]:
        add(f"rpc_error_{name}", "jsonrpc.Error", build_error_response(rid, err))
    return out


# ---------------------------------------------------------------- checks


class Mismatch(Exception):
    pass


def same(ours, expected, what):
    if ours != expected:
        raise Mismatch(f"{what}:\n  ours:     {json.dumps(ours, sort_keys=True)}\n  expected: {json.dumps(expected, sort_keys=True)}")


def check_v1(cls, ours, expected=None):
    """Strict ProtoJSON: parses with unknown members refused, is canonical, equals expected."""
    try:
        msg = json_format.ParseDict(ours, cls())
    except json_format.ParseError as e:
        raise Mismatch(f"{cls.__name__} refuses our JSON: {e}") from e
    same(json_format.MessageToDict(msg), ours, f"{cls.__name__}: our JSON is not in MessageToDict's canonical form")
    if expected is not None:
        want = json_format.ParseDict(expected, cls())
        if msg != want:
            raise Mismatch(f"{cls.__name__}: parsed message differs from the expected one")
        same(ours, expected, cls.__name__)


def check_v03(model, ours, expected=None):
    """Validates with the compat model and dumps back to exactly our JSON."""
    try:
        parsed = model.model_validate(ours)
    except Exception as e:  # noqa: BLE001 - pydantic's ValidationError and friends
        raise Mismatch(f"{model.__name__} refuses our JSON: {e}") from e
    same(v03(parsed), ours, f"{model.__name__}: the SDK's dump of our JSON differs from it")
    if expected is not None:
        same(ours, expected, model.__name__)


def client_error(err):
    """What the SDK's v1.0 client makes of a JSON-RPC error object."""
    e = JsonRpcTransport._create_jsonrpc_error(None, err)  # noqa: SLF001 - it uses no state
    return type(e).__name__, str(e), getattr(e, "data", None)


def check_request(ours, expected):
    same(ours, expected, "request")
    if not isinstance(JSONRPC20Request.from_data(ours), JSONRPC20Request):
        raise Mismatch("not one JSON-RPC request")
    method = ours["method"]
    if method in JsonRpcDispatcher.METHOD_TO_MODEL:
        check_v1(JsonRpcDispatcher.METHOD_TO_MODEL[method], ours.get("params", {}))
    else:
        check_v03(JSONRPC03Adapter.METHOD_TO_MODEL[method], ours)


def check_response(ours, expected, method):
    same(ours, expected, "response")
    if set(ours) - {"jsonrpc", "id", "result", "error"} or ours.get("jsonrpc") != "2.0":
        raise Mismatch("not a JSON-RPC response")
    if method in V1_RESULTS:
        check_v1(V1_RESULTS[method], ours["result"])
    else:
        check_v03(V03_RESPONSES[method], ours)


def check_error(ours, expected):
    same(ours, expected, "error response")
    if ours.get("jsonrpc") != "2.0" or set(ours) != {"jsonrpc", "id", "error"}:
        raise Mismatch("not a JSON-RPC error response")
    same(client_error(ours["error"]), client_error(expected["error"]), "the SDK client's reading")


def check_served(ours, expected):
    """A served card (v1.0 members with the v0.3 ones merged in): equals what the SDK serves
    for the same card, and both of the SDK's readers take it (its v1.0 card resolver, and the
    v0.3 model when the card has v0.3 members). Not checked: that the resolver reads back the
    original card. It does not, for the SDK's own served cards either: the merged `type`
    member makes it re-wrap a scheme from its v0.3 members, losing `pkceRequired` and device
    code flows."""
    if expected is not None:
        same(ours, expected, "served card")
    parse_agent_card(copy.deepcopy(ours))
    if "url" in ours:
        t3.AgentCard.model_validate(ours)


def check_typed(ty, ours, expected=None, meta=None):
    if ty in V1_TYPES:
        check_v1(V1_TYPES[ty], ours, expected)
    elif ty in V03_TYPES:
        check_v03(V03_TYPES[ty], ours, expected)
    elif ty == "v03.StreamResult":
        check_v03(t3.SendStreamingMessageSuccessResponse, {"jsonrpc": "2.0", "result": ours})
        if expected is not None:
            same(ours, expected, ty)
    elif ty == "v03.SendMessageResult":
        check_v03(t3.SendMessageSuccessResponse, {"jsonrpc": "2.0", "result": ours})
        if expected is not None:
            same(ours, expected, ty)
    elif ty == "served.AgentCard":
        check_served(ours, expected)
    elif ty == "jsonrpc.Request":
        check_request(ours, expected if expected is not None else ours)
    elif ty == "jsonrpc.Response":
        check_response(ours, expected if expected is not None else ours, (meta or {}).get("method"))
    elif ty == "jsonrpc.Error":
        check_error(ours, expected if expected is not None else ours)
    else:
        raise Mismatch(f"unknown type {ty}")


def check(results):
    by_name = {c["name"]: c for c in cases()}
    failures = []
    seen = set()
    for r in results:
        name, kind, ours = r["name"], r["kind"], r["json"]
        seen.add((name, kind))
        try:
            if kind == "snapshot":
                check_typed(r["type"], ours)
                continue
            case = by_name[name]
            if kind == "roundtrip" and case.get("lenient"):
                # Not in the SDK's canonical dump (defaults left out): equal, and valid.
                same(ours, case["json"], case["type"])
                V03_TYPES[case["type"]].model_validate(ours)
            elif kind == "roundtrip":
                check_typed(case["type"], ours, case["json"], case)
            elif kind in ("to_v03", "to_v1"):
                check_typed(case[kind]["type"], ours, case[kind]["json"])
            elif kind == "served":
                check_served(ours, case["expect"]["served"])
            elif kind == "interfaces":
                same(ours, case["expect"]["interfaces"], "interfaces")
            elif kind == "built_error":
                check_error(ours, case["json"])
            elif kind == "built_error_v03":
                check_error(ours, case["expect"]["v03"])
            else:
                raise Mismatch(f"unknown result kind {kind}")
        except Exception as e:  # noqa: BLE001 - every failure is reported, none stops the rest
            failures.append({"name": name, "kind": kind, "error": f"{type(e).__name__}: {e}"})
    # Every case must have come back round-tripped, and with each conversion it names.
    for c in by_name.values():
        wanted = ["roundtrip"] + [k for k in ("to_v03", "to_v1") if k in c]
        wanted += [k for k in ("served", "interfaces") if k in c.get("expect", {})]
        if c["type"] == "jsonrpc.Error" and "v03" in c.get("expect", {}):
            wanted += ["built_error", "built_error_v03"]
        for k in wanted:
            if (c["name"], k) not in seen:
                failures.append({"name": c["name"], "kind": k, "error": "no result"})
    return failures


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else ""
    if mode == "emit":
        json.dump({"cases": cases()}, sys.stdout)
        sys.stdout.write("\n")
        return 0
    if mode == "check":
        results = json.load(sys.stdin)["results"]
        failures = check(results)
        json.dump({"ok": not failures, "checked": len(results), "failures": failures}, sys.stdout)
        sys.stdout.write("\n")
        return 1 if failures else 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
