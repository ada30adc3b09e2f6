//! Greedy speculative decoding is byte-identical to classic decoding: every
//! prompt of `prompts/mixed.jsonl` (53 prompts in six task types), every
//! width 1..=8, at 1 and 2 threads, with the n-gram drafter; the suffix
//! drafter and the model drafters on a subset (the model drafters cost a
//! model pass per drafted token); and with repetition, presence and
//! frequency penalties, which change each row from the tokens before it.

mod common;

use common::model;
use kernels::dispatch::KernelFamily;
use runtime::engine::{Engine, NoSink};
use runtime::prompts::{PromptKind, parse_prompts};
use runtime::sampling::{PenaltyScope, SamplingParams};
use runtime::speculative::drafter::{Drafter, ModelDrafter, NgramDrafter, SuffixDrafter};
use std::path::Path;

/// Tokens per completion: enough for drafts to hit and miss many times.
const MAX_TOKENS: usize = 16;

fn prompts() -> Vec<(String, Vec<u32>)> {
    let path = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../prompts/mixed.jsonl"));
    let items = parse_prompts(&std::fs::read_to_string(path).unwrap(), path).unwrap();
    assert!(items.len() >= 50);
    let tok = &model().tokenizer;
    items
        .into_iter()
        .map(|it| {
            let text = match it.kind {
                PromptKind::Text(t) => t,
                PromptKind::Chat(m) => tok.render_chat(&m, true).unwrap(),
            };
            (it.id, tok.encode_prompt(&text).unwrap())
        })
        .collect()
}

fn engine(threads: usize) -> Engine {
    Engine::new(runtime::model::load(&model().info.path).unwrap(), KernelFamily::best(), threads).unwrap()
}

/// For each prompt: one prefill, then classic decoding and speculative
/// decoding at each width from clones of it; every token must agree.
fn check_drafter(
    engine: &Engine,
    prompts: &[(String, Vec<u32>)],
    widths: &[usize],
    make: &dyn Fn() -> Box<dyn Drafter>,
) {
    check_drafter_with(engine, prompts, widths, make, &SamplingParams::default(), MAX_TOKENS);
}

/// [`check_drafter`] with greedy settings `greedy` (penalties, say), `max_tokens` per completion.
fn check_drafter_with(
    engine: &Engine,
    prompts: &[(String, Vec<u32>)],
    widths: &[usize],
    make: &dyn Fn() -> Box<dyn Drafter>,
    greedy: &SamplingParams,
    max_tokens: usize,
) {
    let greedy = *greedy;
    let mut rounds = 0;
    for (id, ids) in prompts {
        let pre = engine.prefill(ids).unwrap();
        let classic = engine.decode(pre.clone(), max_tokens, &greedy).unwrap();
        for &w in widths {
            let mut d = make();
            let (spec, stats) = engine
                .decode_speculative(
                    pre.clone(),
                    max_tokens,
                    &greedy,
                    d.as_mut(),
                    policy::Width::new(w).unwrap(),
                    &mut NoSink,
                )
                .unwrap();
            assert_eq!(
                spec.token_ids,
                classic.token_ids,
                "{id}: {} width {w} at {} threads differs from classic",
                d.kind(),
                engine.threads
            );
            assert_eq!(spec.finish_reason, classic.finish_reason, "{id} width {w}");
            assert!(stats.accepted <= stats.drafted);
            rounds += stats.rounds;
        }
    }
    assert!(rounds > 0, "no speculative round ran: the test would prove nothing");
}

#[test]
fn ngram_output_equals_classic_for_every_prompt_and_width_at_one_and_two_threads() {
    let ps = prompts();
    for threads in [1, 2] {
        let e = engine(threads);
        // min_n 1, not the default 3: the most drafts, so the most verify
        // blocks and rollbacks checked.
        check_drafter(&e, &ps, &[1, 2, 3, 4, 5, 6, 7, 8], &|| Box::new(NgramDrafter { max_n: 4, min_n: 1 }));
    }
}

#[test]
fn suffix_output_equals_classic() {
    let ps: Vec<_> = prompts().into_iter().step_by(5).collect();
    let e = engine(2);
    // min_match 1 and a low bar, not the defaults: the most drafts, so the
    // most verify blocks and rollbacks checked.
    check_drafter(&e, &ps, &[2, 5], &|| Box::new(SuffixDrafter { min_match: 1, max_match: 32, min_prob: 0.2 }));
}

#[test]
fn layerskip_output_equals_classic() {
    let ps: Vec<_> = prompts().into_iter().step_by(9).collect();
    let e = engine(2);
    let target = &e.loaded.model;
    check_drafter(&e, &ps, &[1, 3, 8], &|| {
        Box::new(ModelDrafter::layerskip(target, &(0..8).collect::<Vec<_>>()).unwrap())
    });
}

#[test]
fn draft_model_output_equals_classic() {
    // The target itself serves as its own draft model: same tokenizer by
    // construction, and its drafts are always right, so every width is used.
    let ps: Vec<_> = prompts().into_iter().step_by(13).collect();
    let e = engine(2);
    let d = runtime::model::load(&model().info.path).unwrap();
    runtime::speculative::drafter::check_compatible(&e.loaded, &d).unwrap();
    check_drafter(&e, &ps, &[2, 5], &|| {
        let model = runtime::model::load(&model().info.path).unwrap().model;
        Box::new(ModelDrafter::new(runtime::speculative::DrafterKind::DraftModel, model))
    });
}

/// A cost model for the adaptive tests: at the short context rows are
/// cheap (drafting pays at the prior), at the long one dear (a draft pays
/// only when it is accepted), so the controller both drafts and chooses
/// plain steps.
fn adaptive(cap: usize) -> runtime::speculative::schedule::Schedule {
    use policy::table::CostCurve;
    let cost = policy::adaptive::CostModel::new(&[
        CostCurve { context: 64, relative: vec![1.0, 1.05, 1.1, 1.15, 1.2] },
        CostCurve { context: 1024, relative: vec![1.0, 1.6, 2.2, 2.8, 3.4] },
    ])
    .unwrap();
    runtime::speculative::schedule::Schedule::Adaptive { cap: policy::Width::new(cap).unwrap(), cost }
}

/// Greedy output with the adaptive draft length equals classic output on
/// every prompt at 1 and 2 threads, and on a long prompt (past 1,000
/// positions, where the cost model says rows are dear); the controller
/// must have chosen several lengths, plain steps among them, or the test
/// proves less than it says.
#[test]
fn adaptive_output_equals_classic_at_one_and_two_threads_short_and_long_contexts() {
    let greedy = SamplingParams::default();
    let mut ps = prompts();
    // A long editing prompt: a list repeated past 1,000 tokens, then asked to continue.
    let tok = &model().tokenizer;
    let item = "- item: rename `count` to `total` in the loop body; keep the test names.\n";
    let long = tok.encode_prompt(&format!("{}Continue the list:\n", item.repeat(60))).unwrap();
    assert!(long.len() > 1000, "{}", long.len());
    ps.push(("long-edit".into(), long));
    let max_tokens = 32;
    for threads in [1, 2] {
        let e = engine(threads);
        let mut lengths = vec![0usize; 9];
        for (id, ids) in &ps {
            let pre = e.prefill(ids).unwrap();
            let classic = e.decode(pre.clone(), max_tokens, &greedy).unwrap();
            for cap in [4, 8] {
                let mut d = NgramDrafter { max_n: 4, min_n: 1 };
                let (spec, st) =
                    e.decode_speculative(pre.clone(), max_tokens, &greedy, &mut d, adaptive(cap), &mut NoSink).unwrap();
                assert_eq!(spec.token_ids, classic.token_ids, "{id}: adaptive up to {cap} at {threads} threads");
                assert_eq!(spec.finish_reason, classic.finish_reason, "{id} adaptive up to {cap}");
                assert_eq!(st.draft_lengths.len(), cap + 1);
                for (l, c) in lengths.iter_mut().zip(&st.draft_lengths) {
                    *l += c;
                }
            }
        }
        assert!(lengths[0] > 0, "no plain step by choice at {threads} threads: {lengths:?}");
        assert!(lengths[1..].iter().filter(|&&c| c > 0).count() >= 3, "few draft lengths chosen: {lengths:?}");
    }
}

/// Greedy settings with every penalty on: llama.cpp's window of the last
/// 64 tokens, the whole context, and vLLM's scopes.
fn penalized() -> Vec<SamplingParams> {
    [PenaltyScope::Last(64), PenaltyScope::Context, PenaltyScope::Vllm]
        .into_iter()
        .map(|scope| SamplingParams {
            repetition_penalty: 1.3,
            presence_penalty: 0.4,
            frequency_penalty: 0.3,
            min_p: 0.05,
            penalty_scope: scope,
            ..SamplingParams::default()
        })
        .collect()
}

/// Prompts the model continues by repeating itself: the n-gram drafter's
/// drafts are accepted several to a round, so a row's history holds
/// earlier drafts of its own round, and a frequency penalty's count grows
/// until, at a position that depends on the exact count, the choice flips.
/// A row penalized without the drafts before it would flip elsewhere.
fn repetitive() -> Vec<(String, Vec<u32>)> {
    let tok = &model().tokenizer;
    ["the cat sat on the mat. ".repeat(6), "1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2".to_string()]
        .iter()
        .enumerate()
        .map(|(i, t)| (format!("repetitive-{i}"), tok.encode_prompt(t).unwrap()))
        .collect()
}

/// With penalties, each verified row is penalized for exactly the tokens
/// before its position (the accepted drafts included), so greedy
/// speculative output still equals classic output token for token: every
/// sixth prompt at widths 1 to 8 with three penalty scopes, and
/// repetitive prompts run long under frequency penalties of several
/// strengths, at 1 and 2 threads. (With each row penalized for the round's
/// start instead, the second repetitive prompt at width 8 and frequency
/// 0.2 differs from classic: the test can fail.)
#[test]
fn penalized_greedy_output_equals_classic_at_every_width_and_thread_count() {
    let ps: Vec<_> = prompts().into_iter().step_by(6).collect();
    let ngram = || Box::new(NgramDrafter { max_n: 4, min_n: 1 }) as Box<dyn Drafter>;
    for threads in [1, 2] {
        let e = engine(threads);
        for p in penalized() {
            check_drafter_with(&e, &ps, &[1, 2, 3, 5, 8], &ngram, &p, MAX_TOKENS);
        }
        for frequency_penalty in [0.1, 0.2, 0.3] {
            for penalty_scope in [PenaltyScope::Last(64), PenaltyScope::Context, PenaltyScope::Vllm] {
                let p = SamplingParams { frequency_penalty, penalty_scope, ..SamplingParams::default() };
                check_drafter_with(&e, &repetitive(), &[3, 8], &ngram, &p, 40);
            }
        }
    }
}

/// The penalties change greedy output where the model repeats itself (so
/// the test above compares outputs the penalties shaped): a list the
/// model would continue verbatim, and the prompt set at large.
#[test]
fn penalties_change_greedy_output_on_a_repetitive_prompt() {
    let e = engine(2);
    let tok = &model().tokenizer;
    let ids = tok.encode_prompt(&"the cat sat on the mat. ".repeat(8)).unwrap();
    let pre = e.prefill(&ids).unwrap();
    let plain = e.decode(pre.clone(), 24, &SamplingParams::default()).unwrap();
    let repeats = |t: &[u32]| t.iter().filter(|x| ids.contains(x)).count();
    for p in penalized() {
        let pen = e.decode(pre.clone(), 24, &p).unwrap();
        assert_ne!(pen.token_ids, plain.token_ids, "{:?}: the penalties changed nothing", p.penalty_scope);
        assert!(
            repeats(&pen.token_ids) < repeats(&plain.token_ids),
            "{:?}: penalized output repeats the prompt's tokens no less ({} vs {})",
            p.penalty_scope,
            repeats(&pen.token_ids),
            repeats(&plain.token_ids)
        );
    }
    for p in [
        SamplingParams { repetition_penalty: 1.5, ..SamplingParams::default() },
        // Presence and frequency over the output only (vLLM's), at their
        // largest: the pattern, once emitted, is penalized.
        SamplingParams {
            presence_penalty: 2.0,
            frequency_penalty: 2.0,
            penalty_scope: PenaltyScope::Vllm,
            ..SamplingParams::default()
        },
    ] {
        assert_ne!(e.decode(pre.clone(), 24, &p).unwrap().token_ids, plain.token_ids, "{p:?}");
    }
}
