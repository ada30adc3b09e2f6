//! A loopback load test of `runtime serve`: 8 concurrent clients × 20
//! requests each, streaming and not, chat and plain, interleaved over 8
//! prompts. No request may fail, get lost, or get another request's text;
//! the server's resident memory must stay bounded.

use draftwise_tests::model_path;
use draftwise_tests::serve::{Prompt, Server, generate_expected, request};
use serde_json::{Value, json};
use std::collections::HashSet;
use std::time::Instant;

const CLIENTS: usize = 8;
const REQUESTS_PER_CLIENT: usize = 20;
const MAX_TOKENS: usize = 5;
/// Resident memory may grow this much over the run: allocator slack and the
/// arenas of the HTTP threads. The KV cache of a request here is about 45 KiB
/// per position (f32 keys and values, 30 layers × 192), up to 2 MiB per request:
/// keeping finished requests' caches or buffers alive would pass this many
/// times over in 160 requests.
const RSS_GROWTH_LIMIT_KIB: u64 = 32 * 1024;

const PROMPTS: [Prompt; 8] = [
    Prompt::Chat("What is the capital of France?"),
    Prompt::Text("Once upon a time"),
    Prompt::Chat("Name a prime number."),
    Prompt::Text("def add(a, b):"),
    Prompt::Chat("Say hello in Spanish."),
    Prompt::Text("The sky is"),
    Prompt::Chat("What is 2 + 2?"),
    Prompt::Text("Rust is a programming language that"),
];

/// One request's outcome: (response id, text, completion tokens), or what went wrong.
type Outcome = Result<(String, String, u64), String>;

fn run_one(addr: std::net::SocketAddr, model: &str, i: usize, stream: bool) -> Outcome {
    let p = &PROMPTS[i];
    let chat = matches!(p, Prompt::Chat(_));
    let mut body = p.body(model, MAX_TOKENS);
    if stream {
        body["stream"] = json!(true);
        body["stream_options"] = json!({"include_usage": true});
    }
    let r = request(addr, "POST", p.path(), &[("Content-Type", "application/json")], Some(body.to_string().as_bytes()));
    if r.status != 200 {
        return Err(format!("status {}: {}", r.status, r.text()));
    }
    if !stream {
        let v = r.json();
        let ch = &v["choices"][0];
        let text = if chat { &ch["message"]["content"] } else { &ch["text"] };
        return Ok((
            v["id"].as_str().unwrap_or_default().to_string(),
            text.as_str().unwrap_or_default().to_string(),
            v["usage"]["completion_tokens"].as_u64().unwrap_or(u64::MAX),
        ));
    }
    let chunks = r.sse();
    let id = chunks[0]["id"].as_str().unwrap_or_default().to_string();
    let mut text = String::new();
    let mut usage = u64::MAX;
    for c in &chunks {
        if c["id"] != json!(id) {
            return Err(format!("chunk of another request in this stream: {c}"));
        }
        match c["choices"].as_array().and_then(|a| a.first()) {
            Some(ch) if chat => text.push_str(ch["delta"]["content"].as_str().unwrap_or("")),
            Some(ch) => text.push_str(ch["text"].as_str().unwrap_or("")),
            None => usage = c["usage"]["completion_tokens"].as_u64().unwrap_or(u64::MAX),
        }
    }
    Ok((id, text, usage))
}

#[test]
fn eight_clients_times_twenty_requests_lose_and_mix_up_nothing_in_bounded_memory() {
    let expected = generate_expected(&PROMPTS, MAX_TOKENS);
    assert_eq!(expected.len(), PROMPTS.len());
    let server = Server::start(&[]);
    let model = runtime::serve::default_model_id(&model_path());
    // Warm-up: every prompt once (the allocator reaches its working size).
    for (i, want) in expected.iter().enumerate() {
        let (_, text, n) = run_one(server.addr, &model, i, i % 2 == 0).unwrap();
        assert_eq!(text, want.text);
        assert_eq!(n as usize, want.outcome.usage.completion_tokens);
    }
    let rss_before = server.rss_kib();
    let t0 = Instant::now();
    let addr = server.addr;
    let clients: Vec<_> = (0..CLIENTS)
        .map(|c| {
            let model = model.clone();
            std::thread::spawn(move || {
                (0..REQUESTS_PER_CLIENT)
                    .map(|j| {
                        let i = (c + j) % PROMPTS.len();
                        (i, run_one(addr, &model, i, (c + j) % 2 == 1))
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let results: Vec<(usize, Outcome)> =
        clients.into_iter().flat_map(|t| t.join().expect("a client thread panicked")).collect();
    let elapsed = t0.elapsed();
    let rss_after = server.rss_kib();

    let mut errors = Vec::new();
    let mut ids = HashSet::new();
    for (i, r) in &results {
        match r {
            Err(e) => errors.push(format!("prompt {i}: {e}")),
            Ok((id, text, n)) => {
                if *text != expected[*i].text {
                    errors.push(format!("prompt {i}: got {text:?}, want {:?}", expected[*i].text));
                }
                if *n as usize != expected[*i].outcome.usage.completion_tokens {
                    errors.push(format!(
                        "prompt {i}: {n} completion tokens, want {}",
                        expected[*i].outcome.usage.completion_tokens
                    ));
                }
                if !ids.insert(id.clone()) {
                    errors.push(format!("response id {id} seen twice"));
                }
            }
        }
    }
    let total = CLIENTS * REQUESTS_PER_CLIENT;
    assert_eq!(results.len(), total);
    assert!(errors.is_empty(), "{} of {total} requests went wrong:\n{}", errors.len(), errors.join("\n"));
    let health: Value = server.get("/health").json();
    assert_eq!(health["requests"]["completed"], (total + PROMPTS.len()) as u64, "{health}");
    assert_eq!(health["requests"]["failed"], 0);
    assert_eq!(health["requests"]["rejected"], 0);
    let growth = rss_after.saturating_sub(rss_before);
    println!(
        "{total} requests from {CLIENTS} clients in {:.1} s ({:.1} req/s); server RSS {rss_before} KiB before, \
         {rss_after} KiB after (+{growth} KiB)",
        elapsed.as_secs_f64(),
        total as f64 / elapsed.as_secs_f64()
    );
    assert!(growth <= RSS_GROWTH_LIMIT_KIB, "RSS grew by {growth} KiB (limit {RSS_GROWTH_LIMIT_KIB} KiB)");
    let (status, stderr) = server.terminate(std::time::Duration::from_secs(15));
    assert!(status.success(), "{stderr}");
}
