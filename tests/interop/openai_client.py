"""The real `openai` SDK as a client of an OpenAI-compatible endpoint, for the interop tests.

    python openai_client.py --base-url URL --api-key KEY --model M [--prompt TEXT]

Lists the models, runs one non-stream completion and one stream with
`stream_options={"include_usage": True}`, and prints one JSON line:
`{"sdk_version", "models", "completion", "stream"}` where `completion` is the SDK's parsed
response (`model_dump()`), and `stream` holds the chunks' content joined, the finish reasons, the
usage of the last chunk and the number of chunks. An SDK error is printed as
`{"error": {"class", "status", "body", "retry_after"}}` (exit 1), so that refusals can be asserted.
"""

import argparse
import json
import sys

import openai


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--api-key", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompt", default="hello from the openai sdk")
    args = ap.parse_args()

    client = openai.OpenAI(base_url=args.base_url, api_key=args.api_key, max_retries=0, timeout=30)
    messages = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": args.prompt},
    ]
    try:
        models = [m.id for m in client.models.list()]
        completion = client.chat.completions.create(model=args.model, messages=messages)
        chunks = list(
            client.chat.completions.create(
                model=args.model,
                messages=messages,
                stream=True,
                stream_options={"include_usage": True},
            )
        )
    except openai.APIStatusError as e:
        print(
            json.dumps(
                {
                    "error": {
                        "class": type(e).__name__,
                        "status": e.status_code,
                        "body": e.body,
                        "retry_after": e.response.headers.get("retry-after"),
                    }
                }
            )
        )
        return 1
    stream = {
        "content": "".join(c.choices[0].delta.content or "" for c in chunks if c.choices),
        "roles": [c.choices[0].delta.role for c in chunks if c.choices and c.choices[0].delta.role],
        "finish_reasons": [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason],
        "usage": chunks[-1].usage.model_dump() if chunks and chunks[-1].usage else None,
        "ids": sorted({c.id for c in chunks}),
        "chunks": len(chunks),
    }
    print(
        json.dumps(
            {
                "sdk_version": openai.__version__,
                "models": models,
                "completion": completion.model_dump(),
                "stream": stream,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
