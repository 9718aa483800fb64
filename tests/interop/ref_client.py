#!/usr/bin/env python3
"""Drive an LDP endpoint (the gateway, or any delegate) with the reference SDK's `LdpClient`.

Runs under either form of the reference SDK (the PyPI wheel `ldp-protocol==0.2.0` or the
newer SDK bundled in the `ldp-protocol` crate's source).

    python ref_client.py --url http://127.0.0.1:PORT --skill summarize --tasks 3 \
        [--expect-produced-by ID] [--trust-domain default] [--direct]

Steps: discover (`discover`, `discover_wellknown` when the SDK has it, and a raw GET of
/.well-known/ldp-identity parsed as an identity card), `establish_session`, N x
`submit_task`, then SESSION_CLOSE. Each result must carry output and provenance
(`produced_by`, `model_version`, `payload_mode_used`, the client's session id); on the
bundled SDK also `verification_status` and, unless --direct, a first lineage entry with
step "route" from the gateway.

Prints one JSON line on stdout:
    {"ok": true, "sdk": "wheel"|"bundled", "session_id": ..., "card": {...}, "results": [...]}
Exit codes: 0 success; 1 any other failure (message on stderr, `{"ok": false, ...}` on
stdout); 2 bad arguments; 3 SESSION_PROPOSE was answered with SESSION_REJECT (stdout:
`{"ok": false, "rejected": true, "code": ..., "reason": ...}`).
"""

from __future__ import annotations

import argparse
import asyncio
import enum
import json
import re
import sys
import traceback
from typing import Any

EXIT_FAILED = 1
EXIT_REJECTED = 3


class CheckFailed(Exception):
    pass


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", required=True, help="base URL of the LDP endpoint")
    p.add_argument("--skill", default="summarize")
    p.add_argument("--tasks", type=int, default=3)
    p.add_argument("--trust-domain", default="default", help="the client's trust domain")
    p.add_argument("--client-id", default="ldp:client:ref-client")
    p.add_argument("--expect-produced-by", default=None, help="every result's produced_by")
    p.add_argument(
        "--expect-echo",
        action="store_true",
        help="outputs come from ref_delegate.py: {echo: <input>, by: <produced_by>}",
    )
    p.add_argument(
        "--direct",
        action="store_true",
        help="the URL is a plain delegate, not the gateway: skip the route-lineage checks",
    )
    p.add_argument(
        "--contract-budget-usd",
        type=float,
        default=None,
        help="bundled SDK only: attach a DelegationContract with this cost budget to each task",
    )
    p.add_argument("--signing-secret", default=None, help="HMAC secret (SDK signing)")
    p.add_argument("--timeout", type=float, default=30.0, help="HTTP timeout, seconds")
    p.add_argument("--no-close", action="store_true", help="skip the final SESSION_CLOSE")
    return p.parse_args(argv)


def jsonable(value: Any) -> Any:
    """model_dump() keeps enums as enum members; make everything JSON-friendly."""
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    return value


def check(cond: bool, message: str) -> None:
    if not cond:
        raise CheckFailed(message)


def emit(obj: dict[str, Any]) -> None:
    print(json.dumps(jsonable(obj), sort_keys=True), flush=True)


def note(message: str) -> None:
    print(f"ref_client: {message}", file=sys.stderr, flush=True)


async def run(args: argparse.Namespace, state: dict[str, Any]) -> dict[str, Any]:
    import httpx
    import ldp_protocol
    from ldp_protocol import (
        LdpClient,
        LdpEnvelope,
        LdpIdentityCard,
        LdpMessageBody,
        TrustDomain,
    )

    bundled = hasattr(ldp_protocol, "DelegationContract")
    sdk = "bundled" if bundled else "wheel"
    state["sdk"] = sdk
    url = args.url.rstrip("/")

    client = LdpClient(
        delegate_id=args.client_id,
        trust_domain=TrustDomain(name=args.trust_domain),
        timeout=args.timeout,
        signing_secret=args.signing_secret,
    )
    async with client:
        # --- discovery -------------------------------------------------------------------
        # discover() also checks the card's trust domain against ours. A refusal there is
        # the client's own check; record it and go on, so that SESSION_PROPOSE shows what
        # the endpoint itself decides about our claimed domain.
        card = None
        try:
            card = await client.discover(url)
        except ConnectionError as e:
            state["client_trust_refusal"] = str(e)
            note(f"client-side trust check refused the card: {e}")
        if card is None:
            async with httpx.AsyncClient(timeout=args.timeout) as http:
                resp = await http.get(f"{url}/ldp/identity")
                resp.raise_for_status()
                card = LdpIdentityCard.model_validate(resp.json())
        else:
            if hasattr(client, "discover_wellknown"):
                wk = await client.discover_wellknown(url)
                check(
                    wk.delegate_id == card.delegate_id,
                    f"discover_wellknown gave {wk.delegate_id!r}, discover {card.delegate_id!r}",
                )
        # discover_wellknown() silently falls back to /ldp/identity; fetch the RFC path
        # directly so a broken /.well-known/ldp-identity cannot hide.
        async with httpx.AsyncClient(timeout=args.timeout) as http:
            resp = await http.get(f"{url}/.well-known/ldp-identity")
            check(
                resp.status_code == 200,
                f"GET /.well-known/ldp-identity answered HTTP {resp.status_code}",
            )
            wk_card = LdpIdentityCard.model_validate(resp.json())
        check(
            wk_card.delegate_id == card.delegate_id,
            f"/.well-known/ldp-identity is {wk_card.delegate_id!r}, /ldp/identity "
            f"{card.delegate_id!r}",
        )
        skills = [c.name for c in card.capabilities]
        state["card"] = {
            "delegate_id": card.delegate_id,
            "model_family": card.model_family,
            "model_version": card.model_version,
            "trust_domain": card.trust_domain.name,
            "skills": skills,
        }
        check(args.skill in skills, f"the card offers {skills}, not {args.skill!r}")

        # --- session ---------------------------------------------------------------------
        session = await client.establish_session(url)
        state["session_id"] = session.session_id
        state["negotiated_mode"] = session.payload.mode
        check(bool(session.session_id), "SESSION_ACCEPT gave an empty session id")

        # --- tasks -----------------------------------------------------------------------
        contract_cls = getattr(ldp_protocol, "DelegationContract", None)
        results = []
        for i in range(args.tasks):
            input_data = {"text": f"interop task {i} via {sdk} sdk", "n": i}
            kwargs: dict[str, Any] = {}
            if args.contract_budget_usd is not None and contract_cls is not None:
                kwargs["contract"] = contract_cls(
                    objective=f"{args.skill} interop task {i}",
                    policy=ldp_protocol.PolicyEnvelope(
                        budget=ldp_protocol.BudgetPolicy(max_cost_usd=args.contract_budget_usd)
                    ),
                )
            result = await client.submit_task(
                url, skill=args.skill, input_data=input_data, session=session, **kwargs
            )
            results.append(check_result(args, bundled, card, session, i, input_data, result))
        state["results"] = results

        # --- close -----------------------------------------------------------------------
        if not args.no_close:
            close = LdpEnvelope.create(
                session_id=session.session_id,
                from_id=args.client_id,
                to_id=session.remote_delegate_id,
                body=LdpMessageBody.session_close(reason="interop test done"),
            )
            resp_env = await client.send_message(url, close)
            state["close_answer"] = resp_env.body.type

    state["ok"] = True
    return state


def check_result(args, bundled, card, session, i, input_data, result) -> dict[str, Any]:
    where = f"task {i}"
    check(isinstance(result, dict), f"{where}: submit_task returned {result!r}")
    check(
        "output" in result,
        f"{where}: no TASK_RESULT (got {result.get('status')!r}: {result.get('message')!r})",
    )
    output = result["output"]
    check(output is not None, f"{where}: output is null")
    prov = result.get("provenance")
    check(isinstance(prov, dict), f"{where}: no provenance")
    prov = jsonable(prov)
    for key in ("produced_by", "model_version", "payload_mode_used"):
        check(bool(prov.get(key)), f"{where}: provenance.{key} is missing or empty: {prov}")
    check(
        prov.get("session_id") == session.session_id,
        f"{where}: provenance.session_id {prov.get('session_id')!r} is not the client's "
        f"session {session.session_id!r}",
    )
    if args.expect_produced_by:
        check(
            prov["produced_by"] == args.expect_produced_by,
            f"{where}: produced_by {prov['produced_by']!r}, expected {args.expect_produced_by!r}",
        )
    if args.expect_echo:
        check(
            isinstance(output, dict)
            and output.get("echo") == input_data
            and output.get("by") == prov["produced_by"],
            f"{where}: output {output!r} is not the echo of {input_data!r} by "
            f"{prov['produced_by']!r}",
        )
    summary: dict[str, Any] = {
        "task_id": result.get("task_id"),
        "produced_by": prov["produced_by"],
        "model_version": prov["model_version"],
        "payload_mode_used": prov["payload_mode_used"],
        "session_id": prov.get("session_id"),
        "confidence": prov.get("confidence"),
        "output": output,
    }
    if bundled:
        check(
            bool(prov.get("verification_status")),
            f"{where}: provenance.verification_status missing",
        )
        lineage = prov.get("lineage") or []
        summary["verification_status"] = prov["verification_status"]
        summary["cost_usd"] = prov.get("cost_usd")
        summary["tokens_used"] = prov.get("tokens_used")
        summary["lineage"] = lineage
        if not args.direct:
            check(bool(lineage), f"{where}: provenance.lineage is empty")
            first = lineage[0]
            check(
                first.get("step") == "route",
                f"{where}: lineage[0].step is {first.get('step')!r}, not 'route'",
            )
            check(
                first.get("delegate_id") == card.delegate_id,
                f"{where}: lineage[0].delegate_id {first.get('delegate_id')!r} is not the "
                f"endpoint's {card.delegate_id!r}",
            )
        if args.contract_budget_usd is not None:
            summary["contract_satisfied"] = result.get("contract_satisfied")
            check(
                result.get("contract_satisfied") is True,
                f"{where}: contract not satisfied: {result.get('contract_violations')}",
            )
    return summary


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    state: dict[str, Any] = {"ok": False, "url": args.url}
    try:
        asyncio.run(run(args, state))
    except ConnectionError as e:
        message = str(e)
        m = re.match(r"Session rejected(?: \[([^\]]+)\])?: (.*)", message, re.S)
        if m:
            state.update(rejected=True, code=m.group(1), reason=m.group(2))
            note(f"session rejected: {message}")
            emit(state)
            return EXIT_REJECTED
        state["error"] = f"ConnectionError: {message}"
        note(state["error"])
        emit(state)
        return EXIT_FAILED
    except CheckFailed as e:
        state["error"] = f"check failed: {e}"
        note(state["error"])
        emit(state)
        return EXIT_FAILED
    except Exception as e:  # noqa: BLE001 - report anything the SDK raises
        state["error"] = f"{type(e).__name__}: {e}"
        traceback.print_exc(file=sys.stderr)
        note(state["error"])
        emit(state)
        return EXIT_FAILED
    emit(state)
    return 0


if __name__ == "__main__":
    sys.exit(main())
