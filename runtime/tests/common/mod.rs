//! Shared by the real-model test binaries: the default model, loaded once
//! per binary, and the exactness checks several families' tests run.

// Each test binary uses some of these.
#![allow(dead_code)]

use runtime::engine::NoSink;
use runtime::model::Loaded;
use std::path::PathBuf;
use std::sync::OnceLock;

/// `DRAFTWISE_TEST_MODEL`, else the cached default model (fetched on first use).
pub fn model_path() -> PathBuf {
    match std::env::var_os("DRAFTWISE_TEST_MODEL") {
        Some(p) => p.into(),
        None => runtime::fetch::ensure_default_model(None).expect("fetch the default model"),
    }
}

/// The default model, loaded once.
pub fn model() -> &'static Loaded {
    static M: OnceLock<Loaded> = OnceLock::new();
    M.get_or_init(|| runtime::model::load(&model_path()).expect("load the default model"))
}

/// A verify block of `w` rows after `prompt`, for every `w` in 1..=16, gives
/// the one-token chain's logits over `cont[..w]` bit for bit: the
/// exactness contract at the forward pass. `what` names the case.
pub fn assert_blocks_equal_chain(e: &runtime::engine::Engine, prompt: &[u32], cont: &[u32], what: &str) {
    use runtime::model::Session;
    use runtime::model::forward::LogitRows;
    assert!(cont.len() >= 16, "{what}: the continuation needs 16 tokens");
    let m = &e.loaded.model;
    let v = m.config.vocab;
    e.install(|| {
        let mut base = Session::new(&m.config);
        m.forward(e.family, &mut base, prompt, LogitRows::Last).unwrap();
        let mut s = base.clone();
        let chain: Vec<f32> =
            cont[..16].iter().flat_map(|&t| m.forward(e.family, &mut s, &[t], LogitRows::Last).unwrap()).collect();
        for w in 1..=16 {
            let mut s = base.clone();
            let block = m.forward(e.family, &mut s, &cont[..w], LogitRows::All).unwrap();
            let same = block.iter().zip(&chain[..w * v]).all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(same, "{what}: width {w}: the block's logits differ from the chain's");
        }
    });
}

/// Greedy ngram speculation (patterns of 1 to 4 tokens) after `prompt` at
/// every width of `widths` emits classic decoding's tokens; returns how
/// many speculative rounds ran, so a caller can insist that some did.
pub fn ngram_speculation_equals_classic(
    e: &runtime::engine::Engine,
    prompt: &[u32],
    max_tokens: usize,
    widths: &[usize],
    what: &str,
) -> usize {
    let greedy = runtime::sampling::SamplingParams::default();
    let pre = e.prefill(prompt).unwrap();
    let classic = e.decode(pre.clone(), max_tokens, &greedy).unwrap();
    let mut rounds = 0;
    for &w in widths {
        let mut d = runtime::speculative::drafter::NgramDrafter { max_n: 4, min_n: 1 };
        let width = policy::Width::new(w).unwrap();
        let (spec, stats) = e.decode_speculative(pre.clone(), max_tokens, &greedy, &mut d, width, &mut NoSink).unwrap();
        assert_eq!(spec.token_ids, classic.token_ids, "{what}: width {w}");
        rounds += stats.rounds;
    }
    rounds
}
