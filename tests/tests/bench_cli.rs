//! `runtime bench` and the multi-row kernels, driven through the real binary
//! on the default model.

use draftwise_tests::{bin, json_lines, model_path, run};
use policy::DrafterKind;
use runtime::events::bench::{BenchEventKind, BenchReport, WidthCurveReport};
use std::process::{Command, Output};

/// The line `runtime bench --json` printed, read as its type, which must
/// hold every field of it ([`holds_every_field`]).
fn bench_report(out: &Output) -> BenchReport {
    let r: BenchReport = serde_json::from_slice(&out.stdout).unwrap();
    holds_every_field(serde_json::to_value(&r).unwrap(), out);
    assert_eq!(r.event, BenchEventKind::Bench);
    r
}

/// `typed` (a report written back as JSON) is the object `out` printed: every field,
/// name and value. (Compared as JSON values, not bytes: serde_json's default
/// float parser may read the last digit of a printed f64 one unit off, the
/// same way for both sides.)
fn holds_every_field(typed: serde_json::Value, out: &Output) {
    let printed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(typed, printed, "the type holds every field");
}

fn runtime(sub: &str) -> Command {
    let mut c = Command::new(bin("runtime"));
    c.arg(sub).arg("--model").arg(model_path()).env("DRAFTWISE_LOG", "warn");
    c
}

#[test]
fn greedy_output_is_the_same_with_the_multirow_pass_off_at_one_and_two_threads() {
    // The prompt's prefill runs every matrix with many activation rows; the
    // control runs the single-row kernel once per row.
    let ids = |threads: &str, multirow: &str| {
        let out = run(runtime("generate")
            .args(["--prompt", "The quick brown fox jumps over the lazy dog, and then", "--max-tokens", "16"])
            .args(["--json", "--threads", threads])
            .env("DRAFTWISE_MULTIROW", multirow));
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        json_lines(&out)[1]["token_ids"].clone()
    };
    let want = ids("1", "1");
    assert!(want.as_array().is_some_and(|a| !a.is_empty()));
    for (threads, multirow) in [("1", "0"), ("2", "1"), ("2", "0")] {
        assert_eq!(ids(threads, multirow), want, "threads {threads} DRAFTWISE_MULTIROW={multirow}");
    }
}

#[test]
fn greedy_output_is_the_same_on_4k_pages_and_the_startup_event_says_where_the_weights_lived() {
    let generate = |huge: &str| {
        let out = run(runtime("generate")
            .args(["--prompt", "The quick brown fox jumps over the lazy dog, and then", "--max-tokens", "16"])
            .args(["--json", "--threads", "2"])
            .env("DRAFTWISE_HUGE_PAGES", huge));
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let lines = json_lines(&out);
        assert_eq!(lines[0]["event"], "startup");
        (lines[0]["pages"].clone(), lines[1]["token_ids"].clone())
    };
    let (huge, want) = generate("1");
    let (small, got) = generate("0");
    assert_eq!(got, want, "greedy output on 4 KiB pages");
    assert!(small["weight_bytes"].as_u64().is_some_and(|b| b > 50 << 20), "{small}");
    assert_eq!(huge["weight_bytes"], small["weight_bytes"]);
    // A Linux kernel built with transparent huge pages takes both advices.
    let Ok(thp) = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled") else {
        eprintln!("no transparent huge pages on this system: the pages reported not checked ({huge}, {small})");
        return;
    };
    assert_eq!(small["backing"], "4k", "{small}");
    assert_eq!(small["huge_bytes"], 0, "MADV_NOHUGEPAGE weights on huge pages: {small}");
    // Where the kernel grants them to those who ask, the default gets them.
    if thp.contains("[always]") || thp.contains("[madvise]") {
        assert_eq!(huge["backing"], "huge-advised", "{huge}");
        assert!(huge["huge_bytes"].as_u64().is_some_and(|b| b > 0), "no weight on a huge page: {huge}");
    } else {
        eprintln!("transparent huge pages are off here ({}): the default's pages not checked", thp.trim());
    }
}

#[test]
fn bench_reports_every_raw_sample_with_its_summary() {
    let out = run(runtime("bench")
        .args(["--prompt-tokens", "8", "--gen-tokens", "4", "--reps", "3", "--warmup", "1"])
        .args(["--threads", "2", "--json"]));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r = &json_lines(&out)[0];
    assert_eq!(r["event"], "bench");
    assert_eq!(r["threads"], 2);
    let typed = bench_report(&out);
    assert_eq!((typed.threads, typed.reps.len()), (2, 3));
    assert_eq!(r["prompt_ids"].as_array().unwrap().len(), 8);
    assert_eq!(r["reps"].as_array().unwrap().len(), 3, "warm-up repetitions are not recorded");
    for key in ["prefill_tok_per_s", "decode_tok_per_s"] {
        let s = &r[key];
        assert_eq!(s["n"], 3, "{key}");
        assert_eq!(s["samples"].as_array().unwrap().len(), 3, "{key}");
        let (min, med, max) = (s["min"].as_f64().unwrap(), s["median"].as_f64().unwrap(), s["max"].as_f64().unwrap());
        assert!(0.0 < min && min <= med && med <= max, "{key}: {s}");
    }
}

#[test]
fn bench_verify_cost_times_every_pass_size_relative_to_one_row() {
    let out = run(runtime("bench")
        .args(["--verify-cost", "--max-rows", "4", "--prompt-tokens", "8", "--reps", "2"])
        .args(["--warmup", "0", "--json"]));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r = &json_lines(&out)[0];
    assert_eq!(bench_report(&out).verify_cost.len(), 4);
    let curve = r["verify_cost"].as_array().unwrap();
    assert_eq!(curve.len(), 4);
    for (i, w) in curve.iter().enumerate() {
        assert_eq!(w["rows"], i + 1);
        assert_eq!(w["seconds"]["samples"].as_array().unwrap().len(), 2);
        assert!(w["relative_to_one_row"].as_f64().unwrap() > 0.0);
    }
    assert_eq!(curve[0]["relative_to_one_row"], 1.0);
    // The old flag name still works, as a hidden alias.
    let old = run(runtime("bench")
        .args(["--verify-cost", "--max-width", "2", "--prompt-tokens", "8", "--reps", "1"])
        .args(["--warmup", "0", "--json"]));
    assert!(old.status.success(), "{}", String::from_utf8_lossy(&old.stderr));
    assert_eq!(bench_report(&old).verify_cost.len(), 2);
    let help = run(runtime("bench").arg("--help"));
    let help = String::from_utf8_lossy(&help.stdout);
    // Listed as --max-rows; the old name is a hidden alias (named in prose only).
    let listed = |flag: &str| help.lines().any(|l| l.trim_start().starts_with(flag));
    assert!(listed("--max-rows") && !listed("--max-width"), "{help}");
}

#[test]
fn bench_refuses_zero_repetitions_naming_the_flag() {
    let out = run(runtime("bench").args(["--reps", "0"]));
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--reps"));
}

#[test]
fn bench_width_curve_measures_classic_and_every_width_per_task_and_checks_identity() {
    let dir = tempfile::tempdir().unwrap();
    let prompts = dir.path().join("p.jsonl");
    std::fs::write(
        &prompts,
        concat!(
            r#"{"id": "e1", "type": "edit", "prompt": "Copy this: red green blue red green blue red green blue"}"#,
            "\n",
            r#"{"id": "f1", "type": "free", "prompt": "Once upon a time"}"#,
            "\n",
            r#"{"id": "u1", "prompt": "The capital of France is"}"#,
            "\n"
        ),
    )
    .unwrap();
    let out = run(runtime("bench")
        // --ngram-min 1 (not the default 3): eight tokens are too few for a
        // three-token repeat to be sure, and the drafting path must run.
        .args(["--drafter", "ngram", "--ngram-min", "1", "--widths", "1,3", "--reps", "2", "--warmup", "0"])
        .args(["--max-tokens", "8", "--threads", "2", "--json", "--prompts"])
        .arg(&prompts));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r = &json_lines(&out)[0];
    assert_eq!(r["event"], "bench_width_curve");
    let typed: WidthCurveReport = serde_json::from_slice(&out.stdout).unwrap();
    holds_every_field(serde_json::to_value(&typed).unwrap(), &out);
    assert_eq!(
        (typed.event, typed.spec.drafter, typed.tasks.len()),
        (BenchEventKind::BenchWidthCurve, DrafterKind::Ngram, 3)
    );
    let tasks = r["tasks"].as_array().unwrap();
    let names: Vec<&str> = tasks.iter().map(|t| t["task"].as_str().unwrap()).collect();
    assert_eq!(names, ["edit", "free", "untyped"], "tasks in first-seen order");
    for t in tasks {
        let arms = t["arms"].as_array().unwrap();
        let widths: Vec<serde_json::Value> = arms.iter().map(|a| a["width"].clone()).collect();
        assert_eq!(widths, [serde_json::Value::Null, 1.into(), 3.into()]);
        for a in arms {
            assert_eq!(a["decode_tok_per_s"]["n"], 2, "{a}");
            assert_eq!(a["ids_equal_classic"], true, "{a}");
            assert!(a["declined"].is_null());
        }
        assert_eq!(arms[0]["ratio_vs_classic"], 1.0);
        // One-token passes: classic's steps, and each arm's plain steps
        // against them; verify passes only where drafts were carried.
        assert!(arms[0]["single_token_steps"].as_u64().unwrap() > 0, "{}", arms[0]);
        assert!(arms[0]["single_token_step_ms"].as_f64().unwrap() > 0.0, "{}", arms[0]);
        assert_eq!(arms[0]["single_token_step_vs_classic"], 1.0);
        assert!(arms[0]["verify_pass_ms"].is_null());
        for a in &arms[1..] {
            let plain = a["single_token_steps"].as_u64().unwrap();
            assert_eq!(a["single_token_step_vs_classic"].is_f64(), plain > 0, "{a}");
            assert_eq!(a["verify_pass_ms"].is_f64(), a["rounds"].as_u64().unwrap() > 0, "{a}");
        }
        if t["task"] == "edit" {
            // The prompt repeats itself: prompt lookup must find drafts.
            assert!(arms[2]["drafted"].as_u64().unwrap() > 0, "{}", arms[2]);
        }
    }
}

#[test]
fn bench_width_curve_refuses_a_fixed_width_and_bad_widths() {
    for args in [&["--draft-block-size", "4"][..], &["--widths", "0,2"], &["--widths", "33"], &["--allow-inexact"]] {
        let out = run(runtime("bench").args(["--drafter", "ngram", "--reps", "1"]).args(args));
        assert!(!out.status.success(), "{args:?} was accepted");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("--widths") || err.contains("--draft-width"), "{args:?}: {err}");
    }
}
