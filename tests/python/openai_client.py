"""Drives `runtime serve` with the official `openai` Python client.

Run by tests/tests/serve_openai.rs, which judges the output:

    python openai_client.py BASE_URL MODEL < cases.json

cases.json is a list of {"kind": "chat" | "text", "prompt": str,
"max_tokens": int}. Each case runs four ways (non-streaming and streaming
with usage, through the client's chat or completions API); stdout gets one
JSON object with what the client saw, and how it saw errors.
"""

import json
import sys

import openai
from server_client import connect


def usage_dict(u):
    if u is None:
        return None
    return {
        "prompt_tokens": u.prompt_tokens,
        "completion_tokens": u.completion_tokens,
        "total_tokens": u.total_tokens,
    }


def run_case(client, model, case, stream):
    common = {"model": model, "max_tokens": case["max_tokens"], "temperature": 0}
    if case["kind"] == "chat":
        messages = [{"role": "user", "content": case["prompt"]}]
        if not stream:
            r = client.chat.completions.create(messages=messages, **common)
            c = r.choices[0]
            return c.message.content, [c.finish_reason], usage_dict(r.usage), [r.id]
        chunks = list(
            client.chat.completions.create(
                messages=messages, stream=True, stream_options={"include_usage": True}, **common
            )
        )
        text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    else:
        if not stream:
            r = client.completions.create(prompt=case["prompt"], **common)
            c = r.choices[0]
            return c.text, [c.finish_reason], usage_dict(r.usage), [r.id]
        chunks = list(
            client.completions.create(
                prompt=case["prompt"], stream=True, stream_options={"include_usage": True}, **common
            )
        )
        text = "".join(ch.choices[0].text for ch in chunks if ch.choices)
    finish = [ch.choices[0].finish_reason for ch in chunks if ch.choices and ch.choices[0].finish_reason]
    # The usage chunk is the last one, and the only one with usage.
    usages = [usage_dict(ch.usage) for ch in chunks if ch.usage is not None]
    if len(usages) != 1 or chunks[-1].usage is None:
        raise SystemExit(f"expected exactly one usage chunk, last; got {len(usages)}")
    return text, finish, usages[0], sorted({ch.id for ch in chunks})


def main():
    client, model, _ = connect()
    cases = json.load(sys.stdin)
    out = {"openai_version": openai.__version__, "models": [m.id for m in client.models.list()], "results": []}
    for i, case in enumerate(cases):
        for stream in (False, True):
            text, finish, usage, ids = run_case(client, model, case, stream)
            out["results"].append(
                {"case": i, "stream": stream, "text": text, "finish_reason": finish, "usage": usage, "ids": ids}
            )
    try:
        client.chat.completions.create(model="no-such-model", messages=[{"role": "user", "content": "hi"}])
        out["unknown_model"] = "accepted"
    except openai.NotFoundError as e:
        out["unknown_model"] = {"status": e.status_code, "code": e.code, "param": e.param}
    try:
        client.completions.create(model=model, prompt="hi", n=2, max_tokens=1)
        out["n_2"] = "accepted"
    except openai.BadRequestError as e:
        out["n_2"] = {"status": e.status_code, "code": e.code, "param": e.param, "message": e.message}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
