//! Continuous batching is byte-identical to each sequence alone: prompts of
//! `prompts/mixed.jsonl` joining a batch at random steps (random batch
//! sizes, random prefill chunks), decoded classically and speculatively
//! (n-gram drafter, a fixed width, the adaptive length, and a fixed width
//! with the policy's buckets under load: another width, off, a wider one,
//! by the sequences in each pass), greedy and sampled with a seed, at 1 and
//! 2 threads, every other prompt with repetition, presence and frequency
//! penalties and min-p (each sequence's penalties count its own history);
//! every sequence's tokens and finish reason must equal its run alone.

mod common;

use common::model;
use kernels::dispatch::KernelFamily;
use runtime::batch::{Running, step};
use runtime::engine::{Engine, FinishReason, NoSink, PREFILL_CHUNK};
use runtime::policy::adaptive::CostModel;
use runtime::policy::table::CostCurve;
use runtime::prompts::{PromptKind, parse_prompts};
use runtime::sampling::{PenaltyScope, SamplingParams};
use runtime::sequence::{DrafterSlot, Sequence};
use runtime::speculative::drafter::NgramDrafter;
use runtime::speculative::schedule::Schedule;
use std::path::Path;

const MAX_TOKENS: usize = 24;

/// Every fourth prompt of the mixed set (all six task types).
fn prompts() -> Vec<Vec<u32>> {
    let path = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../prompts/mixed.jsonl"));
    let items = parse_prompts(&std::fs::read_to_string(path).unwrap(), path).unwrap();
    let tok = &model().tokenizer;
    items
        .into_iter()
        .step_by(4)
        .map(|it| {
            let text = match it.kind {
                PromptKind::Text(t) => t,
                PromptKind::Chat(m) => tok.render_chat(&m, true).unwrap(),
            };
            tok.encode_prompt(&text).unwrap()
        })
        .collect()
}

fn engine(threads: usize) -> Engine {
    Engine::new(runtime::model::load(&model().info.path).unwrap(), KernelFamily::best(), threads).unwrap()
}

/// How the sequences of one case decode.
#[derive(Clone, Copy, Debug)]
enum Mode {
    Classic,
    Fixed(usize),
    Adaptive,
    /// Width 4 alone, 1 from two sequences in a pass, off from three, 7
    /// from five (`policy::Bucket`).
    Laddered,
}

fn ladder() -> Vec<policy::Bucket> {
    let w = |n| Some(policy::Drafting::Fixed(policy::Width::new(n).unwrap()));
    [(2, w(1)), (3, None), (5, w(7))]
        .into_iter()
        .map(|(sequences, drafting)| policy::Bucket { sequences, drafting, record: "records/test".into() })
        .collect()
}

fn schedule(mode: Mode) -> Option<Schedule> {
    match mode {
        Mode::Classic => None,
        Mode::Fixed(w) => Some(Schedule::from(policy::Width::new(w).unwrap())),
        Mode::Laddered => Some(Schedule::from(policy::Width::new(4).unwrap())),
        Mode::Adaptive => Some(Schedule::Adaptive {
            cap: policy::Width::new(6).unwrap(),
            cost: CostModel::new(&[CostCurve { context: 64, relative: vec![1.0, 1.04, 1.08, 1.12, 1.17, 1.22, 1.27] }])
                .unwrap(),
        }),
    }
}

fn sequence(e: &Engine, prompt: &[u32], chunk: usize, mode: Mode, sampling: SamplingParams) -> Sequence<'static> {
    let s = Sequence::new(&e.loaded.model, prompt, chunk, MAX_TOKENS, sampling, false).unwrap();
    match schedule(mode) {
        None => s,
        Some(sc) => {
            let s = s.speculate(&e.loaded.model, DrafterSlot::Owned(Box::new(NgramDrafter::default())), sc);
            if matches!(mode, Mode::Laddered) { s.under_load(&ladder()) } else { s }
        }
    }
}

fn sampling(i: usize, sampled: bool) -> SamplingParams {
    let base = if sampled {
        SamplingParams { temperature: 0.8, top_k: 40, top_p: 0.95, seed: 1000 + i as u64, ..Default::default() }
    } else {
        SamplingParams::default()
    };
    if i.is_multiple_of(2) {
        return base;
    }
    // Every other prompt penalized, alternating llama.cpp's window and vLLM's scopes.
    let scope = if i % 4 == 1 { PenaltyScope::Last(32) } else { PenaltyScope::Vllm };
    SamplingParams {
        repetition_penalty: 1.2,
        presence_penalty: 0.3,
        frequency_penalty: 0.2,
        min_p: 0.05,
        penalty_scope: scope,
        ..base
    }
}

/// A small deterministic generator for the arrival schedule.
struct XorShift(u64);

impl XorShift {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

/// One prompt's tokens and why it finished.
type Outcome = (Vec<u32>, FinishReason);

/// Runs every prompt through batches with random arrivals; returns each
/// prompt's (tokens, finish reason), the most sequences one pass carried,
/// and how many rounds asked for each draft length (all sequences).
fn batched(
    e: &Engine,
    prompts: &[Vec<u32>],
    mode: Mode,
    sampled: bool,
    rng: &mut XorShift,
) -> (Vec<Outcome>, usize, Vec<usize>) {
    let parallel = [2, 3, 5][rng.below(3)];
    let chunk = [7, 16, 128][rng.below(3)];
    let mut next = 0;
    // The running sequences and the prompt each belongs to.
    let mut slots: Vec<Running<'static, NoSink>> = Vec::new();
    let mut ids: Vec<usize> = Vec::new();
    let mut done: Vec<Option<(Vec<u32>, FinishReason)>> = vec![None; prompts.len()];
    let mut widest = 0;
    let mut asked = vec![0; 9];
    while next < prompts.len() || !slots.is_empty() {
        // 0 to 2 arrivals per step, up to the batch's size (at least one
        // when nothing runs).
        let mut arrivals = rng.below(3);
        if slots.is_empty() {
            arrivals = arrivals.max(1);
        }
        while arrivals > 0 && next < prompts.len() && slots.len() < parallel {
            slots.push(Running::new(sequence(e, &prompts[next], chunk, mode, sampling(next, sampled)), NoSink));
            ids.push(next);
            next += 1;
            arrivals -= 1;
        }
        let st = step(e, &mut slots, chunk);
        widest = widest.max(st.sequences);
        for k in (0..slots.len()).rev() {
            if let Some(res) = &st.ended[k] {
                assert!(res.is_ok(), "prompt {}: {res:?}", ids[k]);
                let r = slots.remove(k);
                let id = ids.remove(k);
                let (g, stats) = r.seq.into_generation();
                for (a, n) in asked.iter_mut().zip(stats.map(|s| s.draft_lengths).unwrap_or_default()) {
                    *a += n;
                }
                done[id] = Some((g.token_ids, g.finish_reason));
            }
        }
    }
    (done.into_iter().map(|d| d.unwrap()).collect(), widest, asked)
}

/// Each prompt alone, its prompt in one-chunk passes of the default size.
fn alone(e: &Engine, prompts: &[Vec<u32>], mode: Mode, sampled: bool) -> Vec<(Vec<u32>, FinishReason)> {
    prompts
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let mut seq = sequence(e, p, PREFILL_CHUNK, mode, sampling(i, sampled));
            e.run_alone(&mut seq, &mut NoSink).unwrap();
            let (g, _) = seq.into_generation();
            (g.token_ids, g.finish_reason)
        })
        .collect()
}

#[test]
fn every_sequence_of_a_batch_emits_what_it_emits_alone() {
    let prompts = prompts();
    assert!(prompts.len() >= 12);
    let mut rng = XorShift(0x2545_f491_4f6c_dd1d);
    let mut widest = 0;
    // Draft lengths the laddered greedy sequences asked for, batched.
    let mut laddered = vec![0; 9];
    for threads in [1, 2] {
        let e = engine(threads);
        for mode in [Mode::Classic, Mode::Fixed(4), Mode::Adaptive, Mode::Laddered] {
            for sampled in [false, true] {
                let want = alone(&e, &prompts, mode, sampled);
                for trial in 0..2 {
                    let (got, w, asked) = batched(&e, &prompts, mode, sampled, &mut rng);
                    widest = widest.max(w);
                    if matches!(mode, Mode::Laddered) && !sampled {
                        laddered.iter_mut().zip(&asked).for_each(|(a, n)| *a += n);
                    }
                    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                        assert_eq!(
                            g, w,
                            "prompt {i}, {mode:?}, sampled {sampled}, {threads} threads, trial {trial}: \
                             batched differs from alone"
                        );
                    }
                }
            }
        }
    }
    assert!(widest >= 3, "no pass carried three sequences: the test would prove little");
    // The buckets applied: width 1 (two sequences), off (three or four)
    // and width 7 (five) were asked for beside the base width 4.
    for w in [0, 1, 4, 7] {
        assert!(laddered[w] > 0, "no greedy round asked for {w} drafts under the ladder: {laddered:?}");
    }
}
