#!/usr/bin/env python3
"""Produce reference/data/reference.json for checking the draftwise Rust engine.

* Tokenizer: llama.cpp's own tokenizer via llama-cpp-python (vocab_only load of
  the same GGUF), special tokens parsed, no BOS (the GGUF has
  tokenizer.ggml.add_bos_token = false). Every case is cross-checked against
  a second tokenizer built with the HF `tokenizers` library from the GGUF
  vocab/merges (see build_hf_tokenizer); disagreements are recorded.
* Logits / greedy decoding: reference/numpy_forward.py (float64 numpy).
* Cross-check: llama.cpp (llama-cpp-python) logits for the same token
  sequences, teacher-forced; max |diff| and argmax agreement are recorded.

Run from the repository root:
  .venv/bin/python reference/make_reference.py
"""

from __future__ import annotations

import os

# Single-threaded BLAS: deterministic summation order, and avoids thread
# oversubscription on small machines (much faster here than the default).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse
import hashlib
import json
import os
import platform
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from numpy_forward import DEFAULT_MODEL, LlamaRef  # noqa: E402

STEPS = 40
TOPK_STEPS = 8

TOKENIZER_CASES = [
    "",
    " ",
    "\n",
    "The capital of France is",
    "héllo wörld",
    "e\u0301 vs \u00e9 (combining vs precomposed)",
    "你好，世界！这是一个测试。",
    "こんにちは世界、カタカナとひらがな。",
    "مرحبا بالعالم",
    "Привет, мир!",
    "I \u2764\ufe0f \U0001f980 and \U0001f40d!",
    "family: \U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466 thumbs: \U0001f44d\U0001f3fd",
    "flags: \U0001f1eb\U0001f1f7\U0001f1ef\U0001f1f5 \U0001f3f3\ufe0f\u200d\U0001f308",
    "a  b   c\n\n\n d",
    "\t\t x",
    "trailing spaces   ",
    "   leading spaces",
    "line1\r\nline2\n",
    "12345 3.14159 1,000,000",
    "def add(a, b):\n    return a + b\n\n\nclass Foo:\n    def __init__(self):\n        self.x = [1, 2, 3]  # comment\n",
    "<|im_start|>user\nhi<|im_end|>\n",
    "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>assistant\n",
    "<|endoftext|>",
    "<|im_start",
    "don't I'll we've they're She'd HE'LL",
    "Hello World HELLO world hElLo CamelCaseIdentifier",
    "supercalifragilisticexpialidocious",
    "https://example.com/path?q=1&r=two#frag",
]


def sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def render_chat(template: str, messages, add_generation_prompt=True) -> str:
    # Same environment settings HF transformers uses for chat templates.
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    return env.from_string(template).render(messages=messages, add_generation_prompt=add_generation_prompt)


def build_hf_tokenizer(m: LlamaRef):
    """Second-opinion tokenizer: HF `tokenizers` BPE from the GGUF vocab/merges,
    pre-tokenizer = SmolLM's (individual digits + GPT-2 byte-level regex),
    which is what llama.cpp's 'smollm' pre-tokenizer type also implements."""
    from gguf import GGUFReader
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    r = GGUFReader(m.path)
    toks = r.fields["tokenizer.ggml.tokens"].contents()
    types = r.fields["tokenizer.ggml.token_type"].contents()
    merges = [tuple(s.split(" ", 1)) for s in r.fields["tokenizer.ggml.merges"].contents()]
    vocab = {t: i for i, t in enumerate(toks)}
    tk = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False))
    tk.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True),
        ]
    )
    tk.decoder = decoders.ByteLevel()
    specials = [t for t, ty in zip(toks, types) if ty == 3]  # CONTROL tokens
    tk.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])
    return tk


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--out", default=os.path.join(HERE, "data", "reference.json"))
    ap.add_argument("--steps", type=int, default=STEPS)
    ap.add_argument("--no-llama-cpp-logits", action="store_true", help="skip llama.cpp logits cross-check")
    ap.add_argument("--no-extra-bufts", action="store_true",
                    help="load llama.cpp with use_extra_bufts=false (needed if llama.cpp was built with AMX "
                         "on a VM that traps AMX instructions: 'Illegal instruction' in libggml-cpu)")
    a = ap.parse_args()

    import gguf
    import jinja2
    import llama_cpp
    import tokenizers

    t_start = time.time()
    model_sha = sha256(a.model)
    m = LlamaRef(a.model, rope="norm")
    print(f"numpy model loaded ({time.time() - t_start:.1f}s)", flush=True)

    lt = llama_cpp.Llama(model_path=a.model, vocab_only=True, verbose=False)

    def tokenize(text: str):
        # add_bos=False: GGUF tokenizer.ggml.add_bos_token is false; special=True parses <|im_start|> etc.
        return lt.tokenize(text.encode("utf-8"), add_bos=False, special=True)

    def detok(ids, special=False) -> str:
        return lt.detokenize(ids, special=special).decode("utf-8", errors="replace")

    hf = build_hf_tokenizer(m)

    stop_ids = sorted({int(m.eos_id), 0})  # <|im_end|> (eos) and <|endoftext|>
    chat_messages = [{"role": "user", "content": "What is the capital of France?"}]
    chat_text = render_chat(m.chat_template, chat_messages, add_generation_prompt=True)

    prompt_specs = [
        dict(name="capital_raw", kind="raw", text="The capital of France is"),
        dict(name="fibonacci_raw", kind="raw", text="def fibonacci(n):\n"),
        dict(name="capital_chat", kind="chat", messages=chat_messages, text=chat_text),
        dict(name="story_raw", kind="raw", text="Once upon a time, in a small village by the sea, there lived"),
    ]

    prompts = []
    for spec in prompt_specs:
        ids = tokenize(spec["text"])
        t0 = time.time()
        res = m.greedy(ids, a.steps, stop_ids=set(stop_ids), top_k=5, top_k_steps=TOPK_STEPS)
        dt = time.time() - t0
        entry = dict(spec)
        entry.update(
            prompt_ids=ids,
            hf_tokenizers_prompt_ids_agree=hf.encode(spec["text"], add_special_tokens=False).ids == ids,
            greedy_ids=res["ids"],
            stopped_on=res["ids"][-1] if res["ids"] and res["ids"][-1] in stop_ids else None,
            top5_first8=res["top5"],
            top1_top2_margin=res["margins"],
            continuation_text=detok(res["ids"], special=False),
            continuation_text_with_special=detok(res["ids"], special=True),
        )
        prompts.append(entry)
        print(f"[{spec['name']}] {len(ids)} prompt toks, {len(res['ids'])} generated in {dt:.1f}s: "
              f"{entry['continuation_text']!r}", flush=True)

    # ---- llama.cpp logits cross-check (teacher-forced on prompt + greedy ids) ----
    crosscheck = None
    if not a.no_llama_cpp_logits:
        import llamacpp_capture

        edit = llamacpp_capture.no_extra_bufts if a.no_extra_bufts else None
        with llamacpp_capture.patched_defaults(model=edit):
            ll = llama_cpp.Llama(model_path=a.model, n_ctx=512, n_batch=512, logits_all=True, verbose=False, seed=0)
        crosscheck = []
        for p in prompts:
            seq = p["prompt_ids"] + p["greedy_ids"]
            n_pr = len(p["prompt_ids"])
            ll.reset()
            ll.eval(seq)
            lc = np.array(ll.scores[: len(seq)], dtype=np.float64)
            m.reset()
            ln = m.forward(seq)
            # rows n_pr-1 .. end-1 predict the generated tokens
            rows = slice(n_pr - 1, len(seq) - 1)
            d = np.abs(lc[rows] - ln[rows])
            argmax_c = lc[rows].argmax(1).tolist()
            # llama.cpp's own free-running greedy decode (argmax of its logits)
            ll.reset()
            ll.eval(p["prompt_ids"])
            lg_ids = []
            for _ in range(a.steps):
                nxt = int(np.argmax(ll.scores[ll.n_tokens - 1]))
                lg_ids.append(nxt)
                if nxt in stop_ids:
                    break
                ll.eval([nxt])
            crosscheck.append(
                dict(
                    name=p["name"],
                    llama_cpp_greedy_ids=lg_ids,
                    llama_cpp_greedy_text=detok(lg_ids),
                    llama_cpp_greedy_first_divergence=next(
                        (i for i, (x, y) in enumerate(zip(lg_ids, p["greedy_ids"])) if x != y),
                        None if len(lg_ids) == len(p["greedy_ids"]) else min(len(lg_ids), len(p["greedy_ids"]))),
                    max_abs_logit_diff=float(d.max()),
                    mean_abs_logit_diff=float(d.mean()),
                    llama_cpp_argmax_matches_numpy_greedy=[int(x == y) for x, y in zip(argmax_c, p["greedy_ids"])],
                    llama_cpp_argmax=argmax_c,
                )
            )
            print(f"[xcheck {p['name']}] max|dlogit|={d.max():.4f} mean={d.mean():.4f} "
                  f"argmax agree {sum(crosscheck[-1]['llama_cpp_argmax_matches_numpy_greedy'])}/{len(argmax_c)}; "
                  f"llama.cpp greedy: {crosscheck[-1]['llama_cpp_greedy_text']!r}",
                  flush=True)

    # ---- tokenizer cases ----
    tok_cases = []
    for s in TOKENIZER_CASES:
        ids = tokenize(s)
        hf_ids = hf.encode(s, add_special_tokens=False).ids
        tok_cases.append(
            dict(
                text=s,
                ids=ids,
                roundtrip_ok=detok(ids, special=True) == s,
                hf_tokenizers_ids=None if hf_ids == ids else hf_ids,
                hf_tokenizers_agree=hf_ids == ids,
            )
        )

    out = dict(
        description="Reference data for draftwise; see reference/README.md",
        model_path=a.model,
        model_sha256=model_sha,
        command=" ".join([os.path.relpath(sys.executable) if sys.executable.startswith(os.getcwd()) else sys.executable]
                         + [os.path.relpath(sys.argv[0])] + sys.argv[1:]),
        cwd_note="run from the repository root",
        versions=dict(
            python=platform.python_version(),
            numpy=np.__version__,
            gguf=getattr(gguf, "__version__", None) or _pkg_version("gguf"),
            llama_cpp_python=llama_cpp.__version__,
            tokenizers=tokenizers.__version__,
            jinja2=jinja2.__version__,
        ),
        forward=dict(
            implementation="reference/numpy_forward.py",
            precision="weights dequantized to f32 by gguf.quants.dequantize, then held and computed in float64",
            rope="norm: adjacent pairs (2i, 2i+1), theta_i = pos * base^(-2i/64)",
            rope_freq_base=m.rope_base,
            rms_eps=m.eps,
            tied_lm_head=m.tied,
        ),
        tokenizer=dict(
            primary="llama.cpp (llama-cpp-python %s) Llama(vocab_only=True).tokenize(text, add_bos=False, special=True)"
            % llama_cpp.__version__,
            secondary="HF tokenizers BPE built from GGUF vocab/merges (Digits(individual) + ByteLevel regex)",
            add_bos_token=m.add_bos,
            bos_added=False,
            bos_token_id=m.bos_id,
            eos_token_id=m.eos_id,
        ),
        chat_template=m.chat_template,
        chat_template_render="jinja2 ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True), add_generation_prompt=True",
        greedy=dict(steps=a.steps, stop_ids=stop_ids, top5_steps=TOPK_STEPS,
                    note="greedy_ids includes the stop token if one was produced; margin = logit(top1) - logit(top2)"),
        prompts=prompts,
        llama_cpp_logit_crosscheck=crosscheck,
        tokenizer_cases=tok_cases,
    )
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w", encoding="utf-8") as f:
        f.write(compact_json(out))
    print(f"wrote {a.out} in {time.time() - t_start:.1f}s")


def compact_json(obj) -> str:
    """indent=1 JSON, but lists of scalars / [id, logit] pairs kept on one line."""
    import re

    text = json.dumps(obj, ensure_ascii=False, indent=1)
    scalar = r'(?:-?\d[\d.eE+-]*|null|true|false)'
    flat = re.compile(r"\[\s*(" + scalar + r"(?:,\s*" + scalar + r")*)\s*\]")
    text = flat.sub(lambda mo: "[" + ", ".join(x.strip() for x in mo.group(1).split(",")) + "]", text)
    return text + "\n"


def _pkg_version(name: str):
    from importlib.metadata import version

    return version(name)


if __name__ == "__main__":
    main()
