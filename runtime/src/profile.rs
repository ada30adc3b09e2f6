//! Acceptance traces for a profile ([`policy::profile`]): a prompt set's
//! greedy classic output, and at each point of it the drafter's proposal
//! of up to `lookahead` tokens against what classic decoding emitted next.
//! No timing: any host, any load (`tuner profile`).
//!
//! The replay takes a draft of `n` tokens at a point to be the first
//! `min(n, avail)` of the recorded proposal. That holds for every drafter
//! this engine has: the lookups (`ngram`, `suffix`) are functions of the
//! context that stop at a bound (the tests below check the prefix property
//! on random contexts), and a model drafter (`draft-model`, `layerskip`)
//! drafts greedily, one token after another, so a shorter draft is the
//! longer one's start.

use anyhow::{Context, Result};

use crate::engine::Engine;
use crate::prompts::PromptItem;
use crate::sampling::{Rng, SamplingParams};
use crate::speculative::drafter::Drafter;
use policy::profile::Trace;

/// One prompt's trace: classic greedy decoding of `max_tokens` tokens, then
/// the drafter asked at every point of the output. `ids` are its tokens.
pub fn trace(
    engine: &Engine,
    drafter: &mut dyn Drafter,
    item: &PromptItem,
    ids: &[u32],
    max_tokens: usize,
    lookahead: usize,
) -> Result<Trace> {
    let greedy = SamplingParams::default();
    let g = engine.generate(ids, max_tokens, &greedy).with_context(|| format!("prompt {}", item.id))?;
    let out = &g.token_ids;
    let n = out.len();
    let mut avail = vec![0u8; n];
    let mut agree = vec![0u8; n];
    // The drafter's context at point p: the prompt and out[..p].
    let mut context = ids.to_vec();
    context.extend(out.first());
    let mut rng = Rng::new(0);
    for p in 1..n {
        let family = engine.family;
        let d = engine
            .install(|| drafter.propose(family, &context, lookahead, &greedy, &mut rng))
            .with_context(|| format!("prompt {}: the drafter at position {p}", item.id))?;
        let tokens = &d.tokens[..d.tokens.len().min(lookahead)];
        avail[p] = tokens.len() as u8;
        agree[p] = tokens.iter().zip(&out[p..]).take_while(|(a, b)| a == b).count() as u8;
        context.push(out[p]);
    }
    Ok(Trace {
        id: item.id.clone(),
        task: item.task_type().to_string(),
        prompt_tokens: ids.len(),
        out: n,
        avail,
        agree,
    })
}

#[cfg(test)]
mod tests {
    use crate::speculative::drafter::{NgramDrafter, SuffixDrafter};

    /// Contexts over a small alphabet, so that repeats (and so proposals) are common.
    fn contexts() -> Vec<Vec<u32>> {
        let mut s = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        (0..300)
            .map(|_| {
                let len = 2 + (next() % 120) as usize;
                let alphabet = 2 + next() % 6;
                (0..len).map(|_| (next() % alphabet) as u32).collect()
            })
            .collect()
    }

    #[test]
    fn a_shorter_lookup_is_the_start_of_a_longer_one() {
        let ngram = NgramDrafter::default();
        let suffix = SuffixDrafter::default();
        let mut proposals = 0;
        for c in contexts() {
            for lookup in [&|c: &[u32], n| ngram.lookup(c, n), &|c: &[u32], n| suffix.lookup(c, n)]
                as [&dyn Fn(&[u32], usize) -> Vec<u32>; 2]
            {
                let long = lookup(&c, 16);
                proposals += usize::from(!long.is_empty());
                for n in 1..=16 {
                    let short = lookup(&c, n);
                    assert_eq!(short, long[..n.min(long.len())], "context {c:?}, n {n}");
                }
            }
        }
        assert!(proposals > 100, "the contexts hardly exercise the drafters ({proposals} proposals)");
    }
}
