//! `runtime serve` for llama-server's clients: its native `POST
//! /completion` in its shape (greedy text equal to `/v1/completions`'),
//! its streaming form (pieces, then the final object, no `[DONE]`), a
//! sampling control this server lacks refused by name, and a 404 that
//! names the routes there are.

use draftwise_tests::serve::Server;
use serde_json::{Value, json};

fn model() -> String {
    runtime::serve::default_model_id(&draftwise_tests::model_path())
}

#[test]
fn llama_servers_completion_endpoint_answers_in_its_shape() {
    let server = Server::start(&["--drafter", "none"]);
    let prompt = "The capital of France is";
    let r = server.post("/completion", &json!({"prompt": prompt, "n_predict": 12, "temperature": 0}));
    assert_eq!(r.status, 200, "{}", r.text());
    let l = r.json();
    let o = server
        .post("/v1/completions", &json!({"model": model(), "prompt": prompt, "max_tokens": 12, "temperature": 0}))
        .json();
    assert_eq!(l["content"], o["choices"][0]["text"], "{l} / {o}");
    assert_eq!(l["stop"], true);
    assert_eq!(l["tokens_predicted"], o["usage"]["completion_tokens"]);
    assert_eq!(l["tokens_evaluated"], o["usage"]["prompt_tokens"]);
    assert_eq!(l["stop_type"], if o["choices"][0]["finish_reason"] == "length" { "limit" } else { "eos" });
    assert_eq!(l["timings"]["predicted_n"], l["tokens_predicted"]);
    assert_eq!(l["model"], model());
    assert_eq!(l["generation_settings"]["n_predict"], 12);
    // A stop string ends it, and is named.
    let text = l["content"].as_str().unwrap().to_string();
    let word: String = text.trim_start().chars().take(3).collect();
    let s = server.post("/completion", &json!({"prompt": prompt, "n_predict": 12, "temperature": 0, "stop": [word]}));
    let s = s.json();
    assert_eq!((s["stop_type"].as_str(), s["stopping_word"].as_str()), (Some("word"), Some(word.as_str())), "{s}");
    assert!(text.starts_with(s["content"].as_str().unwrap()), "{s}");
    // Streamed: pieces with `stop: false`, then the final object; no [DONE].
    let st = server.post("/completion", &json!({"prompt": prompt, "n_predict": 12, "temperature": 0, "stream": true}));
    assert_eq!(st.status, 200, "{}", st.text());
    let events: Vec<Value> = st
        .text()
        .split("\n\n")
        .filter(|e| !e.trim().is_empty())
        .map(|e| serde_json::from_str(e.strip_prefix("data: ").expect("a data event")).expect("JSON"))
        .collect();
    let (last, pieces) = events.split_last().expect("events");
    assert_eq!(last["stop"], true, "{last}");
    assert!(pieces.iter().all(|p| p["stop"] == false));
    let streamed: String = pieces.iter().map(|p| p["content"].as_str().unwrap()).collect();
    assert_eq!(streamed, text);
    assert_eq!(last["tokens_predicted"], l["tokens_predicted"]);
    // A penalty this server lacks: 400 naming it, not a silent drop.
    let e = server.post("/completion", &json!({"prompt": prompt, "repeat_penalty": 1.1}));
    assert_eq!((e.status, e.error()["param"].as_str()), (400, Some("repeat_penalty")), "{}", e.text());
    // The OpenAI route without `model` says where a request without one goes.
    let e = server.post("/v1/completions", &json!({"prompt": prompt}));
    assert_eq!(e.status, 400);
    assert!(e.error()["message"].as_str().unwrap().contains("POST /completion"), "{}", e.text());
    // An unknown path: the 404 names the routes.
    let e = server.get("/completions/nope");
    assert_eq!(e.status, 404);
    let m = e.error()["message"].as_str().unwrap().to_string();
    for route in ["POST /v1/chat/completions", "POST /completion", "GET /v1/models"] {
        assert!(m.contains(route), "{m}");
    }
}
