//! The engine thread: takes one request at a time from the wait queue and
//! decodes it with [`crate::request::decode`] — the same code path as
//! `runtime generate`, so greedy text is byte-identical — reporting text
//! pieces to the request's handler as tokens are emitted. A request whose
//! handler is gone (the client disconnected) is skipped if it is still
//! waiting, and cancelled at the next token if it is running.

use super::error::ApiError;
use super::metrics::Stats;
use super::parse::Prepared;
use super::queue::Queue;
use super::text::{Detokenizer, StopText};
use crate::batch::Running;
use crate::engine::{Engine, FinishReason, GenerateError, Halt, TokenSink};
use crate::events::{Completion, Event, SpeculationReport};
use crate::sampling::SamplingParams;
use crate::speculative::setup::Speculation;
use std::io::Write;
use std::ops::ControlFlow;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
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

/// A finished request: its record as `runtime generate --json` writes it,
/// and what the response says beside it.
#[derive(Clone, Debug)]
pub struct Finished {
    /// The `completion` event: usage, timings and every generated token id
    /// (a stop string's tokens included), with the text they decode to.
    pub completion: Completion,
    /// `speculative_diagnostics` or `declined`.
    pub speculation: Option<SpeculationReport>,
    /// The response text: the completion's text cut before a stop string.
    pub text: String,
    /// `stop` also when a stop string ended a generation the decoder saw
    /// run to its budget.
    pub finish_reason: FinishReason,
    pub queue_ms: f64,
    /// The response's `logprobs` object, when asked for (`logprobs.rs`).
    pub logprobs: Option<serde_json::Value>,
    /// Completions' `echo`: the prompt's text, before the completion's.
    pub echo: Option<String>,
    /// The batches it ran in.
    pub batch: crate::events::ServedBatch,
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
    /// The client's place among waiting requests, given back when the
    /// engine takes the job up (`share.rs`).
    pub place: Option<super::share::Place>,
}

/// The engine thread's state.
pub struct Worker {
    pub engine: Arc<Engine>,
    pub spec: Option<Speculation>,
    pub queue: Arc<Queue<Job>>,
    pub stats: Arc<Stats>,
    /// Set at shutdown once the grace period is over: the running requests
    /// are cancelled at their next token.
    pub abort: Arc<AtomicBool>,
    /// Write `completion` (and `speculative_diagnostics`/`declined`) events on stdout.
    pub json: bool,
    /// Sequences decoding at once (`--parallel`).
    pub parallel: usize,
    /// Prompt tokens per pass (`--prefill-chunk`).
    pub prefill_chunk: usize,
    /// Cache positions the running sequences may reserve together
    /// (`--kv-budget-mb`, in positions).
    pub kv_positions: usize,
}

/// A running request beside its sequence.
struct Meta {
    job: Job,
    declined: Option<crate::request::Declined>,
    queue_ms: f64,
    /// Cache positions reserved for it ([`Worker::reservation`]).
    reserved: usize,
}

/// How a request ended in the batch.
type Ended = Result<(), GenerateError>;

impl Worker {
    /// Serves requests until the queue is closed and the running ones end:
    /// up to `parallel` sequences share each pass ([`crate::batch::step`]);
    /// a request joins at the next pass once a slot and its cache
    /// reservation are free (in arrival order: a request that does not fit
    /// yet holds the ones behind it), and leaves when it finishes.
    pub fn run(self) {
        let mut runs: Vec<Running<'static, JobSink>> = Vec::new();
        let mut metas: Vec<Meta> = Vec::new();
        // The oldest waiting request, taken from the queue but waiting for
        // cache room.
        let mut held: Option<Job> = None;
        let mut closed = false;
        loop {
            while runs.len() < self.parallel {
                let mut job = match held.take() {
                    Some(j) => j,
                    None if runs.is_empty() => match self.queue.pop() {
                        Some(j) => j,
                        None => return,
                    },
                    None => match self.queue.try_pop() {
                        Ok(Some(j)) => j,
                        Ok(None) => break,
                        Err(()) => {
                            closed = true;
                            break;
                        }
                    },
                };
                // No longer waiting: the client's place is free for its next request.
                drop(job.place.take());
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
                let need = self.reservation(&job);
                if need > self.kv_positions {
                    tracing::info!(id = %job.id, outcome = "failed", "needs more cache than --kv-budget-mb allows");
                    self.stats.failed.fetch_add(1, Ordering::SeqCst);
                    let _ = job.tx.send(Msg::Done(Err(ApiError::kv_budget(need, self.kv_positions))));
                    continue;
                }
                if metas.iter().map(|m| m.reserved).sum::<usize>() + need > self.kv_positions {
                    held = Some(job);
                    break;
                }
                let queue_ms = job.enqueued.elapsed().as_secs_f64() * 1e3;
                match self.begin(&job) {
                    Ok((run, declined)) => {
                        runs.push(run);
                        metas.push(Meta { job, declined, queue_ms, reserved: need });
                    }
                    Err(e) => {
                        tracing::error!(id = %job.id, outcome = "failed", "generation failed: {e}");
                        self.stats.failed.fetch_add(1, Ordering::SeqCst);
                        let _ = job.tx.send(Msg::Done(Err(ApiError::internal(e))));
                    }
                }
            }
            if runs.is_empty() {
                if closed {
                    return;
                }
                continue;
            }
            self.stats.running.store(runs.len(), Ordering::SeqCst);
            // A panic in one pass must not take the server down with it.
            let engine = self.engine.clone();
            let chunk = self.prefill_chunk;
            let stepped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                crate::batch::step(&engine, &mut runs, chunk)
            }));
            let ended: Vec<Option<Ended>> = match stepped {
                Ok(st) => {
                    if st.sequences > 0 {
                        self.stats.metrics.batch_rows.observe(st.rows as f64);
                        self.stats.metrics.batch_sequences.observe(st.sequences as f64);
                    }
                    st.ended
                }
                Err(_) => {
                    tracing::error!("a batched pass panicked; failing its requests");
                    runs.clear();
                    for meta in metas.drain(..) {
                        self.reply(&meta.job, Err(Failure::Panicked));
                    }
                    self.stats.running.store(0, Ordering::SeqCst);
                    continue;
                }
            };
            for k in (0..runs.len()).rev() {
                let Some(end) = &ended[k] else { continue };
                let run = runs.remove(k);
                let meta = metas.remove(k);
                let outcome = match end {
                    Ok(()) => std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.complete(run, &meta)))
                        .unwrap_or(Err(Failure::Panicked)),
                    Err(GenerateError::Cancelled) => Err(Failure::Cancelled),
                    Err(e) => Err(Failure::Error(e.to_string())),
                };
                self.reply(&meta.job, outcome);
            }
            self.stats.running.store(runs.len(), Ordering::SeqCst);
        }
    }

    /// Cache positions a request may fill: its prompt, its budget and one
    /// verify block's drafts, at most the context.
    fn reservation(&self, job: &Job) -> usize {
        let p = &job.prepared;
        let cap = self.spec.as_ref().and_then(|s| s.active_width()).map_or(0, |w| w.get());
        (p.prompt_ids.len() + p.max_tokens + cap + 1).min(self.engine.loaded.model.config.context_length)
    }

    /// The request's sequence, ready to join the batch.
    fn begin(&self, job: &Job) -> Result<(Running<'static, JobSink>, Option<crate::request::Declined>), String> {
        let p = &job.prepared;
        let (seq, declined) = crate::request::begin_forked(
            &self.engine,
            self.spec.as_ref(),
            &p.prompt_ids,
            p.max_tokens,
            &job.sampling,
            p.request.ignore_eos,
            self.prefill_chunk,
        )
        .map_err(|e| e.to_string())?;
        let sink = JobSink {
            engine: self.engine.clone(),
            tx: job.tx.clone(),
            stream: p.request.stream,
            abort: self.abort.clone(),
            deadline: job.deadline,
            ids: Vec::new(),
            detok: Detokenizer::default(),
            text: StopText::new(p.request.stop.clone()),
        };
        Ok((Running::new(seq, sink), declined))
    }

    /// Answers a request that left the batch, counting it.
    fn reply(&self, job: &Job, outcome: Result<Finished, Failure>) {
        // Count before answering, so a client that reads `/health` right
        // after its response sees itself counted.
        let reply = match outcome {
            Ok(finished) => {
                self.account(job, &finished);
                self.stats.completed.fetch_add(1, Ordering::SeqCst);
                Some(Ok(Box::new(finished)))
            }
            Err(Failure::Cancelled) if Instant::now() >= job.deadline => {
                tracing::info!(id = %job.id, outcome = "timed_out", "deadline passed; generation cancelled");
                self.stats.timed_out.fetch_add(1, Ordering::SeqCst);
                Some(Err(ApiError::deadline(job.timeout)))
            }
            Err(Failure::Cancelled) => {
                tracing::info!(id = %job.id, outcome = "cancelled", "client left; generation cancelled");
                self.stats.cancelled.fetch_add(1, Ordering::SeqCst);
                None
            }
            Err(Failure::Error(e)) => {
                tracing::error!(id = %job.id, outcome = "failed", "generation failed: {e}");
                self.stats.failed.fetch_add(1, Ordering::SeqCst);
                Some(Err(ApiError::internal(e)))
            }
            Err(Failure::Panicked) => {
                tracing::error!(id = %job.id, outcome = "failed", "generation panicked");
                self.stats.failed.fetch_add(1, Ordering::SeqCst);
                Some(Err(ApiError::internal("the generation failed unexpectedly")))
            }
        };
        if let Some(r) = reply {
            let _ = job.tx.send(Msg::Done(r));
        }
    }

    /// The per-request log line and the `/metrics` counters of a finished request.
    fn account(&self, job: &Job, f: &Finished) {
        let m = &self.stats.metrics;
        let o = &f.completion.outcome;
        m.prompt_tokens.fetch_add(o.usage.prompt_tokens as u64, Ordering::Relaxed);
        m.completion_tokens.fetch_add(o.usage.completion_tokens as u64, Ordering::Relaxed);
        if o.usage.completion_tokens > 0 {
            m.ttft_s.observe((f.queue_ms + o.prefill_ms) / 1e3);
        }
        if o.usage.completion_tokens > 1 {
            m.per_token_s.observe(o.decode_ms / 1e3 / (o.usage.completion_tokens - 1) as f64);
        }
        m.queue_s.observe(f.queue_ms / 1e3);
        // The request arrived `timeout` before its deadline.
        if let Some(arrived) = job.deadline.checked_sub(job.timeout) {
            m.e2e_s.observe(arrived.elapsed().as_secs_f64());
        }
        if let Some(d) = f.speculation.as_ref().and_then(SpeculationReport::diagnostics) {
            m.drafted_tokens.fetch_add(d.drafted as u64, Ordering::Relaxed);
            m.accepted_tokens.fetch_add(d.accepted as u64, Ordering::Relaxed);
            m.verify_passes.fetch_add(d.rounds as u64, Ordering::Relaxed);
            m.plain_steps.fetch_add(d.plain_steps as u64, Ordering::Relaxed);
            m.verify_tokens.fetch_add(d.emitted_in_rounds as u64, Ordering::Relaxed);
            for (c, &n) in m.accepted_by_position.iter().zip(&d.accepted_per_position) {
                c.fetch_add(n as u64, Ordering::Relaxed);
            }
            for (c, &n) in m.draft_lengths.iter().zip(&d.draft_lengths) {
                c.fetch_add(n as u64, Ordering::Relaxed);
            }
        }
        tracing::info!(
            id = %job.id,
            outcome = "completed",
            prompt_tokens = o.usage.prompt_tokens,
            completion_tokens = o.usage.completion_tokens,
            finish_reason = ?f.finish_reason,
            queue_ms = format!("{:.1}", f.queue_ms),
            prefill_ms = format!("{:.1}", o.prefill_ms),
            decode_ms = format!("{:.1}", o.decode_ms),
            "request done"
        );
    }

    /// The response of a request whose sequence finished: its text (cut at
    /// a stop string), log probabilities when asked for, its events.
    fn complete(&self, run: Running<'static, JobSink>, meta: &Meta) -> Result<Finished, Failure> {
        let (job, queue_ms) = (&meta.job, meta.queue_ms);
        let engine = &*self.engine;
        let tok = &engine.loaded.tokenizer;
        let p = &job.prepared;
        let Running { seq, mut sink, passes, batched, widest } = run;
        let tag = crate::request::Tag { id: &job.id, warmup: false, repeat: 0 };
        let declined = meta.declined.clone();
        let (g, speculation) = crate::request::end(seq, declined, tag);
        let full = tok.decode(&g.token_ids).map_err(|e| Failure::Error(format!("decoding the completion: {e}")))?;
        let (rest, text) = sink.text.finish(&full);
        let text = text.to_string();
        if p.request.stream && !rest.is_empty() {
            let _ = job.tx.send(Msg::Text(rest));
        }
        let finish_reason = if sink.text.stopped() { FinishReason::Stop } else { g.finish_reason };
        let logprobs = match p.request.logprobs {
            None => None,
            // Cancelled like the generation: client gone, deadline, shutdown.
            Some(top) => Some(self.logprobs(p, &g.token_ids, top, text.len(), &|| sink.cancelled())?),
        };
        let echo = p.request.echo.then(|| match &p.request.prompt {
            super::parse::Prompt::Text(t) => t.clone(),
            _ => tok.decode(&p.prompt_ids).unwrap_or_default(),
        });
        let completion = Completion::new(&job.id, false, 0, g, full);
        let speculation = speculation.and_then(SpeculationReport::from_event);
        if self.json {
            self.write_events(&completion, speculation.as_ref());
        }
        let batch = crate::events::ServedBatch {
            passes,
            mean_sequences: if passes > 0 { batched as f64 / passes as f64 } else { 0.0 },
            widest,
        };
        Ok(Finished { completion, speculation, text, finish_reason, queue_ms, logprobs, echo, batch })
    }

    /// The `logprobs` object of a finished request: the scoring pass over
    /// the prompt (with `echo`) and the completion's tokens, the latter cut
    /// where the response text ends (a stop string's tokens are not shown).
    fn logprobs(
        &self,
        p: &Prepared,
        ids: &[u32],
        top: usize,
        text_len: usize,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<serde_json::Value, Failure> {
        use super::logprobs::{ScoreError, chat_json, completions_json, score};
        let engine = &*self.engine;
        let tok = &engine.loaded.tokenizer;
        // The completion's tokens that start inside the response text; only
        // those are scored.
        let (mut shown, mut at) = (0, 0);
        for &id in ids {
            if at >= text_len {
                break;
            }
            at += tok.decode(&[id]).map_or(0, |t| t.len());
            shown += 1;
        }
        let mut seq = p.prompt_ids.clone();
        seq.extend_from_slice(&ids[..shown]);
        let echo = p.request.echo;
        let from = if echo { 1 } else { p.prompt_ids.len() };
        let scored = score(engine, &seq, from, top, cancelled).map_err(|e| match e {
            ScoreError::Cancelled => Failure::Cancelled,
            ScoreError::Forward(e) => Failure::Error(format!("scoring log probabilities: {e}")),
        })?;
        Ok(match p.request.endpoint {
            // With `echo`, the prompt's tokens come first, the first unscored.
            // (`/completion` refuses `logprobs`; its shape would be completions'.)
            super::parse::Endpoint::Completions | super::parse::Endpoint::Llama => {
                completions_json(tok, if echo { &p.prompt_ids[..1] } else { &[] }, &scored)
            }
            super::parse::Endpoint::Chat => chat_json(tok, &scored),
        })
    }

    /// The same events `runtime generate --json` writes per request.
    fn write_events(&self, c: &Completion, speculation: Option<&SpeculationReport>) {
        let mut out = std::io::stdout().lock();
        let mut line = Event::Completion(c.clone()).to_line();
        if let Some(s) = speculation {
            line.push('\n');
            line.push_str(&s.clone().into_event().to_line());
        }
        if writeln!(out, "{line}").and_then(|()| out.flush()).is_err() {
            tracing::warn!("could not write events to stdout");
        }
    }
}

/// Why a request produced no response.
enum Failure {
    /// The client left (or shutdown's grace period ended).
    Cancelled,
    Error(String),
    Panicked,
}

/// Streams text pieces to the handler and notices a departed client.
pub struct JobSink {
    engine: Arc<Engine>,
    tx: UnboundedSender<Msg>,
    stream: bool,
    abort: Arc<AtomicBool>,
    deadline: Instant,
    ids: Vec<u32>,
    detok: Detokenizer,
    text: StopText,
}

impl TokenSink for JobSink {
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
        let piece = self.detok.next(&self.engine.loaded.tokenizer, &self.ids).unwrap_or_default();
        let out = self.text.push(&piece);
        if self.stream && !out.is_empty() && self.tx.send(Msg::Text(out)).is_err() {
            return ControlFlow::Break(Halt::Cancel);
        }
        if self.text.stopped() { ControlFlow::Break(Halt::Stop) } else { ControlFlow::Continue(()) }
    }
}
