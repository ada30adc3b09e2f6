//! Greedy speculative decoding is byte-identical to classic decoding: every
//! prompt of `prompts/mixed.jsonl` (53 prompts in six task types), every
//! width 1..=8, at 1 and 2 threads, with the n-gram drafter; the suffix
//! drafter and the model drafters on a subset (the model drafters cost a
//! model pass per drafted token).

mod common;

use common::model;
use kernels::dispatch::KernelFamily;
use runtime::generate::Engine;
use runtime::prompts::{PromptKind, parse_prompts};
use runtime::sampling::SamplingParams;
use runtime::spec::drafter::{Drafter, ModelDrafter, NgramDrafter, SuffixDrafter};
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
    let greedy = SamplingParams::default();
    let mut rounds = 0;
    for (id, ids) in prompts {
        let pre = engine.prefill(ids).unwrap();
        let classic = engine.decode(pre.clone(), MAX_TOKENS, &greedy).unwrap();
        for &w in widths {
            let mut d = make();
            let (spec, stats) = engine
                .decode_speculative(
                    pre.clone(),
                    MAX_TOKENS,
                    &greedy,
                    d.as_mut(),
                    runtime::policy::Width::new(w).unwrap(),
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
    runtime::spec::drafter::check_compatible(&e.loaded, &d).unwrap();
    check_drafter(&e, &ps, &[2, 5], &|| {
        let model = runtime::model::load(&model().info.path).unwrap().model;
        Box::new(ModelDrafter::new(runtime::spec::DrafterKind::DraftModel, model))
    });
}
