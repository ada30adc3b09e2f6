#!/usr/bin/env python3
"""llama.cpp's logits for the tiny generated checkpoints
(reference/tiny_models.py), written as the fixture
reference/data/tiny-families.llamacpp.json that runtime/tests/families.rs
compares against:

    ~/.cache/draftwise/bench-venv/bin/python reference/tiny_llamacpp.py \
        --dir reference/data/tiny --out reference/data/tiny-families.llamacpp.json

Per family: the GGUF's sha256 (the test refuses a fixture made from other
bytes), and for each prompt (token ids drawn with a fixed seed, so the
vocabulary's tokenizer plays no part) the top-8 logits of every 4th
prompt position and of the last (one batch, logits_all), then a greedy
continuation: per step the token, the top-1/top-2 margin and the top-8.
Also the ids llama.cpp gives a few strings with the (shared) vocabulary,
special tokens parsed.

One thread, a context of 256, the whole prompt in one batch.
"""

import argparse
import hashlib
import json
import os
import sys

import numpy as np
import llama_cpp

FAMILIES = ["llama3", "linear", "mistral", "qwen2", "qwen3"]
PROMPT_LENGTHS = [5, 23, 70, 150]
N_VOCAB_TEXT = 317  # the byte tokens and merges; the control tokens are left out
GREEDY = 24
# The vocabulary's merges come from tiny_models.CORPUS; these strings use
# them and the GPT-2 split (spaces, digits, punctuation, newlines).
TOKENIZER_STRINGS = [
    "The capital of France is Paris.",
    "one two three four, one two",
    "def add(a, b):\n    return a + b\n",
    "  leading and   inner spaces  ",
    "digits 0123456789 and 3.14",
    "Hello, world!<|endoftext|>",
]
TOP_K = 8


def top(lg):
    order = np.argsort(-lg, kind="stable")[:TOP_K]
    return [[int(i), round(float(lg[i]), 5)] for i in order]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", default="reference/data/tiny")
    ap.add_argument("--out", default="reference/data/tiny-families.llamacpp.json")
    a = ap.parse_args()
    rng = np.random.default_rng(2026)
    prompts = [[int(t) for t in rng.integers(0, N_VOCAB_TEXT, n)] for n in PROMPT_LENGTHS]
    fams = {}
    for name in FAMILIES:
        path = os.path.join(a.dir, f"{name}.gguf")
        sha = hashlib.sha256(open(path, "rb").read()).hexdigest()
        llm = llama_cpp.Llama(model_path=path, n_ctx=256, n_batch=256, n_ubatch=256, n_threads=1,
                              n_threads_batch=1, logits_all=True, verbose=False)
        n_vocab = llm.n_vocab()
        out = []
        for ids in prompts:
            llm.reset()
            llm.eval(ids)
            scores = np.array(llm.scores[: len(ids)], dtype=np.float32)
            positions = sorted(set(range(0, len(ids), 4)) | {len(ids) - 1})
            greedy, margins, tops = [], [], []
            lg = scores[-1]
            for _ in range(GREEDY):
                order = np.argsort(-lg, kind="stable")
                t = int(order[0])
                greedy.append(t)
                margins.append(round(float(lg[order[0]] - lg[order[1]]), 5))
                tops.append(top(lg))
                llm.eval([t])
                lg = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
            out.append({
                "prompt_ids": ids,
                "prompt_top": [[p, top(scores[p])] for p in positions],
                "greedy_ids": greedy,
                "margins": margins,
                "greedy_top": tops,
            })
        fams[name] = {"gguf_sha256": sha, "n_vocab": n_vocab, "prompts": out}
        print(f"{name}: done", file=sys.stderr)
        del llm
    llm = llama_cpp.Llama(model_path=os.path.join(a.dir, "llama3.gguf"), n_ctx=64, verbose=False)
    tokenizer = [
        {"text": t, "ids": llm.tokenize(t.encode(), add_bos=False, special=True)} for t in TOKENIZER_STRINGS
    ]
    del llm
    doc = {
        "generated_by": "reference/tiny_llamacpp.py --dir reference/data/tiny",
        "llama_cpp_python": llama_cpp.__version__,
        "system_info": llama_cpp.llama_print_system_info().decode(errors="replace").strip(),
        "tokenizer": tokenizer,
        "families": fams,
    }
    with open(a.out, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {a.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
