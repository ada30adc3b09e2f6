//! A load generator that speaks exactly as vLLM's serving benchmark client
//! does, against a real `runtime serve` with `--api-key`.
//!
//! The bodies and headers mirror vllm-project/vllm
//! `benchmarks/backend_request_func.py` (commit e7dffa683de5):
//! `async_request_openai_completions` posts `{"model", "prompt",
//! "temperature": 0.0, "repetition_penalty": 1.0, "max_tokens", "logprobs":
//! null, "stream": true, "stream_options": {"include_usage": true}}` (plus
//! `"ignore_eos": true` when asked) with `Authorization: Bearer
//! $OPENAI_API_KEY`; `async_request_openai_chat_completions` posts
//! `{"model", "messages": [{"role": "user", "content": [{"type": "text",
//! "text"}]}], "temperature": 0.0, "max_completion_tokens", "stream": true,
//! "stream_options": {"include_usage": true}}` (plus `ignore_eos`) with
//! `Content-Type: application/json` and the same header. Responses are read
//! the way that client reads them: `data: ` lines, the first chunk with
//! `choices` marks the time to first token, the text is `choices[0].text`
//! (or `delta.content`), a chunk with `usage` and no choices gives
//! `completion_tokens`, and `[DONE]` ends it.

use draftwise_tests::serve::{Server, try_request};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

const MODEL: &str = "SmolLM2-135M-Instruct.Q4_1";
const KEY: &str = "bench-key-123";

/// What the vLLM client records per request.
#[derive(Debug)]
struct Output {
    ttft: Duration,
    text: String,
    output_tokens: u64,
    chunks: usize,
}

fn completions_body(prompt: &str, max_tokens: u64, ignore_eos: bool) -> Value {
    let mut b = json!({
        "model": MODEL, "prompt": prompt, "temperature": 0.0, "repetition_penalty": 1.0,
        "max_tokens": max_tokens, "logprobs": null, "stream": true, "stream_options": {"include_usage": true},
    });
    if ignore_eos {
        b["ignore_eos"] = json!(true);
    }
    b
}

fn chat_body(prompt: &str, max_tokens: u64, ignore_eos: bool) -> Value {
    let mut b = json!({
        "model": MODEL,
        "messages": [{"role": "user", "content": [{"type": "text", "text": prompt}]}],
        "temperature": 0.0, "max_completion_tokens": max_tokens, "stream": true,
        "stream_options": {"include_usage": true},
    });
    if ignore_eos {
        b["ignore_eos"] = json!(true);
    }
    b
}

/// One request as the vLLM client sends and reads it.
fn send(s: &Server, chat: bool, body: &Value, key: &str) -> Result<Output, (u16, String)> {
    let path = if chat { "/v1/chat/completions" } else { "/v1/completions" };
    let auth = format!("Bearer {key}");
    // The chat client sets the content type; for completions aiohttp's `json=` does.
    let headers = [("Content-Type", "application/json"), ("Authorization", auth.as_str())];
    let t0 = Instant::now();
    let r = try_request(s.addr, "POST", path, &headers, Some(body.to_string().as_bytes())).expect("an answer");
    if r.status != 200 {
        return Err((r.status, r.text()));
    }
    let mut out = Output { ttft: Duration::ZERO, text: String::new(), output_tokens: 0, chunks: 0 };
    let mut first = false;
    let mut done = false;
    for line in r.text().lines() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let chunk = line.strip_prefix("data: ").unwrap_or(line);
        if chunk == "[DONE]" {
            done = true;
            continue;
        }
        let data: Value = serde_json::from_str(chunk).unwrap_or_else(|e| panic!("bad chunk {chunk}: {e}"));
        if let Some(choices) = data["choices"].as_array().filter(|c| !c.is_empty()) {
            if !first {
                first = true;
                out.ttft = t0.elapsed();
            }
            out.chunks += 1;
            let piece = if chat { &choices[0]["delta"]["content"] } else { &choices[0]["text"] };
            out.text.push_str(piece.as_str().unwrap_or(""));
        } else if let Some(u) = data.get("usage").filter(|u| u.is_object()) {
            out.output_tokens = u["completion_tokens"].as_u64().expect("completion_tokens");
        }
    }
    if std::env::var_os("SHOW").is_some() {
        eprintln!("RAW {}", r.text());
    }
    assert!(first && done, "vLLM marks a response without a chunk or [DONE] failed: {}", r.text());
    Ok(out)
}

fn server() -> Server {
    Server::start(&["--api-key", KEY])
}

/// Walks every route the router is built from (`runtime::serve::routes::
/// endpoints`), and a path it does not know, with GET and POST: without the
/// key, or with a wrong one, each answers 401 `invalid_api_key` before any
/// body is read, except the public `/health` and `/metrics`; with the key,
/// the config is readable. Returns how many requests were refused 401.
fn walk_the_router_without_the_key(s: &Server) -> u64 {
    use runtime::serve::routes::{PUBLIC_PATHS, endpoints};
    let paths: Vec<&str> = endpoints().into_iter().map(|(p, _)| p).chain(["/no/such/path"]).collect();
    assert!(paths.contains(&"/v1/draftwise/config"), "{paths:?}");
    let mut refused = 0;
    for path in &paths {
        for method in ["GET", "POST"] {
            for auth in [None, Some("Bearer wrong-key"), Some("bench-key-12")] {
                let headers: Vec<(&str, &str)> = auth.map(|a| ("Authorization", a)).into_iter().collect();
                let body: &[u8] = b"{}";
                let r = try_request(s.addr, method, path, &headers, (method == "POST").then_some(body))
                    .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
                if PUBLIC_PATHS.contains(path) {
                    let want = if method == "GET" { 200 } else { 405 };
                    assert_eq!(r.status, want, "{method} {path} ({auth:?}) is public: {}", r.text());
                } else {
                    assert_eq!(r.status, 401, "{method} {path} ({auth:?}) without the key: {}", r.text());
                    assert!(r.text().contains("invalid_api_key"), "{method} {path}: {}", r.text());
                    refused += 1;
                }
            }
        }
    }
    let auth = format!("Bearer {KEY}");
    let r = try_request(s.addr, "GET", "/v1/draftwise/config", &[("Authorization", &auth)], None).unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    let r = try_request(s.addr, "GET", "/no/such/path", &[("Authorization", &auth)], None).unwrap();
    assert_eq!(r.status, 404, "{}", r.text());
    refused
}

#[test]
fn the_vllm_benchmark_client_works_unmodified_with_and_without_ignore_eos() {
    let s = server();
    // Without the key, or with vLLM's default "Bearer None", requests are refused 401.
    let e = send(&s, false, &completions_body("Hi", 4, false), "None").unwrap_err();
    assert_eq!(e.0, 401, "{}", e.1);
    assert!(e.1.contains("invalid_api_key"), "{}", e.1);
    // /health and /metrics stay open; every other route, known or not, is behind the key.
    assert_eq!(try_request(s.addr, "GET", "/health", &[], None).unwrap().status, 200);
    assert_eq!(try_request(s.addr, "GET", "/metrics", &[], None).unwrap().status, 200);
    let refused = 1 + walk_the_router_without_the_key(&s);

    // A prompt the model answers briefly: without ignore_eos it stops before the budget.
    let question = "What is 2 + 2? Answer with a single number.";
    let budget = 48;
    let short = send(&s, true, &chat_body(question, budget, false), KEY).unwrap();
    assert!(short.output_tokens < budget, "the model should stop early: {short:?}");
    // With ignore_eos the output length is exactly the budget, on both endpoints.
    let fixed = send(&s, true, &chat_body(question, budget, true), KEY).unwrap();
    assert_eq!(fixed.output_tokens, budget, "{fixed:?}");
    assert!(fixed.text.starts_with(&short.text), "ignore_eos only extends the text: {fixed:?} vs {short:?}");
    let c = send(&s, false, &completions_body("The capital of France is", 24, true), KEY).unwrap();
    assert_eq!(c.output_tokens, 24, "{c:?}");

    // Load: 4 clients at once, 5 requests each, alternating endpoints and ignore_eos.
    let t0 = Instant::now();
    let s = std::sync::Arc::new(s);
    let clients: Vec<_> = (0..4)
        .map(|c| {
            let s = s.clone();
            std::thread::spawn(move || {
                (0..5)
                    .map(|i| {
                        let (chat, ignore) = ((c + i) % 2 == 0, i % 2 == 1);
                        let prompt = format!("Write one sentence about the number {}.", c * 10 + i);
                        let body =
                            if chat { chat_body(&prompt, 12, ignore) } else { completions_body(&prompt, 12, ignore) };
                        let out = send(&s, chat, &body, KEY).unwrap_or_else(|e| panic!("request failed: {e:?}"));
                        // The model may end at once (an end-of-generation token first): 0 tokens.
                        assert!(out.output_tokens <= 12, "{out:?} {body}");
                        if ignore {
                            assert_eq!(out.output_tokens, 12, "{out:?}");
                        }
                        out.ttft
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let ttfts: Vec<Duration> = clients.into_iter().flat_map(|c| c.join().unwrap()).collect();
    eprintln!("20 vLLM-style requests from 4 clients in {:?}; slowest TTFT {:?}", t0.elapsed(), ttfts.iter().max());
    let m = try_request(s.addr, "GET", "/metrics", &[], None).unwrap().text();
    assert!(m.contains(&format!("draftwise_requests_total{{outcome=\"unauthorized\"}} {refused}\n")), "{m}");
}
