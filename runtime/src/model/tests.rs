//! One tiny random Llama written twice — as a Hugging Face checkpoint
//! (bf16 safetensors, `rotate_half` Q/K layout) and as a GGUF file (F32, Q/K
//! rows permuted into adjacent RoPE pairs the way llama.cpp's converter
//! does) — must give the same logits through both loaders.

use super::llama::LogitRows;
use super::{Loaded, Session, load};
use crate::gguf::Value;
use crate::gguf::test_writer::Builder;
use kernels::dispatch::KernelFamily;
use kernels::quant::GgmlType;
use std::path::Path;

const VOCAB_CHARS: &str = "abcdefghijklmnopqrstuvwxyzĠ.,!?";
const SPECIALS: [&str; 3] = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"];
const DIM: usize = 64;
const HEADS: usize = 4;
const KV_HEADS: usize = 2;
const HD: usize = DIM / HEADS;
const FFN: usize = 96;
const LAYERS: usize = 2;

fn vocab() -> Vec<String> {
    SPECIALS.iter().map(|s| s.to_string()).chain(VOCAB_CHARS.chars().map(|c| c.to_string())).collect()
}

struct Rng(u64);
impl Rng {
    fn f32(&mut self) -> f32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        ((self.0 >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * 0.5
    }
}

/// Weights as bf16-representable f32, HF names and (rows, cols) shapes.
fn weights() -> Vec<(String, Vec<usize>, Vec<f32>)> {
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
    let tokenizer = serde_json::json!({
        "version": "1.0", "truncation": null, "padding": null, "added_tokens": added,
        "normalizer": null,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
        "post_processor": null,
        "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
        "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
                  "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
                  "vocab": vocab_map, "merges": []}
    });
    std::fs::write(dir.join("tokenizer.json"), tokenizer.to_string()).unwrap();
    let tcfg = serde_json::json!({
        "eos_token": "<|im_end|>", "bos_token": "<|im_start|>", "add_bos_token": false,
        "chat_template": "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    });
    std::fs::write(dir.join("tokenizer_config.json"), tcfg.to_string()).unwrap();
}

/// llama.cpp's converter reorders each head's Q/K output rows from
/// `rotate_half` order (pairs i, i+d/2) to adjacent pairs (2i, 2i+1).
fn permute_heads(w: &[f32], n_heads: usize, cols: usize) -> Vec<f32> {
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
fn gguf_bytes_with(tokens: &[String], context: u32) -> Vec<u8> {
    gguf_bytes_typed(tokens, context, GgmlType::F32)
}

/// Quantizes `x` (whole 32-element blocks) to the bytes of GGUF Q5_0 or
/// Q5_1 blocks, rounding to nearest (llama.cpp's reference quantizers'
/// choice of scale: Q5_0 `d = max / -16` with `max` the element of largest
/// magnitude, Q5_1 `d = (max - min) / 31`, `m = min`).
fn quantize_q5(ty: GgmlType, x: &[f32]) -> Vec<u8> {
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

/// [`gguf_bytes_with`] with the layers' matrices stored as `layer_ty` (F32,
/// Q5_0, Q5_1, F16 or BF16); the embedding and the norms stay F32.
fn gguf_bytes_typed(tokens: &[String], context: u32, layer_ty: GgmlType) -> Vec<u8> {
    gguf_bytes_stored(tokens, context, layer_ty, false, &[], &[])
}

/// [`gguf_bytes_typed`], or with `dequantized` its F32 twin: the layers'
/// matrices quantized to `layer_ty` and stored dequantized, the weights the
/// quantized file means.
/// The tiny model's GGUF, with `extra` metadata and `extra_tensors` (f32)
/// added.
fn gguf_bytes_stored(
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
    let s = |x: &str| Value::String(x.to_string());
    b.kv("general.architecture", &s("llama"))
        .kv("llama.block_count", &Value::U32(LAYERS as u32))
        .kv("llama.embedding_length", &Value::U32(DIM as u32))
        .kv("llama.feed_forward_length", &Value::U32(FFN as u32))
        .kv("llama.attention.head_count", &Value::U32(HEADS as u32))
        .kv("llama.attention.head_count_kv", &Value::U32(KV_HEADS as u32))
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

fn logits(l: &Loaded, ids: &[u32]) -> Vec<f32> {
    let mut s = Session::new(&l.model.config);
    l.model.forward(KernelFamily::best(), &mut s, ids, LogitRows::All).unwrap()
}

#[test]
fn hf_checkpoint_and_its_gguf_conversion_give_the_same_logits() {
    let dir = tempfile::tempdir().unwrap();
    write_hf(dir.path());
    let gguf = dir.path().join("tiny.gguf");
    std::fs::write(&gguf, gguf_bytes()).unwrap();
    let hf = load(dir.path()).unwrap();
    let gg = load(&gguf).unwrap();
    assert_eq!(hf.info.quant.class, "bf16");
    assert_eq!(gg.info.quant.class, "f32");
    let text = "hello world, again!";
    let ids = hf.tokenizer.encode(text).unwrap();
    assert_eq!(ids, gg.tokenizer.encode(text).unwrap(), "both tokenizers agree");
    assert_eq!(hf.tokenizer.decode(&ids).unwrap(), text);
    let (a, b) = (logits(&hf, &ids), logits(&gg, &ids));
    let max_abs = a.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    for (i, (x, y)) in a.iter().zip(&b).enumerate() {
        assert!((x - y).abs() <= 1e-4 * max_abs.max(1.0), "logit {i}: hf {x} vs gguf {y}");
    }
}

#[test]
fn the_rope_pairing_matters_so_the_equivalence_test_can_fail() {
    let dir = tempfile::tempdir().unwrap();
    write_hf(dir.path());
    let mut hf = load(dir.path()).unwrap();
    let ids = hf.tokenizer.encode("abcdefgh").unwrap();
    let a = logits(&hf, &ids);
    hf.model.config.rope_pairing = kernels::ops::RopePairing::Adjacent;
    let b = logits(&hf, &ids);
    let diff = a.iter().zip(&b).fold(0.0f32, |m, (x, y)| m.max((x - y).abs()));
    assert!(diff > 1e-3, "pairing changed nothing (max diff {diff})");
}

#[test]
fn chat_template_from_tokenizer_config_renders_and_encodes_specials() {
    let dir = tempfile::tempdir().unwrap();
    write_hf(dir.path());
    let hf = load(dir.path()).unwrap();
    let msgs = [crate::tokenizer::chat::Message { role: "user".into(), content: "hi".into() }];
    let text = hf.tokenizer.render_chat(&msgs, true).unwrap();
    assert_eq!(text, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
    let ids = hf.tokenizer.encode(&text).unwrap();
    assert_eq!(ids[0], 1);
    assert!(hf.tokenizer.is_end_of_generation(2));
}

#[test]
fn block_forward_equals_the_one_token_chain_bit_for_bit() {
    let gg = {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("tiny.gguf");
        std::fs::write(&p, gguf_bytes()).unwrap();
        load(&p).unwrap()
    };
    let ids = gg.tokenizer.encode("the quick brown fox").unwrap();
    for fam in KernelFamily::all_supported() {
        let mut s = Session::new(&gg.model.config);
        let block = gg.model.forward(fam, &mut s, &ids, LogitRows::All).unwrap();
        let mut s2 = Session::new(&gg.model.config);
        let v = gg.model.config.vocab;
        for (i, &t) in ids.iter().enumerate() {
            let one = gg.model.forward(fam, &mut s2, &[t], LogitRows::Last).unwrap();
            let want: Vec<u32> = block[i * v..(i + 1) * v].iter().map(|f| f.to_bits()).collect();
            assert_eq!(one.iter().map(|f| f.to_bits()).collect::<Vec<_>>(), want, "{fam:?} row {i}");
        }
    }
}

/// Attention chunks cover every (row, query head) pair of a pass exactly
/// once, each call within one (block, KV head) group, and the runs of a
/// decode step are balanced to one pair.
#[test]
fn attention_chunks_cover_every_pair_once() {
    use super::llama::AttendPlan;
    for n in [1usize, 2, 4, 5, 15, 16, 17, 40, 300] {
        for (n_kv, group) in [(1usize, 1usize), (1, 4), (3, 3), (5, 3), (2, 8)] {
            for threads in 1..=5 {
                let plan = AttendPlan::new(n, n_kv, group, threads);
                let mut seen = vec![0u8; n * n_kv * group];
                let mut sizes = Vec::new();
                for j in 0..plan.chunks() {
                    let mut size = 0;
                    for call in plan.calls(j) {
                        for (i, h) in call.pairs() {
                            assert!(i < n && h / group == call.kv_head, "pair ({i}, {h}) outside its call");
                            seen[i * n_kv * group + h] += 1;
                            size += 1;
                        }
                    }
                    sizes.push(size);
                }
                assert!(seen.iter().all(|&c| c == 1), "n {n}, {n_kv}x{group} heads, {threads} threads: {seen:?}");
                if plan.chunks() <= threads {
                    let (lo, hi) = (sizes.iter().min().unwrap(), sizes.iter().max().unwrap());
                    assert!(hi - lo <= 1, "unbalanced runs {sizes:?}");
                }
            }
        }
    }
}

/// A verify block equals the one-token chain at every width 1..=16 after a
/// short and after a long cache (positions across many key tiles, a tile
/// boundary inside the block and at its edges), for every kernel family, on
/// one, two and three threads (two and three cut the pair list into runs
/// that split KV heads between attention calls, `AttendPlan`).
#[test]
fn block_equals_chain_at_widths_1_to_16_over_short_and_long_caches_and_thread_counts() {
    let gg = {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("tiny-long.gguf");
        std::fs::write(&p, gguf_bytes_with(&vocab(), 512)).unwrap();
        load(&p).unwrap()
    };
    let v = gg.model.config.vocab;
    let ids: Vec<u32> = (0..300u32).map(|i| 3 + (i * 7 + i * i / 5) % (v as u32 - 3)).collect();
    for threads in [1, 2, 3] {
        let pool = crate::pool::Pool::new(threads).unwrap();
        pool.install(|| {
            for fam in KernelFamily::all_supported() {
                let mut chain = Vec::new();
                let mut s = Session::new(&gg.model.config);
                for &t in &ids {
                    chain.extend(gg.model.forward(fam, &mut s, &[t], LogitRows::Last).unwrap());
                }
                for start in [3usize, 15, 16, 241, 270] {
                    let mut s = Session::new(&gg.model.config);
                    gg.model.forward(fam, &mut s, &ids[..start], LogitRows::Last).unwrap();
                    for w in 1..=16 {
                        let block = gg.model.forward(fam, &mut s, &ids[start..start + w], LogitRows::All).unwrap();
                        let want = &chain[start * v..(start + w) * v];
                        assert!(
                            block.iter().zip(want).all(|(a, b)| a.to_bits() == b.to_bits()),
                            "{fam:?}, {threads} threads, width {w} after {start}"
                        );
                        s.truncate(start);
                    }
                }
            }
        });
    }
}

/// The tiny model with Q5_0 or Q5_1 layer matrices (repacked at load into
/// the row-interleaved layout): classified by its tensors, every kernel
/// family gives the scalar family's logits bit for bit, a block forward
/// equals the one-token chain, and the logits are those of its F32 twin
/// (the same weights dequantized) up to the 16-bit activations' error.
#[test]
fn q5_layer_matrices_give_the_same_logits_in_every_family_and_their_f32_twins() {
    let dir = tempfile::tempdir().unwrap();
    let load_bytes = |name: &str, bytes: Vec<u8>| {
        let p = dir.path().join(name);
        std::fs::write(&p, bytes).unwrap();
        load(&p).unwrap()
    };
    for ty in [GgmlType::Q5_0, GgmlType::Q5_1] {
        let class = ty.name().to_ascii_lowercase();
        let twin = load_bytes(&format!("{class}-f32.gguf"), gguf_bytes_stored(&vocab(), 64, ty, true, &[], &[]));
        let ids = twin.tokenizer.encode("the quick brown fox").unwrap();
        let exact = logits(&twin, &ids);
        let max_abs = exact.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let q = load_bytes(&format!("{class}.gguf"), gguf_bytes_typed(&vocab(), 64, ty));
        assert_eq!(q.info.quant.class, class);
        assert_eq!(q.info.weight_formats, vec!["f32".to_string(), class.clone()]);
        let v = q.model.config.vocab;
        let forward = |fam: KernelFamily, ids: &[u32], rows: LogitRows| {
            let mut s = Session::new(&q.model.config);
            q.model.forward(fam, &mut s, ids, rows).unwrap()
        };
        let want = forward(KernelFamily::Scalar, &ids, LogitRows::All);
        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        for fam in KernelFamily::all_supported() {
            let block = forward(fam, &ids, LogitRows::All);
            assert_eq!(bits(&block), bits(&want), "{ty:?} {fam:?}");
            let mut s = Session::new(&q.model.config);
            for (i, &t) in ids.iter().enumerate() {
                let one = q.model.forward(fam, &mut s, &[t], LogitRows::Last).unwrap();
                assert_eq!(bits(&one), bits(&block[i * v..(i + 1) * v]), "{ty:?} {fam:?} row {i}");
            }
        }
        // Measured: 6.3e-4 (Q5_0) and 2.9e-4 (Q5_1) of the largest logit; the
        // same model's layers in Q8_0 against their twin give 4.2e-4.
        let diff = want.iter().zip(&exact).fold(0.0f32, |m, (a, b)| m.max((a - b).abs()));
        assert!(diff <= 2e-3 * max_abs, "{ty:?}: max |q5 - f32 twin| {diff} of max |logit| {max_abs}");
    }
}

#[test]
fn truncating_the_session_then_rerunning_reproduces_the_logits() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("tiny.gguf");
    std::fs::write(&p, gguf_bytes()).unwrap();
    let gg = load(&p).unwrap();
    let ids = gg.tokenizer.encode("rollback test").unwrap();
    let fam = KernelFamily::best();
    let mut s = Session::new(&gg.model.config);
    let first = gg.model.forward(fam, &mut s, &ids, LogitRows::All).unwrap();
    s.truncate(3);
    let again = gg.model.forward(fam, &mut s, &ids[3..], LogitRows::All).unwrap();
    let v = gg.model.config.vocab;
    assert_eq!(first[3 * v..], again[..]);
}

#[test]
fn forward_refuses_out_of_vocabulary_ids_and_a_full_context_without_touching_the_cache() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("tiny.gguf");
    std::fs::write(&p, gguf_bytes()).unwrap();
    let gg = load(&p).unwrap();
    let mut s = Session::new(&gg.model.config);
    let fam = KernelFamily::best();
    assert!(gg.model.forward(fam, &mut s, &[9999], LogitRows::Last).is_err());
    assert_eq!(s.len(), 0);
    let long = vec![5u32; 65];
    assert!(matches!(
        gg.model.forward(fam, &mut s, &long, LogitRows::Last),
        Err(super::llama::ForwardError::ContextFull { .. })
    ));
    assert_eq!(s.len(), 0);
}

#[test]
fn random_accept_and_reject_patterns_leave_the_cache_as_a_classic_run_leaves_it() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("tiny.gguf");
    std::fs::write(&p, gguf_bytes()).unwrap();
    let gg = load(&p).unwrap();
    let fam = KernelFamily::best();
    let seq = gg.tokenizer.encode("speculative decoding must roll back exactly, every time!").unwrap();
    let mut classic = Session::new(&gg.model.config);
    for &t in &seq {
        gg.model.forward(fam, &mut classic, &[t], LogitRows::Last).unwrap();
    }
    let mut rng = Rng(0x5EED);
    for trial in 0..20 {
        let mut s = Session::new(&gg.model.config);
        let mut pos = 0;
        while pos < seq.len() {
            // A block: the true next token, then a draft whose first `k`
            // tokens are right and the rest wrong; keep 1 + k of it.
            let width = 1 + (rng.f32().abs() * 6.0) as usize;
            let k = ((rng.f32().abs() * (width + 1) as f32) as usize).min(width);
            let mut block = vec![seq[pos]];
            for i in 0..width {
                let right = seq.get(pos + 1 + i).copied();
                block.push(match right {
                    Some(t) if i < k => t,
                    _ => (seq[pos] + 1 + i as u32) % gg.model.config.vocab as u32,
                });
            }
            let keep = (1 + k).min(seq.len() - pos);
            gg.model.forward(fam, &mut s, &block, LogitRows::All).unwrap();
            s.truncate(pos + keep);
            pos += keep;
        }
        assert_eq!(s, classic, "trial {trial}");
    }
}

#[test]
fn a_tokenizer_with_fewer_tokens_than_the_embedding_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("short-vocab.gguf");
    let tokens = vocab();
    std::fs::write(&p, gguf_bytes_with(&tokens[..tokens.len() - 2], 64)).unwrap();
    let loaded = load(&p).expect("the file itself is readable");
    let e = crate::generate::Engine::new(loaded, KernelFamily::Scalar, 1).err().expect("refused");
    let m = e.to_string();
    assert!(m.contains(&format!("{} tokens but the embedding has {} rows", tokens.len() - 2, tokens.len())), "{m}");
    // The same model with every token is accepted.
    std::fs::write(&p, gguf_bytes_with(&tokens, 64)).unwrap();
    assert!(crate::generate::Engine::new(load(&p).unwrap(), KernelFamily::Scalar, 1).is_ok());
}

#[test]
fn a_context_too_short_for_the_probe_declines_instead_of_failing() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("short-context.gguf");
    std::fs::write(&p, gguf_bytes_with(&vocab(), 6)).unwrap();
    let l = load(&p).unwrap();
    let fam = KernelFamily::best();
    // Width 8 needs 10 positions: nothing can be compared.
    let r = crate::spec::probe::block_vs_chain(&l.model, fam, 1, &[5, 6, 7], 8).expect("no error");
    assert!(!r.passed && r.compared_bytes == 0, "{r:?}");
    // Width 3 fits (a shorter prefix) and passes.
    let r = crate::spec::probe::block_vs_chain(&l.model, fam, 1, &[5, 6, 7], 3).expect("no error");
    assert!(r.passed && r.compared_bytes > 0, "{r:?}");
    // Through the setup, the drafter is declined with the reason.
    let engine = crate::generate::Engine::new(l, fam, 1).unwrap();
    let args = crate::spec::setup::SpecSettings {
        drafter: Some("ngram".into()),
        draft_block_size: Some("8".into()),
        ..Default::default()
    };
    let d = crate::spec::setup::Speculation::from_settings(&args, &engine).unwrap();
    let s = d.speculation.expect("a drafter");
    assert!(s.declined_reason().is_some(), "{:?}", s.probe);
    assert_eq!(s.active_width(), None);
}

/// A tiny random Gemma 3: seven layers (five local, one global, one local),
/// a sliding window of three positions, a SentencePiece vocabulary of the
/// 256 byte tokens and a few pieces, F32 weights.
fn gemma3_gguf(window: u32) -> Vec<u8> {
    gemma3_gguf_with(window, 7, &[], None)
}

/// [`gemma3_gguf`] declaring `block_count` layers (seven are written), with
/// `extra` metadata, and without the key `skip`.
fn gemma3_gguf_with(window: u32, block_count: u32, extra: &[(&str, Value)], skip: Option<&str>) -> Vec<u8> {
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

fn load_bytes(bytes: &[u8]) -> Loaded {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("tiny-gemma3.gguf");
    std::fs::write(&p, bytes).unwrap();
    load(&p).unwrap()
}

#[test]
fn gemma3_block_forward_equals_the_chain_across_the_window_at_every_width() {
    let g = load_bytes(&gemma3_gguf(3));
    assert_eq!(g.info.architecture, "gemma3");
    assert_eq!(g.tokenizer.chat_template_from, crate::tokenizer::chat::TemplateSource::Builtin("gemma"));
    let ids: Vec<u32> = (0..14).map(|i| 262 + (i * 5 % 8) as u32).collect();
    let v = g.model.config.vocab;
    for fam in KernelFamily::all_supported() {
        let mut chain = Vec::new();
        let mut s = Session::new(&g.model.config);
        for &t in &ids {
            chain.extend(g.model.forward(fam, &mut s, &[t], LogitRows::Last).unwrap());
        }
        // Every split of the sequence into a prefix and a block of width w.
        for w in 1..=8 {
            for start in 0..ids.len() - w {
                let mut s = Session::new(&g.model.config);
                if start > 0 {
                    g.model.forward(fam, &mut s, &ids[..start], LogitRows::Last).unwrap();
                }
                let block = g.model.forward(fam, &mut s, &ids[start..start + w], LogitRows::All).unwrap();
                let want = &chain[start * v..(start + w) * v];
                assert!(
                    block.iter().zip(want).all(|(a, b)| a.to_bits() == b.to_bits()),
                    "{fam:?} width {w} from {start}"
                );
            }
        }
    }
}

#[test]
fn gemma3_the_window_and_the_norms_change_the_output_so_the_tests_can_fail() {
    let ids: Vec<u32> = (0..10).map(|i| 262 + (i * 3 % 8) as u32).collect();
    let narrow = logits(&load_bytes(&gemma3_gguf(3)), &ids);
    let wide = logits(&load_bytes(&gemma3_gguf(64)), &ids);
    let v = narrow.len() / ids.len();
    // Rows that see no more than the window agree; later ones do not.
    assert_eq!(narrow[..3 * v], wide[..3 * v]);
    assert_ne!(narrow[4 * v..], wide[4 * v..]);
}

#[test]
fn gemma3_sentencepiece_and_the_builtin_turns_encode_a_chat() {
    let g = load_bytes(&gemma3_gguf(3));
    let tok = &g.tokenizer;
    let ab = tok.encode("ab").unwrap();
    assert_eq!(tok.id_to_token(ab[0]).as_deref(), Some("ab"));
    assert_eq!(tok.encode_prompt("a").unwrap()[0], 2, "BOS first");
    let msgs = vec![
        crate::tokenizer::chat::Message { role: "system".into(), content: " be brief ".into() },
        crate::tokenizer::chat::Message { role: "user".into(), content: "abc<end_of_turn>".into() },
    ];
    assert_eq!(
        tok.render_chat(&msgs, true).unwrap(),
        "<start_of_turn>user\nbe brief\n\nabc<end_of_turn><end_of_turn>\n<start_of_turn>model\n"
    );
    // The user's "<end_of_turn>" is text, the template's is the control token.
    let ids = tok.encode_chat(&msgs, usize::MAX).unwrap();
    assert_eq!(ids.iter().filter(|&&i| i == 5).count(), 1, "{ids:?}");
    assert_eq!(ids.iter().filter(|&&i| i == 4).count(), 2, "{ids:?}");
}

fn load_error(bytes: &[u8]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("bad-gemma3.gguf");
    std::fs::write(&p, bytes).unwrap();
    match load(&p) {
        Ok(_) => panic!("loaded"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn gemma3_features_this_runtime_does_not_run_are_refused_by_name() {
    let e = load_error(&gemma3_gguf_with(3, 7, &[("gemma3.rope.scaling.type", Value::String("linear".into()))], None));
    assert!(e.contains("RoPE scaling") && e.contains("linear"), "{e}");
    let e = load_error(&gemma3_gguf_with(3, 7, &[("gemma3.attention.value_length", Value::U32(8))], None));
    assert!(e.contains("value_length = 8"), "{e}");
    let e = load_error(&gemma3_gguf_with(3, 62, &[], None));
    assert!(e.contains("27B"), "{e}");
    let e = load_error(&gemma3_gguf_with(3, 7, &[], Some("gemma3.attention.sliding_window")));
    assert!(e.contains("gemma3.attention.sliding_window"), "{e}");
    // `rope.scaling.type = none` is no scaling.
    let ok = gemma3_gguf_with(3, 7, &[("gemma3.rope.scaling.type", Value::String("none".into()))], None);
    load_bytes(&ok);
}

#[test]
fn gemma3_on_a_cuda_device_is_refused_and_auto_placement_keeps_the_cpu() {
    use crate::device::{DeviceError, DeviceRequest, place};
    let mut g = load_bytes(&gemma3_gguf(3));
    match place(&mut g, DeviceRequest::Cuda(0)) {
        Err(e @ DeviceError::CpuOnlyArchitecture { .. }) => assert!(e.to_string().contains("gemma3"), "{e}"),
        other => panic!("expected the CPU-only refusal, got {:?}", other.map(|r| r.is_some())),
    }
    assert!(place(&mut g, DeviceRequest::Auto).unwrap().is_none());
}

/// The tiny model with F16 or BF16 layer matrices: they stay 16-bit
/// (their formats are reported), every family gives the scalar logits bit
/// for bit, a block forward equals the one-token chain, and the logits
/// equal those of the F32 file of the same (16-bit representable) weights
/// bit for bit: the 16-bit kernels are the f32 kernel over exactly widened
/// weights.
#[test]
fn f16_and_bf16_layer_matrices_give_their_f32_twins_logits_bit_for_bit_in_every_family() {
    let dir = tempfile::tempdir().unwrap();
    let load_bytes = |name: &str, bytes: Vec<u8>| {
        let p = dir.path().join(name);
        std::fs::write(&p, bytes).unwrap();
        load(&p).unwrap()
    };
    let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
    for ty in [GgmlType::F16, GgmlType::BF16] {
        let class = ty.name().to_ascii_lowercase();
        let m = load_bytes(&format!("{class}.gguf"), gguf_bytes_typed(&vocab(), 64, ty));
        let twin = load_bytes(&format!("{class}-f32.gguf"), gguf_bytes_stored(&vocab(), 64, ty, true, &[], &[]));
        assert_eq!(m.info.quant.class, class);
        assert_eq!(m.info.weight_formats, vec![class.clone(), "f32".to_string()]);
        let ids = m.tokenizer.encode("the quick brown fox").unwrap();
        let v = m.model.config.vocab;
        for fam in KernelFamily::all_supported() {
            let mut s = Session::new(&m.model.config);
            let block = m.model.forward(fam, &mut s, &ids, LogitRows::All).unwrap();
            let mut s = Session::new(&twin.model.config);
            let want = twin.model.forward(fam, &mut s, &ids, LogitRows::All).unwrap();
            assert_eq!(bits(&block), bits(&want), "{ty:?} {fam:?} against the f32 twin");
            let mut s = Session::new(&m.model.config);
            for (i, &t) in ids.iter().enumerate() {
                let one = m.model.forward(fam, &mut s, &[t], LogitRows::Last).unwrap();
                assert_eq!(bits(&one), bits(&block[i * v..(i + 1) * v]), "{ty:?} {fam:?} row {i}");
            }
        }
    }
}

/// A Hugging Face bf16 checkpoint's matrices stay bf16 in memory (the
/// embedding, tied head and layers), not f32.
#[test]
fn hf_bf16_matrices_are_kept_in_16_bits() {
    let dir = tempfile::tempdir().unwrap();
    write_hf(dir.path());
    let hf = load(dir.path()).unwrap();
    assert_eq!(hf.info.weight_formats, vec!["bf16".to_string()]);
}

/// A tiny Llama whose every matrix (the embedding too, so its rows are
/// gathered through dequantization) is Q2_K or Q3_K: dimensions of one
/// 256-element super-block, random quant and scale bytes under small f16
/// scales; with `dequantized` the same weights stored as F32.
fn k16_gguf(ty: GgmlType, dequantized: bool) -> Vec<u8> {
    const D: usize = 256;
    const H: usize = 4;
    const KV: usize = 2;
    const HDK: usize = D / H;
    const FF: usize = 256;
    let tokens = vocab();
    let mut b = Builder::new();
    let s = |x: &str| Value::String(x.to_string());
    b.kv("general.architecture", &s("llama"))
        .kv("llama.block_count", &Value::U32(LAYERS as u32))
        .kv("llama.embedding_length", &Value::U32(D as u32))
        .kv("llama.feed_forward_length", &Value::U32(FF as u32))
        .kv("llama.attention.head_count", &Value::U32(H as u32))
        .kv("llama.attention.head_count_kv", &Value::U32(KV as u32))
        .kv("llama.rope.freq_base", &Value::F32(10000.0))
        .kv("llama.attention.layer_norm_rms_epsilon", &Value::F32(1e-5))
        .kv("llama.context_length", &Value::U32(64))
        .kv("tokenizer.ggml.model", &s("gpt2"))
        .kv("tokenizer.ggml.pre", &s("default"))
        .kv("tokenizer.ggml.tokens", &Value::Array(tokens.iter().cloned().map(Value::String).collect()))
        .kv(
            "tokenizer.ggml.token_type",
            &Value::Array((0..tokens.len()).map(|i| Value::I32(if i < SPECIALS.len() { 3 } else { 1 })).collect()),
        )
        .kv("tokenizer.ggml.merges", &Value::Array(vec![]))
        .kv("tokenizer.ggml.eos_token_id", &Value::U32(2));
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

/// The Q2_K / Q3_K tiny Llama loads with its class and formats, generates
/// greedily, every family gives the scalar logits bit for bit, a block
/// forward equals the one-token chain at every width 1..=16, and its logits
/// are its F32 twin's up to the 16-bit activations' error.
#[test]
fn q2_k_and_q3_k_models_load_generate_and_keep_block_equal_to_chain() {
    let dir = tempfile::tempdir().unwrap();
    let load_bytes = |name: &str, bytes: Vec<u8>| {
        let p = dir.path().join(name);
        std::fs::write(&p, bytes).unwrap();
        load(&p).unwrap()
    };
    let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
    for ty in [GgmlType::Q2K, GgmlType::Q3K] {
        let class = ty.name().to_ascii_lowercase();
        let m = load_bytes(&format!("{class}.gguf"), k16_gguf(ty, false));
        let twin = load_bytes(&format!("{class}-f32.gguf"), k16_gguf(ty, true));
        assert_eq!(m.info.quant.class, class);
        assert_eq!(m.info.weight_formats, vec![class.clone()]);
        let v = m.model.config.vocab;
        // Greedy generation: sixteen tokens after a prompt.
        let mut ids = m.tokenizer.encode("hello").unwrap();
        let mut s = Session::new(&m.model.config);
        let mut logits = m.model.forward(KernelFamily::best(), &mut s, &ids, LogitRows::Last).unwrap();
        for _ in 0..16 {
            assert!(logits.iter().all(|x| x.is_finite()), "{ty:?}");
            let next = (0..v).max_by(|&a, &b| logits[a].total_cmp(&logits[b])).unwrap() as u32;
            ids.push(next);
            logits = m.model.forward(KernelFamily::best(), &mut s, &[next], LogitRows::Last).unwrap();
        }
        let n = ids.len();
        let want = {
            let mut s = Session::new(&m.model.config);
            m.model.forward(KernelFamily::Scalar, &mut s, &ids, LogitRows::All).unwrap()
        };
        for fam in KernelFamily::all_supported() {
            // Blocks of every width 1..=16 after a one-token prefix.
            for w in 1..=16.min(n - 1) {
                let mut s = Session::new(&m.model.config);
                let mut got = m.model.forward(fam, &mut s, &ids[..1], LogitRows::All).unwrap();
                let mut at = 1;
                while at < n {
                    let end = (at + w).min(n);
                    got.extend(m.model.forward(fam, &mut s, &ids[at..end], LogitRows::All).unwrap());
                    at = end;
                }
                assert_eq!(bits(&got), bits(&want), "{ty:?} {fam:?} width {w}");
            }
        }
        let exact = {
            let mut s = Session::new(&twin.model.config);
            twin.model.forward(KernelFamily::best(), &mut s, &ids, LogitRows::All).unwrap()
        };
        let max_abs = exact.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let diff = want.iter().zip(&exact).fold(0.0f32, |m, (a, b)| m.max((a - b).abs()));
        // Measured: 1.1e-4 (Q2_K) and 5.8e-4 (Q3_K) of the largest logit.
        assert!(diff <= 2e-3 * max_abs, "{ty:?}: max |quantized - f32 twin| {diff} of max |logit| {max_abs}");
    }
}

/// Greedy speculative decoding (the n-gram drafter at widths 1..16) emits
/// exactly the classic tokens on the F16, BF16, Q2_K and Q3_K tiny models,
/// at one and two threads.
#[test]
fn speculative_output_equals_classic_on_the_new_weight_types_at_one_and_two_threads() {
    use crate::generate::Engine;
    use crate::sampling::SamplingParams;
    use crate::spec::drafter::NgramDrafter;
    let dir = tempfile::tempdir().unwrap();
    let files = [
        ("f16.gguf", gguf_bytes_typed(&vocab(), 64, GgmlType::F16)),
        ("bf16.gguf", gguf_bytes_typed(&vocab(), 64, GgmlType::BF16)),
        ("q2_k.gguf", k16_gguf(GgmlType::Q2K, false)),
        ("q3_k.gguf", k16_gguf(GgmlType::Q3K, false)),
    ];
    let greedy = SamplingParams::default();
    for (name, bytes) in files {
        let p = dir.path().join(name);
        std::fs::write(&p, bytes).unwrap();
        for threads in [1, 2] {
            let e = Engine::new(load(&p).unwrap(), KernelFamily::best(), threads).unwrap();
            let mut rounds = 0;
            // Random weights stop at the end token after a prompt-dependent
            // number of tokens: several prompts, so that some run long.
            for text in
                ["abcabcabcabc, abcabc", "hello hello hello", "the cat. the cat. the", "zzz, yyy, zzz, yyy", "a"]
            {
                let ids = e.loaded.tokenizer.encode(text).unwrap();
                let pre = e.prefill(&ids).unwrap();
                let classic = e.decode(pre.clone(), 24, &greedy).unwrap();
                for w in [1, 2, 3, 4, 8, 16] {
                    let mut d = NgramDrafter { max_n: 4, min_n: 1 };
                    let (spec, stats) = e.decode_speculative(pre.clone(), 24, &greedy, &mut d, w).unwrap();
                    assert_eq!(spec.token_ids, classic.token_ids, "{name} {text:?} width {w} at {threads} threads");
                    rounds += stats.rounds;
                }
            }
            assert!(rounds > 0, "{name}: no speculative round ran");
        }
    }
}

fn llama_error(extra: &[(&str, Value)], tensors: &[(&str, Vec<f32>)]) -> String {
    load_error(&gguf_bytes_stored(&vocab(), 64, GgmlType::F32, false, extra, tensors))
}

#[test]
fn llama_gguf_variants_this_runtime_does_not_run_are_refused_by_name() {
    let s = |x: &str| Value::String(x.into());
    for t in ["yarn", "longrope"] {
        let e = llama_error(&[("llama.rope.scaling.type", s(t))], &[]);
        assert!(e.contains(&format!("llama.rope.scaling.type = {t}")), "{e}");
    }
    let e = llama_error(&[("llama.expert_count", Value::U32(8))], &[]);
    assert!(e.contains("mixture of experts") && e.contains("llama.expert_count = 8"), "{e}");
    let e = llama_error(&[], &[("blk.0.attn_q.bias", vec![0.0; DIM])]);
    assert!(e.contains("blk.0.attn_q.bias") && e.contains("attention biases"), "{e}");
    let e = llama_error(&[], &[("rope_freqs.weight", vec![1.0; 3])]);
    assert!(e.contains("rope_freqs.weight"), "{e}");
    let linear = [("llama.rope.scaling.type", s("linear")), ("llama.rope.scaling.factor", Value::F32(4.0))];
    let e = llama_error(&linear, &[("rope_freqs.weight", vec![1.0; HD / 2])]);
    assert!(e.contains("rope_freqs.weight together with llama.rope.scaling.type = linear"), "{e}");
    // A linear factor and the frequency factors each load.
    let l = load_bytes(&gguf_bytes_stored(&vocab(), 64, GgmlType::F32, false, &linear, &[]));
    assert_eq!(l.model.config.rope_scaling, super::config::RopeScaling::Linear { factor: 4.0 });
    let f: Vec<f32> = (0..HD / 2).map(|i| 1.0 + i as f32).collect();
    let l =
        load_bytes(&gguf_bytes_stored(&vocab(), 64, GgmlType::F32, false, &[], &[("rope_freqs.weight", f.clone())]));
    assert_eq!(l.model.config.rope_scaling, super::config::RopeScaling::FreqFactors(f));
}

#[test]
fn a_scaled_llama_on_a_cuda_device_is_refused_by_name() {
    use crate::device::{DeviceError, DeviceRequest, place};
    let s = |x: &str| Value::String(x.into());
    let linear = [("llama.rope.scaling.type", s("linear")), ("llama.rope.scaling.factor", Value::F32(4.0))];
    let mut l = load_bytes(&gguf_bytes_stored(&vocab(), 64, GgmlType::F32, false, &linear, &[]));
    match place(&mut l, DeviceRequest::Cuda(0)) {
        Err(e @ DeviceError::CpuOnlyArchitecture { .. }) => assert!(e.to_string().contains("RoPE scaling"), "{e}"),
        other => panic!("expected the CPU-only refusal, got {:?}", other.map(|r| r.is_some())),
    }
}
