#!/usr/bin/env python3
"""Tiny random-weight checkpoints, one per architecture family the runtime
loads besides SmolLM and Gemma, each in GGUF form and in Hugging Face form
(its "twin": the same weights), written under reference/data/tiny/:

    python3 reference/tiny_models.py --out reference/data/tiny

Deterministic: numpy's PCG64 seeded per family, so a rerun writes the same
bytes (the Rust test pins each file's sha256 in the llama.cpp fixture).

Families and the feature each switches on:
- llama3:   Llama with `rope_scaling` type llama3 (factor 8, low 1, high 4,
            original context 64, so the 8 frequencies of a 16-wide head
            fall in all three regimes); GQA 4/2; tied head.
            GGUF: the per-frequency divisors as `rope_freqs.weight`, as
            llama.cpp's converter writes them.
- linear:   Llama with `rope_scaling` type linear (factor 4); 3 layers,
            MHA; untied head. GGUF: llama.rope.scaling.type/factor.
            HF twin sharded (model.safetensors.index.json, 3 shards).
- mistral:  MistralForCausalLM; MQA (4/1); untied; GGUF arch `llama`
            (what llama.cpp's converter writes for Mistral; llama.cpp reads
            no sliding window for `llama`, measured: adding
            llama.attention.sliding_window = 8 changes none of its logits).
            Its HF `sliding_window` is null, as in Mistral 7B v0.2 and
            later; the window itself is tested in runtime/tests/families.rs.
- qwen2:    q/k/v biases; tied head; RoPE in halves; HF twin in bf16.
- qwen3:    q/k RMSNorm per head; head_dim 32 with 4 heads (q width 128
            against a residual of 64); untied head.

Weights: every matrix is a Q8_0 value (an int8 times a power of two per
32-block, with one +-127 per block so gguf's quantizer keeps it exactly),
so the GGUF's Q8_0 tensors and the twin's f16/bf16 tensors hold the same
numbers. Norm weights and biases are multiples of 1/64 near 1 and 0.

Vocabulary: 256 byte tokens (GPT-2's byte-to-unicode map), 61 merges
learnt from a fixed text, three control tokens: 320 tokens, pre-tokenizer
`smollm` (GPT-2's split, a name both llama.cpp and the runtime know); tokenizer.json carries the same vocabulary and merges.
"""

import argparse
import json
import os
import struct
import sys
from collections import Counter

import numpy as np
import gguf

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from numpy_forward import bytes_to_unicode  # noqa: E402

DIM = 64
N_MERGES = 61
CORPUS = (
    "The capital of France is Paris. Once upon a time, in a small village, there lived a family. "
    "def add(a, b):\n    return a + b\n\nthe the the and and of of to to in in is is that that it it "
    "one two three four, one two three four. Hello, world! The quick brown fox jumps over the lazy dog."
)
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

FAMILIES = {
    "llama3": dict(
        arch="llama", hf_arch="LlamaForCausalLM", model_type="llama", layers=2, heads=4, kv_heads=2, head_dim=16,
        ffn=96, rope_base=10000.0, tied=True, ctx=256,
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                      "original_max_position_embeddings": 64},
    ),
    "linear": dict(
        arch="llama", hf_arch="LlamaForCausalLM", model_type="llama", layers=3, heads=4, kv_heads=4, head_dim=16,
        ffn=96, rope_base=10000.0, tied=False, ctx=256, rope_scaling={"type": "linear", "factor": 4.0},
        shard_bytes=60_000,
    ),
    "mistral": dict(
        arch="llama", hf_arch="MistralForCausalLM", model_type="mistral", layers=2, heads=4, kv_heads=1,
        head_dim=16, ffn=96, rope_base=1_000_000.0, tied=False, ctx=256, sliding_window=None,
    ),
    "qwen2": dict(
        arch="qwen2", hf_arch="Qwen2ForCausalLM", model_type="qwen2", layers=2, heads=4, kv_heads=2, head_dim=16,
        ffn=96, rope_base=1_000_000.0, tied=True, ctx=256, bias=True, hf_dtype="bf16",
    ),
    "qwen3": dict(
        arch="qwen3", hf_arch="Qwen3ForCausalLM", model_type="qwen3", layers=2, heads=4, kv_heads=2, head_dim=32,
        ffn=96, rope_base=1_000_000.0, tied=False, ctx=256, qk_norm=True,
    ),
}




def vocabulary():
    """(tokens, merges): byte tokens in byte order, then greedy BPE merges
    learnt on CORPUS split at spaces (a space joins the word after it)."""
    b2u = bytes_to_unicode()
    tokens = [b2u[b] for b in range(256)]
    words = []
    for i, w in enumerate(CORPUS.split(" ")):
        w = (" " if i else "") + w
        words.append([b2u[b] for b in w.encode()])
    merges = []
    while len(merges) < N_MERGES:
        pairs = Counter()
        for w in words:
            pairs.update(zip(w, w[1:]))
        (a, b), _ = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))
        merges.append((a, b))
        tokens.append(a + b)
        for w in words:
            i = 0
            while i < len(w) - 1:
                if w[i] == a and w[i + 1] == b:
                    w[i:i + 2] = [a + b]
                i += 1
    return tokens + SPECIALS, merges


def q8_exact(rng, rows, cols, scale):
    """A (rows, cols) matrix of Q8_0-exact values: per block of 32, int8s
    times 2^-k (k chosen so the block's largest is near `scale` * 2.5),
    with one entry of +-127 per block."""
    q = np.clip(np.round(rng.standard_normal((rows, cols // 32, 32)) * 42), -127, 127)
    pos = rng.integers(0, 32, size=(rows, cols // 32))
    sign = np.where(rng.integers(0, 2, size=(rows, cols // 32)) == 0, -1.0, 1.0)
    np.put_along_axis(q, pos[..., None], (127 * sign)[..., None], axis=2)
    k = np.round(np.log2(127 / (scale * 2.5)))
    return (q * 2.0 ** -k).reshape(rows, cols).astype(np.float32)


def near(rng, n, centre):
    """Multiples of 1/64 around `centre` (exact in f16 and bf16)."""
    return (centre + np.round(rng.standard_normal(n) * 8) / 64).astype(np.float32)


def llama_permute(w, n_head):
    """llama.cpp's converter reorders q/k rows of Llama checkpoints so each
    head's rotated pairs are adjacent (HF rotates halves)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def llama3_factors(c):
    """The divisor of each RoPE frequency under llama3 scaling (what
    llama.cpp's converter writes as rope_freqs.weight)."""
    rs, hd = c["rope_scaling"], c["head_dim"]
    freqs = 1.0 / (c["rope_base"] ** (np.arange(0, hd, 2, dtype=np.float32) / hd))
    lo_wl = rs["original_max_position_embeddings"] / rs["low_freq_factor"]
    hi_wl = rs["original_max_position_embeddings"] / rs["high_freq_factor"]
    out = []
    for f in freqs:
        wl = 2 * np.pi / f
        if wl < hi_wl:
            out.append(1.0)
        elif wl > lo_wl:
            out.append(rs["factor"])
        else:
            s = (rs["original_max_position_embeddings"] / wl - rs["low_freq_factor"]) / (
                rs["high_freq_factor"] - rs["low_freq_factor"])
            out.append(1.0 / ((1 - s) / rs["factor"] + s))
    return np.array(out, dtype=np.float32)


def make_weights(name, c, vocab):
    """HF-named float32 tensors (rows, cols), HF row order."""
    rng = np.random.default_rng(list(FAMILIES).index(name) + 17)
    hd, qd, kvd, ff = c["head_dim"], c["heads"] * c["head_dim"], c["kv_heads"] * c["head_dim"], c["ffn"]
    t = {"model.embed_tokens.weight": q8_exact(rng, vocab, DIM, 1.0)}
    for i in range(c["layers"]):
        p = f"model.layers.{i}."
        t[p + "input_layernorm.weight"] = near(rng, DIM, 1.0)
        t[p + "self_attn.q_proj.weight"] = q8_exact(rng, qd, DIM, 0.2)
        t[p + "self_attn.k_proj.weight"] = q8_exact(rng, kvd, DIM, 0.2)
        t[p + "self_attn.v_proj.weight"] = q8_exact(rng, kvd, DIM, 0.25)
        t[p + "self_attn.o_proj.weight"] = q8_exact(rng, DIM, qd, 0.25 / np.sqrt(qd / DIM))
        if c.get("bias"):
            t[p + "self_attn.q_proj.bias"] = near(rng, qd, 0.0) * 2
            t[p + "self_attn.k_proj.bias"] = near(rng, kvd, 0.0) * 2
            t[p + "self_attn.v_proj.bias"] = near(rng, kvd, 0.0)
        if c.get("qk_norm"):
            t[p + "self_attn.q_norm.weight"] = near(rng, hd, 1.0)
            t[p + "self_attn.k_norm.weight"] = near(rng, hd, 1.0)
        t[p + "post_attention_layernorm.weight"] = near(rng, DIM, 1.0)
        t[p + "mlp.gate_proj.weight"] = q8_exact(rng, ff, DIM, 0.2)
        t[p + "mlp.up_proj.weight"] = q8_exact(rng, ff, DIM, 0.2)
        t[p + "mlp.down_proj.weight"] = q8_exact(rng, DIM, ff, 0.2)
    t["model.norm.weight"] = near(rng, DIM, 1.0)
    if not c["tied"]:
        t["lm_head.weight"] = q8_exact(rng, vocab, DIM, 0.35)
    return t


GGUF_NAMES = {
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.q_proj.bias": "attn_q.bias",
    "self_attn.k_proj.bias": "attn_k.bias",
    "self_attn.v_proj.bias": "attn_v.bias",
    "self_attn.q_norm.weight": "attn_q_norm.weight",
    "self_attn.k_norm.weight": "attn_k_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}


def write_gguf(path, name, c, t, tokens, merges):
    arch = c["arch"]
    w = gguf.GGUFWriter(path, arch)
    w.add_name(f"draftwise-tiny-{name}")
    w.add_block_count(c["layers"])
    w.add_context_length(c["ctx"])
    w.add_embedding_length(DIM)
    w.add_feed_forward_length(c["ffn"])
    w.add_head_count(c["heads"])
    w.add_head_count_kv(c["kv_heads"])
    if c["head_dim"] * c["heads"] != DIM:
        w.add_key_length(c["head_dim"])
        w.add_value_length(c["head_dim"])
    w.add_rope_dimension_count(c["head_dim"])
    w.add_rope_freq_base(c["rope_base"])
    w.add_layer_norm_rms_eps(1e-6)
    rs = c.get("rope_scaling")
    if rs and (rs.get("type") or rs.get("rope_type")) == "linear":
        w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(rs["factor"])
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("smollm")
    w.add_token_list(tokens)
    w.add_token_types([gguf.TokenType.CONTROL if s in SPECIALS else gguf.TokenType.NORMAL for s in tokens])
    w.add_token_merges([f"{a} {b}" for a, b in merges])
    w.add_bos_token_id(tokens.index("<|endoftext|>"))
    w.add_eos_token_id(tokens.index("<|endoftext|>"))
    w.add_add_bos_token(False)

    def add(n, a):
        if a.ndim == 2:
            w.add_tensor(n, gguf.quantize(a, gguf.GGMLQuantizationType.Q8_0),
                         raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        else:
            w.add_tensor(n, a.astype(np.float32))

    add("token_embd.weight", t["model.embed_tokens.weight"])
    if rs and rs.get("rope_type") == "llama3":
        add("rope_freqs.weight", llama3_factors(c))
    for i in range(c["layers"]):
        p = f"model.layers.{i}."
        for hf, g in GGUF_NAMES.items():
            if p + hf not in t:
                continue
            a = t[p + hf]
            if arch == "llama" and hf.startswith("self_attn.q_proj"):
                a = llama_permute(a, c["heads"])
            elif arch == "llama" and hf.startswith("self_attn.k_proj"):
                a = llama_permute(a, c["kv_heads"])
            add(f"blk.{i}.{g}", a)
    add("output_norm.weight", t["model.norm.weight"])
    if "lm_head.weight" in t:
        add("output.weight", t["lm_head.weight"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def safetensors_bytes(tensors, dtype):
    """The safetensors encoding (8-byte header length, JSON header, data)."""
    header, blobs, off = {}, [], 0
    for n, a in tensors.items():
        if dtype == "bf16":
            raw = (a.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
            assert np.array_equal((raw.astype(np.uint32) << 16).view(np.float32), a), n
            st = "BF16"
        else:
            raw = a.astype(np.float16)
            assert np.array_equal(raw.astype(np.float32), a), n
            st = "F16"
        b = raw.tobytes()
        header[n] = {"dtype": st, "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + b"".join(blobs)


def write_hf(d, name, c, t, tokens, merges, vocab):
    os.makedirs(d, exist_ok=True)
    cfg = {
        "architectures": [c["hf_arch"]],
        "model_type": c["model_type"],
        "hidden_size": DIM,
        "intermediate_size": c["ffn"],
        "num_attention_heads": c["heads"],
        "num_key_value_heads": c["kv_heads"],
        "num_hidden_layers": c["layers"],
        "head_dim": c["head_dim"],
        "rms_norm_eps": 1e-6,
        "rope_theta": c["rope_base"],
        "vocab_size": vocab,
        "max_position_embeddings": c["ctx"],
        "tie_word_embeddings": c["tied"],
        "rope_scaling": c.get("rope_scaling"),
        "torch_dtype": "bfloat16" if c.get("hf_dtype") == "bf16" else "float16",
        "bos_token_id": tokens.index("<|endoftext|>"),
        "eos_token_id": tokens.index("<|endoftext|>"),
    }
    if c["model_type"] == "mistral":
        cfg["sliding_window"] = c["sliding_window"]
    if c["model_type"] in ("qwen2", "qwen3"):
        cfg.update(use_sliding_window=False, sliding_window=None, max_window_layers=c["layers"])
    if c["model_type"] in ("llama", "qwen3"):
        cfg["attention_bias"] = False
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
        f.write("\n")
    dtype = c.get("hf_dtype", "f16")
    cap = c.get("shard_bytes")
    for old in os.listdir(d):
        if old.endswith(".safetensors") or old.endswith(".index.json"):
            os.remove(os.path.join(d, old))
    if cap is None:
        with open(os.path.join(d, "model.safetensors"), "wb") as f:
            f.write(safetensors_bytes(t, dtype))
    else:
        shards, cur, size = [], {}, 0
        for n, a in t.items():
            if cur and size + a.size * 2 > cap:
                shards.append(cur)
                cur, size = {}, 0
            cur[n] = a
            size += a.size * 2
        shards.append(cur)
        weight_map = {}
        for i, s in enumerate(shards):
            fname = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
            with open(os.path.join(d, fname), "wb") as f:
                f.write(safetensors_bytes(s, dtype))
            weight_map.update({n: fname for n in s})
        total = sum(a.size * 2 for a in t.values())
        with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=1)
            f.write("\n")
    b2u = bytes_to_unicode()
    tok = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {"id": tokens.index(s), "content": s, "single_word": False, "lstrip": False, "rstrip": False,
             "normalized": False, "special": True}
            for s in SPECIALS
        ],
        "normalizer": None,
        # SmolLM's: single digits, then GPT-2's byte-level split (what the
        # GGUF's `smollm` pre-tokenizer names).
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": True},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        ]},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {
            "type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
            "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
            "vocab": {s: i for i, s in enumerate(tokens)},
            "merges": [f"{a} {b}" for a, b in merges],
        },
    }
    assert len(b2u) == 256
    with open(os.path.join(d, "tokenizer.json"), "w") as f:
        json.dump(tok, f, ensure_ascii=False)
        f.write("\n")
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": None, "eos_token": "<|endoftext|>", "add_bos_token": False}, f, indent=1)
        f.write("\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="reference/data/tiny")
    ap.add_argument("--only", nargs="*", default=list(FAMILIES))
    a = ap.parse_args()
    tokens, merges = vocabulary()
    vocab = len(tokens)
    assert vocab == 320, vocab
    os.makedirs(a.out, exist_ok=True)
    for name in a.only:
        c = FAMILIES[name]
        t = make_weights(name, c, vocab)
        write_gguf(os.path.join(a.out, f"{name}.gguf"), name, c, t, tokens, merges)
        write_hf(os.path.join(a.out, f"{name}-hf"), name, c, t, tokens, merges, vocab)
        print(f"wrote {name}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
