#!/usr/bin/env python3
"""A reference LDP delegate built on the Python SDK's `LdpDelegate`, for interop tests.

Runs under either form of the reference SDK (the PyPI wheel `ldp-protocol==0.2.0` or the
newer SDK bundled in the `ldp-protocol` crate's source) and uses only the API they share.

It binds 127.0.0.1 on an ephemeral port and, once the server accepts connections, prints
exactly one line on stdout:

    listening on http://127.0.0.1:PORT

Everything else (the SDK's start-up banner, uvicorn's logs) goes to stderr.

    python ref_delegate.py --id ldp:delegate:py-a --skill summarize --quality 0.9 \
        --cost 0.002 --latency-ms 300 --trust-domain default --model-family pyref

Each task answers `{"echo": <input>, "by": <delegate id>, "skill": <skill>}` with
confidence 0.8 (see --confidence), after --delay-ms.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import sys
import threading


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--id", default="ldp:delegate:py-ref", help="delegate_id")
    p.add_argument("--name", default=None, help="display name (default: from --id)")
    p.add_argument(
        "--skill",
        action="append",
        default=None,
        help="a skill to offer; repeat for several (default: summarize)",
    )
    p.add_argument("--quality", type=float, default=0.9, help="quality_score of each skill")
    p.add_argument("--cost", type=float, default=0.002, help="cost_per_call_usd of each skill")
    p.add_argument("--latency-ms", type=int, default=300, help="latency_p50_ms of each skill")
    p.add_argument("--trust-domain", default="default")
    p.add_argument("--allow-cross-domain", action="store_true")
    p.add_argument(
        "--trusted-peer", action="append", default=[], help="a trusted peer domain; repeatable"
    )
    p.add_argument("--model-family", default="pyref")
    p.add_argument("--model-version", default="pyref-1.0")
    p.add_argument("--context-window", type=int, default=128000)
    p.add_argument("--jurisdiction", default=None)
    p.add_argument("--signing-secret", default=None, help="HMAC secret (SDK signing)")
    p.add_argument("--confidence", type=float, default=0.8)
    p.add_argument("--delay-ms", type=int, default=0, help="sleep this long in each task")
    p.add_argument(
        "--fail-skill",
        action="append",
        default=[],
        help="tasks of this skill raise (the SDK answers TASK_FAILED); repeatable",
    )
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument(
        "--watch-stdin",
        action="store_true",
        help="exit when stdin reaches EOF (the parent went away)",
    )
    p.add_argument("--log-level", default="warning", help="uvicorn log level")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)

    # stdout carries only the readiness line; the SDK's run() prints a banner with print().
    ready_out = sys.stdout
    sys.stdout = sys.stderr

    import uvicorn
    from ldp_protocol import LdpCapability, LdpDelegate, QualityMetrics, TrustDomain

    sdk = "bundled" if _is_bundled_sdk() else "wheel"
    skills = args.skill or ["summarize"]
    delegate_id = args.id

    class RefDelegate(LdpDelegate):
        async def handle_task(self, skill, input_data, task_id):
            if args.delay_ms:
                await asyncio.sleep(args.delay_ms / 1000)
            if skill in args.fail_skill:
                raise RuntimeError(f"skill {skill!r} is set to fail")
            return {"echo": input_data, "by": delegate_id, "skill": skill}, args.confidence

    delegate = RefDelegate(
        delegate_id=delegate_id,
        name=args.name or f"Python reference delegate {delegate_id}",
        description=f"ldp-protocol Python SDK ({sdk}) reference delegate for interop tests",
        model_family=args.model_family,
        model_version=args.model_version,
        context_window=args.context_window,
        trust_domain=TrustDomain(
            name=args.trust_domain,
            allow_cross_domain=args.allow_cross_domain,
            trusted_peers=args.trusted_peer,
        ),
        capabilities=[
            LdpCapability(
                name=skill,
                description=f"{skill} (echo)",
                quality=QualityMetrics(
                    quality_score=args.quality,
                    latency_p50_ms=args.latency_ms,
                    latency_p99_ms=args.latency_ms * 2,
                    cost_per_call_usd=args.cost,
                ),
            )
            for skill in skills
        ],
        signing_secret=args.signing_secret,
    )
    if args.jurisdiction:
        delegate.identity.jurisdiction = args.jurisdiction

    # Bind our own socket on port 0: LdpDelegate.run() takes a fixed port and calls
    # uvicorn.run(app, host=, port=), so hand it the real port and swap uvicorn.run for
    # a server that serves on this socket.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((args.host, 0))
    sock.listen(128)
    port = sock.getsockname()[1]
    url = f"http://{args.host}:{port}"

    class ReadyServer(uvicorn.Server):
        async def startup(self, sockets=None):
            await super().startup(sockets=sockets)
            if not self.should_exit:
                print(f"listening on {url}", file=ready_out, flush=True)

    def serve_on_socket(app, host=None, port=None, **_kwargs):
        config = uvicorn.Config(app, log_level=args.log_level, lifespan="off")
        ReadyServer(config).run(sockets=[sock])

    uvicorn.run = serve_on_socket

    if args.watch_stdin:
        threading.Thread(target=_exit_on_stdin_eof, daemon=True).start()

    delegate.run(host=args.host, port=port)
    return 0


def _is_bundled_sdk() -> bool:
    import ldp_protocol

    return hasattr(ldp_protocol, "DelegationContract")


def _exit_on_stdin_eof() -> None:
    try:
        while sys.stdin.buffer.read(4096):
            pass
    except Exception:
        pass
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
