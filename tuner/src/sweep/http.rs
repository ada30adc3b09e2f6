//! A small blocking HTTP/1.1 client for the loopback servers the tuner
//! starts, and a server-sent-events reader: what `tuner sweep --served`
//! needs and nothing more (no TLS, no redirects, no keep-alive).
//!
//! Principal items: [`get`] (a whole, capped response), [`post_stream`]
//! (a `200` response whose body is read as [`SseStream`] events),
//! [`HttpError`]. Every read has a deadline and every length is capped: a
//! status line, header block, chunk-size line, SSE line and body are each
//! refused past their limit, and nothing is allocated by a length the
//! server states (a chunk size only bounds how much is read next).
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// Largest response head (status line and headers).
pub const MAX_HEAD_BYTES: usize = 64 << 10;
/// Largest body read whole ([`get`], and an error response's body).
pub const MAX_BODY_BYTES: usize = 1 << 20;
/// Largest streamed body: a completion of thousands of tokens, one chunk per
/// token with its JSON envelope, is a few MiB.
pub const MAX_STREAM_BYTES: u64 = 64 << 20;
/// Longest SSE line (one chunk's JSON, the last carrying the token ids).
pub const MAX_SSE_LINE_BYTES: usize = 4 << 20;
/// Longest chunk-size line of a chunked body (hex size plus extensions).
const MAX_CHUNK_LINE_BYTES: usize = 1024;

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
    #[error("a server-sent-events line is over {MAX_SSE_LINE_BYTES} bytes")]
    LineTooLong,
    #[error("the connection closed {0}")]
    Truncated(&'static str),
    #[error("HTTP {status}: {body}")]
    Status { status: u16, body: String },
}

/// A connection with one deadline for everything read from it.
struct Conn {
    stream: TcpStream,
    deadline: Instant,
}

impl Conn {
    fn open(addr: SocketAddr, timeout: Duration) -> Result<Conn, HttpError> {
        if !addr.ip().is_loopback() {
            return Err(HttpError::NotLoopback(addr));
        }
        let deadline = Instant::now() + timeout;
        let stream = TcpStream::connect_timeout(&addr, timeout.max(Duration::from_millis(1)))
            .map_err(|source| HttpError::Connect { addr, source })?;
        let _ = stream.set_nodelay(true);
        stream
            .set_write_timeout(Some(timeout.max(Duration::from_millis(1))))
            .map_err(|source| HttpError::Io { what: "setting a write timeout", source })?;
        Ok(Conn { stream, deadline })
    }
}

impl Read for Conn {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "deadline"));
        }
        self.stream.set_read_timeout(Some(left))?;
        self.stream.read(buf)
    }
}

fn io_err(what: &'static str, timeout: Duration) -> impl Fn(std::io::Error) -> HttpError {
    move |source| match source.kind() {
        std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock => {
            HttpError::Timeout { what, secs: timeout.as_secs_f64() }
        }
        _ => HttpError::Io { what, source },
    }
}

/// How the body of a response ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Framing {
    Length(u64),
    Chunked,
    Close,
}

/// A response's status and the headers the client needs.
#[derive(Clone, Debug)]
pub struct Head {
    pub status: u16,
    pub content_type: Option<String>,
    framing: Framing,
}

/// Reads one line of at most `cap` bytes (CRLF or LF removed). `Ok(None)`
/// at end of stream before any byte; `Err(true)` past the cap.
fn read_line(r: &mut impl BufRead, cap: usize, buf: &mut Vec<u8>) -> std::io::Result<Result<Option<()>, ()>> {
    buf.clear();
    let n = r.by_ref().take(cap as u64 + 1).read_until(b'\n', buf)?;
    if n == 0 {
        return Ok(Ok(None));
    }
    if buf.last() != Some(&b'\n') {
        // Over the cap, or the stream ended mid-line.
        return Ok(if buf.len() > cap { Err(()) } else { Ok(Some(())) });
    }
    buf.pop();
    if buf.last() == Some(&b'\r') {
        buf.pop();
    }
    Ok(Ok(Some(())))
}

/// Parses the status line and headers.
fn read_head(r: &mut impl BufRead, timeout: Duration) -> Result<Head, HttpError> {
    let io = io_err("reading the response head", timeout);
    let mut budget = MAX_HEAD_BYTES;
    let mut line = Vec::new();
    let mut next = |line: &mut Vec<u8>| -> Result<Option<String>, HttpError> {
        match read_line(r, budget, line).map_err(&io)? {
            Ok(Some(())) => {
                budget = budget.saturating_sub(line.len() + 2);
                String::from_utf8(std::mem::take(line))
                    .map(Some)
                    .map_err(|_| HttpError::Malformed("a header line is not UTF-8".into()))
            }
            Ok(None) => Ok(None),
            Err(()) => Err(HttpError::HeadTooLong),
        }
    };
    let status_line = next(&mut line)?.ok_or(HttpError::Truncated("before the response head"))?;
    let mut parts = status_line.splitn(3, ' ');
    let (version, code) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    if !version.starts_with("HTTP/1.") {
        return Err(HttpError::Malformed(format!("status line {:?}", truncate(&status_line, 80))));
    }
    let status = code
        .parse::<u16>()
        .ok()
        .filter(|s| (100..1000).contains(s))
        .ok_or_else(|| HttpError::Malformed(format!("status line {:?}", truncate(&status_line, 80))))?;
    let mut content_type = None;
    let mut length = None;
    let mut chunked = false;
    loop {
        let l = next(&mut line)?.ok_or(HttpError::Truncated("inside the response head"))?;
        if l.is_empty() {
            break;
        }
        let Some((name, value)) = l.split_once(':') else {
            return Err(HttpError::Malformed(format!("header line {:?}", truncate(&l, 80))));
        };
        let value = value.trim();
        match name.trim().to_ascii_lowercase().as_str() {
            "content-type" => content_type = Some(value.to_string()),
            "content-length" => {
                let n = value
                    .parse::<u64>()
                    .map_err(|_| HttpError::Malformed(format!("Content-Length {:?}", truncate(value, 40))))?;
                length = Some(n);
            }
            "transfer-encoding" => {
                chunked = value.split(',').any(|c| c.trim().eq_ignore_ascii_case("chunked"));
            }
            _ => {}
        }
    }
    let framing = match (chunked, length) {
        (true, _) => Framing::Chunked,
        (false, Some(n)) => Framing::Length(n),
        (false, None) => Framing::Close,
    };
    Ok(Head { status, content_type, framing })
}

fn truncate(s: &str, n: usize) -> String {
    match s.char_indices().nth(n) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s.to_string(),
    }
}

/// A response body, de-chunked, ending where its framing says.
struct Body {
    r: BufReader<Conn>,
    framing: Framing,
    /// Bytes left in the current chunk (chunked) or the body (length).
    left: u64,
    /// Chunked: the terminating zero-size chunk was read.
    done: bool,
    read: u64,
    cap: u64,
}

impl Body {
    fn new(r: BufReader<Conn>, framing: Framing, cap: u64) -> Body {
        let left = match framing {
            Framing::Length(n) => n,
            _ => 0,
        };
        Body { r, framing, left, done: false, read: 0, cap }
    }

    fn truncated(what: &str) -> std::io::Error {
        std::io::Error::new(std::io::ErrorKind::UnexpectedEof, what.to_string())
    }

    fn invalid(what: String) -> std::io::Error {
        std::io::Error::new(std::io::ErrorKind::InvalidData, what)
    }

    /// Reads the next chunk-size line; `Ok(false)` after the last chunk.
    fn next_chunk(&mut self) -> std::io::Result<bool> {
        let mut line = Vec::new();
        match read_line(&mut self.r, MAX_CHUNK_LINE_BYTES, &mut line)? {
            Ok(Some(())) => {}
            Ok(None) => return Err(Self::truncated("before the end of the chunked body")),
            Err(()) => return Err(Self::invalid("a chunk-size line is too long".into())),
        }
        let text = std::str::from_utf8(&line).map_err(|_| Self::invalid("a chunk-size line is not UTF-8".into()))?;
        let hex = text.split(';').next().unwrap_or("").trim();
        let size = u64::from_str_radix(hex, 16)
            .map_err(|_| Self::invalid(format!("chunk size {:?} is not hexadecimal", truncate(hex, 20))))?;
        if size > 0 {
            self.left = size;
            return Ok(true);
        }
        // Trailers, up to the blank line.
        let mut budget = MAX_HEAD_BYTES;
        loop {
            match read_line(&mut self.r, budget, &mut line)? {
                Ok(Some(())) if line.is_empty() => return Ok(false),
                Ok(Some(())) => budget = budget.saturating_sub(line.len() + 2),
                // A missing final CRLF after the last chunk loses nothing.
                Ok(None) => return Ok(false),
                Err(()) => return Err(Self::invalid("the chunked trailers are too long".into())),
            }
        }
    }

    /// The CRLF after a chunk's data.
    fn chunk_end(&mut self) -> std::io::Result<()> {
        let mut line = Vec::new();
        match read_line(&mut self.r, 2, &mut line)? {
            Ok(Some(())) if line.is_empty() => Ok(()),
            Ok(None) => Err(Self::truncated("after a chunk's data")),
            _ => Err(Self::invalid("a chunk's data is longer than its stated size".into())),
        }
    }
}

impl Read for Body {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if buf.is_empty() || self.done {
            return Ok(0);
        }
        if self.framing == Framing::Chunked && self.left == 0 && !self.next_chunk()? {
            self.done = true;
            return Ok(0);
        }
        if matches!(self.framing, Framing::Length(_)) && self.left == 0 {
            return Ok(0);
        }
        let want = match self.framing {
            Framing::Close => buf.len(),
            _ => buf.len().min(usize::try_from(self.left).unwrap_or(usize::MAX)),
        };
        let n = self.r.read(&mut buf[..want])?;
        if n == 0 {
            return match self.framing {
                Framing::Close => Ok(0),
                _ => Err(Self::truncated("before the end of the body")),
            };
        }
        self.read += n as u64;
        if self.read > self.cap {
            return Err(Self::invalid(format!("the body is over {} bytes", self.cap)));
        }
        if self.framing != Framing::Close {
            self.left -= n as u64;
        }
        if self.framing == Framing::Chunked && self.left == 0 {
            self.chunk_end()?;
        }
        Ok(n)
    }
}

fn body_err(timeout: Duration, cap: u64) -> impl Fn(std::io::Error) -> HttpError {
    move |e| match e.kind() {
        std::io::ErrorKind::UnexpectedEof => HttpError::Truncated("before the end of the body"),
        std::io::ErrorKind::InvalidData if e.to_string().contains("is over") => HttpError::BodyTooLong(cap),
        std::io::ErrorKind::InvalidData => HttpError::Malformed(e.to_string()),
        _ => io_err("reading the response body", timeout)(e),
    }
}

fn read_all(body: &mut Body, timeout: Duration) -> Result<Vec<u8>, HttpError> {
    let mut out = Vec::new();
    body.take(MAX_BODY_BYTES as u64 + 1).read_to_end(&mut out).map_err(body_err(timeout, MAX_BODY_BYTES as u64))?;
    if out.len() > MAX_BODY_BYTES {
        return Err(HttpError::BodyTooLong(MAX_BODY_BYTES as u64));
    }
    Ok(out)
}

fn request_bytes(method: &str, addr: SocketAddr, path: &str, body: Option<&[u8]>) -> Vec<u8> {
    let mut head =
        format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nUser-Agent: draftwise-tuner\r\n");
    if let Some(b) = body {
        head.push_str(&format!("Content-Type: application/json\r\nContent-Length: {}\r\n", b.len()));
    }
    head.push_str("\r\n");
    let mut out = head.into_bytes();
    out.extend_from_slice(body.unwrap_or_default());
    out
}

/// `GET path`: the status and the whole body (at most [`MAX_BODY_BYTES`]),
/// everything within `timeout`.
pub fn get(addr: SocketAddr, path: &str, timeout: Duration) -> Result<(u16, Vec<u8>), HttpError> {
    let mut conn = Conn::open(addr, timeout)?;
    conn.stream.write_all(&request_bytes("GET", addr, path, None)).map_err(io_err("writing the request", timeout))?;
    let mut r = BufReader::new(conn);
    let head = read_head(&mut r, timeout)?;
    let mut body = Body::new(r, head.framing, MAX_BODY_BYTES as u64);
    let bytes = read_all(&mut body, timeout)?;
    Ok((head.status, bytes))
}

/// One server-sent event's payload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SseEvent {
    /// The `data:` lines of one event, joined by newlines.
    Data(String),
    /// `data: [DONE]`, OpenAI's end-of-stream marker.
    Done,
}

/// A `text/event-stream` body, read one event at a time.
pub struct SseStream {
    body: BufReader<Body>,
    timeout: Duration,
    /// When the request's last byte was written.
    pub written_at: Instant,
}

impl SseStream {
    /// The next event; `Ok(None)` when the body ends (after `[DONE]`, or
    /// early: the caller decides whether that is a truncation).
    pub fn next_event(&mut self) -> Result<Option<SseEvent>, HttpError> {
        let err = body_err(self.timeout, MAX_STREAM_BYTES);
        let mut data: Option<String> = None;
        let mut line = Vec::new();
        loop {
            match read_line(&mut self.body, MAX_SSE_LINE_BYTES, &mut line).map_err(&err)? {
                Ok(Some(())) => {}
                // The body ended: an event without its blank line still counts.
                Ok(None) => return Ok(data.map(Self::event)),
                Err(()) => return Err(HttpError::LineTooLong),
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
    let mut conn = Conn::open(addr, timeout)?;
    let bytes = request_bytes("POST", addr, path, Some(json));
    let written_at = Instant::now();
    conn.stream.write_all(&bytes).map_err(io_err("writing the request", timeout))?;
    let mut r = BufReader::new(conn);
    let head = read_head(&mut r, timeout)?;
    if head.status != 200 {
        let mut body = Body::new(r, head.framing, MAX_BODY_BYTES as u64);
        let text = read_all(&mut body, timeout).map(|b| String::from_utf8_lossy(&b).into_owned()).unwrap_or_default();
        return Err(HttpError::Status { status: head.status, body: truncate(text.trim(), 400) });
    }
    let is_sse = head.content_type.as_deref().is_some_and(|c| c.trim_start().starts_with("text/event-stream"));
    if !is_sse {
        return Err(HttpError::Malformed(format!(
            "expected a text/event-stream body, got Content-Type {:?}",
            head.content_type.as_deref().unwrap_or("(none)")
        )));
    }
    let body = Body::new(r, head.framing, MAX_STREAM_BYTES);
    Ok(SseStream { body: BufReader::new(body), timeout, written_at })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    /// Serves one connection: reads the request head, replies `reply`, closes.
    fn one_shot(reply: Vec<u8>) -> SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        std::thread::spawn(move || {
            if let Ok((mut s, _)) = l.accept() {
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
                let _ = s.write_all(&reply);
            }
        });
        addr
    }

    const T: Duration = Duration::from_secs(5);

    #[test]
    fn a_chunked_event_stream_yields_each_event_then_done() {
        let body = "data: {\"a\":1}\n\ndata: {\"b\":\n\n: comment\nevent: x\ndata: [DONE]\n\n";
        let mut chunked = Vec::new();
        for piece in [&body[..5], &body[5..20], &body[20..]] {
            chunked.extend(format!("{:x};ext=1\r\n{piece}\r\n", piece.len()).bytes());
        }
        chunked.extend(b"0\r\n\r\n");
        let mut reply =
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n".to_vec();
        reply.extend(chunked);
        let mut s = post_stream(one_shot(reply), "/x", b"{}", T).unwrap();
        assert_eq!(s.next_event().unwrap(), Some(SseEvent::Data("{\"a\":1}".into())));
        assert_eq!(s.next_event().unwrap(), Some(SseEvent::Data("{\"b\":".into())));
        assert_eq!(s.next_event().unwrap(), Some(SseEvent::Done));
        assert_eq!(s.next_event().unwrap(), None);
    }

    #[test]
    fn a_truncated_chunked_body_is_an_error_not_an_end() {
        let reply = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n20\r\ndata: {\"a\":1}\n".to_vec();
        let mut s = post_stream(one_shot(reply), "/x", b"{}", T).unwrap();
        let e = s.next_event().unwrap_err();
        assert!(matches!(e, HttpError::Truncated(_)), "{e}");
    }

    #[test]
    fn bad_chunk_sizes_and_long_lines_are_refused_without_allocating_by_them() {
        let reply =
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n".to_vec();
        let e = post_stream(one_shot(reply), "/x", b"{}", T).unwrap().next_event().unwrap_err();
        assert!(e.to_string().contains("not hexadecimal"), "{e}");
        // A stated size of 2^64-1 only bounds the reads: the stream just ends early.
        let reply = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\nffffffffffffffff\r\ndata: 1\n\n".to_vec();
        let mut s = post_stream(one_shot(reply), "/x", b"{}", T).unwrap();
        assert_eq!(s.next_event().unwrap(), Some(SseEvent::Data("1".into())));
        assert!(matches!(s.next_event().unwrap_err(), HttpError::Truncated(_)));
        let mut reply = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\ndata: ".to_vec();
        reply.extend(std::iter::repeat_n(b'x', MAX_SSE_LINE_BYTES + 10));
        let e = post_stream(one_shot(reply), "/x", b"{}", T).unwrap().next_event().unwrap_err();
        assert!(matches!(e, HttpError::LineTooLong), "{e}");
    }

    #[test]
    fn a_non_200_status_is_an_error_with_its_body_and_heads_are_capped() {
        let reply = b"HTTP/1.1 400 Bad Request\r\ncontent-length: 13\r\n\r\n{\"error\":\"x\"}".to_vec();
        let e = post_stream(one_shot(reply), "/x", b"{}", T).err().unwrap();
        assert!(matches!(&e, HttpError::Status { status: 400, body } if body.contains("error")), "{e}");
        let mut reply = b"HTTP/1.1 200 OK\r\nx: ".to_vec();
        reply.extend(std::iter::repeat_n(b'y', MAX_HEAD_BYTES + 10));
        assert!(matches!(get(one_shot(reply), "/", T), Err(HttpError::HeadTooLong)));
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
        let e = get("192.0.2.1:80".parse().unwrap(), "/", T).unwrap_err();
        assert!(matches!(e, HttpError::NotLoopback(_)), "{e}");
    }
}
