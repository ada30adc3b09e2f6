//! `runtime serve --parallel`: concurrent requests share the batch and each
//! response is byte-identical to the same request served alone; the batch
//! shows in `/health`, `/metrics` and the response's `draftwise.batch`; a
//! request the cache budget can never hold is refused, and one that must
//! wait for room completes once there is.

use draftwise_tests::serve::Server;
use serde_json::{Value, json};

fn body(prompt: &str, max_tokens: usize, seed: Option<u64>) -> Value {
    let mut b = json!({"model": "SmolLM2-135M-Instruct.Q4_1", "prompt": prompt, "max_tokens": max_tokens,
        "temperature": 0, "ignore_eos": true});
    if let Some(seed) = seed {
        b["temperature"] = json!(0.9);
        b["seed"] = json!(seed);
    }
    b
}

const PROMPTS: [&str; 4] = [
    "Write a short poem about the sea.",
    "def fibonacci(n):",
    "List the planets of the solar system in order:",
    "The three primary colors are",
];

/// Each request's generated ids, sent one at a time, then all at once.
fn alone_and_together(s: &Server, bodies: &[Value]) -> (Vec<Value>, Vec<Value>) {
    let alone: Vec<Value> = bodies.iter().map(|b| s.post("/v1/completions", b).json()).collect();
    let together: Vec<Value> = std::thread::scope(|sc| {
        let hs: Vec<_> = bodies.iter().map(|b| sc.spawn(move || s.post("/v1/completions", b).json())).collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    (alone, together)
}

#[test]
fn concurrent_requests_share_passes_and_each_answers_what_it_answers_alone() {
    let s = Server::start(&["--parallel", "4"]);
    let h = s.get("/health").json();
    assert_eq!(h["slots"], json!({"in_use": 0, "total": 4}), "{h}");
    let greedy: Vec<Value> = PROMPTS.iter().map(|p| body(p, 40, None)).collect();
    let seeded: Vec<Value> = PROMPTS.iter().enumerate().map(|(i, p)| body(p, 40, Some(7 + i as u64))).collect();
    let mut widest = 0;
    for bodies in [greedy, seeded] {
        let (alone, together) = alone_and_together(&s, &bodies);
        for (i, (a, t)) in alone.iter().zip(&together).enumerate() {
            assert_eq!(a["draftwise"]["token_ids"], t["draftwise"]["token_ids"], "prompt {i}: batched differs");
            assert_eq!(a["choices"][0]["text"], t["choices"][0]["text"], "prompt {i}");
            assert_eq!(a["draftwise"]["batch"]["widest"], 1, "alone: {}", a["draftwise"]);
            widest = widest.max(t["draftwise"]["batch"]["widest"].as_u64().unwrap());
        }
    }
    assert!(widest >= 2, "no request shared a pass: the test proves nothing");
    let m = s.get("/metrics").text();
    assert!(m.contains("draftwise_batch_slots 4"), "{m}");
    let count = |name: &str| -> u64 {
        m.lines().find_map(|l| l.strip_prefix(&format!("{name}_count "))).and_then(|v| v.parse().ok()).unwrap_or(0)
    };
    assert!(count("draftwise_batch_sequences") > 0 && count("draftwise_batch_rows") > 0, "{m}");
}

#[test]
fn the_cache_budget_refuses_what_never_fits_and_queues_what_fits_later() {
    // 1 MiB holds 45 positions of this model (30 layers × 192 columns × 2 × 2 bytes each).
    let s = Server::start(&["--parallel", "4", "--kv-budget-mb", "1"]);
    let r = s.post("/v1/completions", &body(PROMPTS[0], 60, None));
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(r.json()["error"]["code"], "kv_budget_exceeded");
    assert!(r.text().contains("--kv-budget-mb"), "{}", r.text());
    // Two requests of about 30 positions each: never both at once, both answered.
    let bodies: Vec<Value> = PROMPTS[2..].iter().map(|p| body(p, 16, None)).collect();
    let (alone, together) = alone_and_together(&s, &bodies);
    for (a, t) in alone.iter().zip(&together) {
        assert_eq!(a["draftwise"]["token_ids"], t["draftwise"]["token_ids"]);
        assert_eq!(t["draftwise"]["batch"]["widest"], 1, "they cannot share the cache: {}", t["draftwise"]);
    }
}
