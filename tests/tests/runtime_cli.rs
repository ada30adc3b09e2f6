//! `runtime` driven as a user would: the real binary, the default model.

use draftwise_tests::{bin, json_lines, model_path, output_text, run};
use runtime::events::{Event, sha256_hex, token_ids_sha256};
use std::process::Command;

fn generate() -> Command {
    let mut c = Command::new(bin("runtime"));
    c.arg("generate").arg("--model").arg(model_path()).env("DRAFTWISE_LOG", "warn");
    c
}

#[test]
fn json_events_describe_startup_and_every_completion_with_true_hashes() {
    let dir = tempfile::tempdir().unwrap();
    let prompts = dir.path().join("p.jsonl");
    std::fs::write(
        &prompts,
        concat!(
            "{\"id\": \"capital\", \"messages\": [{\"role\": \"user\", \"content\": \"What is the capital of France?\"}]}\n",
            "{\"id\": 7, \"prompt\": \"def add(a, b):\", \"type\": \"code\"}\n"
        ),
    )
    .unwrap();
    let out = run(generate().arg("--prompts").arg(&prompts).args([
        "--max-tokens",
        "12",
        "--warmup",
        "1",
        "--repeat",
        "2",
        "--json",
        "--threads",
        "2",
        // Classic decoding, whatever the policy says for this host (its
        // speculative events are tested in policy_default.rs).
        "--drafter",
        "none",
    ]));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let lines = json_lines(&out);
    let events: Vec<Event> = lines.iter().map(|v| serde_json::from_value(v.clone()).unwrap()).collect();
    let Event::Startup(s) = &events[0] else { panic!("first event is not startup: {:?}", lines[0]) };
    assert_eq!(s.threads, 2);
    assert_eq!(s.target.quant.class, "q4_1");
    assert_eq!(s.target.architecture, "llama");
    assert!(s.device_class.starts_with("cpu:"));
    let completions: Vec<_> = events[1..]
        .iter()
        .map(|e| match e {
            Event::Completion(c) => c.clone(),
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    // 1 warm-up pass + 2 recorded passes over 2 prompts.
    assert_eq!(completions.len(), 6);
    assert_eq!(completions.iter().filter(|c| c.warmup).count(), 2);
    for c in &completions {
        assert_eq!(c.outcome.text_sha256, sha256_hex(c.text.as_bytes()));
        assert_eq!(c.outcome.token_ids_sha256, token_ids_sha256(&c.outcome.token_ids));
        assert_eq!(c.outcome.usage.completion_tokens, c.outcome.token_ids.len());
        assert_eq!(c.outcome.usage.total_tokens, c.outcome.usage.prompt_tokens + c.outcome.usage.completion_tokens);
        assert!(c.outcome.usage.completion_tokens <= 12);
    }
    let capital: Vec<_> = completions.iter().filter(|c| c.prompt_id == "capital").collect();
    assert!(capital.iter().all(|c| c.text.contains("Paris")), "{:?}", capital[0].text);
    // Greedy decoding is a function of the prompt: every pass agrees.
    assert!(capital.windows(2).all(|w| w[0].outcome.token_ids == w[1].outcome.token_ids));
    assert!(completions.iter().any(|c| c.prompt_id == "7"));
}

#[test]
fn greedy_output_is_the_same_at_one_and_two_threads() {
    let ids = |threads: &str| {
        let out = run(generate().args([
            "--prompt",
            "Once upon a time",
            "--max-tokens",
            "24",
            "--json",
            "--threads",
            threads,
        ]));
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        json_lines(&out)[1]["token_ids"].clone()
    };
    assert_eq!(ids("1"), ids("2"));
}

#[test]
fn every_kernel_family_gives_the_same_greedy_tokens() {
    let fams = ["scalar", "avx2", "avx512vnni"];
    let mut seen = Vec::new();
    for f in fams {
        let out = run(generate()
            .args(["--prompt", "The capital of France is", "--max-tokens", "8", "--json"])
            .env("DRAFTWISE_KERNELS", f));
        if !out.status.success() {
            // A family this CPU lacks is refused with a clear message.
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(err.contains("cannot run"), "{f}: {err}");
            continue;
        }
        let lines = json_lines(&out);
        assert_eq!(lines[0]["kernel_family"], f);
        assert_eq!(lines[0]["kernel_family_forced"], true);
        seen.push((f, lines[1]["token_ids"].clone()));
    }
    assert!(!seen.is_empty());
    for (f, ids) in &seen {
        assert_eq!(ids, &seen[0].1, "{f} differs from {}", seen[0].0);
    }
}

#[test]
fn a_malformed_prompt_file_is_refused_naming_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("bad.jsonl");
    std::fs::write(&p, "{\"id\": 1, \"prompt\": \"ok\"}\n{\"id\": 2, \"promt\": \"typo\"}\n").unwrap();
    let out = run(generate().arg("--prompts").arg(&p));
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bad.jsonl:2"), "{err}");
    assert!(out.stdout.is_empty(), "nothing was generated before the refusal");
}

#[test]
fn a_truncated_model_file_is_refused_naming_the_byte_offset() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("fake.gguf");
    std::fs::write(&p, b"GGUF\x03\x00\x00\x00\xff\xff").unwrap();
    let out = run(Command::new(bin("runtime")).args(["generate", "--prompt", "hi", "--model"]).arg(&p));
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("at byte 8") && err.contains("truncated"), "{err}");
}

#[test]
fn build_info_json_names_the_commit_and_compiler() {
    let out = run(Command::new(bin("runtime")).args(["build-info", "--json"]));
    assert!(out.status.success());
    let v = &json_lines(&out)[0];
    assert!(v["rustc"].as_str().unwrap().starts_with("rustc "));
    assert!(!v["git_commit"].as_str().unwrap().is_empty());
}

#[test]
fn speculative_generation_reports_diagnostics_and_equals_classic_output() {
    let prompt =
        ["--prompt", "Repeat this three times: one two three four five.", "--chat", "--max-tokens", "40", "--json"];
    let classic = run(generate().args(prompt).args(["--drafter", "none"]));
    assert!(classic.status.success(), "{}", String::from_utf8_lossy(&classic.stderr));
    let classic = json_lines(&classic);
    assert_eq!(classic[0]["drafter"], "none");
    assert!(classic[0]["width"].is_null());
    for w in ["1", "3", "8"] {
        let out = run(generate().args(prompt).args(["--drafter", "ngram", "--draft-block-size", w]));
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let lines = json_lines(&out);
        assert_eq!(lines[0]["drafter"], "ngram");
        assert_eq!(lines[0]["width"].as_u64(), Some(w.parse().unwrap()));
        assert!(lines[0]["width_from"].as_str().unwrap().contains("--draft-width"));
        assert_eq!(lines[0]["exactness_probe"]["passed"], true);
        assert_eq!(lines[1]["event"], "completion");
        assert_eq!(lines[1]["token_ids"], classic[1]["token_ids"], "width {w}");
        assert_eq!(lines[1]["text_sha256"], classic[1]["text_sha256"]);
        assert_eq!(lines[2]["event"], "speculative_diagnostics");
        let d = &lines[2];
        assert!(d["accepted"].as_u64().unwrap() <= d["drafted"].as_u64().unwrap());
        assert!(d["rounds"].as_u64().unwrap() > 0, "repetition gives the n-gram drafter something to find");
    }
}

#[test]
fn the_suffix_drafter_names_its_settings_and_equals_classic_output() {
    let prompt =
        ["--prompt", "Repeat this three times: one two three four five.", "--chat", "--max-tokens", "40", "--json"];
    let classic = json_lines(&run(generate().args(prompt).args(["--drafter", "none"])));
    for w in ["2", "4"] {
        let out = run(generate().args(prompt).args(["--drafter", "suffix", "--draft-block-size", w]).args([
            "--suffix-min-match",
            "3",
            "--suffix-min-prob",
            "0.25",
        ]));
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let lines = json_lines(&out);
        assert_eq!(lines[0]["drafter"], "suffix");
        // Given flags over the defaults for the rest.
        let want = serde_json::json!({"suffix_min_match": 3, "suffix_max_match": 32, "suffix_min_prob": 0.25});
        assert_eq!(lines[0]["drafter_settings"], want);
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(
                "speculative: drafter suffix (suffix_min_match 3, suffix_max_match 32, suffix_min_prob 0.25)"
            )
        );
        assert_eq!(lines[1]["token_ids"], classic[1]["token_ids"], "width {w}");
        assert_eq!(lines[2]["event"], "speculative_diagnostics");
        assert!(lines[2]["rounds"].as_u64().unwrap() > 0, "repetition gives the suffix drafter something to find");
    }
}

#[test]
fn unknown_or_unloadable_drafters_and_bad_widths_are_refused_clearly() {
    for (args, needle) in [
        (vec!["--drafter", "medusa"], "\"medusa\" is not a drafter kind"),
        (vec!["--drafter", "dflash"], "no dflash loader"),
        (vec!["--drafter", "draft-model"], "--drafter-model"),
        (vec!["--drafter", "ngram", "--draft-block-size", "many"], "many"),
        (vec!["--draft-block-size", "4"], "need --drafter"),
        (vec!["--suffix-min-match", "2"], "need --drafter"),
        (vec!["--drafter", "none", "--suffix-min-prob", "0.5"], "decodes classically"),
        (vec!["--drafter", "ngram", "--suffix-max-match", "8"], "settings of --drafter suffix, not of ngram"),
        (vec!["--drafter", "suffix", "--suffix-max-match", "65"], "--suffix-max-match 65: give 1..=64"),
        (vec!["--drafter", "suffix", "--suffix-min-prob", "1.5"], "--suffix-min-prob 1.5"),
        (vec!["--drafter", "none", "--adaptive", "on"], "decodes classically"),
        (vec!["--drafter", "ngram", "--draft-width", "4", "--adaptive", "on"], "give --cost-curve CONTEXT=R1,R2"),
        (vec!["--drafter", "ngram", "--draft-width", "4", "--cost-curve", "64=1,1.1"], "--cost-curve is for the adaptive"),
        (vec!["--drafter", "ngram", "--adaptive", "off", "--cost-curve", "64=1,1.1"], "--adaptive off fixes it"),
        (vec!["--drafter", "ngram", "--adaptive", "on", "--cost-curve", "64=1"], "1 values"),
    ] {
        let out = run(generate().args(["--prompt", "hi"]).args(&args));
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

#[test]
fn the_width_curve_refuses_an_adaptive_arm_without_its_cost_and_a_cost_without_the_arm() {
    let bench = || {
        let mut c = Command::new(bin("runtime"));
        c.args(["bench", "--model"]).arg(model_path()).args(["--drafter", "ngram", "--widths", "2"]);
        c
    };
    for (args, needle) in [
        (vec!["--adaptive", "on"], "give --cost-curve CONTEXT=R1,R2"),
        (vec!["--cost-curve", "64=1,1.1"], "goes with --adaptive on"),
    ] {
        let out = run(bench().args(&args));
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", output_text(&out));
        assert!(output_text(&out).contains(needle), "{args:?}: {}", output_text(&out));
    }
}

#[test]
fn fetch_model_refuses_an_unknown_name_listing_the_known_ones() {
    let out = run(Command::new(bin("runtime")).args(["fetch-model", "--model", "gemma3"]));
    assert_eq!(out.status.code(), Some(1), "{}", output_text(&out));
    let text = output_text(&out);
    assert!(text.contains("not a known model") && text.contains("smollm2-135m, gemma3-270m"), "{text}");
}

#[test]
fn llama_cpp_style_flags_generate_the_same_text_streamed_as_printed_whole() {
    // The long spellings, the completion as JSON events...
    let long = run(generate().args([
        "--prompt",
        "The capital of France is",
        "--max-tokens",
        "16",
        "--threads",
        "2",
        "--drafter",
        "none",
        "--json",
    ]));
    assert!(long.status.success(), "{}", output_text(&long));
    let want =
        json_lines(&long).iter().find(|v| v["event"] == "completion").unwrap()["text"].as_str().unwrap().to_string();
    // ... and llama.cpp's short ones, the text streamed to stdout as it is decoded.
    let mut c = Command::new(bin("runtime"));
    c.args(["generate", "-m"]).arg(model_path()).args(["-p", "The capital of France is", "-n", "16", "-t", "2"]);
    let short = run(c.args(["--drafter", "none"]).env("DRAFTWISE_LOG", "warn"));
    assert!(short.status.success(), "{}", output_text(&short));
    assert_eq!(String::from_utf8_lossy(&short.stdout), format!("{want}\n"));
}

#[test]
fn a_context_cap_bounds_the_sequence_and_a_cap_past_the_model_is_refused() {
    // -c 8: a 5-token prompt leaves room for 4 tokens at most.
    let out =
        run(generate().args(["-p", "The capital of France is", "-n", "50", "-c", "8", "--drafter", "none", "--json"]));
    assert!(out.status.success(), "{}", output_text(&out));
    let lines = json_lines(&out);
    assert_eq!(lines[0]["target"]["context_length"].as_u64(), Some(8), "{}", lines[0]);
    let c = lines.iter().find(|v| v["event"] == "completion").unwrap();
    let (p, n) = (c["usage"]["prompt_tokens"].as_u64().unwrap(), c["usage"]["completion_tokens"].as_u64().unwrap());
    assert!(p + n <= 9, "prompt {p} + completion {n} past the cap: {c}");
    assert_eq!(c["finish_reason"], "length");
    for bad in ["0", "9999999"] {
        let out = run(generate().args(["-p", "x", "-c", bad]));
        assert_eq!(out.status.code(), Some(1), "{}", output_text(&out));
        assert!(
            output_text(&out).contains(&format!("--ctx-size {bad}: give 1 to the model's context length")),
            "{}",
            output_text(&out)
        );
    }
}

#[test]
fn a_chat_template_file_replaces_the_models_and_a_broken_one_is_refused_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let t = dir.path().join("plain.jinja");
    std::fs::write(&t, "{% for m in messages %}Q: {{ m['content'] }}\n{% endfor %}A:").unwrap();
    let out = run(generate().arg("--chat-template").arg(&t).args([
        "--chat",
        "-p",
        "2+2?",
        "-n",
        "4",
        "--drafter",
        "none",
        "--json",
    ]));
    assert!(out.status.success(), "{}", output_text(&out));
    let lines = json_lines(&out);
    assert!(lines[0].to_string().contains("--chat-template plain.jinja"), "{}", lines[0]);
    // The prompt is the template's rendering: as many tokens as that text.
    let plain = run(generate().args(["-p", "Q: 2+2?\nA:", "-n", "4", "--drafter", "none", "--json"]));
    let usage = |o: &std::process::Output| {
        json_lines(o).iter().find(|v| v["event"] == "completion").unwrap()["usage"]["prompt_tokens"].clone()
    };
    assert_eq!(usage(&out), usage(&plain));
    let bad = dir.path().join("bad.jinja");
    std::fs::write(&bad, "{% for m in messages %}{{ m['content'] }").unwrap();
    let out = run(generate().arg("--chat-template").arg(&bad).args(["--chat", "-p", "x"]));
    assert_eq!(out.status.code(), Some(1));
    assert!(
        output_text(&out).contains("--chat-template") && output_text(&out).contains("bad.jinja"),
        "{}",
        output_text(&out)
    );
    // A file past the cap is refused before it is read whole.
    let big = dir.path().join("big.jinja");
    std::fs::File::create(&big).unwrap().set_len(64 << 20).unwrap();
    let out = run(generate().arg("--chat-template").arg(&big).args(["--chat", "-p", "x"]));
    assert_eq!(out.status.code(), Some(1));
    assert!(output_text(&out).contains("is larger than 1048576 bytes"), "{}", output_text(&out));
}

#[test]
fn json_logs_are_one_object_per_line_when_asked_for() {
    let out = run(generate()
        .args(["-p", "hi", "-n", "2", "--drafter", "none"])
        .env("DRAFTWISE_LOG", "info")
        .env("DRAFTWISE_LOG_FORMAT", "json"));
    assert!(out.status.success(), "{}", output_text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    let line = err.lines().find(|l| l.contains("loading")).unwrap_or_else(|| panic!("no loading line: {err}"));
    let v: serde_json::Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
    assert_eq!(v["level"], "INFO", "{v}");
    assert_eq!(v["fields"]["message"], "loading", "{v}");
    assert!(v["fields"]["model"].as_str().is_some_and(|m| m.ends_with(".gguf")), "{v}");
}
