//! The engine thread: takes one request at a time from the wait queue and
//! decodes it with [`crate::request::decode`] — the same code path as
//! `runtime generate`, so greedy text is byte-identical — reporting text
//! pieces to the request's handler as tokens are emitted. A request whose
//! handler is gone (the client disconnected) is skipped if it is still
//! waiting, and cancelled at the next token if it is running.

use super::api::{ApiError, Prepared};
use super::queue::Queue;
use super::text::{Detokenizer, StopText};
use crate::events::{Event, Usage};
use crate::generate::{Engine, FinishReason, GenerateError, Halt, TokenSink};
use crate::sampling::SamplingParams;
use crate::spec::setup::Speculation;
use crate::tokenizer::Tokenizer;
use std::io::Write;
use std::ops::ControlFlow;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::mpsc::UnboundedSender;

/// What the engine thread tells a request's handler.
#[derive(Debug)]
pub enum Msg {
    /// The first token was emitted (time to first token, for streams).
    First,
    /// More response text (streaming requests only).
    Text(String),
    /// The request finished (it is the last message).
    Done(Result<Box<Finished>, ApiError>),
}

/// A finished request, as the response reports it.
#[derive(Clone, Debug)]
pub struct Finished {
    pub text: String,
    pub finish_reason: FinishReason,
    pub usage: Usage,
    pub queue_ms: f64,
    pub prefill_ms: f64,
    pub decode_ms: f64,
    pub decode_steps: usize,
    /// The generated token ids (a stop string's tokens included), for exact
    /// comparisons across runs (`draftwise.token_ids` in the response).
    pub token_ids: Vec<u32>,
    /// `speculative_diagnostics` or `declined`, as `runtime generate --json` writes them.
    pub speculation: Option<Event>,
}

/// One request in the queue.
pub struct Job {
    /// The response id (`cmpl-…`, `chatcmpl-…`), also the events' `prompt_id`.
    pub id: String,
    pub prepared: Prepared,
    pub sampling: SamplingParams,
    pub enqueued: Instant,
    /// When the request must be finished (`--request-timeout-secs` after it arrived).
    pub deadline: Instant,
    /// The timeout that set `deadline`, for the refusal.
    pub timeout: Duration,
    /// Dropped receiver = the client is gone.
    pub tx: UnboundedSender<Msg>,
}

/// Counters for `/health` and `/metrics`.
#[derive(Debug, Default)]
pub struct Stats {
    pub completed: AtomicU64,
    pub cancelled: AtomicU64,
    pub failed: AtomicU64,
    /// Refused because the queue was full.
    pub rejected: AtomicU64,
    /// Ran past their deadline (`--request-timeout-secs`), answered 408.
    pub timed_out: AtomicU64,
    /// Refused 429: too many requests preparing (`--max-preparing`).
    pub too_many_preparing: AtomicU64,
    /// Refused 401 (`--api-key`).
    pub unauthorized: AtomicU64,
    /// Open connections now.
    pub connections: AtomicU64,
    /// Connections refused 503: every open one had a request running.
    pub connections_refused: AtomicU64,
    /// Connections closed to admit a new one at `--max-connections`.
    pub evicted: AtomicU64,
    /// Connections closed with 408: the request head was too slow.
    pub header_timeouts: AtomicU64,
    /// Keep-alive connections closed after `--idle-timeout-ms` without a request.
    pub idle_closed: AtomicU64,
    /// Tokens, latencies and speculation counters (`/metrics`).
    pub metrics: super::metrics::Metrics,
    /// A request is decoding now.
    pub running: AtomicBool,
}

/// The engine thread's state.
pub struct Worker {
    pub engine: Arc<Engine>,
    pub spec: Option<Speculation>,
    pub queue: Arc<Queue<Job>>,
    pub stats: Arc<Stats>,
    /// Set at shutdown once the grace period is over: the running request
    /// is cancelled at its next token.
    pub abort: Arc<AtomicBool>,
    /// Write `completion` (and `speculative_diagnostics`/`declined`) events on stdout.
    pub json: bool,
}

impl Worker {
    /// Serves requests until the queue is closed.
    pub fn run(mut self) {
        while let Some(job) = self.queue.pop() {
            if job.tx.is_closed() {
                tracing::info!(id = %job.id, outcome = "cancelled", "client left while waiting; skipped");
                self.stats.cancelled.fetch_add(1, Ordering::SeqCst);
                continue;
            }
            if Instant::now() >= job.deadline {
                tracing::info!(id = %job.id, outcome = "timed_out", "deadline passed while waiting; skipped");
                self.stats.timed_out.fetch_add(1, Ordering::SeqCst);
                let _ = job.tx.send(Msg::Done(Err(ApiError::deadline(job.timeout))));
                continue;
            }
            self.stats.running.store(true, Ordering::SeqCst);
            // A panic in one request must not take the server down with it.
            let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.serve(&job)));
            self.stats.running.store(false, Ordering::SeqCst);
            // Count before answering, so a client that reads `/health` right
            // after its response sees itself counted.
            let reply = match outcome {
                Ok(Ok(finished)) => {
                    self.account(&job, &finished);
                    self.stats.completed.fetch_add(1, Ordering::SeqCst);
                    Some(Ok(Box::new(finished)))
                }
                Ok(Err(Failure::Cancelled)) if Instant::now() >= job.deadline => {
                    tracing::info!(id = %job.id, outcome = "timed_out", "deadline passed; generation cancelled");
                    self.stats.timed_out.fetch_add(1, Ordering::SeqCst);
                    Some(Err(ApiError::deadline(job.timeout)))
                }
                Ok(Err(Failure::Cancelled)) => {
                    tracing::info!(id = %job.id, outcome = "cancelled", "client left; generation cancelled");
                    self.stats.cancelled.fetch_add(1, Ordering::SeqCst);
                    None
                }
                Ok(Err(Failure::Error(e))) => {
                    tracing::error!(id = %job.id, outcome = "failed", "generation failed: {e}");
                    self.stats.failed.fetch_add(1, Ordering::SeqCst);
                    Some(Err(ApiError::internal(e)))
                }
                Err(_) => {
                    tracing::error!(id = %job.id, outcome = "failed", "generation panicked");
                    self.stats.failed.fetch_add(1, Ordering::SeqCst);
                    Some(Err(ApiError::internal("the generation failed unexpectedly")))
                }
            };
            if let Some(r) = reply {
                let _ = job.tx.send(Msg::Done(r));
            }
        }
    }

    /// The per-request log line and the `/metrics` counters of a finished request.
    fn account(&self, job: &Job, f: &Finished) {
        let m = &self.stats.metrics;
        m.prompt_tokens.fetch_add(f.usage.prompt_tokens as u64, Ordering::Relaxed);
        m.completion_tokens.fetch_add(f.usage.completion_tokens as u64, Ordering::Relaxed);
        if f.usage.completion_tokens > 0 {
            m.ttft_s.observe((f.queue_ms + f.prefill_ms) / 1e3);
        }
        if f.usage.completion_tokens > 1 {
            m.per_token_s.observe(f.decode_ms / 1e3 / (f.usage.completion_tokens - 1) as f64);
        }
        if let Some(Event::SpeculativeDiagnostics(d)) = &f.speculation {
            m.drafted_tokens.fetch_add(d.drafted as u64, Ordering::Relaxed);
            m.accepted_tokens.fetch_add(d.accepted as u64, Ordering::Relaxed);
        }
        tracing::info!(
            id = %job.id,
            outcome = "completed",
            prompt_tokens = f.usage.prompt_tokens,
            completion_tokens = f.usage.completion_tokens,
            finish_reason = ?f.finish_reason,
            queue_ms = format!("{:.1}", f.queue_ms),
            prefill_ms = format!("{:.1}", f.prefill_ms),
            decode_ms = format!("{:.1}", f.decode_ms),
            "request done"
        );
    }

    fn serve(&mut self, job: &Job) -> Result<Finished, Failure> {
        let queue_ms = job.enqueued.elapsed().as_secs_f64() * 1e3;
        let engine = &*self.engine;
        let tok = &engine.loaded.tokenizer;
        let p = &job.prepared;
        let mut sink = JobSink {
            tok,
            tx: &job.tx,
            stream: p.request.stream,
            abort: &self.abort,
            deadline: job.deadline,
            ids: Vec::new(),
            detok: Detokenizer::default(),
            text: StopText::new(p.request.stop.clone()),
        };
        let tag = crate::request::Tag { id: &job.id, warmup: false, repeat: 0 };
        let (g, speculation) = crate::request::decode_opts(
            engine,
            self.spec.as_mut(),
            &p.prompt_ids,
            p.max_tokens,
            &job.sampling,
            p.request.ignore_eos,
            &mut sink,
            tag,
        )
        .map_err(|e| match e {
            GenerateError::Cancelled => Failure::Cancelled,
            e => Failure::Error(e.to_string()),
        })?;
        let full = tok.decode(&g.token_ids).map_err(|e| Failure::Error(format!("decoding the completion: {e}")))?;
        let (rest, text) = sink.text.finish(&full);
        let text = text.to_string();
        if p.request.stream && !rest.is_empty() {
            let _ = job.tx.send(Msg::Text(rest));
        }
        let finish_reason = if sink.text.stopped() { FinishReason::Stop } else { g.finish_reason };
        let usage = Usage {
            prompt_tokens: g.prompt_tokens,
            completion_tokens: g.token_ids.len(),
            total_tokens: g.prompt_tokens + g.token_ids.len(),
        };
        let finished = Finished {
            text,
            finish_reason,
            usage,
            queue_ms,
            prefill_ms: g.prefill_s * 1e3,
            decode_ms: g.decode_s * 1e3,
            decode_steps: g.decode_steps,
            token_ids: g.token_ids.clone(),
            speculation: speculation.clone(),
        };
        if self.json {
            self.write_events(job, g, speculation);
        }
        Ok(finished)
    }

    /// The same events `runtime generate --json` writes per request.
    fn write_events(&self, job: &Job, g: crate::generate::Generation, extra: Option<Event>) {
        let tok = &self.engine.loaded.tokenizer;
        match crate::cli::completion_event(&job.id, false, 0, g, tok) {
            Ok(c) => {
                let mut out = std::io::stdout().lock();
                let mut line = Event::Completion(c).to_line();
                if let Some(e) = extra {
                    line.push('\n');
                    line.push_str(&e.to_line());
                }
                if writeln!(out, "{line}").and_then(|()| out.flush()).is_err() {
                    tracing::warn!("could not write events to stdout");
                }
            }
            Err(e) => tracing::warn!(id = %job.id, "no completion event: {e}"),
        }
    }
}

/// Why a request produced no response.
enum Failure {
    /// The client left (or shutdown's grace period ended).
    Cancelled,
    Error(String),
}

/// Streams text pieces to the handler and notices a departed client.
struct JobSink<'a> {
    tok: &'a Tokenizer,
    tx: &'a UnboundedSender<Msg>,
    stream: bool,
    abort: &'a AtomicBool,
    deadline: Instant,
    ids: Vec<u32>,
    detok: Detokenizer,
    text: StopText,
}

impl TokenSink for JobSink<'_> {
    /// The client is gone, shutdown's grace ended, or the deadline passed.
    fn cancelled(&self) -> bool {
        self.tx.is_closed() || self.abort.load(Ordering::Relaxed) || Instant::now() >= self.deadline
    }

    fn token(&mut self, id: u32) -> ControlFlow<Halt> {
        if self.cancelled() {
            return ControlFlow::Break(Halt::Cancel);
        }
        self.ids.push(id);
        if self.ids.len() == 1 && self.stream {
            let _ = self.tx.send(Msg::First);
        }
        // A decoding failure here only delays text: `finish` decodes everything again.
        let piece = self.detok.next(self.tok, &self.ids).unwrap_or_default();
        let out = self.text.push(&piece);
        if self.stream && !out.is_empty() && self.tx.send(Msg::Text(out)).is_err() {
            return ControlFlow::Break(Halt::Cancel);
        }
        if self.text.stopped() { ControlFlow::Break(Halt::Stop) } else { ControlFlow::Continue(()) }
    }
}
