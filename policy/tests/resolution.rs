//! Resolution: flag, environment and entry, provenance, stale and off entries.

mod common;

use common::*;
use policy::resolve::{PolicyError, Resolution, Resolver, StepKind};
use policy::width::{self, Width};
use policy::{Declared, DrafterKind, DrafterSettings, QuantClass};
use std::collections::HashSet;
use std::path::Path;

#[test]
fn the_flag_beats_the_environment_and_a_difference_is_said() {
    let t = table(&[entry("ngram", "cpu:x86_64-avx2", "q4_1", "6", FP)]);
    let mut i = In::new(DrafterKind::Ngram, "q4_1");
    i.declared = Declared::Width { width: Width::new(9).unwrap(), evidence: "test".into() };

    i.env = Some("3");
    let r = i.resolve(&t).unwrap();
    assert_eq!((decided(&r), r.width.map(Width::get)), (StepKind::Env, Some(3)));
    assert_eq!(r.width_from, "DRAFTWISE_DRAFT_WIDTH=3");

    i.flag = Some("5");
    let r = i.resolve(&t).unwrap();
    assert_eq!((decided(&r), r.width.map(Width::get)), (StepKind::Flag, Some(5)));
    assert_eq!(r.width_from, "--draft-width 5, overriding DRAFTWISE_DRAFT_WIDTH=3");
    assert!(r.steps[1].detail.contains("differs from --draft-width 5, which wins"), "{:?}", r.steps[1]);

    i.env = Some("5");
    let r = i.resolve(&t).unwrap();
    assert_eq!(r.width_from, "--draft-width 5 (DRAFTWISE_DRAFT_WIDTH=5 agrees)");

    i.env = None;
    let r = i.resolve(&t).unwrap();
    assert_eq!(r.width_from, "--draft-width 5");

    // `off` is an override too; an empty variable is unset.
    i.flag = Some("off");
    i.env = Some("");
    let r = i.resolve(&t).unwrap();
    assert_eq!((decided(&r), r.width.map(Width::get)), (StepKind::Flag, None));
    assert_eq!(r.steps[1].detail, "DRAFTWISE_DRAFT_WIDTH set but empty: treated as unset");
    assert!(r.summary().starts_with("draft width off for ngram"), "{}", r.summary());
}

#[test]
fn unparseable_overrides_are_errors_not_ignored() {
    let t = empty();
    let mut i = In::new(DrafterKind::Ngram, "q4_1");
    for bad in ["abc", "0", "33", "-1", "4.5", "four"] {
        i.flag = Some(bad);
        i.env = None;
        let e = i.resolve(&t).unwrap_err();
        assert!(matches!(&e, PolicyError::BadFlag { value, .. } if value == bad), "{bad}: {e}");
        assert!(e.to_string().contains("--draft-width"), "{e}");
        // A bad environment value is an error even when a valid flag wins.
        i.flag = Some("4");
        i.env = Some(bad);
        let e = i.resolve(&t).unwrap_err();
        assert!(matches!(&e, PolicyError::BadEnv { value, .. } if value == bad), "{bad}: {e}");
        assert!(e.to_string().contains("unset DRAFTWISE_DRAFT_WIDTH"), "{e}");
    }
    assert!(width::parse("0").unwrap_err().contains("use \"off\""));
    assert_eq!(width::parse(" 32 "), Ok(Some(Width::new(32).unwrap())));
    assert_eq!(width::parse("OFF"), Ok(None));
}

#[test]
fn every_provenance_string_is_distinct() {
    let dir = Path::new("/models/x");
    let t = table(&[
        entry("ngram", "cpu:x86_64-avx2", "q4_1", "6", FP),
        entry("ngram", "cpu:x86_64-avx2", "q8_0", "\"off\"", FP),
        entry("ngram", "cpu:x86_64-avx2", "f16", "6", OTHER_FP),
    ]);
    let base = || In::new(DrafterKind::Ngram, "q4_1");
    let mut strings = vec![Resolution::no_drafter().width_from];
    let mut add = |i: In<'_>| strings.push(i.resolve(&t).unwrap().width_from);
    add(In { flag: Some("5"), ..base() });
    add(In { flag: Some("5"), env: Some("3"), ..base() });
    add(In { flag: Some("5"), env: Some("5"), ..base() });
    add(In { env: Some("5"), ..base() });
    add(In {
        drafter: DrafterKind::Dflash,
        declared: Declared::Width { width: Width::new(5).unwrap(), evidence: "block_size = 6 in x".into() },
        ..base()
    });
    add(base());
    add(In { quant: known("q8_0"), ..base() });
    add(In { quant: known("f16"), ..base() });
    add(In { quant: known("bf16"), ..base() });
    add(In { quant: QuantClass::unknown(Some(dir), format!("config.json not found in {}", dir.display())), ..base() });
    add(In { settings: DrafterSettings::ngram(1, 4), ..base() });
    add(In { threads: 1, ..base() });
    // Without a drafter flag: each way the policy decides.
    let on = In::new(DrafterKind::Ngram, "q4_1");
    strings.push(on.auto(&t).width_from);
    strings.push(In { threads: 1, ..In::new(DrafterKind::Ngram, "q4_1") }.auto(&t).width_from);
    strings.push(In::new(DrafterKind::Ngram, "q8_0").auto(&t).width_from);
    strings.push(In::new(DrafterKind::Ngram, "f16").auto(&t).width_from);
    strings.push(In::new(DrafterKind::Ngram, "bf16").auto(&t).width_from);
    let reaching = table(&[entry("ngram", "cpu:x86_64-avx2", "q4_1", "6", FP)
        .replace("ratio_interval = [1.4, 1.6]", "ratio_interval = [0.9, 1.6]")]);
    strings.push(on.auto(&reaching).width_from);
    let unknown = QuantClass::unknown(Some(dir), format!("config.json not found in {}", dir.display()));
    strings.push(In { quant: unknown, ..In::new(DrafterKind::Ngram, "q4_1") }.auto(&t).width_from);
    let n = strings.len();
    let unique: HashSet<&String> = strings.iter().collect();
    assert_eq!(unique.len(), n, "{strings:#?}");
    // Each names its source at the start, so a reader tells them apart at a glance.
    let starts = [
        "speculation off: --drafter none",
        "--draft-width 5",
        "--draft-width 5, overriding",
        "--draft-width 5 (",
        "DRAFTWISE_DRAFT_WIDTH=5",
        "declared by the checkpoint:",
        "measured for ngram",
        "measured off for ngram",
        "per-kind default 4: the entry",
        "per-kind default 4: no measurement",
        "per-kind default 4: no key for ngram",
        "per-kind default 4: the entry for ngram on cpu:x86_64-avx2 (amd-zen4) with a q4_1 llama 134.5M target at 2 threads was measured with other drafter settings",
        "per-kind default 4: no measurement for ngram on cpu:x86_64-avx2 (amd-zen4) with a q4_1 llama 134.5M target at 1 thread: the table measured it at 2 threads",
        "speculation on by the policy (no --drafter): measured for ngram",
        "speculation off by the policy (no --drafter): no measurement for ngram on cpu:x86_64-avx2 (amd-zen4) with a q4_1 llama 134.5M target at 1 thread",
        "speculation off by the policy (no --drafter): measured off for ngram",
        "speculation off by the policy (no --drafter): the entry for ngram on cpu:x86_64-avx2 (amd-zen4) with an f16 llama 134.5M target at 2 threads is stale",
        "speculation off by the policy (no --drafter): no measurement for a weight-free drafter",
        "speculation off by the policy (no --drafter): the measured entry for ngram on cpu:x86_64-avx2 (amd-zen4) with a q4_1 llama 134.5M target at 2 threads gives width 6",
        "speculation off by the policy (no --drafter): no key for a weight-free drafter",
    ];
    assert_eq!(starts.len(), n);
    for (s, want) in strings.iter().zip(starts) {
        assert!(s.starts_with(want), "{s:?} should start with {want:?}");
    }
}

#[test]
fn a_stale_entry_is_not_used_and_names_both_fingerprints() {
    let t = table(&[entry("layerskip", "cuda:sm_121", "nvfp4", "7", OTHER_FP)]);
    let i = In { device: "cuda:sm_121", ..In::new(DrafterKind::Layerskip, "nvfp4") };
    let r = i.resolve(&t).unwrap();
    assert_eq!(r.width.map(Width::get), Some(4), "the per-kind constant applies");
    assert_eq!(decided(&r), StepKind::Default);
    assert_eq!(
        r.width_from,
        format!(
            "per-kind default 4: the entry for layerskip on cuda:sm_121 (amd-zen4) with an nvfp4 llama 134.5M target is stale: measured \
             with verify-path fingerprint {OTHER_FP}, this build has {FP} for the key (records/r1); re-check \
             it with `tuner check --drafter layerskip` (about two minutes) or re-measure with `tuner sweep`"
        )
    );
    let table_step = &r.steps[3];
    assert_eq!(table_step.step, StepKind::Table);
    assert!(!table_step.decided && table_step.detail.contains("is stale"), "{table_step:?}");
    // Under its own fingerprint the same entry decides (a CUDA key has no
    // thread count: any --threads matches).
    let other = Resolver { table: &t, fingerprint: &other_build };
    let r = In { threads: 7, ..i }.resolve_with(&other).unwrap();
    assert_eq!(r.width.map(Width::get), Some(7));
}

#[test]
fn an_off_entry_disables_speculation_by_default_but_an_override_still_wins() {
    let t = table(&[entry("draft-model", "cpu:x86_64-avx2", "q4_1", "\"off\"", FP)]);
    let mut i = In::new(DrafterKind::DraftModel, "q4_1");
    let r = i.resolve(&t).unwrap();
    assert_eq!((decided(&r), r.width.map(Width::get)), (StepKind::Table, None));
    assert!(
        r.width_from
            .starts_with("measured off for draft-model on cpu:x86_64-avx2 (amd-zen4) with a q4_1 llama 134.5M target")
    );
    assert!(r.summary().starts_with("draft width off for draft-model:"), "{}", r.summary());
    assert_eq!(t.entries[0].drafting, None);
    i.flag = Some("3");
    assert_eq!(i.resolve(&t).unwrap().width.map(Width::get), Some(3));
}

#[test]
fn no_drafter_means_no_width() {
    let r = Resolution::no_drafter();
    assert_eq!((r.drafter, r.width.map(Width::get)), (None, None));
    assert_eq!(r.width_from, "speculation off: --drafter none");
    assert_eq!(r.summary(), "classic decoding: speculation off: --drafter none");
}

/// A bucket: `entry` measured with `n` sequences at once.
fn at(n: usize, e: String) -> String {
    e.replace("threads = 2\n", &format!("threads = 2\nconcurrency = {n}\n"))
        .replace("records/r1", &format!("records/r1-c{n}"))
}

#[test]
fn the_buckets_of_the_deciding_entry_form_the_ladder_and_unusable_ones_are_named() {
    let base = entry("ngram", "cpu:x86_64-avx2", "q4_1", "4", FP);
    let t = table(&[
        base.clone(),
        at(4, entry("ngram", "cpu:x86_64-avx2", "q4_1", "\"off\"", FP)),
        at(2, entry("ngram", "cpu:x86_64-avx2", "q4_1", "2", FP)),
        at(8, entry("ngram", "cpu:x86_64-avx2", "q4_1", "3", OTHER_FP)),
    ]);
    let i = In::new(DrafterKind::Ngram, "q4_1");
    for r in [i.resolve(&t).unwrap(), i.auto(&t)] {
        // The run's own width is the idle entry's: a bucket never decides it.
        assert_eq!(r.width.map(Width::get), Some(4));
        assert!(r.entry().unwrap().key.concurrency == 1);
        let ladder: Vec<_> = r.ladder.iter().map(|b| (b.sequences, b.drafting.map(|d| d.max().get()))).collect();
        assert_eq!(ladder, [(2, Some(2)), (4, None)], "the stale bucket at 8 is not used");
        assert!(
            r.ladder_notes.iter().any(|n| n.starts_with("from 8 sequences at once: not used") && n.contains("stale"))
        );
        let pick = |n| policy::Bucket::for_sequences(&r.ladder, n).map(|b| b.sequences);
        assert_eq!([pick(1), pick(2), pick(3), pick(4), pick(9)], [None, Some(2), Some(2), Some(4), Some(4)]);
    }
    // An override holds at every concurrency: no ladder.
    let r = In { flag: Some("5"), ..In::new(DrafterKind::Ngram, "q4_1") }.resolve(&t).unwrap();
    assert!(r.ladder.is_empty() && r.ladder_notes.is_empty());
    // Buckets measured with other drafter settings are named, not used.
    let other = at(2, entry("ngram", "cpu:x86_64-avx2", "q4_1", "2", FP)).replace("ngram_max = 4", "ngram_max = 5");
    let r = i.resolve(&table(&[base.clone(), other])).unwrap();
    assert!(r.ladder.is_empty());
    assert!(r.ladder_notes[0].contains("other drafter settings"), "{:?}", r.ladder_notes);
    // Without buckets the note says the width holds under load.
    let r = i.resolve(&table(&[base])).unwrap();
    assert!(r.ladder.is_empty());
    assert!(
        r.ladder_notes[0].starts_with("no entry of this key measured with several sequences"),
        "{:?}",
        r.ladder_notes
    );
}

#[test]
fn a_bucket_alone_never_decides_a_run() {
    // Only a bucket is measured: the run's key (concurrency 1) has no entry.
    let t = table(&[at(2, entry("ngram", "cpu:x86_64-avx2", "q4_1", "2", FP))]);
    let i = In::new(DrafterKind::Ngram, "q4_1");
    let r = i.resolve(&t).unwrap();
    assert_eq!(decided(&r), StepKind::Default);
    assert!(i.auto(&t).drafter.is_none(), "no idle entry: classic decoding");
}

#[test]
fn the_activation_precision_is_part_of_the_key_and_an_entry_without_one_is_16_bit() {
    let k = |e: String| e.replace("[\"q4_1\", \"q8_0\"]", "[\"q4_k\", \"q6_k\"]");
    let old = k(entry("ngram", "cpu:x86_64-avx2", "q4_k_m", "4", FP));
    let int8 = old.replace("threads = 2\n", "threads = 2\nprecision = \"int8\"\n").replace("width = 4", "width = 2");
    let t = table(&[old.clone(), int8]);
    let keys: Vec<_> = t.entries.iter().map(|e| e.key.precision.map(|p| p.as_str())).collect();
    assert_eq!(keys, [Some("int16"), Some("int8")], "no precision on a K-quant entry reads as 16 bits");
    assert!(t.entries[1].key.to_string().contains("q4_k_m llama 134.5M target (int8 activations) at 2 threads"));
    let mut i = In::new(DrafterKind::Ngram, "q4_k_m");
    i.formats = vec!["q4_k".into(), "q6_k".into()];
    for (p, width) in [(policy::Precision::Int8, 2), (policy::Precision::Int16, 4)] {
        i.precision = Some(p);
        assert_eq!(i.resolve(&t).unwrap().width.map(Width::get), Some(width), "{p}");
    }
    // Only the 16-bit entry: a run at 8 bits has no entry of its own key.
    let t = table(&[old.clone()]);
    i.precision = Some(policy::Precision::Int8);
    assert_ne!(decided(&i.resolve(&t).unwrap()), StepKind::Table, "a 16-bit entry never decides an 8-bit run");
    // A precision on an entry it changes nothing for, or an unknown one, is refused by name.
    let text = format!("schema_version = 3\n\n{}", entry("ngram", "cpu:x86_64-avx2", "q4_1", "4", FP))
        .replace("threads = 2\n", "threads = 2\nprecision = \"int8\"\n");
    let e = policy::table::compile("t", &text, policy::table::RecordCheck::Skip).unwrap_err().to_string();
    assert!(e.contains("precision") && e.contains("changes nothing"), "{e}");
    let text = format!("schema_version = 3\n\n{}", old.replace("threads = 2\n", "threads = 2\nprecision = \"int4\"\n"));
    let e = policy::table::compile("t", &text, policy::table::RecordCheck::Skip).unwrap_err().to_string();
    assert!(e.contains("\"int4\" is not an activation precision"), "{e}");
    // On CUDA too (the device runs the K-quants at either precision): a
    // K-quant entry carries one, and one without it reads as 16 bits.
    let cuda = k(entry("ngram", "cuda:sm_90", "q4_k_m", "4", FP));
    let cuda8 = cuda.replace("width = 4\n", "precision = \"int8\"\nwidth = 4\n");
    let t = table(&[cuda, cuda8]);
    let keys: Vec<_> = t.entries.iter().map(|e| e.key.precision.map(|p| p.as_str())).collect();
    assert_eq!(keys, [Some("int16"), Some("int8")], "a CUDA K-quant entry has a precision");
}

#[test]
fn a_stale_entry_names_the_check_that_addresses_it_among_the_model_s_others() {
    let k = |e: String| e.replace("[\"q4_1\", \"q8_0\"]", "[\"q4_k\", \"q6_k\"]");
    let int16 = k(entry("ngram", "cpu:x86_64-avx2", "q4_k_m", "4", OTHER_FP));
    let int8 =
        int16.replace("threads = 2\n", "threads = 2\nprecision = \"int8\"\n").replace("records/r1", "records/r8");
    let t = table(&[int16.clone(), int8.clone(), at(4, int8.clone())]);
    let mut i = In::new(DrafterKind::Ngram, "q4_k_m");
    i.formats = vec!["q4_k".into(), "q6_k".into()];
    for (p, flags) in [(policy::Precision::Int16, " --precision int16"), (policy::Precision::Int8, "")] {
        i.precision = Some(p);
        let r = i.resolve(&t).unwrap();
        let says = format!("re-check it with `tuner check -t 2{flags}` (about two minutes)");
        assert!(r.width_from.contains(&says), "{p}: {}", r.width_from);
    }
    // A stale bucket beside a fresh idle entry: its note names the bucket.
    let fresh8 =
        int8.replace(&format!("verify_fingerprint = \"{OTHER_FP}\""), &format!("verify_fingerprint = \"{FP}\""));
    let r = i.resolve(&table(&[fresh8, at(4, int8)])).unwrap();
    assert_eq!(r.width.map(Width::get), Some(4));
    assert!(r.ladder_notes.iter().any(|n| n.contains("`tuner check -t 2 --concurrency 4`")), "{:?}", r.ladder_notes);
}
