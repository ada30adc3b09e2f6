//! Qwen2.5-Coder 0.5B and 1.5B Instruct (their GGUFs: the 0.5B's Q5_0, Q8_0,
//! Q6_K and Q4_K matrices, the 1.5B's Q4_K_M mix of Q4_K and Q6_K; one
//! byte-level BPE vocabulary of 151,936 rows, the `qwen2` pre-tokenizer and a
//! ChatML template with a default system message) against llama.cpp, whose
//! answers are committed in `reference/data/qwen2.5-coder-{0.5b,1.5b}.llamacpp.json`
//! (regenerate with the command in each file's `generated_by`, see
//! reference/llamacpp_reference.py): tokenizer ids, prompt ids (raw and chat,
//! the chat rendered from the file's own template), greedy continuations up
//! to llama.cpp's near-ties and the first steps' top logits. Then the
//! exactness contract on the 0.5B (a verify block equals the one-token chain
//! at widths 1..=16 and 1 and 2 threads; ngram speculation equals classic),
//! and the first real draft-model pair: the 0.5B drafting for the 1.5B,
//! whose greedy output equals classic at widths 1..=8.
//!
//! Each model is loaded once per thread count for the whole test binary.

mod common;
mod golden;

use kernels::act8::Precision;
use kernels::dispatch::KernelFamily;
use runtime::engine::{Engine, NoSink};
use runtime::model::Loaded;
use runtime::sampling::SamplingParams;
use runtime::speculative::DrafterKind;
use runtime::speculative::drafter::{ModelDrafter, check_compatible};
use runtime::tokenizer::chat::TemplateSource;
use serde_json::Value;
use std::path::PathBuf;
use std::sync::OnceLock;

/// llama.cpp multiplies these weights against activations quantized to 8
/// bits (Q8_0 / Q8_K), this runtime against 8-bit ones for the K-quants at
/// the default precision (its own rounding and summation order) and 16-bit
/// ones otherwise. Over the top-8 logits of the first four steps of the six
/// reference prompts the two differ by at most 0.240 on the 0.5B and 0.365
/// on the 1.5B at int8 (2026-12-07), 0.254 and 0.330 at int16 (2026-12-04);
/// top logits are 10 to 30. The bound leaves a margin over that.
const LOGIT_TOLERANCE: f32 = 0.75;

/// The top-8 logits at int8 against int16 (which is within ~0.01 of float64
/// on Gemma 3, docs/accuracy.md): what the 8-bit activation rounding of the
/// K-quant matrices alone moves. Measured at most 0.267 (mean 0.042) on
/// the 0.5B and 0.429 (mean 0.072) on the 1.5B over the 1,024 top-8 logits
/// of the six prompts' teacher-forced steps (2026-12-07); the bound leaves a
/// margin.
const INT8_VS_INT16_TOLERANCE: f32 = 0.75;

/// Greedy tokens must equal llama.cpp's up to the first step where
/// llama.cpp's own top-1/top-2 margin is below this: a smaller margin can
/// rightly go the other way between two engines that differ as above.
const NEAR_TIE: f32 = 0.5;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Size {
    B05,
    B15,
}

impl Size {
    fn spec(self) -> &'static runtime::fetch::ModelSpec {
        match self {
            Size::B05 => &runtime::fetch::QWEN25_CODER_05B,
            Size::B15 => &runtime::fetch::QWEN25_CODER_15B,
        }
    }
    fn env(self) -> &'static str {
        match self {
            Size::B05 => "DRAFTWISE_TEST_QWEN05",
            Size::B15 => "DRAFTWISE_TEST_QWEN15",
        }
    }
    fn reference_file(self) -> &'static str {
        match self {
            Size::B05 => concat!(env!("CARGO_MANIFEST_DIR"), "/../reference/data/qwen2.5-coder-0.5b.llamacpp.json"),
            Size::B15 => concat!(env!("CARGO_MANIFEST_DIR"), "/../reference/data/qwen2.5-coder-1.5b.llamacpp.json"),
        }
    }
}

fn model_path(size: Size) -> PathBuf {
    match std::env::var_os(size.env()) {
        Some(p) => p.into(),
        None => runtime::fetch::ensure_model(size.spec(), None).unwrap_or_else(|e| panic!("fetch {size:?}: {e}")),
    }
}

/// The engines at the default precision: the 0.5B at 1 and 2 threads, the
/// 1.5B at 2 threads.
fn engine(size: Size, threads: usize) -> &'static Engine {
    engine_at(size, threads, Precision::Int8)
}

/// The engines, and the 0.5B and 1.5B at int16, 2 threads.
fn engine_at(size: Size, threads: usize, precision: Precision) -> &'static Engine {
    static E: [OnceLock<Engine>; 5] = [const { OnceLock::new() }; 5];
    let slot = match (size, threads, precision) {
        (Size::B05, 1, Precision::Int8) => 0,
        (Size::B05, 2, Precision::Int8) => 1,
        (Size::B15, 2, Precision::Int8) => 2,
        (Size::B05, 2, Precision::Int16) => 3,
        (Size::B15, 2, Precision::Int16) => 4,
        other => panic!("no engine for {other:?}"),
    };
    E[slot].get_or_init(|| {
        let mut loaded = runtime::model::load(&model_path(size)).unwrap_or_else(|e| panic!("load {size:?}: {e}"));
        loaded.model.set_precision(precision);
        assert!(loaded.model.precision_matters(), "{size:?} has K-quant matrices");
        Engine::new(loaded, KernelFamily::best(), threads).unwrap()
    })
}

fn loaded(size: Size) -> &'static Loaded {
    &engine(size, 2).loaded
}

fn reference(size: Size) -> &'static Value {
    static R: [OnceLock<Value>; 2] = [OnceLock::new(), OnceLock::new()];
    R[size as usize].get_or_init(|| {
        let p = size.reference_file();
        serde_json::from_slice(&std::fs::read(p).unwrap_or_else(|e| panic!("{p}: {e}"))).expect("it parses")
    })
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

fn prompt_ids(size: Size, p: &Value) -> Vec<u32> {
    golden::prompt_ids(&loaded(size).tokenizer, p)
}

fn check_file(size: Size) {
    let l = loaded(size);
    assert_eq!(l.info.architecture, "qwen2");
    assert_eq!(l.info.vocab, reference(size)["n_vocab"].as_u64().unwrap() as usize);
    assert_eq!(l.tokenizer.chat_template_from, TemplateSource::File);
}

fn check_tokenizer(size: Size) {
    let tok = &loaded(size).tokenizer;
    for c in reference(size)["tokenizer"].as_array().unwrap() {
        let text = c["text"].as_str().unwrap();
        assert_eq!(tok.encode(text).unwrap(), ids(&c["ids"]), "encode({text:?}), special tokens parsed");
        assert_eq!(tok.encode_as_text(text).unwrap(), ids(&c["ids_text_only"]), "encode({text:?}) as text");
        assert_eq!(tok.decode(&ids(&c["ids"])).unwrap(), c["decoded"].as_str().unwrap(), "decode of {text:?}");
    }
}

fn check_prompt_ids(size: Size) {
    for p in reference(size)["greedy"].as_array().unwrap() {
        assert_eq!(prompt_ids(size, p), ids(&p["prompt_ids"]), "{}", p["id"]);
    }
}

fn check_greedy(size: Size) {
    let name = match size {
        Size::B05 => "qwen2.5-coder-0.5b",
        Size::B15 => "qwen2.5-coder-1.5b",
    };
    let g = golden::Golden { name, near_tie: NEAR_TIE, tolerance: LOGIT_TOLERANCE, min_compared: 40 };
    golden::check_greedy(engine(size, 2), reference(size), &g);
}

/// Teacher-forced on llama.cpp's greedy tokens, the top-8 logits (by the
/// int16 ranking) of every step at int8 against int16: (largest, mean).
fn int8_vs_int16(size: Size) -> (f32, f64) {
    let (e8, e16) = (engine_at(size, 2, Precision::Int8), engine_at(size, 2, Precision::Int16));
    let (mut worst, mut sum, mut n) = (0.0f32, 0.0f64, 0usize);
    for p in reference(size)["greedy"].as_array().unwrap() {
        let (prompt, forced) = (ids(&p["prompt_ids"]), ids(&p["greedy_ids"]));
        let (a, b) = (golden::teacher_forced(e8, &prompt, &forced), golden::teacher_forced(e16, &prompt, &forced));
        for (la, lb) in a.iter().zip(&b) {
            let mut order: Vec<usize> = (0..lb.len()).collect();
            order.sort_by(|&i, &j| lb[j].total_cmp(&lb[i]));
            for &t in &order[..8] {
                let d = (la[t] - lb[t]).abs();
                worst = worst.max(d);
                sum += d as f64;
                n += 1;
            }
        }
    }
    eprintln!("{size:?}: int8 vs int16 top-8 logits: largest {worst}, mean {:.4} over {n}", sum / n as f64);
    (worst, sum / n as f64)
}

#[test]
fn the_05b_greedy_continuations_and_first_logits_agree_with_llamacpp_at_int16() {
    let g = golden::Golden {
        name: "qwen2.5-coder-0.5b int16",
        near_tie: NEAR_TIE,
        tolerance: LOGIT_TOLERANCE,
        min_compared: 40,
    };
    golden::check_greedy(engine_at(Size::B05, 2, Precision::Int16), reference(Size::B05), &g);
}

#[test]
fn the_05b_int8_logits_stay_close_to_int16() {
    let (worst, _) = int8_vs_int16(Size::B05);
    assert!(worst <= INT8_VS_INT16_TOLERANCE, "int8 moved a top-8 logit by {worst}");
}

/// The 1.5B's int16 engine doubles the test's memory and time: run by hand
/// for docs/accuracy.md (`cargo test --release -p runtime --test qwen25 --
/// --ignored --nocapture`).
#[test]
#[ignore]
fn the_15b_int8_logits_stay_close_to_int16() {
    let (worst, _) = int8_vs_int16(Size::B15);
    assert!(worst <= INT8_VS_INT16_TOLERANCE, "int8 moved a top-8 logit by {worst}");
}

#[test]
fn the_05b_file_is_qwen2_with_its_own_chatml_template() {
    check_file(Size::B05);
}

#[test]
fn the_05b_tokenizer_gives_llamacpps_ids_for_hard_strings_and_decodes_them_back() {
    check_tokenizer(Size::B05);
}

#[test]
fn the_05b_prompt_ids_raw_and_chat_equal_llamacpps() {
    check_prompt_ids(Size::B05);
}

#[test]
fn the_05b_greedy_continuations_and_first_logits_agree_with_llamacpp() {
    check_greedy(Size::B05);
}

#[test]
fn the_15b_file_is_qwen2_with_its_own_chatml_template() {
    check_file(Size::B15);
}

#[test]
fn the_15b_tokenizer_gives_llamacpps_ids_for_hard_strings_and_decodes_them_back() {
    check_tokenizer(Size::B15);
}

#[test]
fn the_15b_prompt_ids_raw_and_chat_equal_llamacpps() {
    check_prompt_ids(Size::B15);
}

#[test]
fn the_15b_greedy_continuations_and_first_logits_agree_with_llamacpp() {
    check_greedy(Size::B15);
}

#[test]
fn a_05b_verify_block_equals_the_chain_at_every_width_and_thread_count() {
    let tok = &loaded(Size::B05).tokenizer;
    let prompt = tok.encode_prompt("def quicksort(xs):\n    if len(xs) <= 1:\n        return xs\n").unwrap();
    let cont = tok.encode("    pivot = xs[0]\n    left = [x for x in xs[1:] if x < pivot]\n").unwrap();
    assert!(cont.len() >= 16);
    for threads in [1, 2] {
        let e = engine(Size::B05, threads);
        common::assert_blocks_equal_chain(e, &prompt, &cont, &format!("{threads} threads"));
    }
}

/// Repetitive code, so the drafters draft and are both right and wrong.
const SPEC_PROMPTS: [&str; 2] = [
    "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\ndef mul(a, b):\n",
    "fn one() -> u32 { 1 }\nfn two() -> u32 { 2 }\nfn three() -> u32 { 3 }\nfn four() -> u32 {",
];

#[test]
fn the_05b_ngram_speculative_output_equals_classic_at_one_and_two_threads() {
    let tok = &loaded(Size::B05).tokenizer;
    for threads in [1, 2] {
        let e = engine(Size::B05, threads);
        let mut rounds = 0;
        for text in SPEC_PROMPTS {
            let ids = tok.encode_prompt(text).unwrap();
            let what = format!("{text:?} at {threads} threads");
            rounds += common::ngram_speculation_equals_classic(e, &ids, 20, &[1, 2, 3, 4, 6, 8], &what);
        }
        assert!(rounds > 0, "no speculative round ran");
    }
}

#[test]
fn the_05b_drafting_for_the_15b_gives_classic_output_at_widths_1_to_8() {
    let target = engine(Size::B15, 2);
    let drafter = runtime::model::load(&model_path(Size::B05)).unwrap();
    check_compatible(&target.loaded, &drafter).expect("the 0.5B shares the 1.5B's tokenizer");
    let mut d = ModelDrafter::new(DrafterKind::DraftModel, drafter.model);
    let tok = &target.loaded.tokenizer;
    let greedy = SamplingParams::default();
    let (mut rounds, mut accepted) = (0, 0);
    for text in SPEC_PROMPTS {
        let ids = tok.encode_prompt(text).unwrap();
        let pre = target.prefill(&ids).unwrap();
        let classic = target.decode(pre.clone(), 16, &greedy).unwrap();
        for w in 1..=8 {
            let (spec, stats) = target
                .decode_speculative(pre.clone(), 16, &greedy, &mut d, policy::Width::new(w).unwrap(), &mut NoSink)
                .unwrap();
            assert_eq!(spec.token_ids, classic.token_ids, "{text:?} width {w}");
            rounds += stats.rounds;
            accepted += stats.accepted;
        }
    }
    assert!(rounds > 0 && accepted > 0, "the pair ran {rounds} rounds and accepted {accepted} drafts");
}

#[test]
fn a_drafter_with_another_vocabulary_is_refused_by_name() {
    // SmolLM2's 49,152-token vocabulary against Qwen's 151,936.
    let smol = runtime::model::load(&runtime::fetch::ensure_default_model(None).unwrap()).unwrap();
    let e = check_compatible(loaded(Size::B05), &smol).unwrap_err();
    assert!(e.to_string().contains("vocabulary sizes differ (target 151936, drafter 49152)"), "{e}");
}
