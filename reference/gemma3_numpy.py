#!/usr/bin/env python3
"""Independent float64 numpy forward pass of the Gemma 3 text model, read from
a llama.cpp-converted GGUF (written for gemma-3-270m Q4_K_M), used to say which
engine's logits are closer to exact math at near-ties.

It teacher-forces each fixture prompt: it feeds ``prompt_ids`` and then
llama.cpp's ``greedy_ids``, and records the float64 logits at every generation
step (the logits that predict ``greedy_ids[s]``).

Precision
---------
``gguf.quants.dequantize`` turns every weight (Q8_0, Q5_0, Q4_K, Q6_K, F32)
into float32. That is exact, because the block scales are f16 (and the K-quant
sub-scales are small integers). The weights are then held as float64, and all
arithmetic is float64: matmuls, norms, RoPE, softmax, GELU and residual adds.
Activations are NOT quantized (llama.cpp's CPU backend quantizes them to 8 bits
before each quantized matmul). The only error left against exact math is the
weight quantization already in the file.

Model definition (llama.cpp's ``gemma3`` graph, and HF Gemma3ForCausalLM)
-------------------------------------------------------------------------
* ``x = embed[tok] * sqrt(n_embd)``. llama.cpp uses ``sqrtf(640)`` in f32. HF
  rounds the factor to the model dtype, but for bf16 that is a different
  number, so this follows llama.cpp.
* The norm weights in the GGUF already include Gemma's ``1 + w``
  (convert_hf_to_gguf adds 1), so every norm here is a plain RMSNorm:
  ``x / sqrt(mean(x^2) + eps) * w``, with eps from
  ``gemma3.attention.layer_norm_rms_epsilon`` (1e-6).
* Attention block:
  ``h = rmsnorm(x, attn_norm)``, q/k/v projections, then per-head RMSNorm of q
  and k (``attn_q_norm`` / ``attn_k_norm``, head_dim weights), then NeoX RoPE.
  The scores are ``q.k / sqrt(head_dim)`` (query_pre_attn_scalar = 256), with
  a causal softmax and GQA (query head h uses KV head h // (n_head/n_kv)). Then
  ``o = Wo attn`` and ``x = x + rmsnorm(o, post_attention_norm)``.
* FFN block: ``h = rmsnorm(x, ffn_norm)``,
  ``f = Wdown(gelu_tanh(Wgate h) * Wup h)``, and
  ``x = x + rmsnorm(f, post_ffw_norm)``.
* Final: ``rmsnorm(x, output_norm)``, then the tied head ``logits = E @ x``.
  Gemma 3 has no final-logit soft-capping and no attention soft-capping.
* Layer types: a layer is global if ``(il + 1) % 6 == 0`` (layers 5, 11 and 17
  of 18). Global layers use rope base ``gemma3.rope.freq_base`` (1e6) and full
  causal attention. The other layers are local: rope base 10000, and a
  sliding window of ``gemma3.attention.sliding_window`` (512), so a query at
  position p sees keys p-511 .. p. This is llama.cpp's LLAMA_SWA_TYPE_STANDARD:
  a key is masked when ``p - p_key >= 512``.
* RoPE is NeoX style. Within each 256-dim head, element i pairs with
  element i + 128: ``theta_i = pos * base^(-2i/256)``,
  ``out[i] = x0 cos - x1 sin`` and ``out[i+128] = x0 sin + x1 cos``.

Tensor orientation: a GGUF tensor with dims ``[ne0, ne1]`` (ne0 contiguous)
dequantizes to a numpy array of shape ``(ne1, ne0)`` and is applied as
``y = W @ x`` (``Y = X @ W.T`` for rows). For example, ``attn_q [640, 1024]``
becomes ``(1024, 640)`` and maps 640 -> 4 heads x 256.

Usage:
  python3 reference/gemma3_numpy.py --model ~/.cache/draftwise/gemma-3-270m-q4_k_m.gguf \\
      --fixture reference/data/gemma3-270m.llamacpp.json --prompts capital,story,code \\
      --out reference/data/gemma3-270m.float64.json
"""

from __future__ import annotations

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")  # deterministic summation order; small machine

import argparse
import json
import time

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize

DEFAULT_MODEL = os.path.expanduser("~/.cache/draftwise/gemma-3-270m-q4_k_m.gguf")


def _field(reader: GGUFReader, key: str, default=None):
    f = reader.fields.get(key)
    return default if f is None else f.contents()


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x * x * x)))


class Gemma3Ref:
    """float64 Gemma 3 text-model forward over a whole sequence at once."""

    def __init__(self, path: str = DEFAULT_MODEL):
        r = GGUFReader(path)
        arch = _field(r, "general.architecture")
        if arch != "gemma3":
            raise ValueError(f"unsupported architecture {arch!r}")
        a = "gemma3."
        self.n_layer = int(_field(r, a + "block_count"))
        self.d_model = int(_field(r, a + "embedding_length"))
        self.d_ff = int(_field(r, a + "feed_forward_length"))
        self.n_head = int(_field(r, a + "attention.head_count"))
        self.n_kv = int(_field(r, a + "attention.head_count_kv"))
        self.head_dim = int(_field(r, a + "attention.key_length"))
        assert int(_field(r, a + "attention.value_length")) == self.head_dim
        self.eps = float(_field(r, a + "attention.layer_norm_rms_epsilon"))
        self.rope_base_global = float(_field(r, a + "rope.freq_base", 1e6))
        self.rope_base_local = 10000.0  # llama.cpp: rope_freq_base_train_swa for gemma3
        self.window = int(_field(r, a + "attention.sliding_window"))
        self.tokens = _field(r, "tokenizer.ggml.tokens")
        self.bos_id = _field(r, "tokenizer.ggml.bos_token_id")
        for key in (a + "rope.scaling.type", a + "rope.scaling.factor", a + "final_logit_softcapping",
                    a + "attn_logit_softcapping"):
            if key in r.fields:
                raise ValueError(f"{key} present in GGUF; not implemented here")

        tensors = {t.name: t for t in r.tensors}
        self.tensor_types = {}

        def W(name: str) -> np.ndarray:
            t = tensors[name]
            w = dequantize(t.data, t.tensor_type)
            assert tuple(w.shape) == tuple(int(d) for d in reversed(t.shape)), (name, w.shape, t.shape)
            self.tensor_types[name] = t.tensor_type.name
            return np.ascontiguousarray(w, dtype=np.float64)

        self.embd = W("token_embd.weight")  # (vocab, d_model); also the tied head
        assert "output.weight" not in tensors, "untied head not implemented"
        self.vocab = self.embd.shape[0]
        self.out_norm = W("output_norm.weight")
        names = ["attn_norm", "attn_q", "attn_k", "attn_v", "attn_q_norm", "attn_k_norm", "attn_output",
                 "post_attention_norm", "ffn_norm", "ffn_gate", "ffn_up", "ffn_down", "post_ffw_norm"]
        self.layers = [{n: W(f"blk.{i}.{n}.weight") for n in names} for i in range(self.n_layer)]
        L0 = self.layers[0]
        D, H, KV = self.head_dim, self.n_head, self.n_kv
        assert L0["attn_q"].shape == (H * D, self.d_model)
        assert L0["attn_k"].shape == (KV * D, self.d_model)
        assert L0["attn_output"].shape == (self.d_model, H * D)
        assert L0["ffn_down"].shape == (self.d_model, self.d_ff)
        assert L0["attn_q_norm"].shape == (D,)

    def is_global(self, il: int) -> bool:
        return (il + 1) % 6 == 0

    def rmsnorm(self, x: np.ndarray, w: np.ndarray) -> np.ndarray:
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * w

    def rope_neox(self, x: np.ndarray, pos: np.ndarray, base: float) -> np.ndarray:
        """x: (T, H, D); pairs (i, i + D/2)."""
        D = self.head_dim
        half = D // 2
        inv_freq = base ** (-2.0 * np.arange(half, dtype=np.float64) / D)
        ang = pos[:, None].astype(np.float64) * inv_freq[None, :]
        cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
        x0, x1 = x[..., :half], x[..., half:]
        return np.concatenate([x0 * cos - x1 * sin, x0 * sin + x1 * cos], axis=-1)

    def forward(self, ids, logit_rows=None) -> np.ndarray:
        """Run the whole sequence `ids` (positions 0..T-1). Returns float64 logits
        (len(logit_rows), vocab) for the requested row indices (default: all)."""
        ids = np.asarray(ids, dtype=np.int64)
        T = len(ids)
        pos = np.arange(T)
        H, KV, D = self.n_head, self.n_kv, self.head_dim
        group = H // KV
        scale = 1.0 / np.sqrt(D)
        causal = pos[None, :] > pos[:, None]  # (query, key) masked
        swa = causal | (pos[:, None] - pos[None, :] >= self.window)
        x = self.embd[ids] * np.sqrt(float(self.d_model))
        for il, L in enumerate(self.layers):
            glob = self.is_global(il)
            base = self.rope_base_global if glob else self.rope_base_local
            mask = causal if glob else swa
            h = self.rmsnorm(x, L["attn_norm"])
            q = (h @ L["attn_q"].T).reshape(T, H, D)
            k = (h @ L["attn_k"].T).reshape(T, KV, D)
            v = (h @ L["attn_v"].T).reshape(T, KV, D)
            q = self.rope_neox(self.rmsnorm(q, L["attn_q_norm"]), pos, base)
            k = self.rope_neox(self.rmsnorm(k, L["attn_k_norm"]), pos, base)
            attn = np.empty((T, H, D))
            for hh in range(H):
                kvh = hh // group
                sc = (q[:, hh, :] @ k[:, kvh, :].T) * scale
                sc = np.where(mask, -np.inf, sc)
                sc -= sc.max(axis=1, keepdims=True)
                p = np.exp(sc)
                p /= p.sum(axis=1, keepdims=True)
                attn[:, hh, :] = p @ v[:, kvh, :]
            o = attn.reshape(T, H * D) @ L["attn_output"].T
            x = x + self.rmsnorm(o, L["post_attention_norm"])
            h = self.rmsnorm(x, L["ffn_norm"])
            a = gelu_tanh(h @ L["ffn_gate"].T) * (h @ L["ffn_up"].T)
            f = a @ L["ffn_down"].T
            x = x + self.rmsnorm(f, L["post_ffw_norm"])
        if logit_rows is not None:
            x = x[np.asarray(logit_rows)]
        x = self.rmsnorm(x, self.out_norm)
        return x @ self.embd.T

    def tok(self, i: int) -> str:
        return self.tokens[i].replace("\u2581", " ")


def top_k(logits: np.ndarray, k: int = 8):
    idx = np.argpartition(-logits, k)[:k]
    idx = idx[np.lexsort((idx, -logits[idx]))]  # by logit desc, then id asc
    return [[int(i), float(logits[i])] for i in idx]


def run_prompt(m: Gemma3Ref, g: dict) -> dict:
    prompt, greedy = list(g["prompt_ids"]), list(g["greedy_ids"])
    seq = prompt + greedy[:-1]  # the last greedy id is never fed
    rows = list(range(len(prompt) - 1, len(seq)))  # row r predicts seq position r+1
    t0 = time.time()
    logits = m.forward(seq, logit_rows=rows)
    dt = time.time() - t0
    steps = []
    for s, lg in enumerate(logits):
        t8 = top_k(lg, 8)
        lc_id = int(greedy[s])
        rec = dict(
            step=s,
            float64_top8=t8,
            float64_margin=t8[0][1] - t8[1][1],
            float64_argmax=t8[0][0],
            llamacpp_greedy_id=lc_id,
            llamacpp_margin=float(g["margins"][s]),
            float64_logit_of_llamacpp_greedy=float(lg[lc_id]),
            argmax_agrees=t8[0][0] == lc_id,
        )
        if "runner_up" in g and s < len(g["runner_up"]):
            ru = int(g["runner_up"][s])
            rec["llamacpp_runner_up_id"] = ru
            rec["float64_logit_of_llamacpp_runner_up"] = float(lg[ru])
            # > 0: float64 ranks llama.cpp's pick above llama.cpp's runner-up, as llama.cpp does
            rec["float64_greedy_minus_runner_up"] = float(lg[lc_id] - lg[ru])
        if s < len(g.get("top_logits", [])):
            lc = g["top_logits"][s]
            rec["llamacpp_top8"] = [[int(i), float(v), float(lg[int(i)])] for i, v in lc]  # [id, llama.cpp, float64]
            rec["max_abs_diff_top8"] = max(abs(v - lg[int(i)]) for i, v in lc)
        steps.append(rec)
    diffs = [st["max_abs_diff_top8"] for st in steps if "max_abs_diff_top8" in st]
    return dict(
        id=g["id"],
        prompt_ids=prompt,
        llamacpp_greedy_ids=greedy,
        seconds=round(dt, 2),
        steps=steps,
        max_abs_diff_top8_first4=max(diffs) if diffs else None,
        argmax_disagreements=[st["step"] for st in steps if not st["argmax_agrees"]],
        # steps where float64 puts llama.cpp's runner-up above llama.cpp's pick
        runner_up_order_flips=[st["step"] for st in steps if st.get("float64_greedy_minus_runner_up", 1.0) < 0],
    )


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--fixture", default="reference/data/gemma3-270m.llamacpp.json")
    ap.add_argument("--prompts", default="capital,story,code", help="comma-separated prompt ids, or 'all'")
    ap.add_argument("--max-prompt-tokens", type=int, default=100)
    ap.add_argument("--allow-long", action="store_true", help="run prompts longer than --max-prompt-tokens")
    ap.add_argument("--out", default="reference/data/gemma3-270m.float64.json")
    a = ap.parse_args()

    fx = json.load(open(a.fixture))
    want = None if a.prompts == "all" else a.prompts.split(",")
    t0 = time.time()
    m = Gemma3Ref(a.model)
    print(f"loaded {a.model} in {time.time() - t0:.1f}s", flush=True)
    results = []
    for g in fx["greedy"]:
        if want is not None and g["id"] not in want:
            continue
        if len(g["prompt_ids"]) > a.max_prompt_tokens and not a.allow_long:
            print(f"skip {g['id']}: {len(g['prompt_ids'])} prompt tokens (use --allow-long)")
            continue
        res = run_prompt(m, g)
        results.append(res)
        print(f"{res['id']}: {len(res['steps'])} steps in {res['seconds']}s, "
              f"max|f64-llama.cpp| top8 first4 = {res['max_abs_diff_top8_first4']:.4f}, "
              f"argmax disagreements at steps {res['argmax_disagreements']}", flush=True)
        for st in res["steps"]:
            if not st["argmax_agrees"] or st["float64_margin"] < 0.2 or st["llamacpp_margin"] < 0.2:
                lc = st["llamacpp_greedy_id"]
                ru = ""
                if "llamacpp_runner_up_id" in st:
                    r = st["llamacpp_runner_up_id"]
                    ru = (f" over {r} {m.tok(r)!r}; float64 {st['float64_logit_of_llamacpp_greedy']:.4f} vs "
                          f"{st['float64_logit_of_llamacpp_runner_up']:.4f}")
                print(f"  step {st['step']}: llama.cpp {lc} {m.tok(lc)!r} (margin {st['llamacpp_margin']:.4f}{ru}); "
                      f"float64 top2 " + ", ".join(f"{i} {m.tok(i)!r} {v:.4f}" for i, v in st["float64_top8"][:2])
                      + f" (margin {st['float64_margin']:.4f})")
    out = dict(
        generated_by="reference/gemma3_numpy.py --model " + os.path.basename(a.model)
        + f" --fixture {a.fixture} --prompts {a.prompts}",
        model=os.path.basename(a.model),
        fixture=a.fixture,
        numpy=np.__version__,
        precision="float64 everywhere; weights dequantized exactly by gguf.quants.dequantize; activations not quantized",
        note="teacher-forced on prompt_ids + llama.cpp greedy_ids; step s = logits predicting greedy_ids[s]; "
        "llamacpp_top8 rows are [id, llama.cpp logit, float64 logit]",
        prompts=results,
    )
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
