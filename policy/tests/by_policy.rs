//! Speculation by policy: which entry turns speculation on, and what is said when none does; the
//! drafter settings an entry is keyed on.

mod common;

use common::*;
use policy::resolve::{Fallback, Provenance, Resolver, StepKind};
use policy::{DeviceClass, DrafterKind, DrafterSettings, Probability, QuantClass, Width};

#[test]
fn no_drafter_flag_speculates_with_a_fresh_entry_above_classic() {
    let t = table(&[entry("ngram", "cpu:x86_64-avx2", "q4_1", "3", FP)]);
    let r = In::new(DrafterKind::Ngram, "q4_1").auto(&t);
    assert_eq!((r.drafter, r.width.map(Width::get)), (Some(DrafterKind::Ngram), Some(3)));
    assert_eq!(r.drafter_settings, Some(DrafterSettings::ngram(3, 4)));
    assert!(matches!(r.provenance, Provenance::PolicyOn { .. }));
    assert_eq!(
        r.width_from,
        "speculation on by the policy (no --drafter): measured for ngram on cpu:x86_64-avx2 (amd-zen4) with a q4_1 llama 134.5M target at \
         2 threads (ngram_min 3, ngram_max 4): 1.50x classic [1.40, 1.60] (records/r1, 2026-01-15)"
    );
    assert!(r.by_policy());
    assert_eq!(r.steps.iter().filter(|s| s.decided).count(), 1, "{:?}", r.steps);
}

#[test]
fn an_entry_of_another_cpu_class_applies_only_wholly_above_classic_and_says_so() {
    let i = In::new(DrafterKind::Ngram, "q4_1");
    let zen5 = entry_on("amd-zen5", "llama", PARAMS, "ngram", "cpu:x86_64-avx2", "q4_1", "3", FP);
    // Wholly above 1.0 ([1.4, 1.6]) where it was measured: it stands in, and says so.
    let t = table(std::slice::from_ref(&zen5));
    for r in [i.auto(&t), i.resolve(&t).unwrap()] {
        assert_eq!((r.drafter, r.width.map(Width::get)), (Some(DrafterKind::Ngram), Some(3)));
        assert!(
            r.width_from.contains("(amd-zen5)")
                && r.width_from.contains("measured on amd-zen5, this host is amd-zen4")
                && r.width_from.contains("only because its whole interval is above 1.0"),
            "{}",
            r.width_from
        );
    }
    // Not wholly above 1.0: it does not apply, and the fallback says why.
    let t = table(&[zen5.replace("ratio_interval = [1.4, 1.6]", "ratio_interval = [0.9, 1.6]")]);
    let r = i.auto(&t);
    assert_eq!(r.drafter, None);
    assert!(
        r.width_from.contains("on amd-zen5 with a llama 134.5M target")
            && r.width_from.contains("is not wholly above 1.0"),
        "{}",
        r.width_from
    );
    let r = i.resolve(&t).unwrap();
    assert_eq!((decided(&r), r.width.map(Width::get)), (StepKind::Default, Some(4)));
    // Stale, or measured with other settings, where it was measured: neither applies.
    let r = In::new(DrafterKind::Ngram, "q4_1").auto(&table(&[zen5.replace(FP, OTHER_FP)]));
    assert!(r.drafter.is_none() && r.width_from.contains("stale"), "{}", r.width_from);
    let mut other = In::new(DrafterKind::Ngram, "q4_1");
    other.settings = DrafterSettings { ngram_min: Some(1), ..Default::default() };
    let r = other.resolve(&table(std::slice::from_ref(&zen5))).unwrap();
    assert_eq!(decided(&r), StepKind::Default, "{}", r.width_from);
    // This host's own entry decides, even an `off` one beside a faster CPU's.
    let own_off = entry("ngram", "cpu:x86_64-avx2", "q4_1", "\"off\"", FP)
        .replace("ratio = 1.5", "ratio = 0.9")
        .replace("ratio_interval = [1.4, 1.6]", "ratio_interval = [0.8, 0.95]");
    let r = i.auto(&table(&[own_off, zen5.clone()]));
    assert!(matches!(r.provenance, Provenance::PolicyClassic { fallback: Fallback::Off { .. }, .. }), "{r:?}");
    // Among several CPUs' entries, the one with the higher lower bound.
    let spr = entry_on("intel-sapphire-rapids", "llama", PARAMS, "ngram", "cpu:x86_64-avx2", "q4_1", "5", FP)
        .replace("ratio_interval = [1.4, 1.6]", "ratio_interval = [1.45, 1.6]");
    let r = i.auto(&table(&[zen5, spr]));
    assert_eq!(r.width.map(Width::get), Some(5), "{}", r.width_from);
}

#[test]
fn an_entry_of_another_model_applies_only_wholly_above_classic_and_names_both_models() {
    let i = In::new(DrafterKind::Ngram, "q4_1");
    let gemma = entry_on(HOST, "gemma3", 268_098_176, "ngram", "cpu:x86_64-avx2", "q4_1", "3", FP);
    let r = i.auto(&table(std::slice::from_ref(&gemma)));
    assert_eq!(r.width.map(Width::get), Some(3));
    assert!(
        r.width_from.contains("measured on a gemma3 268.1M target (m.gguf), this one is llama 134.5M (m.gguf)"),
        "{}",
        r.width_from
    );
    let r = i.auto(&table(&[gemma.replace("ratio_interval = [1.4, 1.6]", "ratio_interval = [0.99, 1.6]")]));
    assert_eq!(r.drafter, None, "{}", r.width_from);
    // The model's own entry wins over another model's.
    let own = entry("ngram", "cpu:x86_64-avx2", "q4_1", "2", FP);
    let r = i.auto(&table(&[gemma, own]));
    assert_eq!(r.width.map(Width::get), Some(2));
    assert!(!r.width_from.contains("this one is"), "{}", r.width_from);
    // Another file of the same model class is the same key, and the file is named.
    let renamed =
        entry("ngram", "cpu:x86_64-avx2", "q4_1", "2", FP).replace("file = \"m.gguf\"", "file = \"base.gguf\"");
    let r = i.auto(&table(&[renamed]));
    assert_eq!(r.width.map(Width::get), Some(2));
    assert!(
        r.width_from.contains(
            "measured on base.gguf (sha256 aaaaaaaaaaaa), this target is m.gguf with the same \
                              architecture and parameter count"
        ) && !r.width_from.contains("only because"),
        "{}",
        r.width_from
    );
}

#[test]
fn at_another_thread_count_the_policy_keeps_classic_and_names_both_counts() {
    let t = table(&[entry("ngram", "cpu:x86_64-avx2", "q4_1", "3", FP)]);
    let r = In { threads: 1, ..In::new(DrafterKind::Ngram, "q4_1") }.auto(&t);
    assert_eq!((r.drafter, r.width.map(Width::get)), (None, None));
    assert_eq!(
        r.width_from,
        "speculation off by the policy (no --drafter): no measurement for ngram on cpu:x86_64-avx2 (amd-zen4) with a q4_1 llama 134.5M \
         target at 1 thread: the table measured it at 2 threads (records/r1) only"
    );
    assert!(r.summary().starts_with("classic decoding: "), "{}", r.summary());
    // A named drafter falls back to its constant, with the same reason.
    let r = In { threads: 1, ..In::new(DrafterKind::Ngram, "q4_1") }.resolve(&t).unwrap();
    assert_eq!((decided(&r), r.width.map(Width::get)), (StepKind::Default, Some(4)));
    assert!(r.width_from.contains("at 1 thread: the table measured it at 2 threads"), "{}", r.width_from);
}

#[test]
fn an_off_entry_keeps_classic_without_a_drafter_flag() {
    let off = entry("ngram", "cpu:x86_64-avx2", "q4_1", "\"off\"", FP)
        .replace("ratio = 1.5", "ratio = 0.9")
        .replace("ratio_interval = [1.4, 1.6]", "ratio_interval = [0.85, 0.95]");
    let t = table(&[off]);
    let r = In::new(DrafterKind::Ngram, "q4_1").auto(&t);
    assert_eq!((r.drafter, r.width.map(Width::get)), (None, None));
    assert!(matches!(r.provenance, Provenance::PolicyClassic { fallback: Fallback::Off { .. }, .. }));
    assert_eq!(
        r.width_from,
        "speculation off by the policy (no --drafter): measured off for ngram on cpu:x86_64-avx2 (amd-zen4) with a q4_1 llama 134.5M target \
         at 2 threads: speculation ran 0.90x classic [0.85, 0.95] (records/r1, 2026-01-15)"
    );
}

#[test]
fn an_off_entry_above_classic_says_why_it_is_off() {
    // `tuner propose` keeps an earlier `off` that the pooled records do not
    // credibly beat by its margin; the entry's ratio is then its best
    // width's, above 1.0, and the reason must say why the runtime is off.
    let off = entry("ngram", "cpu:x86_64-avx2", "q4_1", "\"off\"", FP)
        .replace("ratio = 1.5", "ratio = 1.15")
        .replace("ratio_interval = [1.4, 1.6]", "ratio_interval = [1.04, 1.27]");
    let r = In::new(DrafterKind::Ngram, "q4_1").auto(&table(&[off]));
    assert_eq!((r.drafter, r.width.map(Width::get)), (None, None));
    assert!(
        r.width_from.contains(
            "speculation ran 1.15x classic [1.04, 1.27] at its best width, yet the entry is off: `tuner propose` kept"
        ),
        "{}",
        r.width_from
    );
}

#[test]
fn a_width_whose_interval_reaches_classic_does_not_turn_speculation_on() {
    let e = entry("ngram", "cpu:x86_64-avx2", "q4_1", "2", FP)
        .replace("ratio_interval = [1.4, 1.6]", "ratio_interval = [0.99, 1.6]");
    let r = In::new(DrafterKind::Ngram, "q4_1").auto(&table(&[e]));
    assert_eq!(r.drafter, None);
    assert!(r.width_from.contains("but its interval [0.99, 1.60] reaches 1.0 (records/r1)"), "{}", r.width_from);
}

#[test]
fn a_stale_entry_keeps_classic_without_a_drafter_flag_and_names_the_fingerprints() {
    let t = table(&[entry("ngram", "cpu:x86_64-avx2", "q4_1", "3", OTHER_FP)]);
    let r = In::new(DrafterKind::Ngram, "q4_1").auto(&t);
    assert_eq!(r.drafter, None);
    assert_eq!(
        r.width_from,
        format!(
            "speculation off by the policy (no --drafter): the entry for ngram on cpu:x86_64-avx2 (amd-zen4) with a q4_1 llama 134.5M target \
             at 2 threads is stale: measured with verify-path fingerprint {OTHER_FP}, this build has {FP} for the \
             key (records/r1); re-check it with `tuner check -t 2` (about two minutes) or re-measure with `tuner sweep`"
        )
    );
}

#[test]
fn a_target_with_other_weight_formats_does_not_use_the_entry() {
    // This build's fingerprint depends on the formats, as the real one does.
    fn by_formats(_: &DeviceClass, f: Option<&[String]>) -> String {
        if f.is_some_and(|f| f.iter().any(|x| x == "q6_k")) { OTHER_FP.into() } else { FP.into() }
    }
    let t = table(&[entry("ngram", "cpu:x86_64-avx2", "q4_1", "3", FP)]);
    let r = Resolver { table: &t, fingerprint: &by_formats };
    let i = In { formats: vec!["q4_1".into(), "q6_k".into()], ..In::new(DrafterKind::Ngram, "q4_1") };
    let res = r.auto(&i.host());
    assert_eq!(res.drafter, None);
    assert!(
        res.width_from.contains("it measured a target with weight formats [q4_1, q8_0], this one has [q4_1, q6_k]"),
        "{}",
        res.width_from
    );
    assert_eq!(r.auto(&In::new(DrafterKind::Ngram, "q4_1").host()).width.map(Width::get), Some(3));
}

#[test]
fn with_no_entry_or_no_key_the_policy_keeps_classic_and_says_which_key() {
    let r = In::new(DrafterKind::Ngram, "q4_1").auto(&empty());
    assert_eq!(
        r.width_from,
        "speculation off by the policy (no --drafter): no measurement for a weight-free drafter (ngram, layerskip, suffix) \
         on cpu:x86_64-avx2 (amd-zen4) with a q4_1 llama 134.5M target at 2 threads"
    );
    assert!(r.steps.iter().all(|s| !s.decided) && r.steps.len() == 3, "{:?}", r.steps);
    let q = QuantClass {
        class: "unknown".into(),
        from: "config.json does not parse: expected value at line 1 column 1".into(),
        file: Some("/m/config.json".into()),
        field: Some("quantization_config".into()),
        format: None,
    };
    let r = In { quant: q, ..In::new(DrafterKind::Ngram, "q4_1") }.auto(&empty());
    assert_eq!(
        r.width_from,
        "speculation off by the policy (no --drafter): no key for a weight-free drafter (ngram, layerskip, suffix) on \
         cpu:x86_64-avx2 (amd-zen4) at 2 threads: target quantization unknown (config.json does not parse: expected value at \
         line 1 column 1; read /m/config.json, field quantization_config)"
    );
}

#[test]
fn the_fastest_weight_free_entry_wins_and_checkpoint_drafters_never_turn_on() {
    let slow = entry("ngram", "cpu:x86_64-avx2", "q4_1", "3", FP);
    let fast = entry("layerskip", "cpu:x86_64-avx2", "q4_1", "2", FP).replace("ratio = 1.5", "ratio = 1.55");
    let model = entry("draft-model", "cpu:x86_64-avx2", "q4_1", "5", FP).replace("ratio = 1.5", "ratio = 1.59");
    let r = In::new(DrafterKind::Ngram, "q4_1").auto(&table(&[slow.clone(), fast, model.clone()]));
    assert_eq!((r.drafter, r.width.map(Width::get)), (Some(DrafterKind::Layerskip), Some(2)));
    assert_eq!(r.drafter_settings, Some(DrafterSettings::layerskip(vec![0, 1, 2])));
    let r = In::new(DrafterKind::Ngram, "q4_1").auto(&table(&[model]));
    assert_eq!(r.drafter, None, "a draft model needs its checkpoint named");
    // CUDA keys carry no thread count.
    let cuda = entry("ngram", "cuda:sm_90", "q4_1", "4", FP);
    let r = In { device: "cuda:sm_90", threads: 16, ..In::new(DrafterKind::Ngram, "q4_1") }.auto(&table(&[cuda]));
    assert_eq!(r.width.map(Width::get), Some(4));
    assert!(
        r.width_from.contains("on cuda:sm_90 (amd-zen4) with a q4_1 llama 134.5M target (ngram_min"),
        "{}",
        r.width_from
    );
}

#[test]
fn a_named_drafter_with_other_settings_does_not_use_the_entry() {
    let t = table(&[entry("ngram", "cpu:x86_64-avx2", "q4_1", "3", FP)]);
    let mut i = In::new(DrafterKind::Ngram, "q4_1");
    // No settings given: the entry decides and its settings are the ones to run.
    let r = i.resolve(&t).unwrap();
    assert_eq!((decided(&r), r.width.map(Width::get)), (StepKind::Table, Some(3)));
    assert_eq!(r.drafter_settings, Some(DrafterSettings::ngram(3, 4)));
    // The same settings given explicitly: still the entry.
    i.settings = DrafterSettings::ngram(3, 4);
    assert_eq!(i.resolve(&t).unwrap().width.map(Width::get), Some(3));
    // Other settings: the per-kind constant, naming the difference.
    i.settings = DrafterSettings { ngram_min: Some(1), ..Default::default() };
    let r = i.resolve(&t).unwrap();
    assert_eq!((decided(&r), r.width.map(Width::get), r.drafter_settings.clone()), (StepKind::Default, Some(4), None));
    assert_eq!(
        r.width_from,
        "per-kind default 4: the entry for ngram on cpu:x86_64-avx2 (amd-zen4) with a q4_1 llama 134.5M target at 2 threads was measured \
         with other drafter settings: ngram_min 1 (measured 3) (records/r1)"
    );
}

#[test]
fn drafter_settings_are_checked_per_kind() {
    assert!(DrafterSettings::ngram(3, 4).check(DrafterKind::Ngram).is_ok());
    for bad in [DrafterSettings::ngram(0, 4), DrafterSettings::ngram(5, 4), DrafterSettings::ngram(1, 1000)] {
        assert!(bad.check(DrafterKind::Ngram).is_err(), "{bad:?}");
    }
    assert!(DrafterSettings::default().check(DrafterKind::Ngram).unwrap_err().contains("needs ngram_min"));
    assert!(DrafterSettings::ngram(3, 4).check(DrafterKind::Layerskip).is_err());
    assert!(DrafterSettings::layerskip(vec![2, 1]).check(DrafterKind::Layerskip).unwrap_err().contains("increasing"));
    assert!(DrafterSettings::layerskip(vec![]).check(DrafterKind::Layerskip).is_err());
    assert!(DrafterSettings::default().check(DrafterKind::DraftModel).is_ok());
    assert!(DrafterSettings::ngram(3, 4).check(DrafterKind::DraftModel).is_err());
    assert_eq!(DrafterSettings::layerskip(vec![0, 1, 2]).describe(), "layers 0-2");
    assert_eq!(DrafterSettings::layerskip(vec![1, 5]).describe(), "layers 1,5");
    assert_eq!(DrafterSettings::ngram(3, 4).describe(), "ngram_min 3, ngram_max 4");
}

#[test]
fn suffix_settings_are_complete_bounded_and_their_own() {
    let ok = DrafterSettings::suffix(2, 32, 0.5);
    assert!(ok.check(DrafterKind::Suffix).is_ok());
    assert!(DrafterSettings::suffix(1, 1, 1.0).check(DrafterKind::Suffix).is_ok());
    assert!(DrafterSettings::suffix(64, 64, 1e-9).check(DrafterKind::Suffix).is_ok());
    assert_eq!(ok.describe(), "suffix_min_match 2, suffix_max_match 32, suffix_min_prob 0.5");
    // Out of range: each message names the field and the value.
    for (bad, says) in [
        (DrafterSettings::suffix(0, 32, 0.5), "suffix_min_match 0"),
        (DrafterSettings::suffix(5, 4, 0.5), "suffix_min_match 5 / suffix_max_match 4"),
        (DrafterSettings::suffix(2, 65, 0.5), "suffix_max_match 65"),
        (DrafterSettings::suffix(2, 32, 0.0), "suffix_min_prob 0"),
        (DrafterSettings::suffix(2, 32, -0.5), "suffix_min_prob -0.5"),
        (DrafterSettings::suffix(2, 32, 1.5), "suffix_min_prob 1.5"),
        (DrafterSettings::suffix(2, 32, f64::NAN), "suffix_min_prob NaN"),
    ] {
        let e = bad.check(DrafterKind::Suffix).unwrap_err();
        assert!(e.contains(says), "{bad:?}: {e}");
    }
    // Incomplete.
    let partial = DrafterSettings { suffix_min_match: Some(2), suffix_max_match: Some(4), ..Default::default() };
    assert!(partial.check(DrafterKind::Suffix).unwrap_err().contains("needs suffix_min_match"));
    assert!(DrafterSettings::default().check(DrafterKind::Suffix).unwrap_err().contains("needs suffix_min_match"));
    // Other kinds' fields on suffix.
    let with_ngram = DrafterSettings { ngram_min: Some(3), ..ok.clone() };
    assert!(
        with_ngram
            .check(DrafterKind::Suffix)
            .unwrap_err()
            .contains("ngram_min/ngram_max is not a setting of the suffix")
    );
    let with_layers = DrafterSettings { layers: Some(vec![0]), ..ok.clone() };
    assert!(with_layers.check(DrafterKind::Suffix).unwrap_err().contains("layers is not a setting of the suffix"));
    // Suffix fields on other kinds.
    for kind in [DrafterKind::Ngram, DrafterKind::Layerskip, DrafterKind::DraftModel] {
        let base = match kind {
            DrafterKind::Ngram => DrafterSettings::ngram(3, 4),
            DrafterKind::Layerskip => DrafterSettings::layerskip(vec![0, 1]),
            _ => DrafterSettings::default(),
        };
        assert!(base.check(kind).is_ok(), "{kind}");
        for extra in [
            DrafterSettings { suffix_min_match: Some(2), ..base.clone() },
            DrafterSettings { suffix_max_match: Some(8), ..base.clone() },
            DrafterSettings { suffix_min_prob: Some(Probability(0.5)), ..base.clone() },
        ] {
            let e = extra.check(kind).unwrap_err();
            assert!(e.contains(&format!("is not a setting of the {kind} drafter")) && e.contains("suffix_"), "{e}");
        }
    }
}

#[test]
fn suffix_settings_serialize_only_when_set_and_round_trip() {
    // Settings without the suffix fields serialize as they always did.
    assert_eq!(serde_json::to_string(&DrafterSettings::ngram(3, 4)).unwrap(), r#"{"ngram_min":3,"ngram_max":4}"#);
    assert_eq!(serde_json::to_string(&DrafterSettings::layerskip(vec![0, 1])).unwrap(), r#"{"layers":[0,1]}"#);
    assert_eq!(serde_json::to_string(&DrafterSettings::default()).unwrap(), "{}");
    let s = DrafterSettings::suffix(2, 32, 0.5);
    let j = serde_json::to_string(&s).unwrap();
    assert_eq!(j, r#"{"suffix_min_match":2,"suffix_max_match":32,"suffix_min_prob":0.5}"#);
    assert_eq!(serde_json::from_str::<DrafterSettings>(&j).unwrap(), s);
    let t: DrafterSettings =
        toml::from_str("suffix_min_match = 3\nsuffix_max_match = 8\nsuffix_min_prob = 0.25\n").unwrap();
    assert_eq!(t, DrafterSettings::suffix(3, 8, 0.25));
    // Overlaying and differences cover the suffix fields.
    let req = DrafterSettings { suffix_min_prob: Some(Probability(0.75)), ..Default::default() };
    assert_eq!(s.overlaid_with(&req), DrafterSettings::suffix(2, 32, 0.75));
    assert_eq!(s.differences(&req), vec!["suffix_min_prob 0.75 (measured 0.5)".to_string()]);
    assert!(s.differences(&DrafterSettings::suffix(2, 32, 0.5)).is_empty());
}
