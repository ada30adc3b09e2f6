//! Decoder hyper-parameters, read from GGUF metadata or a Hugging Face
//! `config.json`, and checked for consistency before any allocation.
//!
//! One forward pass runs every architecture; [`Block`] holds what sets an
//! architecture's transformer block apart from Llama's (Gemma 3: a scaled
//! embedding, q/k norms, norms after attention and the FFN, GeGLU, local
//! sliding-window layers with their own RoPE base; Qwen 2: q/k/v biases;
//! Qwen 3: q/k norms; Mistral: a sliding window on every layer), and
//! [`RopeScaling`] how positions are stretched (Llama 3.1's per-frequency
//! divisors, linear interpolation).

use kernels::ops::RopePairing;

/// Upper bounds that keep a crafted config from sizing absurd allocations.
/// They are far above any model this engine targets (SmolLM2-135M: 30
/// layers, width 576, vocabulary 49,152).
pub const MAX_LAYERS: usize = 512;
pub const MAX_WIDTH: usize = 65_536;
pub const MAX_VOCAB: usize = 1 << 20;
pub const MAX_CONTEXT: usize = 1 << 20;

/// The architectures the forward pass runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    /// Llama, and Mistral (the same block; its window is [`Block::sliding`]).
    Llama,
    Gemma3,
    Qwen2,
    Qwen3,
}

/// The gated activation of the feed-forward block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ffn {
    /// `silu(gate) * up` (Llama).
    SwiGlu,
    /// `gelu(gate) * up`, GELU in its tanh form (Gemma).
    GeGluTanh,
}

/// Sliding-window attention on some layers.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sliding {
    /// Positions a query of a local layer sees, its own included: the
    /// query at `p` attends to `p + 1 - window ..= p`.
    pub window: usize,
    /// `Some(p)`: every `p`-th layer (the last of each period) is global,
    /// the others local (Gemma 3: five local, one global). `None`: every
    /// layer is local (Mistral).
    pub period: Option<usize>,
    /// RoPE base of the local layers (the global ones use the config's);
    /// `None`: the config's.
    pub rope_base: Option<f32>,
}

impl Sliding {
    pub fn is_local(&self, layer: usize) -> bool {
        match self.period {
            Some(p) => layer % p < p - 1,
            None => true,
        }
    }
}

/// What sets an architecture's block apart from Llama's.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Block {
    pub arch: Arch,
    /// Embedding rows are multiplied by this (Gemma: `sqrt(dim)`).
    pub embed_scale: Option<f32>,
    /// RMSNorm over each head of q and of k, before RoPE.
    pub qk_norm: bool,
    /// RMSNorm of the attention output and of the FFN output before each
    /// is added to the residual stream.
    pub post_norms: bool,
    pub ffn: Ffn,
    pub sliding: Option<Sliding>,
    /// Biases added to the q, k and v projections (Qwen 2).
    pub qkv_bias: bool,
}

impl Block {
    pub const LLAMA: Block = Block {
        arch: Arch::Llama,
        embed_scale: None,
        qk_norm: false,
        post_norms: false,
        ffn: Ffn::SwiGlu,
        sliding: None,
        qkv_bias: false,
    };

    /// Qwen 2's block (llama.cpp's `qwen2` graph): Llama's with q/k/v biases.
    pub const QWEN2: Block = Block { arch: Arch::Qwen2, qkv_bias: true, ..Block::LLAMA };

    /// Qwen 3's block (llama.cpp's `qwen3` graph): Llama's with an RMSNorm
    /// over each query and key head before RoPE, no biases.
    pub const QWEN3: Block = Block { arch: Arch::Qwen3, qk_norm: true, ..Block::LLAMA };

    /// Mistral's block: Llama's, every layer attending through `window`
    /// positions (Hugging Face `sliding_window`).
    pub fn mistral(window: usize) -> Block {
        Block { sliding: Some(Sliding { window, period: None, rope_base: None }), ..Block::LLAMA }
    }

    /// Gemma 3's block (llama.cpp's `gemma3` graph; Hugging Face's
    /// `Gemma3TextModel`), with the window its file gives.
    pub fn gemma3(dim: usize, window: usize) -> Block {
        Block {
            arch: Arch::Gemma3,
            embed_scale: Some((dim as f32).sqrt()),
            qk_norm: true,
            post_norms: true,
            ffn: Ffn::GeGluTanh,
            sliding: Some(Sliding { window, period: Some(6), rope_base: Some(10_000.0) }),
            qkv_bias: false,
        }
    }

    /// Whether `layer` attends through a sliding window.
    pub fn is_local(&self, layer: usize) -> bool {
        self.sliding.is_some_and(|s| s.is_local(layer))
    }
}

/// Shape and numerics of a decoder.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelConfig {
    pub block: Block,
    pub n_layers: usize,
    /// Residual width (`hidden_size`, GGUF `embedding_length`).
    pub dim: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    /// SwiGLU inner width (`intermediate_size`, GGUF `feed_forward_length`).
    pub ffn_dim: usize,
    pub vocab: usize,
    pub rope_base: f32,
    pub rope_pairing: RopePairing,
    /// How positions are stretched before rotation (all layers).
    pub rope_scaling: RopeScaling,
    pub rms_eps: f32,
    /// Longest sequence the model was trained for; generation refuses to go past it.
    pub context_length: usize,
}

/// RoPE scaling: how a model trained on short contexts is stretched to
/// longer ones.
#[derive(Clone, Debug, PartialEq, Default)]
pub enum RopeScaling {
    #[default]
    None,
    /// Positions divided by `factor` (Hugging Face type `linear`; GGUF
    /// `rope.scaling.type = linear`, llama.cpp's `freq_scale = 1/factor`).
    Linear { factor: f32 },
    /// Frequency `i` (of `head_dim / 2`) divided by `factors[i]`: Llama
    /// 3.1's scheme (Hugging Face type `llama3`), which GGUF files carry as
    /// the tensor `rope_freqs.weight` (llama.cpp's `freq_factors`).
    FreqFactors(Vec<f32>),
}

/// The `rope_scaling` parameters of type `llama3`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Llama3Scaling {
    pub factor: f32,
    pub low_freq_factor: f32,
    pub high_freq_factor: f32,
    pub original_max_position_embeddings: f32,
}

impl Llama3Scaling {
    /// The divisor of each of the `head_dim / 2` RoPE frequencies
    /// (Hugging Face's `_compute_llama3_parameters`, the formula llama.cpp's
    /// converter writes into `rope_freqs.weight`): frequencies whose
    /// wavelength is shorter than `original / high_freq_factor` keep their
    /// value, those longer than `original / low_freq_factor` are divided by
    /// `factor`, and those between move smoothly from one to the other.
    pub fn freq_factors(&self, head_dim: usize, base: f32) -> Result<Vec<f32>, ConfigError> {
        let s = *self;
        let positive = |field, v: f32| {
            if v.is_finite() && v > 0.0 { Ok(()) } else { Err(bad(field, v, "must be a finite number > 0")) }
        };
        positive("rope_scaling.factor", s.factor)?;
        positive("rope_scaling.low_freq_factor", s.low_freq_factor)?;
        positive("rope_scaling.high_freq_factor", s.high_freq_factor)?;
        positive("rope_scaling.original_max_position_embeddings", s.original_max_position_embeddings)?;
        if s.high_freq_factor <= s.low_freq_factor {
            return Err(bad(
                "rope_scaling.high_freq_factor",
                s.high_freq_factor,
                format!("must be above low_freq_factor = {}", s.low_freq_factor),
            ));
        }
        let old = s.original_max_position_embeddings;
        let (low_wavelen, high_wavelen) = (old / s.low_freq_factor, old / s.high_freq_factor);
        Ok((0..head_dim / 2)
            .map(|i| {
                let freq = 1.0 / base.powf((2 * i) as f32 / head_dim as f32);
                let wavelen = 2.0 * std::f32::consts::PI / freq;
                if wavelen < high_wavelen {
                    1.0
                } else if wavelen > low_wavelen {
                    s.factor
                } else {
                    let smooth = (old / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
                    1.0 / ((1.0 - smooth) / s.factor + smooth)
                }
            })
            .collect())
    }
}

/// A config value that makes no sense.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("model config: {field} = {value}: {problem}")]
pub struct ConfigError {
    pub field: &'static str,
    pub value: String,
    pub problem: String,
}

fn bad(field: &'static str, value: impl ToString, problem: impl Into<String>) -> ConfigError {
    ConfigError { field, value: value.to_string(), problem: problem.into() }
}

/// The head size a config implies when it gives none: `dim / n_heads`,
/// which must divide exactly (a truncated head size would be reported as
/// some other problem later, or worse, not at all).
pub fn implied_head_dim(dim: usize, n_heads: usize) -> Result<usize, ConfigError> {
    if n_heads == 0 {
        return Err(bad("n_heads", 0, format!("must be in 1..={MAX_WIDTH}")));
    }
    if !dim.is_multiple_of(n_heads) {
        return Err(bad(
            "dim",
            dim,
            format!(
                "is not divisible by n_heads = {n_heads}, and no head size is given (GGUF \
                 attention.key_length, config.json head_dim)"
            ),
        ));
    }
    Ok(dim / n_heads)
}

impl ModelConfig {
    pub fn q_dim(&self) -> usize {
        self.n_heads * self.head_dim
    }

    pub fn kv_dim(&self) -> usize {
        self.n_kv_heads * self.head_dim
    }

    /// Checks ranges and divisibility; every later size is derived from a
    /// config that passed this.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let in_range = |field, v: usize, max: usize| {
            if v == 0 || v > max { Err(bad(field, v, format!("must be in 1..={max}"))) } else { Ok(()) }
        };
        in_range("n_layers", self.n_layers, MAX_LAYERS)?;
        in_range("dim", self.dim, MAX_WIDTH)?;
        in_range("n_heads", self.n_heads, MAX_WIDTH)?;
        in_range("n_kv_heads", self.n_kv_heads, MAX_WIDTH)?;
        in_range("head_dim", self.head_dim, MAX_WIDTH)?;
        in_range("ffn_dim", self.ffn_dim, 8 * MAX_WIDTH)?;
        in_range("vocab", self.vocab, MAX_VOCAB)?;
        in_range("context_length", self.context_length, MAX_CONTEXT)?;
        if !self.n_heads.is_multiple_of(self.n_kv_heads) {
            return Err(bad("n_kv_heads", self.n_kv_heads, format!("must divide n_heads = {}", self.n_heads)));
        }
        if !self.head_dim.is_multiple_of(2) {
            return Err(bad("head_dim", self.head_dim, "must be even for RoPE"));
        }
        if self.q_dim() > 8 * MAX_WIDTH {
            return Err(bad("n_heads * head_dim", self.q_dim(), "too large"));
        }
        if !(self.rope_base.is_finite() && self.rope_base > 1.0) {
            return Err(bad("rope_base", self.rope_base, "must be a finite number > 1"));
        }
        if !(self.rms_eps.is_finite() && self.rms_eps >= 0.0 && self.rms_eps < 1.0) {
            return Err(bad("rms_eps", self.rms_eps, "must be in [0, 1)"));
        }
        if let Some(sl) = self.block.sliding {
            in_range("sliding_window", sl.window, MAX_CONTEXT)?;
            if let Some(p) = sl.period
                && p < 2
            {
                return Err(bad("sliding period", p, "must be at least 2"));
            }
            if let Some(b) = sl.rope_base
                && !(b.is_finite() && b > 1.0)
            {
                return Err(bad("local rope_base", b, "must be a finite number > 1"));
            }
        }
        match &self.rope_scaling {
            RopeScaling::None => {}
            RopeScaling::Linear { factor } => {
                if !(factor.is_finite() && *factor > 0.0) {
                    return Err(bad("rope_scaling.factor", factor, "must be a finite number > 0"));
                }
            }
            RopeScaling::FreqFactors(f) => {
                if f.len() != self.head_dim / 2 {
                    return Err(bad(
                        "rope_freqs",
                        format!("{} factors", f.len()),
                        format!("must hold head_dim / 2 = {}", self.head_dim / 2),
                    ));
                }
                if let Some(v) = f.iter().find(|v| !(v.is_finite() && **v > 0.0)) {
                    return Err(bad("rope_freqs", v, "every factor must be a finite number > 0"));
                }
            }
        }
        Ok(())
    }

    /// What this model uses that the CUDA forward pass does not implement,
    /// if anything (such models run on the CPU only).
    pub fn cuda_unsupported(&self) -> Option<&'static str> {
        let b = &self.block;
        if b.arch == Arch::Gemma3 || b.post_norms || b.ffn != Ffn::SwiGlu {
            Some("its norms, GeGLU and sliding-window attention")
        } else if b.qkv_bias {
            Some("its q/k/v biases")
        } else if b.qk_norm {
            Some("its q/k norms")
        } else if b.sliding.is_some() {
            Some("its sliding-window attention")
        } else if self.rope_scaling != RopeScaling::None {
            Some("its RoPE scaling")
        } else if b.embed_scale.is_some() {
            Some("its scaled embedding")
        } else {
            None
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn a_width_not_divisible_by_the_heads_is_named_as_such() {
        let e = implied_head_dim(576, 7).unwrap_err();
        assert_eq!(e.field, "dim");
        assert!(e.to_string().contains("not divisible by n_heads = 7"), "{e}");
        assert_eq!(implied_head_dim(576, 9), Ok(64));
        assert!(implied_head_dim(576, 0).is_err());
    }

    /// SmolLM2-135M's shape (tests change one field of it).
    pub(crate) fn smollm2() -> ModelConfig {
        ModelConfig {
            block: Block::LLAMA,
            n_layers: 30,
            dim: 576,
            n_heads: 9,
            n_kv_heads: 3,
            head_dim: 64,
            ffn_dim: 1536,
            vocab: 49152,
            rope_base: 100000.0,
            rope_pairing: RopePairing::Adjacent,
            rope_scaling: RopeScaling::None,
            rms_eps: 1e-5,
            context_length: 8192,
        }
    }

    #[test]
    fn gemma3_layers_are_five_local_then_one_global() {
        let b = Block::gemma3(640, 512);
        let local: Vec<bool> = (0..18).map(|l| b.is_local(l)).collect();
        let globals: Vec<usize> = (0..18).filter(|&l| !local[l]).collect();
        assert_eq!(globals, [5, 11, 17]);
        assert!(!Block::LLAMA.is_local(0));
        let c = ModelConfig { block: Block::gemma3(576, 0), ..smollm2() };
        assert_eq!(c.validate().unwrap_err().field, "sliding_window");
    }

    #[test]
    fn smollm2_shape_validates() {
        smollm2().validate().unwrap();
    }

    #[test]
    fn kv_heads_that_do_not_divide_heads_are_refused_by_name() {
        let c = ModelConfig { n_kv_heads: 4, ..smollm2() };
        assert!(c.validate().unwrap_err().to_string().contains("n_kv_heads = 4"));
    }

    #[test]
    fn absurd_sizes_are_refused_before_allocation() {
        let c = ModelConfig { n_layers: 1 << 30, ..smollm2() };
        assert_eq!(c.validate().unwrap_err().field, "n_layers");
        let c = ModelConfig { rope_base: f32::NAN, ..smollm2() };
        assert_eq!(c.validate().unwrap_err().field, "rope_base");
    }

    #[test]
    fn mistral_windows_every_layer() {
        let b = Block::mistral(8);
        assert!((0..40).all(|l| b.is_local(l)));
        assert_eq!(ModelConfig { block: b, ..smollm2() }.cuda_unsupported(), Some("its sliding-window attention"));
        assert_eq!(smollm2().cuda_unsupported(), None);
    }

    /// Llama 3.1 8B's parameters (factor 8, 1, 4, 8192; base 500000, head
    /// 128): the first frequencies keep their value, the last are divided
    /// by 8, and the ones between fall strictly between.
    #[test]
    fn llama3_scaling_keeps_high_frequencies_and_divides_low_ones() {
        let s = Llama3Scaling {
            factor: 8.0,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            original_max_position_embeddings: 8192.0,
        };
        let f = s.freq_factors(128, 500_000.0).unwrap();
        assert_eq!(f.len(), 64);
        assert_eq!(f[0], 1.0);
        assert_eq!(f[63], 8.0);
        let mid: Vec<f32> = f.iter().copied().filter(|&v| v > 1.0 && v < 8.0).collect();
        assert!(!mid.is_empty() && mid.windows(2).all(|w| w[0] < w[1]), "{f:?}");
        let bad = Llama3Scaling { high_freq_factor: 1.0, ..s };
        assert_eq!(bad.freq_factors(128, 500_000.0).unwrap_err().field, "rope_scaling.high_freq_factor");
        let c = ModelConfig { rope_scaling: RopeScaling::FreqFactors(vec![1.0; 3]), ..smollm2() };
        assert_eq!(c.validate().unwrap_err().field, "rope_freqs");
        let c = ModelConfig { rope_scaling: RopeScaling::Linear { factor: 0.0 }, ..smollm2() };
        assert_eq!(c.validate().unwrap_err().field, "rope_scaling.factor");
    }
}
