//! Llama-family hyper-parameters, read from GGUF metadata or a Hugging Face
//! `config.json`, and checked for consistency before any allocation.

use kernels::ops::RopePairing;

/// Upper bounds that keep a crafted config from sizing absurd allocations.
/// They are far above any model this engine targets (SmolLM2-135M: 30
/// layers, width 576, vocabulary 49,152).
pub const MAX_LAYERS: usize = 512;
pub const MAX_WIDTH: usize = 65_536;
pub const MAX_VOCAB: usize = 1 << 20;
pub const MAX_CONTEXT: usize = 1 << 20;

/// Shape and numerics of a Llama-architecture decoder.
#[derive(Clone, Debug, PartialEq)]
pub struct LlamaConfig {
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
