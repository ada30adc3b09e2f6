//! Building a model from a GGUF file: metadata → [`ModelConfig`], tensors
//! → [`ModelWeights`] viewed in place in the map. Tensor names follow
//! llama.cpp's (`blk.N.attn_q.weight`, ...).

use super::ModelError;
use super::config::{Arch, Block, ModelConfig, RopeScaling};
use super::weights::{ExtraNorms, LayerWeights, ModelWeights, WeightMatrix};
use crate::gguf::{GgufError, GgufFile};
use kernels::ops::RopePairing;
use kernels::quant::dequantize_row;
use std::sync::Arc;

/// The `general.architecture` values this runtime loads.
pub const ARCHITECTURES: &[&str] = &["llama", "gemma3", "qwen2", "qwen3"];

fn opt<T>(r: Result<T, GgufError>) -> Result<Option<T>, GgufError> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(GgufError::MissingKey { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Reads the hyper-parameters of a GGUF model.
pub fn config_from_gguf(f: &GgufFile) -> Result<ModelConfig, ModelError> {
    let arch = f.get_str("general.architecture")?;
    let kind = match arch {
        "llama" => Arch::Llama,
        "gemma3" => Arch::Gemma3,
        "qwen2" => Arch::Qwen2,
        "qwen3" => Arch::Qwen3,
        _ => return Err(ModelError::UnsupportedArchitecture(arch.to_string())),
    };
    let key = |k: &str| format!("{arch}.{k}");
    let dim = f.get_u32(&key("embedding_length"))? as usize;
    let n_heads = f.get_u32(&key("attention.head_count"))? as usize;
    let n_kv_heads = opt(f.get_u32(&key("attention.head_count_kv")))?.map_or(n_heads, |v| v as usize);
    let head_dim = match opt(f.get_u32(&key("attention.key_length")))? {
        Some(v) => v as usize,
        None => super::config::implied_head_dim(dim, n_heads)?,
    };
    if let Some(v) = opt(f.get_u32(&key("attention.value_length")))?
        && v as usize != head_dim
    {
        return Err(ModelError::Unsupported(format!(
            "value heads of another size than key heads ({arch}.attention.value_length = {v}, key_length = {head_dim})"
        )));
    }
    // Mixture-of-experts files (Mixtral's GGUFs say `llama`) carry an
    // expert count; their FFN is not this block's.
    if let Some(n) = opt(f.get_u32(&key("expert_count")))?
        && n > 0
    {
        return Err(ModelError::Unsupported(format!("mixture of experts ({arch}.expert_count = {n})")));
    }
    let scaling_type = opt(f.get_str(&key("rope.scaling.type")))?;
    let mut rope_scaling = match scaling_type {
        None | Some("none") => RopeScaling::None,
        // Linear interpolation, which llama.cpp runs for every architecture
        // as `freq_scale = 1 / factor` (Gemma 3's local layers would need
        // it left out, so Gemma keeps refusing it).
        Some("linear") if kind != Arch::Gemma3 => {
            let factor = f.get_f32(&key("rope.scaling.factor"))?;
            RopeScaling::Linear { factor }
        }
        Some(t) => {
            return Err(ModelError::Unsupported(format!(
                "RoPE scaling ({arch}.rope.scaling.type = {t}; this engine runs none and linear, and Llama 3's \
                 rope_freqs)"
            )));
        }
    };
    let n_layers = f.get_u32(&key("block_count"))? as usize;
    // llama.cpp's `llama` and `qwen` graphs rotate in adjacent pairs for
    // `llama` (its converter permutes q/k rows to that order) and in halves
    // for Qwen (not permuted; llama.cpp's NeoX RoPE).
    let (block, rope_pairing) = match kind {
        Arch::Llama => (Block::LLAMA, RopePairing::Adjacent),
        Arch::Qwen2 => (Block::QWEN2, RopePairing::Halves),
        Arch::Qwen3 => (Block::QWEN3, RopePairing::Halves),
        Arch::Gemma3 => {
            // llama.cpp scales Gemma 3 27B's queries by 1/sqrt(dim / heads),
            // every other size by 1/sqrt(head_dim), which is what the
            // attention here does.
            if n_layers == 62 {
                return Err(ModelError::Unsupported(
                    "Gemma 3 27B (its query scale is 1/sqrt(dim / n_heads), not 1/sqrt(head_dim))".into(),
                ));
            }
            let window = f.get_u32(&key("attention.sliding_window"))? as usize;
            // Gemma's tensors are not permuted at conversion: its heads
            // rotate in halves (llama.cpp's NeoX RoPE).
            (Block::gemma3(dim, window), RopePairing::Halves)
        }
    };
    // Llama 3.1's scaling: llama.cpp's converter writes the divisor of each
    // frequency as this tensor and no scaling type; llama.cpp divides every
    // layer's frequencies by it.
    if f.tensor("rope_freqs.weight").is_some() {
        if kind == Arch::Gemma3 {
            return Err(ModelError::Unsupported("RoPE frequency factors (rope_freqs.weight) on gemma3".into()));
        }
        if rope_scaling != RopeScaling::None {
            return Err(ModelError::Unsupported(format!(
                "rope_freqs.weight together with {arch}.rope.scaling.type = {}",
                scaling_type.unwrap_or_default()
            )));
        }
        rope_scaling = RopeScaling::FreqFactors(vector(f, "rope_freqs.weight", head_dim / 2)?);
    }
    let embd = f.tensor("token_embd.weight").ok_or(ModelError::MissingTensor("token_embd.weight".into()))?;
    let vocab = embd.n_rows() as usize;
    let cfg = ModelConfig {
        block,
        n_layers,
        dim,
        n_heads,
        n_kv_heads,
        head_dim,
        ffn_dim: f.get_u32(&key("feed_forward_length"))? as usize,
        vocab,
        rope_base: opt(f.get_f32(&key("rope.freq_base")))?.unwrap_or(10000.0),
        rope_pairing,
        rope_scaling,
        rms_eps: f.get_f32(&key("attention.layer_norm_rms_epsilon"))?,
        context_length: opt(f.get_u32(&key("context_length")))?.map_or(2048, |v| v as usize),
    };
    cfg.validate()?;
    if let Some(n) = opt(f.get_u32(&key("rope.dimension_count")))?
        && n as usize != head_dim
    {
        return Err(ModelError::Unsupported(format!(
            "partial rotary embedding ({arch}.rope.dimension_count = {n}, head_dim = {head_dim})"
        )));
    }
    Ok(cfg)
}

fn matrix(f: &Arc<GgufFile>, name: &str, rows: usize, cols: usize) -> Result<WeightMatrix, ModelError> {
    let index =
        f.tensors.iter().position(|t| t.name == name).ok_or_else(|| ModelError::MissingTensor(name.to_string()))?;
    let t = &f.tensors[index];
    if t.dims != [cols as u64, rows as u64] {
        return Err(ModelError::Shape {
            tensor: name.to_string(),
            expected: vec![cols as u64, rows as u64],
            got: t.dims.clone(),
        });
    }
    WeightMatrix::from_gguf(f, index, rows, cols)
        .map_err(|source| ModelError::Matrix { tensor: name.to_string(), source })
}

fn vector(f: &GgufFile, name: &str, len: usize) -> Result<Vec<f32>, ModelError> {
    let t = f.tensor(name).ok_or_else(|| ModelError::MissingTensor(name.to_string()))?;
    if t.dims != [len as u64] {
        return Err(ModelError::Shape { tensor: name.to_string(), expected: vec![len as u64], got: t.dims.clone() });
    }
    let mut out = vec![0.0f32; len];
    dequantize_row(t.ty, f.tensor_data(t), &mut out)
        .map_err(|e| ModelError::Unsupported(format!("tensor {name}: {e}")))?;
    Ok(out)
}

/// Loads every weight of a GGUF model; tensors are checked against `cfg`'s shapes.
pub fn weights_from_gguf(f: &Arc<GgufFile>, cfg: &ModelConfig) -> Result<ModelWeights, ModelError> {
    let (d, q, kv, ff) = (cfg.dim, cfg.q_dim(), cfg.kv_dim(), cfg.ffn_dim);
    let mut layers = Vec::with_capacity(cfg.n_layers);
    for i in 0..cfg.n_layers {
        let n = |s: &str| format!("blk.{i}.{s}.weight");
        let b = &cfg.block;
        let extra = ExtraNorms {
            q_norm: if b.qk_norm { Some(vector(f, &n("attn_q_norm"), cfg.head_dim)?) } else { None },
            k_norm: if b.qk_norm { Some(vector(f, &n("attn_k_norm"), cfg.head_dim)?) } else { None },
            post_attn: if b.post_norms { Some(vector(f, &n("post_attention_norm"), d)?) } else { None },
            post_ffn: if b.post_norms { Some(vector(f, &n("post_ffw_norm"), d)?) } else { None },
            q_bias: if b.qkv_bias { Some(vector(f, &format!("blk.{i}.attn_q.bias"), q)?) } else { None },
            k_bias: if b.qkv_bias { Some(vector(f, &format!("blk.{i}.attn_k.bias"), kv)?) } else { None },
            v_bias: if b.qkv_bias { Some(vector(f, &format!("blk.{i}.attn_v.bias"), kv)?) } else { None },
        };
        // A block without biases must not silently drop a file's.
        if !b.qkv_bias
            && let Some(t) = ["attn_q", "attn_k", "attn_v", "attn_output"]
                .iter()
                .map(|s| format!("blk.{i}.{s}.bias"))
                .find(|name| f.tensor(name).is_some())
        {
            return Err(ModelError::Unsupported(format!("tensor {t}: attention biases on a {:?} block", b.arch)));
        }
        layers.push(LayerWeights {
            attn_norm: vector(f, &n("attn_norm"), d)?,
            wq: matrix(f, &n("attn_q"), q, d)?,
            wk: matrix(f, &n("attn_k"), kv, d)?,
            wv: matrix(f, &n("attn_v"), kv, d)?,
            wo: matrix(f, &n("attn_output"), d, q)?,
            ffn_norm: vector(f, &n("ffn_norm"), d)?,
            w_gate: matrix(f, &n("ffn_gate"), ff, d)?,
            w_up: matrix(f, &n("ffn_up"), ff, d)?,
            w_down: matrix(f, &n("ffn_down"), d, ff)?,
            extra,
        });
    }
    let head = match f.tensor("output.weight") {
        Some(_) => Some(matrix(f, "output.weight", cfg.vocab, d)?),
        None => None,
    };
    Ok(ModelWeights {
        embed: matrix(f, "token_embd.weight", cfg.vocab, d)?,
        layers,
        out_norm: vector(f, "output_norm.weight", d)?,
        head,
    })
}

/// Elements of every tensor in a GGUF file (what its model card counts; a
/// tied head is stored once): the parameter count of a policy key, read
/// from the tensor infos alone.
pub fn parameters(f: &GgufFile) -> u64 {
    f.tensors.iter().map(|t| t.n_elems).fold(0u64, u64::saturating_add)
}

/// The storage formats of the matrices a GGUF target's forward pass reads
/// (the embedding, the layers' matrices, the head), lowercase ggml names,
/// sorted, each once: what [`ModelWeights::formats`] reports once loaded,
/// read from the tensor infos alone.
pub fn weight_formats(f: &GgufFile) -> Vec<String> {
    let mut out: Vec<String> = f
        .tensors
        .iter()
        .filter(|t| {
            t.dims.len() == 2
                && (t.name == "token_embd.weight"
                    || t.name == "output.weight"
                    || (t.name.starts_with("blk.") && t.name.ends_with(".weight")))
        })
        .map(|t| t.ty.name().to_ascii_lowercase())
        .collect();
    out.sort();
    out.dedup();
    out
}
