//! Log probabilities from `runtime serve`: equal to the logits of a plain
//! forward pass (the engine loaded here, once) within 1e-4, identical with
//! and without speculation, and read by the official `openai` client in
//! both endpoints' shapes (lm-evaluation-harness's `echo` scoring too).

use draftwise_tests::model_path;
use draftwise_tests::serve::Server;
use runtime::engine::Engine;
use serde_json::{Value, json};
use std::path::PathBuf;
use std::process::Command;

fn engine() -> &'static Engine {
    draftwise_tests::default_engine()
}

/// ln softmax(logits after `prefix`)[id], from a plain prefill.
fn plain_logprob(prefix: &[u32], id: u32) -> f64 {
    let logits = engine().prefill(prefix).expect("prefill").logits;
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let sum: f64 = logits.iter().map(|&x| (x as f64 - max).exp()).sum();
    logits[id as usize] as f64 - max - sum.ln()
}

fn model() -> String {
    runtime::serve::default_model_id(&model_path())
}

const PROMPT: &str = "one two three four five, one two three four five, one two";

fn completion(server: &Server) -> Value {
    let r = server.post(
        "/v1/completions",
        &json!({"model": model(), "prompt": PROMPT, "max_tokens": 12, "temperature": 0, "logprobs": 3}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()
}

#[test]
fn logprobs_equal_a_plain_pass_and_do_not_depend_on_speculation() {
    let classic = Server::start(&["--drafter", "none"]);
    let c = completion(&classic);
    let ids: Vec<u32> =
        c["draftwise"]["token_ids"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect();
    let lp = &c["choices"][0]["logprobs"];
    let got: Vec<f64> = lp["token_logprobs"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
    assert_eq!(got.len(), ids.len(), "{lp}");
    let t = classic.post("/tokenize", &json!({"prompt": PROMPT})).json();
    let mut seq: Vec<u32> = t["tokens"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect();
    let mut worst = 0f64;
    for (i, &id) in ids.iter().enumerate() {
        let want = plain_logprob(&seq, id);
        worst = worst.max((got[i] - want).abs());
        assert!((got[i] - want).abs() < 1e-4, "token {i}: served {} plain {want}", got[i]);
        // Greedy: the chosen token is the likeliest, first among the alternatives.
        let top = lp["top_logprobs"][i].as_object().unwrap();
        assert_eq!(top.len(), 3, "{top:?}");
        let best = top.values().map(|v| v.as_f64().unwrap()).fold(f64::NEG_INFINITY, f64::max);
        assert!((best - got[i]).abs() < 1e-9, "token {i} is greedy: {top:?} vs {}", got[i]);
        seq.push(id);
    }
    println!("largest difference from a plain pass over {} tokens: {worst:e}", ids.len());
    // The offsets index the response text.
    let text = c["choices"][0]["text"].as_str().unwrap();
    let tokens = lp["tokens"].as_array().unwrap();
    let offsets = lp["text_offset"].as_array().unwrap();
    assert_eq!(tokens.iter().map(|t| t.as_str().unwrap()).collect::<String>(), text);
    assert_eq!(offsets[0], 0);
    drop(classic);

    // The same request to a speculating server: the same tokens, the same numbers.
    let spec = Server::start(&["--drafter", "ngram", "--draft-width", "4"]);
    let s = completion(&spec);
    assert!(s["draftwise"]["speculative"]["accepted"].as_u64().unwrap() > 0, "the drafts were used: {s}");
    assert_eq!(s["draftwise"]["token_ids"], c["draftwise"]["token_ids"]);
    assert_eq!(s["choices"][0]["logprobs"], c["choices"][0]["logprobs"]);
}

#[test]
fn the_openai_client_reads_both_shapes_and_echo_scores_the_prompt() {
    let venv = std::env::var_os("DRAFTWISE_TEST_VENV")
        .filter(|v| !v.is_empty())
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.venv-test"), PathBuf::from);
    let python = venv.join("bin/python");
    assert!(python.exists(), "no test venv at {}: run scripts/test-env.sh", venv.display());
    let server = Server::start(&["--drafter", "none"]);
    let out = Command::new(&python)
        .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("python/openai_logprobs.py"))
        .arg(format!("http://{}/v1", server.addr))
        .arg(model())
        .output()
        .expect("run the script");
    assert!(out.status.success(), "{}\n{}", String::from_utf8_lossy(&out.stderr), server.stderr());
    let got: Value = serde_json::from_slice(&out.stdout).unwrap();
    let chat = &got["chat"];
    let content = chat["content"].as_array().unwrap();
    assert!(!content.is_empty());
    let joined: String = content.iter().map(|t| t["token"].as_str().unwrap()).collect();
    assert_eq!(joined, chat["text"].as_str().unwrap());
    for t in content {
        assert_eq!(t["top"].as_array().unwrap().len(), 2, "{t}");
        assert!(t["logprob"].as_f64().unwrap() <= 0.0);
        let bytes: Vec<u8> = t["bytes"].as_array().unwrap().iter().map(|b| b.as_u64().unwrap() as u8).collect();
        assert_eq!(bytes, t["token"].as_str().unwrap().as_bytes());
    }
    // echo: the prompt's tokens, the first without a probability, then the one generated.
    let comp = &got["completions"];
    let prompt_ids = server.post("/tokenize", &json!({"prompt": "The capital of France is Paris"})).json()["count"]
        .as_u64()
        .unwrap() as usize;
    let lps = comp["token_logprobs"].as_array().unwrap();
    assert_eq!(lps.len(), prompt_ids + 1, "{comp}");
    assert!(lps[0].is_null() && lps[1..].iter().all(|v| v.as_f64().is_some_and(|x| x <= 0.0)), "{comp}");
    assert!(comp["text"].as_str().unwrap().starts_with("The capital of France is Paris"), "{comp}");
    // " Paris" after "The capital of France is" is the likely continuation.
    let paris = lps[prompt_ids - 1].as_f64().unwrap();
    let seq: Vec<u32> = server.post("/tokenize", &json!({"prompt": "The capital of France is Paris"})).json()["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap() as u32)
        .collect();
    let want = plain_logprob(&seq[..prompt_ids - 1], seq[prompt_ids - 1]);
    assert!((paris - want).abs() < 1e-4, "echo's prompt token: {paris} vs {want}");
}
