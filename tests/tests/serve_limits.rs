//! `runtime serve` against a model file's hostile chat template and
//! against one client that sends many requests at once: the server stays
//! up, `/health` answers, other requests and other clients are served.

use draftwise_tests::serve::{Server, stream_until, try_request, wait_for};
use serde_json::{Value, json};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// A template whose list doubles forty times: 2^40 values. Before the
/// rendering budget, `runtime serve` aborted on the first chat request
/// (`memory allocation of 206158430208 bytes failed`), taking every other
/// client's request with it.
const DOUBLING_TEMPLATE: &str =
    "{% set ns = namespace(l=[1]) %}{% for i in range(40) %}{% set ns.l = ns.l + ns.l %}{% endfor %}{{ ns.l|length }}";

/// The server's resident memory may not pass this while chat requests hit
/// the template (each stopped rendering holds at most its 32 MiB budget,
/// and at most two are kept).
const RSS_BOUND_KIB: u64 = 1024 * 1024;

/// The tiny Qwen 2 checkpoint (Hugging Face form) copied with `template`
/// as its `chat_template.jinja`.
fn tiny_model_with_template(template: &str) -> (tempfile::TempDir, PathBuf) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../reference/data/tiny/qwen2-hf");
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("tiny-qwen2");
    std::fs::create_dir(&model).unwrap();
    for e in std::fs::read_dir(&src).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), model.join(e.file_name())).unwrap();
    }
    std::fs::write(model.join("chat_template.jinja"), template).unwrap();
    (dir, model)
}

fn chat(s: &Server) -> draftwise_tests::serve::Reply {
    s.post(
        "/v1/chat/completions",
        &json!({"model": "tiny", "messages": [{"role": "user", "content": "hi"}],
                                           "max_tokens": 2}),
    )
}

#[test]
fn a_chat_template_that_allocates_without_bound_is_refused_per_request_and_the_server_keeps_serving() {
    let (_dir, model) = tiny_model_with_template(DOUBLING_TEMPLATE);
    let s = Server::start_model(&model, &["--served-model-name", "tiny"]);
    for i in 0..4 {
        let t0 = Instant::now();
        let r = chat(&s);
        assert_eq!(r.status, 400, "chat request {i}: {}", r.text());
        let msg = r.error()["message"].as_str().unwrap_or_default().to_string();
        // The first ones are stopped at their budget; once two are parked, the template is refused at once.
        assert!(
            msg.contains("memory budget") || msg.contains("still stopped past their budget"),
            "chat request {i}: {msg}"
        );
        assert!(t0.elapsed() < Duration::from_secs(10), "chat request {i} took {:?}", t0.elapsed());
        assert_eq!(s.get("/health").status, 200, "after chat request {i}:\n{}", s.stderr());
        assert!(s.rss_kib() < RSS_BOUND_KIB, "RSS {} KiB after chat request {i}", s.rss_kib());
    }
    let msg = chat(&s).error()["message"].as_str().unwrap_or_default().to_string();
    assert!(msg.contains("still stopped past their budget"), "{msg}");
    // Plain prompts never run the template: still served.
    let r = s.post("/v1/completions", &json!({"model": "tiny", "prompt": "hi", "max_tokens": 2}));
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(!s.stderr().contains("memory allocation"), "{}", s.stderr());
}

/// A connection to `addr` from the loopback address `from` (any 127.x.y.z
/// is this machine): a second client, as the server counts clients.
fn connect_from(from: [u8; 4], addr: SocketAddr) -> TcpStream {
    use socket2::{Domain, Socket, Type};
    let sock = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
    sock.bind(&SocketAddr::from((from, 0)).into()).unwrap();
    sock.connect(&addr.into()).unwrap();
    sock.into()
}

fn long_story(stream: bool) -> Value {
    json!({"model": "SmolLM2-135M-Instruct.Q4_1", "prompt": "Write a very long story.", "max_tokens": 4000,
           "temperature": 0, "stream": stream})
}

/// Sends `body` as a POST on `c` without reading the answer.
fn send(c: &mut TcpStream, body: &Value) {
    let bytes = draftwise_tests::serve::request_bytes(
        "POST",
        "/v1/completions",
        &[("Content-Type", "application/json")],
        Some(body.to_string().as_bytes()),
    );
    std::io::Write::write_all(c, &bytes).unwrap();
}

#[test]
fn one_client_cannot_take_the_whole_queue_and_another_client_still_gets_in() {
    // One slot (--parallel 1), so the requests after A wait rather than join its batch.
    let s = Server::start(&["--max-queue", "8", "--max-waiting-per-client", "2", "--parallel", "1"]);
    // A runs; B and C wait: client 127.0.0.1 has its share of two waiting.
    let (_a, _) = stream_until(s.addr, "/v1/completions", &long_story(true), "data:", Duration::from_secs(60));
    let mut waiting = Vec::new();
    for _ in 0..2 {
        let mut c = TcpStream::connect(s.addr).unwrap();
        send(&mut c, &long_story(false));
        waiting.push(c);
    }
    wait_for(Duration::from_secs(30), "two requests waiting", || s.get("/health").json()["waiting"] == 2);
    // Its third is refused with 429, naming the flag, though the queue has room.
    let r = s.post("/v1/completions", &json!({"model": "SmolLM2-135M-Instruct.Q4_1", "prompt": "x", "max_tokens": 1}));
    assert_eq!(r.status, 429, "{}", r.text());
    assert_eq!(r.error()["code"], "too_many_requests");
    assert!(r.text().contains("--max-waiting-per-client 2"), "{}", r.text());
    // Another client (127.0.0.2) still gets a place in the queue.
    let mut other = connect_from([127, 0, 0, 2], s.addr);
    send(&mut other, &long_story(false));
    wait_for(Duration::from_secs(30), "the other client's request waiting", || s.get("/health").json()["waiting"] == 3);
    let m = try_request(s.addr, "GET", "/metrics", &[], None).unwrap().text();
    assert!(m.contains("draftwise_requests_total{outcome=\"over_client_share\"} 1"), "{m}");
    drop(waiting);
    drop(other);
}

/// Sends a complete request, shuts down the sending side, and reads what comes back.
fn post_then_half_close(addr: SocketAddr) -> Vec<u8> {
    use std::io::Read;
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    send(&mut c, &json!({"model": "SmolLM2-135M-Instruct.Q4_1", "prompt": "Hi", "max_tokens": 4, "temperature": 0}));
    c.shutdown(std::net::Shutdown::Write).unwrap();
    let mut got = Vec::new();
    let _ = c.read_to_end(&mut got);
    got
}

#[test]
fn with_half_close_a_client_that_shuts_down_its_sending_side_still_gets_its_response() {
    let s = Server::start(&["--half-close"]);
    let got = post_then_half_close(s.addr);
    let reply = draftwise_tests::serve::parse_response(&got)
        .unwrap_or_else(|e| panic!("{e}: {:?}", String::from_utf8_lossy(&got)));
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(reply.json()["usage"]["completion_tokens"], 4, "{}", reply.text());
    // Without it (the default), the end of input is the client leaving: nothing is written.
    let s = Server::start(&[]);
    let got = post_then_half_close(s.addr);
    assert!(got.is_empty(), "{:?}", String::from_utf8_lossy(&got));
}
