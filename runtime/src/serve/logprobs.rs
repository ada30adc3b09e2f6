//! Log probabilities for `/v1/completions` (`logprobs: N`, `echo`) and
//! `/v1/chat/completions` (`logprobs: true`, `top_logprobs: N`).
//!
//! They come from a scoring pass after the generation, over the prompt and
//! the emitted tokens, with logits for every row ([`score`]). Each row of a
//! forward pass is computed with the arithmetic of the one-token chain
//! whatever the block it is in (the invariant the exactness probe checks and
//! `runtime/tests/prefill_chunks.rs` tests), so these are the logits the
//! decoder chose each token from, and they are the same whether it
//! speculated or not. The pass costs about one prefill of the scored
//! tokens; requests without `logprobs` never run it. Like a prefill, it
//! runs in chunks (the cache-filling part in [`PREFILL_CHUNK`]s, the scored
//! part in [`SCORE_ROWS`]) and asks before each chunk whether the request
//! is still wanted (client gone, deadline passed, shutdown), so an 8,000-
//! token echo neither holds the engine past its deadline nor takes the
//! memory of one 8,000-row pass. The values are the model's own
//! distribution (log-softmax of the raw logits), before temperature, top-k
//! or top-p, as vLLM reports them.

use crate::engine::{Engine, PREFILL_CHUNK};
use crate::model::{LogitRows, Session};
use crate::tokenizer::Tokenizer;
use serde_json::{Value, json};

/// Most alternatives per token a request may ask for (OpenAI's limit).
pub const MAX_TOP_LOGPROBS: usize = 20;

/// Rows per scoring pass: bounds the logits held at once to this many
/// vocabulary-sized rows (16 × 151,936 floats = 9.7 MB for Qwen).
pub const SCORE_ROWS: usize = 16;

/// One scored token: its log probability and the `top` most likely tokens
/// at its position (highest first; equal ones by id).
#[derive(Clone, Debug, PartialEq)]
pub struct Scored {
    pub id: u32,
    pub logprob: f64,
    pub top: Vec<(u32, f64)>,
}

/// Why a scoring pass gave no scores.
#[derive(Debug, PartialEq)]
pub enum ScoreError {
    /// `cancelled` said so before a chunk.
    Cancelled,
    /// A forward pass failed.
    Forward(String),
}

/// Scores `seq[j]` for every `j` in `max(from, 1)..seq.len()` from the
/// logits after `seq[..j]` (the first token of a sequence has no
/// probability). `top` alternatives per position, at most
/// [`MAX_TOP_LOGPROBS`]. `cancelled` is asked before every chunk.
pub fn score(
    engine: &Engine,
    seq: &[u32],
    from: usize,
    top: usize,
    cancelled: &dyn Fn() -> bool,
) -> Result<Vec<Scored>, ScoreError> {
    let top = top.min(MAX_TOP_LOGPROBS);
    let first = from.max(1);
    if first >= seq.len() {
        return Ok(Vec::new());
    }
    let model = &engine.loaded.model;
    let vocab = model.config.vocab;
    let forward = |session: &mut Session, chunk: &[u32], rows: LogitRows| {
        if cancelled() {
            return Err(ScoreError::Cancelled);
        }
        engine
            .install(|| model.forward(engine.family, session, chunk, rows))
            .map_err(|e| ScoreError::Forward(e.to_string()))
    };
    let mut session = Session::new(&model.config);
    // The row of position `first - 1` predicts `seq[first]`: the
    // positions before it only fill the cache, a prefill's chunk at a time.
    let start = first - 1;
    for chunk in seq[..start].chunks(PREFILL_CHUNK) {
        forward(&mut session, chunk, LogitRows::Last)?;
    }
    let mut out = Vec::with_capacity(seq.len() - first);
    let rows = &seq[start..seq.len() - 1];
    for (c, chunk) in rows.chunks(SCORE_ROWS).enumerate() {
        let logits = forward(&mut session, chunk, LogitRows::All)?;
        for (k, row) in logits.chunks_exact(vocab).enumerate() {
            let at = start + c * SCORE_ROWS + k + 1;
            out.push(scored(row, seq[at], top));
        }
    }
    Ok(out)
}

/// Log-softmax of one row at `id`, and its `top` entries.
fn scored(row: &[f32], id: u32, top: usize) -> Scored {
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let sum: f64 = row.iter().map(|&x| (x as f64 - max).exp()).sum();
    let norm = max + sum.ln();
    let lp = |i: usize| row[i] as f64 - norm;
    let mut best: Vec<(u32, f64)> = Vec::with_capacity(top + 1);
    if top > 0 {
        for (i, &x) in row.iter().enumerate() {
            // Keep the `top` largest, earlier ids first among equals.
            if best.len() < top || x as f64 - norm > best[best.len() - 1].1 {
                let v = lp(i);
                let pos = best.partition_point(|&(_, b)| b >= v);
                best.insert(pos, (i as u32, v));
                best.truncate(top);
            }
        }
    }
    Scored { id, logprob: lp(id as usize), top: best }
}

/// A token's text as a response shows it (whole tokens that end inside a
/// UTF-8 character show U+FFFD, as OpenAI's do) and its bytes.
fn token_text(tok: &Tokenizer, id: u32) -> String {
    tok.decode(&[id]).unwrap_or_default()
}

/// `/v1/completions`' `logprobs` object: `tokens`, `token_logprobs`,
/// `top_logprobs` (one object per token, text → logprob) and
/// `text_offset` (each token's start in the response text, in bytes).
/// `leading` unscored tokens (the first prompt token under `echo`) get
/// `null`s.
pub fn completions_json(tok: &Tokenizer, leading: &[u32], scored: &[Scored]) -> Value {
    let (mut tokens, mut lps, mut tops, mut offsets) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut offset = 0;
    for &id in leading {
        let t = token_text(tok, id);
        offsets.push(json!(offset));
        offset += t.len();
        tokens.push(json!(t));
        lps.push(Value::Null);
        tops.push(Value::Null);
    }
    for s in scored {
        let t = token_text(tok, s.id);
        offsets.push(json!(offset));
        offset += t.len();
        tokens.push(json!(t));
        lps.push(json!(s.logprob));
        let mut m = serde_json::Map::new();
        for &(id, lp) in &s.top {
            // Two ids that decode alike keep the likelier one (the first).
            m.entry(token_text(tok, id)).or_insert(json!(lp));
        }
        tops.push(Value::Object(m));
    }
    json!({"tokens": tokens, "token_logprobs": lps, "top_logprobs": tops, "text_offset": offsets})
}

/// `/v1/chat/completions`' `logprobs` object: `{"content": [{token,
/// logprob, bytes, top_logprobs: [{token, logprob, bytes}]}]}`.
pub fn chat_json(tok: &Tokenizer, scored: &[Scored]) -> Value {
    let entry = |id: u32, lp: f64| {
        let t = token_text(tok, id);
        let bytes: Vec<u8> = t.as_bytes().to_vec();
        json!({"token": t, "logprob": lp, "bytes": bytes})
    };
    let content: Vec<Value> = scored
        .iter()
        .map(|s| {
            let mut e = entry(s.id, s.logprob);
            e["top_logprobs"] = Value::Array(s.top.iter().map(|&(id, lp)| entry(id, lp)).collect());
            e
        })
        .collect();
    json!({"content": content, "refusal": null})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_is_log_softmaxed_and_its_top_entries_are_the_largest_first() {
        let row = [1.0f32, 3.0, 2.0, 3.0, -1.0];
        let s = scored(&row, 2, 3);
        let norm = (row.iter().map(|&x| (x as f64).exp()).sum::<f64>()).ln();
        assert!((s.logprob - (2.0 - norm)).abs() < 1e-12);
        // 3.0 twice (ids 1 and 3, lower id first), then 2.0.
        assert_eq!(s.top.iter().map(|t| t.0).collect::<Vec<_>>(), [1, 3, 2]);
        let total: f64 = row.iter().map(|&x| (x as f64 - norm).exp()).sum();
        assert!((total - 1.0).abs() < 1e-12);
        assert!(scored(&row, 0, 0).top.is_empty());
    }
}
