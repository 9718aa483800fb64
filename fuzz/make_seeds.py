#!/usr/bin/env python3
"""Writes the hand-made seeds of fuzz/corpus/{envelope,card,policy} from the repository's fixtures.

Run from anywhere: `python3 fuzz/make_seeds.py`. It rewrites only the files it names (the
`valid-*` seeds and the tricky ones below); `crash-*` files and entries merged from fuzzing
runs are left alone. Seeds are compact JSON so that mutations land on content, not spaces.
"""

import json
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
FIX = ROOT / "tests" / "fixtures"
OUT = ROOT / "fuzz" / "corpus"


def write(target, name, data):
    path = OUT / target / name
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    path.write_bytes(data)


def compact(value):
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def envelope(body, **over):
    env = {
        "message_id": "m-1",
        "session_id": "s-1",
        "from": "ldp:delegate:a",
        "to": "ldp:delegate:b",
        "body": body,
        "payload_mode": "text",
        "timestamp": "2026-01-01T00:00:00Z",
        "provenance": None,
    }
    env.update(over)
    return env


def envelopes():
    t = "envelope"
    for dialect in ("rfc", "reference"):
        for body in json.loads((FIX / f"{dialect}_bodies.json").read_text()):
            kind = body["type"].lower().replace("_", "-")
            write(t, f"valid-{dialect}-{kind}.json", compact(envelope(body)))
    for i, env in enumerate(json.loads((FIX / "reference_session_flow.json").read_text())):
        write(t, f"valid-flow-{i + 1}.json", compact(env))
    for sdk in ("pypi_wheel", "bundled_sdk"):
        for f in sorted((FIX / "python" / sdk).glob("*.json")):
            if f.stem != "identity_card":
                stem = f.stem.replace("_", "-")
                write(t, f"valid-py-{sdk.split('_')[0]}-{stem}.json", compact(json.loads(f.read_text())))

    write(t, "valid-minimal.json", '{"body":{"type":"TASK_CANCEL","task_id":"t"}}')
    write(t, "valid-rfc-only-modes.json", compact(envelope(
        {"type": "SESSION_ACCEPT", "session_id": "s", "negotiated_mode": "latent_capsules",
         "fallback_chain": ["cache_slices", "nope", 7, None, "text"]},
        payload_mode="cache_slices")))
    write(t, "valid-error-string.json", compact(envelope(
        {"type": "TASK_FAILED", "task_id": "t", "error": "boom"})))
    write(t, "valid-unicode.json", compact(envelope(
        {"type": "TASK_SUBMIT", "task_id": "\u0000t\u2028", "skill": "résumé-日本語-🦀",
         "input": {"\ud7ff": "\U0001F980", "": [None, True, -0.0, 1e-320]}},
        **{"from": "İstanbul", "to": "\u202e\u0301"})) .replace("🦀", "\\ud83e\\udd80", 1))
    deep = "[" * 100 + "]" * 100
    write(t, "valid-deep-nesting.json",
          '{"body":{"type":"TASK_RESULT","task_id":"t","output":' + deep + "}}")
    write(t, "valid-huge-numbers.json", compact(envelope(
        {"type": "TASK_SUBMIT", "task_id": "t", "skill": "s",
         "input": 123456789012345678901234567890,
         "contract": {"contract_id": "c", "policy": {"budget": {"max_tokens": 18446744073709551615,
                                                                "max_cost_usd": 1e308}},
                      "deadline": "+275760-09-13T00:00:00Z"}})))
    write(t, "valid-contract-extra.json", compact(envelope(
        {"type": "TASK_SUBMIT", "task_id": "t", "skill": "s", "input": "x",
         "contract": {"contract_id": "c", "objective": "o", "policy": {"failure_policy": "x"},
                      "deadline": "2026-12-31T23:59:59+14:00"}})))
    write(t, "valid-provenance-verified.json", compact(envelope(
        {"type": "TASK_RESULT", "task_id": "t", "output": "o",
         "provenance": {"produced_by": "d", "model_version": "v", "payload_mode_used": "text",
                        "verified": True}})))
    write(t, "valid-skills-bare-names.json", compact(envelope(
        {"type": "CAPABILITY_MANIFEST", "skills": ["a", {"name": "b", "quality": 0.5}]})))

    # Rejected inputs: every one must fail cleanly.
    write(t, "deep-nesting-over-limit.json",
          '{"body":{"type":"TASK_RESULT","task_id":"t","output":' + "[" * 1000 + "]" * 1000 + "}}")
    write(t, "huge-number-overflow.json", compact(envelope(
        {"type": "SESSION_PROPOSE", "config": {"ttl_secs": 18446744073709551616}})))
    write(t, "huge-float.json",
          '{"body":{"type":"TASK_UPDATE","task_id":"t","progress":1e400}}')
    write(t, "negative-ttl.json", compact(envelope(
        {"type": "SESSION_PROPOSE", "config": {"ttl_secs": -1}})))
    nulls = {k: None for k in ("message_id", "session_id", "from", "to", "payload_mode",
                               "timestamp", "provenance", "signature", "nonce")}
    write(t, "nulls-everywhere.json", compact(dict(nulls, body={
        k: None for k in ("type", "delegate_id", "supported_modes", "capabilities", "config",
                          "session_id", "task_id", "skill", "input", "error", "output")})))
    write(t, "null-body.json", compact(dict(nulls, body=None)))
    write(t, "duplicate-keys.json",
          '{"body":{"type":"HELLO","type":"TASK_CANCEL","task_id":"t"},"from":"a","from":"b"}')
    full = compact(envelope(json.loads((FIX / "rfc_bodies.json").read_text())[5]))
    for cut in (1, len(full) // 3, len(full) // 2, len(full) - 1):
        write(t, f"truncated-{cut}.json", full[:cut])
    write(t, "lone-surrogate.json", '{"body":{"type":"TASK_CANCEL","task_id":"\\ud800"}}')
    write(t, "bom-prefix.json", b"\xef\xbb\xbf" + b'{"body":{"type":"TASK_CANCEL","task_id":"t"}}')
    write(t, "invalid-utf8.json", b'{"body":{"type":"TASK_CANCEL","task_id":"\xff\xfe"}}')
    write(t, "unknown-type.json", '{"body":{"type":"hello","delegate_id":"a"}}')
    write(t, "missing-field.json", '{"body":{"type":"TASK_SUBMIT","task_id":"t"}}')
    write(t, "wrong-types.json", '{"session_id":7,"body":{"type":"TASK_CANCEL","task_id":["t"]}}')
    write(t, "empty.json", "")
    for name, text in (("json-null", "null"), ("json-array", "[]"), ("json-string", '"x"'),
                       ("json-number", "-0.0e-0")):
        write(t, f"{name}.json", text)
    write(t, "session-config-object.json", compact(
        {"preferred_payload_modes": "text", "payload_mode": 3, "trust_domain": {"name": ""},
         "required_trust_domain": None, "ttl_secs": 0.5}))


def cards():
    t = "card"
    sources = [FIX / "rfc_identity_card.json", FIX / "reference_identity_card.json",
               FIX / "python" / "pypi_wheel" / "identity_card.json",
               FIX / "python" / "bundled_sdk" / "identity_card.json"]
    sources += sorted((ROOT / "config" / "delegates").glob("*.json"))
    for f in sources:
        label = f.parent.name if f.stem == "identity_card" and "python" in f.parts else f.stem
        write(t, f"valid-{label.replace('_', '-')}.json", compact(json.loads(f.read_text())))

    base = {"delegate_id": "d", "name": "n", "model_family": "f", "model_version": "v",
            "trust_domain": "default"}
    write(t, "valid-minimal.json", compact(base))
    write(t, "valid-hint-shapes.json", compact(dict(base, capabilities=[
        {"name": "a", "quality": 0.9, "cost_hint": 0.01},
        {"name": "b", "quality": {"quality_score": None, "max_tokens": -5, "latency_p50_ms": 1e300}},
        {"name": "c", "cost_hint": "MED", "latency_hint_ms_p99": 12.5}],
        cost_profile="HIGH", latency_profile="p50:1.5s;p99=NaNms bogus p50:-3ms,p99:1e30s")))
    write(t, "valid-odd-modes-and-metadata.json", compact(dict(
        base, supported_payload_modes=["cache_slices", "nope", 3, None],
        metadata={"a": "x", "n": 1.5e300, "b": False, "o": {"x": 1}, "z": None},
        context_window=0, endpoint="")))
    write(t, "valid-unicode.json", compact(dict(
        base, delegate_id="ldp:delegate:日本-🦀", name="\u0000\u202e", jurisdiction="eu-ß",
        trust_domain={"name": "İ", "allow_cross_domain": True, "trusted_peers": ["", "ǅ"]})))
    write(t, "valid-huge-numbers.json", compact(dict(
        base, context_window=1.8e19, capabilities=[
            {"name": "x", "quality": {"max_tokens": 18446744073709551615, "cost_per_call_usd": 1e308,
                                      "latency_p99_ms": 9007199254740993}}])))
    schema = "{" + '"a":{' * 100 + "}" * 100 + "}"
    write(t, "valid-deep-schema.json",
          compact(base)[:-1] + ',"capabilities":[{"name":"x","input_schema":' + schema + "}]}")

    write(t, "deep-nesting-over-limit.json",
          '{"delegate_id":"d","metadata":' + '{"a":' * 1000 + "1" + "}" * 1001)
    write(t, "huge-float.json", compact(base)[:-1] + ',"context_window":1e999}')
    write(t, "empty-trust-domain.json", compact(dict(base, trust_domain="  ")))
    write(t, "trust-domain-no-name.json", compact(dict(base, trust_domain={"allow_cross_domain": True})))
    write(t, "nulls-everywhere.json", compact({k: None for k in (
        "delegate_id", "name", "description", "model_family", "model_version", "trust_domain",
        "context_window", "capabilities", "supported_payload_modes", "metadata")}))
    write(t, "null-capability.json", compact(dict(base, capabilities=[None])))
    write(t, "duplicate-keys.json", compact(base)[:-1] + ',"name":"again"}')
    full = (OUT / t / "valid-rfc-identity-card.json").read_text()
    for cut in (1, len(full) // 2, len(full) - 1):
        write(t, f"truncated-{cut}.json", full[:cut])
    write(t, "negative-context-window.json", compact(dict(base, context_window=-1)))
    write(t, "wrong-types.json", compact(dict(base, name=5, capabilities={"name": "x"})))
    write(t, "lone-surrogate.json", compact(base)[:-1] + ',"description":"\\udc00"}')
    write(t, "empty.json", "")
    write(t, "json-array.json", "[]")


POLICY_FULL = """name = "full"
description = "every key"

[match]
skills = ["summarize", "reasoning*"]
tenants = ["acme"]

[require]
jurisdictions = ["eu-*"]
deny_jurisdictions = ["us-*"]
trust_domains = ["research.internal"]
min_quality = 0.7
max_cost_usd = 0.02
max_latency_ms = 4000
payload_modes = ["semantic_frame", "text", "text"]
min_context_window = 32000
model_families = ["claude", "LLAMA*"]
deny_model_families = ["gpt*"]

[weights]
quality = 0.5
cost = 0.3
latency = 0.2

[balance]
tolerance = 0.05

[fallback]
max_attempts = 10

[limits]
rps = 50
burst = 100
"""


def policies():
    t = "policy"
    for f in sorted((ROOT / "policies").glob("*.toml")):
        write(t, f"valid-{f.stem}.toml", f.read_text())
    write(t, "valid-full.toml", POLICY_FULL)
    write(t, "valid-minimal.toml", 'name = "x"\n')
    write(t, "valid-inline-and-dotted.toml",
          'name = "a.b_c-9"\nweights = { quality = 1, cost = 0 }\nrequire.min_quality = 1\n'
          'balance.tolerance = 0.0\n[limits]\nrps = 1e30\n')
    write(t, "valid-crlf-unicode.toml",
          'name = "u"\r\ndescription = "日本語 🦀 \\u0000 \\U0001F980"\r\n[match]\r\n'
          'tenants = ["İ", "\\t"]\r\nskills = ["ǅ*"]\r\n')
    write(t, "valid-limits-fraction.toml", 'name = "l"\n[limits]\nrps = 0.001\n')

    # Rejected inputs: every one must fail with problems on real lines.
    write(t, "syntax-error.toml", 'name = "x\n[weights\nquality = = 1\n')
    write(t, "truncated.toml", POLICY_FULL[: len(POLICY_FULL) // 2])
    write(t, "unknown-keys.toml", 'name = "x"\nnmae = "y"\n[require]\nmin_qualty = 1\n[extra]\n')
    write(t, "wrong-types.toml",
          'name = 1\ndescription = []\n[match]\nskills = "s"\ntenants = [1, true]\n'
          '[require]\nmin_quality = "high"\nmax_latency_ms = 1.5\n[weights]\nquality = "1"\n'
          '[fallback]\nmax_attempts = 1979-05-27T07:32:00Z\n')
    write(t, "duplicate-keys.toml", 'name = "a"\nname = "b"\n[weights]\n[weights]\n')
    write(t, "nan-inf.toml",
          'name = "n"\n[require]\nmin_quality = nan\nmax_cost_usd = -inf\n[weights]\n'
          'quality = +inf\n[balance]\ntolerance = -nan\n[limits]\nrps = inf\n')
    write(t, "huge-integers.toml",
          'name = "h"\n[require]\nmax_latency_ms = 9223372036854775807\nmin_context_window = '
          '-9223372036854775808\n[fallback]\nmax_attempts = 9223372036854775808\n[limits]\n'
          'rps = 1\nburst = 4294967296\n')
    write(t, "out-of-range.toml",
          'name = "bad name!"\n[match]\n[require]\njurisdictions = ["EU-*", ""]\nmin_quality = 1.01\n'
          'max_latency_ms = 0\npayload_modes = ["telepathy"]\nmodel_families = ["a b"]\n[weights]\n'
          'quality = 0\ncost = 0\nlatency = 0\n[balance]\ntolerance = 1\n[fallback]\nmax_attempts = 0\n'
          '[limits]\nburst = 0\n')
    write(t, "array-of-tables.toml", 'name = "a"\n[[match]]\nskills = ["x"]\n[[require]]\n')
    write(t, "deep-nesting.toml", 'name = "d"\nx = ' + "[" * 1000 + "]" * 1000 + "\n")
    write(t, "deep-inline-tables.toml", 'name = "d"\nx = ' + "{a=" * 1000 + "1" + "}" * 1000 + "\n")
    write(t, "nul-and-controls.toml", 'name = "a\u0000"\n\u0000\u0007 = 1\n')
    write(t, "invalid-utf8.toml", b'name = "\xff\xfe"\n')
    write(t, "bom.toml", b'\xef\xbb\xbfname = "b"\n')
    write(t, "nulls-everywhere.toml", "name = null\n[weights]\nquality = null\n")
    write(t, "empty.toml", "")
    write(t, "only-comment.toml", "# nothing\n")
    write(t, "long-line.toml", 'name = "' + "x" * 3000 + '"\n[require]\ntrust_domains = ["' + "y" * 100 + '"]')


if __name__ == "__main__":
    envelopes()
    cards()
    policies()
    for t in ("envelope", "card", "policy"):
        files = list((OUT / t).iterdir())
        print(f"{t}: {len(files)} files, {sum(f.stat().st_size for f in files)} bytes")
