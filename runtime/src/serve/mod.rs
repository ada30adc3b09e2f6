//! `runtime serve`: an OpenAI-compatible HTTP server over one [`Engine`](crate::engine::Engine).
//!
//! - [`parse`]: request bodies checked into a [`parse::Request`];
//! - [`error`]: the OpenAI-shaped [`error::ApiError`] every refusal is sent as;
//! - [`queue`]: the bounded first-in-first-out wait queue;
//! - [`worker`]: the engine thread, which decodes one request at a time
//!   through [`crate::request::decode`] (the code path of `runtime generate`);
//! - [`text`]: incremental detokenization and stop strings for streaming;
//! - [`routes`]: the endpoints, responses and server-sent events;
//! - [`log_text`]: client text escaped and bounded for the logs.
//!
//! One sequence runs at a time (no batching): handlers parse and tokenize
//! concurrently, then wait in arrival order. Speculative settings are fixed
//! at startup. See docs/serve.md.

pub mod conn;
pub mod error;
pub mod llama;
pub mod log_text;
pub mod logprobs;
pub mod metrics;
pub mod parse;
pub mod queue;
pub mod routes;
pub mod share;
pub mod text;
pub mod worker;

use crate::events::{Event, startup_event};
use crate::open::{ModelSettings, Opened, open};
use crate::sampling::SamplingParams;
use crate::speculative::setup::{Speculation, SpeculationSettings};
use anyhow::{Context, Result, bail};
use metrics::Stats;
use queue::Queue;
use routes::App;
use serde_json::json;
use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;
use worker::Worker;

/// After SIGTERM, requests in flight get this long to finish before they
/// are cancelled (a sweep stops its server between arms, with none in flight).
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// What `runtime serve` runs, as given (`runtime serve --help` says what
/// each field is; [`ServeLimits::from_settings`] and [`run`] check them).
#[derive(Debug, Clone)]
pub struct ServeSettings {
    /// The model and how it is opened.
    pub load: ModelSettings,
    /// An IP address to listen on.
    pub host: String,
    /// 0 picks a free port.
    pub port: u16,
    /// The name clients pass as `model` (`None`: [`default_model_id`]).
    pub served_model_name: Option<String>,
    pub max_queue: usize,
    /// `None`: a quarter of `max_queue` ([`ServeSettings::waiting_per_client`]).
    pub max_waiting_per_client: Option<usize>,
    /// `--half-close` ([`conn::ConnLimits::half_close`]).
    pub half_close: bool,
    pub max_body_bytes: usize,
    pub header_timeout_ms: u64,
    pub body_timeout_ms: u64,
    pub idle_timeout_ms: u64,
    pub max_connections: usize,
    pub max_preparing: usize,
    pub request_timeout_secs: u64,
    /// The bearer key the API endpoints require, if any.
    pub api_key: Option<String>,
    /// JSONL events on stdout.
    pub json: bool,
    /// `--strict-params`: unknown request fields are refused (400) instead
    /// of ignored with a logged warning.
    pub strict_params: bool,
    /// `--allowed-origins`: browser origins answered with CORS headers.
    pub allowed_origins: Vec<String>,
    /// `--parallel`: sequences decoding at once (`None`: [`DEFAULT_PARALLEL`]).
    pub parallel: Option<usize>,
    /// `--prefill-chunk`: prompt tokens per pass.
    pub prefill_chunk: usize,
    /// `--kv-budget-mb`: the running sequences' caches together (`None`: a
    /// full context for each of `parallel`).
    pub kv_budget_mb: Option<u64>,
    pub spec: SpeculationSettings,
}

/// Sequences decoding at once when `--parallel` is not given: four, where a
/// pass of four rows costs little more than one (1.25x for the default
/// model on a Zen 4 host, the entry's verify cost), so four clients get
/// about three times the tokens per second of one; llama-server's
/// `-np` auto setting is four too.
pub const DEFAULT_PARALLEL: usize = 4;
/// Most `--parallel`.
pub const MAX_PARALLEL: u64 = 256;
/// `--prefill-chunk`'s bounds.
pub const MAX_PREFILL_CHUNK: u64 = 8192;

impl ServeSettings {
    /// `--max-waiting-per-client`, or a quarter of `--max-queue` (at least 1).
    pub fn waiting_per_client(&self) -> usize {
        self.max_waiting_per_client.unwrap_or((self.max_queue / 4).max(1))
    }
}

/// The server's limits, checked from its flags (each bounded, naming the flag).
#[derive(Clone, Copy, Debug)]
pub struct ServeLimits {
    pub conn: conn::ConnLimits,
    pub request_timeout: Duration,
}

/// Most `--max-queue`, `--max-connections`, `--max-preparing`.
pub const MAX_COUNT_FLAG: u64 = 65_536;
/// Largest `--max-body-bytes` (64 MiB).
pub const MAX_BODY_BYTES: u64 = 64 << 20;
/// Longest `--header-timeout-ms`, `--body-timeout-ms`, `--idle-timeout-ms` (one hour).
pub const MAX_TIMEOUT_MS: u64 = 3_600_000;
/// Longest `--request-timeout-secs` (one day).
pub const MAX_REQUEST_TIMEOUT_SECS: u64 = 86_400;

impl ServeLimits {
    pub fn from_settings(args: &ServeSettings) -> Result<Self, String> {
        use crate::limits::{check_ms, check_range};
        check_range("--max-queue", args.max_queue as u64, 1, MAX_COUNT_FLAG)?;
        if let Some(n) = args.max_waiting_per_client {
            check_range("--max-waiting-per-client", n as u64, 1, MAX_COUNT_FLAG)?;
        }
        check_range("--max-body-bytes", args.max_body_bytes as u64, 1024, MAX_BODY_BYTES)?;
        check_range("--max-preparing", args.max_preparing as u64, 1, MAX_COUNT_FLAG)?;
        let max_connections = check_range("--max-connections", args.max_connections as u64, 1, MAX_COUNT_FLAG)?;
        let header_timeout = check_ms("--header-timeout-ms", args.header_timeout_ms, 1, MAX_TIMEOUT_MS)?;
        let body_timeout = check_ms("--body-timeout-ms", args.body_timeout_ms, 1, MAX_TIMEOUT_MS)?;
        let idle_timeout = check_ms("--idle-timeout-ms", args.idle_timeout_ms, 1, MAX_TIMEOUT_MS)?;
        let secs = check_range("--request-timeout-secs", args.request_timeout_secs, 1, MAX_REQUEST_TIMEOUT_SECS)?;
        if args.api_key.as_deref().is_some_and(|k| k.is_empty() || k.len() > 4096) {
            return Err("--api-key must be 1 to 4096 bytes".into());
        }
        check_allowed_origins(&args.allowed_origins)?;
        if let Some(n) = args.parallel {
            check_range("--parallel", n as u64, 1, MAX_PARALLEL)?;
        }
        check_range("--prefill-chunk", args.prefill_chunk as u64, 1, MAX_PREFILL_CHUNK)?;
        if let Some(mb) = args.kv_budget_mb {
            check_range("--kv-budget-mb", mb, 1, 1 << 30)?;
        }
        Ok(ServeLimits {
            conn: conn::ConnLimits {
                header_timeout,
                body_timeout,
                idle_timeout,
                max_connections: max_connections as usize,
                half_close: args.half_close,
            },
            request_timeout: Duration::from_secs(secs),
        })
    }
}

/// `--allowed-origins`: at most 64 of 1 to 256 bytes, each one a browser
/// could send ([`origin_problem`]).
pub fn check_allowed_origins(origins: &[String]) -> Result<(), String> {
    if origins.len() > 64 || origins.iter().any(|o| o.is_empty() || o.len() > 256) {
        return Err("--allowed-origins takes at most 64 origins of 1 to 256 bytes each (like \
                    http://localhost:3000, or * for any)"
            .into());
    }
    for o in origins {
        if let Some(why) = origin_problem(o) {
            return Err(format!(
                "--allowed-origins \"{}\" can never match a browser's Origin: {why}; give each origin as browsers \
                 send it, scheme://host[:port] in lowercase (like http://localhost:3000, no path or trailing \
                 slash), or * for any",
                o.escape_debug()
            ));
        }
    }
    Ok(())
}

/// Why an `--allowed-origins` value can never equal an `Origin` header, if
/// it cannot. A browser sends an origin serialized (RFC 6454 section 6.1,
/// the WHATWG URL standard's "ASCII serialization of an origin"): ASCII,
/// `scheme://host` and a port only when not the default, scheme and host
/// in lowercase, no user, path, query, fragment or trailing slash; or the
/// word `null`. The comparison is exact, so any other value is an operator's
/// mistake that silently allows nothing.
pub fn origin_problem(o: &str) -> Option<String> {
    if o == "*" || o == "null" {
        return None;
    }
    if o.trim().is_empty() {
        return Some("it is blank".into());
    }
    if let Some(c) = o.chars().find(|c| c.is_control() || c.is_whitespace()) {
        return Some(format!("it holds {:?} (a control or space character)", c));
    }
    if !o.is_ascii() {
        return Some("it is not ASCII (browsers send a non-ASCII host in punycode, xn--...)".into());
    }
    let Some((scheme, rest)) = o.split_once("://") else {
        return Some("it has no scheme:// (like http://)".into());
    };
    let scheme_ok = scheme.starts_with(|c: char| c.is_ascii_lowercase())
        && scheme.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "+-.".contains(c));
    if !scheme_ok {
        return Some(format!("the scheme {scheme:?} is not a lowercase URL scheme"));
    }
    if let Some(c) = rest.chars().find(|c| "/?#@\\".contains(*c)) {
        return Some(format!("it has {c:?} after the scheme (an origin has no user, path, query or trailing slash)"));
    }
    if rest.chars().any(|c| c.is_ascii_uppercase()) {
        return Some("its host has uppercase letters (browsers send it in lowercase)".into());
    }
    // The port: the digits after the last colon outside an IPv6 literal's brackets.
    let (host, port) = match rest.rfind(':') {
        Some(i) if !rest[i..].contains(']') => (&rest[..i], Some(&rest[i + 1..])),
        _ => (rest, None),
    };
    if host.is_empty() {
        return Some("it has no host".into());
    }
    if let Some(p) = port {
        match p.parse::<u16>() {
            Ok(_) if p.bytes().all(|b| b.is_ascii_digit()) && !p.starts_with('0') => {}
            _ => return Some(format!("the port {p:?} is not a number 1 to 65535 without leading zeros")),
        }
        let default = matches!((scheme, p), ("http", "80") | ("https", "443"));
        if default {
            return Some(format!("browsers leave out the default port {p} of {scheme}"));
        }
    }
    None
}

/// The default `model` name: the file name without `.gguf`, or the directory name.
pub fn default_model_id(path: &Path) -> String {
    let name = path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned());
    name.strip_suffix(".gguf").map_or(name.clone(), str::to_string)
}

/// `runtime serve`: load, bind, serve until SIGTERM or SIGINT, shut down cleanly.
pub fn run(args: ServeSettings) -> Result<ExitCode> {
    let threads = crate::limits::resolve_threads(args.load.threads)?;
    let limits = ServeLimits::from_settings(&args).map_err(anyhow::Error::msg)?;
    let ip: IpAddr = args
        .host
        .parse()
        .with_context(|| format!("--host {:?}: give an IP address, like 127.0.0.1, ::1 or 0.0.0.0", args.host))?;
    // Bind first: a port in use fails before the model loads.
    let listener = std::net::TcpListener::bind(SocketAddr::new(ip, args.port))
        .with_context(|| format!("listening on {ip} port {} (pick another with --port, or 0 for any)", args.port))?;
    listener.set_nonblocking(true)?;
    let addr = listener.local_addr()?;
    let Opened { engine, selection, cuda, path } = open(&args.load, threads)?;
    let decoding = Speculation::from_settings(&args.spec, &engine)?;
    let model_id = args.served_model_name.clone().unwrap_or_else(|| default_model_id(&path));
    if model_id.is_empty() {
        bail!("--served-model-name must not be empty");
    }
    // The settings a request gets when it gives none (OpenAI's defaults).
    let defaults = SamplingParams { temperature: 1.0, ..SamplingParams::default() };
    let mut startup =
        startup_event(&engine, &selection, &decoding, defaults, parse::COMPLETIONS_DEFAULT_MAX_TOKENS, cuda);
    // Typed, so a program that asked for `--port 0` learns the port without reading the log.
    startup.server = Some(crate::events::ServerInfo { address: addr.to_string(), model: model_id.clone() });

    if args.json {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{}", Event::Startup(startup.clone()).to_line())?;
        out.flush()?;
    }
    eprintln!("{}", decoding.summary());
    if !ip.is_loopback() && args.api_key.is_none() {
        tracing::warn!("listening on {ip}, which is not loopback, without --api-key: anyone who reaches it may use it");
    }

    let parallel = args.parallel.unwrap_or(DEFAULT_PARALLEL);
    let kv_positions = kv_budget_positions(&engine.loaded.model.config, parallel, args.kv_budget_mb);
    let mut config = serde_json::to_value(&startup)?;
    config["server"] = json!({
        "address": addr.to_string(),
        "model": model_id,
        "concurrency": format!(
            "continuous batching: up to {parallel} sequences share each forward pass; more wait in a \
             first-in-first-out queue"
        ),
        "parallel": parallel,
        "prefill_chunk": args.prefill_chunk,
        "kv_budget_positions": kv_positions,
        "max_queue": args.max_queue,
        "max_waiting_per_client": args.waiting_per_client(),
        "half_close": args.half_close,
        "max_body_bytes": args.max_body_bytes,
        "header_timeout_ms": args.header_timeout_ms,
        "body_timeout_ms": args.body_timeout_ms,
        "idle_timeout_ms": args.idle_timeout_ms,
        "max_connections": args.max_connections,
        "max_preparing": args.max_preparing,
        "request_timeout_secs": args.request_timeout_secs,
        "api_key": args.api_key.is_some(),
        "strict_params": args.strict_params,
        "allowed_origins": args.allowed_origins,
        "context_length": engine.loaded.info.context_length,
    });
    let engine = Arc::new(engine);
    let queue = Arc::new(Queue::new(args.max_queue));
    let stats = Arc::new(Stats::default());
    let abort = Arc::new(AtomicBool::new(false));
    let started = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let app = Arc::new(App {
        engine: engine.clone(),
        queue: queue.clone(),
        stats: stats.clone(),
        model_id: model_id.clone(),
        config,
        max_body_bytes: args.max_body_bytes,
        preparing: tokio::sync::Semaphore::new(args.max_preparing),
        max_preparing: args.max_preparing,
        max_prepare_waiting: args.max_queue,
        shares: share::ClientShares::new(args.waiting_per_client()),
        prepare_waiting: std::sync::atomic::AtomicUsize::new(0),
        request_timeout: limits.request_timeout,
        api_key: args.api_key.clone(),
        started,
        fingerprint: format!("draftwise-{}-{}", env!("CARGO_PKG_VERSION"), crate::policy::KERNEL_FINGERPRINT),
        next_id: AtomicU64::new(0),
        next_request: AtomicU64::new(0),
        unknown_fields: if args.strict_params { parse::UnknownFields::Refuse } else { parse::UnknownFields::Ignore },
        allowed_origins: args.allowed_origins.clone(),
        shutting_down: AtomicBool::new(false),
    });
    let worker = Worker {
        engine,
        spec: decoding.speculation,
        queue: queue.clone(),
        stats: stats.clone(),
        abort: abort.clone(),
        json: args.json,
        parallel,
        prefill_chunk: args.prefill_chunk,
        kv_positions,
    };
    let engine_thread = std::thread::Builder::new().name("engine".into()).spawn(move || worker.run())?;

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("http")
        .enable_all()
        .build()
        .context("starting the HTTP runtime")?;
    eprintln!(
        "runtime serve: listening on http://{addr} (model {model_id:?}, {} threads, context {} tokens, \
         up to {parallel} sequences at once, up to {} waiting)",
        threads, app.engine.loaded.info.context_length, args.max_queue
    );
    let served = rt.block_on(serve(listener, app, abort.clone(), limits.conn));
    // Whatever happened, stop the engine thread: nothing new can arrive.
    abort.store(true, Ordering::SeqCst);
    queue.close();
    if engine_thread.join().is_err() {
        tracing::error!("the engine thread panicked");
    }
    rt.shutdown_timeout(Duration::from_secs(1));
    served?;
    eprintln!(
        "runtime serve: stopped ({} completed, {} cancelled, {} failed, {} refused as over capacity)",
        stats.completed.load(Ordering::Relaxed),
        stats.cancelled.load(Ordering::Relaxed),
        stats.failed.load(Ordering::Relaxed),
        stats.rejected.load(Ordering::Relaxed)
    );
    Ok(ExitCode::SUCCESS)
}

/// Serves until a signal, then shuts down: no new requests, waiting ones
/// refused, running ones given [`SHUTDOWN_GRACE`] before cancellation.
async fn serve(
    listener: std::net::TcpListener,
    app: Arc<App>,
    abort: Arc<AtomicBool>,
    limits: conn::ConnLimits,
) -> Result<()> {
    let listener = tokio::net::TcpListener::from_std(listener)?;
    let (signalled_tx, mut signalled) = tokio::sync::watch::channel(false);
    let shutdown_app = app.clone();
    tokio::spawn(async move {
        let sig = wait_for_signal().await;
        eprintln!("runtime serve: {sig}: shutting down");
        shutdown_app.shutting_down.store(true, Ordering::SeqCst);
        // Dropping the waiting jobs answers their clients 503 (`shutting_down`).
        drop(shutdown_app.queue.close());
        let _ = signalled_tx.send(true);
    });
    let stats = app.stats.clone();
    let router = routes::router(app);
    let mut server = tokio::spawn(conn::serve(listener, router, limits, stats, signalled.clone()));
    tokio::select! {
        r = &mut server => return Ok(r.context("the HTTP server task")??),
        _ = signalled.wait_for(|s| *s) => {}
    }
    if let Ok(r) = tokio::time::timeout(SHUTDOWN_GRACE, &mut server).await {
        return Ok(r.context("the HTTP server task")??);
    }
    eprintln!("runtime serve: requests still running after {}s; cancelling them", SHUTDOWN_GRACE.as_secs());
    abort.store(true, Ordering::SeqCst);
    if tokio::time::timeout(Duration::from_secs(5), &mut server).await.is_err() {
        server.abort();
    }
    Ok(())
}

async fn wait_for_signal() -> &'static str {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => tokio::select! {
                _ = term.recv() => "SIGTERM",
                _ = tokio::signal::ctrl_c() => "SIGINT",
            },
            Err(e) => {
                tracing::warn!("cannot watch SIGTERM ({e}); stop the server with SIGINT");
                let _ = tokio::signal::ctrl_c().await;
                "SIGINT"
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
        "Ctrl-C"
    }
}

/// The cache positions the running sequences may reserve together: what
/// `--kv-budget-mb` holds at this model's bytes per position (keys and
/// values in 16 bits, every layer), or a full context for each of the
/// `parallel` sequences.
pub fn kv_budget_positions(c: &crate::model::ModelConfig, parallel: usize, mb: Option<u64>) -> usize {
    let per_position = (c.n_layers * c.kv_dim() * 2 * 2).max(1) as u64;
    match mb {
        Some(mb) => usize::try_from(mb.saturating_mul(1 << 20) / per_position).unwrap_or(usize::MAX),
        None => parallel.saturating_mul(c.context_length),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_allowed_origin_that_can_never_match_is_refused_with_the_reason() {
        for ok in ["*", "null", "http://localhost:3000", "https://example.com", "http://[::1]:8080", "app://x"] {
            assert_eq!(check_allowed_origins(&[ok.to_string()]), Ok(()), "{ok}");
        }
        let refused = |o: &str| check_allowed_origins(&[o.to_string()]).err();
        for (bad, why) in [
            (" ", "blank"),
            ("http://a\r\nSet-Cookie: x", "control or space"),
            ("http://a b", "control or space"),
            ("http://localhost:3000/", "trailing slash"),
            ("http://localhost/app", "path"),
            ("localhost:3000", "no scheme"),
            ("HTTP://x", "scheme"),
            ("http://Example.com", "uppercase"),
            ("http://x:80", "default port"),
            ("http://x:99999", "port"),
            ("http://", "no host"),
            ("http://bücher.de", "punycode"),
        ] {
            let got = refused(bad);
            assert!(
                got.as_deref().is_some_and(|g| g.contains(why) && g.contains("can never match")),
                "{bad:?}: {got:?}"
            );
        }
    }

    #[test]
    fn the_default_model_name_drops_the_gguf_extension() {
        assert_eq!(default_model_id(Path::new("/m/SmolLM2-135M-Instruct.Q4_1.gguf")), "SmolLM2-135M-Instruct.Q4_1");
        assert_eq!(default_model_id(Path::new("/m/Llama-3.2-1B/")), "Llama-3.2-1B");
    }
}
