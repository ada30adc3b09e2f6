//! Hugging Face checkpoints: `config.json` + the weights (one
//! `model.safetensors`, or shards listed by `model.safetensors.index.json`;
//! f32, f16 or bf16) + `tokenizer.json` in one directory. Architectures:
//! `LlamaForCausalLM` (with `rope_scaling` of type `llama3` or `linear`),
//! `MistralForCausalLM` (with its `sliding_window` where set),
//! `Qwen2ForCausalLM` (q/k/v biases), `Qwen3ForCausalLM` (q/k norms). RoPE
//! uses the `rotate_half` pairing these checkpoints are trained with. How
//! each tensor is stored in memory is decided in one place,
//! [`weight_matrix`] (today: converted to f32).

use super::config::{Arch, Block, Llama3Scaling, ModelConfig, RopeScaling};
use super::weights::{ExtraNorms, LayerWeights, ModelWeights, WeightMatrix};
use super::{Loaded, Model, ModelError, ModelInfo};
use crate::tokenizer::Tokenizer;
use kernels::ops::RopePairing;
use safetensors::tensor::TensorView;
use safetensors::{Dtype, SafeTensors};
use serde::Deserialize;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

/// Most tensors one safetensors file may name, and all of a checkpoint's
/// files together: a dense model of the families this engine runs has
/// about nine per layer (a 126-layer Llama 3.1 405B: 1,138), so 65,536
/// leaves room for any of them and bounds a header's parse at about 80 MB.
pub const MAX_SAFETENSORS_TENSORS: u64 = 1 << 16;

/// Most `__metadata__` entries a safetensors header may carry: real files
/// carry a few (`format`, a tool's name and version); the loader keeps
/// each as two strings, so a header of millions took gigabytes uncounted.
pub const MAX_SAFETENSORS_METADATA: u64 = 1 << 12;

/// The most shards an index may name (the largest public checkpoints use
/// a few hundred).
pub const MAX_SHARDS: usize = 4096;

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
    #[serde(default)]
    sliding_window: Option<usize>,
    #[serde(default)]
    use_sliding_window: bool,
    #[serde(default)]
    attention_bias: bool,
    #[serde(default)]
    mlp_bias: bool,
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

/// The `config.json` architectures this loader runs: (model_type,
/// architectures entry, block family).
const FAMILIES: &[(&str, &str, Arch)] = &[
    ("llama", "LlamaForCausalLM", Arch::Llama),
    ("mistral", "MistralForCausalLM", Arch::Llama),
    ("qwen2", "Qwen2ForCausalLM", Arch::Qwen2),
    ("qwen3", "Qwen3ForCausalLM", Arch::Qwen3),
];

/// `rope_scaling` of config.json: `null`, or an object whose `rope_type`
/// (or the older `type`) names the scheme.
fn rope_scaling(
    path: &Path,
    v: Option<&serde_json::Value>,
    head_dim: usize,
    base: f32,
) -> Result<RopeScaling, ModelError> {
    let Some(v) = v.filter(|v| !v.is_null()) else { return Ok(RopeScaling::None) };
    let obj = v.as_object().ok_or_else(|| invalid(path, format!("rope_scaling = {v}: not an object")))?;
    let kind = obj.get("rope_type").or_else(|| obj.get("type")).and_then(|t| t.as_str()).unwrap_or("");
    let num = |field: &'static str| -> Result<f32, ModelError> {
        obj.get(field)
            .and_then(|x| x.as_f64())
            .map(|x| x as f32)
            .ok_or_else(|| invalid(path, format!("rope_scaling of type {kind:?} needs a number {field}")))
    };
    match kind {
        "default" => Ok(RopeScaling::None),
        "linear" => Ok(RopeScaling::Linear { factor: num("factor")? }),
        "llama3" => {
            let s = Llama3Scaling {
                factor: num("factor")?,
                low_freq_factor: num("low_freq_factor")?,
                high_freq_factor: num("high_freq_factor")?,
                original_max_position_embeddings: num("original_max_position_embeddings")?,
            };
            Ok(RopeScaling::FreqFactors(s.freq_factors(head_dim, base)?))
        }
        other => Err(ModelError::Unsupported(format!(
            "rope_scaling type {other:?} in config.json (this engine runs: linear, llama3)"
        ))),
    }
}

/// Reads and checks `config.json`.
/// Returns the config, whether the head is tied to the embedding, and the
/// architecture's name (the `model_type`).
pub fn config_from_json(path: &Path, bytes: &[u8]) -> Result<(ModelConfig, bool, &'static str), ModelError> {
    let hf: HfConfig = serde_json::from_slice(bytes).map_err(|e| invalid(path, e.to_string()))?;
    let family = FAMILIES.iter().find(|(mt, a, _)| match hf.model_type.as_deref() {
        Some(t) => t == *mt,
        None => hf.architectures.iter().any(|x| x == a),
    });
    let Some(&(name, _, arch)) = family else {
        let what =
            hf.model_type.clone().or_else(|| hf.architectures.first().cloned()).unwrap_or_else(|| "unspecified".into());
        return Err(ModelError::UnsupportedArchitecture(what));
    };
    let head_dim = match hf.head_dim {
        Some(h) => h,
        None => super::config::implied_head_dim(hf.hidden_size, hf.num_attention_heads)?,
    };
    if hf.mlp_bias {
        return Err(ModelError::Unsupported("mlp_bias = true in config.json (FFN biases)".into()));
    }
    if hf.attention_bias && arch != Arch::Qwen2 {
        return Err(ModelError::Unsupported(format!("attention_bias = true in config.json for {name}")));
    }
    let block = match arch {
        Arch::Qwen2 | Arch::Qwen3 if hf.use_sliding_window => {
            return Err(ModelError::Unsupported(format!(
                "use_sliding_window = true in config.json for {name} (sliding_window = {:?})",
                hf.sliding_window
            )));
        }
        Arch::Qwen2 => Block::QWEN2,
        Arch::Qwen3 => Block::QWEN3,
        // Mistral's window applies to every layer; `null` (v0.2 and later)
        // is none.
        Arch::Llama if name == "mistral" => match hf.sliding_window {
            Some(w) => Block::mistral(w),
            None => Block::LLAMA,
        },
        _ => Block::LLAMA,
    };
    let cfg = ModelConfig {
        block,
        n_layers: hf.num_hidden_layers,
        dim: hf.hidden_size,
        n_heads: hf.num_attention_heads,
        n_kv_heads: hf.num_key_value_heads.unwrap_or(hf.num_attention_heads),
        head_dim,
        ffn_dim: hf.intermediate_size,
        vocab: hf.vocab_size,
        rope_base: hf.rope_theta,
        rope_pairing: RopePairing::Halves,
        rope_scaling: rope_scaling(path, hf.rope_scaling.as_ref(), head_dim, hf.rope_theta)?,
        rms_eps: hf.rms_norm_eps,
        context_length: hf.max_position_embeddings,
    };
    cfg.validate()?;
    Ok((cfg, hf.tie_word_embeddings, name))
}

/// `model.safetensors.index.json`: which shard holds each tensor.
#[derive(Debug, Deserialize)]
struct ShardIndex {
    weight_map: BTreeMap<String, String>,
}

/// The shard file names of an index, checked: plain `*.safetensors` names
/// in the checkpoint's directory (no separators, no `..`), at most
/// [`MAX_SHARDS`] of them. (The index file itself is read capped at
/// `limits::MAX_CONFIG_JSON_BYTES`, which bounds the number of tensors.)
/// Returns the distinct names and each tensor's shard number.
pub fn parse_index(path: &Path, bytes: &[u8]) -> Result<(Vec<String>, HashMap<String, usize>), ModelError> {
    let idx: ShardIndex = serde_json::from_slice(bytes).map_err(|e| invalid(path, e.to_string()))?;
    let mut shards: Vec<String> = Vec::new();
    let mut which = HashMap::with_capacity(idx.weight_map.len());
    for (tensor, file) in idx.weight_map {
        let plain = !file.is_empty()
            && !file.contains(['/', '\\'])
            && file != ".."
            && !file.starts_with('.')
            && file.ends_with(".safetensors");
        if !plain {
            return Err(invalid(
                path,
                format!("weight_map[{tensor:?}] = {file:?}: a shard must be a *.safetensors file beside the index"),
            ));
        }
        let i = match shards.iter().position(|s| *s == file) {
            Some(i) => i,
            None => {
                if shards.len() == MAX_SHARDS {
                    return Err(invalid(path, format!("the index names more than {MAX_SHARDS} shards")));
                }
                shards.push(file);
                shards.len() - 1
            }
        };
        which.insert(tensor, i);
    }
    if shards.is_empty() {
        return Err(invalid(path, "weight_map is empty"));
    }
    Ok((shards, which))
}

/// A file as its filesystem knows it, to tell two names of one file apart:
/// on unix its device and inode, so a hard link (another name, another path)
/// is the same file; elsewhere its canonical path, which sees through
/// symbolic links but not hard links.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileId(FileKey);

#[cfg(unix)]
type FileKey = (u64, u64);
#[cfg(not(unix))]
type FileKey = PathBuf;

impl FileId {
    /// The identity of the file `path` names (after symbolic links).
    pub fn of(path: &Path) -> std::io::Result<FileId> {
        #[cfg(unix)]
        {
            use std::os::unix::fs::MetadataExt;
            let m = std::fs::metadata(path)?;
            Ok(FileId((m.dev(), m.ino())))
        }
        #[cfg(not(unix))]
        {
            std::fs::canonicalize(path).map(FileId)
        }
    }
}

/// The mapped weight files of a checkpoint.
struct Maps {
    paths: Vec<PathBuf>,
    maps: Vec<memmap2::Mmap>,
    /// Tensor name → index into `maps` (sharded checkpoints only).
    which: Option<HashMap<String, usize>>,
}

impl Maps {
    fn open(dir: &Path) -> Result<Maps, ModelError> {
        let index_path = dir.join("model.safetensors.index.json");
        let (names, which) = if index_path.exists() {
            let bytes = crate::limits::read_capped(&index_path, crate::limits::MAX_CONFIG_JSON_BYTES)
                .map_err(|source| ModelError::Io { path: index_path.clone(), source })?;
            let (names, which) = parse_index(&index_path, &bytes)?;
            (names, Some(which))
        } else {
            (vec!["model.safetensors".to_string()], None)
        };
        let mut paths = Vec::with_capacity(names.len());
        let mut maps = Vec::with_capacity(names.len());
        // Each shard its own file: two names of one file would be parsed
        // and mapped twice, its tensors held once per name.
        let mut seen: Vec<(FileId, &str)> = Vec::with_capacity(names.len());
        for n in &names {
            let p = dir.join(n);
            let id = FileId::of(&p).map_err(|source| ModelError::Io { path: p.clone(), source })?;
            if let Some((_, other)) = seen.iter().find(|(s, _)| *s == id) {
                return Err(invalid(
                    &index_path,
                    format!(
                        "shards {other} and {n} are the same file (one inode, linked or named twice); each shard of \
                         an index must be its own file"
                    ),
                ));
            }
            seen.push((id, n.as_str()));
            let file = std::fs::File::open(&p).map_err(|source| ModelError::Io { path: p.clone(), source })?;
            // SAFETY: read-only map, dropped before load_dir returns (weights
            // are copied out); see GgufFile::open on files changing underneath.
            let map =
                unsafe { memmap2::Mmap::map(&file) }.map_err(|source| ModelError::Io { path: p.clone(), source })?;
            paths.push(p);
            maps.push(map);
        }
        Ok(Maps { paths, maps, which })
    }
}

/// Tells the kernel that this process no longer needs the mapped pages of a
/// safetensors header of `header_len` bytes (after its 8-byte length): they
/// leave the resident set, as the parsed header is dropped, so a checkpoint
/// of large headers is not held at the size of all of them. Whole pages
/// only: the page the header shares with the first tensor's data stays.
fn release_header_pages(m: &memmap2::Mmap, header_len: usize) {
    let end = (8 + header_len) / 4096 * 4096;
    if end > 0 && end <= m.len() {
        // SAFETY: the map is read-only and private to this process, so
        // dropping its pages loses nothing: a later read faults them in from
        // the file again with the same contents (GgufFile::release_tensor_pages
        // does the same for tensors).
        let _ = unsafe { m.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, 0, end) };
    }
}

/// Where one tensor's bytes lie, as its shard's header declares them
/// (checked by the safetensors crate when the header was parsed).
struct Slot<'a> {
    /// Index into the checkpoint's files.
    shard: usize,
    dtype: Dtype,
    shape: Vec<usize>,
    data: &'a [u8],
}

/// Tensor lookup across a checkpoint's files.
struct Tensors<'a> {
    maps: &'a Maps,
    /// Tensor name → its slot: the tensors of the single file, or those the
    /// index names, each in the shard it names.
    slots: HashMap<String, Slot<'a>>,
}

impl<'a> Tensors<'a> {
    /// Parses the files' headers one at a time: each header's tensors are
    /// copied out as slots and the parsed header (its `__metadata__`
    /// included) is dropped before the next is read, so a checkpoint holds
    /// one header at a time, not one per shard. Refuses a header whose
    /// `__metadata__` passes [`MAX_SAFETENSORS_METADATA`]
    /// entries and a checkpoint past
    /// [`MAX_SAFETENSORS_TENSORS`] tensors (the bounds the
    /// precheck streams, held here for the callers that load without it);
    /// for a sharded checkpoint, checks that each tensor the index names is
    /// in the shard it names.
    fn new(maps: &'a Maps) -> Result<Self, ModelError> {
        let mut slots = HashMap::new();
        for (i, (m, p)) in maps.maps.iter().zip(&maps.paths).enumerate() {
            let (header_len, header) = SafeTensors::read_metadata(m).map_err(|e| invalid(p, e.to_string()))?;
            let entries = header.metadata().as_ref().map_or(0, |m| m.len());
            if entries as u64 > MAX_SAFETENSORS_METADATA {
                return Err(invalid(
                    p,
                    format!(
                        "its __metadata__ has {entries} entries, more than the {MAX_SAFETENSORS_METADATA} this \
                         runtime reads (real files carry a few, like \"format\": \"pt\")"
                    ),
                ));
            }
            // The data section follows the 8-byte length and the header.
            let data = m.get(8 + header_len..).unwrap_or(&[]);
            for (name, info) in header.tensors() {
                if maps.which.as_ref().is_some_and(|w| w.get(&name) != Some(&i)) {
                    continue;
                }
                let (start, end) = info.data_offsets;
                let bytes = data
                    .get(start..end)
                    .ok_or_else(|| invalid(p, format!("tensor {name}: bytes {start}..{end} lie outside the file")))?;
                slots.insert(name, Slot { shard: i, dtype: info.dtype, shape: info.shape.clone(), data: bytes });
                if slots.len() as u64 > MAX_SAFETENSORS_TENSORS {
                    return Err(invalid(
                        p,
                        format!(
                            "the checkpoint's files name more than {MAX_SAFETENSORS_TENSORS} tensors together (the \
                             most this runtime loads)"
                        ),
                    ));
                }
            }
            // The parsed header goes here, and its mapped pages with it.
            drop(header);
            release_header_pages(m, header_len);
        }
        if let Some(which) = &maps.which {
            for (name, &i) in which {
                if !slots.contains_key(name) {
                    return Err(invalid(
                        &maps.paths[i],
                        format!("the index puts tensor {name} in this shard, which does not hold it"),
                    ));
                }
            }
        }
        Ok(Tensors { maps, slots })
    }

    fn get(&self, name: &str) -> Result<(TensorView<'a>, &'a Path), ModelError> {
        let slot = self.slots.get(name).ok_or_else(|| ModelError::MissingTensor(name.to_string()))?;
        let path = &self.maps.paths[slot.shard];
        let t = TensorView::new(slot.dtype, slot.shape.clone(), slot.data)
            .map_err(|e| invalid(path, format!("tensor {name}: {e}")))?;
        Ok((t, path))
    }

    fn contains(&self, name: &str) -> bool {
        self.get(name).is_ok()
    }

    /// The tensor `name`, checked to have `shape`.
    fn shaped(&self, name: &str, shape: &[usize]) -> Result<(TensorView<'a>, &'a Path), ModelError> {
        let (t, p) = self.get(name)?;
        if t.shape() != shape {
            return Err(ModelError::Shape {
                tensor: name.to_string(),
                expected: shape.iter().map(|&d| d as u64).collect(),
                got: t.shape().iter().map(|&d| d as u64).collect(),
            });
        }
        Ok((t, p))
    }
}

/// The values of a tensor as f32.
fn to_f32(path: &Path, name: &str, t: &TensorView) -> Result<Vec<f32>, ModelError> {
    let data = t.data();
    Ok(match t.dtype() {
        Dtype::F32 => data.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect(),
        Dtype::F16 => data.chunks_exact(2).map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32()).collect(),
        Dtype::BF16 => data.chunks_exact(2).map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32()).collect(),
        other => {
            return Err(invalid(path, format!("tensor {name}: dtype {other:?} is not supported (f32, f16, bf16 are)")));
        }
    })
}

/// How a (rows, cols) weight matrix is kept in memory: the one per-tensor
/// storage decision of this loader. F16 and BF16 stay in 16 bits (their own
/// kernels read them; no f32 copy); F32 is copied; anything else is refused
/// by [`to_f32`] naming the dtype.
fn weight_matrix(
    path: &Path,
    name: &str,
    t: &TensorView,
    rows: usize,
    cols: usize,
) -> Result<WeightMatrix, ModelError> {
    let ty = match t.dtype() {
        Dtype::F16 => kernels::quant::GgmlType::F16,
        Dtype::BF16 => kernels::quant::GgmlType::BF16,
        _ => return Ok(WeightMatrix::from_f32(name, to_f32(path, name, t)?, rows, cols)),
    };
    let bits: Vec<u16> = t.data().chunks_exact(2).map(|b| u16::from_le_bytes([b[0], b[1]])).collect();
    if bits.len() != rows * cols {
        return Err(invalid(path, format!("tensor {name}: {} bytes for {rows}x{cols} {ty:?}", t.data().len())));
    }
    Ok(WeightMatrix::from_half(name, ty, bits, rows, cols))
}

/// Loads a Hugging Face checkpoint directory.
pub fn load_dir(dir: &Path) -> Result<Loaded, ModelError> {
    let cfg_path = dir.join("config.json");
    let cfg_bytes = crate::limits::read_capped(&cfg_path, crate::limits::MAX_CONFIG_JSON_BYTES)
        .map_err(|source| ModelError::Io { path: cfg_path.clone(), source })?;
    let (cfg, tied, arch_name) = config_from_json(&cfg_path, &cfg_bytes)?;
    let maps = Maps::open(dir)?;
    let st = Tensors::new(&maps)?;

    let (d, q, kv, ff, vocab, hd) = (cfg.dim, cfg.q_dim(), cfg.kv_dim(), cfg.ffn_dim, cfg.vocab, cfg.head_dim);
    let mut dtypes = std::collections::BTreeSet::new();
    // Layer matrices record their dtype: the quantization class is theirs.
    let mut mat = |name: String, rows: usize, cols: usize| -> Result<WeightMatrix, ModelError> {
        let (t, p) = st.shaped(&name, &[rows, cols])?;
        if name.starts_with("model.layers.") {
            dtypes.insert(format!("{:?}", t.dtype()));
        }
        weight_matrix(p, &name, &t, rows, cols)
    };
    let vector = |name: String, len: usize| -> Result<Vec<f32>, ModelError> {
        let (t, p) = st.shaped(&name, &[len])?;
        to_f32(p, &name, &t)
    };
    let b = cfg.block;
    let mut layers = Vec::with_capacity(cfg.n_layers);
    for i in 0..cfg.n_layers {
        let p = format!("model.layers.{i}");
        let opt_vec = |on: bool, name: String, len: usize| if on { vector(name, len).map(Some) } else { Ok(None) };
        let extra = ExtraNorms {
            q_norm: opt_vec(b.qk_norm, format!("{p}.self_attn.q_norm.weight"), hd)?,
            k_norm: opt_vec(b.qk_norm, format!("{p}.self_attn.k_norm.weight"), hd)?,
            post_attn: None,
            post_ffn: None,
            q_bias: opt_vec(b.qkv_bias, format!("{p}.self_attn.q_proj.bias"), q)?,
            k_bias: opt_vec(b.qkv_bias, format!("{p}.self_attn.k_proj.bias"), kv)?,
            v_bias: opt_vec(b.qkv_bias, format!("{p}.self_attn.v_proj.bias"), kv)?,
        };
        if !b.qkv_bias
            && let Some(t) = ["q_proj", "k_proj", "v_proj", "o_proj"]
                .iter()
                .map(|s| format!("{p}.self_attn.{s}.bias"))
                .find(|n| st.contains(n))
        {
            return Err(ModelError::Unsupported(format!("tensor {t}: attention biases on a {arch_name} block")));
        }
        layers.push(LayerWeights {
            attn_norm: vector(format!("{p}.input_layernorm.weight"), d)?,
            wq: mat(format!("{p}.self_attn.q_proj.weight"), q, d)?,
            wk: mat(format!("{p}.self_attn.k_proj.weight"), kv, d)?,
            wv: mat(format!("{p}.self_attn.v_proj.weight"), kv, d)?,
            wo: mat(format!("{p}.self_attn.o_proj.weight"), d, q)?,
            ffn_norm: vector(format!("{p}.post_attention_layernorm.weight"), d)?,
            w_gate: mat(format!("{p}.mlp.gate_proj.weight"), ff, d)?,
            w_up: mat(format!("{p}.mlp.up_proj.weight"), ff, d)?,
            w_down: mat(format!("{p}.mlp.down_proj.weight"), d, ff)?,
            extra,
        });
    }
    let embed = mat("model.embed_tokens.weight".into(), vocab, d)?;
    let head = if st.contains("lm_head.weight") {
        Some(mat("lm_head.weight".into(), vocab, d)?)
    } else if tied {
        None
    } else {
        return Err(ModelError::MissingTensor("lm_head.weight (and tie_word_embeddings is false)".into()));
    };
    let layer_dtypes: Vec<String> = dtypes.into_iter().collect();
    let out_norm = vector("model.norm.weight".into(), d)?;
    let weights = ModelWeights { embed, layers, out_norm, head };
    drop(st);
    drop(maps);

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
        architecture: arch_name.into(),
        quant,
        n_layers: cfg.n_layers,
        dim: cfg.dim,
        vocab: cfg.vocab,
        context_length: cfg.context_length,
        weight_formats: weights.formats(),
        parameters: weights.parameters(),
    };
    Ok(Loaded { model: Model::new(cfg, weights), tokenizer, info })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn index(entries: impl Iterator<Item = (String, String)>) -> Vec<u8> {
        let map: serde_json::Map<String, serde_json::Value> = entries.map(|(k, v)| (k, v.into())).collect();
        serde_json::json!({ "weight_map": map }).to_string().into_bytes()
    }

    /// A safetensors file of one F32 tensor `name` (one element) whose
    /// `__metadata__` has `entries` entries.
    fn safetensors(path: &Path, name: &str, entries: usize) {
        let meta: serde_json::Map<String, serde_json::Value> =
            (0..entries).map(|i| (format!("k{i}"), serde_json::Value::from("v"))).collect();
        let header = serde_json::json!({
            "__metadata__": meta,
            name: {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
        });
        let h = header.to_string().into_bytes();
        let mut bytes = (h.len() as u64).to_le_bytes().to_vec();
        bytes.extend_from_slice(&h);
        bytes.extend_from_slice(&1.0f32.to_le_bytes());
        std::fs::write(path, bytes).unwrap();
    }

    /// A checkpoint directory with the tiny Qwen 2 config and an index
    /// naming `shards` (tensor `t<i>` in shard i).
    fn sharded(shards: &[&str]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let tiny = Path::new(env!("CARGO_MANIFEST_DIR")).join("../reference/data/tiny/qwen2-hf");
        std::fs::copy(tiny.join("config.json"), dir.path().join("config.json")).unwrap();
        let map = shards.iter().enumerate().map(|(i, s)| (format!("t{i}"), s.to_string()));
        std::fs::write(dir.path().join("model.safetensors.index.json"), index(map)).unwrap();
        dir
    }

    fn load_err(dir: &Path) -> String {
        match load_dir(dir) {
            Ok(_) => panic!("{} loaded", dir.display()),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn shards_that_are_one_file_under_two_names_are_refused_by_the_loader() {
        // The loader runs without the precheck for a draft model, so it
        // tells files apart itself: hard links (other names and paths, one
        // inode) and symbolic links alike.
        let dir = sharded(&["s0.safetensors", "s1.safetensors", "s2.safetensors"]);
        let p = |n: &str| dir.path().join(n);
        safetensors(&p("s0.safetensors"), "t0", 1);
        std::fs::hard_link(p("s0.safetensors"), p("s1.safetensors")).unwrap();
        safetensors(&p("s2.safetensors"), "t2", 1);
        let e = load_err(dir.path());
        assert!(e.contains("shards s0.safetensors and s1.safetensors are the same file"), "{e}");
        std::fs::remove_file(p("s1.safetensors")).unwrap();
        std::os::unix::fs::symlink(p("s2.safetensors"), p("s1.safetensors")).unwrap();
        let e = load_err(dir.path());
        assert!(e.contains("shards s1.safetensors and s2.safetensors are the same file"), "{e}");
        // Three files of their own pass this check (and fail on the model's tensors).
        std::fs::remove_file(p("s1.safetensors")).unwrap();
        safetensors(&p("s1.safetensors"), "t1", 1);
        let e = load_err(dir.path());
        assert!(e.contains("model.layers.0") && e.contains("is missing"), "{e}");
    }

    #[test]
    fn a_metadata_section_past_the_bound_is_refused_by_the_loader() {
        let max = MAX_SAFETENSORS_METADATA as usize;
        let dir = sharded(&["s0.safetensors", "s1.safetensors"]);
        safetensors(&dir.path().join("s0.safetensors"), "t0", max);
        safetensors(&dir.path().join("s1.safetensors"), "t1", max + 1);
        let e = load_err(dir.path());
        assert!(e.contains("s1.safetensors") && e.contains(&format!("__metadata__ has {} entries", max + 1)), "{e}");
        safetensors(&dir.path().join("s1.safetensors"), "t1", max);
        let e = load_err(dir.path());
        assert!(e.contains("is missing"), "{e}");
    }

    #[test]
    fn an_index_names_each_shard_once_in_order_of_first_use() {
        let bytes = index(
            [("a", "model-2.safetensors"), ("b", "model-1.safetensors"), ("c", "model-2.safetensors")]
                .into_iter()
                .map(|(a, b)| (a.to_string(), b.to_string())),
        );
        let (shards, which) = parse_index(Path::new("i.json"), &bytes).unwrap();
        assert_eq!(shards, ["model-2.safetensors", "model-1.safetensors"]);
        assert_eq!((which["a"], which["b"], which["c"]), (0, 1, 0));
    }

    #[test]
    fn an_index_with_too_many_shards_no_tensors_or_a_hidden_file_is_refused() {
        let p = Path::new("i.json");
        let many = index((0..=MAX_SHARDS).map(|i| (format!("t{i}"), format!("s{i}.safetensors"))));
        let e = parse_index(p, &many).unwrap_err().to_string();
        assert!(e.contains(&format!("more than {MAX_SHARDS} shards")), "{e}");
        let e = parse_index(p, &index(std::iter::empty())).unwrap_err().to_string();
        assert!(e.contains("weight_map is empty"), "{e}");
        let e = parse_index(p, &index(std::iter::once(("t".into(), ".safetensors".into())))).unwrap_err().to_string();
        assert!(e.contains("beside the index"), "{e}");
        let e = parse_index(p, &index(std::iter::once(("t".into(), "x.bin".into())))).unwrap_err().to_string();
        assert!(e.contains("beside the index"), "{e}");
    }
}
