//! [`Streamed`]: one streamed completion as the client saw it, what a
//! served arm's rows are made of and what the rules compare with the
//! server's own `completion` event (the client that reads it is
//! [`crate::sweep::stream`]).
use runtime::events::{FinishReason, ServedTimings, Usage};

/// One streamed completion as the client saw it.
#[derive(Clone, Debug)]
pub struct Streamed {
    /// The response `id` (the server's `completion` event has it as `prompt_id`).
    pub id: String,
    /// The chunks' text concatenated.
    pub text: String,
    pub usage: Usage,
    pub finish_reason: FinishReason,
    /// From writing the request to the first chunk carrying a choice (the
    /// server sends it when the first token is emitted).
    pub ttft_ms: f64,
    /// From writing the request to `data: [DONE]`.
    pub e2e_ms: f64,
    /// `data:` events received, `[DONE]` included.
    pub chunks: usize,
    pub draftwise: Option<ServedTimings>,
}
