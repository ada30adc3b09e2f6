#!/usr/bin/env python3
"""Op-by-op check of gemma3_numpy.py against llama.cpp's own intermediates, and
an attribution of a near-tie flip to llama.cpp's 8-bit activation quantization.

1. Capture. The script runs llama.cpp through llama-cpp-python (f32 KV cache,
   flash attention off, 1 thread, the whole sequence in one batch) with a ggml
   eval callback. The callback saves every contiguous f32 intermediate:
   inp_scaled, attn_norm-N, Qcur-N, Qcur_normed-N, kqv_out-N,
   attn_post_norm-N, ffn_gate-N, ffn_geglu-N, l_out-N, result_output, ...
   This step runs under the interpreter given by --llama-python, which needs
   llama_cpp and numpy but not gguf.
2. Op check. Each op of the reference is fed llama.cpp's input for that op,
   and its output is compared with llama.cpp's output. For the matmuls, the
   reference also emulates llama.cpp's activation quantization: Q8_0 blocks of
   32 with an f16 scale for Q5_0/Q8_0 weights, and Q8_K blocks of 256 with an
   f32 scale for Q4_K/Q6_K weights. With that, every op agrees to ~1e-7
   relative (f32 rounding). This checks the weight orientation, the
   embedding scale, the per-head q/k norms, the NeoX RoPE and the per-layer
   rope base, the GQA attention and its 1/16 scale, the post-norms, the
   residuals, GEGLU and the tied head. Without the emulation each matmul is
   1e-2 to 5e-2 off. llama.cpp's GELU is f16(gelu(f16(x))), from a table;
   that is 3.5e-4 off exact tanh-GELU.
3. Flip check. This part teacher-forces one fixture step (default: capital,
   step 15). It prints llama.cpp's pick and runner-up under exact float64,
   then again with llama.cpp's activation quantization emulated end to end.

Usage (system python3 has gguf and numpy; the venv has llama_cpp):
  python3 reference/gemma3_llamacpp_opcheck.py \\
      --model ~/.cache/draftwise/gemma-3-270m-q4_k_m.gguf \\
      --llama-python ~/.cache/draftwise/bench-venv/bin/python
"""

from __future__ import annotations

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import argparse
import json
import math
import subprocess
import sys
import tempfile

import numpy as np

DEFAULT_MODEL = os.path.expanduser("~/.cache/draftwise/gemma-3-270m-q4_k_m.gguf")
DEFAULT_IDS = "2,818,5279,529,7001,563,506,5279"  # <bos>The capital of France is the capital


# ----------------------------------------------------------------------------- capture
def capture(model: str, ids: list[int], out: str):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import llamacpp_capture

    tensors, logits = llamacpp_capture.capture(
        model, ids, n_ctx=max(64, len(ids) + 8), n_batch=512, n_threads=1, n_threads_batch=1
    )
    # "name#k": the k-th tensor of that name, in eval order.
    cap = {f"{name}#{k}": a for name, arrs in tensors.items() for k, a in enumerate(arrs)}
    cap["__logits"] = logits
    np.savez(out, **cap)


# ----------------------------------------------------------------------------- emulation
def f16(x):
    return np.asarray(x).astype(np.float16).astype(np.float64)


def quant_q8_0(x):
    """quantize_row_q8_0: blocks of 32, d = amax/127 stored f16, q = round(x * 127/amax)."""
    s = x.shape
    b = x.reshape(-1, 32).astype(np.float32)
    amax = np.abs(b).max(1, keepdims=True)
    d = amax / np.float32(127.0)
    inv = np.where(amax > 0, np.float32(127.0) / np.where(amax > 0, amax, 1), 0).astype(np.float32)
    return (np.rint(b * inv).astype(np.float64) * f16(d)).reshape(s)


def quant_q8_K(x):
    """quantize_row_q8_K: blocks of 256, iscale = -127/max (max = the signed value of
    largest magnitude), q = min(127, round(iscale*x)), d = 1/iscale stored f32."""
    s = x.shape
    b = x.reshape(-1, 256).astype(np.float32)
    mx = b[np.arange(len(b)), np.abs(b).argmax(1)][:, None]
    isc = np.where(mx != 0, np.float32(-127.0) / np.where(mx != 0, mx, 1), 0).astype(np.float32)
    q = np.minimum(127, np.rint(isc * b))
    d = np.where(isc != 0, np.float32(1.0) / np.where(isc != 0, isc, 1), 0).astype(np.float32)
    return (q.astype(np.float64) * d.astype(np.float64)).reshape(s)


ACT_QUANT = {"Q8_0": quant_q8_0, "Q5_0": quant_q8_0, "Q5_1": quant_q8_0, "Q4_0": quant_q8_0,
             "Q4_K": quant_q8_K, "Q5_K": quant_q8_K, "Q6_K": quant_q8_K, "F32": lambda x: x}


def gelu_f16_table(x):
    from gemma3_numpy import gelu_tanh

    return np.where(x <= -10, 0.0, np.where(x >= 10, x, f16(gelu_tanh(f16(x)))))


def emulated_forward(m, ids, rows, act=True, gelu16=True):
    """Gemma3Ref.forward with llama.cpp's activation quantization (and GELU table)."""
    from gemma3_numpy import gelu_tanh

    ids = np.asarray(ids)
    T = len(ids)
    pos = np.arange(T)
    H, D = m.n_head, m.head_dim
    causal = pos[None, :] > pos[:, None]
    swa = causal | (pos[:, None] - pos[None, :] >= m.window)

    def mm(name, x, w):
        return (ACT_QUANT[m.tensor_types[name]](x) if act else x) @ w.T

    x = m.embd[ids] * math.sqrt(m.d_model)
    for il, L in enumerate(m.layers):
        P = f"blk.{il}."
        glob = m.is_global(il)
        base = m.rope_base_global if glob else m.rope_base_local
        h = m.rmsnorm(x, L["attn_norm"])
        q = mm(P + "attn_q.weight", h, L["attn_q"]).reshape(T, H, D)
        k = mm(P + "attn_k.weight", h, L["attn_k"]).reshape(T, m.n_kv, D)
        v = mm(P + "attn_v.weight", h, L["attn_v"]).reshape(T, m.n_kv, D)
        q = m.rope_neox(m.rmsnorm(q, L["attn_q_norm"]), pos, base)
        k = m.rope_neox(m.rmsnorm(k, L["attn_k_norm"]), pos, base)
        att = np.empty((T, H, D))
        for hh in range(H):
            kv = hh // (H // m.n_kv)
            sc = np.where(causal if glob else swa, -np.inf, q[:, hh] @ k[:, kv].T / math.sqrt(D))
            p = np.exp(sc - sc.max(1, keepdims=True))
            att[:, hh] = p / p.sum(1, keepdims=True) @ v[:, kv]
        x = x + m.rmsnorm(mm(P + "attn_output.weight", att.reshape(T, -1), L["attn_output"]), L["post_attention_norm"])
        h = m.rmsnorm(x, L["ffn_norm"])
        gg = mm(P + "ffn_gate.weight", h, L["ffn_gate"])
        a = (gelu_f16_table(gg) if gelu16 else gelu_tanh(gg)) * mm(P + "ffn_up.weight", h, L["ffn_up"])
        x = x + m.rmsnorm(mm(P + "ffn_down.weight", a, L["ffn_down"]), L["post_ffw_norm"])
    x = m.rmsnorm(x[np.asarray(rows)], m.out_norm)
    return mm("token_embd.weight", x, m.embd)


# ----------------------------------------------------------------------------- op check
def op_check(m, cap, ids):
    from gemma3_numpy import gelu_tanh

    T = len(ids)
    pos = np.arange(T)
    H, D = m.n_head, m.head_dim

    def g(n, k=0):
        return cap[f"{n}#{k}"].reshape(T, -1)

    def rel(a, b):
        a, b = np.ravel(a), np.ravel(b)
        return float(np.linalg.norm(a - b) / np.linalg.norm(b))

    def mm(name, x, w, emu=True):
        return (ACT_QUANT[m.tensor_types[name]](x) if emu else x) @ w.T

    worst, contrast = {}, {}

    def rec(d, k, v):
        d[k] = max(d.get(k, 0.0), v)

    rec(worst, "embed * sqrt(640)", rel(m.embd[ids] * math.sqrt(m.d_model), g("inp_scaled")))
    rec(contrast, "embed * 25.25 (bf16-rounded scale)", rel(m.embd[ids] * 25.25, g("inp_scaled")))
    for il, L in enumerate(m.layers):
        P = f"blk.{il}."
        glob = m.is_global(il)
        base, other = ((m.rope_base_global, m.rope_base_local) if glob else (m.rope_base_local, m.rope_base_global))
        xin = g("inp_scaled") if il == 0 else g(f"l_out-{il - 1}")
        rec(worst, "attn_norm", rel(m.rmsnorm(xin, L["attn_norm"]), g(f"attn_norm-{il}")))
        xn = g(f"attn_norm-{il}")
        for nm, w, wn, nh in (("Qcur", "attn_q", "attn_q_norm", H), ("Kcur", "attn_k", "attn_k_norm", m.n_kv)):
            rec(worst, f"{w} matmul (act. quant emulated)", rel(mm(P + w + ".weight", xn, L[w]), g(f"{nm}-{il}")))
            rec(contrast, f"{w} matmul (plain float64)", rel(mm(P + w + ".weight", xn, L[w], False), g(f"{nm}-{il}")))
            pre = g(f"{nm}-{il}").reshape(T, nh, D)
            rec(worst, f"{wn} (per-head RMSNorm)", rel(m.rmsnorm(pre, L[wn]), g(f"{nm}_normed-{il}").reshape(T, nh, D)))
            nrm = g(f"{nm}_normed-{il}").reshape(T, nh, D)
            roped = g(f"{nm}-{il}", 2).reshape(T, nh, D)
            rec(worst, "rope neox, per-layer base", rel(m.rope_neox(nrm, pos, base), roped))
            rec(contrast, "rope with the other layer type's base", rel(m.rope_neox(nrm, pos, other), roped))
        rec(worst, "attn_v matmul (act. quant emulated)", rel(mm(P + "attn_v.weight", xn, L["attn_v"]), g(f"Vcur-{il}")))
        q = g(f"Qcur-{il}", 2).reshape(T, H, D)
        k = g(f"Kcur-{il}", 2).reshape(T, m.n_kv, D)
        v = g(f"Vcur-{il}").reshape(T, m.n_kv, D)
        att = np.empty((T, H, D))
        for hh in range(H):
            kv = hh // (H // m.n_kv)
            sc = np.where(pos[None, :] > pos[:, None], -np.inf, q[:, hh] @ k[:, kv].T / math.sqrt(D))
            p = np.exp(sc - sc.max(1, keepdims=True))
            att[:, hh] = p / p.sum(1, keepdims=True) @ v[:, kv]
        rec(worst, "attention (causal, GQA, q.k/16)", rel(att.reshape(T, -1), g(f"kqv_out-{il}")))
        o = mm(P + "attn_output.weight", g(f"kqv_out-{il}"), L["attn_output"])
        rec(worst, "post_attention_norm(Wo attn) (emulated)", rel(m.rmsnorm(o, L["post_attention_norm"]), g(f"attn_post_norm-{il}")))
        rec(worst, "residual after attention", rel(xin + g(f"attn_post_norm-{il}"), g(f"sa_out-{il}")))
        rec(worst, "ffn_norm", rel(m.rmsnorm(g(f"sa_out-{il}"), L["ffn_norm"]), g(f"ffn_norm-{il}")))
        fn = g(f"ffn_norm-{il}")
        rec(worst, "ffn_gate matmul (emulated)", rel(mm(P + "ffn_gate.weight", fn, L["ffn_gate"]), g(f"ffn_gate-{il}")))
        rec(worst, "ffn_up matmul (emulated)", rel(mm(P + "ffn_up.weight", fn, L["ffn_up"]), g(f"ffn_up-{il}")))
        rec(contrast, "ffn_gate matmul (plain float64)", rel(mm(P + "ffn_gate.weight", fn, L["ffn_gate"], False), g(f"ffn_gate-{il}")))
        gg, uu = g(f"ffn_gate-{il}"), g(f"ffn_up-{il}")
        rec(worst, "geglu, llama.cpp's f16 GELU table", rel(gelu_f16_table(gg) * uu, g(f"ffn_geglu-{il}")))
        rec(contrast, "geglu, exact tanh-GELU", rel(gelu_tanh(gg) * uu, g(f"ffn_geglu-{il}")))
        a = g(f"ffn_geglu-{il}")
        rec(worst, "post_ffw_norm(Wdown a) (emulated)", rel(m.rmsnorm(mm(P + "ffn_down.weight", a, L["ffn_down"]), L["post_ffw_norm"]), g(f"ffn_post_norm-{il}")))
        rec(contrast, "post_ffw_norm(Wdown a) (plain float64)", rel(m.rmsnorm(mm(P + "ffn_down.weight", a, L["ffn_down"], False), L["post_ffw_norm"]), g(f"ffn_post_norm-{il}")))
        rec(worst, "residual after FFN", rel(g(f"sa_out-{il}") + g(f"ffn_post_norm-{il}"), g(f"l_out-{il}")))
    rec(worst, "output_norm", rel(m.rmsnorm(g(f"l_out-{m.n_layer - 1}"), m.out_norm), g("result_norm")))
    rec(worst, "tied head (emulated)", rel(mm("token_embd.weight", g("result_norm"), m.embd), g("result_output")))
    rec(contrast, "tied head (plain float64)", rel(mm("token_embd.weight", g("result_norm"), m.embd, False), g("result_output")))
    print(f"per-op max relative error vs llama.cpp, each op fed llama.cpp's own input ({T} tokens):")
    for k, v in worst.items():
        print(f"  {k:42s} {v:.2e}")
    print("for contrast (not what llama.cpp computes):")
    for k, v in contrast.items():
        print(f"  {k:42s} {v:.2e}")
    lf = m.forward(ids)
    d = np.abs(lf - cap["__logits"])
    print(f"end-to-end logits, float64 vs llama.cpp (f32 KV, no flash attn): max|d| {d.max():.3f} mean|d| {d.mean():.3f}")
    print("max |residual| after each layer (llama.cpp):", [round(float(np.abs(g(f"l_out-{i}")).max())) for i in range(m.n_layer)])


def flip_check(m, fixture, prompt, step):
    g = next(p for p in json.load(open(fixture))["greedy"] if p["id"] == prompt)
    seq = g["prompt_ids"] + g["greedy_ids"][:-1]
    row = [len(g["prompt_ids"]) - 1 + step]
    a, b = int(g["greedy_ids"][step]), int(g["runner_up"][step])
    print(f"{prompt} step {step}: llama.cpp picks {a} {m.tok(a)!r} over {b} {m.tok(b)!r} by {g['margins'][step]:.4f}")
    for label, lg in (("exact float64", m.forward(seq, logit_rows=row)[0]),
                      ("float64 + 8-bit act. quant", emulated_forward(m, seq, row, act=True, gelu16=False)[0]),
                      ("float64 + act. quant + f16 GELU", emulated_forward(m, seq, row, act=True, gelu16=True)[0]),
                      ("float64 + f16 GELU only", emulated_forward(m, seq, row, act=False, gelu16=True)[0])):
        print(f"  {label:34s} {lg[a]:.4f} vs {lg[b]:.4f}: difference {lg[a] - lg[b]:+.4f}, argmax {int(lg.argmax())}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--llama-python", default=os.path.expanduser("~/.cache/draftwise/bench-venv/bin/python"),
                    help="interpreter with llama_cpp installed (used for the capture step)")
    ap.add_argument("--ids", default=DEFAULT_IDS, help="comma-separated token ids for the op check")
    ap.add_argument("--fixture", default="reference/data/gemma3-270m.llamacpp.json")
    ap.add_argument("--flip", default="capital:15", help="PROMPT:STEP for the flip check, or 'none'")
    ap.add_argument("--capture", metavar="NPZ", help=argparse.SUPPRESS)  # internal: capture step only
    a = ap.parse_args()
    ids = [int(x) for x in a.ids.split(",")]
    if a.capture:
        capture(a.model, ids, a.capture)
        return
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from gemma3_numpy import Gemma3Ref

    with tempfile.TemporaryDirectory() as td:
        npz = os.path.join(td, "cap.npz")
        subprocess.run([a.llama_python, os.path.abspath(__file__), "--model", a.model, "--ids", a.ids,
                        "--capture", npz], check=True)
        cap = dict(np.load(npz))
    m = Gemma3Ref(a.model)
    op_check(m, cap, ids)
    if a.flip != "none":
        p, s = a.flip.split(":")
        flip_check(m, a.fixture, p, int(s))


if __name__ == "__main__":
    main()
