"""Log probabilities through the official `openai` client: a chat request
with `logprobs=True, top_logprobs=2`, and a completions request as
lm-evaluation-harness scores a continuation (`echo=True, logprobs=1,
max_tokens=1`). Run by tests/tests/serve_logprobs.rs:

    python openai_logprobs.py BASE_URL MODEL

stdout gets one JSON object with what the client parsed.
"""

import json

from server_client import ask_capital, connect


def main():
    client, model, _ = connect()
    r = ask_capital(client, model, max_tokens=6, logprobs=True, top_logprobs=2)
    c = r.choices[0]
    chat = {
        "text": c.message.content,
        "content": [
            {
                "token": t.token,
                "logprob": t.logprob,
                "bytes": t.bytes,
                "top": [[a.token, a.logprob] for a in t.top_logprobs],
            }
            for t in c.logprobs.content
        ],
    }
    r = client.completions.create(
        model=model, prompt="The capital of France is Paris", max_tokens=1, temperature=0, logprobs=1, echo=True
    )
    c = r.choices[0]
    comp = {
        "text": c.text,
        "tokens": c.logprobs.tokens,
        "token_logprobs": c.logprobs.token_logprobs,
        "text_offset": c.logprobs.text_offset,
        "top_logprobs": c.logprobs.top_logprobs,
    }
    print(json.dumps({"chat": chat, "completions": comp}))


if __name__ == "__main__":
    main()
