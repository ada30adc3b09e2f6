#!/usr/bin/env python3
"""Exact (float64) logits of the tiny generated checkpoints
(reference/tiny_models.py), from the Hugging Face form of their weights
with numpy: the forward pass written out plainly (RMSNorm, RoPE in halves
with the family's scaling, GQA attention, SwiGLU; Qwen 2's biases, Qwen 3's
q/k norms). Written as reference/data/tiny-families.float64.json:

    python3 reference/tiny_float64.py

For each family and each prompt of the llama.cpp fixture
(reference/data/tiny-families.llamacpp.json): teacher-forced on llama.cpp's
greedy tokens, the top-8 and the top-1/top-2 margin at every prompt position
the llama.cpp fixture records and at every greedy step; and float64's own
greedy continuation with its margins.

Why: llama.cpp multiplies Q8_0 weights with activations quantized to 8 bits,
which on these random models moves logits by up to about 1.2 (measured with
this script: llama.cpp against float64 0.31 to 1.22 per family), so the
tight check of the runtime's arithmetic is against this reference.
"""

import json
import sys

import numpy as np

sys.path.insert(0, "reference")
import tiny_models as tm  # noqa: E402

def fwd(name, ids):
    c = tm.FAMILIES[name]; t = {k: v.astype(np.float64) for k, v in tm.make_weights(name, c, 320).items()}
    hd, H, KV = c['head_dim'], c['heads'], c['kv_heads']; eps = 1e-6
    n = len(ids)
    def rms(x, w): return x / np.sqrt((x*x).mean(-1, keepdims=True) + eps) * w
    inv = c['rope_base'] ** (-np.arange(0, hd, 2) / hd)
    rs = c.get('rope_scaling'); pos = np.arange(n, dtype=np.float64)
    if rs and (rs.get('type') or rs.get('rope_type')) == 'linear': pos = pos / rs['factor']
    if rs and rs.get('rope_type') == 'llama3': inv = inv / tm.llama3_factors(c).astype(np.float64)
    ang = pos[:, None] * inv[None]; cos, sin = np.cos(ang), np.sin(ang)
    def rope(x):  # (n, heads, hd) halves
        a, b = x[..., :hd//2], x[..., hd//2:]
        return np.concatenate([a*cos[:, None] - b*sin[:, None], a*sin[:, None] + b*cos[:, None]], -1)
    x = t['model.embed_tokens.weight'][ids]
    for i in range(c['layers']):
        p = f'model.layers.{i}.'
        h = rms(x, t[p+'input_layernorm.weight'])
        q = h @ t[p+'self_attn.q_proj.weight'].T; k = h @ t[p+'self_attn.k_proj.weight'].T; v = h @ t[p+'self_attn.v_proj.weight'].T
        if c.get('bias'):
            q += t[p+'self_attn.q_proj.bias']; k += t[p+'self_attn.k_proj.bias']; v += t[p+'self_attn.v_proj.bias']
        q = q.reshape(n, H, hd); k = k.reshape(n, KV, hd); v = v.reshape(n, KV, hd)
        if c.get('qk_norm'):
            q = rms(q, t[p+'self_attn.q_norm.weight']); k = rms(k, t[p+'self_attn.k_norm.weight'])
        q, k = rope(q), rope(k)
        out = np.zeros((n, H, hd))
        for hh in range(H):
            kk = k[:, hh // (H // KV)]; vv = v[:, hh // (H // KV)]
            s = q[:, hh] @ kk.T / np.sqrt(hd)
            s = s + np.triu(np.full((n, n), -np.inf), 1)
            s = np.exp(s - s.max(-1, keepdims=True)); s /= s.sum(-1, keepdims=True)
            out[:, hh] = s @ vv
        x = x + out.reshape(n, H*hd) @ t[p+'self_attn.o_proj.weight'].T
        h = rms(x, t[p+'post_attention_layernorm.weight'])
        g = h @ t[p+'mlp.gate_proj.weight'].T; u = h @ t[p+'mlp.up_proj.weight'].T
        x = x + (g / (1 + np.exp(-g)) * u) @ t[p+'mlp.down_proj.weight'].T
    x = rms(x, t['model.norm.weight'])
    head = t.get('lm_head.weight', t['model.embed_tokens.weight'])
    return x @ head.T


def top(lg):
    order = np.argsort(-lg, kind="stable")
    return [[int(i), round(float(lg[i]), 6)] for i in order[:8]], round(float(lg[order[0]] - lg[order[1]]), 6)


def main() -> int:
    ref = json.load(open("reference/data/tiny-families.llamacpp.json"))
    out = {}
    for name in tm.FAMILIES:
        prompts = []
        for p in ref["families"][name]["prompts"]:
            n = len(p["prompt_ids"])
            lg = fwd(name, p["prompt_ids"] + p["greedy_ids"])
            positions = [pos for pos, _ in p["prompt_top"]]
            prompt_top = [[pos, *top(lg[pos])] for pos in positions]
            steps = [list(top(lg[n - 1 + s])) for s in range(len(p["greedy_ids"]))]
            ids, own, margins = list(p["prompt_ids"]), [], []
            for _ in range(len(p["greedy_ids"])):
                row = fwd(name, ids)[-1]
                t, m = top(row)
                own.append(t[0][0])
                margins.append(m)
                ids.append(t[0][0])
            prompts.append({"prompt_top": prompt_top, "steps": steps, "greedy_ids": own, "greedy_margins": margins})
        out[name] = prompts
        print(f"{name}: done", file=sys.stderr)
    with open("reference/data/tiny-families.float64.json", "w") as f:
        json.dump({"generated_by": "reference/tiny_float64.py", "families": out}, f, separators=(",", ":"))
        f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
