//! One tiny random Llama written twice — as a Hugging Face checkpoint
//! (bf16 safetensors, `rotate_half` Q/K layout) and as a GGUF file (F32, Q/K
//! rows permuted into adjacent RoPE pairs the way llama.cpp's converter
//! does) — must give the same logits through both loaders.

use super::forward::LogitRows;
use super::{Loaded, Session, load};
use crate::gguf::Value;
use crate::test_models::*;
use kernels::dispatch::KernelFamily;
use kernels::quant::GgmlType;

fn logits(l: &Loaded, ids: &[u32]) -> Vec<f32> {
    forward_with(l, KernelFamily::best(), ids)
}

/// Every row's logits of `ids` in one pass of family `fam`, from an empty session.
fn forward_with(l: &Loaded, fam: KernelFamily, ids: &[u32]) -> Vec<f32> {
    let mut s = Session::new(&l.model.config);
    l.model.forward(fam, &mut s, ids, LogitRows::All).unwrap()
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|f| f.to_bits()).collect()
}

/// Feeding `ids` one token at a time gives `block`'s rows bit for bit.
fn assert_chain_equals_block(l: &Loaded, fam: KernelFamily, ids: &[u32], block: &[f32], what: &str) {
    let v = l.model.config.vocab;
    let mut s = Session::new(&l.model.config);
    for (i, &t) in ids.iter().enumerate() {
        let one = l.model.forward(fam, &mut s, &[t], LogitRows::Last).unwrap();
        assert_eq!(bits(&one), bits(&block[i * v..(i + 1) * v]), "{what} {fam:?} row {i}");
    }
}

/// `got`'s largest distance from `exact`, and `exact`'s largest magnitude.
fn max_diff_and_scale(got: &[f32], exact: &[f32]) -> (f32, f32) {
    let max_abs = exact.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let diff = got.iter().zip(exact).fold(0.0f32, |m, (a, b)| m.max((a - b).abs()));
    (diff, max_abs)
}

/// Writes `bytes` as `name` in `dir` and loads it.
fn load_named(dir: &tempfile::TempDir, name: &str, bytes: Vec<u8>) -> Loaded {
    let p = dir.path().join(name);
    std::fs::write(&p, bytes).unwrap();
    load(&p).unwrap()
}

#[test]
fn hf_checkpoint_and_its_gguf_conversion_give_the_same_logits() {
    let dir = tempfile::tempdir().unwrap();
    write_hf(dir.path());
    let gguf = dir.path().join("tiny.gguf");
    std::fs::write(&gguf, gguf_bytes()).unwrap();
    let hf = load(dir.path()).unwrap();
    let gg = load(&gguf).unwrap();
    assert_eq!(hf.info.quant.class, "bf16");
    assert_eq!(gg.info.quant.class, "f32");
    let text = "hello world, again!";
    let ids = hf.tokenizer.encode(text).unwrap();
    assert_eq!(ids, gg.tokenizer.encode(text).unwrap(), "both tokenizers agree");
    assert_eq!(hf.tokenizer.decode(&ids).unwrap(), text);
    let (a, b) = (logits(&hf, &ids), logits(&gg, &ids));
    let max_abs = a.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    for (i, (x, y)) in a.iter().zip(&b).enumerate() {
        assert!((x - y).abs() <= 1e-4 * max_abs.max(1.0), "logit {i}: hf {x} vs gguf {y}");
    }
}

#[test]
fn the_rope_pairing_matters_so_the_equivalence_test_can_fail() {
    let dir = tempfile::tempdir().unwrap();
    write_hf(dir.path());
    let mut hf = load(dir.path()).unwrap();
    let ids = hf.tokenizer.encode("abcdefgh").unwrap();
    let a = logits(&hf, &ids);
    hf.model.config.rope_pairing = kernels::ops::RopePairing::Adjacent;
    let b = logits(&hf, &ids);
    let diff = a.iter().zip(&b).fold(0.0f32, |m, (x, y)| m.max((x - y).abs()));
    assert!(diff > 1e-3, "pairing changed nothing (max diff {diff})");
}

#[test]
fn chat_template_from_tokenizer_config_renders_and_encodes_specials() {
    let dir = tempfile::tempdir().unwrap();
    write_hf(dir.path());
    let hf = load(dir.path()).unwrap();
    let msgs = [crate::tokenizer::chat::Message { role: "user".into(), content: "hi".into() }];
    let text = hf.tokenizer.render_chat(&msgs, true).unwrap();
    assert_eq!(text, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
    let ids = hf.tokenizer.encode(&text).unwrap();
    assert_eq!(ids[0], 1);
    assert!(hf.tokenizer.is_end_of_generation(2));
}

#[test]
fn block_forward_equals_the_one_token_chain_bit_for_bit() {
    let dir = tempfile::tempdir().unwrap();
    let gg = load_named(&dir, "tiny.gguf", gguf_bytes());
    let ids = gg.tokenizer.encode("the quick brown fox").unwrap();
    for fam in KernelFamily::all_supported() {
        let block = forward_with(&gg, fam, &ids);
        assert_chain_equals_block(&gg, fam, &ids, &block, "tiny llama");
    }
}

/// Attention chunks cover every (row, query head) pair of a pass exactly
/// once, each call within one (block, KV head) group, and the runs of a
/// decode step are balanced to one pair.
#[test]
fn attention_chunks_cover_every_pair_once() {
    use super::forward::AttendPlan;
    for n in [1usize, 2, 4, 5, 15, 16, 17, 40, 300] {
        for (n_kv, group) in [(1usize, 1usize), (1, 4), (3, 3), (5, 3), (2, 8)] {
            for threads in 1..=5 {
                let plan = AttendPlan::new(n, n_kv, group, threads);
                let mut seen = vec![0u8; n * n_kv * group];
                let mut sizes = Vec::new();
                for j in 0..plan.chunks() {
                    let mut size = 0;
                    for call in plan.calls(j) {
                        for (i, h) in call.pairs() {
                            assert!(i < n && h / group == call.kv_head, "pair ({i}, {h}) outside its call");
                            seen[i * n_kv * group + h] += 1;
                            size += 1;
                        }
                    }
                    sizes.push(size);
                }
                assert!(seen.iter().all(|&c| c == 1), "n {n}, {n_kv}x{group} heads, {threads} threads: {seen:?}");
                if plan.chunks() <= threads {
                    let (lo, hi) = (sizes.iter().min().unwrap(), sizes.iter().max().unwrap());
                    assert!(hi - lo <= 1, "unbalanced runs {sizes:?}");
                }
            }
        }
    }
}

/// A verify block equals the one-token chain at every width 1..=16 after a
/// short and after a long cache (positions across many key tiles, a tile
/// boundary inside the block and at its edges), for every kernel family, on
/// one, two and three threads (two and three cut the pair list into runs
/// that split KV heads between attention calls, `AttendPlan`).
#[test]
fn block_equals_chain_at_widths_1_to_16_over_short_and_long_caches_and_thread_counts() {
    let gg = {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("tiny-long.gguf");
        std::fs::write(&p, gguf_bytes_with(&vocab(), 512)).unwrap();
        load(&p).unwrap()
    };
    let v = gg.model.config.vocab;
    let ids: Vec<u32> = (0..300u32).map(|i| 3 + (i * 7 + i * i / 5) % (v as u32 - 3)).collect();
    for threads in [1, 2, 3] {
        let pool = crate::pool::Pool::new(threads).unwrap();
        pool.install(|| {
            for fam in KernelFamily::all_supported() {
                let mut chain = Vec::new();
                let mut s = Session::new(&gg.model.config);
                for &t in &ids {
                    chain.extend(gg.model.forward(fam, &mut s, &[t], LogitRows::Last).unwrap());
                }
                for start in [3usize, 15, 16, 241, 270] {
                    let mut s = Session::new(&gg.model.config);
                    gg.model.forward(fam, &mut s, &ids[..start], LogitRows::Last).unwrap();
                    for w in 1..=16 {
                        let block = gg.model.forward(fam, &mut s, &ids[start..start + w], LogitRows::All).unwrap();
                        let want = &chain[start * v..(start + w) * v];
                        assert!(
                            block.iter().zip(want).all(|(a, b)| a.to_bits() == b.to_bits()),
                            "{fam:?}, {threads} threads, width {w} after {start}"
                        );
                        s.truncate(start);
                    }
                }
            }
        });
    }
}

/// The tiny model with Q5_0 or Q5_1 layer matrices (repacked at load into
/// the row-interleaved layout): classified by its tensors, every kernel
/// family gives the scalar family's logits bit for bit, a block forward
/// equals the one-token chain, and the logits are those of its F32 twin
/// (the same weights dequantized) up to the 16-bit activations' error.
#[test]
fn q5_layer_matrices_give_the_same_logits_in_every_family_and_their_f32_twins() {
    let dir = tempfile::tempdir().unwrap();
    for ty in [GgmlType::Q5_0, GgmlType::Q5_1] {
        let class = ty.name().to_ascii_lowercase();
        let twin = load_named(&dir, &format!("{class}-f32.gguf"), gguf_bytes_stored(&vocab(), 64, ty, true, &[], &[]));
        let ids = twin.tokenizer.encode("the quick brown fox").unwrap();
        let exact = logits(&twin, &ids);
        let q = load_named(&dir, &format!("{class}.gguf"), gguf_bytes_typed(&vocab(), 64, ty));
        assert_eq!(q.info.quant.class, class);
        assert_eq!(q.info.weight_formats, vec!["f32".to_string(), class.clone()]);
        let want = forward_with(&q, KernelFamily::SCALAR, &ids);
        for fam in KernelFamily::all_supported() {
            let block = forward_with(&q, fam, &ids);
            assert_eq!(bits(&block), bits(&want), "{ty:?} {fam:?}");
            assert_chain_equals_block(&q, fam, &ids, &block, &format!("{ty:?}"));
        }
        // Measured: 6.3e-4 (Q5_0) and 2.9e-4 (Q5_1) of the largest logit; the
        // same model's layers in Q8_0 against their twin give 4.2e-4.
        let (diff, max_abs) = max_diff_and_scale(&want, &exact);
        assert!(diff <= 2e-3 * max_abs, "{ty:?}: max |q5 - f32 twin| {diff} of max |logit| {max_abs}");
    }
}

#[test]
fn truncating_the_session_then_rerunning_reproduces_the_logits() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("tiny.gguf");
    std::fs::write(&p, gguf_bytes()).unwrap();
    let gg = load(&p).unwrap();
    let ids = gg.tokenizer.encode("rollback test").unwrap();
    let fam = KernelFamily::best();
    let mut s = Session::new(&gg.model.config);
    let first = gg.model.forward(fam, &mut s, &ids, LogitRows::All).unwrap();
    s.truncate(3);
    let again = gg.model.forward(fam, &mut s, &ids[3..], LogitRows::All).unwrap();
    let v = gg.model.config.vocab;
    assert_eq!(first[3 * v..], again[..]);
}

#[test]
fn forward_refuses_out_of_vocabulary_ids_and_a_full_context_without_touching_the_cache() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("tiny.gguf");
    std::fs::write(&p, gguf_bytes()).unwrap();
    let gg = load(&p).unwrap();
    let mut s = Session::new(&gg.model.config);
    let fam = KernelFamily::best();
    assert!(gg.model.forward(fam, &mut s, &[9999], LogitRows::Last).is_err());
    assert_eq!(s.len(), 0);
    let long = vec![5u32; 65];
    assert!(matches!(
        gg.model.forward(fam, &mut s, &long, LogitRows::Last),
        Err(super::forward::ForwardError::ContextFull { .. })
    ));
    assert_eq!(s.len(), 0);
}

#[test]
fn random_accept_and_reject_patterns_leave_the_cache_as_a_classic_run_leaves_it() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("tiny.gguf");
    std::fs::write(&p, gguf_bytes()).unwrap();
    let gg = load(&p).unwrap();
    let fam = KernelFamily::best();
    let seq = gg.tokenizer.encode("speculative decoding must roll back exactly, every time!").unwrap();
    let mut classic = Session::new(&gg.model.config);
    for &t in &seq {
        gg.model.forward(fam, &mut classic, &[t], LogitRows::Last).unwrap();
    }
    let mut rng = Rng(0x5EED);
    for trial in 0..20 {
        let mut s = Session::new(&gg.model.config);
        let mut pos = 0;
        while pos < seq.len() {
            // A block: the true next token, then a draft whose first `k`
            // tokens are right and the rest wrong; keep 1 + k of it.
            let width = 1 + (rng.f32().abs() * 6.0) as usize;
            let k = ((rng.f32().abs() * (width + 1) as f32) as usize).min(width);
            let mut block = vec![seq[pos]];
            for i in 0..width {
                let right = seq.get(pos + 1 + i).copied();
                block.push(match right {
                    Some(t) if i < k => t,
                    _ => (seq[pos] + 1 + i as u32) % gg.model.config.vocab as u32,
                });
            }
            let keep = (1 + k).min(seq.len() - pos);
            gg.model.forward(fam, &mut s, &block, LogitRows::All).unwrap();
            s.truncate(pos + keep);
            pos += keep;
        }
        assert_eq!(s, classic, "trial {trial}");
    }
}

fn load_bytes(bytes: &[u8]) -> Loaded {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("tiny-gemma3.gguf");
    std::fs::write(&p, bytes).unwrap();
    load(&p).unwrap()
}

#[test]
fn gemma3_block_forward_equals_the_chain_across_the_window_at_every_width() {
    let g = load_bytes(&gemma3_gguf(3));
    assert_eq!(g.info.architecture, "gemma3");
    assert_eq!(g.tokenizer.chat_template_from, crate::tokenizer::chat::TemplateSource::Builtin("gemma"));
    let ids: Vec<u32> = (0..14).map(|i| 262 + (i * 5 % 8) as u32).collect();
    let v = g.model.config.vocab;
    for fam in KernelFamily::all_supported() {
        let mut chain = Vec::new();
        let mut s = Session::new(&g.model.config);
        for &t in &ids {
            chain.extend(g.model.forward(fam, &mut s, &[t], LogitRows::Last).unwrap());
        }
        // Every split of the sequence into a prefix and a block of width w.
        for w in 1..=8 {
            for start in 0..ids.len() - w {
                let mut s = Session::new(&g.model.config);
                if start > 0 {
                    g.model.forward(fam, &mut s, &ids[..start], LogitRows::Last).unwrap();
                }
                let block = g.model.forward(fam, &mut s, &ids[start..start + w], LogitRows::All).unwrap();
                let want = &chain[start * v..(start + w) * v];
                assert!(
                    block.iter().zip(want).all(|(a, b)| a.to_bits() == b.to_bits()),
                    "{fam:?} width {w} from {start}"
                );
            }
        }
    }
}

#[test]
fn gemma3_the_window_and_the_norms_change_the_output_so_the_tests_can_fail() {
    let ids: Vec<u32> = (0..10).map(|i| 262 + (i * 3 % 8) as u32).collect();
    let narrow = logits(&load_bytes(&gemma3_gguf(3)), &ids);
    let wide = logits(&load_bytes(&gemma3_gguf(64)), &ids);
    let v = narrow.len() / ids.len();
    // Rows that see no more than the window agree; later ones do not.
    assert_eq!(narrow[..3 * v], wide[..3 * v]);
    assert_ne!(narrow[4 * v..], wide[4 * v..]);
}

#[test]
fn gemma3_sentencepiece_and_the_builtin_turns_encode_a_chat() {
    let g = load_bytes(&gemma3_gguf(3));
    let tok = &g.tokenizer;
    let ab = tok.encode("ab").unwrap();
    assert_eq!(tok.id_to_token(ab[0]).as_deref(), Some("ab"));
    assert_eq!(tok.encode_prompt("a").unwrap()[0], 2, "BOS first");
    let msgs = vec![
        crate::tokenizer::chat::Message { role: "system".into(), content: " be brief ".into() },
        crate::tokenizer::chat::Message { role: "user".into(), content: "abc<end_of_turn>".into() },
    ];
    assert_eq!(
        tok.render_chat(&msgs, true).unwrap(),
        "<start_of_turn>user\nbe brief\n\nabc<end_of_turn><end_of_turn>\n<start_of_turn>model\n"
    );
    // The user's "<end_of_turn>" is text, the template's is the control token.
    let ids = tok.encode_chat(&msgs, usize::MAX).unwrap();
    assert_eq!(ids.iter().filter(|&&i| i == 5).count(), 1, "{ids:?}");
    assert_eq!(ids.iter().filter(|&&i| i == 4).count(), 2, "{ids:?}");
}

fn load_error(bytes: &[u8]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("bad-gemma3.gguf");
    std::fs::write(&p, bytes).unwrap();
    match load(&p) {
        Ok(_) => panic!("loaded"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn gemma3_features_this_runtime_does_not_run_are_refused_by_name() {
    let e = load_error(&gemma3_gguf_with(3, 7, &[("gemma3.rope.scaling.type", Value::String("linear".into()))], None));
    assert!(e.contains("RoPE scaling") && e.contains("linear"), "{e}");
    let e = load_error(&gemma3_gguf_with(3, 7, &[("gemma3.attention.value_length", Value::U32(8))], None));
    assert!(e.contains("value_length = 8"), "{e}");
    let e = load_error(&gemma3_gguf_with(3, 62, &[], None));
    assert!(e.contains("27B"), "{e}");
    let e = load_error(&gemma3_gguf_with(3, 7, &[], Some("gemma3.attention.sliding_window")));
    assert!(e.contains("gemma3.attention.sliding_window"), "{e}");
    // `rope.scaling.type = none` is no scaling.
    let ok = gemma3_gguf_with(3, 7, &[("gemma3.rope.scaling.type", Value::String("none".into()))], None);
    load_bytes(&ok);
}

/// The tiny model with F16 or BF16 layer matrices: they stay 16-bit
/// (their formats are reported), every family gives the scalar logits bit
/// for bit, a block forward equals the one-token chain, and the logits
/// equal those of the F32 file of the same (16-bit representable) weights
/// bit for bit: the 16-bit kernels are the f32 kernel over exactly widened
/// weights.
#[test]
fn f16_and_bf16_layer_matrices_give_their_f32_twins_logits_bit_for_bit_in_every_family() {
    let dir = tempfile::tempdir().unwrap();
    for ty in [GgmlType::F16, GgmlType::BF16] {
        let class = ty.name().to_ascii_lowercase();
        let m = load_named(&dir, &format!("{class}.gguf"), gguf_bytes_typed(&vocab(), 64, ty));
        let twin = load_named(&dir, &format!("{class}-f32.gguf"), gguf_bytes_stored(&vocab(), 64, ty, true, &[], &[]));
        assert_eq!(m.info.quant.class, class);
        assert_eq!(m.info.weight_formats, vec![class.clone(), "f32".to_string()]);
        let ids = m.tokenizer.encode("the quick brown fox").unwrap();
        for fam in KernelFamily::all_supported() {
            let block = forward_with(&m, fam, &ids);
            let want = forward_with(&twin, fam, &ids);
            assert_eq!(bits(&block), bits(&want), "{ty:?} {fam:?} against the f32 twin");
            assert_chain_equals_block(&m, fam, &ids, &block, &format!("{ty:?}"));
        }
    }
}

/// A Hugging Face bf16 checkpoint's matrices stay bf16 in memory (the
/// embedding, tied head and layers), not f32.
#[test]
fn hf_bf16_matrices_are_kept_in_16_bits() {
    let dir = tempfile::tempdir().unwrap();
    write_hf(dir.path());
    let hf = load(dir.path()).unwrap();
    assert_eq!(hf.info.weight_formats, vec!["bf16".to_string()]);
}

/// The Q2_K / Q3_K tiny Llama loads with its class and formats, generates
/// greedily, every family gives the scalar logits bit for bit, a block
/// forward equals the one-token chain at every width 1..=16, and its logits
/// are its F32 twin's up to the 16-bit activations' error.
#[test]
fn q2_k_and_q3_k_models_load_generate_and_keep_block_equal_to_chain() {
    let dir = tempfile::tempdir().unwrap();
    for ty in [GgmlType::Q2K, GgmlType::Q3K] {
        let class = ty.name().to_ascii_lowercase();
        let m = load_named(&dir, &format!("{class}.gguf"), k16_gguf(ty, false));
        let twin = load_named(&dir, &format!("{class}-f32.gguf"), k16_gguf(ty, true));
        assert_eq!(m.info.quant.class, class);
        assert_eq!(m.info.weight_formats, vec![class.clone()]);
        let v = m.model.config.vocab;
        // Greedy generation: sixteen tokens after a prompt.
        let mut ids = m.tokenizer.encode("hello").unwrap();
        let mut s = Session::new(&m.model.config);
        let mut logits = m.model.forward(KernelFamily::best(), &mut s, &ids, LogitRows::Last).unwrap();
        for _ in 0..16 {
            assert!(logits.iter().all(|x| x.is_finite()), "{ty:?}");
            let next = (0..v).max_by(|&a, &b| logits[a].total_cmp(&logits[b])).unwrap() as u32;
            ids.push(next);
            logits = m.model.forward(KernelFamily::best(), &mut s, &[next], LogitRows::Last).unwrap();
        }
        let n = ids.len();
        let want = forward_with(&m, KernelFamily::SCALAR, &ids);
        for fam in KernelFamily::all_supported() {
            // Blocks of every width 1..=16 after a one-token prefix.
            for w in 1..=16.min(n - 1) {
                let mut s = Session::new(&m.model.config);
                let mut got = m.model.forward(fam, &mut s, &ids[..1], LogitRows::All).unwrap();
                let mut at = 1;
                while at < n {
                    let end = (at + w).min(n);
                    got.extend(m.model.forward(fam, &mut s, &ids[at..end], LogitRows::All).unwrap());
                    at = end;
                }
                assert_eq!(bits(&got), bits(&want), "{ty:?} {fam:?} width {w}");
            }
        }
        let (diff, max_abs) = max_diff_and_scale(&want, &forward_with(&twin, KernelFamily::best(), &ids));
        // Measured: 1.1e-4 (Q2_K) and 5.8e-4 (Q3_K) of the largest logit.
        assert!(diff <= 2e-3 * max_abs, "{ty:?}: max |quantized - f32 twin| {diff} of max |logit| {max_abs}");
    }
}

#[test]
fn llama_gguf_variants_this_runtime_does_not_run_are_refused_by_name() {
    let s = |x: &str| Value::String(x.into());
    for t in ["yarn", "longrope"] {
        let e = llama_error(&[("llama.rope.scaling.type", s(t))], &[]);
        assert!(e.contains(&format!("llama.rope.scaling.type = {t}")), "{e}");
    }
    let e = llama_error(&[("llama.expert_count", Value::U32(8))], &[]);
    assert!(e.contains("mixture of experts") && e.contains("llama.expert_count = 8"), "{e}");
    let e = llama_error(&[], &[("blk.0.attn_q.bias", vec![0.0; DIM])]);
    assert!(e.contains("blk.0.attn_q.bias") && e.contains("attention biases"), "{e}");
    let e = llama_error(&[], &[("rope_freqs.weight", vec![1.0; 3])]);
    assert!(e.contains("rope_freqs.weight"), "{e}");
    let linear = [("llama.rope.scaling.type", s("linear")), ("llama.rope.scaling.factor", Value::F32(4.0))];
    let e = llama_error(&linear, &[("rope_freqs.weight", vec![1.0; HD / 2])]);
    assert!(e.contains("rope_freqs.weight together with llama.rope.scaling.type = linear"), "{e}");
    // A linear factor and the frequency factors each load.
    let l = load_bytes(&gguf_bytes_stored(&vocab(), 64, GgmlType::F32, false, &linear, &[]));
    assert_eq!(l.model.config.rope_scaling, super::config::RopeScaling::Linear { factor: 4.0 });
    let f: Vec<f32> = (0..HD / 2).map(|i| 1.0 + i as f32).collect();
    let l =
        load_bytes(&gguf_bytes_stored(&vocab(), 64, GgmlType::F32, false, &[], &[("rope_freqs.weight", f.clone())]));
    assert_eq!(l.model.config.rope_scaling, super::config::RopeScaling::FreqFactors(f));
}

fn llama_error(extra: &[(&str, Value)], tensors: &[(&str, Vec<f32>)]) -> String {
    load_error(&gguf_bytes_stored(&vocab(), 64, GgmlType::F32, false, extra, tensors))
}

/// A batched pass ([`super::forward::Model::forward_batch`]) gives every
/// segment the logits and the cache it gets alone, bit for bit: mixed
/// segments (one-token decode rows, verify blocks, prefill chunks, `Last`
/// and `All` rows) over caches of different lengths (tile boundaries
/// inside and at the edges of a segment), in random order, for every kernel
/// family on one, two and three threads, for a Llama and for Gemma 3's
/// sliding-window layers.
#[test]
fn a_batched_pass_equals_each_segment_alone() {
    use super::forward::Segment;
    let dir = tempfile::tempdir().unwrap();
    let models = [
        ("llama", load_named(&dir, "tiny-long.gguf", gguf_bytes_with(&vocab(), 512))),
        ("gemma3", load_named(&dir, "gemma3.gguf", gemma3_gguf(8))),
    ];
    for (name, m) in &models {
        let c = &m.model.config;
        let v = c.vocab;
        let ids: Vec<u32> = (0..200u32).map(|i| 3 + (i * 11 + i * i / 3) % (v as u32 - 3)).collect();
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move |k: usize| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % k as u64) as usize
        };
        for threads in [1, 2, 3] {
            let pool = crate::pool::Pool::new(threads).unwrap();
            pool.install(|| {
                for fam in KernelFamily::all_supported() {
                    for trial in 0..6 {
                        let segs = 1 + next(5);
                        // (cache length before, rows, all rows?) per segment
                        let plan: Vec<(usize, usize, bool)> = (0..segs)
                            .map(|_| {
                                let start = [0, 1, 15, 16, 17, 31, 64, 100][next(8)].min(c.context_length - 40);
                                let rows = [1, 1, 2, 5, 16, 17, 33][next(7)];
                                (start, rows, next(2) == 0)
                            })
                            .collect();
                        let mut alone = Vec::new();
                        let mut sessions = Vec::new();
                        for &(start, rows, all) in &plan {
                            let mut s = Session::new(c);
                            if start > 0 {
                                m.model.forward(fam, &mut s, &ids[..start], LogitRows::Last).unwrap();
                            }
                            sessions.push(s.clone());
                            let which = if all { LogitRows::All } else { LogitRows::Last };
                            let l = m.model.forward(fam, &mut s, &ids[start..start + rows], which).unwrap();
                            alone.push((l, s));
                        }
                        let mut batch: Vec<Segment> = sessions
                            .iter_mut()
                            .zip(&plan)
                            .map(|(s, &(start, rows, all))| Segment {
                                session: s,
                                tokens: &ids[start..start + rows],
                                which: if all { LogitRows::All } else { LogitRows::Last },
                            })
                            .collect();
                        let got = m.model.forward_batch(fam, &mut batch).unwrap();
                        drop(batch);
                        for (k, ((want, want_s), got)) in alone.iter().zip(&got).enumerate() {
                            let what =
                                format!("{name} {fam:?} {threads} threads trial {trial} segment {k} of {plan:?}");
                            assert_eq!(got.len() % v, 0, "{what}");
                            assert_eq!(bits(got), bits(want), "{what}: logits");
                            assert!(sessions[k] == *want_s, "{what}: cache");
                        }
                    }
                }
            });
        }
    }
}

/// A batch with one bad segment is refused whole: no session changes.
#[test]
fn a_refused_batch_writes_no_session() {
    use super::forward::{ForwardError, Segment};
    let dir = tempfile::tempdir().unwrap();
    let m = load_named(&dir, "tiny.gguf", gguf_bytes());
    let c = &m.model.config;
    let fam = KernelFamily::best();
    let (mut a, mut b) = (Session::new(c), Session::new(c));
    m.model.forward(fam, &mut a, &[3, 4], LogitRows::Last).unwrap();
    let before = (a.clone(), b.clone());
    let bad = c.vocab as u32;
    let mut batch = [
        Segment { session: &mut a, tokens: &[5], which: LogitRows::Last },
        Segment { session: &mut b, tokens: &[3, bad], which: LogitRows::Last },
    ];
    let e = m.model.forward_batch(fam, &mut batch).unwrap_err();
    assert!(matches!(e, ForwardError::TokenOutOfRange { .. }), "{e}");
    assert!(a == before.0 && b == before.1);
}
