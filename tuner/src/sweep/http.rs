//! The tuner's HTTP client for the loopback `runtime serve` processes it
//! starts, on `ureq` (blocking, HTTP/1.1, no TLS), and a server-sent-events
//! reader over its body: what `tuner sweep --served` needs and nothing more
//! (no proxy, no redirects, no keep-alive).
//!
//! Principal items: [`get`] (a whole, capped response), [`post_stream`]
//! (a `200` response whose body is read as [`SseStream`] events),
//! [`HttpError`]. One deadline bounds each exchange, connect to the last
//! body byte (ureq's global timeout), and every length is capped: the
//! response head by ureq's `max_response_header_size`, a body by its read
//! limit, an SSE line and event here. Chunk sizes are parsed by ureq-proto,
//! which refuses a size line over 20 bytes and allocates nothing by a size.
use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Largest response head (status line and headers).
pub const MAX_HEAD_BYTES: usize = 64 << 10;
/// Largest body read whole ([`get`], and an error response's body).
pub const MAX_BODY_BYTES: u64 = 1 << 20;
/// Largest streamed body: a completion of thousands of tokens, one chunk per
/// token with its JSON envelope, is a few MiB.
pub const MAX_STREAM_BYTES: u64 = 64 << 20;
/// Longest SSE line, and longest event (its `data:` lines joined): one
/// chunk's JSON, the last carrying the token ids.
pub const MAX_SSE_LINE_BYTES: usize = 4 << 20;

#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("{0} is not a loopback address; the tuner only talks to servers it started on this host")]
    NotLoopback(SocketAddr),
    #[error("connecting to {addr}: {source}")]
    Connect { addr: SocketAddr, source: std::io::Error },
    #[error("no answer within {secs:.1} s ({what})")]
    Timeout { what: &'static str, secs: f64 },
    #[error("{what}: {source}")]
    Io { what: &'static str, source: std::io::Error },
    #[error("the response head is over {MAX_HEAD_BYTES} bytes")]
    HeadTooLong,
    #[error("malformed response: {0}")]
    Malformed(String),
    #[error("the response body is over {0} bytes")]
    BodyTooLong(u64),
    #[error("a server-sent-events line or event is over {MAX_SSE_LINE_BYTES} bytes")]
    LineTooLong,
    #[error("the connection closed {0}")]
    Truncated(&'static str),
    #[error("HTTP {status}: {body}")]
    Status { status: u16, body: String },
    /// A request ureq would not send (a bad path): a bug in the caller.
    #[error("the HTTP client refused the request: {0}")]
    Client(String),
}

/// Which part of an exchange an error came from, for its message.
#[derive(Clone, Copy)]
enum Phase {
    /// Connecting, sending the request, reading the response head.
    Head,
    Body,
}

impl Phase {
    fn what(self) -> &'static str {
        match self {
            Phase::Head => "sending the request or reading the response head",
            Phase::Body => "reading the response body",
        }
    }

    fn truncated(self) -> &'static str {
        match self {
            Phase::Head => "before the end of the response head",
            Phase::Body => "before the end of the body",
        }
    }
}

fn map_err(e: ureq::Error, addr: SocketAddr, phase: Phase, timeout: Duration) -> HttpError {
    use std::io::ErrorKind as K;
    let timed_out = || HttpError::Timeout { what: phase.what(), secs: timeout.as_secs_f64() };
    match e {
        ureq::Error::Timeout(_) => timed_out(),
        ureq::Error::LargeResponseHeader(..) => HttpError::HeadTooLong,
        ureq::Error::BodyExceedsLimit(n) => HttpError::BodyTooLong(n),
        ureq::Error::Protocol(p) => HttpError::Malformed(p.to_string()),
        // ureq's input buffer (128 KiB) filled without a parsable chunk: a
        // chunk-size or trailer line that never ends.
        ureq::Error::BodyStalled => HttpError::Malformed("a chunked-body line never ends".into()),
        ureq::Error::Io(source) => match source.kind() {
            K::TimedOut | K::WouldBlock => timed_out(),
            K::UnexpectedEof => HttpError::Truncated(phase.truncated()),
            // Kinds only a connect can give: the server is not (or no longer) listening.
            K::ConnectionRefused | K::AddrNotAvailable | K::HostUnreachable | K::NetworkUnreachable => {
                HttpError::Connect { addr, source }
            }
            _ => HttpError::Io { what: phase.what(), source },
        },
        e => HttpError::Client(e.to_string()),
    }
}

/// One agent for every request: no proxy (a loopback request must never go
/// through `$http_proxy`), no redirects, no pooled connections (each arm
/// starts its own server, maybe on a port an earlier one used), statuses
/// returned rather than raised, and the head capped.
fn agent() -> &'static ureq::Agent {
    static AGENT: OnceLock<ureq::Agent> = OnceLock::new();
    AGENT.get_or_init(|| {
        ureq::Agent::config_builder()
            .proxy(None)
            .http_status_as_error(false)
            .max_redirects(0)
            .max_redirects_will_error(false)
            .max_idle_connections(0)
            .max_idle_connections_per_host(0)
            .max_response_header_size(MAX_HEAD_BYTES)
            .user_agent("draftwise-tuner")
            .build()
            .new_agent()
    })
}

fn url(addr: SocketAddr, path: &str) -> Result<String, HttpError> {
    if !addr.ip().is_loopback() {
        return Err(HttpError::NotLoopback(addr));
    }
    Ok(format!("http://{addr}{path}"))
}

/// A deadline of at least 1 ms: ureq reads a zero budget as already spent.
fn budget(timeout: Duration) -> Option<Duration> {
    Some(timeout.max(Duration::from_millis(1)))
}

fn truncate(s: &str, n: usize) -> String {
    match s.char_indices().nth(n) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s.to_string(),
    }
}

/// Reads a whole body of at most `cap` bytes.
fn read_capped(body: ureq::Body, cap: u64, addr: SocketAddr, timeout: Duration) -> Result<Vec<u8>, HttpError> {
    body.into_with_config().limit(cap).read_to_vec().map_err(|e| map_err(e, addr, Phase::Body, timeout))
}

/// `GET path`: the status and the whole body (at most [`MAX_BODY_BYTES`]),
/// everything within `timeout`.
pub fn get(addr: SocketAddr, path: &str, timeout: Duration) -> Result<(u16, Vec<u8>), HttpError> {
    let resp = agent()
        .get(url(addr, path)?)
        .header("connection", "close")
        .config()
        .timeout_global(budget(timeout))
        .build()
        .call()
        .map_err(|e| map_err(e, addr, Phase::Head, timeout))?;
    let status = resp.status().as_u16();
    let bytes = read_capped(resp.into_body(), MAX_BODY_BYTES, addr, timeout)?;
    Ok((status, bytes))
}

/// One server-sent event's payload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SseEvent {
    /// The `data:` lines of one event, joined by newlines.
    Data(String),
    /// `data: [DONE]`, OpenAI's end-of-stream marker.
    Done,
}

/// What [`read_line`] found.
enum Line {
    /// A line, its CRLF or LF removed (or the body's last bytes, unterminated).
    Some,
    /// The body ended before any byte.
    End,
    /// Over the cap.
    TooLong,
}

/// Reads one line of at most `cap` bytes into `buf`, never buffering more
/// than `cap + 1` bytes.
fn read_line(r: &mut impl BufRead, cap: usize, buf: &mut Vec<u8>) -> std::io::Result<Line> {
    buf.clear();
    let n = r.by_ref().take(cap as u64 + 1).read_until(b'\n', buf)?;
    if n == 0 {
        return Ok(Line::End);
    }
    if buf.last() != Some(&b'\n') {
        // Over the cap, or the body ended mid-line.
        return Ok(if buf.len() > cap { Line::TooLong } else { Line::Some });
    }
    buf.pop();
    if buf.last() == Some(&b'\r') {
        buf.pop();
    }
    Ok(Line::Some)
}

/// A `text/event-stream` body, read one event at a time.
pub struct SseStream {
    body: BufReader<ureq::BodyReader<'static>>,
    addr: SocketAddr,
    timeout: Duration,
    /// When the request was handed to ureq, which then connects and writes
    /// it: time to first token measured from here includes the loopback
    /// connect (the hand-written client took it after the connect).
    pub written_at: Instant,
}

impl SseStream {
    /// The next event; `Ok(None)` when the body ends (after `[DONE]`, or
    /// early: the caller decides whether that is a truncation). A body
    /// that ends against its framing (a chunked body without its last
    /// chunk, a short `Content-Length`) is [`HttpError::Truncated`].
    pub fn next_event(&mut self) -> Result<Option<SseEvent>, HttpError> {
        let (addr, timeout) = (self.addr, self.timeout);
        let err = |e: std::io::Error| map_err(ureq::Error::from(e), addr, Phase::Body, timeout);
        let mut data: Option<String> = None;
        let mut line = Vec::new();
        loop {
            match read_line(&mut self.body, MAX_SSE_LINE_BYTES, &mut line).map_err(err)? {
                Line::Some => {}
                // The body ended: an event without its blank line still counts.
                Line::End => return Ok(data.map(Self::event)),
                Line::TooLong => return Err(HttpError::LineTooLong),
            }
            if line.is_empty() {
                match data.take() {
                    Some(d) => return Ok(Some(Self::event(d))),
                    None => continue,
                }
            }
            // Comments (`:`) and fields other than `data` (`event`, `id`, `retry`) carry nothing here.
            let Some(rest) = line.strip_prefix(b"data:") else { continue };
            let rest = rest.strip_prefix(b" ").unwrap_or(rest);
            let text =
                std::str::from_utf8(rest).map_err(|_| HttpError::Malformed("an SSE line is not UTF-8".into()))?;
            match data.as_mut() {
                Some(d) => {
                    if d.len() + 1 + text.len() > MAX_SSE_LINE_BYTES {
                        return Err(HttpError::LineTooLong);
                    }
                    d.push('\n');
                    d.push_str(text);
                }
                None => data = Some(text.to_string()),
            }
        }
    }

    fn event(d: String) -> SseEvent {
        if d.trim() == "[DONE]" { SseEvent::Done } else { SseEvent::Data(d) }
    }
}

/// `POST path` with a JSON body, expecting `200` with `text/event-stream`.
/// Any other status is [`HttpError::Status`] with (the start of) its body.
/// `timeout` bounds the whole exchange, the stream included.
pub fn post_stream(addr: SocketAddr, path: &str, json: &[u8], timeout: Duration) -> Result<SseStream, HttpError> {
    let request = agent()
        .post(url(addr, path)?)
        .header("content-type", "application/json")
        .header("connection", "close")
        .config()
        .timeout_global(budget(timeout))
        .build();
    let written_at = Instant::now();
    let resp = request.send(json).map_err(|e| map_err(e, addr, Phase::Head, timeout))?;
    let status = resp.status().as_u16();
    if status != 200 {
        let text = read_capped(resp.into_body(), MAX_BODY_BYTES, addr, timeout)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default();
        return Err(HttpError::Status { status, body: truncate(text.trim(), 400) });
    }
    let content_type = resp.headers().get("content-type").map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    let is_sse = content_type.as_deref().is_some_and(|c| c.trim_start().starts_with("text/event-stream"));
    if !is_sse {
        return Err(HttpError::Malformed(format!(
            "expected a text/event-stream body, got Content-Type {:?}",
            content_type.as_deref().map_or("(none)".to_string(), |c| truncate(c, 80))
        )));
    }
    let body = resp.into_body().into_with_config().limit(MAX_STREAM_BYTES).reader();
    Ok(SseStream { body: BufReader::new(body), addr, timeout, written_at })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::net::{TcpListener, TcpStream};

    /// Reads one request (head and `Content-Length` body) off `s`.
    fn read_request(s: &TcpStream) {
        let mut r = BufReader::new(s.try_clone().unwrap());
        let mut line = String::new();
        let mut length = 0;
        while r.read_line(&mut line).is_ok_and(|n| n > 0) && line != "\r\n" {
            if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                length = v.trim().parse().unwrap_or(0);
            }
            line.clear();
        }
        // Read the body too: closing with unread bytes would reset the connection.
        let _ = r.read_exact(&mut vec![0; length]);
    }

    /// Serves one connection: reads the request, replies `reply`, closes.
    fn one_shot(reply: Vec<u8>) -> SocketAddr {
        serve(move |mut s| {
            let _ = s.write_all(&reply);
        })
    }

    /// Serves one connection: reads the request, then hands the socket to `reply`.
    fn serve(reply: impl FnOnce(TcpStream) + Send + 'static) -> SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        std::thread::spawn(move || {
            if let Ok((s, _)) = l.accept() {
                read_request(&s);
                reply(s);
            }
        });
        addr
    }

    const T: Duration = Duration::from_secs(5);
    const SSE_CHUNKED: &[u8] =
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";

    #[test]
    fn a_chunked_event_stream_yields_each_event_then_done() {
        let body = "data: {\"a\":1}\n\ndata: {\"b\":\n\n: comment\nevent: x\ndata: [DONE]\n\n";
        let mut reply = SSE_CHUNKED.to_vec();
        for piece in [&body[..5], &body[5..20], &body[20..]] {
            reply.extend(format!("{:x};ext=1\r\n{piece}\r\n", piece.len()).bytes());
        }
        reply.extend(b"0\r\n\r\n");
        let mut s = post_stream(one_shot(reply), "/x", b"{}", T).unwrap();
        assert_eq!(s.next_event().unwrap(), Some(SseEvent::Data("{\"a\":1}".into())));
        assert_eq!(s.next_event().unwrap(), Some(SseEvent::Data("{\"b\":".into())));
        assert_eq!(s.next_event().unwrap(), Some(SseEvent::Done));
        assert_eq!(s.next_event().unwrap(), None);
    }

    #[test]
    fn an_event_is_read_when_it_arrives_not_when_a_buffer_fills_or_the_body_ends() {
        // The server holds the stream open after one event until the client
        // has it: a client that buffered past the event would wait for the
        // deadline instead, and time to first token would measure that.
        let (got, wait) = std::sync::mpsc::channel::<()>();
        let addr = serve(move |mut s| {
            let _ = s.write_all(SSE_CHUNKED);
            let _ = s.write_all(b"9\r\ndata: 1\n\n\r\n");
            let _ = wait.recv_timeout(T);
            let _ = s.write_all(b"e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n");
        });
        let mut s = post_stream(addr, "/x", b"{}", T).unwrap();
        assert_eq!(s.next_event().unwrap(), Some(SseEvent::Data("1".into())));
        got.send(()).unwrap();
        assert_eq!(s.next_event().unwrap(), Some(SseEvent::Done));
        assert_eq!(s.next_event().unwrap(), None);
        assert!(s.written_at.elapsed() < Duration::from_secs(3));
    }

    #[test]
    fn a_truncated_chunked_or_length_body_is_an_error_not_an_end() {
        let mut reply = SSE_CHUNKED.to_vec();
        reply.extend(b"20\r\ndata: {\"a\":1}\n");
        let mut s = post_stream(one_shot(reply), "/x", b"{}", T).unwrap();
        let e = s.next_event().unwrap_err();
        assert!(matches!(e, HttpError::Truncated(_)), "{e}");
        // Every chunk complete, but no terminating zero-size chunk.
        let mut reply = SSE_CHUNKED.to_vec();
        reply.extend(b"9\r\ndata: 1\n\n\r\n");
        let mut s = post_stream(one_shot(reply), "/x", b"{}", T).unwrap();
        assert_eq!(s.next_event().unwrap(), Some(SseEvent::Data("1".into())));
        assert!(matches!(s.next_event().unwrap_err(), HttpError::Truncated(_)));
        let e = get(one_shot(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nhello".to_vec()), "/", T).unwrap_err();
        assert!(matches!(e, HttpError::Truncated(_)), "{e}");
    }

    #[test]
    fn bad_chunk_sizes_and_long_lines_are_refused_without_allocating_by_them() {
        let mut reply = SSE_CHUNKED.to_vec();
        reply.extend(b"zz\r\n");
        let e = post_stream(one_shot(reply), "/x", b"{}", T).unwrap().next_event().unwrap_err();
        assert!(matches!(&e, HttpError::Malformed(m) if m.contains("chunk length")), "{e}");
        // A size line that never ends fills the client's input buffer, then is refused.
        let mut reply = SSE_CHUNKED.to_vec();
        reply.extend(std::iter::repeat_n(b'1', 256 << 10));
        let e = post_stream(one_shot(reply), "/x", b"{}", T).unwrap().next_event().unwrap_err();
        assert!(matches!(e, HttpError::Malformed(_)), "{e}");
        // A stated size of 2^64-1 only bounds the reads: the stream just ends early.
        let mut reply = SSE_CHUNKED.to_vec();
        reply.extend(b"ffffffffffffffff\r\ndata: 1\n\n");
        let mut s = post_stream(one_shot(reply), "/x", b"{}", T).unwrap();
        assert_eq!(s.next_event().unwrap(), Some(SseEvent::Data("1".into())));
        assert!(matches!(s.next_event().unwrap_err(), HttpError::Truncated(_)));
        // One line over the cap, then one event over it in two lines under it.
        let mut reply = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\ndata: ".to_vec();
        reply.extend(std::iter::repeat_n(b'x', MAX_SSE_LINE_BYTES + 10));
        let e = post_stream(one_shot(reply), "/x", b"{}", T).unwrap().next_event().unwrap_err();
        assert!(matches!(e, HttpError::LineTooLong), "{e}");
        let mut reply = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n".to_vec();
        for _ in 0..2 {
            reply.extend(b"data: ");
            reply.extend(std::iter::repeat_n(b'x', MAX_SSE_LINE_BYTES / 2 + 10));
            reply.push(b'\n');
        }
        let e = post_stream(one_shot(reply), "/x", b"{}", T).unwrap().next_event().unwrap_err();
        assert!(matches!(e, HttpError::LineTooLong), "{e}");
    }

    #[test]
    fn a_non_200_status_is_an_error_with_its_body_and_heads_and_bodies_are_capped() {
        let reply = b"HTTP/1.1 400 Bad Request\r\ncontent-length: 13\r\n\r\n{\"error\":\"x\"}".to_vec();
        let e = post_stream(one_shot(reply), "/x", b"{}", T).err().unwrap();
        assert!(matches!(&e, HttpError::Status { status: 400, body } if body.contains("error")), "{e}");
        let mut reply = b"HTTP/1.1 500 Internal Server Error\r\n\r\n".to_vec();
        reply.extend(std::iter::repeat_n(b'e', 5000));
        let e = post_stream(one_shot(reply), "/x", b"{}", T).err().unwrap();
        assert!(matches!(&e, HttpError::Status { status: 500, body } if body.len() == 403), "{e}");
        let reply = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}".to_vec();
        let e = post_stream(one_shot(reply), "/x", b"{}", T).err().unwrap();
        assert!(matches!(&e, HttpError::Malformed(m) if m.contains("application/json")), "{e}");
        let mut reply = b"HTTP/1.1 200 OK\r\nx: ".to_vec();
        reply.extend(std::iter::repeat_n(b'y', MAX_HEAD_BYTES + 10));
        assert!(matches!(get(one_shot(reply), "/", T), Err(HttpError::HeadTooLong)));
        let mut reply = b"HTTP/1.1 200 OK\r\n\r\n".to_vec();
        reply.extend(std::iter::repeat_n(b'z', MAX_BODY_BYTES as usize + 1));
        assert!(matches!(get(one_shot(reply), "/", T), Err(HttpError::BodyTooLong(MAX_BODY_BYTES))));
        assert!(matches!(get(one_shot(b"SSH-2.0\r\n\r\n".to_vec()), "/", T), Err(HttpError::Malformed(_))));
        assert!(matches!(get(one_shot(Vec::new()), "/", T), Err(HttpError::Truncated(_))));
        let (status, body) = get(one_shot(b"HTTP/1.1 200 OK\r\n\r\nhello".to_vec()), "/", T).unwrap();
        assert_eq!((status, body.as_slice()), (200, &b"hello"[..]));
    }

    #[test]
    fn a_silent_server_times_out_and_other_hosts_are_refused() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let t0 = Instant::now();
        let e = get(addr, "/health", Duration::from_millis(200)).unwrap_err();
        assert!(matches!(e, HttpError::Timeout { .. }), "{e}");
        assert!(t0.elapsed() < Duration::from_secs(3));
        drop(l);
        let e = get(addr, "/health", T).unwrap_err();
        assert!(matches!(e, HttpError::Connect { .. }), "{e}");
        let e = get("192.0.2.1:80".parse().unwrap(), "/", T).unwrap_err();
        assert!(matches!(e, HttpError::NotLoopback(_)), "{e}");
    }

    #[test]
    fn a_server_that_drips_bytes_times_out_on_the_whole_exchange_not_each_read() {
        // A line every 20 ms: every read succeeds well within the deadline,
        // so only a deadline on the whole exchange stops it.
        let drip = |head: &'static [u8], line: &'static [u8]| {
            serve(move |mut s| {
                let _ = s.write_all(head);
                while s.write_all(line).is_ok() {
                    std::thread::sleep(Duration::from_millis(20));
                }
            })
        };
        let t0 = Instant::now();
        let mut s = post_stream(
            drip(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n", b":\n"),
            "/x",
            b"{}",
            Duration::from_millis(300),
        )
        .unwrap();
        let e = s.next_event().unwrap_err();
        assert!(matches!(e, HttpError::Timeout { .. }), "{e}");
        // The head never ends: each header line arrives in time, the head does not.
        let e = get(drip(b"HTTP/1.1 200 OK\r\n", b"x: y\r\n"), "/", Duration::from_millis(300)).unwrap_err();
        assert!(matches!(e, HttpError::Timeout { .. }), "{e}");
        assert!(t0.elapsed() < Duration::from_secs(3));
    }
}
