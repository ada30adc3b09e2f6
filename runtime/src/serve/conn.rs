//! Connections: the accept loop and each connection's HTTP/1.1 exchange
//! (hyper), with the limits that keep slow or idle clients from holding the
//! server:
//!
//! - a **header timeout**: a request whose head (request line and headers)
//!   has begun but is not complete within `header_timeout` is answered 408
//!   `request_timeout` and its connection closed (slowloris);
//! - a **body timeout**: a request whose body is not complete within
//!   `body_timeout` of its head (a slow body, a `Content-Length` larger than
//!   what is sent, a chunk that never ends) is answered 408 the same way, and
//!   while its body arrives the connection can be evicted like an unfinished
//!   head: a request counts as running only once its body is in;
//! - an **idle timeout**: a keep-alive connection with no request for
//!   `idle_timeout` is closed;
//! - a **connection cap**: at `max_connections` open connections, a new one
//!   evicts the connection that has waited longest without a request
//!   running (unfinished heads and bodies first, then idle keep-alive
//!   connections), so
//!   a flood of slow clients cannot lock out a real one; when every open
//!   connection has a request running, the new one is answered 503
//!   `too_many_connections`.
//!
//! A connection's phase (idle, reading a head, running requests) is kept in
//! [`ConnState`]: the socket wrapper marks the first byte of a head, the
//! service marks a request's start, a wrapper around the request body
//! ([`Arriving`]) marks the body in progress until its end (or until the
//! handler drops it), and a guard inside the response body marks the
//! request's end (a streamed response runs until its last byte is written).

use super::error::ApiError;
use super::metrics::Stats;
use axum::Router;
use axum::body::{Body, Bytes};
use http_body::{Frame, SizeHint};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use std::collections::HashMap;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, watch};
use tokio::task::JoinSet;

/// The connection limits (`runtime serve` flags).
#[derive(Clone, Copy, Debug)]
pub struct ConnLimits {
    pub header_timeout: Duration,
    pub body_timeout: Duration,
    pub idle_timeout: Duration,
    pub max_connections: usize,
    /// `--half-close`: a client's end of input (`shutdown(SHUT_WR)`) after a
    /// complete request is not its leaving; its response is still written.
    /// Off by default: then the end of input cancels the request at once,
    /// which is what frees the engine when a client gives up (a closed and a
    /// half-closed client look the same until a byte is written to them).
    pub half_close: bool,
}

/// Largest request head hyper buffers (request line and headers), bytes.
const MAX_HEAD_BYTES: usize = 64 * 1024;

/// A connection with a request running re-checks its phase this often.
const RECHECK: Duration = Duration::from_secs(1);

/// How long a refusal may take to write before the connection is dropped.
const REFUSAL_WRITE: Duration = Duration::from_secs(1);

/// After a refusal, unread request bytes are drained this long before the
/// socket closes, so the client reads the refusal instead of a reset.
const REFUSAL_DRAIN: Duration = Duration::from_millis(250);

/// One connection's phase, shared by its socket, its service and the registry.
struct ConnState {
    epoch: Instant,
    /// Requests on this connection whose response is not finished.
    active: AtomicUsize,
    /// When the first byte of a pending request head arrived (ms since
    /// `epoch`, plus one); 0: no head pending.
    head_since: AtomicU64,
    /// When the running request's head was read, while its body is still
    /// arriving (ms since `epoch`, plus one); 0: no body pending.
    body_since: AtomicU64,
    /// When the connection last became idle (ms since `epoch`, plus one).
    idle_since: AtomicU64,
    /// The registry evicted this connection to admit a new one.
    evict: Notify,
}

impl ConnState {
    fn new(epoch: Instant) -> Self {
        let s = ConnState {
            epoch,
            active: AtomicUsize::new(0),
            head_since: AtomicU64::new(0),
            body_since: AtomicU64::new(0),
            idle_since: AtomicU64::new(0),
            evict: Notify::new(),
        };
        s.idle_since.store(s.now_ms(), Ordering::SeqCst);
        s
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX - 1) + 1
    }

    /// Bytes arrived: with no request running, they begin a request head.
    fn on_bytes(&self) {
        if self.active.load(Ordering::SeqCst) == 0 && self.head_since.load(Ordering::SeqCst) == 0 {
            self.head_since.store(self.now_ms(), Ordering::SeqCst);
        }
    }

    /// (phase rank, since): the eviction order, the oldest unfinished head
    /// or body first, then the oldest idle connection; `None` while a
    /// request whose body is in runs.
    fn eviction_key(&self) -> Option<(u8, u64)> {
        if let b @ 1.. = self.body_since.load(Ordering::SeqCst) {
            return Some((0, b));
        }
        if self.active.load(Ordering::SeqCst) > 0 {
            return None;
        }
        match self.head_since.load(Ordering::SeqCst) {
            0 => Some((1, self.idle_since.load(Ordering::SeqCst))),
            h => Some((0, h)),
        }
    }

    /// Which limit, if any, this connection has passed; else how long until
    /// the next one could pass.
    fn check(&self, limits: &ConnLimits) -> Result<Duration, Expired> {
        let now = self.now_ms();
        let body = self.body_since.load(Ordering::SeqCst);
        let (since, limit, expired) = match self.eviction_key() {
            _ if body != 0 => (body, limits.body_timeout, Expired::Body),
            None => return Ok(RECHECK),
            Some((0, h)) => (h, limits.header_timeout, Expired::Head),
            Some((_, i)) => (i, limits.idle_timeout, Expired::Idle),
        };
        let waited = Duration::from_millis(now.saturating_sub(since));
        if waited >= limit { Err(expired) } else { Ok((limit - waited).min(RECHECK)) }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Expired {
    Head,
    Body,
    Idle,
}

/// Marks a request running on its connection until dropped (it travels in
/// the response body, so a stream counts until its last byte).
struct Active(Arc<ConnState>);

impl Active {
    fn start(state: Arc<ConnState>) -> Self {
        state.active.fetch_add(1, Ordering::SeqCst);
        state.head_since.store(0, Ordering::SeqCst);
        Active(state)
    }
}

impl Drop for Active {
    fn drop(&mut self) {
        let s = &self.0;
        s.idle_since.store(s.now_ms(), Ordering::SeqCst);
        s.active.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A response body that holds its request's [`Active`] mark.
struct Guarded {
    inner: Body,
    _active: Active,
}

impl http_body::Body for Guarded {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.get_mut().inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        http_body::Body::is_end_stream(&self.inner)
    }

    fn size_hint(&self) -> SizeHint {
        http_body::Body::size_hint(&self.inner)
    }
}

/// A request body as the handlers see it: marks the body in progress on
/// its connection ([`ConnState::body_since`]) from the head until its last
/// frame, an error, or the handler dropping it, so that the body timeout
/// and eviction apply while it arrives.
struct Arriving {
    inner: Incoming,
    state: Arc<ConnState>,
    pending: bool,
}

impl Arriving {
    fn new(inner: Incoming, state: Arc<ConnState>) -> Self {
        let pending = !http_body::Body::is_end_stream(&inner);
        if pending {
            state.body_since.store(state.now_ms(), Ordering::SeqCst);
        }
        Arriving { inner, state, pending }
    }

    fn finish(&mut self) {
        if self.pending {
            self.pending = false;
            self.state.body_since.store(0, Ordering::SeqCst);
        }
    }
}

impl Drop for Arriving {
    fn drop(&mut self) {
        self.finish();
    }
}

impl http_body::Body for Arriving {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = self.get_mut();
        let r = ready!(Pin::new(&mut this.inner).poll_frame(cx));
        if !matches!(r, Some(Ok(_))) || http_body::Body::is_end_stream(&this.inner) {
            this.finish();
        }
        Poll::Ready(r)
    }

    fn is_end_stream(&self) -> bool {
        http_body::Body::is_end_stream(&self.inner)
    }

    fn size_hint(&self) -> SizeHint {
        http_body::Body::size_hint(&self.inner)
    }
}

/// The socket as hyper sees it: shared, so a refusal can still be written
/// after hyper's connection is dropped, and watched for the first byte of
/// each request head.
struct Socket {
    stream: Arc<TcpStream>,
    state: Arc<ConnState>,
}

impl AsyncRead for Socket {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        loop {
            ready!(self.stream.poll_read_ready(cx))?;
            match self.stream.try_read(buf.initialize_unfilled()) {
                Ok(n) => {
                    buf.advance(n);
                    if n > 0 {
                        self.state.on_bytes();
                    }
                    return Poll::Ready(Ok(()));
                }
                // Readiness was cleared; the next poll registers the waker.
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
}

impl AsyncWrite for Socket {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        loop {
            ready!(self.stream.poll_write_ready(cx))?;
            match self.stream.try_write(buf) {
                Ok(n) => return Poll::Ready(Ok(n)),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    /// The socket closes when the connection's task drops its last handle.
    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// The open connections, for the cap and eviction.
struct Registry {
    epoch: Instant,
    conns: Mutex<HashMap<u64, Arc<ConnState>>>,
}

enum Admit {
    Yes(Arc<ConnState>),
    /// Every open connection has a request running.
    Full,
}

impl Registry {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<ConnState>>> {
        self.conns.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn admit(&self, id: u64, max: usize, stats: &Stats) -> Admit {
        let mut m = self.lock();
        if m.len() >= max {
            let victim = m.iter().filter_map(|(&k, s)| s.eviction_key().map(|key| (key, k))).min().map(|(_, k)| k);
            match victim.and_then(|k| m.remove(&k)) {
                Some(s) => {
                    s.evict.notify_one();
                    stats.evicted.fetch_add(1, Ordering::Relaxed);
                }
                None => return Admit::Full,
            }
        }
        let s = Arc::new(ConnState::new(self.epoch));
        m.insert(id, s.clone());
        stats.connections.store(m.len() as u64, Ordering::Relaxed);
        Admit::Yes(s)
    }

    fn remove(&self, id: u64, stats: &Stats) {
        let mut m = self.lock();
        m.remove(&id);
        stats.connections.store(m.len() as u64, Ordering::Relaxed);
    }
}

/// Accepts connections until `shutdown` turns true, then lets each finish
/// its running requests (hyper's graceful shutdown) and returns.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: ConnLimits,
    stats: Arc<Stats>,
    mut shutdown: watch::Receiver<bool>,
) -> io::Result<()> {
    let registry = Arc::new(Registry { epoch: Instant::now(), conns: Mutex::new(HashMap::new()) });
    let mut tasks = JoinSet::new();
    let mut next_id = 0u64;
    let for_connections = shutdown.clone();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok((s, a)) => (s, a.ip()),
                    Err(e) => {
                        // Out of file descriptors and the like: back off, keep serving.
                        tracing::warn!("accepting a connection: {e}");
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        continue;
                    }
                };
                let _ = stream.set_nodelay(true);
                next_id += 1;
                match registry.admit(next_id, limits.max_connections, &stats) {
                    Admit::Yes(state) => {
                        let c = Connection {
                            id: next_id,
                            peer,
                            stream: Arc::new(stream),
                            state,
                            router: router.clone(),
                            limits,
                            stats: stats.clone(),
                            registry: registry.clone(),
                        };
                        tasks.spawn(c.run(for_connections.clone()));
                    }
                    Admit::Full => {
                        stats.connections_refused.fetch_add(1, Ordering::Relaxed);
                        let e = ApiError::too_many_connections(limits.max_connections);
                        tasks.spawn(async move { refuse(&stream, &e).await });
                    }
                }
                while tasks.try_join_next().is_some() {}
            }
            () = stopped(&mut shutdown) => break,
        }
    }
    drop(listener);
    while tasks.join_next().await.is_some() {}
    Ok(())
}

/// Returns once `shutdown` is true (or its sender is gone).
async fn stopped(shutdown: &mut watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|s| *s).await.map(|_| ());
}

struct Connection {
    id: u64,
    /// The client's address: its requests' share of the queue is counted by it.
    peer: std::net::IpAddr,
    stream: Arc<TcpStream>,
    state: Arc<ConnState>,
    router: Router,
    limits: ConnLimits,
    stats: Arc<Stats>,
    registry: Arc<Registry>,
}

/// The address a request came from (a request extension set per
/// connection), which [`crate::serve::routes`] counts each client's share
/// of the queue by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Peer(pub std::net::IpAddr);

/// How a connection ended.
enum End {
    /// The client closed it, or hyper finished (shutdown, an error).
    Done,
    Expired(Expired),
    Evicted,
}

impl Connection {
    async fn run(self, mut shutdown: watch::Receiver<bool>) {
        let io = TokioIo::new(Socket { stream: self.stream.clone(), state: self.state.clone() });
        let (state, router, peer) = (self.state.clone(), self.router.clone(), self.peer);
        let service = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
            let active = Active::start(state.clone());
            let mut req = req.map(|body| Arriving::new(body, state.clone()));
            req.extensions_mut().insert(Peer(peer));
            let mut router = router.clone();
            async move {
                let r = tower_service::Service::call(&mut router, req).await;
                r.map(|resp| resp.map(|inner| Body::new(Guarded { inner, _active: active })))
            }
        });
        // Boxed, so it can be dropped (with its buffers) before a refusal is written.
        let mut conn = Box::pin(
            hyper::server::conn::http1::Builder::new()
                .keep_alive(true)
                .half_close(self.limits.half_close)
                .header_read_timeout(None)
                .max_buf_size(MAX_HEAD_BYTES)
                .serve_connection(io, service),
        );
        let mut closing = false;
        let end = loop {
            let wait = match self.state.check(&self.limits) {
                Ok(wait) => wait,
                Err(expired) => break End::Expired(expired),
            };
            tokio::select! {
                r = conn.as_mut() => {
                    if let Err(e) = r {
                        tracing::debug!("connection ended: {e}");
                    }
                    break End::Done;
                }
                _ = self.state.evict.notified() => break End::Evicted,
                _ = shutdown.changed(), if !closing => {
                    closing = true;
                    conn.as_mut().graceful_shutdown();
                }
                _ = tokio::time::sleep(wait) => {}
            }
        };
        // Read before the request is dropped (dropping its body clears the mark).
        let unfinished =
            self.state.head_since.load(Ordering::SeqCst) != 0 || self.state.body_since.load(Ordering::SeqCst) != 0;
        // Whatever hyper held of the request is dropped with it.
        drop(conn);
        self.registry.remove(self.id, &self.stats);
        let s = &self.stats;
        match end {
            End::Done => {}
            End::Expired(Expired::Idle) => {
                s.idle_closed.fetch_add(1, Ordering::Relaxed);
            }
            End::Expired(Expired::Head) => {
                s.header_timeouts.fetch_add(1, Ordering::Relaxed);
                refuse(&self.stream, &ApiError::header_timeout(self.limits.header_timeout)).await;
            }
            End::Expired(Expired::Body) => {
                s.body_timeouts.fetch_add(1, Ordering::Relaxed);
                refuse(&self.stream, &ApiError::body_timeout(self.limits.body_timeout)).await;
            }
            End::Evicted => {
                // A head or body in progress is told why; an idle connection just closes.
                if unfinished {
                    refuse(&self.stream, &ApiError::evicted()).await;
                }
            }
        }
    }
}

/// Writes `e` as a complete HTTP/1.1 response that closes the connection,
/// then drains what the client sent for a moment (closing a socket with
/// unread bytes resets it, and the client might lose the response).
async fn refuse(stream: &TcpStream, e: &ApiError) {
    let body = e.body().to_string();
    let retry = if e.status.as_u16() == 503 || e.status.as_u16() == 429 { "retry-after: 1\r\n" } else { "" };
    let response = format!(
        "HTTP/1.1 {} {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n{retry}\r\n{body}",
        e.status.as_u16(),
        e.status.canonical_reason().unwrap_or(""),
        body.len()
    );
    let write = async {
        let mut bytes = response.as_bytes();
        while !bytes.is_empty() {
            stream.writable().await?;
            match stream.try_write(bytes) {
                Ok(n) => bytes = &bytes[n..],
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
        }
        Ok::<(), io::Error>(())
    };
    if !matches!(tokio::time::timeout(REFUSAL_WRITE, write).await, Ok(Ok(()))) {
        return;
    }
    let drain = async {
        let mut buf = [0u8; 4096];
        loop {
            if stream.readable().await.is_err() {
                return;
            }
            match stream.try_read(&mut buf) {
                Ok(0) => return,
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(_) => return,
            }
        }
    };
    let _ = tokio::time::timeout(REFUSAL_DRAIN, drain).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> ConnLimits {
        ConnLimits {
            header_timeout: Duration::from_millis(50),
            body_timeout: Duration::from_millis(70),
            idle_timeout: Duration::from_millis(80),
            max_connections: 2,
            half_close: false,
        }
    }

    #[test]
    fn a_connection_expires_by_phase() {
        let s = ConnState::new(Instant::now());
        assert!(s.check(&limits()).is_ok());
        s.on_bytes();
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(s.check(&limits()), Err(Expired::Head));
        let a = Active::start(Arc::new(ConnState::new(Instant::now())));
        std::thread::sleep(Duration::from_millis(100));
        // A running request never expires, and bytes then are its body.
        a.0.on_bytes();
        assert!(a.0.check(&limits()).is_ok());
        let st = a.0.clone();
        drop(a);
        assert!(st.check(&limits()).is_ok());
        std::thread::sleep(Duration::from_millis(90));
        assert_eq!(st.check(&limits()), Err(Expired::Idle));
    }

    #[test]
    fn a_body_in_progress_expires_and_can_be_evicted_though_its_request_has_started() {
        let a = Active::start(Arc::new(ConnState::new(Instant::now())));
        let st = a.0.clone();
        // Head read, body pending (what `Arriving::new` marks).
        st.body_since.store(st.now_ms(), Ordering::SeqCst);
        assert!(matches!(st.eviction_key(), Some((0, _))), "{:?}", st.eviction_key());
        assert!(st.check(&limits()).is_ok());
        std::thread::sleep(Duration::from_millis(80));
        assert_eq!(st.check(&limits()), Err(Expired::Body));
        // Body in: the request runs, and a running request neither expires nor is evicted.
        st.body_since.store(0, Ordering::SeqCst);
        assert_eq!(st.eviction_key(), None);
        assert!(st.check(&limits()).is_ok());
        drop(a);
    }

    #[test]
    fn the_cap_evicts_unfinished_heads_first_and_never_a_running_request() {
        let stats = Stats::default();
        let r = Registry { epoch: Instant::now(), conns: Mutex::new(HashMap::new()) };
        let Admit::Yes(a) = r.admit(1, 2, &stats) else { panic!("room for the first") };
        let Admit::Yes(b) = r.admit(2, 2, &stats) else { panic!("room for the second") };
        // b began a head; a is idle (and older): b goes first.
        b.on_bytes();
        let Admit::Yes(_c) = r.admit(3, 2, &stats) else { panic!("evicts") };
        assert!(!r.lock().contains_key(&2) && r.lock().contains_key(&1));
        let _ = a;
        // With every connection running a request, a new one is refused.
        let _runs: Vec<Active> = r.lock().values().map(|s| Active::start(s.clone())).collect();
        assert!(matches!(r.admit(4, 2, &stats), Admit::Full));
        assert_eq!(stats.evicted.load(Ordering::Relaxed), 1);
    }
}
