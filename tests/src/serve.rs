//! `runtime serve` for tests: the real binary on a free loopback port, and a
//! small HTTP/1.1 client over `std::net` that can also misbehave (send a
//! partial body, hang up mid-stream) the way real clients do.

use crate::{bin, model_path};
use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

/// How long a server may take to load and start listening.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(120);

/// A running `runtime serve`; killed when dropped.
pub struct Server {
    child: Child,
    pub addr: SocketAddr,
    stderr: Arc<Mutex<String>>,
    stdout: Arc<Mutex<Vec<String>>>,
    /// The stderr reader, which ends when the process has exited.
    stderr_reader: Option<std::thread::JoinHandle<()>>,
}

impl Server {
    /// Starts `runtime serve --port 0` on the default model with `args`
    /// added, waits for its `listening on` line and a healthy `/health`.
    pub fn start(args: &[&str]) -> Server {
        Self::start_model(&model_path(), args)
    }

    /// [`Server::start`] on the model at `model` (a GGUF file or a Hugging
    /// Face checkpoint's directory).
    pub fn start_model(model: &std::path::Path, args: &[&str]) -> Server {
        Self::start_model_logging(model, args, "warn")
    }

    /// [`Server::start`] with the log filter `log` (`DRAFTWISE_LOG`; the
    /// others use `warn`, which leaves out the access lines).
    pub fn start_logging(args: &[&str], log: &str) -> Server {
        Self::start_model_logging(&model_path(), args, log)
    }

    fn start_model_logging(model: &std::path::Path, args: &[&str], log: &str) -> Server {
        let mut child = Command::new(bin("runtime"))
            .arg("serve")
            .arg("--model")
            .arg(model)
            .args(["--port", "0", "--threads", "2"])
            .args(args)
            .env("DRAFTWISE_LOG", log)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start runtime serve");
        let stderr = Arc::new(Mutex::new(String::new()));
        let stdout = Arc::new(Mutex::new(Vec::new()));
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let stderr_reader = {
            let pipe = child.stderr.take().expect("stderr");
            let log = stderr.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                    if let Some(rest) = line.split("listening on http://").nth(1) {
                        let addr = rest.split_whitespace().next().unwrap_or("").to_string();
                        let _ = addr_tx.send(addr);
                    }
                    let mut l = log.lock().unwrap();
                    l.push_str(&line);
                    l.push('\n');
                }
            })
        };
        {
            let pipe = child.stdout.take().expect("stdout");
            let lines = stdout.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                    lines.lock().unwrap().push(line);
                }
            });
        }
        let addr = match addr_rx.recv_timeout(STARTUP_TIMEOUT) {
            Ok(a) => a.parse().unwrap_or_else(|e| panic!("bad address {a:?}: {e}")),
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("runtime serve did not start listening:\n{}", stderr.lock().unwrap());
            }
        };
        let server = Server { child, addr, stderr, stdout, stderr_reader: Some(stderr_reader) };
        let t0 = Instant::now();
        loop {
            if let Ok(r) = try_request(server.addr, "GET", "/health", &[], None)
                && r.status == 200
            {
                return server;
            }
            assert!(t0.elapsed() < STARTUP_TIMEOUT, "/health never answered 200:\n{}", server.stderr());
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Everything the server wrote on stderr so far.
    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// The server's stdout lines so far (JSONL events with `--json`).
    pub fn stdout_lines(&self) -> Vec<String> {
        self.stdout.lock().unwrap().clone()
    }

    /// The first `n` stdout lines, waiting for them (they are read by
    /// another thread) at most 30 s.
    pub fn stdout_first(&self, n: usize) -> Vec<String> {
        wait_for(Duration::from_secs(30), &format!("{n} stdout lines"), || self.stdout.lock().unwrap().len() >= n);
        self.stdout_lines()[..n].to_vec()
    }

    /// Resident memory of the server process, in KiB (`VmRSS`).
    pub fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).expect("read /proc status");
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmRSS in /proc status")
    }

    pub fn get(&self, path: &str) -> Reply {
        request(self.addr, "GET", path, &[], None)
    }

    pub fn post(&self, path: &str, body: &Value) -> Reply {
        request(self.addr, "POST", path, &[("Content-Type", "application/json")], Some(body.to_string().as_bytes()))
    }

    pub fn post_raw(&self, path: &str, body: &[u8]) -> Reply {
        request(self.addr, "POST", path, &[("Content-Type", "application/json")], Some(body))
    }

    /// `/health`'s request counters.
    pub fn counter(&self, name: &str) -> u64 {
        self.get("/health").json()["requests"][name].as_u64().unwrap_or_else(|| panic!("no counter {name}"))
    }

    /// Sends SIGTERM and waits for the exit (at most `timeout`).
    pub fn terminate(mut self, timeout: Duration) -> (ExitStatus, String) {
        let ok = Command::new("kill").args(["-TERM", &self.pid().to_string()]).status().expect("run kill");
        assert!(ok.success(), "kill -TERM failed");
        let t0 = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("wait for the server") {
                // The reader ends at the pipe's end: then it has every line.
                if let Some(r) = self.stderr_reader.take() {
                    let _ = r.join();
                }
                return (status, self.stderr());
            }
            assert!(t0.elapsed() < timeout, "the server did not exit within {timeout:?} of SIGTERM");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A server with default settings, shared by the tests of one binary that
/// run at the same time; the last one to finish stops it (a server in a
/// `static` would outlive the test process).
pub fn shared() -> Arc<Server> {
    static SHARED: Mutex<Weak<Server>> = Mutex::new(Weak::new());
    let mut slot = SHARED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(s) = slot.upgrade() {
        return s;
    }
    let s = Arc::new(Server::start(&[]));
    *slot = Arc::downgrade(&s);
    s
}

/// An HTTP response.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Reply {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text()))
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    /// The `data:` payloads of a server-sent-event body, which must end
    /// with `data: [DONE]` (not included).
    pub fn sse(&self) -> Vec<Value> {
        let text = self.text();
        let data: Vec<&str> = text.split("\n\n").filter(|e| !e.trim().is_empty()).collect();
        let (last, events) = data.split_last().unwrap_or_else(|| panic!("empty event stream"));
        assert_eq!(*last, "data: [DONE]", "the stream must end with [DONE]: {text}");
        events
            .iter()
            .map(|e| {
                let payload = e.strip_prefix("data: ").unwrap_or_else(|| panic!("not a data event: {e:?}"));
                serde_json::from_str(payload).unwrap_or_else(|err| panic!("bad chunk ({err}): {payload}"))
            })
            .collect()
    }

    /// The OpenAI error body's `error` object (asserting its shape).
    pub fn error(&self) -> Value {
        let v = self.json();
        let e = v["error"].clone();
        assert!(e["message"].is_string(), "no error.message: {v}");
        assert!(e["type"].is_string(), "no error.type: {v}");
        assert!(e.get("param").is_some() && e.get("code").is_some(), "error lacks param/code: {v}");
        e
    }
}

/// The bytes of a request with `Connection: close`.
pub fn request_bytes(method: &str, path: &str, headers: &[(&str, &str)], body: Option<&[u8]>) -> Vec<u8> {
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n");
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    if let Some(b) = body {
        head.push_str(&format!("Content-Length: {}\r\n", b.len()));
    }
    head.push_str("\r\n");
    let mut bytes = head.into_bytes();
    bytes.extend_from_slice(body.unwrap_or_default());
    bytes
}

/// One request on a fresh connection; panics on I/O errors.
pub fn request(addr: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)], body: Option<&[u8]>) -> Reply {
    try_request(addr, method, path, headers, body).unwrap_or_else(|e| panic!("{method} {path}: {e}"))
}

pub fn try_request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&[u8]>,
) -> std::io::Result<Reply> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(300)))?;
    s.write_all(&request_bytes(method, path, headers, body))?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    parse_response(&raw)
}

fn bad(msg: impl Into<String>) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, msg.into())
}

/// Parses a whole response (status line, headers, plain or chunked body).
pub fn parse_response(raw: &[u8]) -> std::io::Result<Reply> {
    let end = raw.windows(4).position(|w| w == b"\r\n\r\n").ok_or_else(|| bad("no end of headers"))?;
    let head = std::str::from_utf8(&raw[..end]).map_err(|_| bad("headers are not UTF-8"))?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status = status_line.split(' ').nth(1).and_then(|s| s.parse().ok()).ok_or_else(|| bad(status_line))?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let rest = &raw[end + 4..];
    let chunked = headers.iter().any(|(k, v)| k == "transfer-encoding" && v.contains("chunked"));
    let body = if chunked { dechunk(rest)? } else { rest.to_vec() };
    Ok(Reply { status, headers, body })
}

fn dechunk(mut rest: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let eol = rest.windows(2).position(|w| w == b"\r\n").ok_or_else(|| bad("truncated chunk size"))?;
        let size_text = std::str::from_utf8(&rest[..eol]).map_err(|_| bad("chunk size"))?;
        let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
            .map_err(|_| bad(format!("chunk size {size_text:?}")))?;
        rest = &rest[eol + 2..];
        if size == 0 {
            return Ok(body);
        }
        if rest.len() < size + 2 {
            return Err(bad("truncated chunk"));
        }
        body.extend_from_slice(&rest[..size]);
        rest = &rest[size + 2..];
    }
}

/// Starts a streaming request and reads until `needle` has arrived (or
/// panics after `timeout`); returns the open connection and what was read.
pub fn stream_until(
    addr: SocketAddr,
    path: &str,
    body: &Value,
    needle: &str,
    timeout: Duration,
) -> (TcpStream, String) {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
    let body = body.to_string();
    s.write_all(&request_bytes("POST", path, &[("Content-Type", "application/json")], Some(body.as_bytes()))).unwrap();
    let t0 = Instant::now();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&got).contains(needle) {
        assert!(
            t0.elapsed() < timeout,
            "{needle:?} did not arrive within {timeout:?}: {}",
            String::from_utf8_lossy(&got)
        );
        match s.read(&mut buf) {
            Ok(0) => panic!("connection closed before {needle:?}: {}", String::from_utf8_lossy(&got)),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(e) => panic!("reading the stream: {e}"),
        }
    }
    (s, String::from_utf8_lossy(&got).into_owned())
}

/// Polls `f` every 50 ms until it is true or `timeout` passes.
pub fn wait_for(timeout: Duration, what: &str, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < timeout, "timed out after {timeout:?} waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A prompt for `runtime generate --prompts` and its server request.
#[derive(Clone, Debug)]
pub enum Prompt {
    /// `/v1/completions` with this prompt text.
    Text(&'static str),
    /// `/v1/chat/completions` with one user message (`generate --chat`).
    Chat(&'static str),
}

impl Prompt {
    /// The request body (greedy, `max_tokens`) for the served model.
    pub fn body(&self, model: &str, max_tokens: usize) -> Value {
        match self {
            Prompt::Text(t) => {
                serde_json::json!({"model": model, "prompt": t, "temperature": 0, "max_tokens": max_tokens})
            }
            Prompt::Chat(t) => serde_json::json!({
                "model": model, "messages": [{"role": "user", "content": t}], "temperature": 0, "max_tokens": max_tokens,
            }),
        }
    }

    pub fn path(&self) -> &'static str {
        match self {
            Prompt::Text(_) => "/v1/completions",
            Prompt::Chat(_) => "/v1/chat/completions",
        }
    }
}

/// What classic `runtime generate` (greedy, `--json`) produces for each
/// prompt: the `completion` events in prompt order.
pub fn generate_expected(prompts: &[Prompt], max_tokens: usize) -> Vec<runtime::events::Completion> {
    let dir = tempfile_dir();
    let file = dir.join("prompts.jsonl");
    let lines: Vec<String> = prompts
        .iter()
        .enumerate()
        .map(|(i, p)| match p {
            Prompt::Text(t) => serde_json::json!({"id": i.to_string(), "prompt": t}).to_string(),
            Prompt::Chat(t) => {
                serde_json::json!({"id": i.to_string(), "messages": [{"role": "user", "content": t}]}).to_string()
            }
        })
        .collect();
    std::fs::write(&file, lines.join("\n")).expect("write prompts");
    let out = crate::run(
        Command::new(bin("runtime"))
            .arg("generate")
            .arg("--model")
            .arg(model_path())
            .arg("--prompts")
            .arg(&file)
            .args(["--max-tokens", &max_tokens.to_string(), "--json", "--threads", "2"])
            .env("DRAFTWISE_LOG", "warn"),
    );
    let _ = std::fs::remove_dir_all(&dir);
    assert!(out.status.success(), "runtime generate failed: {}", String::from_utf8_lossy(&out.stderr));
    crate::json_lines(&out)
        .into_iter()
        .filter_map(|v| match serde_json::from_value(v) {
            Ok(runtime::events::Event::Completion(c)) => Some(c),
            _ => None,
        })
        .collect()
}

/// A fresh scratch directory (the tests crate has no tempfile dependency
/// outside dev-dependencies).
fn tempfile_dir() -> std::path::PathBuf {
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let d = std::env::temp_dir().join(format!("draftwise-serve-test-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&d).expect("create a scratch directory");
    d
}
