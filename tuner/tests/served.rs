//! End-to-end: `tuner sweep --served` against a fake server, so each way a
//! server can fail runs for real: one that never becomes healthy, one that
//! exits before its startup event, one that ignores SIGTERM, a malformed
//! stream and a truncated one; and a clean fake sweep through summarize and
//! propose.
//!
//! The fake "runtime" is a shell script that prints crafted events (parsed
//! back as `runtime::events::Event` first, so they have the runtime's exact
//! shape) and then waits, exiting 0 on SIGTERM as the runtime does; its pid
//! is the "server" the tuner must stop. The HTTP side is a thread of this test on a loopback port,
//! named in the startup event's `server.address`; it answers `/health` and
//! streams OpenAI chunks whose text, usage and token ids match the events.
mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::process::Output;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::{Fixture, completion, diagnostics, ev, text, text_of};
use serde_json::{Value, json};

/// Two prompts, one of each endpoint.
const PROMPTS: usize = 2;
const BURSTS: usize = 3;
/// Requests per arm: one warm-up pass and the bursts.
const PER_ARM: usize = PROMPTS * (1 + BURSTS);
/// The arms in order, two rounds: C 1 2 C | C 2 1 C (the plan rotates the widths).
const ARMS: [Option<usize>; 8] = [None, Some(1), Some(2), None, None, Some(2), Some(1), None];

/// The fake's service time for the arm of width `width`: width 1 clearly
/// faster than classic and width 2 clearly slower, so the decision is width 1
/// on every run. Were it scheduling noise, width 2 (the widest measured)
/// would win about half the time and propose would rightly refuse it.
fn service_ms(width: Option<usize>) -> u64 {
    match width {
        None => 20,
        Some(1) => 10,
        Some(_) => 40,
    }
}

/// A server's `startup`: the generate arm's, with the server's sampling
/// defaults and its address.
fn startup(width: Option<usize>, addr: SocketAddr) -> String {
    let mut v = common::startup(width);
    v["sampling"]["temperature"] = json!(1.0);
    v["max_tokens"] = json!(16);
    v["server"] = json!({"address": addr.to_string(), "model": "fake"});
    ev(v)
}

/// What the fake answers for the prompt at `index` of the set.
fn answer(index: usize) -> (Vec<u32>, String) {
    let ids: Vec<u32> = (0..4).map(|i| 100 * (index as u32 + 1) + i).collect();
    let text = text_of(&ids);
    (ids, text)
}

/// The events the server prints for request `n` (global, in sending order).
fn request_events(n: usize, width: Option<usize>) -> String {
    let (ids, _) = answer(n % PROMPTS);
    let id = format!("cmpl-{n}");
    let mut out = vec![completion(&id, false, 0, &ids, 1000.0)];
    out.extend(width.map(|w| diagnostics(&id, false, 0, w, 2)));
    out.join("\n")
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Good,
    /// `/health` answers 503 forever.
    Unhealthy,
    /// The first chunk is not JSON.
    Malformed,
    /// One chunk, then the connection closes (no `[DONE]`).
    Truncated,
}

/// The fake server's HTTP side; request `n` gets id `cmpl-n`.
fn fake_http(mode: Mode) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let counter = Arc::new(AtomicUsize::new(0));
    // Requests of each (arm, prompt) so far: a response's id (and so its
    // events' tokens) follows the prompt, whatever order concurrent clients
    // connect in; one client at a time gets ids in arrival order.
    let mut per_prompt: std::collections::HashMap<(usize, usize), usize> = std::collections::HashMap::new();
    std::thread::spawn(move || {
        for conn in l.incoming() {
            let Ok(mut s) = conn else { continue };
            let mut r = BufReader::new(s.try_clone().unwrap());
            let mut first = String::new();
            let mut line = String::new();
            let mut length = 0;
            if r.read_line(&mut first).is_err() {
                continue;
            }
            while r.read_line(&mut line).is_ok_and(|n| n > 0) && line != "\r\n" {
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    length = v.trim().parse().unwrap_or(0);
                }
                line.clear();
            }
            let mut body = vec![0; length];
            let _ = r.read_exact(&mut body);
            if first.starts_with("GET /health") {
                let (status, text) =
                    if mode == Mode::Unhealthy { ("503 Service Unavailable", "loading") } else { ("200 OK", "ok") };
                let b = json!({"status": text}).to_string();
                let _ = write!(
                    s,
                    "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{b}",
                    b.len()
                );
                continue;
            }
            let n = counter.fetch_add(1, Ordering::SeqCst);
            let req: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            assert_eq!(req["stream_options"]["include_usage"], true, "{req}");
            assert_eq!(req["temperature"], 0, "{req}");
            let chat = req.get("messages").is_some();
            let (arm, prompt) = (n / PER_ARM, usize::from(chat));
            let k = per_prompt.entry((arm, prompt)).or_default();
            let n = arm * PER_ARM + *k * PROMPTS + prompt;
            *k += 1;
            let (ids, text) = answer(n % PROMPTS);
            let id = format!("cmpl-{n}");
            let piece = |t: &str, finish: Value| {
                if chat {
                    json!({"id": id, "choices": [{"index": 0, "delta": {"content": t}, "finish_reason": finish}], "usage": null})
                } else {
                    json!({"id": id, "choices": [{"index": 0, "text": t, "finish_reason": finish}], "usage": null})
                }
            };
            let mut out =
                String::from("HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n");
            match mode {
                Mode::Malformed => out.push_str("data: {\"id\": \"x\", \"choices\": [{\"text\":\n\n"),
                Mode::Truncated => out.push_str(&format!("data: {}\n\n", piece(&text[..3], Value::Null))),
                Mode::Good | Mode::Unhealthy => {
                    let (a, b) = text.split_at(3);
                    out.push_str(&format!("data: {}\n\n", piece(a, Value::Null)));
                    out.push_str(&format!("data: {}\n\n", piece(b, json!("length"))));
                    let usage = json!({"id": id, "choices": [],
                        "usage": {"prompt_tokens": 5, "completion_tokens": ids.len(), "total_tokens": 5 + ids.len()},
                        "draftwise": {"queue_ms": 0.0, "prefill_ms": 1.0, "decode_ms": 3.0, "decode_steps": 3,
                                      "decode_tok_per_s": 1000.0, "token_ids": ids, "speculative": null,
                                      "batch": {"passes": 4, "mean_sequences": 1.5, "widest": 2}}});
                    out.push_str(&format!("data: {usage}\n\ndata: [DONE]\n\n"));
                }
            }
            // A steady service time per arm, so the fake's rates are not scheduling noise.
            let width = ARMS.get(n / PER_ARM).copied().flatten();
            std::thread::sleep(std::time::Duration::from_millis(service_ms(width)));
            let _ = s.write_all(out.as_bytes());
        }
    });
    addr
}

const SCRIPT: &str = r#"#!/bin/sh
D="$(dirname "$0")"
if [ "$1" = "build-info" ]; then cat "$D/build-info.json"; exit 0; fi
N=$(cat "$D/count" 2>/dev/null || echo 0)
echo $((N + 1)) > "$D/count"
echo $$ > "$D/pid-$N"
echo "$@" > "$D/args-$N"
if [ -f "$D/before.sh" ]; then . "$D/before.sh"; fi
cat "$D/arm-$N.jsonl"
if [ -f "$D/ignore-term" ]; then trap '' TERM; exec sleep 120; fi
# Like the runtime: exit 0 on SIGTERM.
trap 'kill $! 2>/dev/null; exit 0' TERM
sleep 120 >/dev/null &
wait
"#;

impl Fixture {
    /// A scratch repository with a fake runtime whose arms talk to `addr`:
    /// classic, width 1, width 2, classic, and the second round.
    fn new(addr: SocketAddr) -> Fixture {
        let prompts = concat!(
            r#"{"id": "p1", "type": "code", "prompt": "def f():"}"#,
            "\n",
            r#"{"id": "p2", "type": "chat", "messages": [{"role": "user", "content": "hi"}]}"#,
            "\n"
        );
        let f = Fixture::scratch(SCRIPT, prompts, "records/served");
        for (n, width) in ARMS.into_iter().enumerate() {
            let mut lines = vec![startup(width, addr)];
            lines.extend((n * PER_ARM..(n + 1) * PER_ARM).map(|k| request_events(k, width)));
            std::fs::write(f.fake.join(format!("arm-{n}.jsonl")), lines.join("\n") + "\n").unwrap();
        }
        f
    }

    /// Shell the fake sources before printing (e.g. `trap '' TERM`).
    fn before(&self, sh: &str) {
        std::fs::write(self.fake.join("before.sh"), sh).unwrap();
    }

    /// `tuner sweep --served` over widths 1,2, two rounds (invocations 0..=7).
    fn sweep(&self, extra: &[&str]) -> Output {
        let served = ["--served"].into_iter().chain(extra.iter().copied()).collect::<Vec<_>>();
        self.fake_sweep(BURSTS, 4, &served)
    }

    fn raw(&self, kind: &str) -> Vec<Value> {
        std::fs::read_to_string(self.out.join("raw.jsonl"))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .filter(|l| l["kind"] == kind)
            .collect()
    }

    /// The pid of the `n`-th fake server.
    fn pid(&self, n: usize) -> u32 {
        std::fs::read_to_string(self.fake.join(format!("pid-{n}"))).unwrap().trim().parse().unwrap()
    }
}

fn gone(pid: u32) -> bool {
    !Path::new(&format!("/proc/{pid}")).exists()
}

/// The first arm failed with `needle` in its error, was stopped as `stop`,
/// halted the sweep, and left no process behind.
fn assert_first_arm_failed(f: &Fixture, o: &Output, needle: &str, stop: &str) -> Value {
    assert_eq!(o.status.code(), Some(1), "{}", text(o));
    let ends = f.raw("arm_end");
    assert_eq!(ends.len(), 1, "{ends:?}");
    let e = &ends[0];
    assert_eq!(e["ok"], false);
    assert!(e["error"].as_str().unwrap().contains(needle), "{e}");
    assert_eq!(e["server"]["stop"], stop, "{e}");
    let halt = f.raw("halt");
    assert_eq!(halt[0]["halt"], "arm_failed");
    assert!(gone(f.pid(0)), "the fake server {} is still running", f.pid(0));
    for log in [&e["stdout_log"], &e["stderr_log"]] {
        assert!(f.out.join(log.as_str().unwrap()).exists(), "{log}");
    }
    e.clone()
}

#[test]
fn a_clean_served_sweep_records_client_timings_and_summarizes_as_served() {
    let f = Fixture::new(fake_http(Mode::Good));
    let o = f.sweep(&[]);
    assert!(o.status.success(), "{}", text(&o));
    let args = std::fs::read_to_string(f.fake.join("args-1")).unwrap();
    assert!(args.starts_with("serve --json --host 127.0.0.1 --port 0 --model "), "{args}");
    assert!(
        args.contains("--threads 2 --parallel 1 --drafter ngram --draft-width 1 --ngram-min 3 --ngram-max 4"),
        "{args}"
    );
    let args0 = std::fs::read_to_string(f.fake.join("args-0")).unwrap();
    assert!(args0.trim_end().ends_with("--threads 2 --parallel 1 --drafter none"), "{args0}");
    let reqs = f.raw("request");
    assert_eq!(reqs.len(), 8 * PROMPTS * BURSTS, "warm-ups are not recorded");
    for r in &reqs {
        let s = &r["served"];
        assert!(s["ttft_ms"].as_f64().unwrap() > 0.0 && s["e2e_ms"].as_f64() >= s["ttft_ms"].as_f64(), "{r}");
        assert!(s["e2e_tok_per_s"].as_f64().unwrap() > 0.0, "{r}");
        assert_eq!(r["usage"]["completion_tokens"], 4);
        assert_eq!(r["token_ids"].as_array().unwrap().len(), 4);
        let chat = r["prompt_id"] == "p2";
        assert_eq!(s["endpoint"], if chat { "/v1/chat/completions" } else { "/v1/completions" });
        assert_eq!(r["diagnostics_present"], r["width"].is_number(), "{r}");
        assert_eq!(s["server"]["batch"], json!({"passes": 4, "mean_sequences": 1.5, "widest": 2}), "{r}");
    }
    for e in f.raw("arm_end") {
        assert_eq!((e["ok"].as_bool(), e["warmup_requests"].as_u64()), (Some(true), Some(PROMPTS as u64)), "{e}");
        assert_eq!(e["server"]["stop"], "sigterm");
        assert!(e["server"]["address"].as_str().unwrap().starts_with("127.0.0.1:"));
    }
    assert!((0..8).all(|n| gone(f.pid(n))));
    let header = &f.raw("sweep")[0];
    assert_eq!(header["settings"]["served"]["health_timeout_s"], 120.0);
    assert_eq!(header["settings"]["served"]["concurrency"], 1);
    let o = f.tuner(&["summarize", f.out.to_str().unwrap(), "--json"], &[]);
    assert!(o.status.success(), "{}", text(&o));
    let s: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (s["served"].as_bool(), s["complete"].as_bool(), s["identical"].as_bool()),
        (Some(true), Some(true), Some(true))
    );
    assert!(s["decision_rule"].as_str().unwrap().contains("end-to-end tok/s"));
    // The fake serves width 1 in half classic's time and width 2 in twice it.
    assert_eq!(s["decision"]["width"], 1, "{}", s["decision"]);
    assert_eq!(s["classic_ttft_ms"]["n"], 4 * PROMPTS * BURSTS);
    assert_eq!(s["widths"][0]["ttft_ms"]["n"], 2 * PROMPTS * BURSTS);
    assert_eq!((s["concurrency"].as_u64(), s["batch"]["mean_sequences"].as_f64()), (Some(1), Some(1.5)), "{s}");
    let record = std::fs::read_to_string(f.out.join("record.md")).unwrap();
    assert!(record.contains("**Served sweep.**") && record.contains("### Time to first token"), "{record}");
    let csv = std::fs::read_to_string(f.out.join("summary.csv")).unwrap();
    assert!(csv.lines().next().unwrap().ends_with("median_ttft_ms,statistic"), "{csv}");
    assert!(csv.lines().skip(1).all(|l| l.ends_with(",e2e_tok_per_s")), "{csv}");
    // The fixture's gate is the fake one: propose allows it, and says so.
    let o = f.tuner(&["propose", f.out.to_str().unwrap(), "--dry-run", "--allow-loose-gate", "--allow-weak-plan"], &[]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success() && out.contains("served sweep (end-to-end tok/s"), "{}", text(&o));
    assert!(f.root.join("policy/draft-block-width.toml").exists());
}

#[test]
fn a_sweep_at_concurrency_2_records_it_and_its_batches_and_propose_writes_a_bucket() {
    let f = Fixture::new(fake_http(Mode::Good));
    let o = f.sweep(&["--concurrency", "2"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("writes the bucket entry for 2 sequences at once"), "{}", text(&o));
    for n in 0..8 {
        let args = std::fs::read_to_string(f.fake.join(format!("args-{n}"))).unwrap();
        assert!(args.contains("--threads 2 --parallel 2 --drafter "), "{args}");
    }
    assert_eq!(f.raw("sweep")[0]["settings"]["served"]["concurrency"], 2);
    let reqs = f.raw("request");
    assert_eq!(reqs.len(), 8 * PROMPTS * BURSTS);
    // Written in prompt order after each pass, whichever request finished first.
    let order: Vec<&str> = reqs.iter().map(|r| r["prompt_id"].as_str().unwrap()).collect();
    assert!(order.chunks(2).all(|c| c == ["p1", "p2"]), "{order:?}");
    assert!(reqs.iter().all(|r| r["served"]["server"]["batch"]["widest"] == 2), "the rows keep draftwise.batch");
    let o = f.tuner(&["summarize", f.out.to_str().unwrap(), "--json"], &[]);
    let s: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!((s["concurrency"].as_u64(), s["batch"]["widest"].as_u64()), (Some(2), Some(2)), "{s}");
    assert_eq!(s["identical"], true, "{s}");
    let record = std::fs::read_to_string(f.out.join("record.md")).unwrap();
    assert!(record.lines().next().unwrap().ends_with(", served at concurrency 2)"), "{record}");
    assert!(record.contains("**concurrency 2**") && record.contains("1.50 sequences per forward pass"), "{record}");
    assert!(record.contains("| width 1 | 12 |") && record.contains("| 1.50 (2) |"), "{record}");
    // The same flags that let the clean sweep's entry through write this
    // one as a bucket of the idle key: `concurrency = 2`.
    let o = f.tuner(&["propose", f.out.to_str().unwrap(), "--allow-loose-gate", "--allow-weak-plan"], &[]);
    assert!(o.status.success(), "{}", text(&o));
    let table = std::fs::read_to_string(f.root.join("policy/draft-block-width.toml")).unwrap();
    assert!(table.contains("\nthreads = 2\nconcurrency = 2\n"), "{table}");
    let t = policy::table::compile("t", &table, policy::table::RecordCheck::Skip).unwrap();
    assert_eq!(t.entries.len(), 1);
    assert!(t.entries[0].key.to_string().ends_with(", 2 sequences at once"), "{}", t.entries[0].key);
}

#[test]
fn concurrency_needs_served_and_stays_within_its_bounds() {
    let f = Fixture::new(fake_http(Mode::Good));
    let o = f.fake_sweep(BURSTS, 4, &["--concurrency", "2"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("--served"), "{}", text(&o));
    for n in ["0", "65"] {
        let o = f.sweep(&["--concurrency", n]);
        assert_eq!(o.status.code(), Some(1), "{}", text(&o));
        assert!(text(&o).contains(&format!("--concurrency {n} is out of range 1..=64")), "{}", text(&o));
        assert!(!f.out.join("raw.jsonl").exists(), "refused before anything is written");
    }
    let o = f.sweep(&["--concurrency", "-1"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
}

#[test]
fn a_server_that_never_becomes_healthy_fails_its_arm_and_is_stopped() {
    let f = Fixture::new(fake_http(Mode::Unhealthy));
    let t0 = std::time::Instant::now();
    let o = f.sweep(&["--health-timeout", "1"]);
    let e = assert_first_arm_failed(&f, &o, "did not answer GET /health with 200 within 1 s", "sigterm");
    assert!(e["server"]["ready_ms"].is_null(), "{e}");
    assert!(t0.elapsed().as_secs() < 60);
}

#[test]
fn a_server_that_exits_before_its_startup_event_is_a_clear_failure() {
    let f = Fixture::new(fake_http(Mode::Good));
    f.before("echo 'cannot load the model' >&2; exit 3\n");
    let o = f.sweep(&[]);
    let e = assert_first_arm_failed(&f, &o, "before its startup event", "exited_early");
    assert_eq!(e["exit_code"], 3);
    let log = std::fs::read_to_string(f.out.join(e["stderr_log"].as_str().unwrap())).unwrap();
    assert!(log.contains("cannot load the model"), "the server's log is kept: {log}");
}

#[test]
fn a_server_that_ignores_sigterm_is_killed_after_the_stop_timeout() {
    let f = Fixture::new(fake_http(Mode::Good));
    std::fs::write(f.fake.join("ignore-term"), "").unwrap();
    let o = f.sweep(&["--stop-timeout", "1"]);
    let e = assert_first_arm_failed(&f, &o, "killed with SIGKILL", "sigkill");
    assert_eq!(e["signal"], 9, "{e}");
    assert!(e["server"]["stop_ms"].as_u64().unwrap() >= 1000, "{e}");
    // Its measurements were taken before the stop, and are kept as raw data.
    assert_eq!(e["requests"], PROMPTS * BURSTS);
}

#[test]
fn a_malformed_stream_fails_the_arm_with_the_reason() {
    let f = Fixture::new(fake_http(Mode::Malformed));
    let o = f.sweep(&[]);
    assert_first_arm_failed(&f, &o, "chunk 0 is not an OpenAI chunk", "sigterm");
}

#[test]
fn a_truncated_stream_fails_the_arm_with_the_reason() {
    let f = Fixture::new(fake_http(Mode::Truncated));
    let o = f.sweep(&[]);
    assert_first_arm_failed(&f, &o, "the stream ended before `data: [DONE]`, after 1 chunk(s)", "sigterm");
}
