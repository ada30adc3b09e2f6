#!/usr/bin/env python3
"""llama.cpp's side of scripts/bench/compare-llamacpp.sh.

Runs the same work as `runtime bench` through llama-cpp-python: a fresh
context state per repetition, one prefill of the given prompt ids (logits
for the last row only), then --gen-tokens single-token decode steps, each
next token the argmax of the previous logits (end-of-generation tokens do
not stop it). Warm-up repetitions are run and discarded. Prints one JSON
object with every raw sample.
"""

import argparse
import json
import sys
import time

import numpy as np
import llama_cpp


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", required=True)
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--prompt-ids", required=True, help="JSON array of token ids")
    ap.add_argument("--gen-tokens", type=int, required=True)
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument(
        "--batch",
        choices=["default", "prompt"],
        default="default",
        help="default: llama.cpp's own context defaults (n_batch 2048, n_ubatch 512, as "
        "llama_context_default_params() reports them); prompt: the whole prompt as one batch",
    )
    ap.add_argument(
        "--flash-attn",
        choices=["on", "off"],
        default="on",
        help="llama.cpp's default is 'auto', which the CPU backend resolves to on; "
        "llama-cpp-python can only say on or off",
    )
    a = ap.parse_args()

    prompt = json.loads(a.prompt_ids)
    n_ctx = len(prompt) + a.gen_tokens + 16
    if a.batch == "default":
        d = llama_cpp.llama_context_default_params()
        n_batch, n_ubatch = int(d.n_batch), int(d.n_ubatch)
    else:
        n_batch = n_ubatch = max(len(prompt), 32)
    llm = llama_cpp.Llama(
        model_path=a.model,
        n_ctx=n_ctx,
        n_batch=n_batch,
        n_ubatch=n_ubatch,
        flash_attn=a.flash_attn == "on",
        n_threads=a.threads,
        n_threads_batch=a.threads,
        logits_all=False,
        verbose=False,
    )
    n_vocab = llm.n_vocab()

    def last_logits():
        return np.ctypeslib.as_array(llm._ctx.get_logits_ith(-1), shape=(n_vocab,))

    reps = []
    for rep in range(a.warmup + a.reps):
        llm.reset()
        t0 = time.perf_counter()
        llm.eval(prompt)
        prefill_s = time.perf_counter() - t0
        t1 = time.perf_counter()
        for _ in range(a.gen_tokens):
            nxt = int(np.argmax(last_logits()))
            llm.eval([nxt])
        decode_s = time.perf_counter() - t1
        if rep >= a.warmup:
            reps.append(
                {
                    "prefill_s": prefill_s,
                    "decode_s": decode_s,
                    "prefill_tok_per_s": len(prompt) / prefill_s,
                    "decode_tok_per_s": a.gen_tokens / decode_s if a.gen_tokens else 0.0,
                }
            )
    print(
        json.dumps(
            {
                "engine": "llama.cpp",
                "llama_cpp_python": llama_cpp.__version__,
                "system_info": llama_cpp.llama_print_system_info().decode(errors="replace").strip(),
                "threads": a.threads,
                "n_batch": n_batch,
                "n_ubatch": n_ubatch,
                "flash_attn": a.flash_attn,
                "prompt_tokens": len(prompt),
                "gen_tokens": a.gen_tokens,
                "reps": reps,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
