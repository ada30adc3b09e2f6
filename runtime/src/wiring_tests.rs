//! Tests that drive several modules together: a model through the engine,
//! the block-vs-chain probe, the speculative decoder and device placement;
//! the policy through `policy explain`. They live here, above the modules
//! they join, so that no module's own tests import a module that imports
//! it back (`scripts/import-circles.py` finds no circle, tests included).

mod model {
    use crate::gguf::Value;
    use crate::model::{Loaded, load};
    use crate::test_models::*;
    use kernels::dispatch::KernelFamily;
    use kernels::quant::GgmlType;

    fn load_bytes(bytes: &[u8]) -> Loaded {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("tiny.gguf");
        std::fs::write(&p, bytes).unwrap();
        load(&p).unwrap()
    }

    #[test]
    fn a_tokenizer_with_fewer_tokens_than_the_embedding_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("short-vocab.gguf");
        let tokens = vocab();
        std::fs::write(&p, gguf_bytes_with(&tokens[..tokens.len() - 2], 64)).unwrap();
        let loaded = load(&p).expect("the file itself is readable");
        let e = crate::engine::Engine::new(loaded, KernelFamily::SCALAR, 1).err().expect("refused");
        let m = e.to_string();
        assert!(m.contains(&format!("{} tokens but the embedding has {} rows", tokens.len() - 2, tokens.len())), "{m}");
        // The same model with every token is accepted.
        std::fs::write(&p, gguf_bytes_with(&tokens, 64)).unwrap();
        assert!(crate::engine::Engine::new(load(&p).unwrap(), KernelFamily::SCALAR, 1).is_ok());
    }

    #[test]
    fn a_context_too_short_for_the_probe_declines_instead_of_failing() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("short-context.gguf");
        std::fs::write(&p, gguf_bytes_with(&vocab(), 6)).unwrap();
        let l = load(&p).unwrap();
        let fam = KernelFamily::best();
        // Width 8 needs 10 positions: nothing can be compared.
        let r = crate::speculative::probe::block_vs_chain(&l.model, fam, 1, &[5, 6, 7], 8).expect("no error");
        assert!(!r.passed && r.compared_bytes == 0, "{r:?}");
        // Width 3 fits (a shorter prefix) and passes.
        let r = crate::speculative::probe::block_vs_chain(&l.model, fam, 1, &[5, 6, 7], 3).expect("no error");
        assert!(r.passed && r.compared_bytes > 0, "{r:?}");
        // Through the setup, the drafter is declined with the reason.
        let engine = crate::engine::Engine::new(l, fam, 1).unwrap();
        let args = crate::speculative::setup::SpeculationSettings {
            drafter: Some("ngram".into()),
            draft_width: Some("8".into()),
            ..Default::default()
        };
        let d = crate::speculative::setup::Speculation::from_settings(&args, &engine).unwrap();
        let s = d.speculation.expect("a drafter");
        assert!(s.declined_reason().is_some(), "{:?}", s.probe);
        assert_eq!(s.active_width(), None);
    }

    #[test]
    fn gemma3_on_a_cuda_device_is_refused_and_auto_placement_keeps_the_cpu() {
        use crate::device::{DeviceError, DeviceRequest, place};
        let mut g = load_bytes(&gemma3_gguf(3));
        match place(&mut g, DeviceRequest::Cuda(0)) {
            Err(e @ DeviceError::CpuOnlyArchitecture { .. }) => assert!(e.to_string().contains("gemma3"), "{e}"),
            other => panic!("expected the CPU-only refusal, got {:?}", other.map(|r| r.is_some())),
        }
        assert!(place(&mut g, DeviceRequest::Auto).unwrap().is_none());
    }

    /// Greedy speculative decoding (the n-gram drafter at widths 1..16) emits
    /// exactly the classic tokens on the F16, BF16, Q2_K and Q3_K tiny models,
    /// at one and two threads.
    #[test]
    fn speculative_output_equals_classic_on_the_new_weight_types_at_one_and_two_threads() {
        use crate::engine::Engine;
        use crate::sampling::SamplingParams;
        use crate::speculative::drafter::NgramDrafter;
        let dir = tempfile::tempdir().unwrap();
        let files = [
            ("f16.gguf", gguf_bytes_typed(&vocab(), 64, GgmlType::F16)),
            ("bf16.gguf", gguf_bytes_typed(&vocab(), 64, GgmlType::BF16)),
            ("q2_k.gguf", k16_gguf(GgmlType::Q2K, false)),
            ("q3_k.gguf", k16_gguf(GgmlType::Q3K, false)),
        ];
        let greedy = SamplingParams::default();
        for (name, bytes) in files {
            let p = dir.path().join(name);
            std::fs::write(&p, bytes).unwrap();
            for threads in [1, 2] {
                let e = Engine::new(load(&p).unwrap(), KernelFamily::best(), threads).unwrap();
                let mut rounds = 0;
                // Random weights stop at the end token after a prompt-dependent
                // number of tokens: several prompts, so that some run long.
                for text in
                    ["abcabcabcabc, abcabc", "hello hello hello", "the cat. the cat. the", "zzz, yyy, zzz, yyy", "a"]
                {
                    let ids = e.loaded.tokenizer.encode(text).unwrap();
                    let pre = e.prefill(&ids).unwrap();
                    let classic = e.decode(pre.clone(), 24, &greedy).unwrap();
                    for w in [1, 2, 3, 4, 8, 16] {
                        let mut d = NgramDrafter { max_n: 4, min_n: 1 };
                        let width = ::policy::Width::new(w).unwrap();
                        let sink = &mut crate::engine::NoSink;
                        let (spec, stats) =
                            e.decode_speculative(pre.clone(), 24, &greedy, &mut d, width, sink).unwrap();
                        assert_eq!(spec.token_ids, classic.token_ids, "{name} {text:?} width {w} at {threads} threads");
                        rounds += stats.rounds;
                    }
                }
                assert!(rounds > 0, "{name}: no speculative round ran");
            }
        }
    }

    /// The third emitted token's distribution under sampled speculative
    /// decoding with the adaptive draft length equals classic sampling's,
    /// computed exactly by enumerating the first two tokens on the tiny
    /// model (the chi-square check of `speculative::decode`'s tests, extended from
    /// one verify position to the whole loop: drafts of every length,
    /// plain steps by choice, rollbacks). The same samples checked against
    /// another temperature's distribution must fail, or the check proves
    /// nothing.
    #[test]
    fn sampled_adaptive_speculation_keeps_the_target_distribution() {
        use crate::sampling::SamplingParams;
        let p = SamplingParams { temperature: 1.0, ..Default::default() };
        sampled_adaptive_speculation_matches(p, SamplingParams { temperature: 0.6, ..p }, false);
    }

    /// The same check with repetition, presence and frequency penalties and
    /// min-p: the exact distribution penalizes each position for the tokens
    /// before it, counted from scratch
    /// ([`crate::penalty::penalize_from_scratch`]); the speculative loop
    /// must match it (each verified row penalized for the prompt, the
    /// accepted tokens and the drafts before it). The same samples checked
    /// against the unpenalized distribution must fail. vLLM's scopes (the
    /// penalties on the output differ from token to token) and llama.cpp's
    /// window of the last 3 tokens (tokens leave it as the loop goes). The
    /// drafter is the target model itself, sampling without penalties: its
    /// drafts are mostly accepted, so the third token often comes from a
    /// verify row after an accepted draft, where a history missing that
    /// draft would show (the outcome keys repeats apart: a row penalized
    /// without the draft before it repeats it more often).
    #[test]
    fn sampled_adaptive_speculation_with_penalties_keeps_the_penalized_distribution() {
        use crate::sampling::{PenaltyScope, SamplingParams};
        for scope in [PenaltyScope::Vllm, PenaltyScope::Last(3)] {
            let p = SamplingParams {
                temperature: 1.0,
                repetition_penalty: 1.8,
                presence_penalty: 2.0,
                frequency_penalty: 2.0,
                min_p: 0.01,
                penalty_scope: scope,
                ..Default::default()
            };
            sampled_adaptive_speculation_matches(
                p,
                SamplingParams { repetition_penalty: 1.0, presence_penalty: 0.0, frequency_penalty: 0.0, ..p },
                true,
            );
        }
    }

    /// Sampled speculative decoding with `p` (its seed replaced per run)
    /// draws the third token as classic sampling with `p` does, and not
    /// as with `wrong` (the check's power). `model_drafter`: the target
    /// drafts for itself at a fixed width of 3, else the n-gram drafter
    /// with the adaptive length.
    fn sampled_adaptive_speculation_matches(
        p: crate::sampling::SamplingParams,
        wrong: crate::sampling::SamplingParams,
        model_drafter: bool,
    ) {
        use crate::engine::Engine;
        use crate::model::forward::LogitRows;
        use crate::penalty::penalize_from_scratch;
        use crate::sampling::{SamplingParams, distribution};
        use crate::speculative::drafter::{Drafter, ModelDrafter, NgramDrafter};
        use crate::speculative::schedule::Schedule;
        use ::policy::adaptive::CostModel;
        use ::policy::table::CostCurve;
        use statrs::distribution::{ChiSquared, ContinuousCDF};
        use std::collections::BTreeMap;

        let e = Engine::new(load_bytes(&gguf_bytes()), KernelFamily::best(), 1).unwrap();
        let own = ModelDrafter::new(crate::policy::DrafterKind::DraftModel, load_bytes(&gguf_bytes()).model);
        // Every character once: whatever is sampled, the n-gram drafter
        // finds an earlier occurrence to draft from (and the tiny model's
        // 64 positions leave room for drafts after it).
        let ids = e.loaded.tokenizer.encode(VOCAB_CHARS).unwrap();
        let pre = e.prefill(&ids).unwrap();
        let tok = &e.loaded.tokenizer;
        let model = &e.loaded.model;
        // Outcome of a run: the third token and whether it repeats the
        // second, or at which token it stopped (an end-of-generation token
        // is not emitted): keys 0, 1, 2 for a stop before the first,
        // second, third token; 3 + 2·id + [repeat] otherwise.
        let key = |t2: u32, t3: u32| 3 + 2 * u64::from(t3) + u64::from(t2 == t3);
        // Each position's distribution: its logits penalized for the
        // tokens before it, counted from scratch.
        let at = |logits: &[f32], after: &[u32], p: &SamplingParams| {
            let history: Vec<u32> = ids.iter().chain(after).copied().collect();
            distribution(&penalize_from_scratch(logits, &history, ids.len(), p), p)
        };
        let exact = |p: &SamplingParams| -> BTreeMap<u64, f64> {
            let mut out: BTreeMap<u64, f64> = BTreeMap::new();
            for (t1, p1) in at(&pre.logits, &[], p) {
                if tok.is_end_of_generation(t1) {
                    *out.entry(0).or_default() += p1;
                    continue;
                }
                let mut s1 = pre.session.clone();
                let l1 = model.forward(e.family, &mut s1, &[t1], LogitRows::Last).unwrap();
                for (t2, p2) in at(&l1, &[t1], p) {
                    if tok.is_end_of_generation(t2) {
                        *out.entry(1).or_default() += p1 * p2;
                        continue;
                    }
                    let mut s2 = s1.clone();
                    let l2 = model.forward(e.family, &mut s2, &[t2], LogitRows::Last).unwrap();
                    for (t3, p3) in at(&l2, &[t1, t2], p) {
                        let k = if tok.is_end_of_generation(t3) { 2 } else { key(t2, t3) };
                        *out.entry(k).or_default() += p1 * p2 * p3;
                    }
                }
            }
            out
        };
        // Rows cheap enough that drafting pays at the prior, so every
        // draft length is tried and the acceptance steers it.
        let cost = CostModel::new(&[CostCurve { context: 8, relative: vec![1.0, 1.02, 1.04, 1.06, 1.08] }]).unwrap();
        // The target drafting for itself costs as much per row as it
        // saves, so the adaptive length would never draft: a fixed width.
        let schedule = if model_drafter {
            Schedule::from(::policy::Width::new(3).unwrap())
        } else {
            Schedule::Adaptive { cap: ::policy::Width::new(4).unwrap(), cost }
        };
        let n = 20_000;
        let mut counts: BTreeMap<u64, usize> = BTreeMap::new();
        let (mut lengths, mut rounds) = (vec![0usize; 5], 0);
        for seed in 0..n {
            let p = SamplingParams { seed: seed as u64, ..p };
            let mut d: Box<dyn Drafter> =
                if model_drafter { own.fork() } else { Box::new(NgramDrafter { max_n: 4, min_n: 1 }) };
            // Eight tokens: the third is the one counted, the rest give the
            // controller room to choose lengths up to the cap.
            let sink = &mut crate::engine::NoSink;
            let (g, st) = e.decode_speculative(pre.clone(), 8, &p, d.as_mut(), schedule.clone(), sink).unwrap();
            let k = match g.token_ids.get(2) {
                Some(&t) => key(g.token_ids[1], t),
                None => g.token_ids.len() as u64,
            };
            *counts.entry(k).or_default() += 1;
            for (l, c) in lengths.iter_mut().zip(&st.draft_lengths) {
                *l += c;
            }
            rounds += st.rounds;
        }
        assert!(rounds > n / 4, "too few verify rounds ran ({rounds}): the check would prove little");
        assert!(
            model_drafter || lengths.iter().filter(|&&c| c > 0).count() >= 4,
            "the draft length hardly varied: {lengths:?}"
        );
        // Pearson's chi-square over the outcomes, those expected fewer than
        // 5 times pooled into one bin.
        let chi = |want: &BTreeMap<u64, f64>| -> (f64, f64) {
            let (mut stat, mut bins) = (0.0, 0usize);
            let (mut pooled_e, mut pooled_o) = (0.0, 0.0);
            let keys: std::collections::BTreeSet<u64> = want.keys().chain(counts.keys()).copied().collect();
            for k in keys {
                let ex = want.get(&k).copied().unwrap_or(0.0) * n as f64;
                let ob = counts.get(&k).copied().unwrap_or(0) as f64;
                if ex < 5.0 {
                    pooled_e += ex;
                    pooled_o += ob;
                } else {
                    stat += (ob - ex).powi(2) / ex;
                    bins += 1;
                }
            }
            if pooled_e > 0.0 {
                stat += (pooled_o - pooled_e).powi(2) / pooled_e;
                bins += 1;
            }
            (stat, ChiSquared::new((bins - 1) as f64).unwrap().inverse_cdf(0.999))
        };
        let (stat, limit) = chi(&exact(&p));
        assert!(stat < limit, "chi-square {stat:.1} >= {limit:.1}: counts {counts:?}");
        let (stat, limit) = chi(&exact(&wrong));
        assert!(stat > limit, "another setting's distribution passed ({stat:.1} < {limit:.1}): no power");
    }

    #[test]
    fn a_scaled_llama_on_a_cuda_device_is_refused_by_name() {
        use crate::device::{DeviceError, DeviceRequest, place};
        let s = |x: &str| Value::String(x.into());
        let linear = [("llama.rope.scaling.type", s("linear")), ("llama.rope.scaling.factor", Value::F32(4.0))];
        let mut l = load_bytes(&gguf_bytes_stored(&vocab(), 64, GgmlType::F32, false, &linear, &[]));
        match place(&mut l, DeviceRequest::Cuda(0)) {
            Err(e @ DeviceError::CpuOnlyArchitecture { .. }) => assert!(e.to_string().contains("RoPE scaling"), "{e}"),
            other => panic!("expected the CPU-only refusal, got {:?}", other.map(|r| r.is_some())),
        }
    }
}

mod policy {
    use crate::checkpoint::tests::{fixture, gguf_with};
    use crate::test_policy::{FP, HOST, In, entry, resolver, table};
    use ::policy::kind::DrafterSettings;
    use ::policy::resolve::Provenance;
    use ::policy::{DeviceClass, HostClass, Width};
    use kernels::quant::GgmlType;
    use std::path::PathBuf;

    #[test]
    fn a_quantized_target_with_an_unquantized_drafter_resolves_on_the_targets_class() {
        let target = tempfile::tempdir().unwrap();
        std::fs::copy(fixture("modelopt-nvfp4.json"), target.path().join("config.json")).unwrap();
        let drafter = tempfile::tempdir().unwrap();
        std::fs::copy(fixture("unquantized-bf16.json"), drafter.path().join("config.json")).unwrap();
        let t = table(&[
            entry("draft-model", "cuda:sm_121", "bf16", "2", FP),
            entry("draft-model", "cuda:sm_121", "nvfp4", "6", FP),
        ]);
        let r = resolver(&t);
        let q = crate::commands::policy::Question {
            target: target.path(),
            drafter_model: Some(drafter.path()),
            drafter: Some("draft-model"),
            device_class: &DeviceClass::parse("cuda:sm_121").unwrap(),
            device_from: "--device",
            host_class: &HostClass::parse(HOST).unwrap(),
            host_from: "--host-class",
            threads: 2,
            precision: Default::default(),
            settings: &DrafterSettings::default(),
            flag: None,
            env: None,
        };
        let e = crate::commands::policy::explain(&r, &q).unwrap();
        assert_eq!(e.target_quant.class, "nvfp4");
        assert_eq!(e.drafter_quant.as_ref().unwrap().class, "bf16");
        let res = &e.resolutions[0];
        assert_eq!(res.width.map(Width::get), Some(6), "{res:?}");
        match &res.provenance {
            Provenance::Measured { entry, .. } => assert_eq!(entry.key.quant, "nvfp4"),
            p => panic!("{p:?}"),
        }
        assert!(res.width_from.contains("with an nvfp4 llama 134.5M target"), "{}", res.width_from);
        // The human rendering names the class, its evidence and every step.
        let text = crate::commands::policy::render(&e);
        for want in ["nvfp4", "quant_algo", "not part of the key", "-> 4. policy table"] {
            assert!(text.contains(want), "{want:?} missing from:\n{text}");
        }
    }

    /// `policy explain` of the GGUF target `p` on `cpu:x86_64-avx2` at 2
    /// threads, as if run on the CPU class `host`, with no drafter flag.
    fn explain_gguf(t: &::policy::Table, p: &std::path::Path, host: &str) -> crate::commands::policy::Explanation {
        let q = crate::commands::policy::Question {
            target: p,
            drafter_model: None,
            drafter: None,
            device_class: &DeviceClass::parse("cpu:x86_64-avx2").unwrap(),
            device_from: "--device",
            host_class: &HostClass::parse(host).unwrap(),
            host_from: "--host-class",
            threads: 2,
            precision: Default::default(),
            settings: &DrafterSettings::default(),
            flag: None,
            env: None,
        };
        crate::commands::policy::explain(&resolver(t), &q).unwrap()
    }

    #[test]
    fn explain_reads_a_gguf_target_without_loading_weights() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.gguf");
        let f = gguf_with(&[GgmlType::Q4_1; 3], Some(3));
        std::fs::write(&p, f.bytes()).unwrap();
        let t = table(&[entry("ngram", "cpu:x86_64-avx2", "q4_1", "5", FP)]);
        let e = explain_gguf(&t, &p, HOST);
        assert_eq!(e.target_quant.class, "q4_1");
        let widths: Vec<_> = e.resolutions.iter().map(|r| r.width.map(Width::get)).collect();
        assert_eq!(widths, [Some(5), Some(4), Some(4), Some(7), Some(1), Some(4)]);
        let json = serde_json::to_value(&e).unwrap();
        assert_eq!(json["resolutions"][0]["width_from"].as_str().unwrap(), e.resolutions[0].width_from);
        assert_eq!(json["resolutions"][0]["steps"][3]["decided"], true);
    }

    #[test]
    fn explain_for_another_cpu_class_names_where_the_entry_was_measured() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.gguf");
        std::fs::write(&p, gguf_with(&[GgmlType::Q4_1; 3], Some(3)).bytes()).unwrap();
        let t = table(&[entry("ngram", "cpu:x86_64-avx2", "q4_1", "5", FP)]);
        let e = explain_gguf(&t, &p, "intel-sapphire-rapids");
        assert_eq!(e.generate.width.map(Width::get), Some(5), "{}", e.generate.width_from);
        let text = crate::commands::policy::render(&e);
        for want in [
            "host class    intel-sapphire-rapids (--host-class)",
            "measured on amd-zen4, this host is intel-sapphire-rapids",
            "whole interval is above 1.0",
        ] {
            assert!(text.contains(want), "{want:?} missing from:\n{text}");
        }
    }

    #[test]
    fn policy_explain_refuses_out_of_range_suffix_flags_naming_them() {
        let base = crate::commands::policy::ExplainSettings {
            target: Some(PathBuf::from("/nonexistent/target.gguf")),
            policy: None,
            drafter: Some("suffix".into()),
            threads: Some(2),
            precision: None,
            ngram_min: None,
            ngram_max: None,
            suffix_min_match: None,
            suffix_max_match: None,
            suffix_min_prob: None,
            drafter_model: None,
            device: Some("cpu:x86_64-avx2".into()),
            host_class: None,
            draft_width: None,
            json: true,
        };
        use crate::commands::policy::ExplainSettings as S;
        for (a, says) in [
            (S { suffix_min_match: Some(0), ..base.clone() }, "--suffix-min-match 0: give 1..=64"),
            (S { suffix_max_match: Some(65), ..base.clone() }, "--suffix-max-match 65: give 1..=64"),
            (S { suffix_min_prob: Some(0.0), ..base.clone() }, "--suffix-min-prob 0: give a probability in (0, 1]"),
            (S { suffix_min_prob: Some(2.0), ..base.clone() }, "--suffix-min-prob 2"),
        ] {
            let e = crate::commands::policy::explain_command(a).unwrap_err().to_string();
            assert!(e.contains(says), "{e}");
        }
        // In range, the flags pass and the missing target is what is refused.
        let ok = S { suffix_min_match: Some(2), suffix_max_match: Some(8), suffix_min_prob: Some(0.5), ..base };
        let e = crate::commands::policy::explain_command(ok).unwrap_err().to_string();
        assert!(e.contains("no such file"), "{e}");
    }

    /// Whether the draft length adapts: the entry's choice unless a flag
    /// says otherwise, the cost from `--cost-curve` or the entry, and every
    /// flag that would do nothing refused.
    #[test]
    fn the_adaptive_length_follows_the_entry_and_the_flags_and_refuses_what_would_be_ignored() {
        use crate::speculative::setup::{SpeculationSettings, adaptive_cost};
        let curve = "verify_cost = [{ context = 64, relative = [1.0, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6] }]\n";
        let fixed = entry("ngram", "cpu:x86_64-avx2", "q4_1", "6", FP);
        let adaptive = fixed.replace("host =", &format!("{curve}adaptive = true\nhost ="));
        let with_curve = fixed.replace("host =", &format!("{curve}host ="));
        let t_adaptive = table(&[adaptive]);
        let t_fixed = table(&[with_curve]);
        let t_bare = table(&[fixed]);
        let i = In::new(::policy::DrafterKind::Ngram, "q4_1");
        let r_adaptive = i.resolve(&t_adaptive).unwrap();
        let r_fixed = i.resolve(&t_fixed).unwrap();
        let r_bare = i.resolve(&t_bare).unwrap();
        let args = |adaptive: Option<bool>, curves: &[&str], width: Option<&str>| SpeculationSettings {
            adaptive,
            cost_curves: curves.iter().map(|c| c.to_string()).collect(),
            draft_width: width.map(str::to_string),
            ..Default::default()
        };
        // The entry chose it: adaptive with its curve.
        let (cost, why) = adaptive_cost(&args(None, &[], None), &r_adaptive).unwrap();
        let cost = cost.expect("adaptive");
        assert!((cost.relative(64, 2) - 1.1).abs() < 1e-12 && why.contains("the entry chose it"), "{why}");
        // --adaptive off, or an entry that fixed the width: fixed.
        assert!(adaptive_cost(&args(Some(false), &[], None), &r_adaptive).unwrap().0.is_none());
        let (c, why) = adaptive_cost(&args(None, &[], None), &r_fixed).unwrap();
        assert!(c.is_none() && why.contains("the entry fixed the width"), "{why}");
        // --adaptive on over a fixed entry: the entry's curve; a given curve wins.
        assert!(adaptive_cost(&args(Some(true), &[], None), &r_fixed).unwrap().0.is_some());
        let (c, why) = adaptive_cost(&args(Some(true), &["64=1,2"], None), &r_fixed).unwrap();
        assert!((c.unwrap().relative(64, 2) - 2.0).abs() < 1e-12 && why.contains("--cost-curve"), "{why}");
        // No curve anywhere: --adaptive on is refused, saying what to give.
        let e = adaptive_cost(&args(Some(true), &[], None), &r_bare).unwrap_err().to_string();
        assert!(e.contains("--cost-curve CONTEXT=R1,R2"), "{e}");
        // A flag that would do nothing is refused, not ignored.
        assert!(adaptive_cost(&args(Some(false), &["64=1,2"], None), &r_adaptive).is_err());
        assert!(adaptive_cost(&args(None, &["64=1,2"], None), &r_fixed).is_err());
        assert!(adaptive_cost(&args(Some(true), &["64=1"], None), &r_fixed).is_err(), "a one-value curve");
        // A flag width fixes the width even where the entry chose adaptive
        // (the flag resolution is not the entry's, so no entry decides).
        let mut flagged = In::new(::policy::DrafterKind::Ngram, "q4_1");
        flagged.flag = Some("3");
        let r = flagged.resolve(&t_adaptive).unwrap();
        assert!(adaptive_cost(&args(None, &[], Some("3")), &r).unwrap().0.is_none());
    }
}

mod logprobs {
    use crate::engine::{Engine, PREFILL_CHUNK};
    use crate::model::{LogitRows, Session, load};
    use crate::serve::logprobs::{SCORE_ROWS, ScoreError, score};
    use crate::test_models::*;
    use kernels::dispatch::KernelFamily;
    use std::cell::Cell;

    fn engine(context: u32) -> Engine {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("tiny.gguf");
        std::fs::write(&p, gguf_bytes_with(&vocab(), context)).unwrap();
        Engine::new(load(&p).unwrap(), KernelFamily::SCALAR, 1).unwrap()
    }

    #[test]
    fn the_scoring_pass_runs_in_chunks_asks_before_each_and_stops_when_cancelled() {
        let e = engine(512);
        let n_vocab = vocab().len() as u32;
        // A long echo: 300 prompt tokens scored from the second.
        let seq: Vec<u32> = (0..300u32).map(|i| (i * 7 + 3) % n_vocab).collect();
        let asked = Cell::new(0usize);
        let all = score(&e, &seq, 1, 2, &|| {
            asked.set(asked.get() + 1);
            false
        })
        .unwrap();
        assert_eq!(all.len(), seq.len() - 1);
        // No cache-filling prefix here (from 1): one question per scored chunk.
        assert_eq!(asked.get(), (seq.len() - 1).div_ceil(SCORE_ROWS));
        // Scoring the last 10 tokens fills the cache with 289 first, in prefill chunks.
        asked.set(0);
        let tail = score(&e, &seq, 290, 2, &|| {
            asked.set(asked.get() + 1);
            false
        })
        .unwrap();
        assert_eq!(asked.get(), 289usize.div_ceil(PREFILL_CHUNK) + 1);
        // The chunked pass gives the scores of the whole sequence's pass.
        assert_eq!(tail[..], all[289..]);
        let mut session = Session::new(&e.loaded.model.config);
        let rows = e.install(|| e.loaded.model.forward(e.family, &mut session, &seq[..299], LogitRows::All)).unwrap();
        let vocab = e.loaded.model.config.vocab;
        let last = &rows[298 * vocab..];
        let max = last.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
        let norm = max + last.iter().map(|&x| (x as f64 - max).exp()).sum::<f64>().ln();
        assert_eq!(tail[9].logprob, last[seq[299] as usize] as f64 - norm);
        // A client that leaves (or a deadline that passes) after two chunks stops the pass.
        asked.set(0);
        let r = score(&e, &seq, 1, 2, &|| {
            asked.set(asked.get() + 1);
            asked.get() > 2
        });
        assert_eq!(r, Err(ScoreError::Cancelled));
        assert_eq!(asked.get(), 3);
    }
}
