"""One chat completion through the official `openai` client with fields
that clients written for vLLM or llama-server send (`extra_body`).

Run by tests/tests/serve_openai.rs:

    python openai_extra_body.py BASE_URL MODEL

stdout gets one JSON object: the text and usage, or the error the client
raised (status, code, param, message).
"""

import json
import sys

import openai
from openai import OpenAI


def main():
    base_url, model = sys.argv[1], sys.argv[2]
    client = OpenAI(base_url=base_url, api_key="not-needed", max_retries=0, timeout=300)
    extra = {
        "chat_template_kwargs": {"enable_thinking": False},
        "skip_special_tokens": True,
        "cache_prompt": True,
    }
    try:
        r = client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": "What is the capital of France?"}],
            max_tokens=8,
            temperature=0,
            extra_body=extra,
        )
        out = {"text": r.choices[0].message.content, "completion_tokens": r.usage.completion_tokens}
    except openai.BadRequestError as e:
        out = {"error": {"status": e.status_code, "code": e.code, "param": e.param, "message": e.message}}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
