"""What the openai_*.py scripts share: the official client for the server
their command line names (`BASE_URL MODEL [more...]`), and the chat
question most of them ask."""

import sys

from openai import OpenAI

CAPITAL_QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


def connect():
    """(client, model, the arguments after BASE_URL MODEL) from sys.argv."""
    base_url, model = sys.argv[1], sys.argv[2]
    client = OpenAI(base_url=base_url, api_key="not-needed", max_retries=0, timeout=300)
    return client, model, sys.argv[3:]


def ask_capital(client, model, **kwargs):
    """The capital question, greedy, with `kwargs` added to the request."""
    return client.chat.completions.create(model=model, messages=CAPITAL_QUESTION, temperature=0, **kwargs)
