//! Classic decoding: prefill the prompt, then one forward pass per token,
//! stopping at an end-of-generation token or at the token budget.

use crate::model::forward::{ForwardError, LogitRows};
use crate::model::{Loaded, Session};
use crate::pool::Pool;
use crate::sampling::SamplingParams;
use kernels::dispatch::KernelFamily;
use serde::{Deserialize, Serialize};
use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Instant;

/// Why generation stopped (OpenAI's `finish_reason` values).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// An end-of-generation token was produced (it is not part of the
    /// output), or a [`TokenSink`] halted with [`Halt::Stop`] (a stop string).
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

impl Generation {
    /// A generation that ended for `finish_reason`, its decoding begun at
    /// `decode_start` (now is its end).
    pub(crate) fn finished(
        prompt_tokens: usize,
        token_ids: Vec<u32>,
        finish_reason: FinishReason,
        prefill_s: f64,
        decode_start: Instant,
        decode_steps: usize,
    ) -> Self {
        let decode_s = decode_start.elapsed().as_secs_f64();
        Generation { prompt_tokens, token_ids, finish_reason, prefill_s, decode_s, decode_steps }
    }
}

/// Why a [`TokenSink`] ends a generation early.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Halt {
    /// Finish normally with [`FinishReason::Stop`], keeping the tokens so far
    /// (the token just reported included): a stop string was produced.
    Stop,
    /// Abandon the request: the decoder returns [`GenerateError::Cancelled`]
    /// (the client went away).
    Cancel,
}

/// Sees every emitted token, in order, as soon as the decoder commits to it
/// (the server streams and cancels through this). It cannot change which
/// tokens are emitted, only end the generation after one. `Send`: decoding
/// runs on the engine's thread pool.
pub trait TokenSink: Send {
    fn token(&mut self, id: u32) -> ControlFlow<Halt>;

    /// Whether the request should be abandoned now, before any token: asked
    /// between chunks of the prompt's prefill ([`Engine::prefill_cancellable`]),
    /// so a departed client or a passed deadline frees the engine without
    /// waiting for the whole prompt.
    fn cancelled(&self) -> bool {
        false
    }
}

/// The sink of callers that only want the finished [`Generation`].
pub struct NoSink;

impl TokenSink for NoSink {
    fn token(&mut self, _id: u32) -> ControlFlow<Halt> {
        ControlFlow::Continue(())
    }
}

/// The state after a prompt's forward pass. Cloning it lets several
/// decodes start from one prefill (as tests comparing decoders do).
#[derive(Clone, Debug)]
pub struct Prefilled {
    pub prompt: Vec<u32>,
    pub session: Session,
    /// Logits for the token after the prompt.
    pub logits: Vec<f32>,
    pub prefill_s: f64,
}

/// The stop rule after emitting the `n_out`-th token, shared by every
/// decoder so they stop at exactly the same place: the token budget, or a
/// full context (the cache then holds `n_prompt + n_out - 1` positions and
/// the next forward pass would pass the model's context length).
pub fn at_limit(n_prompt: usize, n_out: usize, max_tokens: usize, context_length: usize) -> bool {
    n_out >= max_tokens || n_prompt + n_out > context_length
}

/// Prompt tokens per forward pass of a cancellable prefill: the engine
/// notices a cancellation within one chunk's time (about 0.3 s for the
/// default model on 2 cores at the end of an 8k context; docs/serve.md).
pub const PREFILL_CHUNK: usize = 128;

/// A loaded model with its thread pool and kernel family.
pub struct Engine {
    pub loaded: Loaded,
    pub family: KernelFamily,
    pub threads: usize,
    pool: Arc<Pool>,
}

#[derive(Debug, thiserror::Error)]
pub enum GenerateError {
    #[error(transparent)]
    Forward(#[from] ForwardError),
    #[error("empty prompt: at least one token is needed")]
    EmptyPrompt,
    #[error("could not start {threads} threads: {msg}")]
    Threads { threads: usize, msg: String },
    #[error("the request was cancelled")]
    Cancelled,
    #[error("{0}")]
    Vocabulary(String),
}

impl Engine {
    pub fn new(loaded: Loaded, family: KernelFamily, threads: usize) -> Result<Self, GenerateError> {
        loaded.info.check_vocabulary(loaded.tokenizer.vocab_size()).map_err(GenerateError::Vocabulary)?;
        let threads = threads.max(1);
        let pool = Pool::new(threads).map_err(|e| GenerateError::Threads { threads, msg: e.to_string() })?;
        Ok(Engine { loaded, family, threads, pool })
    }

    /// Runs `f` on this engine's thread pool.
    pub fn install<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        self.pool.install(f)
    }

    /// Runs the prompt through the model: the cache it leaves and the
    /// logits that choose the first token.
    pub fn prefill(&self, prompt: &[u32]) -> Result<Prefilled, GenerateError> {
        if prompt.is_empty() {
            return Err(GenerateError::EmptyPrompt);
        }
        let model = &self.loaded.model;
        self.install(|| {
            let mut session = Session::new(&model.config);
            let t0 = Instant::now();
            let logits = model.forward(self.family, &mut session, prompt, LogitRows::Last)?;
            Ok(Prefilled { prompt: prompt.to_vec(), session, logits, prefill_s: t0.elapsed().as_secs_f64() })
        })
    }

    /// [`Engine::prefill`] in chunks of [`PREFILL_CHUNK`] tokens, asking
    /// `cancelled` before each one ([`GenerateError::Cancelled`] when it says
    /// so). Each row of a forward pass is computed with the arithmetic of the
    /// one-token chain whatever the block it is in (the invariant the
    /// exactness probe checks), so the logits equal [`Engine::prefill`]'s bit
    /// for bit (`runtime/tests/prefill_chunks.rs`).
    pub fn prefill_cancellable(
        &self,
        prompt: &[u32],
        cancelled: &dyn Fn() -> bool,
    ) -> Result<Prefilled, GenerateError> {
        if prompt.is_empty() {
            return Err(GenerateError::EmptyPrompt);
        }
        let model = &self.loaded.model;
        let mut session = Session::new(&model.config);
        let t0 = Instant::now();
        let mut logits = Vec::new();
        for chunk in prompt.chunks(PREFILL_CHUNK) {
            if cancelled() {
                return Err(GenerateError::Cancelled);
            }
            logits = self.install(|| model.forward(self.family, &mut session, chunk, LogitRows::Last))?;
        }
        Ok(Prefilled { prompt: prompt.to_vec(), session, logits, prefill_s: t0.elapsed().as_secs_f64() })
    }

    /// Classic decoding of `prompt` for up to `max_tokens` tokens.
    pub fn generate(
        &self,
        prompt: &[u32],
        max_tokens: usize,
        sampling: &SamplingParams,
    ) -> Result<Generation, GenerateError> {
        let p = self.prefill(prompt)?;
        self.decode(p, max_tokens, sampling)
    }

    /// Classic decoding after a prefill: one forward pass per token.
    pub fn decode(
        &self,
        p: Prefilled,
        max_tokens: usize,
        sampling: &SamplingParams,
    ) -> Result<Generation, GenerateError> {
        self.decode_with(p, max_tokens, sampling, &mut NoSink)
    }

    /// [`Engine::decode`], reporting each emitted token to `sink` before the
    /// next forward pass.
    pub fn decode_with(
        &self,
        p: Prefilled,
        max_tokens: usize,
        sampling: &SamplingParams,
        sink: &mut dyn TokenSink,
    ) -> Result<Generation, GenerateError> {
        self.decode_with_eos(p, max_tokens, sampling, sink, false)
    }
}
