//! The repetition, presence and frequency penalties: [`History`] counts the
//! tokens a sequence's penalties look at (its [`PenaltyScope`]) and applies
//! them to a row of logits.
//!
//! The counts are kept incrementally: the prompt is counted once, each
//! emitted token adds one count (and, under a window of the last `n`
//! tokens, takes back the one that left it), so applying the penalties costs
//! the number of distinct counted tokens, never a rescan of the context.
//!
//! A sequence's history holds the prompt and the tokens it emitted, nothing
//! drafted: a verify pass's row `j` is chosen from (penalized with) the
//! history as it stands after the round's first token and the drafts
//! `0..j` were accepted and emitted, which is exactly the history classic
//! decoding has at that position ([`crate::sequence`]). A rejected draft was
//! never counted, so there is nothing to undo.
//!
//! What each penalty does to a counted token `t` (count `c`), in this order
//! (vLLM's `apply_penalties` and llama.cpp's `llama_sampler_penalties`
//! agree): `logit /= r` when positive, `*= r` when negative (`r` the
//! repetition penalty); then `logit -= c·frequency + presence`.

use crate::sampling::{PenaltyScope, SamplingParams};
use std::collections::HashMap;

/// The counted tokens of one sequence.
#[derive(Clone, Debug)]
pub struct History {
    scope: PenaltyScope,
    /// The prompt, then every emitted token.
    tokens: Vec<u32>,
    prompt_len: usize,
    /// The counts the repetition penalty reads; under llama.cpp's scopes,
    /// the presence and frequency penalties read them too.
    counts: HashMap<u32, u32>,
    /// Under [`PenaltyScope::Vllm`], the output's counts (what presence and
    /// frequency read); `None` elsewhere.
    output: Option<HashMap<u32, u32>>,
}

fn add(m: &mut HashMap<u32, u32>, t: u32) {
    *m.entry(t).or_insert(0) += 1;
}

fn remove(m: &mut HashMap<u32, u32>, t: u32) {
    if let Some(c) = m.get_mut(&t) {
        *c -= 1;
        if *c == 0 {
            m.remove(&t);
        }
    }
}

impl History {
    /// The history of a sequence whose prompt is `prompt`, counted per `scope`.
    pub fn new(scope: PenaltyScope, prompt: &[u32]) -> Self {
        let mut counts = HashMap::new();
        let counted = match scope {
            PenaltyScope::Off => &prompt[..0],
            PenaltyScope::Last(n) => &prompt[prompt.len().saturating_sub(n)..],
            PenaltyScope::Context | PenaltyScope::Vllm => prompt,
        };
        for &t in counted {
            add(&mut counts, t);
        }
        let output = (scope == PenaltyScope::Vllm).then(HashMap::new);
        History { scope, tokens: prompt.to_vec(), prompt_len: prompt.len(), counts, output }
    }

    /// Counts `t`, the next token of the sequence.
    pub fn push(&mut self, t: u32) {
        self.tokens.push(t);
        match self.scope {
            PenaltyScope::Off => {}
            PenaltyScope::Context => add(&mut self.counts, t),
            PenaltyScope::Vllm => {
                add(&mut self.counts, t);
                add(self.output.as_mut().expect("vLLM's scope keeps the output's counts"), t);
            }
            PenaltyScope::Last(n) => {
                add(&mut self.counts, t);
                // The token that just left the window of the last n.
                if let Some(gone) = self.tokens.len().checked_sub(n + 1) {
                    remove(&mut self.counts, self.tokens[gone]);
                }
            }
        }
    }

    /// The tokens so far: the prompt, then the emitted ones.
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    /// Tokens emitted so far.
    pub fn emitted(&self) -> usize {
        self.tokens.len() - self.prompt_len
    }

    /// Applies `p`'s penalties to `logits` (one row, the vocabulary wide).
    /// Ids past the row (none in a valid sequence) are skipped.
    pub fn apply(&self, logits: &mut [f32], p: &SamplingParams) {
        if !p.penalized() {
            return;
        }
        let r = p.repetition_penalty;
        let shared = self.output.is_none();
        for (&t, &c) in &self.counts {
            let Some(l) = logits.get_mut(t as usize) else { continue };
            *l = repeat(*l, r);
            if shared {
                *l -= presence_frequency(c, p);
            }
        }
        if let Some(out) = &self.output {
            for (&t, &c) in out {
                if let Some(l) = logits.get_mut(t as usize) {
                    *l -= presence_frequency(c, p);
                }
            }
        }
    }
}

/// The repetition penalty `r` on one counted token's logit.
fn repeat(l: f32, r: f32) -> f32 {
    if l > 0.0 { l / r } else { l * r }
}

/// What presence and frequency subtract from a token counted `c > 0` times.
fn presence_frequency(c: u32, p: &SamplingParams) -> f32 {
    c as f32 * p.frequency_penalty + p.presence_penalty
}

/// `logits` penalized for `history` (the prompt's `prompt_len` tokens, then
/// the output) from scratch, with no counts kept: the specification
/// [`History`] must equal, for tests.
pub fn penalize_from_scratch(logits: &[f32], history: &[u32], prompt_len: usize, p: &SamplingParams) -> Vec<f32> {
    let mut out = logits.to_vec();
    if !p.penalized() {
        return out;
    }
    let (rep, pf): (&[u32], &[u32]) = match p.penalty_scope {
        PenaltyScope::Off => (&[], &[]),
        PenaltyScope::Context => (history, history),
        PenaltyScope::Last(n) => {
            let w = &history[history.len().saturating_sub(n)..];
            (w, w)
        }
        PenaltyScope::Vllm => (history, &history[prompt_len..]),
    };
    let count = |set: &[u32], t: u32| set.iter().filter(|&&x| x == t).count() as u32;
    for (t, l) in out.iter_mut().enumerate() {
        let t = t as u32;
        if count(rep, t) > 0 {
            *l = repeat(*l, p.repetition_penalty);
        }
        let c = count(pf, t);
        if c > 0 {
            *l -= presence_frequency(c, p);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(r: f32, presence: f32, frequency: f32, scope: PenaltyScope) -> SamplingParams {
        SamplingParams {
            repetition_penalty: r,
            presence_penalty: presence,
            frequency_penalty: frequency,
            penalty_scope: scope,
            ..Default::default()
        }
    }

    /// Values worked by hand: token 1 counted twice, 2 once, 0 and 3 never.
    #[test]
    fn each_penalty_changes_the_counted_logits_by_hand_computed_amounts() {
        let h = {
            let mut h = History::new(PenaltyScope::Context, &[1, 2]);
            h.push(1);
            h
        };
        let logits = [1.0f32, 2.0, -1.0, 0.5];
        // Repetition 2: positive 2.0 → 1.0, negative -1.0 → -2.0; the others stay.
        let mut l = logits;
        h.apply(&mut l, &params(2.0, 0.0, 0.0, PenaltyScope::Context));
        assert_eq!(l, [1.0, 1.0, -2.0, 0.5]);
        // Presence 0.5: once per counted token, whatever the count.
        let mut l = logits;
        h.apply(&mut l, &params(1.0, 0.5, 0.0, PenaltyScope::Context));
        assert_eq!(l, [1.0, 1.5, -1.5, 0.5]);
        // Frequency 0.25: per occurrence (token 1 twice: -0.5).
        let mut l = logits;
        h.apply(&mut l, &params(1.0, 0.0, 0.25, PenaltyScope::Context));
        assert_eq!(l, [1.0, 1.5, -1.25, 0.5]);
        // All three, repetition first: 2/2 - (2·0.25 + 0.5) = 0; -1·2 - (0.25 + 0.5) = -2.75.
        let mut l = logits;
        h.apply(&mut l, &params(2.0, 0.5, 0.25, PenaltyScope::Context));
        assert_eq!(l, [1.0, 0.0, -2.75, 0.5]);
        // Negative presence and frequency encourage repeats.
        let mut l = logits;
        h.apply(&mut l, &params(1.0, -0.5, -0.25, PenaltyScope::Context));
        assert_eq!(l, [1.0, 3.0, -0.25, 0.5]);
    }

    #[test]
    fn the_window_counts_only_the_last_n_tokens() {
        // Prompt [3, 1, 2], then 1: the last two are [2, 1].
        let mut h = History::new(PenaltyScope::Last(2), &[3, 1, 2]);
        h.push(1);
        let p = params(1.0, 1.0, 0.0, PenaltyScope::Last(2));
        let mut l = [0.0f32; 4];
        h.apply(&mut l, &p);
        assert_eq!(l, [0.0, -1.0, -1.0, 0.0]);
        // Off: nothing, whatever the penalties.
        let off = params(3.0, 1.0, 1.0, PenaltyScope::Off);
        let mut l = [1.0f32; 4];
        History::new(PenaltyScope::Off, &[0, 1, 2, 3]).apply(&mut l, &off);
        assert_eq!(l, [1.0; 4]);
        assert!(!off.penalized());
    }

    #[test]
    fn vllms_scope_repeats_over_prompt_and_output_and_counts_presence_in_the_output_only() {
        // Prompt [1, 1], output [2]: repetition touches 1 and 2, presence
        // and frequency only 2.
        let mut h = History::new(PenaltyScope::Vllm, &[1, 1]);
        h.push(2);
        let mut l = [4.0f32, 4.0, 4.0];
        h.apply(&mut l, &params(2.0, 0.5, 1.0, PenaltyScope::Vllm));
        assert_eq!(l, [4.0, 2.0, 2.0 - 1.5]);
    }

    /// The incremental counts equal counting from scratch at every step,
    /// for every scope, over a sequence that repeats and leaves windows.
    #[test]
    fn incremental_counts_equal_counting_from_scratch() {
        let prompt = [5u32, 1, 5, 2, 7];
        let out = [1u32, 1, 3, 5, 5, 5, 0, 2, 1, 7, 7];
        let logits: Vec<f32> = (0..8).map(|i| (i as f32 - 3.5) * 0.75).collect();
        for scope in [
            PenaltyScope::Last(1),
            PenaltyScope::Last(3),
            PenaltyScope::Last(64),
            PenaltyScope::Context,
            PenaltyScope::Off,
            PenaltyScope::Vllm,
        ] {
            let p = params(1.3, 0.4, 0.2, scope);
            let mut h = History::new(scope, &prompt);
            for k in 0..=out.len() {
                let mut l = logits.clone();
                h.apply(&mut l, &p);
                assert_eq!(l, penalize_from_scratch(&logits, h.tokens(), prompt.len(), &p), "{scope:?} step {k}");
                assert_eq!(h.emitted(), k);
                if k < out.len() {
                    h.push(out[k]);
                }
            }
        }
    }
}
