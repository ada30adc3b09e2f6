#!/usr/bin/env python3
"""llama.cpp's answers for a GGUF, written as the JSON fixture the runtime's
reference tests compare against (reference/data/<model>.llamacpp.json).

Run with the llama-cpp-python venv that scripts/bench/llamacpp-venv.sh
builds:

    VENV=$(scripts/bench/llamacpp-venv.sh)
    "$VENV/bin/python" reference/llamacpp_reference.py \
        --model ~/.cache/draftwise/gemma-3-270m-q4_k_m.gguf \
        --out reference/data/gemma3-270m.llamacpp.json

What it records:
- tokenizer: for each hard string, llama.cpp's ids with special tokens
  parsed and with them read as text (no BOS), and the text its ids decode to;
- greedy: for each prompt (raw text, or a chat rendered by llama.cpp's own
  built-in template for the architecture), the prompt ids (BOS included as
  llama.cpp adds it), the greedy continuation ids (end-of-generation tokens
  stop it), and per step the top-1/top-2 logit margin and the runner-up
  (where the margin is small, a different engine may rightly pick the
  runner-up) and the top logits
  of the first steps (id, value) for a tolerance check.

One thread, a context of 1024, the whole prompt in one batch.

`--set qwen` takes the Qwen2.5 strings and prompts (ChatML markers, code)
instead of Gemma's, and `--chat-template file` renders chats with the GGUF's
own `tokenizer.chat_template` through Python's jinja2 as Hugging Face
renders it (trim_blocks, lstrip_blocks; Qwen's template adds its default
system message), not with a llama.cpp built-in:

    "$VENV/bin/python" reference/llamacpp_reference.py --set qwen --chat-template file \
        --model ~/.cache/draftwise/qwen2.5-coder-0.5b-instruct.gguf \
        --out reference/data/qwen2.5-coder-0.5b.llamacpp.json
"""

import argparse
import ctypes
import json
import sys

import numpy as np
import llama_cpp

# Strings every tokenizer is checked on (the model-specific lists add
# their own special tokens and cases, in this order).
BASIC = [
    "The capital of France is",
    "Hello, world!",
    "  two leading spaces and   three inside",
    "trailing spaces   ",
    "tabs\tand\nnewlines\n\n\nthree",
]
CODE = [
    "digits 0123456789 and 3.14159 and 1,000,000",
    "fn main() { println!(\"{}\", x + 1); }  // code",
    "    indented(code):\n        return [a for a in b if a]",
]
UNICODE = [
    "Ünïcödé: naïve café, Straße, Ελληνικά, русский, 日本語のテキスト, 中文, 한국어",
    "emoji 🦀🚀👩‍👩‍👧 and symbols ∑∫√ ≠ ≤ ™ ©",
    "rare characters: \u0e47\u0e48 \U0001f9ec \u2603 \U00010348 \x07\x1b",
]
EMPTY = [
    "",
    " ",
]

HARD_STRINGS = BASIC + [
    "\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n",
] + CODE + UNICODE + [
    "<start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n",
    "text<end_of_turn>more<eos><bos>",
    "<unused0> and [multimodal] and <mask>",
    "mixed ▁ marker and ▁▁ double",
] + EMPTY

def chat(pid: str, messages, max_tokens: int) -> dict:
    """A chat prompt: `messages` a user message's text or a list of messages."""
    if isinstance(messages, str):
        messages = [{"role": "user", "content": messages}]
    return {"id": pid, "messages": messages, "max_tokens": max_tokens}


# Every model's system-prompted chat.
CHAT_SYSTEM = chat(
    "chat-system",
    [{"role": "system", "content": "You answer in one word."}, {"role": "user", "content": "Name a color."}],
    12,
)

# Longer than the 512-position sliding window of Gemma 3's local layers, so
# the window decides these logits.
LONG_GEMMA = "".join(
    f"Entry {i}: the {c} box on shelf {i % 7} holds {i * 3 % 11} {t}.\n"
    for i, (c, t) in enumerate(
        [("red", "apples"), ("blue", "pens"), ("green", "cups"), ("white", "books"), ("black", "keys")] * 10
    )
) + "Entry 50: the"

PROMPTS = [
    {"id": "capital", "text": "The capital of France is", "max_tokens": 16},
    {"id": "story", "text": "Once upon a time, in a small village,", "max_tokens": 24},
    {"id": "code", "text": "def fibonacci(n):\n    ", "max_tokens": 24},
    {"id": "long", "text": LONG_GEMMA, "max_tokens": 12},
    chat("chat", "What is the capital of France?", 24),
    CHAT_SYSTEM,
]

HARD_STRINGS_QWEN = BASIC + CODE + [
    "def f(x):\n\treturn x**2  # square\n\n\n",
] + UNICODE + [
    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
    "text<|im_end|>more<|endoftext|><|fim_prefix|>a<|fim_suffix|>b<|fim_middle|>",
    "I'm sure they'll've done it; it's 'quoted' isn't it",
] + EMPTY

LONG_QWEN = "".join(
    f"item_{i} = {{'name': '{c}', 'count': {i * 3 % 11}}}\n" for i, c in enumerate(["red", "blue", "green", "white", "black"] * 6)
) + "item_30 ="

PROMPTS_QWEN = [
    {"id": "capital", "text": "The capital of France is", "max_tokens": 16},
    {"id": "fib", "text": "def fibonacci(n):\n    ", "max_tokens": 32},
    {"id": "rust", "text": "// Reverse a string in Rust\nfn reverse(s: &str) -> String {\n", "max_tokens": 24},
    {"id": "long", "text": LONG_QWEN, "max_tokens": 16},
    chat("chat", "Write a Python function that returns the square of a number.", 32),
    CHAT_SYSTEM,
]

TOP_STEPS = 4
TOP_K = 8


def tokenize(llm, text, special):
    return llm.tokenize(text.encode("utf-8"), add_bos=False, special=special)


def detok(llm, ids):
    return llm.detokenize(ids, special=True).decode("utf-8", errors="replace")


def chat_text(messages, tmpl):
    """The prompt llama.cpp's built-in template `tmpl` renders (add_ass)."""
    arr = (llama_cpp.llama_chat_message * len(messages))()
    keep = []
    for i, m in enumerate(messages):
        role, content = m["role"].encode(), m["content"].encode()
        keep += [role, content]
        arr[i].role = role
        arr[i].content = content
    buf = ctypes.create_string_buffer(1 << 16)
    n = llama_cpp.llama_chat_apply_template(tmpl.encode(), arr, len(messages), True, buf, len(buf))
    if n < 0:
        raise SystemExit(f"llama_chat_apply_template({tmpl!r}) failed: {n}")
    return buf.raw[:n].decode("utf-8")


def file_chat_text(llm, messages):
    """The prompt the GGUF's own chat template renders, as Hugging Face
    renders it (jinja2, trim_blocks + lstrip_blocks, add_generation_prompt)."""
    import jinja2.sandbox

    src = llm.metadata.get("tokenizer.chat_template")
    if not src:
        raise SystemExit("--chat-template file: the GGUF has no tokenizer.chat_template")
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    return env.from_string(src).render(messages=messages, add_generation_prompt=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--chat-template", default="gemma", help="llama.cpp built-in template name, or `file`")
    ap.add_argument("--set", choices=["gemma", "qwen"], default="gemma", help="which strings and prompts")
    a = ap.parse_args()
    hard_strings, prompts = (HARD_STRINGS, PROMPTS) if a.set == "gemma" else (HARD_STRINGS_QWEN, PROMPTS_QWEN)

    llm = llama_cpp.Llama(
        model_path=a.model, n_ctx=1024, n_batch=1024, n_ubatch=1024, n_threads=1, n_threads_batch=1,
        logits_all=False, verbose=False,
    )
    n_vocab = llm.n_vocab()
    vocab = llm._model.vocab if hasattr(llm._model, "vocab") else None

    def last_logits():
        return np.ctypeslib.as_array(llm._ctx.get_logits_ith(-1), shape=(n_vocab,)).copy()

    def is_eog(t):
        fn = getattr(llama_cpp, "llama_vocab_is_eog", None)
        if fn is not None and vocab is not None:
            return bool(fn(vocab, t))
        return bool(llama_cpp.llama_token_is_eog(llm._model.model, t))

    tok = []
    for s in hard_strings:
        parsed = tokenize(llm, s, True)
        as_text = tokenize(llm, s, False)
        tok.append({"text": s, "ids": parsed, "ids_text_only": as_text, "decoded": detok(llm, parsed)})

    greedy = []
    for p in prompts:
        if "messages" in p:
            if a.chat_template == "file":
                text = file_chat_text(llm, p["messages"])
            else:
                text = chat_text(p["messages"], a.chat_template)
        else:
            text = p["text"]
        # BOS as llama.cpp adds it (add_bos_token), special tokens parsed
        # (the chat template's markers).
        ids = llm.tokenize(text.encode("utf-8"), add_bos=True, special=True)
        llm.reset()
        llm.eval(ids)
        out, margins, tops, runner_up = [], [], [], []
        for step in range(p["max_tokens"]):
            lg = last_logits()
            order = np.argsort(-lg, kind="stable")
            t = int(order[0])
            margins.append(float(lg[order[0]] - lg[order[1]]))
            runner_up.append(int(order[1]))
            if step < TOP_STEPS:
                tops.append([[int(i), float(lg[i])] for i in order[:TOP_K]])
            if is_eog(t):
                out.append(t)
                break
            out.append(t)
            llm.eval([t])
        entry = {k: v for k, v in p.items() if k != "max_tokens"}
        entry.update(
            max_tokens=p["max_tokens"], rendered=text, prompt_ids=ids, greedy_ids=out,
            greedy_text=detok(llm, out), margins=margins, runner_up=runner_up, top_logits=tops,
        )
        greedy.append(entry)

    doc = {
        "generated_by": "reference/llamacpp_reference.py --model "
        + a.model.split("/")[-1] + f" --chat-template {a.chat_template}"
        + ("" if a.set == "gemma" else f" --set {a.set}"),
        "llama_cpp_python": llama_cpp.__version__,
        "system_info": llama_cpp.llama_print_system_info().decode(errors="replace").strip(),
        "model": a.model.split("/")[-1],
        "n_vocab": n_vocab,
        "tokenizer": tok,
        "greedy": greedy,
    }
    with open(a.out, "w") as f:
        json.dump(doc, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {a.out}: {len(tok)} strings, {len(greedy)} prompts", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
