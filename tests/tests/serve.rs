//! `runtime serve` driven over HTTP: the real binary on a free loopback
//! port, the default model. Greedy responses must equal what classic
//! `runtime generate` prints for the same prompt, byte for byte, with the
//! same usage counts.

use draftwise_tests::model_path;
use draftwise_tests::serve::{Prompt, Reply, Server, generate_expected, shared, stream_until, wait_for};
use runtime::events::Completion;
use serde_json::{Value, json};
use std::sync::OnceLock;
use std::time::Duration;

fn model() -> String {
    runtime::serve::default_model_id(&model_path())
}

const MAX_TOKENS: usize = 24;

/// Chat and plain prompts, one with multi-byte text (streamed pieces must
/// not split a character).
const PROMPTS: &[Prompt] = &[
    Prompt::Chat("What is the capital of France?"),
    Prompt::Text("Once upon a time"),
    Prompt::Chat("Write a haiku about the sea."),
    Prompt::Text("def fibonacci(n):"),
    Prompt::Text("Le café du coin s'appelle « Chez Zoë » et"),
];

/// `runtime generate`'s completions for [`PROMPTS`], computed once.
fn expected() -> &'static [Completion] {
    static E: OnceLock<Vec<Completion>> = OnceLock::new();
    E.get_or_init(|| {
        let e = generate_expected(PROMPTS, MAX_TOKENS);
        assert_eq!(e.len(), PROMPTS.len());
        e
    })
}

fn usage_of(c: &Completion) -> Value {
    json!({
        "prompt_tokens": c.outcome.usage.prompt_tokens,
        "completion_tokens": c.outcome.usage.completion_tokens,
        "total_tokens": c.outcome.usage.total_tokens,
    })
}

/// The text of a streamed response, checking every chunk's shape.
fn streamed_text(r: &Reply, chat: bool) -> (String, Value, Option<String>) {
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.header("content-type").is_some_and(|c| c.starts_with("text/event-stream")));
    let chunks = r.sse();
    let id = chunks[0]["id"].clone();
    let mut text = String::new();
    let mut usage = Value::Null;
    let mut finish = None;
    for (i, c) in chunks.iter().enumerate() {
        assert_eq!(c["id"], id, "every chunk carries the request's id");
        assert_eq!(c["object"], if chat { "chat.completion.chunk" } else { "text_completion" });
        let choices = c["choices"].as_array().expect("choices");
        if choices.is_empty() {
            // The usage chunk: last, after the finish chunk.
            assert_eq!(i, chunks.len() - 1, "only the last chunk may have no choices");
            usage = c["usage"].clone();
            continue;
        }
        let ch = &choices[0];
        if chat {
            if i == 0 {
                assert_eq!(ch["delta"]["role"], "assistant", "the first chat chunk names the role");
            }
            text.push_str(ch["delta"]["content"].as_str().unwrap_or(""));
        } else {
            text.push_str(ch["text"].as_str().expect("text"));
        }
        if let Some(f) = ch["finish_reason"].as_str() {
            assert!(finish.is_none(), "one finish chunk");
            finish = Some(f.to_string());
        }
    }
    (text, usage, finish)
}

fn response_text(v: &Value, chat: bool) -> String {
    let ch = &v["choices"][0];
    let t = if chat { &ch["message"]["content"] } else { &ch["text"] };
    t.as_str().expect("response text").to_string()
}

#[test]
fn health_models_and_config_describe_the_server() {
    let s = shared();
    let h = s.get("/health");
    assert_eq!(h.status, 200);
    let h = h.json();
    assert_eq!(h["status"], "ok");
    assert_eq!(h["model"], model());
    assert_eq!(h["queue_capacity"], 64);

    let m = s.get("/v1/models").json();
    assert_eq!(m["object"], "list");
    assert_eq!(m["data"][0]["id"], model());
    assert_eq!(m["data"][0]["object"], "model");

    let c = s.get("/v1/draftwise/config").json();
    // No --drafter: the compiled policy decided, and the sentence says which way.
    assert_eq!(c["drafter_from"], "policy");
    let why = c["width_from"].as_str().unwrap();
    match c["drafter"].as_str().unwrap() {
        "none" => {
            assert_eq!(c["width"], Value::Null);
            assert!(why.starts_with("speculation off by the policy (no --drafter): "), "{why}");
        }
        // The compiled table's entry for this host: measured, perhaps
        // re-checked on a later build ("measured, re-checked on this build
        // (...) for ..."), or predicted.
        _ => {
            let rest =
                why.strip_prefix("speculation on by the policy (no --drafter): ").unwrap_or_else(|| panic!("{why}"));
            assert!(rest.starts_with("measured") || rest.starts_with("predicted"), "{why}");
            assert!(rest.contains(" for ngram on "), "{why}");
        }
    }
    assert!(c["device_class"].as_str().unwrap().starts_with("cpu:"));
    assert_eq!(c["kernel_fingerprint"], runtime::policy::KERNEL_FINGERPRINT);
    assert_eq!(c["threads"], 2);
    assert_eq!(c["server"]["address"], s.addr.to_string());
    assert_eq!(c["server"]["model"], model());
    // The startup event on stdout (--json is off here: none).
    assert!(s.stdout_lines().is_empty());
}

#[test]
fn greedy_responses_equal_runtime_generate_with_its_usage() {
    let s = shared();
    for (p, want) in PROMPTS.iter().zip(expected()) {
        let chat = matches!(p, Prompt::Chat(_));
        let r = s.post(p.path(), &p.body(&model(), MAX_TOKENS));
        assert_eq!(r.status, 200, "{}", r.text());
        let v = r.json();
        assert_eq!(response_text(&v, chat), want.text, "{p:?}");
        assert_eq!(v["usage"], usage_of(want), "{p:?}");
        assert_eq!(v["choices"][0]["finish_reason"], want.outcome.finish_reason.as_str());
        assert_eq!(v["object"], if chat { "chat.completion" } else { "text_completion" });
        assert_eq!(v["model"], model());

        let mut body = p.body(&model(), MAX_TOKENS);
        body["stream"] = json!(true);
        body["stream_options"] = json!({"include_usage": true});
        let (text, usage, finish) = streamed_text(&s.post(p.path(), &body), chat);
        assert_eq!(text, want.text, "streamed {p:?}");
        assert_eq!(usage, usage_of(want), "streamed {p:?}");
        assert_eq!(finish.as_deref(), Some(want.outcome.finish_reason.as_str()));

        // Without include_usage there is no usage chunk.
        body["stream_options"] = json!({"include_usage": false});
        let (text, usage, _) = streamed_text(&s.post(p.path(), &body), chat);
        assert_eq!((text.as_str(), &usage), (want.text.as_str(), &Value::Null));
    }
}

#[test]
fn json_events_report_each_served_request() {
    let s = Server::start(&["--json"]);
    let startup: Value = serde_json::from_str(&s.stdout_first(1)[0]).unwrap();
    assert_eq!(startup["event"], "startup");
    assert_eq!(startup["drafter_from"], "policy");
    // The bound address is typed in the event, so a program using --port 0 needs no log text.
    assert_eq!(startup["server"]["address"], s.addr.to_string());
    assert_eq!(startup["server"]["model"], model());
    let p = &PROMPTS[0];
    let v = s.post(p.path(), &p.body(&model(), MAX_TOKENS)).json();
    let c: Value = serde_json::from_str(&s.stdout_first(2)[1]).unwrap();
    assert_eq!(c["event"], "completion");
    assert_eq!(c["prompt_id"], v["id"]);
    assert_eq!(c["usage"], v["usage"]);
    assert_eq!(c["token_ids"], v["draftwise"]["token_ids"]);
    assert_eq!(c["text"], v["choices"][0]["message"]["content"]);
    assert_eq!(c["text"].as_str(), Some(expected()[0].text.as_str()));
}

#[test]
fn a_speculative_server_serves_classic_greedy_text_and_reports_its_width() {
    let s = Server::start(&["--drafter", "ngram", "--draft-width", "3", "--json"]);
    let c = s.get("/v1/draftwise/config").json();
    assert_eq!(c["drafter"], "ngram");
    assert_eq!(c["width"], 3);
    assert!(c["width_from"].as_str().unwrap().contains("--draft-width"), "{c}");
    assert_eq!(c["exactness_probe"]["passed"], true);
    assert!(s.stderr().contains("speculative: drafter ngram (ngram_min 3, ngram_max 4), width 3"), "{}", s.stderr());
    let startup: Value = serde_json::from_str(&s.stdout_first(1)[0]).unwrap();
    assert_eq!((startup["event"].as_str(), startup["width"].as_u64()), (Some("startup"), Some(3)));
    let mut rounds = 0;
    for (p, want) in PROMPTS.iter().zip(expected()) {
        let chat = matches!(p, Prompt::Chat(_));
        let v = s.post(p.path(), &p.body(&model(), MAX_TOKENS)).json();
        assert_eq!(response_text(&v, chat), want.text, "{p:?}");
        assert_eq!(v["usage"], usage_of(want));
        let sp = &v["draftwise"]["speculative"];
        assert_eq!((sp["drafter"].as_str(), sp["width"].as_u64()), (Some("ngram"), Some(3)), "{v}");
        rounds += sp["rounds"].as_u64().unwrap();
        let mut body = p.body(&model(), MAX_TOKENS);
        body["stream"] = json!(true);
        let (text, _, _) = streamed_text(&s.post(p.path(), &body), chat);
        assert_eq!(text, want.text, "streamed {p:?}");
    }
    assert!(rounds > 0, "the ngram drafter never drafted: this is not a test of speculation");
    // A stop string can end a speculative round in the middle.
    let (p, want) = (&PROMPTS[0], &expected()[0]);
    let cut = want.text.find("Paris").expect("the capital answer names Paris");
    let mut body = p.body(&model(), MAX_TOKENS);
    body["stop"] = json!("Paris");
    let v = s.post(p.path(), &body).json();
    assert_eq!(response_text(&v, true), want.text[..cut]);
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
}

#[test]
fn stop_strings_cut_the_text_streamed_or_not() {
    let s = shared();
    let (p, want) = (&PROMPTS[0], &expected()[0]);
    let cut = want.text.find("Paris").expect("the capital answer names Paris");
    let mut body = p.body(&model(), MAX_TOKENS);
    body["stop"] = json!(["Paris", "nowhere to be seen"]);
    let v = s.post(p.path(), &body).json();
    assert_eq!(response_text(&v, true), want.text[..cut]);
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    let n = v["usage"]["completion_tokens"].as_u64().unwrap() as usize;
    assert!(n < want.outcome.usage.completion_tokens, "generation stopped at the stop string");
    body["stream"] = json!(true);
    body["stream_options"] = json!({"include_usage": true});
    let (text, usage, finish) = streamed_text(&s.post(p.path(), &body), true);
    assert_eq!((text.as_str(), finish.as_deref()), (&want.text[..cut], Some("stop")));
    assert_eq!(usage, v["usage"]);
}

#[test]
fn seeded_sampling_repeats_and_differs_from_greedy_settings() {
    let s = shared();
    let body = json!({"model": model(), "prompt": "Once upon a time", "max_tokens": 16, "temperature": 1.0, "seed": 7});
    let a = s.post("/v1/completions", &body).json();
    let b = s.post("/v1/completions", &body).json();
    assert_eq!(a["choices"][0]["text"], b["choices"][0]["text"], "same seed, same text");
    assert_eq!(a["usage"], b["usage"]);
    let mut other = body.clone();
    other["seed"] = json!(8);
    let texts: Vec<Value> = (9..13)
        .map(|seed| {
            other["seed"] = json!(seed);
            s.post("/v1/completions", &other).json()["choices"][0]["text"].clone()
        })
        .collect();
    assert!(texts.iter().any(|t| *t != a["choices"][0]["text"]), "different seeds all drew the same text");
}

// ---- bad input: each case gets a 4xx with an OpenAI error body ----

fn assert_error(r: &Reply, status: u16, param: Option<&str>, code: &str) -> Value {
    assert_eq!(r.status, status, "{}", r.text());
    assert!(r.header("content-type").is_some_and(|c| c.starts_with("application/json")));
    let e = r.error();
    assert_eq!(e["param"].as_str(), param, "{e}");
    assert_eq!(e["code"], code, "{e}");
    e
}

fn chat_body() -> Value {
    json!({"model": model(), "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "temperature": 0})
}

#[test]
fn malformed_json_is_refused() {
    let s = shared();
    for body in [&b"{"[..], b"not json", b"", b"[1, 2]", b"{\"model\": }", &[0xff, 0xfe, b'{']] {
        for path in ["/v1/completions", "/v1/chat/completions"] {
            assert_error(&s.post_raw(path, body), 400, None, "invalid_json");
        }
    }
}

#[test]
fn an_unknown_model_is_refused_naming_the_served_one() {
    let s = shared();
    let mut body = chat_body();
    body["model"] = json!("gpt-4o");
    let e = assert_error(&s.post("/v1/chat/completions", &body), 404, Some("model"), "model_not_found");
    assert!(e["message"].as_str().unwrap().contains(&model()));
}

#[test]
fn missing_fields_are_named() {
    let s = shared();
    let r = s.post("/v1/chat/completions", &json!({"messages": [{"role": "user", "content": "hi"}]}));
    assert_error(&r, 400, Some("model"), "missing_required_parameter");
    let r = s.post("/v1/chat/completions", &json!({"model": model()}));
    assert_error(&r, 400, Some("messages"), "missing_required_parameter");
    let r = s.post("/v1/completions", &json!({"model": model(), "max_tokens": 2}));
    assert_error(&r, 400, Some("prompt"), "missing_required_parameter");
    let r = s.post("/v1/chat/completions", &json!({"model": model(), "messages": [{"role": "user"}]}));
    assert_error(&r, 400, Some("messages[0].content"), "missing_required_parameter");
    let r = s.post("/v1/chat/completions", &json!({"model": model(), "messages": []}));
    assert_error(&r, 400, Some("messages"), "invalid_value");
}

#[test]
fn a_prompt_longer_than_the_context_is_refused() {
    let s = shared();
    let long = "hello ".repeat(9000);
    let r = s.post("/v1/completions", &json!({"model": model(), "prompt": long, "max_tokens": 1}));
    let e = assert_error(&r, 400, Some("prompt"), "context_length_exceeded");
    assert!(e["message"].as_str().unwrap().contains("8192"), "{e}");
    let r = s.post("/v1/chat/completions", &json!({"model": model(), "messages": [{"role": "user", "content": long}]}));
    assert_error(&r, 400, Some("messages"), "context_length_exceeded");
}

#[test]
fn max_tokens_out_of_range_is_refused() {
    let s = shared();
    for (bad, code) in [
        (json!(0), "invalid_value"),
        (json!(-1), "invalid_type"),
        (json!(1.5), "invalid_type"),
        (json!("8"), "invalid_type"),
    ] {
        let mut body = chat_body();
        body["max_tokens"] = bad;
        assert_error(&s.post("/v1/chat/completions", &body), 400, Some("max_tokens"), code);
    }
    // More than the context has room for after the prompt.
    let mut body = chat_body();
    body["max_tokens"] = json!(8192);
    assert_error(&s.post("/v1/chat/completions", &body), 400, Some("max_tokens"), "context_length_exceeded");
    let r = s.post("/v1/completions", &json!({"model": model(), "prompt": "x", "max_tokens": u64::MAX}));
    assert_error(&r, 400, Some("max_tokens"), "context_length_exceeded");
    let mut body = chat_body();
    body.as_object_mut().unwrap().remove("max_tokens");
    body["max_completion_tokens"] = json!(0);
    assert_error(&s.post("/v1/chat/completions", &body), 400, Some("max_completion_tokens"), "invalid_value");
}

#[test]
fn a_body_over_the_size_limit_is_refused() {
    let s = Server::start(&["--max-body-bytes", "4096"]);
    // Declared too long: refused from the header alone.
    let mut body = chat_body();
    body["messages"][0]["content"] = json!("x".repeat(8000));
    let r = s.post("/v1/chat/completions", &body);
    let e = assert_error(&r, 413, None, "request_too_large");
    assert!(e["message"].as_str().unwrap().contains("4096"));
    // No length declared (chunked): refused while reading.
    let payload = body.to_string();
    let mut raw = String::from(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n",
    );
    for piece in payload.as_bytes().chunks(1000) {
        raw.push_str(&format!("{:x}\r\n{}\r\n", piece.len(), std::str::from_utf8(piece).unwrap()));
    }
    raw.push_str("0\r\n\r\n");
    let mut conn = std::net::TcpStream::connect(s.addr).unwrap();
    std::io::Write::write_all(&mut conn, raw.as_bytes()).unwrap();
    let mut got = Vec::new();
    let _ = std::io::Read::read_to_end(&mut conn, &mut got);
    let r = draftwise_tests::serve::parse_response(&got).expect("a response before the connection closed");
    assert_error(&r, 413, None, "request_too_large");
    // Under the limit is fine.
    assert_eq!(s.post("/v1/chat/completions", &chat_body()).status, 200);
}

#[test]
fn unsupported_parameters_are_named() {
    let s = shared();
    for (name, value) in [
        ("n", json!(2)),
        ("top_logprobs", json!(25)),
        ("tools", json!([{"type": "function", "function": {"name": "f"}}])),
        ("response_format", json!({"type": "json_object"})),
        ("presence_penalty", json!(2.5)),                   // out of OpenAI's -2..=2
        ("stream_options", json!({"include_usage": true})), // without stream
    ] {
        let mut body = chat_body();
        body[name] = value;
        let r = s.post("/v1/chat/completions", &body);
        assert_eq!(r.status, 400, "{name}: {}", r.text());
        let e = r.error();
        assert_eq!(e["param"], name, "{e}");
        assert!(e["message"].as_str().unwrap().contains(name), "{e}");
    }
    let r = s.post("/v1/completions", &json!({"model": model(), "prompt": ["a", "b"], "max_tokens": 1}));
    assert_error(&r, 400, Some("prompt"), "unsupported_parameter");
    // Neutral values of the same parameters are accepted.
    let mut body = chat_body();
    body["n"] = json!(1);
    body["logprobs"] = json!(false);
    body["user"] = json!("someone");
    assert_eq!(s.post("/v1/chat/completions", &body).status, 200);
    // A field this server does not know is ignored (vLLM's and llama-server's
    // behaviour; `--strict-params` refuses it: serve_openai.rs).
    let mut body = chat_body();
    body["frobnicate"] = json!(1);
    assert_eq!(s.post("/v1/chat/completions", &body).status, 200);
}

#[test]
fn unknown_paths_and_methods_get_error_bodies() {
    let s = shared();
    assert_error(&s.get("/v1/nothing"), 404, None, "not_found");
    assert_error(&s.get("/v1/completions"), 405, None, "method_not_allowed");
}

#[test]
fn bad_input_never_disturbs_a_running_request() {
    let s = shared();
    let addr = s.addr;
    let (p, want) = (PROMPTS[1].clone(), expected()[1].clone());
    let runner = std::thread::spawn(move || {
        let mut body = p.body(&model(), MAX_TOKENS);
        body["stream"] = json!(true);
        let r = draftwise_tests::serve::request(
            addr,
            "POST",
            p.path(),
            &[("Content-Type", "application/json")],
            Some(body.to_string().as_bytes()),
        );
        streamed_text(&r, false).0
    });
    let failed_before = s.counter("failed");
    for _ in 0..3 {
        assert_eq!(s.post_raw("/v1/completions", b"{").status, 400);
        assert_eq!(s.post("/v1/completions", &json!({"model": "nope", "prompt": "x"})).status, 404);
        let long = "hello ".repeat(9000);
        assert_eq!(s.post("/v1/completions", &json!({"model": model(), "prompt": long})).status, 400);
        assert_eq!(s.post("/v1/completions", &json!({"model": model(), "prompt": "x", "n": 3})).status, 400);
    }
    assert_eq!(runner.join().unwrap(), want.text);
    assert_eq!(s.counter("failed"), failed_before);
}

// ---- queueing, cancellation, shutdown ----

/// A request that runs far longer than any test waits: greedy decoding of
/// this prompt goes past 1200 tokens without an end-of-generation token
/// (measured with `runtime generate --max-tokens 1200`: finish `length`).
fn long_request(stream: bool) -> Value {
    json!({"model": model(), "prompt": "Write a very long story.", "max_tokens": 4000, "temperature": 0,
           "stream": stream})
}

/// A connection that has sent a long non-streaming completion request and
/// not read its answer (dropping it hangs up).
fn send_long_completion(addr: std::net::SocketAddr) -> std::net::TcpStream {
    let mut conn = std::net::TcpStream::connect(addr).unwrap();
    let body = long_request(false).to_string();
    let bytes = draftwise_tests::serve::request_bytes(
        "POST",
        "/v1/completions",
        &[("Content-Type", "application/json")],
        Some(body.as_bytes()),
    );
    std::io::Write::write_all(&mut conn, &bytes).unwrap();
    conn
}

#[test]
fn a_full_queue_is_refused_with_503_and_recovers() {
    // One slot (--parallel 1), so B waits behind A rather than joining its batch.
    let s = Server::start(&["--max-queue", "1", "--parallel", "1"]);
    // A runs, B waits, C finds the queue full.
    let (a, _) = stream_until(s.addr, "/v1/completions", &long_request(true), "data:", Duration::from_secs(60));
    let b = send_long_completion(s.addr);
    wait_for(Duration::from_secs(30), "B to wait in the queue", || s.get("/health").json()["waiting"] == 1);
    let r = s.post("/v1/completions", &json!({"model": model(), "prompt": "x", "max_tokens": 1}));
    let e = assert_error(&r, 503, None, "queue_full");
    assert_eq!(e["type"], "server_error");
    assert_eq!(r.header("retry-after"), Some("1"));
    assert_eq!(s.counter("rejected"), 1);
    // Both leave: A is cancelled while running, B is skipped when its turn comes.
    drop(b);
    drop(a);
    wait_for(Duration::from_secs(30), "both cancellations", || s.counter("cancelled") == 2);
    let v = s.post("/v1/completions", &json!({"model": model(), "prompt": "x", "max_tokens": 1})).json();
    assert_eq!(v["usage"]["completion_tokens"], 1);
    assert_eq!(s.counter("completed"), 1);
}

#[test]
fn a_client_that_disconnects_cancels_its_generation() {
    let s = Server::start(&[]);
    // Streaming: hang up after the first chunk.
    let (conn, _) = stream_until(s.addr, "/v1/completions", &long_request(true), "data:", Duration::from_secs(60));
    drop(conn);
    wait_for(Duration::from_secs(10), "the streamed generation to be cancelled", || s.counter("cancelled") == 1);
    assert_eq!(s.get("/health").json()["running"], false);
    // Not streaming: hang up while it runs.
    let conn = send_long_completion(s.addr);
    wait_for(Duration::from_secs(30), "the request to run", || s.get("/health").json()["running"] == true);
    drop(conn);
    wait_for(Duration::from_secs(10), "the blocking generation to be cancelled", || s.counter("cancelled") == 2);
    assert_eq!(s.get("/health").json()["running"], false);
    // The engine is free again at once.
    let t0 = std::time::Instant::now();
    let v = s.post("/v1/completions", &json!({"model": model(), "prompt": "x", "max_tokens": 2})).json();
    assert_eq!(v["usage"]["completion_tokens"], 2);
    assert!(t0.elapsed() < Duration::from_secs(20));
    assert_eq!((s.counter("completed"), s.counter("failed")), (1, 0));
}

#[test]
fn a_port_in_use_and_a_host_name_are_refused_with_the_flag_to_fix() {
    let s = shared();
    let refuse = |args: &[&str]| {
        let out = draftwise_tests::run(
            std::process::Command::new(draftwise_tests::bin("runtime"))
                .arg("serve")
                .arg("--model")
                .arg(model_path())
                .args(args)
                .env("DRAFTWISE_LOG", "warn"),
        );
        assert!(!out.status.success(), "{args:?} was accepted");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let port = s.addr.port().to_string();
    assert!(refuse(&["--port", &port]).contains("--port"));
    assert!(refuse(&["--host", "localhost", "--port", "0"]).contains("--host \"localhost\": give an IP address"));
    assert!(refuse(&["--port", "0", "--max-queue", "0"]).contains("--max-queue"));
    // The batching flags are bounded too, each refusal naming its flag and range.
    for (flag, bad, range) in [
        ("--parallel", "0", "give 1 to 256"),
        ("--parallel", "257", "give 1 to 256"),
        ("--prefill-chunk", "0", "--prefill-chunk"),
        ("--prefill-chunk", "100000000", "--prefill-chunk"),
        ("--kv-budget-mb", "0", "--kv-budget-mb"),
        ("--kv-budget-mb", "2000000000", "--kv-budget-mb"),
    ] {
        let e = refuse(&["--port", "0", flag, bad]);
        assert!(e.contains(flag) && e.contains(range), "{flag} {bad}: {e}");
    }
}

#[test]
fn sigterm_stops_the_server_cleanly() {
    let s = Server::start(&[]);
    assert_eq!(s.post("/v1/chat/completions", &chat_body()).status, 200);
    let addr = s.addr;
    let (status, stderr) = s.terminate(Duration::from_secs(15));
    assert!(status.success(), "exit status {status}: {stderr}");
    assert!(stderr.contains("SIGTERM: shutting down"), "{stderr}");
    assert!(stderr.contains("stopped (1 completed, 0 cancelled, 0 failed"), "{stderr}");
    assert!(std::net::TcpStream::connect(addr).is_err(), "the port is released");
}

#[test]
fn sigterm_cancels_a_long_request_after_the_grace_period() {
    let s = Server::start(&[]);
    let (mut conn, _) = stream_until(s.addr, "/v1/completions", &long_request(true), "data:", Duration::from_secs(60));
    let reader = std::thread::spawn(move || {
        conn.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        let mut rest = Vec::new();
        let _ = std::io::Read::read_to_end(&mut conn, &mut rest);
        String::from_utf8_lossy(&rest).into_owned()
    });
    let t0 = std::time::Instant::now();
    let (status, stderr) = s.terminate(Duration::from_secs(30));
    assert!(status.success(), "exit status {status}: {stderr}");
    let grace = runtime::serve::SHUTDOWN_GRACE;
    assert!(t0.elapsed() >= grace, "the running request got its grace period");
    assert!(stderr.contains("cancelling them"), "{stderr}");
    // The client is told, and the stream is terminated properly.
    let rest = reader.join().unwrap();
    assert!(rest.contains("shutting_down") && rest.contains("data: [DONE]"), "{rest}");
}
