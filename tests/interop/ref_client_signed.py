#!/usr/bin/env python3
"""The reference SDK's `LdpClient` with HMAC signing and an API key, against the gateway.

Runs under either form of the reference SDK (the PyPI wheel `ldp-protocol==0.2.0` or the
newer SDK bundled in the `ldp-protocol` crate's source); used by tests/security.rs.

    python ref_client_signed.py --url http://127.0.0.1:PORT --api-key KEY \
        --signing-secret SECRET [--skill summarize] [--tasks 2] [--replay]

Steps: `discover`, `establish_session`, N x `submit_task`. With --replay it then posts the
last signed TASK_SUBMIT a second time, unchanged, and reports the HTTP status it got.

How a reference-SDK user passes the gateway's API key: the SDK has no option for it, but
every request goes through the client's `httpx.AsyncClient` (`client._http`), so its default
headers carry it:  client._http.headers["Authorization"] = "Bearer <key>".

Prints one JSON line on stdout:
    {"ok": true, "sdk": "wheel"|"bundled", "session_id": ..., "results": [...], ...}
or  {"ok": false, "status": <HTTP status, if any>, "error": ...}
Exit codes: 0 success; 1 failure.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", required=True)
    p.add_argument("--api-key", default=None)
    p.add_argument("--signing-secret", default=None)
    p.add_argument("--skill", default="summarize")
    p.add_argument("--tasks", type=int, default=2)
    p.add_argument("--trust-domain", default="default")
    p.add_argument("--client-id", default="ldp:client:ref-signed")
    p.add_argument("--replay", action="store_true")
    p.add_argument("--timeout", type=float, default=30.0)
    return p.parse_args()


async def run(args: argparse.Namespace, out: dict[str, Any]) -> None:
    import ldp_protocol
    from ldp_protocol import LdpClient, LdpEnvelope, LdpMessageBody, TrustDomain

    out["sdk"] = "bundled" if hasattr(ldp_protocol, "DelegationContract") else "wheel"
    url = args.url.rstrip("/")
    client = LdpClient(
        delegate_id=args.client_id,
        trust_domain=TrustDomain(name=args.trust_domain),
        timeout=args.timeout,
        signing_secret=args.signing_secret,
    )
    if args.api_key:
        client._http.headers["Authorization"] = f"Bearer {args.api_key}"
    async with client:
        card = await client.discover(url)
        out["card"] = card.delegate_id
        session = await client.establish_session(url)
        out["session_id"] = session.session_id
        results = []
        for i in range(args.tasks):
            r = await client.submit_task(
                url, skill=args.skill, input_data={"text": f"signed task {i}"}, session=session
            )
            prov = r.get("provenance") or {}
            results.append(
                {
                    "task_id": r.get("task_id"),
                    "has_output": r.get("output") is not None,
                    "produced_by": prov.get("produced_by"),
                }
            )
        out["results"] = results
        if args.replay:
            # A signed TASK_SUBMIT, sent once normally and once more byte for byte.
            env = LdpEnvelope.create(
                session_id=session.session_id,
                from_id=args.client_id,
                to_id=session.remote_delegate_id,
                body=LdpMessageBody.task_submit(
                    task_id="replayed-task", skill=args.skill, input={"text": "once"}
                ),
            )
            if args.signing_secret:
                from ldp_protocol.signing import apply_signature

                apply_signature(env, args.signing_secret)
            raw = env.model_dump(by_alias=True)
            first = await client._http.post(f"{url}/ldp/messages", json=raw)
            second = await client._http.post(f"{url}/ldp/messages", json=raw)
            out["replay_first_status"] = first.status_code
            out["replay_second_status"] = second.status_code
            try:
                out["replay_second_code"] = second.json()["error"]["code"]
            except Exception:  # noqa: BLE001 - report whatever came back
                out["replay_second_code"] = None
    out["ok"] = True


def main() -> int:
    args = parse_args()
    out: dict[str, Any] = {"ok": False}
    try:
        asyncio.run(run(args, out))
    except Exception as e:  # noqa: BLE001 - report anything the SDK raises
        response = getattr(e, "response", None)
        if response is not None:
            out["status"] = response.status_code
        out["error"] = f"{type(e).__name__}: {e}"
    print(json.dumps(out, sort_keys=True), flush=True)
    return 0 if out["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
