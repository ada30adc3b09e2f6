//! The `Drafter` abstraction and its kinds: prompt lookup (`ngram`), and
//! model drafters — the target's own first layers (`layerskip`) or a
//! separate checkpoint (`draft-model`).

use super::DrafterKind;
use crate::model::llama::{ForwardError, LogitRows};
use crate::model::{Loaded, Model, Session};
use crate::sampling::{Rng, SamplingParams, argmax, distribution, draw};
use kernels::dispatch::KernelFamily;

/// Tokens a drafter proposes, and — for drafters that sample — the
/// distribution each was drawn from, which speculative sampling needs.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Proposal {
    pub tokens: Vec<u32>,
    /// Per token, the drafter's (token, probability) pairs; `None` means
    /// each token was proposed with certainty (a point mass).
    pub dists: Option<Vec<Vec<(u32, f64)>>>,
}

impl Proposal {
    /// The drafter's probability of proposing `tokens[i]`.
    pub fn q_of(&self, i: usize) -> f64 {
        match &self.dists {
            None => 1.0,
            Some(d) => d[i].iter().find(|(t, _)| *t == self.tokens[i]).map_or(0.0, |(_, p)| *p),
        }
    }
}

/// Proposes continuations of a token context.
pub trait Drafter: Send {
    fn kind(&self) -> DrafterKind;

    /// Up to `max` tokens to follow `context` (prompt plus every token
    /// emitted so far). Fewer, or none, is a valid answer.
    fn propose(
        &mut self,
        family: KernelFamily,
        context: &[u32],
        max: usize,
        sampling: &SamplingParams,
        rng: &mut Rng,
    ) -> Result<Proposal, ForwardError>;
}

/// Prompt-lookup drafting (Saxena 2023): find the most recent earlier
/// occurrence of the context's last `n` tokens, for `n` from `max_n` down to
/// `min_n`, and propose the tokens that followed it.
#[derive(Clone, Debug)]
pub struct NgramDrafter {
    pub max_n: usize,
    pub min_n: usize,
}

/// Default longest pattern (`--ngram-max`).
pub const DEFAULT_NGRAM_MAX: usize = 4;
/// Default shortest pattern (`--ngram-min`). 3, not 1: a one- or two-token
/// match is mostly chance in free text, and each chance draft costs a verify
/// block that is rejected. With `runtime bench --drafter ngram` (1 thread,
/// the built-in prompt set, docs/performance.md), min 1 ran free writing at
/// 0.70x / 0.53x classic at W = 3 / 6, min 3 at 1.11x / 1.12x (it drafts
/// only where a real repeat starts), and the editing task rose from 1.48x /
/// 1.61x to 1.95x / 2.22x.
pub const DEFAULT_NGRAM_MIN: usize = 3;

impl Default for NgramDrafter {
    fn default() -> Self {
        NgramDrafter { max_n: DEFAULT_NGRAM_MAX, min_n: DEFAULT_NGRAM_MIN }
    }
}

impl NgramDrafter {
    /// The lookup itself, separate from the trait for tests.
    pub fn lookup(&self, context: &[u32], max: usize) -> Vec<u32> {
        let len = context.len();
        for n in (self.min_n.max(1)..=self.max_n).rev() {
            if n >= len {
                continue;
            }
            let pattern = &context[len - n..];
            // Occurrences that end before the context does, most recent first.
            for start in (0..len - n).rev() {
                if &context[start..start + n] == pattern {
                    let from = start + n;
                    return context[from..(from + max).min(len)].to_vec();
                }
            }
        }
        Vec::new()
    }
}

impl Drafter for NgramDrafter {
    fn kind(&self) -> DrafterKind {
        DrafterKind::Ngram
    }

    fn propose(
        &mut self,
        _family: KernelFamily,
        context: &[u32],
        max: usize,
        _sampling: &SamplingParams,
        _rng: &mut Rng,
    ) -> Result<Proposal, ForwardError> {
        Ok(Proposal { tokens: self.lookup(context, max), dists: None })
    }
}

/// A drafter that runs a model of its own: `layerskip` (a truncated copy of
/// the target sharing its weights) or `draft-model` (another checkpoint).
/// It keeps a KV cache mirroring the longest prefix of the context it has
/// seen, so each round only feeds what is new.
pub struct ModelDrafter {
    kind: DrafterKind,
    model: Model,
    session: Session,
    /// The tokens `session` holds.
    fed: Vec<u32>,
    /// Logits after `fed`, when the last thing run was `fed`'s last token.
    pending: Option<Vec<f32>>,
}

impl ModelDrafter {
    pub fn new(kind: DrafterKind, model: Model) -> Self {
        let session = Session::new(&model.config);
        ModelDrafter { kind, model, session, fed: Vec::new(), pending: None }
    }

    /// Self-speculation: the target's layers `layers` (in order), its
    /// embedding, final norm and head. The weights are shared, not copied,
    /// for GGUF targets.
    pub fn layerskip(target: &Model, layers: &[usize]) -> Result<Self, String> {
        if layers.is_empty() {
            return Err("layerskip needs at least one layer".into());
        }
        if let Some(&bad) = layers.iter().find(|&&l| l >= target.config.n_layers) {
            return Err(format!("layerskip layer {bad} does not exist (the target has {})", target.config.n_layers));
        }
        let mut config = target.config.clone();
        config.n_layers = layers.len();
        let weights = crate::model::weights::LlamaWeights {
            embed: target.weights.embed.clone(),
            layers: layers.iter().map(|&l| target.weights.layers[l].clone()).collect(),
            out_norm: target.weights.out_norm.clone(),
            head: target.weights.head.clone(),
        };
        Ok(ModelDrafter::new(DrafterKind::Layerskip, Model::new(config, weights)))
    }
}

impl Drafter for ModelDrafter {
    fn kind(&self) -> DrafterKind {
        self.kind
    }

    fn propose(
        &mut self,
        family: KernelFamily,
        context: &[u32],
        max: usize,
        sampling: &SamplingParams,
        rng: &mut Rng,
    ) -> Result<Proposal, ForwardError> {
        if max == 0 || context.is_empty() {
            return Ok(Proposal::default());
        }
        // Keep the longest common prefix of what the cache holds and the context.
        let lcp = self.fed.iter().zip(context).take_while(|(a, b)| a == b).count();
        if lcp < self.fed.len() {
            self.session.truncate(lcp);
            self.fed.truncate(lcp);
            self.pending = None;
        }
        if self.fed.len() == context.len() && self.pending.is_none() {
            // The cache holds the whole context but not its last logits:
            // re-run the last position.
            self.session.truncate(context.len() - 1);
            self.fed.pop();
        }
        // The draft model's context is bounded by its own context length.
        let room = self.model.config.context_length.saturating_sub(self.session.len());
        if room <= context.len() - self.fed.len() {
            return Ok(Proposal::default());
        }
        let max = max.min(room - (context.len() - self.fed.len()));
        if self.fed.len() < context.len() {
            let new = &context[self.fed.len()..];
            self.pending = Some(self.model.forward(family, &mut self.session, new, LogitRows::Last)?);
            self.fed.extend_from_slice(new);
        }
        let mut tokens = Vec::with_capacity(max);
        let mut dists = Vec::new();
        for i in 0..max {
            let logits = self.pending.take().expect("logits after the fed context");
            let t = if sampling.is_greedy() {
                argmax(&logits)
            } else {
                let d = distribution(&logits, sampling);
                let t = draw(&d, rng);
                dists.push(d);
                t
            };
            tokens.push(t);
            if i + 1 < max {
                self.pending = Some(self.model.forward(family, &mut self.session, &[t], LogitRows::Last)?);
                self.fed.push(t);
            }
        }
        Ok(Proposal { tokens, dists: (!sampling.is_greedy()).then_some(dists) })
    }
}

/// Why a draft model cannot serve a target.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("draft model {drafter} does not share the target's tokenizer: {problem}")]
pub struct IncompatibleDrafter {
    pub drafter: String,
    pub problem: String,
}

/// Checks, once, that a draft model tokenizes exactly as the target does:
/// same vocabulary size, same token strings, same special tokens, same
/// merges (compared through the encodings of a probe text).
pub fn check_compatible(target: &Loaded, drafter: &Loaded) -> Result<(), IncompatibleDrafter> {
    let err = |problem: String| IncompatibleDrafter { drafter: drafter.info.path.display().to_string(), problem };
    let (t, d) = (&target.tokenizer, &drafter.tokenizer);
    if t.vocab_size() != d.vocab_size() {
        return Err(err(format!("vocabulary sizes differ (target {}, drafter {})", t.vocab_size(), d.vocab_size())));
    }
    if target.model.config.vocab != drafter.model.config.vocab {
        return Err(err(format!(
            "embedding rows differ (target {}, drafter {})",
            target.model.config.vocab, drafter.model.config.vocab
        )));
    }
    for id in 0..t.vocab_size() as u32 {
        if t.id_to_token(id) != d.id_to_token(id) {
            return Err(err(format!(
                "token {id} is {:?} in the target, {:?} in the drafter",
                t.id_to_token(id),
                d.id_to_token(id)
            )));
        }
    }
    if (t.bos, t.eos) != (d.bos, d.eos) || t.end_of_generation != d.end_of_generation {
        return Err(err(format!(
            "special tokens differ (bos/eos/end-of-generation: target {:?}/{:?}/{:?}, drafter {:?}/{:?}/{:?})",
            t.bos, t.eos, t.end_of_generation, d.bos, d.eos, d.end_of_generation
        )));
    }
    // Same vocabulary and specials; merges decide the rest of encoding.
    for probe in MERGE_PROBES {
        if t.encode(probe).ok() != d.encode(probe).ok() {
            return Err(err(format!("merges differ: {probe:?} encodes differently")));
        }
    }
    Ok(())
}

/// Texts whose encodings exercise many merges.
const MERGE_PROBES: &[&str] = &[
    "The quick brown fox jumps over the lazy dog, internationalization and counterrevolutionaries.",
    "def fibonacci(n):\n    return n if n < 2 else fibonacci(n - 1) + fibonacci(n - 2)\n",
    "  multiple   spaces\tand\ttabs\n\nnewlines 1234567890 ¿Qué tal? 你好 🦀",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ngram_proposes_what_followed_the_most_recent_match() {
        let d = NgramDrafter { max_n: 3, min_n: 1 };
        // ... 1 2 3 [9 9] ... 1 2 3 [7 7] ... 1 2 3 → the later occurrence wins.
        let ctx = [1, 2, 3, 9, 9, 5, 1, 2, 3, 7, 7, 6, 1, 2, 3];
        assert_eq!(d.lookup(&ctx, 2), vec![7, 7]);
        assert_eq!(d.lookup(&ctx, 10), vec![7, 7, 6, 1, 2, 3]);
    }

    #[test]
    fn ngram_falls_back_to_shorter_patterns_and_may_find_nothing() {
        let d = NgramDrafter { max_n: 3, min_n: 1 };
        assert_eq!(d.lookup(&[4, 5, 6, 8, 6], 3), vec![8, 6]);
        assert!(d.lookup(&[1, 2, 3, 4], 3).is_empty());
        assert!(NgramDrafter { max_n: 3, min_n: 2 }.lookup(&[4, 5, 6, 8, 6], 3).is_empty());
        assert!(d.lookup(&[], 3).is_empty());
        assert!(d.lookup(&[1], 3).is_empty());
    }

    #[test]
    fn point_mass_proposals_have_q_one() {
        let p = Proposal { tokens: vec![3], dists: None };
        assert_eq!(p.q_of(0), 1.0);
        let p = Proposal { tokens: vec![3], dists: Some(vec![vec![(1, 0.5), (3, 0.25)]]) };
        assert_eq!(p.q_of(0), 0.25);
    }
}
