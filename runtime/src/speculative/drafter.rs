//! The `Drafter` abstraction and its kinds: prompt lookup (`ngram`), suffix
//! matching with frequency-based draft length (`suffix`), and model drafters — the target's own first layers (`layerskip`) or a
//! separate checkpoint (`draft-model`).

use super::DrafterKind;
use crate::model::forward::{ForwardError, LogitRows};
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

    /// What drafting one token costs, in one-row passes of `target`: 0 for
    /// the weight-free drafters (a lookup in the context), the ratio of the
    /// weights streamed per step for a drafter that runs a model
    /// ([`crate::model::weights::ModelWeights::step_bytes`]). A fixed
    /// number, not a timing, so the adaptive draft lengths (and a seeded
    /// sampled run) do not depend on the host's load.
    fn step_cost(&self, _target: &Model) -> f64 {
        0.0
    }

    /// A drafter of the same kind and settings with no state of its own
    /// yet, for another sequence decoded beside this one's (the server's
    /// batches): weights are shared, caches are not.
    fn fork(&self) -> Box<dyn Drafter>;
}

/// A drafter that copies from the context alone (no weights, no state
/// between rounds): its proposal is a point mass on each looked-up token.
pub trait ContextLookup: Send + Clone + 'static {
    const KIND: DrafterKind;
    /// Up to `max` tokens proposed to follow `context`.
    fn lookup(&self, context: &[u32], max: usize) -> Vec<u32>;
}

impl<T: ContextLookup> Drafter for T {
    fn kind(&self) -> DrafterKind {
        T::KIND
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

    fn fork(&self) -> Box<dyn Drafter> {
        Box::new(self.clone())
    }
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

impl ContextLookup for NgramDrafter {
    const KIND: DrafterKind = DrafterKind::Ngram;

    fn lookup(&self, context: &[u32], max: usize) -> Vec<u32> {
        NgramDrafter::lookup(self, context, max)
    }
}

/// Suffix drafting, in the spirit of SuffixDecoding (Oliaro et al. 2024):
/// find the longest match of the context's end earlier in the context (the
/// prompt and everything generated so far), then draft the continuation its
/// earlier occurrences agree on, for as long as they agree often enough.
///
/// Where `ngram` takes the single most recent occurrence and copies what
/// followed it, this drafter weighs every occurrence of the longest match:
/// a repeat that always continued the same way is drafted far, one whose
/// occurrences went different ways is drafted short or not at all. It keeps
/// no state between rounds: the proposal is a function of the context alone.
#[derive(Clone, Debug)]
pub struct SuffixDrafter {
    /// Shortest match that drafts at all.
    pub min_match: usize,
    /// Longest match looked for.
    pub max_match: usize,
    /// The draft stops where the share of candidates agreeing with it, the
    /// product over its tokens, would fall below this.
    pub min_prob: f64,
}

/// Default shortest match (`--suffix-min-match`). 2, below ngram's 3,
/// because this drafter has two further guards against chance matches that
/// prompt lookup lacks: a short match drafts little (its budget is twice its
/// length), and a pair of tokens that recurs with different continuations
/// fails the `min_prob` test at its first token. A single token matches by
/// chance nearly everywhere, so 1 would draft on most rounds of free text.
pub const DEFAULT_SUFFIX_MIN_MATCH: usize = 2;
/// Default longest match (`--suffix-max-match`). 32: a match's budget is
/// twice its length, so any match of 16 or more already covers the widest
/// verify block the policy allows (32); looking further only narrows the
/// candidates to the very latest repeats, while the scan's cost grows with
/// the bound.
pub const DEFAULT_SUFFIX_MAX_MATCH: usize = 32;
/// Default agreement (`--suffix-min-prob`). 0.5: a token is drafted only while
/// the earlier occurrences say it is more likely than not (by their count)
/// that the whole draft so far continues this way; below that the frequency
/// estimate predicts the verify rows are more likely rejected than accepted.
pub const DEFAULT_SUFFIX_MIN_PROB: f64 = 0.5;

impl Default for SuffixDrafter {
    fn default() -> Self {
        SuffixDrafter {
            min_match: DEFAULT_SUFFIX_MIN_MATCH,
            max_match: DEFAULT_SUFFIX_MAX_MATCH,
            min_prob: DEFAULT_SUFFIX_MIN_PROB,
        }
    }
}

impl SuffixDrafter {
    /// The longest match `k` (at most `max_match`) of the context's last
    /// tokens that also ends at an earlier position `p < len - 1`, and every
    /// such `p`, oldest first. `k` is 0 when no token recurs.
    pub fn longest_match(&self, context: &[u32]) -> (usize, Vec<usize>) {
        let len = context.len();
        let (mut best, mut ends) = (0, Vec::new());
        if len < 2 {
            return (0, ends);
        }
        let last = len - 1;
        for p in 0..last {
            // The match may overlap the context's end (a run repeats itself);
            // it may not reach before the context's start (m <= p).
            let mut m = 0;
            while m < self.max_match && m <= p && context[p - m] == context[last - m] {
                m += 1;
            }
            if m > best {
                best = m;
                ends.clear();
            }
            if m == best && m > 0 {
                ends.push(p);
            }
        }
        (best, ends)
    }

    /// The draft itself, separate from the trait for tests.
    pub fn lookup(&self, context: &[u32], max: usize) -> Vec<u32> {
        let (k, mut active) = self.longest_match(context);
        if k == 0 || k < self.min_match {
            return Vec::new();
        }
        // A short match is weak evidence that the two places are the same
        // text: a couple of tokens recur by chance, and the continuations
        // after a chance match part after a token or two. A longer match
        // says more about how far the repeat runs, so the draft may grow
        // with it; twice the match keeps a 2-token match to 4 drafts.
        let budget = max.min(2 * k);
        let len = context.len();
        let mut draft = Vec::with_capacity(budget);
        let mut prob = 1.0f64;
        for j in 1..=budget {
            // Candidates with a token at p + j, each next token's count and
            // its most recent candidate (active is oldest first).
            active.retain(|&p| p + j < len);
            if active.is_empty() {
                break;
            }
            let mut counts: std::collections::BTreeMap<u32, (usize, usize)> = std::collections::BTreeMap::new();
            for &p in &active {
                let c = counts.entry(context[p + j]).or_insert((0, p));
                c.0 += 1;
                c.1 = c.1.max(p);
            }
            // The most frequent; among equals, the most recent candidate's.
            let Some((&token, &(count, _))) = counts.iter().max_by_key(|&(_, &(n, recent))| (n, recent)) else {
                break;
            };
            prob *= count as f64 / active.len() as f64;
            if prob < self.min_prob {
                break;
            }
            draft.push(token);
            active.retain(|&p| context[p + j] == token);
        }
        draft
    }
}

impl ContextLookup for SuffixDrafter {
    const KIND: DrafterKind = DrafterKind::Suffix;

    fn lookup(&self, context: &[u32], max: usize) -> Vec<u32> {
        SuffixDrafter::lookup(self, context, max)
    }
}

/// A drafter that runs a model of its own: `layerskip` (a truncated copy of
/// the target sharing its weights) or `draft-model` (another checkpoint).
/// It keeps a KV cache mirroring the longest prefix of the context it has
/// seen, so each round only feeds what is new.
pub struct ModelDrafter {
    kind: DrafterKind,
    /// Shared with the drafter's forks.
    model: std::sync::Arc<Model>,
    session: Session,
    /// The tokens `session` holds.
    fed: Vec<u32>,
    /// Logits after `fed`, when the last thing run was `fed`'s last token.
    pending: Option<Vec<f32>>,
}

impl ModelDrafter {
    pub fn new(kind: DrafterKind, model: Model) -> Self {
        let session = Session::new(&model.config);
        ModelDrafter { kind, model: std::sync::Arc::new(model), session, fed: Vec::new(), pending: None }
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
        let weights = crate::model::weights::ModelWeights {
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

    fn step_cost(&self, target: &Model) -> f64 {
        let t = target.weights.step_bytes();
        if t == 0 { 0.0 } else { self.model.weights.step_bytes() as f64 / t as f64 }
    }

    fn fork(&self) -> Box<dyn Drafter> {
        let session = Session::new(&self.model.config);
        Box::new(ModelDrafter { kind: self.kind, model: self.model.clone(), session, fed: Vec::new(), pending: None })
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

    fn suffix(min_match: usize, max_match: usize, min_prob: f64) -> SuffixDrafter {
        SuffixDrafter { min_match, max_match, min_prob }
    }

    #[test]
    fn suffix_prefers_the_longest_match_over_a_more_recent_shorter_one() {
        // [1 2 3] 7 5 ... [2 3] 8 9 ... 1 2 3: the 3-token match at the start
        // wins over the later 2-token one.
        let ctx = [1, 2, 3, 7, 5, 2, 3, 8, 9, 1, 2, 3];
        assert_eq!(suffix(2, 32, 0.5).longest_match(&ctx), (3, vec![2]));
        assert_eq!(suffix(2, 32, 0.5).lookup(&ctx, 2), vec![7, 5]);
        // Capped at max_match 2, both places match equally and both are candidates.
        assert_eq!(suffix(2, 2, 0.5).longest_match(&ctx), (2, vec![2, 6]));
    }

    #[test]
    fn suffix_drafts_the_majority_continuation_until_the_agreement_falls_below_min_prob() {
        // Three earlier [1 2] continue 5 6 / 5 6 / 5 7 (the most recent is the
        // minority); then 10 / 11 split the two that said 6.
        let ctx = [1, 2, 5, 6, 10, 1, 2, 5, 6, 11, 1, 2, 5, 7, 12, 1, 2];
        assert_eq!(suffix(2, 32, 0.5).longest_match(&ctx), (2, vec![1, 6, 11]));
        // 5 (3/3), 6 (2/3 → 0.67), then 10 or 11 (1/2 → 0.33 < 0.5): stop.
        assert_eq!(suffix(2, 32, 0.5).lookup(&ctx, 10), vec![5, 6]);
        // A lower bar takes the tie's most recent candidate (11, not 10) and
        // then stops at the budget of twice the match (4), not at max (10).
        assert_eq!(suffix(2, 32, 0.3).lookup(&ctx, 10), vec![5, 6, 11, 1]);
        // A bar above 2/3 stops after the unanimous token.
        assert_eq!(suffix(2, 32, 0.7).lookup(&ctx, 10), vec![5]);
        // Prompt lookup takes the most recent occurrence instead.
        assert_eq!(NgramDrafter { max_n: 2, min_n: 2 }.lookup(&ctx, 2), vec![5, 7]);
    }

    #[test]
    fn suffix_drafts_at_most_twice_the_match_and_at_most_max() {
        let two = [7, 8, 1, 2, 3, 4, 5, 6, 9, 7, 8];
        assert_eq!(suffix(2, 32, 0.5).lookup(&two, 10), vec![1, 2, 3, 4]);
        assert_eq!(suffix(2, 32, 0.5).lookup(&two, 3), vec![1, 2, 3]);
        let three = [6, 7, 8, 1, 2, 3, 4, 5, 6, 9, 9, 6, 7, 8];
        assert_eq!(suffix(2, 32, 0.5).lookup(&three, 10), vec![1, 2, 3, 4, 5, 6]);
        // A draft also ends where the context does.
        assert_eq!(suffix(2, 32, 0.5).lookup(&[1, 2, 3, 1, 2, 3], 10), vec![1, 2, 3]);
        assert!(suffix(2, 32, 0.5).lookup(&three, 0).is_empty());
    }

    #[test]
    fn suffix_does_not_draft_below_min_match() {
        let ctx = [1, 2, 3, 9, 3];
        assert_eq!(suffix(1, 32, 0.5).longest_match(&ctx), (1, vec![2]));
        assert_eq!(suffix(1, 32, 0.5).lookup(&ctx, 5), vec![9, 3]);
        assert!(suffix(2, 32, 0.5).lookup(&ctx, 5).is_empty());
        assert!(suffix(1, 32, 0.5).lookup(&[1, 2, 3, 4], 5).is_empty());
    }

    #[test]
    fn suffix_proposes_nothing_for_empty_and_one_token_contexts() {
        let d = suffix(1, 32, 0.5);
        assert!(d.lookup(&[], 4).is_empty());
        assert!(d.lookup(&[5], 4).is_empty());
        assert_eq!(d.longest_match(&[5]), (0, vec![]));
        // [5 5]: the earlier 5 matches one token; nothing follows the match
        // but the context's own last token.
        assert_eq!(d.lookup(&[5, 5], 4), vec![5]);
        assert!(suffix(2, 32, 0.5).lookup(&[5, 5], 4).is_empty());
    }

    #[test]
    fn suffix_drafter_proposes_its_lookup_as_point_masses() {
        let ctx = [1, 2, 3, 7, 5, 2, 3, 8, 9, 1, 2, 3];
        let mut d = SuffixDrafter::default();
        assert_eq!(d.kind(), DrafterKind::Suffix);
        let p = d.propose(KernelFamily::SCALAR, &ctx, 3, &SamplingParams::default(), &mut Rng::new(1)).unwrap();
        assert_eq!(p, Proposal { tokens: vec![7, 5, 2], dists: None });
    }

    #[test]
    fn point_mass_proposals_have_q_one() {
        let p = Proposal { tokens: vec![3], dists: None };
        assert_eq!(p.q_of(0), 1.0);
        let p = Proposal { tokens: vec![3], dists: Some(vec![vec![(1, 0.5), (3, 0.25)]]) };
        assert_eq!(p.q_of(0), 0.25);
    }
}
