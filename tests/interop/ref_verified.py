#!/usr/bin/env python3
"""Read a peer-verified result with the reference SDK's `LdpClient` (either form).

    python ref_verified.py --url http://127.0.0.1:PORT [--skill qa] [--tasks 2]

The gateway at URL runs a policy with `[verify]` for the skill, whose producers answer
`{"answer": <expected>}` to a question carrying `"expected"`. For each task:

* `submit_task` (the SDK's own parse) must return a result with provenance; on the bundled
  SDK, whose `Provenance` knows `verification_status`, `evidence` (`EvidenceRef`) and
  `lineage`, the status must be `peer_verified`, every evidence entry a parsed `peer_vote`,
  and the lineage start with the gateway's `verify` step, then its `route` step. The older
  wheel's `Provenance` knows only `verified`, which must be true.
* The same kind of TASK_SUBMIT, built by the SDK, is also posted as is and the raw answer kept:
  it must validate as the SDK's `LdpEnvelope` (the fields an SDK does not know are ignored,
  not refused), carry `verification_status: "peer_verified"`, and each raw evidence entry
  must validate as the bundled SDK's `EvidenceRef` (when it has one).

Prints one JSON line on stdout:
    {"ok": true, "sdk": "wheel"|"bundled", "results": [{task_id, produced_by, answer,
     expected, verified, verification_status?, evidence?, lineage_steps?,
     raw_verification_status, raw_evidence}, ...]}
Exit codes: 0 success; 1 any failure (message on stderr, `{"ok": false, ...}` on stdout).
"""

from __future__ import annotations

import argparse
import asyncio
import enum
import json
import sys
import traceback
from typing import Any


class CheckFailed(Exception):
    pass


def check(cond: bool, message: str) -> None:
    if not cond:
        raise CheckFailed(message)


def jsonable(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    return value


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", required=True, help="base URL of the gateway")
    p.add_argument("--skill", default="qa")
    p.add_argument("--tasks", type=int, default=2)
    p.add_argument("--client-id", default="ldp:client:ref-verified")
    p.add_argument("--timeout", type=float, default=30.0)
    return p.parse_args(argv)


async def run(args: argparse.Namespace, state: dict[str, Any]) -> None:
    import ldp_protocol
    from ldp_protocol import LdpClient, LdpEnvelope, LdpMessageBody, TrustDomain
    from ldp_protocol.types.provenance import Provenance

    evidence_ref = getattr(ldp_protocol, "EvidenceRef", None)
    if evidence_ref is None:
        try:
            from ldp_protocol.types.verification import EvidenceRef as evidence_ref
        except ImportError:
            evidence_ref = None
    bundled = hasattr(ldp_protocol, "DelegationContract")
    state["sdk"] = "bundled" if bundled else "wheel"
    url = args.url.rstrip("/")
    client = LdpClient(
        delegate_id=args.client_id,
        trust_domain=TrustDomain(name="default"),
        timeout=args.timeout,
    )
    results = []
    async with client:
        session = await client.establish_session(url)
        for i in range(args.tasks):
            n = 20 + i
            expected = 2 * n
            # task_type and instruction: what a semantic_frame delegate requires.
            question = {
                "task_type": args.skill,
                "instruction": f"what is {n} + {n}?",
                "expected": expected,
            }
            where = f"task {i}"

            # The SDK's own way: submit_task and its parse.
            result = await client.submit_task(
                url, skill=args.skill, input_data=question, session=session
            )
            check(
                isinstance(result, dict) and "output" in result,
                f"{where}: no TASK_RESULT: {result!r}",
            )
            output = result["output"]
            check(isinstance(output, dict), f"{where}: output {output!r}")
            prov = result.get("provenance")
            check(isinstance(prov, dict), f"{where}: no provenance in {result!r}")
            prov = jsonable(prov)
            summary: dict[str, Any] = {
                "task_id": result.get("task_id"),
                "produced_by": prov.get("produced_by"),
                "answer": output.get("answer"),
                "expected": expected,
                "verified": prov.get("verified"),
            }
            check(output.get("answer") == expected, f"{where}: answer {output!r}")
            check(prov.get("verified") is True, f"{where}: provenance.verified: {prov}")
            if bundled:
                status = prov.get("verification_status")
                check(status == "peer_verified", f"{where}: verification_status {status!r}")
                evidence = prov.get("evidence") or []
                check(len(evidence) >= 1, f"{where}: no evidence in {prov}")
                for e in evidence:
                    check(
                        e.get("kind") == "peer_vote" and bool(e.get("source")),
                        f"{where}: evidence entry {e!r}",
                    )
                steps = [entry.get("step") for entry in prov.get("lineage") or []]
                check(steps[:2] == ["verify", "route"], f"{where}: lineage steps {steps}")
                summary.update(
                    verification_status=status, evidence=evidence, lineage_steps=steps
                )

            # The raw answer to a TASK_SUBMIT the SDK builds: what is on the wire.
            submit = LdpEnvelope.create(
                session_id=session.session_id,
                from_id=args.client_id,
                to_id=session.remote_delegate_id,
                body=LdpMessageBody.task_submit(
                    task_id=f"raw-{result.get('task_id')}", skill=args.skill, input=question
                ),
                payload_mode=session.payload.mode,
            )
            resp = await client._http.post(
                f"{url}/ldp/messages", json=jsonable(submit.model_dump(by_alias=True))
            )
            check(resp.status_code == 200, f"{where}: raw HTTP {resp.status_code}: {resp.text}")
            raw = resp.json()
            envelope = LdpEnvelope.model_validate(raw)
            check(
                envelope.body.type == "TASK_RESULT",
                f"{where}: raw answer is {envelope.body.type}: {raw}",
            )
            raw_prov = raw["body"]["provenance"]
            parsed_prov = Provenance.model_validate(raw_prov)
            check(parsed_prov.verified is True, f"{where}: raw provenance not verified")
            raw_evidence = raw_prov.get("evidence") or []
            check(
                raw_prov.get("verification_status") == "peer_verified",
                f"{where}: raw verification_status {raw_prov.get('verification_status')!r}",
            )
            if evidence_ref is not None:
                for e in raw_evidence:
                    parsed = evidence_ref.model_validate(e)
                    check(parsed.kind == "peer_vote", f"{where}: raw evidence {e!r}")
            summary.update(
                raw_verification_status=raw_prov.get("verification_status"),
                raw_evidence=raw_evidence,
            )
            results.append(summary)
    state["results"] = results
    state["ok"] = True


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    state: dict[str, Any] = {"ok": False, "url": args.url}
    try:
        asyncio.run(run(args, state))
    except CheckFailed as e:
        state["error"] = f"check failed: {e}"
    except Exception as e:  # noqa: BLE001 - report anything the SDK raises
        traceback.print_exc(file=sys.stderr)
        state["error"] = f"{type(e).__name__}: {e}"
    print(json.dumps(jsonable(state), sort_keys=True), flush=True)
    if not state["ok"]:
        print(f"ref_verified: {state.get('error')}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
