//! `runtime serve` for clients and operators used to vLLM and llama-server:
//! `/tokenize` and `/detokenize`, `/version`, `X-Request-Id`, CORS for
//! `--allowed-origins`, and one access line per request, refusals included.
//! (Unknown request fields and `--strict-params` are driven through the
//! official `openai` client in serve_openai.rs.)

use draftwise_tests::serve::{Server, request, wait_for};
use serde_json::json;
use std::time::Duration;

fn model() -> String {
    runtime::serve::default_model_id(&draftwise_tests::model_path())
}

#[test]
fn tokenize_counts_what_a_completion_runs_and_detokenize_round_trips() {
    let server = Server::start(&[]);
    let text = "Once upon a time, in a café far away";
    let t = server.post("/tokenize", &json!({"model": model(), "prompt": text}));
    assert_eq!(t.status, 200, "{}", t.text());
    let t = t.json();
    let ids = t["tokens"].as_array().unwrap().clone();
    assert_eq!(t["count"].as_u64(), Some(ids.len() as u64));
    assert!(t["max_model_len"].as_u64().unwrap() > 0);
    // The count is the completion's usage.prompt_tokens.
    let c = server.post("/v1/completions", &json!({"model": model(), "prompt": text, "max_tokens": 1}));
    assert_eq!(c.json()["usage"]["prompt_tokens"].as_u64(), Some(ids.len() as u64), "{}", c.text());
    // Chat messages count as the chat endpoint runs them.
    let msgs = json!([{"role": "user", "content": "What is the capital of France?"}]);
    let t = server.post("/tokenize", &json!({"messages": msgs}));
    let c = server.post("/v1/chat/completions", &json!({"model": model(), "messages": msgs, "max_tokens": 1}));
    assert_eq!(t.json()["count"], c.json()["usage"]["prompt_tokens"], "{} / {}", t.text(), c.text());
    // llama-server's spelling, without special tokens: detokenize gives the text back.
    let t = server.post("/tokenize", &json!({"content": text, "add_special_tokens": false})).json();
    let d = server.post("/detokenize", &json!({"tokens": t["tokens"]}));
    assert_eq!(d.status, 200, "{}", d.text());
    assert_eq!(d.json()["prompt"], text);
    assert_eq!(d.json()["content"], text);
    // Bad input gets OpenAI-shaped 400s naming the field.
    let e = server.post("/detokenize", &json!({"tokens": [1, 99_999_999]}));
    assert_eq!((e.status, e.error()["param"].as_str()), (400, Some("tokens")), "{}", e.text());
    let e = server.post("/tokenize", &json!({"prompt": "a", "messages": msgs}));
    assert_eq!(e.status, 400, "{}", e.text());
    let e = server.post("/tokenize", &json!({"model": "other", "prompt": "a"}));
    assert_eq!(e.status, 404, "{}", e.text());
    // A text past the context is refused, not counted.
    let e = server.post("/tokenize", &json!({"prompt": "word ".repeat(9000)}));
    assert_eq!((e.status, e.error()["code"].as_str()), (400, Some("context_length_exceeded")), "{}", e.text());
    let e = server.post("/tokenize", &json!({"prompt": "word ".repeat(9000), "add_special_tokens": false}));
    assert_eq!((e.status, e.error()["code"].as_str()), (400, Some("context_length_exceeded")), "{}", e.text());
    // /version is this build's.
    let v = server.get("/version");
    assert_eq!(v.status, 200);
    assert_eq!(v.json()["version"], env!("CARGO_PKG_VERSION"));
    assert!(v.json()["build"]["git_commit"].is_string(), "{}", v.text());
}

#[test]
fn every_request_has_an_id_echoed_and_an_access_line_refusals_included() {
    let server = Server::start_logging(&["--api-key", "k"], "info");
    let auth = ("Authorization", "Bearer k");
    // The client's id is echoed; a request without one gets one made here.
    let r = request(server.addr, "GET", "/v1/models", &[auth, ("X-Request-Id", "client-id-1")], None);
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-request-id"), Some("client-id-1"));
    let r = request(server.addr, "GET", "/v1/models", &[auth], None);
    let made = r.header("x-request-id").expect("an id is made").to_string();
    assert!(made.starts_with("req-"), "{made}");
    // An unusable id (spaces, too long) is replaced.
    let long = "x".repeat(200);
    let r = request(server.addr, "GET", "/v1/models", &[auth, ("X-Request-Id", long.as_str())], None);
    assert!(r.header("x-request-id").unwrap().starts_with("req-"));
    // Refusals: no key (401), a bad body (400), an unknown path (404).
    let r = request(server.addr, "GET", "/v1/models", &[("X-Request-Id", "refused-401")], None);
    assert_eq!((r.status, r.header("x-request-id")), (401, Some("refused-401")));
    let body = br#"{"model": 1}"#;
    let r = request(server.addr, "POST", "/v1/completions", &[auth, ("X-Request-Id", "refused-400")], Some(body));
    assert_eq!(r.status, 400);
    let r = request(server.addr, "GET", "/nowhere", &[auth, ("X-Request-Id", "refused-404")], None);
    assert_eq!(r.status, 404);
    wait_for(Duration::from_secs(10), "the access lines", || server.stderr().contains("refused-404"));
    let log = server.stderr();
    for (id, status, path) in [
        ("client-id-1", 200, "/v1/models"),
        (made.as_str(), 200, "/v1/models"),
        ("refused-401", 401, "/v1/models"),
        ("refused-400", 400, "/v1/completions"),
        ("refused-404", 404, "/nowhere"),
    ] {
        let line = log
            .lines()
            .find(|l| l.contains(&format!("request_id={id} ")))
            .unwrap_or_else(|| panic!("no access line for {id}:\n{log}"));
        assert!(line.contains(&format!("status={status}")), "{line}");
        assert!(line.contains(&format!("path={path}")), "{line}");
        assert!(line.contains("client=127.0.0.1"), "{line}");
    }
}

#[test]
fn cors_answers_allowed_origins_only_and_preflights_before_the_key() {
    let server = Server::start(&["--allowed-origins", "http://localhost:3000", "--api-key", "k"]);
    let preflight = |origin: &str| {
        request(
            server.addr,
            "OPTIONS",
            "/v1/chat/completions",
            &[
                ("Origin", origin),
                ("Access-Control-Request-Method", "POST"),
                ("Access-Control-Request-Headers", "authorization, content-type"),
            ],
            None,
        )
    };
    // A browser's preflight carries no key; an allowed origin gets 204 and the headers.
    let r = preflight("http://localhost:3000");
    assert_eq!(r.status, 204, "{:?}", r.headers);
    assert_eq!(r.header("access-control-allow-origin"), Some("http://localhost:3000"));
    assert!(r.header("access-control-allow-methods").unwrap().contains("POST"));
    assert!(r.header("access-control-allow-headers").unwrap().contains("authorization"));
    // Another origin gets no CORS headers (the browser's refusal); its
    // preflight falls through to the key check.
    let r = preflight("http://evil.example");
    assert!(r.header("access-control-allow-origin").is_none(), "{:?}", r.headers);
    assert_eq!(r.status, 401);
    // The real request from the allowed origin carries the header too.
    let r = request(
        server.addr,
        "GET",
        "/v1/models",
        &[("Origin", "http://localhost:3000"), ("Authorization", "Bearer k")],
        None,
    );
    assert_eq!(r.status, 200);
    assert_eq!(r.header("access-control-allow-origin"), Some("http://localhost:3000"));
    // Without --allowed-origins nothing is added.
    drop(server);
    let plain = Server::start(&[]);
    let r = request(plain.addr, "GET", "/v1/models", &[("Origin", "http://localhost:3000")], None);
    assert!(r.header("access-control-allow-origin").is_none());
}
