"""One chat completion through the official `openai` client with fields
that clients written for vLLM or llama-server send (`extra_body`).

Run by tests/tests/serve_openai.rs:

    python openai_extra_body.py BASE_URL MODEL

stdout gets one JSON object: the text and usage, or the error the client
raised (status, code, param, message).
"""

import json

import openai
from server_client import ask_capital, connect


def main():
    client, model, _ = connect()
    extra = {
        "chat_template_kwargs": {"enable_thinking": False},
        "skip_special_tokens": True,
        "cache_prompt": True,
    }
    try:
        r = ask_capital(client, model, max_tokens=8, extra_body=extra)
        out = {"text": r.choices[0].message.content, "completion_tokens": r.usage.completion_tokens}
    except openai.BadRequestError as e:
        out = {"error": {"status": e.status_code, "code": e.code, "param": e.param, "message": e.message}}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
