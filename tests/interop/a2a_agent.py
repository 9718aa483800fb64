"""An A2A agent built with the reference SDK's server classes (`a2a-sdk` 1.3.0), a delegate of
the gateway in tests/it/a2a_delegates.rs.

    python a2a_agent.py NAME [--v03] [--stream]

Serves its Agent Card at /.well-known/agent-card.json (a 1.0 JSON-RPC interface; with
--v03, only a 0.3 one, the SDK's v0.3 compat layer answering), JSON-RPC at `/`, and
`GET /log`: every contextId its executor saw and every JSON-RPC call's method,
`A2A-Version` and `traceparent` headers, and the ids of the tasks it was asked to cancel. With --stream its
card says it streams, and each task first reports `working on it`. Prints `PORT <n>` once listening on 127.0.0.1.

Its one skill, `echo`, answers `NAME: <input>` as a text artifact; the input `ask me` puts
the task in INPUT_REQUIRED, `fail` in FAILED, `slow` waits a minute before answering.
"""

import asyncio
import json
import socket
import sys

import a2a.server.routes  # noqa: F401  (before the compat adapter: a circular import)
import uvicorn
from a2a.helpers.proto_helpers import new_task_from_user_message, new_text_part
from a2a.server.agent_execution.agent_executor import AgentExecutor
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks.inmemory_task_store import InMemoryTaskStore
from a2a.server.tasks.task_updater import TaskUpdater
from a2a.types import a2a_pb2 as pb
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

NAME = sys.argv[1]
V03 = "--v03" in sys.argv
STREAM = "--stream" in sys.argv
LOG = {"contexts": [], "calls": [], "cancelled": []}


class Echo(AgentExecutor):
    async def execute(self, ctx, queue):
        LOG["contexts"].append(ctx.context_id)
        text = ctx.get_user_input()
        task = ctx.current_task or new_task_from_user_message(ctx.message)
        await queue.enqueue_event(task)
        up = TaskUpdater(queue, task.id, task.context_id)
        if STREAM:
            await up.start_work(up.new_agent_message([new_text_part("working on it")]))
        if text == "slow":
            await asyncio.sleep(60)
        if text == "ask me":
            await up.requires_input(up.new_agent_message([new_text_part("which file?")]))
            return
        if text == "fail":
            await up.failed(up.new_agent_message([new_text_part("it broke")]))
            return
        await up.add_artifact([new_text_part(f"{NAME}: {text}")], name="answer")
        await up.complete()

    async def cancel(self, ctx, queue):
        LOG["cancelled"].append(ctx.task_id)
        up = TaskUpdater(queue, ctx.task_id, ctx.context_id)
        await up.cancel()


class Recorder:
    """Records each JSON-RPC call's method and A2A-Version, then hands the body on."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] != "POST":
            return await self.app(scope, receive, send)
        body, more = b"", True
        while more:
            m = await receive()
            body += m.get("body", b"")
            more = m.get("more_body", False)
        headers = dict(scope["headers"])
        try:
            request = json.loads(body)
        except Exception:  # noqa: BLE001
            request = {}
        LOG["calls"].append(
            {
                "method": request.get("method"),
                "version": headers.get(b"a2a-version", b"").decode(),
                "traceparent": headers.get(b"traceparent", b"").decode(),
                "request": request,
            }
        )
        replayed = False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        return await self.app(scope, replay, send)


def main():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    card = pb.AgentCard(
        name=NAME,
        description=f"{NAME} echoes",
        version="1.0.0",
        supported_interfaces=[
            pb.AgentInterface(
                url=f"http://127.0.0.1:{port}/",
                protocol_binding="JSONRPC",
                protocol_version="0.3" if V03 else "1.0",
            )
        ],
        capabilities=pb.AgentCapabilities(
            streaming=STREAM,
            extensions=[
                pb.AgentExtension(
                    uri="urn:ldp:identity",
                    params={"ldp.model_family": f"{NAME}-family", "ldp.model_version": "7"},
                )
            ],
        ),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[pb.AgentSkill(id="echo", name="Echo", description="Echoes.", tags=["test"])],
    )
    handler = DefaultRequestHandler(
        agent_executor=Echo(), task_store=InMemoryTaskStore(), agent_card=card
    )

    async def log(_request):
        return JSONResponse(LOG)

    routes = create_agent_card_routes(card)
    routes += create_jsonrpc_routes(handler, "/", enable_v0_3_compat=V03)
    routes.append(Route("/log", log, methods=["GET"]))
    app = Recorder(Starlette(routes=routes))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    print(f"PORT {port}", flush=True)
    asyncio.run(server.serve(sockets=[sock]))


if __name__ == "__main__":
    main()
