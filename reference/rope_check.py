#!/usr/bin/env python3
"""Empirical check of the RoPE pairing used by the GGUF Q/K weights.

Runs the numpy reference with both pairings on a fixed English paragraph and
prints the teacher-forced perplexity; if llama-cpp-python is installed it also
prints the max |logit difference| against llama.cpp for each pairing.
The correct pairing ("norm", adjacent (2i, 2i+1)) gives ppl ~18 and small
diffs vs llama.cpp; "neox" (i, i+32) gives ppl ~117.

  .venv/bin/python reference/rope_check.py
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_reference import build_hf_tokenizer  # noqa: E402
from numpy_forward import DEFAULT_MODEL, LlamaRef  # noqa: E402

TEXT = (
    "The quick brown fox jumps over the lazy dog. It was a bright cold day in April, and the clocks were "
    "striking thirteen. Once upon a time there was a little girl who lived in a village near the forest. "
    "Whenever she went out, the little girl wore a red riding cloak, so everyone in the village called her "
    "Little Red Riding Hood. One morning her mother said to her that she should take some cake to her "
    "grandmother who was ill"
)


def main():
    m = LlamaRef(DEFAULT_MODEL, rope="norm")
    ids = build_hf_tokenizer(m).encode(TEXT, add_special_tokens=False).ids
    ref = None
    try:
        import llama_cpp

        ll = llama_cpp.Llama(model_path=DEFAULT_MODEL, n_ctx=512, logits_all=True, verbose=False)
        ll.eval(ids)
        ref = np.array(ll.scores[: len(ids)], dtype=np.float64)
    except ImportError:
        pass
    print(f"{len(ids)} tokens")
    for mode in ("norm", "neox"):
        m.rope_mode = mode
        m.reset()
        lg = m.forward(ids)
        z = lg - lg.max(1, keepdims=True)
        lp = z - np.log(np.exp(z).sum(1, keepdims=True))
        nll = -np.mean(lp[np.arange(len(ids) - 1), ids[1:]])
        line = f"rope={mode}: ppl {np.exp(nll):.2f}"
        if ref is not None:
            line += f", max|logit - llama.cpp| {np.abs(lg - ref).max():.4f}"
        print(line)


if __name__ == "__main__":
    main()
