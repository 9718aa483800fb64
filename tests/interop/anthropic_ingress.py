"""The real `anthropic` SDK (2.x or 1.x, as installed) as a client of the gateway's
Anthropic-compatible ingress.

    python anthropic_ingress.py --base-url URL --api-key KEY --limited-key KEY2 \
        --chat-model SKILL --ldp-model SKILL --forbidden-model SKILL@POLICY \
        [--full-key KEY3]

Runs, in order, and records each step's outcome (nothing is asserted here: the Rust test does):
  version      the SDK's version and the API version and auth header it sends
  models       `models.list()`
  create       a message of --chat-model, with a system prompt (with_raw_response: the parsed
               message and the x-ldp-* headers)
  ldp          a message of --ldp-model
  stream       `messages.stream(...)` of --chat-model: the event types in order, the text, and
               the final message (usage, stop reason)
  ldp_stream   the same of --ldp-model
  tools        the tool loop: a message offering a tool (a `tool_use` expected), then the
               conversation with its `tool_result` (a text answer expected)
  tools_stream a stream offering the tool: the final message's `tool_use` block
  count        `messages.count_tokens(...)`
  unknown      a model nobody offers (expected: NotFoundError)
  wrong_key    a key nobody holds (expected: AuthenticationError)
  bad          an empty conversation (expected: BadRequestError)
  forbidden    --forbidden-model, a policy the tenant may not use (expected:
               PermissionDeniedError)
  rate_limit   with --limited-key (a tenant allowed one request): two messages (expected:
               RateLimitError, with `retry-after`)
  overloaded   with --full-key (a tenant whose session cap is taken): a message (expected:
               OverloadedError)

Every client is made with `max_retries=0`, so each error is the gateway's first answer. Prints
one JSON line. An SDK error is recorded as `{"class", "status", "body", "retry_after",
"headers"}`; an unexpected exception ends the run with exit 1 and `{"failed": "..."}`.
"""

import argparse
import json
import sys
import traceback

import anthropic

HEADERS = ("x-ldp-task-id", "x-ldp-policy", "x-ldp-delegate")
SYSTEM = "You are terse."
HELLO = [{"role": "user", "content": "hello through the gateway"}]
WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city.",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}


def ldp_headers(headers) -> dict:
    return {h: headers.get(h) for h in HEADERS}


def error(e: anthropic.APIStatusError) -> dict:
    return {
        "class": type(e).__name__,
        "status": e.status_code,
        "body": e.body,
        "retry_after": e.response.headers.get("retry-after"),
        "headers": ldp_headers(e.response.headers),
    }


def message(m) -> dict:
    return json.loads(m.model_dump_json())


def expect_error(fn) -> dict:
    try:
        fn()
    except anthropic.APIStatusError as e:
        return error(e)
    return {"class": None}


def stream(client, **kw) -> dict:
    types = []
    with client.messages.stream(**kw) as s:
        for event in s:
            types.append(event.type)
        final = s.get_final_message()
        headers = ldp_headers(s.response.headers)
    return {"types": types, "final": message(final), "headers": headers}


def main() -> None:
    p = argparse.ArgumentParser()
    for a in ("base-url", "api-key", "limited-key", "chat-model", "ldp-model",
              "forbidden-model", "full-key"):
        p.add_argument("--" + a, required=a != "full-key")
    a = p.parse_args()
    out = {}

    seen = {}

    def record(request):
        seen["version"] = request.headers.get("anthropic-version")
        seen["auth"] = "x-api-key" if request.headers.get("x-api-key") else "authorization"

    def client(key):
        import httpx2 as httpx  # the SDK's own HTTP client (both lines)
        http = httpx.Client(event_hooks={"request": [record]})
        return anthropic.Anthropic(base_url=a.base_url, api_key=key, max_retries=0,
                                   http_client=http)

    c = client(a.api_key)
    out["models"] = [m.id for m in c.models.list()]
    out["version"] = {"sdk": anthropic.__version__, **seen}

    raw = c.messages.with_raw_response.create(
        model=a.chat_model, max_tokens=64, system=SYSTEM, messages=HELLO)
    out["create"] = {"message": message(raw.parse()), "headers": ldp_headers(raw.headers)}
    out["ldp"] = message(c.messages.create(model=a.ldp_model, max_tokens=64, messages=HELLO))

    out["stream"] = stream(c, model=a.chat_model, max_tokens=64, system=SYSTEM, messages=HELLO)
    out["ldp_stream"] = stream(c, model=a.ldp_model, max_tokens=64, messages=HELLO)

    ask = [{"role": "user", "content": "What is the weather in Paris?"}]
    first = c.messages.create(model=a.chat_model, max_tokens=64, tools=[WEATHER], messages=ask)
    calls = [b for b in first.content if b.type == "tool_use"]
    done = None
    if calls:
        convo = ask + [
            {"role": "assistant", "content": [b.model_dump() for b in first.content]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": calls[0].id,
                                          "content": "sunny, 21 C"}]},
        ]
        done = message(c.messages.create(model=a.chat_model, max_tokens=64, tools=[WEATHER],
                                         messages=convo))
    out["tools"] = {"first": message(first), "done": done}
    out["tools_stream"] = stream(c, model=a.chat_model, max_tokens=64, tools=[WEATHER],
                                 messages=ask)
    out["count"] = c.messages.count_tokens(model=a.chat_model, messages=HELLO).input_tokens

    out["unknown"] = expect_error(
        lambda: c.messages.create(model="nobody-offers-this", max_tokens=8, messages=HELLO))
    out["wrong_key"] = expect_error(
        lambda: client("sk-nobody-holds-this").messages.create(
            model=a.chat_model, max_tokens=8, messages=HELLO))
    out["bad"] = expect_error(
        lambda: c.messages.create(model=a.chat_model, max_tokens=8, messages=[]))
    out["forbidden"] = expect_error(
        lambda: c.messages.create(model=a.forbidden_model, max_tokens=8, messages=HELLO))
    limited = client(a.limited_key)
    limited.messages.create(model=a.chat_model, max_tokens=8, messages=HELLO)
    out["rate_limit"] = expect_error(
        lambda: limited.messages.create(model=a.chat_model, max_tokens=8, messages=HELLO))
    if a.full_key:
        out["overloaded"] = expect_error(
            lambda: client(a.full_key).messages.create(
                model=a.chat_model, max_tokens=8, messages=HELLO))
    print(json.dumps(out))


if __name__ == "__main__":
    try:
        main()
    except Exception:  # noqa: BLE001 - any failure is reported whole to the Rust test
        print(json.dumps({"failed": traceback.format_exc()}))
        sys.exit(1)
