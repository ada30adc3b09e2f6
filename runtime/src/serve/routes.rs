//! The HTTP side: handlers for each endpoint, the OpenAI response and
//! chunk bodies, and the server-sent-event stream.

use super::conn::Peer;
use super::error::ApiError;
use super::metrics::Stats;
use super::parse::{self, Endpoint};
use super::queue::{PushError, Queue};
use super::worker::{Finished, Job, Msg};
use crate::engine::{Engine, FinishReason};
use crate::events::ServedTimings;
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, get, post};
use futures_core::Stream;
use serde_json::{Value, json};
use std::collections::VecDeque;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Instant;
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};

/// What every handler shares.
pub struct App {
    pub engine: Arc<Engine>,
    pub queue: Arc<Queue<Job>>,
    pub stats: Arc<Stats>,
    /// The name clients pass as `model`.
    pub model_id: String,
    /// `GET /v1/draftwise/config`.
    pub config: Value,
    pub max_body_bytes: usize,
    /// Turns to tokenize (`--max-preparing`); as many again may wait for one.
    pub preparing: tokio::sync::Semaphore,
    pub max_preparing: usize,
    /// Requests that may wait for a turn (`--max-queue`: a waiting request
    /// holds only its parsed body, bounded by the body and connection caps).
    pub max_prepare_waiting: usize,
    /// Requests waiting for a turn to tokenize.
    pub prepare_waiting: AtomicUsize,
    /// Each client's waiting requests (`--max-waiting-per-client`).
    pub shares: Arc<super::share::ClientShares>,
    /// `--request-timeout-secs`.
    pub request_timeout: std::time::Duration,
    /// `--api-key`: required as `Authorization: Bearer KEY` on the API endpoints.
    pub api_key: Option<String>,
    /// Unix time the server started (`created` of the model).
    pub started: u64,
    /// OpenAI's `system_fingerprint`: this build and its kernels.
    pub fingerprint: String,
    pub next_id: AtomicU64,
    /// Request ids made for requests without a usable `X-Request-Id`.
    pub next_request: AtomicU64,
    /// Unknown request fields: ignored and logged, or refused (`--strict-params`).
    pub unknown_fields: parse::UnknownFields,
    /// `--allowed-origins`: browser origins answered with CORS headers
    /// (`*` is any); empty: no CORS headers, preflights get no answer of their own.
    pub allowed_origins: Vec<String>,
    pub shutting_down: AtomicBool,
}

/// The paths anyone may read, with or without `--api-key`: the liveness
/// probe and the Prometheus scrape (neither names a path, a key or a
/// prompt). Every other path, the unknown ones included, is behind the key.
pub const PUBLIC_PATHS: [&str; 2] = ["/health", "/metrics"];

/// Every route the server answers, as `(path, methods)`: [`router`] is
/// built from this list alone, so a test that walks it walks the router.
pub fn endpoints() -> Vec<(&'static str, MethodRouter<Arc<App>>)> {
    vec![
        ("/health", get(health)),
        ("/metrics", get(metrics)),
        ("/v1/models", get(models)),
        ("/v1/draftwise/config", get(config)),
        ("/v1/completions", post(generation::<false>)),
        ("/v1/chat/completions", post(generation::<true>)),
        ("/completion", post(llama_completion)),
        ("/tokenize", post(tokenizer_endpoint::<false>)),
        ("/detokenize", post(tokenizer_endpoint::<true>)),
        ("/version", get(version)),
    ]
}

/// The routes of [`endpoints`]: those of [`PUBLIC_PATHS`] as they are, every
/// other one (and the fallback for unknown paths) behind one layer that
/// checks `--api-key` before any handler runs or any body is read.
pub fn router(app: Arc<App>) -> Router {
    let (mut public, mut guarded) = (Router::new(), Router::new());
    for (path, methods) in endpoints() {
        if PUBLIC_PATHS.contains(&path) {
            public = public.route(path, methods);
        } else {
            guarded = guarded.route(path, methods);
        }
    }
    let guarded = guarded
        .fallback(|method: axum::http::Method, uri: axum::http::Uri| async move { not_found(&method, uri.path()) })
        .method_not_allowed_fallback(|| async { ApiError::method_not_allowed() })
        .layer(axum::middleware::from_fn_with_state(app.clone(), require_key));
    public
        .method_not_allowed_fallback(|| async { ApiError::method_not_allowed() })
        .merge(guarded)
        .layer(axum::middleware::from_fn_with_state(app.clone(), cors))
        .layer(axum::middleware::from_fn_with_state(app.clone(), access_log))
        .with_state(app)
}

/// Every route of [`endpoints`] with its method, as a 404 names them.
pub const ROUTES: &[(&str, &str)] = &[
    ("GET", "/health"),
    ("GET", "/metrics"),
    ("GET", "/v1/models"),
    ("GET", "/v1/draftwise/config"),
    ("POST", "/v1/completions"),
    ("POST", "/v1/chat/completions"),
    ("POST", "/completion"),
    ("POST", "/tokenize"),
    ("POST", "/detokenize"),
    ("GET", "/version"),
];

/// A path no route answers: the 404 names the routes that exist.
fn not_found(method: &axum::http::Method, path: &str) -> ApiError {
    let shown: String = path.chars().take(128).collect();
    let routes: Vec<String> = ROUTES.iter().map(|(m, p)| format!("{m} {p}")).collect();
    let mut e = ApiError::not_found(&format!("{method} {shown:?}"));
    e.message = format!("{}; the routes are: {}", e.message, routes.join(", "));
    e
}

/// A request's id: the client's `X-Request-Id` when it is usable, else one
/// made here; echoed on the response and named in every log line about it.
#[derive(Clone, Debug)]
pub struct RequestId(pub String);

/// The header a request id travels in, both ways.
pub const REQUEST_ID_HEADER: &str = "x-request-id";
/// A client's id is used when it is 1 to this many visible ASCII characters.
pub const MAX_REQUEST_ID_BYTES: usize = 128;

fn client_request_id(h: &HeaderMap) -> Option<String> {
    let v = h.get(REQUEST_ID_HEADER)?.as_bytes();
    let usable = !v.is_empty() && v.len() <= MAX_REQUEST_ID_BYTES && v.iter().all(|b| (0x21..=0x7e).contains(b));
    usable.then(|| String::from_utf8_lossy(v).into_owned())
}

/// The outermost layer: gives the request its id, and writes one access
/// line for every request, refusals (401, 404, 4xx of the body) included:
/// client, method, path, status, id and the time to the response's head
/// (a stream's body follows it).
async fn access_log(State(app): State<Arc<App>>, mut req: Request, next: Next) -> Response {
    let start = Instant::now();
    let id = client_request_id(req.headers())
        .unwrap_or_else(|| format!("req-{:x}-{}", app.started, app.next_request.fetch_add(1, Ordering::Relaxed)));
    // The client's text, escaped and bounded for the log line.
    let method = super::log_text::log_text(req.method().as_str(), super::log_text::MAX_LOGGED_CHARS);
    let path = super::log_text::log_text(req.uri().path(), 256);
    let client = req.extensions().get::<Peer>().map_or_else(|| "-".to_string(), |p| p.0.to_string());
    req.extensions_mut().insert(RequestId(id.clone()));
    let mut resp = next.run(req).await;
    if let Ok(v) = axum::http::HeaderValue::from_str(&id) {
        resp.headers_mut().insert(REQUEST_ID_HEADER, v);
    }
    tracing::info!(
        target: "draftwise::access",
        client = %client,
        method = %method,
        path = %path,
        status = resp.status().as_u16(),
        request_id = %id,
        ms = format_args!("{:.1}", start.elapsed().as_secs_f64() * 1e3),
        "request"
    );
    resp
}

/// `--allowed-origins`: a browser's request from an allowed origin gets
/// `Access-Control-Allow-Origin`; its preflight (`OPTIONS` with
/// `Access-Control-Request-Method`) is answered 204 here, before the key
/// check (browsers send no credentials on a preflight). Other origins get
/// no CORS headers, which is the browser's refusal.
async fn cors(State(app): State<Arc<App>>, req: Request, next: Next) -> Response {
    let origin = req.headers().get(header::ORIGIN).and_then(|v| v.to_str().ok()).map(str::to_string);
    let allowed = origin.filter(|o| app.allowed_origins.iter().any(|a| a == "*" || a == o));
    let Some(origin) = allowed else { return next.run(req).await };
    let preflight = req.method() == axum::http::Method::OPTIONS
        && req.headers().contains_key(header::ACCESS_CONTROL_REQUEST_METHOD);
    let mut resp = if preflight { StatusCode::NO_CONTENT.into_response() } else { next.run(req).await };
    let h = resp.headers_mut();
    let value = if app.allowed_origins.iter().any(|a| a == "*") { "*".to_string() } else { origin };
    if let Ok(v) = axum::http::HeaderValue::from_str(&value) {
        h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, v);
        h.insert(header::VARY, axum::http::HeaderValue::from_static("origin"));
        h.insert(header::ACCESS_CONTROL_EXPOSE_HEADERS, axum::http::HeaderValue::from_static(REQUEST_ID_HEADER));
        if preflight {
            h.insert(header::ACCESS_CONTROL_ALLOW_METHODS, axum::http::HeaderValue::from_static("GET, POST, OPTIONS"));
            h.insert(
                header::ACCESS_CONTROL_ALLOW_HEADERS,
                axum::http::HeaderValue::from_static("authorization, content-type, x-request-id"),
            );
            h.insert(header::ACCESS_CONTROL_MAX_AGE, axum::http::HeaderValue::from_static("600"));
        }
    }
    resp
}

/// `GET /version`: this build's identity (vLLM has `/version`; the fields
/// are `runtime build-info --json`'s).
async fn version() -> Response {
    let b = crate::build_info::BuildInfo::current();
    json_response(
        StatusCode::OK,
        &json!({"version": env!("CARGO_PKG_VERSION"), "build": serde_json::to_value(&b).unwrap_or_default()}),
    )
}

/// `POST /tokenize` (`DETOKENIZE` false; vLLM's and llama-server's): the ids the completions
/// endpoint would run for `prompt` (llama-server: `content`), or for
/// `messages` through the chat template with the generation prompt, as
/// the chat endpoint would. Bounded like a completion's prompt.
/// `POST /detokenize` (`DETOKENIZE` true): `{"tokens": [ids]}` back to
/// text, answered as both vLLM's `prompt` and llama-server's `content`.
async fn tokenizer_endpoint<const DETOKENIZE: bool>(
    State(app): State<Arc<App>>,
    id: Option<axum::Extension<RequestId>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let r = async {
        let bytes = read_body(&headers, body, app.max_body_bytes).await?;
        let id = id.as_ref().map(|e| &e.0);
        let reply = if DETOKENIZE { detokenize(&app, id, &bytes).await? } else { tokenize(&app, id, &bytes).await? };
        Ok::<_, ApiError>(json_response(StatusCode::OK, &reply))
    }
    .await;
    answer(&app, r)
}

async fn tokenize(app: &App, id: Option<&RequestId>, bytes: &[u8]) -> Result<serde_json::Value, ApiError> {
    let t = parse::parse_tokenize(bytes, &app.model_id, app.unknown_fields)?;
    log_ignored(id, &t.ignored);
    let ids = off_the_workers(app, "tokenizing", move |engine| t.run(engine)).await?;
    Ok(json!({"tokens": ids, "count": ids.len(), "max_model_len": app.engine.loaded.info.context_length}))
}

async fn detokenize(app: &App, id: Option<&RequestId>, bytes: &[u8]) -> Result<serde_json::Value, ApiError> {
    let (ids, ignored) =
        parse::parse_detokenize(bytes, &app.model_id, app.engine.loaded.info.vocab, app.unknown_fields)?;
    log_ignored(id, &ignored);
    let text = off_the_workers(app, "detokenizing", move |engine| {
        engine
            .loaded
            .tokenizer
            .decode(&ids)
            .map_err(|e| ApiError::invalid(format!("tokens: {e}"), Some("tokens"), "invalid_value"))
    })
    .await?;
    Ok(json!({"prompt": text, "content": text}))
}

/// Unknown fields a request sent, accepted and ignored: one warning line,
/// their names escaped and the list bounded (they are the client's text).
fn log_ignored(id: Option<&RequestId>, ignored: &[String]) {
    if !ignored.is_empty() {
        tracing::warn!(
            request_id = %id.map_or("-", |r| r.0.as_str()),
            n = ignored.len(),
            fields = %super::log_text::field_list(ignored),
            "ignored request fields this server does not know (--strict-params refuses them)"
        );
    }
}

/// The layer of [`router`]: a request without the key never reaches a handler.
async fn require_key(State(app): State<Arc<App>>, req: Request, next: Next) -> Response {
    match authorized(&app, req.headers()) {
        Ok(()) => next.run(req).await,
        Err(e) => e.into_response(),
    }
}

fn json_response(status: StatusCode, v: &Value) -> Response {
    (status, [(header::CONTENT_TYPE, "application/json")], v.to_string()).into_response()
}

fn unix_now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

async fn health(State(app): State<Arc<App>>) -> Response {
    let s = &app.stats;
    let status = if app.shutting_down.load(Ordering::Relaxed) { "shutting_down" } else { "ok" };
    let code = if status == "ok" { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    json_response(
        code,
        &json!({
            "status": status,
            "model": app.model_id,
            "running": s.running.load(Ordering::SeqCst) > 0,
            "slots": {
                "in_use": s.running.load(Ordering::SeqCst),
                "total": app.config["server"]["parallel"].as_u64().unwrap_or(1),
            },
            "waiting": app.queue.len(),
            "queue_capacity": app.queue.capacity(),
            "requests": {
                "completed": s.completed.load(Ordering::Relaxed),
                "cancelled": s.cancelled.load(Ordering::Relaxed),
                "failed": s.failed.load(Ordering::Relaxed),
                "rejected": s.rejected.load(Ordering::Relaxed),
            },
        }),
    )
}

async fn metrics(State(app): State<Arc<App>>) -> Response {
    let spec = &app.config;
    let g = super::metrics::Gauges {
        waiting: app.queue.len(),
        running: app.stats.running.load(Ordering::SeqCst),
        slots: app.config["server"]["parallel"].as_u64().unwrap_or(1) as usize,
        drafter: spec["drafter"].as_str().unwrap_or("none"),
        width: spec["width"].as_u64().unwrap_or(0) as usize,
        entry_emitted_per_verify: spec["entry_emitted_per_verify"].as_f64(),
        version: env!("CARGO_PKG_VERSION"),
        commit: spec["build"]["git_commit"].as_str().unwrap_or("unknown"),
        kernels: spec["kernel_family"].as_str().unwrap_or("unknown"),
    };
    let text = super::metrics::render(&app.stats, &g);
    (StatusCode::OK, [(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], text).into_response()
}

/// `--api-key`: the request's `Authorization: Bearer` must match it
/// (checked by [`require_key`], the one layer every guarded route is behind).
fn authorized(app: &App, headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(key) = &app.api_key else { return Ok(()) };
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    // Compared in time independent of where the first difference is.
    let same = given.is_some_and(|g| {
        g.len() == key.len() && g.bytes().zip(key.bytes()).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
    });
    if same {
        Ok(())
    } else {
        app.stats.unauthorized.fetch_add(1, Ordering::Relaxed);
        Err(ApiError::unauthorized())
    }
}

async fn models(State(app): State<Arc<App>>) -> Response {
    let info = &app.engine.loaded.info;
    json_response(
        StatusCode::OK,
        &json!({
            "object": "list",
            "data": [{
                "id": app.model_id,
                "object": "model",
                "created": app.started,
                "owned_by": "draftwise",
                "max_model_len": info.context_length,
            }],
        }),
    )
}

async fn config(State(app): State<Arc<App>>) -> Response {
    json_response(StatusCode::OK, &app.config)
}

/// `POST /v1/completions` (`CHAT` false) and `POST /v1/chat/completions`
/// (`CHAT` true): one handler, the endpoint a type parameter.
async fn generation<const CHAT: bool>(
    State(app): State<Arc<App>>,
    peer: Option<axum::Extension<Peer>>,
    id: Option<axum::Extension<RequestId>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let endpoint = if CHAT { Endpoint::Chat } else { Endpoint::Completions };
    let id = id.map(|e| e.0);
    answer(&app, handle(app.clone(), endpoint, peer.map(|p| p.0), id, headers, body).await)
}

/// `POST /completion`: llama-server's native endpoint, in its shape (`llama.rs`).
async fn llama_completion(
    State(app): State<Arc<App>>,
    peer: Option<axum::Extension<Peer>>,
    id: Option<axum::Extension<RequestId>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let id = id.map(|e| e.0);
    answer(&app, handle(app.clone(), Endpoint::Llama, peer.map(|p| p.0), id, headers, body).await)
}

/// The response, counting refusals of bad input for `/metrics`.
fn answer(app: &App, r: Result<Response, ApiError>) -> Response {
    r.unwrap_or_else(|e| {
        if e.status.is_client_error() && !matches!(e.status.as_u16(), 401 | 408 | 429) {
            app.stats.metrics.invalid.fetch_add(1, Ordering::Relaxed);
        }
        e.into_response()
    })
}

/// A turn to tokenize: waits behind at most `max_prepare_waiting` others, else 429.
async fn prepare_turn(app: &App) -> Result<tokio::sync::SemaphorePermit<'_>, ApiError> {
    if let Ok(p) = app.preparing.try_acquire() {
        return Ok(p);
    }
    let waiting = app.prepare_waiting.fetch_add(1, Ordering::SeqCst);
    let turn = if waiting >= app.max_prepare_waiting { None } else { app.preparing.acquire().await.ok() };
    app.prepare_waiting.fetch_sub(1, Ordering::SeqCst);
    turn.ok_or_else(|| {
        app.stats.too_many_preparing.fetch_add(1, Ordering::Relaxed);
        ApiError::too_many_preparing(app.max_preparing, app.max_prepare_waiting)
    })
}

/// Tokenizer work (a long prompt takes a while) runs off the async workers,
/// a few at a time (each holds its tokenization in memory): a turn of
/// [`prepare_turn`], then `f` on a blocking thread.
async fn off_the_workers<T: Send + 'static>(
    app: &App,
    what: &'static str,
    f: impl FnOnce(&Engine) -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    let _turn = prepare_turn(app).await?;
    let engine = app.engine.clone();
    tokio::task::spawn_blocking(move || f(&engine)).await.map_err(|e| ApiError::internal(format!("{what}: {e}")))?
}

/// Reads at most `limit` bytes of body; a longer one is refused as soon as
/// it is known to be longer (by its Content-Length, or while reading).
async fn read_body(headers: &HeaderMap, body: Body, limit: usize) -> Result<Bytes, ApiError> {
    let declared =
        headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(ApiError::too_large(limit));
    }
    let mut stream = body.into_data_stream();
    let mut buf: Vec<u8> = Vec::new();
    while let Some(chunk) = std::future::poll_fn(|cx| Pin::new(&mut stream).poll_next(cx)).await {
        let chunk = chunk.map_err(|e| ApiError::invalid(format!("reading the body: {e}"), None, "invalid_body"))?;
        if buf.len() + chunk.len() > limit {
            return Err(ApiError::too_large(limit));
        }
        buf.extend_from_slice(&chunk);
    }
    Ok(Bytes::from(buf))
}

async fn handle(
    app: Arc<App>,
    endpoint: Endpoint,
    peer: Option<Peer>,
    request_id: Option<RequestId>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let arrived = Instant::now();
    let deadline = arrived + app.request_timeout;
    if app.shutting_down.load(Ordering::Relaxed) {
        return Err(ApiError::shutting_down());
    }
    let bytes = read_body(&headers, body, app.max_body_bytes).await?;
    let request = parse::parse(endpoint, &bytes, &app.model_id, app.unknown_fields)?;
    drop(bytes);
    log_ignored(request_id.as_ref(), &request.ignored);
    // A prompt too long by its byte length alone never takes a turn.
    request.check_bytes(&app.engine)?;
    // From here until the engine takes it up, the request holds one of its
    // client's places (share.rs); a client past its share is told to retry.
    // A full queue is reported as such first, so the message names the
    // limit that is really in the way.
    let place = match peer.map(|p| app.shares.take(p.0)) {
        None => None,
        Some(Ok(p)) => Some(p),
        Some(Err(waiting)) => {
            if app.queue.len() >= app.queue.capacity() {
                app.stats.rejected.fetch_add(1, Ordering::Relaxed);
                return Err(ApiError::queue_full(app.queue.capacity()));
            }
            app.stats.over_client_share.fetch_add(1, Ordering::Relaxed);
            return Err(ApiError::over_client_share(waiting, app.shares.max_per_client()));
        }
    };
    let prepared = off_the_workers(&app, "preparing the request", move |engine| request.prepare(engine)).await?;
    let n = app.next_id.fetch_add(1, Ordering::Relaxed);
    let id = match endpoint {
        Endpoint::Completions | Endpoint::Llama => format!("cmpl-{:x}-{n}", app.started),
        Endpoint::Chat => format!("chatcmpl-{:x}-{n}", app.started),
    };
    let mut sampling = prepared.request.sampling;
    if !prepared.request.seed_given && !sampling.is_greedy() {
        // No seed: a different draw per request, as OpenAI's API behaves.
        sampling.seed = (u64::from(std::process::id()) << 32) ^ unix_now() ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
    let (tx, rx) = unbounded_channel();
    let stream = prepared.request.stream;
    let include_usage = prepared.request.include_usage;
    let llama = (endpoint == Endpoint::Llama).then(|| super::llama::Settings {
        model: app.model_id.clone(),
        stop: prepared.request.stop.clone(),
        generation_settings: json!({
            "n_predict": prepared.max_tokens,
            "temperature": sampling.temperature,
            "top_k": sampling.top_k,
            "top_p": sampling.top_p,
            "min_p": sampling.min_p,
            "repeat_penalty": sampling.repetition_penalty,
            "repeat_last_n": sampling.penalty_scope.repeat_last_n(),
            "presence_penalty": sampling.presence_penalty,
            "frequency_penalty": sampling.frequency_penalty,
            "seed": sampling.seed,
            "stop": prepared.request.stop,
            "stream": stream,
        }),
    });
    let job = Job {
        id: id.clone(),
        prepared,
        sampling,
        enqueued: Instant::now(),
        deadline,
        timeout: app.request_timeout,
        tx,
        place,
    };
    match app.queue.push(job) {
        Ok(_) => {}
        Err(PushError::Full(_)) => {
            app.stats.rejected.fetch_add(1, Ordering::Relaxed);
            return Err(ApiError::queue_full(app.queue.capacity()));
        }
        Err(PushError::Closed(_)) => return Err(ApiError::shutting_down()),
    }
    let shape = Shape {
        endpoint,
        id,
        created: unix_now(),
        model: app.model_id.clone(),
        fingerprint: app.fingerprint.clone(),
        llama,
    };
    if stream {
        let events = EventStream { rx, shape, include_usage, out: VecDeque::new(), done: false, role_sent: false };
        return Ok(Response::builder()
            .status(StatusCode::OK)
            .header(header::CONTENT_TYPE, "text/event-stream")
            .header(header::CACHE_CONTROL, "no-cache")
            .body(Body::from_stream(events))
            .unwrap_or_else(|e| ApiError::internal(e.to_string()).into_response()));
    }
    // Dropping this future (the client left) drops `rx`, which cancels the job.
    // The engine thread answers a passed deadline itself; this is the backstop
    // for a reply that never comes.
    let backstop = tokio::time::Instant::from_std(deadline + std::time::Duration::from_secs(1));
    let finished = match tokio::time::timeout_at(backstop, wait(rx)).await {
        Ok(r) => r?,
        Err(_) => {
            app.stats.timed_out.fetch_add(1, Ordering::Relaxed);
            return Err(ApiError::deadline(app.request_timeout));
        }
    };
    Ok(json_response(StatusCode::OK, &shape.response(&finished)))
}

/// The final message of a non-streaming request.
async fn wait(mut rx: UnboundedReceiver<Msg>) -> Result<Finished, ApiError> {
    loop {
        match rx.recv().await {
            Some(Msg::Done(Ok(f))) => return Ok(*f),
            Some(Msg::Done(Err(e))) => return Err(e),
            Some(_) => {}
            // The job was dropped unserved: only shutdown does that.
            None => return Err(ApiError::shutting_down()),
        }
    }
}

/// The fields every response and chunk of one request shares.
struct Shape {
    endpoint: Endpoint,
    id: String,
    created: u64,
    model: String,
    fingerprint: String,
    /// `/completion`'s settings, for its shape (`llama.rs`).
    llama: Option<super::llama::Settings>,
}

/// Server-side timings and speculation counters beside OpenAI's fields.
fn timings(f: &Finished) -> ServedTimings {
    ServedTimings {
        batch: Some(f.batch.clone()),
        ..ServedTimings::new(f.queue_ms, &f.completion, f.speculation.as_ref())
    }
}

impl Shape {
    fn response(&self, f: &Finished) -> Value {
        if let Some(l) = &self.llama {
            return super::llama::response(l, f, &f.text, serde_json::to_value(timings(f)).unwrap_or_default());
        }
        let logprobs = f.logprobs.clone().unwrap_or(Value::Null);
        let choice = match self.endpoint {
            Endpoint::Completions | Endpoint::Llama => {
                let text = match &f.echo {
                    Some(prompt) => format!("{prompt}{}", f.text),
                    None => f.text.clone(),
                };
                json!({"index": 0, "text": text, "logprobs": logprobs, "finish_reason": f.finish_reason})
            }
            Endpoint::Chat => json!({
                "index": 0,
                "message": {"role": "assistant", "content": f.text},
                "logprobs": logprobs,
                "finish_reason": f.finish_reason,
            }),
        };
        json!({
            "id": self.id,
            "object": match self.endpoint { Endpoint::Completions | Endpoint::Llama => "text_completion", Endpoint::Chat => "chat.completion" },
            "created": self.created,
            "model": self.model,
            "system_fingerprint": self.fingerprint,
            "choices": [choice],
            "usage": f.completion.outcome.usage,
            "draftwise": timings(f),
        })
    }

    /// One chunk; `delta` is the text (chat: the delta object's content).
    fn chunk(&self, choices: Value, include_usage: bool) -> Value {
        let mut c = json!({
            "id": self.id,
            "object": match self.endpoint { Endpoint::Completions | Endpoint::Llama => "text_completion", Endpoint::Chat => "chat.completion.chunk" },
            "created": self.created,
            "model": self.model,
            "system_fingerprint": self.fingerprint,
            "choices": choices,
        });
        if include_usage {
            // OpenAI sends `usage: null` on every chunk but the last when usage is asked for.
            c["usage"] = Value::Null;
        }
        c
    }

    fn text_choice(&self, text: Option<&str>, role: bool, finish: Option<FinishReason>) -> Value {
        match self.endpoint {
            Endpoint::Completions | Endpoint::Llama => {
                json!([{"index": 0, "text": text.unwrap_or(""), "logprobs": null, "finish_reason": finish}])
            }
            Endpoint::Chat => {
                let mut delta = serde_json::Map::new();
                if role {
                    delta.insert("role".into(), "assistant".into());
                }
                if let Some(t) = text {
                    delta.insert("content".into(), t.into());
                }
                json!([{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}])
            }
        }
    }
}

fn sse(v: &Value) -> Bytes {
    Bytes::from(format!("data: {v}\n\n"))
}

/// The body of a streaming response: chunks as the engine thread reports
/// text, then the finish chunk, the usage chunk when asked for, and
/// `data: [DONE]`. Dropping it (the client left) drops the receiver, which
/// cancels the generation at its next token.
struct EventStream {
    rx: UnboundedReceiver<Msg>,
    shape: Shape,
    include_usage: bool,
    out: VecDeque<Bytes>,
    done: bool,
    /// Chat streams open with a delta carrying the role.
    role_sent: bool,
}

impl EventStream {
    fn text(&mut self, text: Option<&str>, finish: Option<FinishReason>) {
        if self.shape.llama.is_some() {
            // llama-server's pieces; its final object follows at the end.
            if let Some(t) = text.filter(|t| !t.is_empty()) {
                self.out.push_back(sse(&super::llama::partial(t)));
            }
            return;
        }
        let role = self.shape.endpoint == Endpoint::Chat && !self.role_sent;
        self.role_sent = true;
        let choices = self.shape.text_choice(text, role, finish);
        self.out.push_back(sse(&self.shape.chunk(choices, self.include_usage)));
    }

    /// The error event that ends a stream (llama-server's streams have no `[DONE]`).
    fn fail(&mut self, e: &ApiError) {
        self.out.push_back(sse(&e.body()));
        if self.shape.llama.is_none() {
            self.out.push_back(Bytes::from_static(b"data: [DONE]\n\n"));
        }
        self.done = true;
    }

    fn on(&mut self, msg: Option<Msg>) {
        match msg {
            // The first token is out: chat streams send the role now, so the
            // first chunk marks the time to first token.
            Some(Msg::First) => {
                if self.shape.endpoint == Endpoint::Chat && !self.role_sent {
                    self.text(Some(""), None);
                }
            }
            Some(Msg::Text(t)) => self.text(Some(&t), None),
            Some(Msg::Done(Ok(f))) if self.shape.llama.is_some() => {
                let l = self.shape.llama.as_ref().expect("matched");
                let draftwise = serde_json::to_value(timings(&f)).unwrap_or_default();
                self.out.push_back(sse(&super::llama::response(l, &f, "", draftwise)));
                self.done = true;
            }
            Some(Msg::Done(Ok(f))) => {
                let content = (self.shape.endpoint == Endpoint::Chat && !self.role_sent).then_some("");
                self.text(content, Some(f.finish_reason));
                if self.include_usage {
                    let mut c = self.shape.chunk(json!([]), false);
                    c["usage"] = serde_json::to_value(&f.completion.outcome.usage).unwrap_or_default();
                    c["draftwise"] = serde_json::to_value(timings(&f)).unwrap_or_default();
                    self.out.push_back(sse(&c));
                }
                self.out.push_back(Bytes::from_static(b"data: [DONE]\n\n"));
                self.done = true;
            }
            Some(Msg::Done(Err(e))) => self.fail(&e),
            None => self.fail(&ApiError::shutting_down()),
        }
    }
}

impl Stream for EventStream {
    type Item = Result<Bytes, Infallible>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            if let Some(b) = this.out.pop_front() {
                return Poll::Ready(Some(Ok(b)));
            }
            if this.done {
                return Poll::Ready(None);
            }
            match this.rx.poll_recv(cx) {
                Poll::Ready(msg) => this.on(msg),
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    /// The 404's list is the router's: every route of `endpoints` and no other.
    #[test]
    fn the_routes_a_404_names_are_the_routers() {
        let named: Vec<&str> = super::ROUTES.iter().map(|(_, p)| *p).collect();
        let routed: Vec<&str> = super::endpoints().into_iter().map(|(p, _)| p).collect();
        assert_eq!(named, routed);
        let e = super::not_found(&axum::http::Method::POST, "/v1/complete");
        assert_eq!(e.status, axum::http::StatusCode::NOT_FOUND);
        assert!(e.message.contains("POST \"/v1/complete\"") && e.message.contains("POST /completion"), "{}", e.message);
    }
}
