//! End-to-end: `tuner sweep --served` driving the real `runtime serve` on
//! the default model (widths 1 and 2 and the adaptive arm, one round, one
//! burst, a text prompt and a chat prompt, 8 tokens). What it pins: the server's typed `startup`
//! event is enough to find it on a free port, every streamed request is
//! recorded with usage, time to first token and end-to-end tok/s, greedy
//! speculative output through the server is byte-identical to classic, each
//! server's log is kept, and no server outlives its arm. The host may be
//! busy, so the gate's CPU checks are relaxed and the decision itself is not
//! asserted.
use draftwise_tests::{REPEATING_PROMPT, real_sweep};
use serde_json::Value;

/// The two sweeps of this file one at a time: the gate watching one sweep's
/// arms would see the other's servers as foreign model processes.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn a_real_served_sweep_records_streamed_requests_and_stops_every_server() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let dir = tempfile::tempdir().unwrap();
    let chat = r#"{"id": "chat", "type": "chat", "messages": [{"role": "user", "content": "What is the capital of France?"}]}"#;
    let (out, s) = real_sweep(dir.path(), &[REPEATING_PROMPT, chat], "1,2", &["--served", "--health-timeout", "60"]);
    assert_eq!((s["served"].as_bool(), s["complete"].as_bool()), (Some(true), Some(true)), "{s}");
    assert_eq!(s["arms_complete"], 5);
    assert_eq!(s["identical"], true, "served speculative output differs from classic: {s}");
    assert_eq!(s["target_quant"], "q4_1");
    assert!(s["classic_ttft_ms"]["median"].as_f64().unwrap() > 0.0, "{s}");

    let raw = std::fs::read_to_string(out.join("raw.jsonl")).unwrap();
    let lines: Vec<Value> = raw.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let requests: Vec<&Value> = lines.iter().filter(|l| l["kind"] == "request").collect();
    assert_eq!(requests.len(), 5 * 2, "one burst of two prompts per arm, warm-ups excluded");
    for r in &requests {
        let sv = &r["served"];
        assert!(r["usage"]["prompt_tokens"].as_u64().unwrap() > 0, "{r}");
        assert!(r["usage"]["completion_tokens"].as_u64().unwrap() > 0, "{r}");
        assert!(sv["ttft_ms"].as_f64().unwrap() > 0.0, "{r}");
        assert!(sv["e2e_ms"].as_f64().unwrap() >= sv["ttft_ms"].as_f64().unwrap(), "{r}");
        assert!(sv["e2e_tok_per_s"].as_f64().unwrap() > 0.0, "{r}");
        assert!(sv["server"]["prefill_ms"].as_f64().unwrap() > 0.0, "{r}");
        assert_eq!(r["token_ids"].as_array().unwrap().len() as u64, r["usage"]["completion_tokens"].as_u64().unwrap());
        let chat = r["prompt_id"] == "chat";
        assert_eq!(sv["endpoint"], if chat { "/v1/chat/completions" } else { "/v1/completions" });
        if r["width"].is_number() {
            assert_eq!(r["diagnostics_present"], true, "{r}");
            let spec = &sv["server"]["speculative"];
            if r["width"] == 0 {
                // The adaptive arm: up to the widest width, its draft lengths reported.
                assert_eq!((spec["width"].as_u64(), spec["adaptive"].as_bool()), (Some(2), Some(true)), "{r}");
                assert_eq!(spec["draft_lengths"].as_array().map(Vec::len), Some(3), "{r}");
            } else {
                assert_eq!(spec["width"], r["width"], "{r}");
            }
        }
    }
    let startups: Vec<&Value> = lines.iter().filter(|l| l["kind"] == "startup").collect();
    assert_eq!(startups[1]["startup"]["width"], 1);
    for e in lines.iter().filter(|l| l["kind"] == "arm_end") {
        assert_eq!((e["ok"].as_bool(), e["warmup_requests"].as_u64()), (Some(true), Some(2)), "{e}");
        assert_eq!((e["server"]["stop"].as_str(), e["exit_code"].as_i64()), (Some("sigterm"), Some(0)), "{e}");
        let pid = e["server"]["pid"].as_u64().unwrap();
        assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists(), "server {pid} is still running");
        let stderr = std::fs::read_to_string(out.join(e["stderr_log"].as_str().unwrap())).unwrap();
        assert!(stderr.contains("runtime serve: stopped"), "the server's log is kept: {stderr}");
        let stdout = std::fs::read_to_string(out.join(e["stdout_log"].as_str().unwrap())).unwrap();
        assert!(stdout.lines().next().unwrap().contains("\"event\":\"startup\""), "{stdout}");
    }
    let record = std::fs::read_to_string(out.join("record.md")).unwrap();
    assert!(record.contains("**Served sweep.**") && record.contains("byte-identical"), "{record}");
    assert!(record.contains("### Time to first token"), "{record}");
}

/// The same tiny sweep at `--concurrency 2`: two clients per pass to a real
/// `runtime serve --parallel 2`, so requests share its forward passes. What
/// it pins: the settings say 2, every row keeps the server's
/// `draftwise.batch`, some request ran in a pass of two sequences, batched
/// output is still byte-identical to classic, and the summary states both.
#[test]
fn a_real_served_sweep_at_concurrency_2_records_the_batches_its_requests_ran_in() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let dir = tempfile::tempdir().unwrap();
    let chat = r#"{"id": "chat", "type": "chat", "messages": [{"role": "user", "content": "What is the capital of France?"}]}"#;
    let (out, s) = real_sweep(
        dir.path(),
        &[REPEATING_PROMPT, chat],
        "1,2",
        &["--served", "--health-timeout", "60", "--concurrency", "2"],
    );
    assert_eq!((s["complete"].as_bool(), s["identical"].as_bool()), (Some(true), Some(true)), "{s}");
    assert_eq!(s["concurrency"], 2, "{s}");
    let raw = std::fs::read_to_string(out.join("raw.jsonl")).unwrap();
    let lines: Vec<Value> = raw.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines[0]["settings"]["served"]["concurrency"], 2);
    let requests: Vec<&Value> = lines.iter().filter(|l| l["kind"] == "request").collect();
    assert_eq!(requests.len(), 5 * 2, "one burst of two prompts per arm");
    for r in &requests {
        let b = &r["served"]["server"]["batch"];
        assert!(b["passes"].as_u64().unwrap() > 0 && b["mean_sequences"].as_f64().unwrap() >= 1.0, "{r}");
    }
    assert!(
        requests.iter().any(|r| r["served"]["server"]["batch"]["widest"].as_u64().unwrap() >= 2),
        "no request shared a pass with the other client: {requests:?}"
    );
    assert!(s["batch"]["mean_sequences"].as_f64().unwrap() > 1.0, "{s}");
    let record = std::fs::read_to_string(out.join("record.md")).unwrap();
    assert!(record.lines().next().unwrap().ends_with("served at concurrency 2)"), "{record}");
}
