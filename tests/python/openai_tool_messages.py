"""A conversation that replays tool use, through the official `openai`
client: the user's question, the assistant's tool call (no content), the
tool's result; then the same prompt as the test renders it by hand,
through /v1/completions.

Run by tests/tests/serve_openai.rs:

    python openai_tool_messages.py BASE_URL MODEL RENDERED_PROMPT_FILE

stdout gets one JSON object: `chat` and `completion`, each the text and
usage, or the error the client raised (status, code, param, message);
`completion` is absent when RENDERED_PROMPT_FILE is "-".
"""

import json

import openai
from server_client import connect

MESSAGES = [
    {"role": "user", "content": "What is 2 + 3? Use the add tool."},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'}}
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "5"},
]


def call(f):
    try:
        r = f()
        choice = r.choices[0]
        text = choice.message.content if hasattr(choice, "message") else choice.text
        return {"text": text, "prompt_tokens": r.usage.prompt_tokens}
    except openai.BadRequestError as e:
        return {"error": {"status": e.status_code, "code": e.code, "param": e.param, "message": e.message}}


def main():
    client, model, (rendered,) = connect()
    out = {
        "chat": call(
            lambda: client.chat.completions.create(model=model, messages=MESSAGES, max_tokens=8, temperature=0)
        )
    }
    if rendered != "-":
        with open(rendered, encoding="utf-8") as f:
            prompt = f.read()
        out["completion"] = call(
            lambda: client.completions.create(model=model, prompt=prompt, max_tokens=8, temperature=0)
        )
    print(json.dumps(out))


if __name__ == "__main__":
    main()
