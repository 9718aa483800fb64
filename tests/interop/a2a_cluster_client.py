"""The real a2a-sdk (1.3.0) client against two gateway replicas sharing Redis
(tests/it/cluster_frontends.rs): each request to whichever replica the test names.

Usage: a2a_cluster_client.py BASE1 BASE2 KEY SLOW_SKILL FAST_SKILL CHAT_SKILL

A task sent to replica 1 and read on replica 2; a slow task sent to replica 1 (returning at
once), read, followed and canceled on replica 2, then read on replica 1; a context begun on
replica 1 and continued on replica 2. Prints one JSON report on stdout.
"""

import asyncio
import json
import sys
import uuid

import httpx
from google.protobuf.json_format import MessageToDict

from a2a.client import ClientConfig, ClientFactory
from a2a.client.card_resolver import A2ACardResolver
from a2a_messages import message
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    SendMessageRequest,
    SubscribeToTaskRequest,
    TaskState,
)


def view(task):
    d = MessageToDict(task)
    out = ""
    for a in d.get("artifacts", []):
        for p in a.get("parts", []):
            out += p.get("text", "")
    return {
        "id": d.get("id"),
        "context_id": d.get("contextId"),
        "state": d.get("status", {}).get("state"),
        "output": out,
    }


async def clients(http, base):
    card = await A2ACardResolver(http, base).get_agent_card()
    make = lambda **kw: ClientFactory(ClientConfig(httpx_client=http, **kw)).create(card)
    return make(streaming=False), make(streaming=False, polling=True), make(streaming=True)


async def main():
    base1, base2, key, slow_skill, fast_skill, chat_skill = sys.argv[1:7]
    report = {}
    auth = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(headers=auth, timeout=60) as http:
        one, one_polling, _ = await clients(http, base1)
        two, _, two_streaming = await clients(http, base2)

        # Sent to replica 1, read on replica 2.
        async for ev in one.send_message(SendMessageRequest(message=message("hello", fast_skill))):
            sent = view(ev.task)
        report["fast_sent"] = sent
        report["fast_read_on_two"] = view(await two.get_task(GetTaskRequest(id=sent["id"])))

        # A slow task sent to replica 1, followed and canceled on replica 2.
        async for ev in one_polling.send_message(
            SendMessageRequest(message=message("slow", slow_skill))
        ):
            slow = view(ev.task)
        report["slow_submitted"] = slow["state"]
        report["slow_read_on_two"] = view(await two.get_task(GetTaskRequest(id=slow["id"])))
        first = asyncio.Event()
        events = []

        async def follow():
            async for ev in two_streaming.subscribe(SubscribeToTaskRequest(id=slow["id"])):
                kind = ev.WhichOneof("payload")
                if kind == "task":
                    events.append(["task", TaskState.Name(ev.task.status.state)])
                elif kind == "status_update":
                    events.append(["status", TaskState.Name(ev.status_update.status.state)])
                else:
                    events.append([kind, None])
                first.set()

        following = asyncio.create_task(follow())
        await asyncio.wait_for(first.wait(), 60)
        report["cancel_on_two"] = view(await two.cancel_task(CancelTaskRequest(id=slow["id"])))
        await asyncio.wait_for(following, 60)
        report["followed_on_two"] = events
        report["slow_read_on_one"] = view(await one.get_task(GetTaskRequest(id=slow["id"])))
        try:
            await one.cancel_task(CancelTaskRequest(id=slow["id"]))
            report["cancel_again_on_one"] = "canceled"
        except Exception as e:  # noqa: BLE001
            report["cancel_again_on_one"] = type(e).__name__

        # A context begun on replica 1, continued on replica 2.
        context = "ctx-" + str(uuid.uuid4())
        turns = []
        for client, text in ((one, "my name is Ada"), (two, "what is my name?")):
            async for ev in client.send_message(
                SendMessageRequest(message=message(text, chat_skill, context))
            ):
                turns.append(view(ev.task))
        report["context_turns"] = turns

    print(json.dumps(report))


asyncio.run(main())
