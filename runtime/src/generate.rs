//! Classic decoding: prefill the prompt, then one forward pass per token,
//! stopping at an end-of-generation token or at the token budget.

use crate::model::llama::{ForwardError, LogitRows};
use crate::model::{Loaded, Session};
use crate::sampling::{Rng, SamplingParams, sample};
use kernels::dispatch::KernelFamily;
use serde::{Deserialize, Serialize};
use std::time::Instant;

/// Why generation stopped (OpenAI's `finish_reason` values).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// An end-of-generation token was produced (it is not part of the output).
    Stop,
    /// `max_tokens` was reached, or the model's context is full.
    Length,
}

/// The result of one request.
#[derive(Clone, Debug)]
pub struct Generation {
    pub prompt_tokens: usize,
    /// Generated ids, without the end-of-generation token.
    pub token_ids: Vec<u32>,
    pub finish_reason: FinishReason,
    /// Prefill: the prompt's forward pass, which also yields the first token.
    pub prefill_s: f64,
    /// Every forward pass after the prefill, with sampling.
    pub decode_s: f64,
    /// Number of one-token forward passes in `decode_s`.
    pub decode_steps: usize,
}

/// A loaded model with its thread pool and kernel family.
pub struct Engine {
    pub loaded: Loaded,
    pub family: KernelFamily,
    pub threads: usize,
    pool: rayon::ThreadPool,
}

#[derive(Debug, thiserror::Error)]
pub enum GenerateError {
    #[error(transparent)]
    Forward(#[from] ForwardError),
    #[error("empty prompt: at least one token is needed")]
    EmptyPrompt,
    #[error("could not start {threads} threads: {msg}")]
    Threads { threads: usize, msg: String },
}

impl Engine {
    pub fn new(loaded: Loaded, family: KernelFamily, threads: usize) -> Result<Self, GenerateError> {
        let threads = threads.max(1);
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("draftwise-{i}"))
            .build()
            .map_err(|e| GenerateError::Threads { threads, msg: e.to_string() })?;
        Ok(Engine { loaded, family, threads, pool })
    }

    /// Runs `f` on this engine's thread pool.
    pub fn install<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        self.pool.install(f)
    }

    /// Classic decoding of `prompt` for up to `max_tokens` tokens.
    pub fn generate(
        &self,
        prompt: &[u32],
        max_tokens: usize,
        sampling: &SamplingParams,
    ) -> Result<Generation, GenerateError> {
        if prompt.is_empty() {
            return Err(GenerateError::EmptyPrompt);
        }
        let model = &self.loaded.model;
        let tok = &self.loaded.tokenizer;
        let ctx = model.config.context_length;
        self.install(|| {
            let mut session = Session::new(&model.config);
            let mut rng = Rng::new(sampling.seed);
            let t0 = Instant::now();
            let mut logits = model.forward(self.family, &mut session, prompt, LogitRows::Last)?;
            let prefill_s = t0.elapsed().as_secs_f64();
            let t1 = Instant::now();
            let mut out = Vec::new();
            let mut steps = 0;
            let finish = loop {
                if out.len() >= max_tokens {
                    break FinishReason::Length;
                }
                let next = sample(&logits, sampling, &mut rng);
                if tok.is_end_of_generation(next) {
                    break FinishReason::Stop;
                }
                out.push(next);
                if out.len() >= max_tokens || session.len() >= ctx {
                    break FinishReason::Length;
                }
                logits = model.forward(self.family, &mut session, &[next], LogitRows::Last)?;
                steps += 1;
            };
            Ok(Generation {
                prompt_tokens: prompt.len(),
                token_ids: out,
                finish_reason: finish,
                prefill_s,
                decode_s: t1.elapsed().as_secs_f64(),
                decode_steps: steps,
            })
        })
    }
}
