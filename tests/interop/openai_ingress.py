"""The real `openai` SDK as a client of the gateway's OpenAI-compatible ingress.

    python openai_ingress.py --base-url URL --api-key KEY --limited-key KEY2 \
        --chat-model SKILL --ldp-model SKILL

Runs, in order, and records each step's outcome (nothing is asserted here: the Rust test does):
  models       `models.list()`
  chat         a completion of --chat-model (with_raw_response: the parsed completion and the
               x-ldp-* headers)
  ldp          a completion of --ldp-model, one user message
  stream       a stream of --chat-model with `stream_options={"include_usage": True}`
  ldp_stream   a stream of --ldp-model without usage
  unknown      a model nobody offers (expected: NotFoundError)
  wrong_key    a key nobody holds (expected: AuthenticationError)
  rate_limit   with --limited-key (a tenant allowed one request) and `max_retries=1`: one
               completion, then a second one (expected: RateLimitError after one retry); every
               HTTP request the SDK sent is counted with an httpx event hook, and the wait the
               SDK chose before its retry is recorded (then cut to 0.2 s)

Prints one JSON line. An SDK error is recorded as
`{"class", "status", "body", "retry_after", "headers"}`; an unexpected exception ends the run
with exit 1 and `{"failed": "..."}`.
"""

import argparse
import json
import sys
import traceback

import openai

HEADERS = ("x-ldp-task-id", "x-ldp-policy", "x-ldp-delegate")
MESSAGES = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "hello through the gateway"},
]


def ldp_headers(headers) -> dict:
    return {h: headers.get(h) for h in HEADERS}


def error(e: openai.APIStatusError) -> dict:
    return {
        "class": type(e).__name__,
        "status": e.status_code,
        "body": e.body,
        "retry_after": e.response.headers.get("retry-after"),
        "headers": ldp_headers(e.response.headers),
    }


def stream_summary(raw) -> dict:
    chunks = list(raw.parse())
    return {
        "headers": ldp_headers(raw.headers),
        "content": "".join(c.choices[0].delta.content or "" for c in chunks if c.choices),
        "roles": [c.choices[0].delta.role for c in chunks if c.choices and c.choices[0].delta.role],
        "finish_reasons": [
            c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason
        ],
        "last": chunks[-1].model_dump() if chunks else None,
        "usages": sum(1 for c in chunks if c.usage),
        "ids": sorted({c.id for c in chunks}),
        "objects": sorted({c.object for c in chunks}),
        "chunks": len(chunks),
    }


def run(args, out: dict) -> None:
    client = openai.OpenAI(base_url=args.base_url, api_key=args.api_key, max_retries=0, timeout=30)
    out["sdk_version"] = openai.__version__
    out["models"] = sorted(m.id for m in client.models.list())

    raw = client.chat.completions.with_raw_response.create(model=args.chat_model, messages=MESSAGES)
    out["chat"] = {"completion": raw.parse().model_dump(), "headers": ldp_headers(raw.headers)}

    raw = client.chat.completions.with_raw_response.create(
        model=args.ldp_model, messages=[{"role": "user", "content": "summarize this for me"}]
    )
    out["ldp"] = {"completion": raw.parse().model_dump(), "headers": ldp_headers(raw.headers)}

    raw = client.chat.completions.with_raw_response.create(
        model=args.chat_model,
        messages=MESSAGES,
        stream=True,
        stream_options={"include_usage": True},
    )
    out["stream"] = stream_summary(raw)

    raw = client.chat.completions.with_raw_response.create(
        model=args.ldp_model, messages=MESSAGES, stream=True
    )
    out["ldp_stream"] = stream_summary(raw)

    try:
        client.chat.completions.create(model="no-such-skill", messages=MESSAGES)
        out["unknown"] = {"class": None}
    except openai.APIStatusError as e:
        out["unknown"] = error(e)

    wrong = openai.OpenAI(base_url=args.base_url, api_key="sk-nobody", max_retries=0, timeout=30)
    try:
        wrong.chat.completions.create(model=args.chat_model, messages=MESSAGES)
        out["wrong_key"] = {"class": None}
    except openai.APIStatusError as e:
        out["wrong_key"] = error(e)

    sent = []
    http = openai.DefaultHttpxClient(
        timeout=30, event_hooks={"request": [lambda request: sent.append(str(request.url))]}
    )
    limited = openai.OpenAI(
        base_url=args.base_url, api_key=args.limited_key, max_retries=1, http_client=http
    )
    # The SDK waits what Retry-After says (up to two minutes); the wait it chose is recorded
    # and shortened, so the test need not sit out the gateway's 100 s. Retrying and giving up
    # stay the SDK's own.
    waits = []
    chosen = limited._calculate_retry_timeout

    def shortened(*a, **kw):
        wait = chosen(*a, **kw)
        waits.append(wait)
        return min(wait, 0.2)

    limited._calculate_retry_timeout = shortened
    first = limited.chat.completions.create(model=args.chat_model, messages=MESSAGES)
    step = {"first": first.choices[0].message.content}
    try:
        limited.chat.completions.create(model=args.chat_model, messages=MESSAGES)
        step["error"] = {"class": None}
    except openai.APIStatusError as e:
        step["error"] = error(e)
    step["sent"] = len(sent)
    step["waits"] = waits
    out["rate_limit"] = step


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--api-key", required=True)
    ap.add_argument("--limited-key", required=True)
    ap.add_argument("--chat-model", required=True)
    ap.add_argument("--ldp-model", required=True)
    args = ap.parse_args()
    out: dict = {}
    try:
        run(args, out)
    except Exception as e:  # noqa: BLE001 - report anything the SDK raises
        traceback.print_exc(file=sys.stderr)
        out["failed"] = f"{type(e).__name__}: {e}"
        print(json.dumps(out, default=str))
        return 1
    print(json.dumps(out, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
