"""The real `openai` SDK's tool-calling flow through the gateway's OpenAI ingress.

    python openai_tools.py --base-url URL --api-key KEY --model SKILL

Runs, in order, and records each step's outcome (nothing is asserted here: the Rust test does):
  whole      `create(tools=[get_weather])`: the parsed choice (its message's `tool_calls`,
             `content`, and `finish_reason`)
  answered   the same conversation with the assistant's message (its tool call) and the tool's
             result appended: the answer's content and finish reason
  streamed   `stream=True`: the deltas accumulated as the SDK's own `ChatCompletionStreamState`
             does, its final message; and the tool-call deltas counted
  helper     `client.chat.completions.stream(...)`, the SDK's streaming helper: the types of
             its events and `get_final_completion()`'s message
  legacy     the deprecated `functions=[...]`: the message's `function_call`, whole and streamed

Prints one JSON line; an unexpected exception ends the run with exit 1 and `{"failed": "..."}`.
"""

import argparse
import json
import sys
import traceback

import openai
from openai.lib.streaming.chat import ChatCompletionStreamState

TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"text": {"type": "string"}},
            "required": ["text"],
        },
    },
}
FUNCTION = TOOL["function"]
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


def calls(message) -> list:
    return [
        {"id": c.id, "type": c.type, "name": c.function.name, "arguments": c.function.arguments}
        for c in (message.tool_calls or [])
    ]


def run(args, out: dict) -> None:
    client = openai.OpenAI(base_url=args.base_url, api_key=args.api_key, max_retries=0, timeout=30)
    out["sdk_version"] = openai.__version__

    whole = client.chat.completions.create(model=args.model, messages=ASK, tools=[TOOL])
    choice = whole.choices[0]
    out["whole"] = {
        "finish_reason": choice.finish_reason,
        "content": choice.message.content,
        "tool_calls": calls(choice.message),
    }

    # The application runs the tool and sends its result back, as the SDK's guide shows.
    call = choice.message.tool_calls[0]
    followed = ASK + [
        choice.message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "sunny, 21 °C"},
    ]
    answered = client.chat.completions.create(model=args.model, messages=followed, tools=[TOOL])
    out["answered"] = {
        "finish_reason": answered.choices[0].finish_reason,
        "content": answered.choices[0].message.content,
    }

    state = ChatCompletionStreamState()
    tool_deltas = 0
    for chunk in client.chat.completions.create(
        model=args.model, messages=ASK, tools=[TOOL], stream=True
    ):
        state.handle_chunk(chunk)
        if chunk.choices and chunk.choices[0].delta.tool_calls:
            tool_deltas += 1
    final = state.get_final_completion().choices[0]
    out["streamed"] = {
        "finish_reason": final.finish_reason,
        "content": final.message.content,
        "tool_calls": calls(final.message),
        "tool_deltas": tool_deltas,
    }

    kinds = []
    with client.chat.completions.stream(model=args.model, messages=ASK, tools=[TOOL]) as stream:
        for event in stream:
            if event.type not in kinds:
                kinds.append(event.type)
        final = stream.get_final_completion().choices[0]
    out["helper"] = {
        "events": kinds,
        "finish_reason": final.finish_reason,
        "tool_calls": calls(final.message),
    }

    legacy = client.chat.completions.create(model=args.model, messages=ASK, functions=[FUNCTION])
    fc = legacy.choices[0].message.function_call
    state = ChatCompletionStreamState()
    for chunk in client.chat.completions.create(
        model=args.model, messages=ASK, functions=[FUNCTION], stream=True
    ):
        state.handle_chunk(chunk)
    streamed_fc = state.get_final_completion().choices[0].message.function_call
    out["legacy"] = {
        "finish_reason": legacy.choices[0].finish_reason,
        "whole": {"name": fc.name, "arguments": fc.arguments} if fc else None,
        "streamed": (
            {"name": streamed_fc.name, "arguments": streamed_fc.arguments} if streamed_fc else None
        ),
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--api-key", required=True)
    ap.add_argument("--model", required=True)
    args = ap.parse_args()
    out: dict = {}
    try:
        run(args, out)
    except Exception:  # noqa: BLE001 - reported to the Rust test, which fails on it
        out["failed"] = traceback.format_exc()
        print(json.dumps(out))
        return 1
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
