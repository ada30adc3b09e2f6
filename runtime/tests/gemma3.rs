//! Gemma 3 270M (its Q4_K_M GGUF: Q5_0, Q8_0, Q4_K and Q6_K matrices, a
//! SentencePiece vocabulary of 262,144 pieces, no chat template) against
//! llama.cpp, whose answers are committed in
//! `reference/data/gemma3-270m.llamacpp.json` (regenerate with the command
//! recorded in its `generated_by`, see reference/llamacpp_reference.py):
//! tokenizer ids, prompt ids (raw and chat, the chat through llama.cpp's
//! built-in Gemma template), greedy continuations and the first steps'
//! top logits. Then the exactness contract on this model: a verify block
//! equals the one-token chain for every width 1..=16, and speculative
//! output equals classic at 1 and 2 threads.
//!
//! The model is loaded once per thread count for the whole test binary.

mod common;
mod golden;

use kernels::act8::Precision;
use kernels::dispatch::KernelFamily;
use runtime::engine::Engine;
use runtime::model::Loaded;
use runtime::sampling::{SamplingParams, argmax};
use runtime::tokenizer::chat::TemplateSource;
use serde_json::Value;
use std::path::PathBuf;
use std::sync::OnceLock;

/// llama.cpp multiplies Q5_0 / Q4_K / Q6_K / Q8_0 weights against
/// activations quantized to 8 bits (Q8_0 / Q8_K), this runtime against
/// 16-bit ones, and llama.cpp's GELU reads a 16-bit table. Over the top-8
/// logits of the first four steps of the six reference prompts the two
/// differ by at most 1.315 (one low-ranked token at the first step of the
/// chat prompt; the other 191 are within 0.6; logits are 15 to 30). The
/// bound leaves a margin over that.
const LOGIT_TOLERANCE: f32 = 1.5;

/// Greedy tokens must equal llama.cpp's up to the first step where
/// llama.cpp's own top-1/top-2 margin is below this: the top-ranked
/// logits of the two engines differ by up to about 0.45 (above), so a
/// smaller margin can rightly go the other way.
const NEAR_TIE: f32 = 0.5;

/// This runtime against exact (float64) math on the same dequantized
/// weights: f32 arithmetic, 16-bit activation quantization and the 16-bit
/// KV cache move the top-8 logits of every teacher-forced step of the six
/// prompts by at most 0.0101 (measured; llama.cpp's move by up to 1.32).
const FLOAT64_TOLERANCE: f32 = 0.02;

/// Float64's own top-1/top-2 margin below which the argmax is not checked:
/// twice the measured difference above.
const FLOAT64_NEAR_TIE: f32 = 0.02;

/// The same at 8-bit activations for the Q4_K / Q6_K matrices (the default
/// precision): measured at most 1.229, mean 0.211 over the 896 top-8 logits
/// (2026-12-07; llama.cpp's move by up to 1.32). The bound leaves a margin.
const FLOAT64_TOLERANCE_INT8: f32 = 1.5;

/// Float64's own margin below which the 8-bit argmax is not checked: twice
/// the measured difference above.
const FLOAT64_NEAR_TIE_INT8: f32 = 2.5;

fn model_path() -> PathBuf {
    match std::env::var_os("DRAFTWISE_TEST_GEMMA") {
        Some(p) => p.into(),
        None => runtime::fetch::ensure_model(&runtime::fetch::GEMMA3_270M, None).expect("fetch gemma3-270m"),
    }
}

/// The engines at the default precision (8-bit activations for the
/// K-quants), at 1 and 2 threads.
fn engine(threads: usize) -> &'static Engine {
    engine_at(threads, Precision::Int8)
}

/// An engine at `precision`: 1 or 2 threads at int8, 1 thread at int16.
fn engine_at(threads: usize, precision: Precision) -> &'static Engine {
    static E: [OnceLock<Engine>; 3] = [OnceLock::new(), OnceLock::new(), OnceLock::new()];
    let slot = match (threads, precision) {
        (1, Precision::Int8) => 0,
        (2, Precision::Int8) => 1,
        (1, Precision::Int16) => 2,
        other => panic!("no engine for {other:?}"),
    };
    E[slot].get_or_init(|| {
        let mut loaded = runtime::model::load(&model_path()).expect("load gemma3-270m");
        loaded.model.set_precision(precision);
        assert!(loaded.model.precision_matters(), "the file's Q4_K / Q6_K matrices take 8-bit activations");
        Engine::new(loaded, KernelFamily::best(), threads).unwrap()
    })
}

fn model() -> &'static Loaded {
    &engine(1).loaded
}

fn reference() -> &'static Value {
    static R: OnceLock<Value> = OnceLock::new();
    R.get_or_init(|| {
        let p = concat!(env!("CARGO_MANIFEST_DIR"), "/../reference/data/gemma3-270m.llamacpp.json");
        serde_json::from_slice(&std::fs::read(p).expect("gemma3-270m.llamacpp.json")).expect("it parses")
    })
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

fn prompt_ids(p: &Value) -> Vec<u32> {
    golden::prompt_ids(&model().tokenizer, p)
}

#[test]
fn the_file_is_gemma3_with_the_builtin_turn_format_named() {
    let m = model();
    assert_eq!(m.info.architecture, "gemma3");
    assert_eq!(m.info.vocab, reference()["n_vocab"].as_u64().unwrap() as usize);
    assert_eq!(m.tokenizer.chat_template_from, TemplateSource::Builtin("gemma"));
    assert_eq!(m.model.config.block.sliding.map(|s| s.window), Some(512));
}

#[test]
fn the_tokenizer_gives_llamacpps_ids_for_hard_strings_and_decodes_them_back() {
    let tok = &model().tokenizer;
    for c in reference()["tokenizer"].as_array().unwrap() {
        let text = c["text"].as_str().unwrap();
        assert_eq!(tok.encode(text).unwrap(), ids(&c["ids"]), "encode({text:?}), special tokens parsed");
        assert_eq!(tok.encode_as_text(text).unwrap(), ids(&c["ids_text_only"]), "encode({text:?}) as text");
        assert_eq!(tok.decode(&ids(&c["ids"])).unwrap(), c["decoded"].as_str().unwrap(), "decode of {text:?}");
    }
}

#[test]
fn prompt_ids_raw_and_chat_equal_llamacpps() {
    for p in reference()["greedy"].as_array().unwrap() {
        assert_eq!(prompt_ids(p), ids(&p["prompt_ids"]), "{}", p["id"]);
    }
}

#[test]
fn greedy_continuations_and_first_logits_agree_with_llamacpp() {
    let g = golden::Golden { name: "gemma3-270m", near_tie: NEAR_TIE, tolerance: LOGIT_TOLERANCE, min_compared: 20 };
    golden::check_greedy(engine(1), reference(), &g);
}

#[test]
fn greedy_continuations_and_first_logits_agree_with_llamacpp_at_int16() {
    let g =
        golden::Golden { name: "gemma3-270m int16", near_tie: NEAR_TIE, tolerance: LOGIT_TOLERANCE, min_compared: 20 };
    golden::check_greedy(engine_at(1, Precision::Int16), reference(), &g);
}

#[test]
fn the_capital_of_france_is_exact_maths_continuation_at_int16() {
    // llama.cpp: " the capital of the country of France. It is the largest
    // city in France." Its 16th token, ".", leads " and" by 0.114 only, and
    // in float64 " and" leads "." by 0.012 (reference/gemma3_numpy.py; the
    // flip is llama.cpp's 8-bit activation quantization,
    // reference/gemma3_llamacpp_opcheck.py). This runtime's 16 tokens are
    // llama.cpp's first 15 and float64's 16th.
    let tok = &model().tokenizer;
    let p = &reference()["greedy"][0];
    assert_eq!(p["id"], "capital");
    let prompt = tok.encode_prompt("The capital of France is").unwrap();
    let g = engine_at(1, Precision::Int16).generate(&prompt, 16, &SamplingParams::default()).unwrap();
    let want = ids(&p["greedy_ids"]);
    assert_eq!(g.token_ids[..15], want[..15]);
    let exact = &float64()["prompts"][0];
    assert_eq!(exact["id"], "capital");
    assert_eq!(g.token_ids[15] as u64, exact["steps"][15]["float64_argmax"].as_u64().unwrap());
    assert_eq!(
        tok.decode(&g.token_ids).unwrap(),
        " the capital of the country of France. It is the largest city in France and"
    );
}

/// At 8-bit activations the 16th token goes llama.cpp's way (".", which
/// leads " and" by 0.114 there and trails it by 0.012 in float64): the
/// activation rounding is llama.cpp's kind, and so is the near-tie's answer.
#[test]
fn the_capital_of_france_at_int8_is_llamacpps_continuation() {
    let tok = &model().tokenizer;
    let p = &reference()["greedy"][0];
    assert_eq!(p["id"], "capital");
    let prompt = tok.encode_prompt("The capital of France is").unwrap();
    let g = engine(2).generate(&prompt, 16, &SamplingParams::default()).unwrap();
    assert_eq!(g.token_ids[..], ids(&p["greedy_ids"])[..16]);
    assert_eq!(
        tok.decode(&g.token_ids).unwrap(),
        " the capital of the country of France. It is the largest city in France."
    );
}

#[test]
fn a_verify_block_equals_the_chain_at_every_width_and_thread_count() {
    let tok = &model().tokenizer;
    let prompt = tok.encode_prompt("Once upon a time, in a small village, there lived").unwrap();
    let cont = tok.encode(" a family of four. They were very happy and had a lot of fun.").unwrap();
    assert!(cont.len() >= 16);
    for threads in [1, 2] {
        let e = engine(threads);
        common::assert_blocks_equal_chain(e, &prompt, &cont, &format!("{threads} threads"));
    }
}

#[test]
fn speculative_output_equals_classic_at_one_and_two_threads() {
    let tok = &model().tokenizer;
    // Repetitive prompts, so the n-gram drafter drafts and is both right
    // and wrong.
    let prompts = [
        "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\ndef mul(a, b):\n",
        "one two three four, one two three four, one two three four, one two",
    ];
    for threads in [1, 2] {
        let e = engine(threads);
        let mut rounds = 0;
        for text in prompts {
            let ids = tok.encode_prompt(text).unwrap();
            let what = format!("{text:?} at {threads} threads");
            rounds += common::ngram_speculation_equals_classic(e, &ids, 20, &[1, 2, 3, 4, 6, 8, 12, 16], &what);
        }
        assert!(rounds > 0, "no speculative round ran");
    }
}

fn float64() -> &'static Value {
    static R: OnceLock<Value> = OnceLock::new();
    R.get_or_init(|| {
        let p = concat!(env!("CARGO_MANIFEST_DIR"), "/../reference/data/gemma3-270m.float64.json");
        serde_json::from_slice(&std::fs::read(p).expect("gemma3-270m.float64.json")).expect("it parses")
    })
}

/// Our logits against the float64 forward pass of `reference/gemma3_numpy.py`
/// (teacher-forced on llama.cpp's tokens, every step): the top-8 of every
/// step within FLOAT64_TOLERANCE, and the same argmax wherever float64's
/// own margin is at least FLOAT64_NEAR_TIE.
#[test]
fn logits_agree_with_the_float64_reference_at_every_step() {
    check_float64(engine_at(1, Precision::Int16), FLOAT64_TOLERANCE, FLOAT64_NEAR_TIE, 50);
}

/// As [`logits_agree_with_the_float64_reference_at_every_step`] at 8-bit
/// activations, under the wider bounds the 8-bit rounding needs.
#[test]
fn int8_logits_agree_with_the_float64_reference_at_every_step() {
    check_float64(engine(1), FLOAT64_TOLERANCE_INT8, FLOAT64_NEAR_TIE_INT8, 20);
}

fn check_float64(e: &Engine, tolerance: f32, near_tie: f32, min_checked: usize) {
    let mut worst = (0.0f32, String::new());
    let (mut argmax_checked, mut flips_at_ties) = (0, 0);
    let (mut sum, mut count) = (0.0f64, 0usize);
    for p in float64()["prompts"].as_array().unwrap() {
        let id = p["id"].as_str().unwrap();
        let logits = golden::teacher_forced(e, &ids(&p["prompt_ids"]), &ids(&p["llamacpp_greedy_ids"]));
        for s in p["steps"].as_array().unwrap() {
            let step = s["step"].as_u64().unwrap() as usize;
            for pair in s["float64_top8"].as_array().unwrap() {
                let (t, exact) = (pair[0].as_u64().unwrap() as usize, pair[1].as_f64().unwrap() as f32);
                let d = (logits[step][t] - exact).abs();
                sum += d as f64;
                count += 1;
                if d > worst.0 {
                    worst = (d, format!("{id} step {step} token {t}: {} vs float64 {exact}", logits[step][t]));
                }
            }
            let ours = argmax(&logits[step]) as u64;
            if s["float64_margin"].as_f64().unwrap() as f32 >= near_tie {
                assert_eq!(ours, s["float64_argmax"].as_u64().unwrap(), "{id} step {step}: argmax");
                argmax_checked += 1;
            } else if ours != s["float64_argmax"].as_u64().unwrap() {
                flips_at_ties += 1;
            }
        }
    }
    eprintln!(
        "{}: largest top-8 difference from float64: {} ({}); mean {:.4} over {count}; {argmax_checked} argmaxes \
         checked, {flips_at_ties} near-ties went the other way",
        e.loaded.model.precision(),
        worst.0,
        worst.1,
        sum / count as f64
    );
    assert!(worst.0 <= tolerance, "largest difference {} over the tolerance: {}", worst.0, worst.1);
    assert!(argmax_checked >= min_checked, "only {argmax_checked} steps checked");
}
