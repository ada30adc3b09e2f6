//! Decoder hyper-parameters, read from GGUF metadata or a Hugging Face
//! `config.json`, and checked for consistency before any allocation.
//!
//! One forward pass runs every architecture; [`Block`] holds what sets an
//! architecture's transformer block apart from Llama's (Gemma 3: a scaled
//! embedding, q/k norms, norms after attention and the FFN, GeGLU, local
//! sliding-window layers with their own RoPE base).

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
    Llama,
    Gemma3,
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
    /// Every `period`-th layer (the last of each period) is global; the
    /// others are local (Gemma 3: five local, one global).
    pub period: usize,
    /// RoPE base of the local layers (the global ones use the config's).
    pub rope_base: f32,
}

impl Sliding {
    pub fn is_local(&self, layer: usize) -> bool {
        layer % self.period < self.period - 1
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
}

impl Block {
    pub const LLAMA: Block = Block {
        arch: Arch::Llama,
        embed_scale: None,
        qk_norm: false,
        post_norms: false,
        ffn: Ffn::SwiGlu,
        sliding: None,
    };

    /// Gemma 3's block (llama.cpp's `gemma3` graph; Hugging Face's
    /// `Gemma3TextModel`), with the window its file gives.
    pub fn gemma3(dim: usize, window: usize) -> Block {
        Block {
            arch: Arch::Gemma3,
            embed_scale: Some((dim as f32).sqrt()),
            qk_norm: true,
            post_norms: true,
            ffn: Ffn::GeGluTanh,
            sliding: Some(Sliding { window, period: 6, rope_base: 10_000.0 }),
        }
    }

    /// Whether `layer` attends through a sliding window.
    pub fn is_local(&self, layer: usize) -> bool {
        self.sliding.is_some_and(|s| s.is_local(layer))
    }
}

/// Shape and numerics of a decoder.
#[derive(Clone, Debug, PartialEq)]
pub struct LlamaConfig {
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
    pub rms_eps: f32,
    /// Longest sequence the model was trained for; generation refuses to go past it.
    pub context_length: usize,
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

impl LlamaConfig {
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
            if sl.period < 2 {
                return Err(bad("sliding period", sl.period, "must be at least 2"));
            }
            if !(sl.rope_base.is_finite() && sl.rope_base > 1.0) {
                return Err(bad("local rope_base", sl.rope_base, "must be a finite number > 1"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_width_not_divisible_by_the_heads_is_named_as_such() {
        let e = implied_head_dim(576, 7).unwrap_err();
        assert_eq!(e.field, "dim");
        assert!(e.to_string().contains("not divisible by n_heads = 7"), "{e}");
        assert_eq!(implied_head_dim(576, 9), Ok(64));
        assert!(implied_head_dim(576, 0).is_err());
    }

    pub fn smollm2() -> LlamaConfig {
        LlamaConfig {
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
        let c = LlamaConfig { block: Block::gemma3(576, 0), ..smollm2() };
        assert_eq!(c.validate().unwrap_err().field, "sliding_window");
    }

    #[test]
    fn smollm2_shape_validates() {
        smollm2().validate().unwrap();
    }

    #[test]
    fn kv_heads_that_do_not_divide_heads_are_refused_by_name() {
        let c = LlamaConfig { n_kv_heads: 4, ..smollm2() };
        assert!(c.validate().unwrap_err().to_string().contains("n_kv_heads = 4"));
    }

    #[test]
    fn absurd_sizes_are_refused_before_allocation() {
        let c = LlamaConfig { n_layers: 1 << 30, ..smollm2() };
        assert_eq!(c.validate().unwrap_err().field, "n_layers");
        let c = LlamaConfig { rope_base: f32::NAN, ..smollm2() };
        assert_eq!(c.validate().unwrap_err().field, "rope_base");
    }
}
