"""The real a2a-sdk (1.3.0) client against the gateway's A2A bridge (tests/it/bridge_a2a.rs).

Usage: a2a_client.py BASE_URL KEY OTHER_KEY LDP_SKILL OPENAI_SKILL SLOW_SKILL [A2A_SKILL]

Discovers the card (and validates it strictly against the SDK's AgentCard model), then: a
blocking send to each skill, a streamed send, a get, the cancel of a slow task sent with
return_immediately, and the other tenant's get of a task (TaskNotFoundError). Prints one
JSON report on stdout; the Rust test asserts on it.
"""

import asyncio
import json
import sys

import httpx
from google.protobuf.json_format import MessageToDict, ParseDict

from a2a.client import ClientConfig, ClientFactory
from a2a.client.card_resolver import A2ACardResolver
from a2a_messages import message
from a2a.types import (
    AgentCard,
    CancelTaskRequest,
    GetTaskRequest,
    SendMessageRequest,
    TaskState,
)


def task_view(task):
    d = MessageToDict(task)
    out = ""
    for a in d.get("artifacts", []):
        for p in a.get("parts", []):
            out += p.get("text", "") or json.dumps(p.get("data"))
    return {
        "id": d.get("id"),
        "context_id": d.get("contextId"),
        "state": d.get("status", {}).get("state"),
        "output": out,
        "metadata": d.get("metadata", {}),
        "status_text": "".join(
            p.get("text", "") for p in d.get("status", {}).get("message", {}).get("parts", [])
        ),
    }


async def main():
    base, key, other_key, ldp_skill, openai_skill, slow_skill = sys.argv[1:7]
    # An optional seventh: the skill of an A2A agent behind the gateway.
    a2a_skill = sys.argv[7] if len(sys.argv) > 7 else None
    report = {}
    auth = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(headers=auth, timeout=60) as http, httpx.AsyncClient(
        headers={"Authorization": f"Bearer {other_key}"}, timeout=60
    ) as other_http:
        # Card discovery, and the card against the SDK's model with no unknown field.
        card = await A2ACardResolver(http, base).get_agent_card()
        raw = (await http.get(base + "/.well-known/agent-card.json")).json()
        ParseDict(raw, AgentCard(), ignore_unknown_fields=False)
        report["card"] = {
            "name": card.name,
            "url": card.supported_interfaces[0].url,
            "binding": card.supported_interfaces[0].protocol_binding,
            "version": card.supported_interfaces[0].protocol_version,
            "streaming": card.capabilities.streaming,
            "skills": sorted(s.id for s in card.skills),
            "extensions": [MessageToDict(e) for e in card.capabilities.extensions],
            "security": sorted(card.security_schemes.keys()),
        }

        blocking = ClientFactory(ClientConfig(streaming=False, httpx_client=http)).create(card)
        streaming = ClientFactory(ClientConfig(streaming=True, httpx_client=http)).create(card)
        polling = ClientFactory(
            ClientConfig(streaming=False, polling=True, httpx_client=http)
        ).create(card)
        other = ClientFactory(ClientConfig(streaming=False, httpx_client=other_http)).create(card)

        # A blocking send to the LDP delegate's skill and to the OpenAI-backed one.
        sends = {}
        for skill in (ldp_skill, openai_skill, a2a_skill):
            if skill is None:
                continue
            async for ev in blocking.send_message(SendMessageRequest(message=message("hello a2a", skill))):
                sends[skill] = task_view(ev.task)
        report["send"] = sends

        # A streamed send: the events' kinds and states in order.
        kinds = []
        async for ev in streaming.send_message(
            SendMessageRequest(message=message("stream me", ldp_skill))
        ):
            kind = ev.WhichOneof("payload")
            if kind == "task":
                kinds.append(["task", TaskState.Name(ev.task.status.state)])
                streamed_id = ev.task.id
            elif kind == "status_update":
                kinds.append(["status", TaskState.Name(ev.status_update.status.state)])
            elif kind == "artifact_update":
                art = MessageToDict(ev.artifact_update.artifact)
                text = "".join(
                    p.get("text", "") or json.dumps(p.get("data")) for p in art.get("parts", [])
                )
                kinds.append(["artifact", text])
        report["stream"] = kinds

        # Get the streamed task.
        got = await blocking.get_task(GetTaskRequest(id=streamed_id))
        report["get"] = task_view(got)

        # The other tenant cannot see it.
        try:
            await other.get_task(GetTaskRequest(id=streamed_id))
            report["other_tenant_get"] = "found"
        except Exception as e:  # noqa: BLE001
            report["other_tenant_get"] = type(e).__name__

        # A slow task, sent to return at once, then canceled.
        async for ev in polling.send_message(SendMessageRequest(message=message("slow", slow_skill))):
            slow = task_view(ev.task)
        report["slow_submitted"] = slow["state"]
        canceled = await blocking.cancel_task(CancelTaskRequest(id=slow["id"]))
        report["cancel"] = task_view(canceled)
        report["after_cancel"] = task_view(await blocking.get_task(GetTaskRequest(id=slow["id"])))
        try:
            await blocking.cancel_task(CancelTaskRequest(id=slow["id"]))
            report["cancel_again"] = "canceled"
        except Exception as e:  # noqa: BLE001
            report["cancel_again"] = type(e).__name__

    print(json.dumps(report))


asyncio.run(main())
