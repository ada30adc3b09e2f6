//! `runtime serve` for llama-server's clients: its native `POST
//! /completion` in its shape (greedy text equal to `/v1/completions`'),
//! its streaming form (pieces, then the final object, no `[DONE]`), a
//! sampling control this server lacks refused by name, penalties in
//! llama-server's spelling run (the same tokens from a speculating server
//! as from a classic one), and a 404 that names the routes there are.

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
    // A sampler this server lacks: 400 naming it, not a silent drop; a
    // penalty out of its range likewise.
    let e = server.post("/completion", &json!({"prompt": prompt, "mirostat": 2}));
    assert_eq!((e.status, e.error()["param"].as_str()), (400, Some("mirostat")), "{}", e.text());
    let e = server.post("/completion", &json!({"prompt": prompt, "repeat_penalty": 0}));
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

/// Penalties and min-p in llama-server's spelling on `/completion` and on
/// `/v1/completions` (a llama.cpp name there asks for llama.cpp's window
/// too, so both routes give the same text); they change the greedy text of
/// a repetitive prompt, `generation_settings` echoes them, and a
/// speculating server answers with the same text as a classic one.
#[test]
fn penalties_run_in_llama_servers_spelling_and_speculation_keeps_the_text() {
    let classic = Server::start(&["--drafter", "none"]);
    let spec = Server::start(&["--drafter", "ngram", "--draft-width", "4", "--ngram-min", "1"]);
    let prompt = "one two three, one two three, one two three, one two three, one two";
    let plain = classic.post("/completion", &json!({"prompt": prompt, "n_predict": 24, "temperature": 0})).json();
    for penalties in [
        json!({"repeat_penalty": 1.3, "frequency_penalty": 0.2, "min_p": 0.05}),
        json!({"repeat_penalty": 1.1, "presence_penalty": 0.5, "repeat_last_n": -1}),
        json!({"frequency_penalty": 0.2, "repeat_last_n": 256}),
    ] {
        let mut b = json!({"prompt": prompt, "n_predict": 24, "temperature": 0});
        b.as_object_mut().unwrap().extend(penalties.as_object().unwrap().clone());
        let l = classic.post("/completion", &b).json();
        assert_ne!(l["content"], plain["content"], "{penalties}: the penalties changed nothing");
        let g = &l["generation_settings"];
        for (k, v) in penalties.as_object().unwrap() {
            // f32 settings, echoed as llama-server does (0.2 reads 0.20000000298...).
            assert!((g[k].as_f64().unwrap() - v.as_f64().unwrap()).abs() < 1e-6, "{k}: {g}");
        }
        let s = spec.post("/completion", &b).json();
        assert_eq!(s["content"], l["content"], "{penalties}: speculating server differs");
        assert!(!s["draftwise"]["speculative"].is_null(), "not speculative: {s}");
        let mut o = b.clone();
        o["model"] = json!(model());
        o["max_tokens"] = json!(24);
        o.as_object_mut().unwrap().remove("n_predict");
        let o = spec.post("/v1/completions", &o).json();
        assert_eq!(o["choices"][0]["text"], l["content"], "{penalties}: /v1/completions differs: {o}");
    }
}
