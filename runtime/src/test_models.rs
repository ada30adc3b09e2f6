//! Tiny random models for the unit tests, as bytes or files: a Llama as a
//! GGUF file (F32 or quantized layers) and as its Hugging Face checkpoint
//! twin, a Gemma 3 GGUF. Pure builders: nothing here loads a model, so the
//! tests of any module may use them without importing back into `model`.

use crate::gguf::Value;
use crate::gguf::test_writer::Builder;
use kernels::quant::GgmlType;
use std::path::Path;

pub(crate) const VOCAB_CHARS: &str = "abcdefghijklmnopqrstuvwxyzĠ.,!?";
pub(crate) const SPECIALS: [&str; 3] = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"];
pub(crate) const DIM: usize = 64;
pub(crate) const HEADS: usize = 4;
pub(crate) const KV_HEADS: usize = 2;
pub(crate) const HD: usize = DIM / HEADS;
pub(crate) const FFN: usize = 96;
pub(crate) const LAYERS: usize = 2;

pub(crate) fn vocab() -> Vec<String> {
    SPECIALS.iter().map(|s| s.to_string()).chain(VOCAB_CHARS.chars().map(|c| c.to_string())).collect()
}

pub(crate) struct Rng(pub(crate) u64);
impl Rng {
    pub(crate) fn f32(&mut self) -> f32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        ((self.0 >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * 0.5
    }
}

/// Weights as bf16-representable f32, HF names and (rows, cols) shapes.
pub(crate) fn weights() -> Vec<(String, Vec<usize>, Vec<f32>)> {
    let mut rng = Rng(0xDEC0DE);
    let v = vocab().len();
    let mut t = Vec::new();
    let mut add = |name: String, shape: Vec<usize>, rng: &mut Rng, norm: bool| {
        let n: usize = shape.iter().product();
        let vals = (0..n)
            .map(|_| {
                let x = if norm { 1.0 + 0.2 * rng.f32() } else { rng.f32() };
                half::bf16::from_f32(x).to_f32()
            })
            .collect();
        t.push((name, shape, vals));
    };
    add("model.embed_tokens.weight".into(), vec![v, DIM], &mut rng, false);
    for i in 0..LAYERS {
        let p = format!("model.layers.{i}");
        add(format!("{p}.input_layernorm.weight"), vec![DIM], &mut rng, true);
        add(format!("{p}.self_attn.q_proj.weight"), vec![HEADS * HD, DIM], &mut rng, false);
        add(format!("{p}.self_attn.k_proj.weight"), vec![KV_HEADS * HD, DIM], &mut rng, false);
        add(format!("{p}.self_attn.v_proj.weight"), vec![KV_HEADS * HD, DIM], &mut rng, false);
        add(format!("{p}.self_attn.o_proj.weight"), vec![DIM, HEADS * HD], &mut rng, false);
        add(format!("{p}.post_attention_layernorm.weight"), vec![DIM], &mut rng, true);
        add(format!("{p}.mlp.gate_proj.weight"), vec![FFN, DIM], &mut rng, false);
        add(format!("{p}.mlp.up_proj.weight"), vec![FFN, DIM], &mut rng, false);
        add(format!("{p}.mlp.down_proj.weight"), vec![DIM, FFN], &mut rng, false);
    }
    add("model.norm.weight".into(), vec![DIM], &mut rng, true);
    t
}

/// Writes the Hugging Face form of the tiny model into `dir`.
pub(crate) fn write_hf(dir: &Path) {
    let ws = weights();
    let bytes: Vec<Vec<u8>> =
        ws.iter().map(|(_, _, v)| v.iter().flat_map(|x| half::bf16::from_f32(*x).to_le_bytes()).collect()).collect();
    let views: Vec<(String, safetensors::tensor::TensorView)> = ws
        .iter()
        .zip(&bytes)
        .map(|((n, s, _), b)| {
            (n.clone(), safetensors::tensor::TensorView::new(safetensors::Dtype::BF16, s.clone(), b).unwrap())
        })
        .collect();
    std::fs::write(dir.join("model.safetensors"), safetensors::serialize(views, None).unwrap()).unwrap();
    let config = serde_json::json!({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": DIM, "intermediate_size": FFN, "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS, "num_hidden_layers": LAYERS, "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0, "vocab_size": vocab().len(), "max_position_embeddings": 64,
        "tie_word_embeddings": true, "torch_dtype": "bfloat16"
    });
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    let vocab_map: serde_json::Map<String, serde_json::Value> =
        vocab().into_iter().enumerate().map(|(i, t)| (t, serde_json::json!(i))).collect();
    let added: Vec<serde_json::Value> = SPECIALS
        .iter()
        .enumerate()
        .map(|(i, s)| serde_json::json!({"id": i, "content": s, "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}))
        .collect();
    std::fs::write(dir.join("tokenizer.json"), byte_level_tokenizer_json(added, vocab_map.into()).to_string()).unwrap();
    let tcfg = serde_json::json!({
        "eos_token": "<|im_end|>", "bos_token": "<|im_start|>", "add_bos_token": false,
        "chat_template": "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    });
    std::fs::write(dir.join("tokenizer_config.json"), tcfg.to_string()).unwrap();
}

/// A byte-level BPE tokenizer.json with no merges: `added` tokens over
/// `vocab` (a JSON object of token to id).
pub(crate) fn byte_level_tokenizer_json(added: Vec<serde_json::Value>, vocab: serde_json::Value) -> serde_json::Value {
    serde_json::json!({
        "version": "1.0", "truncation": null, "padding": null, "added_tokens": added,
        "normalizer": null,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
        "post_processor": null,
        "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
        "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
                  "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
                  "vocab": vocab, "merges": []}
    })
}

/// llama.cpp's converter reorders each head's Q/K output rows from
/// `rotate_half` order (pairs i, i+d/2) to adjacent pairs (2i, 2i+1).
pub(crate) fn permute_heads(w: &[f32], n_heads: usize, cols: usize) -> Vec<f32> {
    let mut out = vec![0.0; w.len()];
    for h in 0..n_heads {
        for i in 0..HD / 2 {
            for t in 0..2 {
                let src = h * HD + t * (HD / 2) + i;
                let dst = h * HD + 2 * i + t;
                out[dst * cols..(dst + 1) * cols].copy_from_slice(&w[src * cols..(src + 1) * cols]);
            }
        }
    }
    out
}

/// The GGUF form of the same model.
pub(crate) fn gguf_bytes() -> Vec<u8> {
    gguf_bytes_with(&vocab(), 64)
}

/// [`gguf_bytes`] with another token list (the embedding keeps its rows)
/// and context length.
pub(crate) fn gguf_bytes_with(tokens: &[String], context: u32) -> Vec<u8> {
    gguf_bytes_typed(tokens, context, GgmlType::F32)
}

/// Quantizes `x` (whole 32-element blocks) to the bytes of GGUF Q5_0 or
/// Q5_1 blocks, rounding to nearest (llama.cpp's reference quantizers'
/// choice of scale: Q5_0 `d = max / -16` with `max` the element of largest
/// magnitude, Q5_1 `d = (max - min) / 31`, `m = min`).
pub(crate) fn quantize_q5(ty: GgmlType, x: &[f32]) -> Vec<u8> {
    let mut out = Vec::new();
    for blk in x.chunks_exact(32) {
        let (d, m, q): (f32, f32, Vec<u32>) = if ty == GgmlType::Q5_0 {
            let max = blk.iter().fold(0.0f32, |a, &v| if v.abs() > a.abs() { v } else { a });
            let d = max / -16.0;
            let id = if d != 0.0 { 1.0 / d } else { 0.0 };
            (d, 0.0, blk.iter().map(|v| ((v * id + 16.5) as i32).clamp(0, 31) as u32).collect())
        } else {
            let (lo, hi) = blk.iter().fold((f32::MAX, f32::MIN), |(a, b), &v| (a.min(v), b.max(v)));
            let d = (hi - lo) / 31.0;
            let id = if d != 0.0 { 1.0 / d } else { 0.0 };
            (d, lo, blk.iter().map(|v| (((v - lo) * id + 0.5) as i32).clamp(0, 31) as u32).collect())
        };
        out.extend(half::f16::from_f32(d).to_bits().to_le_bytes());
        if ty == GgmlType::Q5_1 {
            out.extend(half::f16::from_f32(m).to_bits().to_le_bytes());
        }
        let qh = q.iter().enumerate().fold(0u32, |h, (j, &v)| h | (v >> 4) << j);
        out.extend(qh.to_le_bytes());
        out.extend((0..16).map(|j| (q[j] & 15) as u8 | ((q[j + 16] & 15) as u8) << 4));
    }
    out
}

/// The tiny Llama's metadata: `[dim, ffn, heads, kv_heads]`, `LAYERS`
/// blocks, `context` positions, a byte-level vocabulary of `tokens` with
/// the [`SPECIALS`] first and token 2 ending generation.
fn llama_metadata(b: &mut Builder, tokens: &[String], [dim, ffn, heads, kv_heads]: [usize; 4], context: u32) {
    let s = |x: &str| Value::String(x.to_string());
    b.kv("general.architecture", &s("llama"))
        .kv("llama.block_count", &Value::U32(LAYERS as u32))
        .kv("llama.embedding_length", &Value::U32(dim as u32))
        .kv("llama.feed_forward_length", &Value::U32(ffn as u32))
        .kv("llama.attention.head_count", &Value::U32(heads as u32))
        .kv("llama.attention.head_count_kv", &Value::U32(kv_heads as u32))
        .kv("llama.rope.freq_base", &Value::F32(10000.0))
        .kv("llama.attention.layer_norm_rms_epsilon", &Value::F32(1e-5))
        .kv("llama.context_length", &Value::U32(context))
        .kv("tokenizer.ggml.model", &s("gpt2"))
        .kv("tokenizer.ggml.pre", &s("default"))
        .kv("tokenizer.ggml.tokens", &Value::Array(tokens.iter().cloned().map(Value::String).collect()))
        .kv(
            "tokenizer.ggml.token_type",
            &Value::Array((0..tokens.len()).map(|i| Value::I32(if i < SPECIALS.len() { 3 } else { 1 })).collect()),
        )
        .kv("tokenizer.ggml.merges", &Value::Array(vec![]))
        .kv("tokenizer.ggml.eos_token_id", &Value::U32(2));
}

/// [`gguf_bytes_with`] with the layers' matrices stored as `layer_ty` (F32,
/// Q5_0, Q5_1, F16 or BF16); the embedding and the norms stay F32.
pub(crate) fn gguf_bytes_typed(tokens: &[String], context: u32, layer_ty: GgmlType) -> Vec<u8> {
    gguf_bytes_stored(tokens, context, layer_ty, false, &[], &[])
}

/// [`gguf_bytes_typed`], or with `dequantized` its F32 twin: the layers'
/// matrices quantized to `layer_ty` and stored dequantized, the weights the
/// quantized file means.
/// The tiny model's GGUF, with `extra` metadata and `extra_tensors` (f32)
/// added.
pub(crate) fn gguf_bytes_stored(
    tokens: &[String],
    context: u32,
    layer_ty: GgmlType,
    dequantized: bool,
    extra: &[(&str, Value)],
    extra_tensors: &[(&str, Vec<f32>)],
) -> Vec<u8> {
    let mut b = Builder::new();
    for (k, v) in extra {
        b.kv(k, v);
    }
    for (name, vals) in extra_tensors {
        let bytes: Vec<u8> = vals.iter().flat_map(|x| x.to_le_bytes()).collect();
        b.tensor(name, &[vals.len() as u64], GgmlType::F32, &bytes);
    }
    llama_metadata(&mut b, tokens, [DIM, FFN, HEADS, KV_HEADS], context);
    let gguf_name = |hf: &str| -> String {
        let map = [
            ("model.embed_tokens.weight", "token_embd.weight".to_string()),
            ("model.norm.weight", "output_norm.weight".to_string()),
        ];
        if let Some((_, g)) = map.iter().find(|(h, _)| *h == hf) {
            return g.clone();
        }
        let rest = hf.strip_prefix("model.layers.").unwrap();
        let (i, part) = rest.split_once('.').unwrap();
        let g = match part {
            "input_layernorm.weight" => "attn_norm",
            "self_attn.q_proj.weight" => "attn_q",
            "self_attn.k_proj.weight" => "attn_k",
            "self_attn.v_proj.weight" => "attn_v",
            "self_attn.o_proj.weight" => "attn_output",
            "post_attention_layernorm.weight" => "ffn_norm",
            "mlp.gate_proj.weight" => "ffn_gate",
            "mlp.up_proj.weight" => "ffn_up",
            "mlp.down_proj.weight" => "ffn_down",
            other => panic!("{other}"),
        };
        format!("blk.{i}.{g}.weight")
    };
    for (name, shape, vals) in weights() {
        let vals = if name.ends_with("q_proj.weight") {
            permute_heads(&vals, HEADS, DIM)
        } else if name.ends_with("k_proj.weight") {
            permute_heads(&vals, KV_HEADS, DIM)
        } else {
            vals
        };
        let dims: Vec<u64> = shape.iter().rev().map(|&d| d as u64).collect();
        let layer_matrix = name.starts_with("model.layers.") && shape.len() == 2;
        if layer_matrix && layer_ty != GgmlType::F32 {
            let q = match layer_ty {
                GgmlType::F16 => vals.iter().flat_map(|x| half::f16::from_f32(*x).to_le_bytes()).collect(),
                GgmlType::BF16 => vals.iter().flat_map(|x| half::bf16::from_f32(*x).to_le_bytes()).collect(),
                _ => quantize_q5(layer_ty, &vals),
            };
            if dequantized {
                let mut w = vec![0.0f32; vals.len()];
                kernels::quant::dequantize_row(layer_ty, &q, &mut w).unwrap();
                let bytes: Vec<u8> = w.iter().flat_map(|x| x.to_le_bytes()).collect();
                b.tensor(&gguf_name(&name), &dims, GgmlType::F32, &bytes);
            } else {
                b.tensor(&gguf_name(&name), &dims, layer_ty, &q);
            }
        } else {
            let bytes: Vec<u8> = vals.iter().flat_map(|x| x.to_le_bytes()).collect();
            b.tensor(&gguf_name(&name), &dims, GgmlType::F32, &bytes);
        }
    }
    b.build()
}

/// A tiny random Gemma 3: seven layers (five local, one global, one local),
/// a sliding window of three positions, a SentencePiece vocabulary of the
/// 256 byte tokens and a few pieces, F32 weights.
pub(crate) fn gemma3_gguf(window: u32) -> Vec<u8> {
    gemma3_gguf_with(window, 7, &[], None)
}

/// [`gemma3_gguf`] declaring `block_count` layers (seven are written), with
/// `extra` metadata, and without the key `skip`.
pub(crate) fn gemma3_gguf_with(window: u32, block_count: u32, extra: &[(&str, Value)], skip: Option<&str>) -> Vec<u8> {
    const D: usize = 32;
    const HD: usize = 16;
    const H: usize = 2;
    const FF: usize = 48;
    const L: usize = 7;
    let mut pieces: Vec<String> = ["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let mut types = vec![3i32; pieces.len()];
    for b in 0..=255u8 {
        pieces.push(format!("<0x{b:02X}>"));
        types.push(6);
    }
    for p in ["▁", "a", "b", "c", "ab", "▁a", "abc", "\n"] {
        pieces.push(p.to_string());
        types.push(if p == "\n" { 4 } else { 1 });
    }
    let scores: Vec<Value> = (0..pieces.len()).map(|i| Value::F32(-(i as f32))).collect();
    let v = pieces.len();
    let mut b = Builder::new();
    let s = |x: &str| Value::String(x.to_string());
    // Defaults, replaced by `extra` where it names the same key.
    let mut kvs: Vec<(&str, Value)> =
        vec![("gemma3.block_count", Value::U32(block_count)), ("gemma3.attention.value_length", Value::U32(HD as u32))];
    for (k, v) in extra {
        kvs.retain(|(d, _)| d != k);
        kvs.push((k, v.clone()));
    }
    for (k, v) in &kvs {
        b.kv(k, v);
    }
    b.kv("general.architecture", &s("gemma3"))
        .kv("gemma3.embedding_length", &Value::U32(D as u32))
        .kv("gemma3.feed_forward_length", &Value::U32(FF as u32))
        .kv("gemma3.attention.head_count", &Value::U32(H as u32))
        .kv("gemma3.attention.head_count_kv", &Value::U32(1))
        .kv("gemma3.attention.key_length", &Value::U32(HD as u32))
        .kv("gemma3.rope.freq_base", &Value::F32(1_000_000.0))
        .kv("gemma3.attention.layer_norm_rms_epsilon", &Value::F32(1e-6))
        .kv("gemma3.context_length", &Value::U32(64))
        .kv("tokenizer.ggml.model", &s("llama"))
        .kv("tokenizer.ggml.tokens", &Value::Array(pieces.iter().cloned().map(Value::String).collect()))
        .kv("tokenizer.ggml.scores", &Value::Array(scores))
        .kv("tokenizer.ggml.token_type", &Value::Array(types.into_iter().map(Value::I32).collect()))
        .kv("tokenizer.ggml.bos_token_id", &Value::U32(2))
        .kv("tokenizer.ggml.eos_token_id", &Value::U32(1))
        .kv("tokenizer.ggml.add_bos_token", &Value::Bool(true))
        .kv("tokenizer.ggml.add_space_prefix", &Value::Bool(false));
    if skip != Some("gemma3.attention.sliding_window") {
        b.kv("gemma3.attention.sliding_window", &Value::U32(window));
    }
    let mut rng = Rng(0x6E33A);
    let mut t = |b: &mut Builder, name: &str, rows: usize, cols: usize, norm: bool| {
        let vals: Vec<f32> = (0..rows * cols).map(|_| if norm { 1.0 + 0.3 * rng.f32() } else { rng.f32() }).collect();
        let dims: Vec<u64> = if rows == 1 { vec![cols as u64] } else { vec![cols as u64, rows as u64] };
        let bytes: Vec<u8> = vals.iter().flat_map(|x| x.to_le_bytes()).collect();
        b.tensor(name, &dims, GgmlType::F32, &bytes);
    };
    t(&mut b, "token_embd.weight", v, D, false);
    t(&mut b, "output_norm.weight", 1, D, true);
    for i in 0..L {
        let n = |s: &str| format!("blk.{i}.{s}.weight");
        t(&mut b, &n("attn_norm"), 1, D, true);
        t(&mut b, &n("attn_q"), H * HD, D, false);
        t(&mut b, &n("attn_k"), HD, D, false);
        t(&mut b, &n("attn_v"), HD, D, false);
        t(&mut b, &n("attn_q_norm"), 1, HD, true);
        t(&mut b, &n("attn_k_norm"), 1, HD, true);
        t(&mut b, &n("attn_output"), D, H * HD, false);
        t(&mut b, &n("post_attention_norm"), 1, D, true);
        t(&mut b, &n("ffn_norm"), 1, D, true);
        t(&mut b, &n("ffn_gate"), FF, D, false);
        t(&mut b, &n("ffn_up"), FF, D, false);
        t(&mut b, &n("ffn_down"), D, FF, false);
        t(&mut b, &n("post_ffw_norm"), 1, D, true);
    }
    b.build()
}

/// A tiny Llama whose every matrix (the embedding too, so its rows are
/// gathered through dequantization) is Q2_K or Q3_K: dimensions of one
/// 256-element super-block, random quant and scale bytes under small f16
/// scales; with `dequantized` the same weights stored as F32.
pub(crate) fn k16_gguf(ty: GgmlType, dequantized: bool) -> Vec<u8> {
    const D: usize = 256;
    const H: usize = 4;
    const KV: usize = 2;
    const HDK: usize = D / H;
    const FF: usize = 256;
    let tokens = vocab();
    let mut b = Builder::new();
    llama_metadata(&mut b, &tokens, [D, FF, H, KV], 64);
    let mut rng = Rng(0x0023_0023);
    let mut byte = move || (rng.f32().to_bits() >> 3) as u8;
    let mut matrix = |b: &mut Builder, name: &str, rows: usize, cols: usize| {
        let bb = ty.block_bytes();
        let mut raw: Vec<u8> = (0..rows * ty.row_bytes(cols).unwrap()).map(|_| byte()).collect();
        for blk in raw.chunks_exact_mut(bb) {
            // d (and Q2_K's dmin) around 2e-3: weights of a few tenths.
            let d = half::f16::from_f32(0.0015 + 0.001 * (blk[1] as f32 / 255.0)).to_le_bytes();
            if ty == GgmlType::Q2K {
                blk[80..82].copy_from_slice(&d);
                blk[82..84].copy_from_slice(&half::f16::from_f32(0.003).to_le_bytes());
            } else {
                blk[108..110].copy_from_slice(&d);
            }
        }
        let dims = [cols as u64, rows as u64];
        if dequantized {
            let mut w = vec![0.0f32; rows * cols];
            kernels::quant::dequantize_row(ty, &raw, &mut w).unwrap();
            b.tensor(name, &dims, GgmlType::F32, &w.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>());
        } else {
            b.tensor(name, &dims, ty, &raw);
        }
    };
    let norm = |b: &mut Builder, name: &str| {
        let ones: Vec<u8> = (0..D).flat_map(|i| (1.0f32 + 0.01 * (i % 7) as f32).to_le_bytes()).collect();
        b.tensor(name, &[D as u64], GgmlType::F32, &ones);
    };
    matrix(&mut b, "token_embd.weight", tokens.len(), D);
    norm(&mut b, "output_norm.weight");
    for i in 0..LAYERS {
        let n = |s: &str| format!("blk.{i}.{s}.weight");
        norm(&mut b, &n("attn_norm"));
        matrix(&mut b, &n("attn_q"), H * HDK, D);
        matrix(&mut b, &n("attn_k"), KV * HDK, D);
        matrix(&mut b, &n("attn_v"), KV * HDK, D);
        matrix(&mut b, &n("attn_output"), D, H * HDK);
        norm(&mut b, &n("ffn_norm"));
        matrix(&mut b, &n("ffn_gate"), FF, D);
        matrix(&mut b, &n("ffn_up"), FF, D);
        matrix(&mut b, &n("ffn_down"), D, FF);
    }
    b.build()
}
