//! Hugging Face Llama checkpoints: `config.json` + `model.safetensors`
//! (f32, f16 or bf16) + `tokenizer.json` in one directory. Weights are
//! converted to f32 at load; RoPE uses the `rotate_half` pairing these
//! checkpoints are trained with.

use super::config::LlamaConfig;
use super::weights::{LayerWeights, LlamaWeights, WeightMatrix};
use super::{Loaded, Model, ModelError, ModelInfo};
use crate::tokenizer::Tokenizer;
use kernels::ops::RopePairing;
use safetensors::{Dtype, SafeTensors};
use serde::Deserialize;
use std::path::Path;

/// The fields of `config.json` this loader reads.
#[derive(Debug, Deserialize)]
struct HfConfig {
    #[serde(default)]
    architectures: Vec<String>,
    #[serde(default)]
    model_type: Option<String>,
    hidden_size: usize,
    intermediate_size: usize,
    num_attention_heads: usize,
    num_hidden_layers: usize,
    #[serde(default)]
    num_key_value_heads: Option<usize>,
    #[serde(default)]
    head_dim: Option<usize>,
    rms_norm_eps: f32,
    #[serde(default = "default_theta")]
    rope_theta: f32,
    vocab_size: usize,
    #[serde(default = "default_ctx")]
    max_position_embeddings: usize,
    #[serde(default)]
    tie_word_embeddings: bool,
    #[serde(default)]
    rope_scaling: Option<serde_json::Value>,
}

fn default_theta() -> f32 {
    10000.0
}

fn default_ctx() -> usize {
    2048
}

fn invalid(path: &Path, problem: impl Into<String>) -> ModelError {
    ModelError::Invalid { path: path.to_path_buf(), problem: problem.into() }
}

/// Reads and checks `config.json`.
/// Returns the config and whether the head is tied to the embedding.
pub fn config_from_json(path: &Path, bytes: &[u8]) -> Result<(LlamaConfig, bool), ModelError> {
    let hf: HfConfig = serde_json::from_slice(bytes).map_err(|e| invalid(path, e.to_string()))?;
    let is_llama =
        hf.model_type.as_deref() == Some("llama") || hf.architectures.iter().any(|a| a == "LlamaForCausalLM");
    if !is_llama {
        let what =
            hf.model_type.clone().or_else(|| hf.architectures.first().cloned()).unwrap_or_else(|| "unspecified".into());
        return Err(ModelError::UnsupportedArchitecture(what));
    }
    if hf.rope_scaling.as_ref().is_some_and(|v| !v.is_null()) {
        return Err(ModelError::Unsupported("rope_scaling in config.json".into()));
    }
    let cfg = LlamaConfig {
        block: super::config::Block::LLAMA,
        n_layers: hf.num_hidden_layers,
        dim: hf.hidden_size,
        n_heads: hf.num_attention_heads,
        n_kv_heads: hf.num_key_value_heads.unwrap_or(hf.num_attention_heads),
        head_dim: match hf.head_dim {
            Some(h) => h,
            None => super::config::implied_head_dim(hf.hidden_size, hf.num_attention_heads)?,
        },
        ffn_dim: hf.intermediate_size,
        vocab: hf.vocab_size,
        rope_base: hf.rope_theta,
        rope_pairing: RopePairing::Halves,
        rms_eps: hf.rms_norm_eps,
        context_length: hf.max_position_embeddings,
    };
    cfg.validate()?;
    Ok((cfg, hf.tie_word_embeddings))
}

fn to_f32(path: &Path, st: &SafeTensors, name: &str, shape: &[usize]) -> Result<(Vec<f32>, Dtype), ModelError> {
    let t = st.tensor(name).map_err(|_| ModelError::MissingTensor(name.to_string()))?;
    if t.shape() != shape {
        return Err(ModelError::Shape {
            tensor: name.to_string(),
            expected: shape.iter().map(|&d| d as u64).collect(),
            got: t.shape().iter().map(|&d| d as u64).collect(),
        });
    }
    let data = t.data();
    let v: Vec<f32> = match t.dtype() {
        Dtype::F32 => data.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect(),
        Dtype::F16 => data.chunks_exact(2).map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32()).collect(),
        Dtype::BF16 => data.chunks_exact(2).map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32()).collect(),
        other => {
            return Err(invalid(path, format!("tensor {name}: dtype {other:?} is not supported (f32, f16, bf16 are)")));
        }
    };
    Ok((v, t.dtype()))
}

/// A matrix tensor in the form the forward pass multiplies: F16 and BF16
/// stay in 16 bits (their own kernels read them; no f32 copy), F32 is
/// copied; anything else is refused by [`to_f32`] naming the dtype.
fn matrix_tensor(
    path: &Path,
    st: &SafeTensors,
    name: &str,
    rows: usize,
    cols: usize,
) -> Result<(WeightMatrix, Dtype), ModelError> {
    let t = st.tensor(name).map_err(|_| ModelError::MissingTensor(name.to_string()))?;
    let ty = match t.dtype() {
        Dtype::F16 => kernels::quant::GgmlType::F16,
        Dtype::BF16 => kernels::quant::GgmlType::BF16,
        _ => {
            let (v, dt) = to_f32(path, st, name, &[rows, cols])?;
            return Ok((WeightMatrix::from_f32(name, v, rows, cols), dt));
        }
    };
    if t.shape() != [rows, cols] {
        return Err(ModelError::Shape {
            tensor: name.to_string(),
            expected: vec![rows as u64, cols as u64],
            got: t.shape().iter().map(|&d| d as u64).collect(),
        });
    }
    let bits: Vec<u16> = t.data().chunks_exact(2).map(|b| u16::from_le_bytes([b[0], b[1]])).collect();
    if bits.len() != rows * cols {
        return Err(invalid(path, format!("tensor {name}: {} bytes for {rows}x{cols} {ty:?}", t.data().len())));
    }
    Ok((WeightMatrix::from_half(name, ty, bits, rows, cols), t.dtype()))
}

/// Loads a Hugging Face Llama checkpoint directory.
pub fn load_dir(dir: &Path) -> Result<Loaded, ModelError> {
    let cfg_path = dir.join("config.json");
    let cfg_bytes = crate::limits::read_capped(&cfg_path, crate::limits::MAX_CONFIG_JSON_BYTES)
        .map_err(|source| ModelError::Io { path: cfg_path.clone(), source })?;
    let (cfg, tied) = config_from_json(&cfg_path, &cfg_bytes)?;
    let st_path = dir.join("model.safetensors");
    let file = std::fs::File::open(&st_path).map_err(|source| ModelError::Io { path: st_path.clone(), source })?;
    // SAFETY: read-only map, dropped before this function returns (weights
    // are copied out); see GgufFile::open on files changing underneath.
    let map =
        unsafe { memmap2::Mmap::map(&file) }.map_err(|source| ModelError::Io { path: st_path.clone(), source })?;
    let st = SafeTensors::deserialize(&map).map_err(|e| invalid(&st_path, e.to_string()))?;

    let (d, q, kv, ff, vocab) = (cfg.dim, cfg.q_dim(), cfg.kv_dim(), cfg.ffn_dim, cfg.vocab);
    let mut dtypes = std::collections::BTreeSet::new();
    // Layer matrices record their dtype: the quantization class is theirs.
    let mut mat = |name: String, rows: usize, cols: usize| -> Result<WeightMatrix, ModelError> {
        let (m, dt) = matrix_tensor(&st_path, &st, &name, rows, cols)?;
        if name.starts_with("model.layers.") {
            dtypes.insert(format!("{dt:?}"));
        }
        Ok(m)
    };
    let mut layers = Vec::with_capacity(cfg.n_layers);
    for i in 0..cfg.n_layers {
        let p = format!("model.layers.{i}");
        layers.push(LayerWeights {
            attn_norm: to_f32(&st_path, &st, &format!("{p}.input_layernorm.weight"), &[d])?.0,
            wq: mat(format!("{p}.self_attn.q_proj.weight"), q, d)?,
            wk: mat(format!("{p}.self_attn.k_proj.weight"), kv, d)?,
            wv: mat(format!("{p}.self_attn.v_proj.weight"), kv, d)?,
            wo: mat(format!("{p}.self_attn.o_proj.weight"), d, q)?,
            ffn_norm: to_f32(&st_path, &st, &format!("{p}.post_attention_layernorm.weight"), &[d])?.0,
            w_gate: mat(format!("{p}.mlp.gate_proj.weight"), ff, d)?,
            w_up: mat(format!("{p}.mlp.up_proj.weight"), ff, d)?,
            w_down: mat(format!("{p}.mlp.down_proj.weight"), d, ff)?,
            extra: Default::default(),
        });
    }
    let embed = mat("model.embed_tokens.weight".into(), vocab, d)?;
    let has_head = st.names().contains(&"lm_head.weight");
    let head = if has_head {
        Some(mat("lm_head.weight".into(), vocab, d)?)
    } else if tied {
        None
    } else {
        return Err(ModelError::MissingTensor("lm_head.weight (and tie_word_embeddings is false)".into()));
    };
    let layer_dtypes: Vec<String> = dtypes.into_iter().collect();
    let out_norm = to_f32(&st_path, &st, "model.norm.weight", &[d])?.0;
    let weights = LlamaWeights { embed, layers, out_norm, head };

    let tokenizer = Tokenizer::from_hf_dir(dir)?;
    if tokenizer.vocab_size() > cfg.vocab {
        return Err(invalid(
            dir,
            format!("tokenizer has {} tokens, the model only {}", tokenizer.vocab_size(), cfg.vocab),
        ));
    }
    // The class comes from config.json (what the policy keys on); the dtypes
    // actually loaded are added to the evidence.
    let mut quant = crate::policy::quant::classify_hf_dir(dir);
    quant.from = format!("{}; loaded layer matrices: {}", quant.from, layer_dtypes.join(", "));
    let info = ModelInfo {
        path: dir.to_path_buf(),
        format: "safetensors".into(),
        architecture: "llama".into(),
        quant,
        n_layers: cfg.n_layers,
        dim: cfg.dim,
        vocab: cfg.vocab,
        context_length: cfg.context_length,
        weight_formats: weights.formats(),
    };
    Ok(Loaded { model: Model::new(cfg, weights), tokenizer, info })
}
