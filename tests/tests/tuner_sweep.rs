//! End-to-end: `tuner sweep` driving the real `runtime` on the default model
//! (a tiny sweep: widths 1 and 3 and the adaptive arm, one round, one
//! burst, 8 tokens), then
//! `summarize` and `propose --dry-run`. What it pins: the runtime's events
//! are everything the tuner needs (no log parsing), warm-ups stay out of the
//! raw data, and greedy speculative output is byte-identical to classic
//! through the whole sweep. The host may be busy, so the gate's CPU checks
//! are relaxed and the decision itself is not asserted.
use draftwise_tests::{REPEATING_PROMPT, real_sweep};
use serde_json::Value;

#[test]
fn a_real_sweep_records_identical_outputs_and_a_decision() {
    let dir = tempfile::tempdir().unwrap();
    let (out, s) = real_sweep(
        dir.path(),
        &[REPEATING_PROMPT, r#"{"id": "code", "type": "code", "prompt": "def add(a, b):"}"#],
        "1,3",
        &[],
    );
    assert_eq!(s["complete"], true, "{s}");
    assert_eq!(s["arms_complete"], 5);
    assert_eq!(s["identical"], true, "speculative output differs from classic: {s}");
    assert!(s["device_class"].as_str().unwrap().starts_with("cpu:"));
    assert_eq!(s["target_quant"], "q4_1");
    for w in s["widths"].as_array().unwrap() {
        assert_eq!(w["requests"], 2);
        assert!(w["not_a_measurement"].is_null() || w["not_a_measurement"].as_str().unwrap().contains("zero"), "{w}");
    }

    let raw = std::fs::read_to_string(out.join("raw.jsonl")).unwrap();
    let lines: Vec<Value> = raw.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let requests: Vec<&Value> = lines.iter().filter(|l| l["kind"] == "request").collect();
    assert_eq!(requests.len(), 5 * 2, "one burst of two prompts per arm, warm-ups excluded");
    let ends: Vec<&Value> = lines.iter().filter(|l| l["kind"] == "arm_end").collect();
    assert!(ends.iter().all(|e| e["ok"] == true && e["warmup_requests"] == 2), "{ends:?}");
    let startups: Vec<&Value> = lines.iter().filter(|l| l["kind"] == "startup").collect();
    assert_eq!(startups[1]["startup"]["width"], 1);
    assert!(startups[1]["startup"]["width_from"].as_str().unwrap().contains("--draft-width"));
    for f in ["record.md", "summary.csv", "plot.svg", "prompts.jsonl", "logs/arm-003-attempt-0.stdout.jsonl"] {
        assert!(out.join(f).exists(), "{f}");
    }
    let record = std::fs::read_to_string(out.join("record.md")).unwrap();
    assert!(record.contains("## Decision rule") && record.contains("byte-identical"), "{record}");
    // The round's verify-cost processes (`--cost-contexts 16,48`): passes of
    // 1..=4 rows (the widest width 3, plus one), one row costing 1.
    let costs: Vec<&Value> = lines.iter().filter(|l| l["kind"] == "cost").collect();
    assert_eq!(costs.len(), 2, "{costs:?}");
    assert!(costs.iter().all(|c| c["ok"] == true && c["relative"].as_array().unwrap().len() == 4), "{costs:?}");
    let curves = s["verify_cost"].as_array().unwrap();
    assert_eq!(curves.iter().map(|c| c["context"].as_u64().unwrap()).collect::<Vec<_>>(), [16, 48]);
    for c in curves {
        let p = c["points"].as_array().unwrap();
        assert_eq!((p.len(), p[0]["relative"].as_f64()), (4, Some(1.0)), "{c}");
        assert!(p[1..].iter().all(|x| x["relative"].as_f64().unwrap() > 0.0), "{c}");
    }
    assert!(record.contains("### Verify cost"), "{record}");
    assert!(!raw.contains("\"--model\",\"/"), "a cost process's model path is named, not absolute");
    // The adaptive arm (C 1 3 A C): up to width 3, weighing the curves
    // measured before it (its round's cost processes ran first), and its
    // requests' draft lengths in the diagnostics.
    let starts: Vec<&Value> = lines.iter().filter(|l| l["kind"] == "arm_start").collect();
    let a = starts.iter().find(|l| l["width"] == 0).expect("an adaptive arm");
    let argv: Vec<&str> = a["argv"].as_array().unwrap().iter().map(|x| x.as_str().unwrap()).collect();
    let line = argv.join(" ");
    assert!(line.contains("--draft-width 3 --adaptive on") && line.contains("--cost-curve 16=1,"), "{line}");
    let first_cost = raw.find("\"kind\":\"cost\"").unwrap();
    let adaptive_start = raw.find("\"kind\":\"arm_start\",\"arm\":3").unwrap();
    assert!(first_cost < adaptive_start, "the cost processes run before the adaptive arm");
    assert_eq!(startups[3]["startup"]["adaptive"], true, "{}", startups[3]);
    for r in requests.iter().filter(|r| r["width"] == 0) {
        let d = &r["diagnostics"];
        assert_eq!(
            (d["adaptive"].as_bool(), d["draft_lengths"].as_array().map(Vec::len)),
            (Some(true), Some(4)),
            "{r}"
        );
    }
    assert!(record.contains("| adaptive |"), "the widths table names the adaptive arm: {record}");
}

#[test]
fn a_layer_list_the_target_cannot_run_is_refused_before_anything_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("records/never");
    let o = draftwise_tests::run(
        std::process::Command::new(draftwise_tests::bin("tuner"))
            .args(["sweep", "-m"])
            .arg(draftwise_tests::model_path())
            .args(["--drafter", "layerskip", "--layerskip-layers", "5,999", "--out"])
            .arg(&out),
    );
    assert_eq!(o.status.code(), Some(1), "{}", draftwise_tests::output_text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    // The runtime's own message, from its parser.
    assert!(err.contains("--layerskip-layers: layer 999 does not exist (the target has 30)"), "{err}");
    assert!(!out.exists() && !dir.path().join("records/ledger.jsonl").exists(), "nothing is written");
}
