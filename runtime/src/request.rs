//! One request, decoded the way the process was configured: classic
//! decoding, speculative decoding at the resolved width, or classic decoding
//! because speculation was declined. `runtime generate` and `runtime serve`
//! both go through [`decode`], so they emit the same tokens and the same
//! per-request events.

use crate::engine::{Engine, GenerateError, Generation, PREFILL_CHUNK, TokenSink};
use crate::events::{Event, SCHEMA_VERSION, SpeculativeDiagnostics};
use crate::sampling::SamplingParams;
use crate::sequence::{DrafterSlot, Sequence};
use crate::speculative::setup::Speculation;

/// Which request this is, for its events.
#[derive(Clone, Copy, Debug)]
pub struct Tag<'a> {
    pub id: &'a str,
    pub warmup: bool,
    pub repeat: usize,
}

/// Prefills `prompt` (in chunks, asking `sink` between them whether to
/// stop: [`Engine::prefill_cancellable`]) and decodes it. Besides the generation, returns the
/// event that follows its `completion`: `speculative_diagnostics` when it
/// speculated, `declined` when a drafter was asked for but a failed
/// exactness probe sent it to classic decoding, `None` otherwise (no
/// drafter, or a policy entry that turned speculation off — the `startup`
/// event says so).
pub fn decode(
    engine: &Engine,
    spec: Option<&mut Speculation>,
    prompt: &[u32],
    max_tokens: usize,
    sampling: &SamplingParams,
    sink: &mut dyn TokenSink,
    tag: Tag<'_>,
) -> Result<(Generation, Option<Event>), GenerateError> {
    decode_opts(engine, spec, prompt, max_tokens, sampling, false, sink, tag)
}

/// Why a request with `ignore_eos` decodes classically on a speculative engine.
pub const IGNORE_EOS_DECLINE: &str = "ignore_eos: the speculative decoder always stops at end-of-generation tokens, so this request ran classic decoding";

/// [`decode`], optionally ignoring end-of-generation tokens (`ignore_eos`):
/// classic decoding emits them and runs to the budget. The speculative
/// decoder does not take the option, so such a request decodes classically
/// and says so with a `declined` event ([`IGNORE_EOS_DECLINE`]). The
/// request runs alone: [`begin`], [`Engine::run_alone`], [`end`] (the
/// server's batches run the same three steps, with other sequences beside).
#[allow(clippy::too_many_arguments)]
pub fn decode_opts(
    engine: &Engine,
    spec: Option<&mut Speculation>,
    prompt: &[u32],
    max_tokens: usize,
    sampling: &SamplingParams,
    ignore_eos: bool,
    sink: &mut dyn TokenSink,
    tag: Tag<'_>,
) -> Result<(Generation, Option<Event>), GenerateError> {
    let (mut seq, declined) = begin(engine, spec, prompt, max_tokens, sampling, ignore_eos, PREFILL_CHUNK)?;
    engine.run_alone(&mut seq, sink)?;
    Ok(end(seq, declined, tag))
}

/// The sequence of one request, decoding the way the process was
/// configured, its prompt run in passes of `chunk` tokens, speculating (when
/// it does) with the process's drafter, borrowed. Besides it, the `declined`
/// event when a drafter was asked for but this request decodes classically:
/// a failed exactness probe, or `ignore_eos` ([`IGNORE_EOS_DECLINE`]). The
/// request's tag is given at [`end`].
#[allow(clippy::too_many_arguments)]
pub fn begin<'d>(
    engine: &Engine,
    spec: Option<&'d mut Speculation>,
    prompt: &[u32],
    max_tokens: usize,
    sampling: &SamplingParams,
    ignore_eos: bool,
    chunk: usize,
) -> Result<(Sequence<'d>, Option<Declined>), GenerateError> {
    let seq = Sequence::new(&engine.loaded.model, prompt, chunk, max_tokens, *sampling, ignore_eos)?;
    let route = route(spec.as_deref(), ignore_eos);
    let slot = spec.map(|sp| DrafterSlot::Borrowed(sp.drafter.as_mut()));
    Ok(start(engine, seq, route, slot))
}

/// [`begin`] for a sequence decoded beside others (the server's batches):
/// it speculates with a fork of the process's drafter, its own state.
#[allow(clippy::too_many_arguments)]
pub fn begin_forked(
    engine: &Engine,
    spec: Option<&Speculation>,
    prompt: &[u32],
    max_tokens: usize,
    sampling: &SamplingParams,
    ignore_eos: bool,
    chunk: usize,
) -> Result<(Sequence<'static>, Option<Declined>), GenerateError> {
    let seq = Sequence::new(&engine.loaded.model, prompt, chunk, max_tokens, *sampling, ignore_eos)?;
    let route = route(spec, ignore_eos);
    // A fork only for a sequence that speculates: it copies the drafter's state.
    let slot = spec.filter(|_| matches!(route, Route::Speculate(..))).map(|sp| DrafterSlot::Owned(sp.drafter.fork()));
    Ok(start(engine, seq, route, slot))
}

/// `seq` set to decode as `route` says, drafting with `slot` when it
/// speculates; the `declined` event of a classic route.
fn start<'d>(
    engine: &Engine,
    seq: Sequence<'d>,
    route: Route,
    slot: Option<DrafterSlot<'d>>,
) -> (Sequence<'d>, Option<Declined>) {
    match (route, slot) {
        (Route::Speculate(schedule, ladder), Some(slot)) => {
            (seq.speculate(&engine.loaded.model, slot, schedule).under_load(&ladder), None)
        }
        (Route::Classic(declined), _) => (seq, declined),
        (Route::Speculate(..), None) => (seq, None),
    }
}

/// How one request decodes.
enum Route {
    /// Classically; with the `declined` event when speculation was asked for.
    Classic(Option<Declined>),
    /// Speculatively, with the schedule and the policy's buckets under load.
    Speculate(crate::speculative::schedule::Schedule, Vec<::policy::Bucket>),
}

fn route(spec: Option<&Speculation>, ignore_eos: bool) -> Route {
    match spec {
        Some(sp) if ignore_eos => {
            Route::Classic(sp.active_width().map(|w| declined(sp, w, IGNORE_EOS_DECLINE.to_string())))
        }
        Some(sp) if sp.active_width().is_some() => {
            Route::Speculate(sp.schedule().expect("the match guard saw a width"), sp.ladder.clone())
        }
        other => Route::Classic(other.and_then(|sp| match (sp.declined_reason(), sp.width) {
            (Some(reason), Some(width)) => Some(declined(sp, width, reason)),
            _ => None,
        })),
    }
}

/// A finished [`begin`] sequence's generation, and the event that follows
/// its `completion`: `speculative_diagnostics` when it speculated, its
/// `declined` event when it declined, `None` otherwise (no drafter, or a
/// policy entry that turned speculation off — the `startup` event says so).
pub fn end(mut seq: Sequence<'_>, declined: Option<Declined>, tag: Tag<'_>) -> (Generation, Option<Event>) {
    let (kind, schedule) = (seq.drafter_kind(), seq.schedule().cloned());
    let (g, stats) = seq.into_generation();
    let event =
        match (stats, kind, schedule) {
            (Some(stats), Some(kind), Some(schedule)) => Some(Event::SpeculativeDiagnostics(
                SpeculativeDiagnostics::new(tag.id, tag.warmup, tag.repeat, kind.as_str(), &schedule, &stats),
            )),
            _ => declined.map(|d| {
                Event::Declined(crate::events::Declined {
                    prompt_id: tag.id.to_string(),
                    warmup: tag.warmup,
                    repeat: tag.repeat,
                    ..d.0
                })
            }),
        };
    (g, event)
}

/// A `declined` event waiting for its request's tag ([`end`]).
#[derive(Clone, Debug)]
pub struct Declined(crate::events::Declined);

/// The `declined` event of a request that decoded classically on an engine
/// set up for speculation at `width` (its tag is filled in at [`end`]).
fn declined(sp: &Speculation, width: crate::policy::Width, reason: String) -> Declined {
    Declined(crate::events::Declined {
        schema_version: SCHEMA_VERSION,
        prompt_id: String::new(),
        warmup: false,
        repeat: 0,
        drafter: sp.kind.to_string(),
        width,
        reason,
        probe: sp.probe.clone(),
    })
}
