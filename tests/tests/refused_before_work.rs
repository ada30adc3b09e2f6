//! `runtime generate` and `runtime bench` refuse what they cannot honour
//! before any work: a prompt past the context before its prefill, and a
//! flag that would be ignored (`bench --policy`, a drafter model for a
//! drafter that takes none) before a measurement.
use draftwise_tests::{bin, model_path, output_text, run};
use std::process::Command;

fn runtime(sub: &str) -> Command {
    let mut c = Command::new(bin("runtime"));
    c.arg(sub).arg("--model").arg(model_path()).env("DRAFTWISE_LOG", "warn");
    c
}

#[test]
fn generate_refuses_a_prompt_past_the_context_before_its_prefill() {
    // 64 positions, a prompt of several hundred tokens: refused naming both
    // numbers, with no completion and no prefill timing printed.
    let prompt = "the quick brown fox jumps over the lazy dog ".repeat(40);
    let out =
        run(runtime("generate").args(["--ctx-size", "64", "--max-tokens", "4", "--json", "--prompt"]).arg(&prompt));
    let text = output_text(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("prompt prompt is") && text.contains("the context length is 64"), "{text}");
    assert!(!text.contains("\"event\":\"completion\"") && !text.contains("\"event\":\"startup\""), "{text}");
}

#[test]
fn bench_refuses_a_policy_file_it_would_never_read() {
    for extra in [&[][..], &["--drafter", "ngram"][..]] {
        let out = run(runtime("bench").args(["--reps", "1", "--policy", "/no/such/table.toml"]).args(extra));
        let text = output_text(&out);
        assert_eq!(out.status.code(), Some(1), "{extra:?}: {text}");
        assert!(text.contains("--policy /no/such/table.toml") && text.contains("resolves no width"), "{text}");
    }
}

#[test]
fn a_drafter_model_for_a_drafter_that_takes_none_is_refused() {
    let out = run(runtime("bench").args(["--reps", "1", "--drafter", "ngram", "--drafter-model", "/no/such.gguf"]));
    let text = output_text(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("--drafter-model /no/such.gguf") && text.contains("ngram drafts from the target"), "{text}");
    let out = run(runtime("generate").args([
        "--drafter",
        "suffix",
        "--drafter-model",
        "/no/such.gguf",
        "--max-tokens",
        "2",
        "--prompt",
        "Hi",
    ]));
    let text = output_text(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("suffix drafts from the target"), "{text}");
}
