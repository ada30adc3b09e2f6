//! The cancellable prefill (`Engine::prefill_cancellable`, which the server
//! and `runtime generate` both use through `request::decode`) runs the prompt
//! in chunks; it must leave exactly the state the one-pass prefill leaves, and
//! it must stop between chunks when asked.

mod common;

use common::model;
use kernels::dispatch::KernelFamily;
use runtime::engine::{Engine, GenerateError, PREFILL_CHUNK};
use runtime::sampling::SamplingParams;
use std::cell::Cell;

fn engine() -> Engine {
    Engine::new(runtime::model::load(&model().info.path).unwrap(), KernelFamily::best(), 2).unwrap()
}

/// A prompt of `n` tokens from ordinary text.
fn prompt(e: &Engine, n: usize) -> Vec<u32> {
    let text = "The quick brown fox jumps over the lazy dog. 12345, said the cat. ".repeat(n / 8 + 2);
    let ids = e.loaded.tokenizer.encode(&text).unwrap();
    assert!(ids.len() >= n);
    ids[..n].to_vec()
}

#[test]
fn a_chunked_prefill_equals_the_one_pass_prefill_bit_for_bit() {
    let e = engine();
    // Shorter than a chunk, exactly one, one and a bit, several.
    for n in [5, PREFILL_CHUNK, PREFILL_CHUNK + 1, 3 * PREFILL_CHUNK + 17] {
        let ids = prompt(&e, n);
        let one = e.prefill(&ids).unwrap();
        let chunked = e.prefill_cancellable(&ids, &|| false).unwrap();
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&one.logits), bits(&chunked.logits), "logits after {n} prompt tokens");
        // The caches agree too: greedy decoding from both gives the same tokens.
        let greedy = SamplingParams::default();
        let a = e.decode(one, 12, &greedy).unwrap();
        let b = e.decode(chunked, 12, &greedy).unwrap();
        assert_eq!(a.token_ids, b.token_ids, "decoding after {n} prompt tokens");
    }
}

#[test]
fn a_cancelled_prefill_stops_between_chunks() {
    let e = engine();
    let ids = prompt(&e, 4 * PREFILL_CHUNK);
    let asked = Cell::new(0usize);
    let r = e.prefill_cancellable(&ids, &|| {
        asked.set(asked.get() + 1);
        asked.get() > 2
    });
    assert!(matches!(r, Err(GenerateError::Cancelled)), "{r:?}");
    // Two chunks ran; the third was refused before its forward pass.
    assert_eq!(asked.get(), 3);
}
