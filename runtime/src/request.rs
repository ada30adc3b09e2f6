//! One request, decoded the way the process was configured: classic
//! decoding, speculative decoding at the resolved width, or classic decoding
//! because speculation was declined. `runtime generate` and `runtime serve`
//! both go through [`decode`], so they emit the same tokens and the same
//! per-request events.

use crate::events::{Declined, Event, SCHEMA_VERSION, SpeculativeDiagnostics};
use crate::engine::{Engine, GenerateError, Generation, TokenSink};
use crate::sampling::SamplingParams;
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
/// and says so with a `declined` event ([`IGNORE_EOS_DECLINE`]).
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
    if ignore_eos {
        let declined =
            spec.and_then(|sp| Some(declined(sp, &tag, sp.active_width()?, IGNORE_EOS_DECLINE.to_string())));
        let p = engine.prefill_cancellable(prompt, &|| sink.cancelled())?;
        let g = engine.decode_with_eos(p, max_tokens, sampling, sink, true)?;
        return Ok((g, declined));
    }
    match spec {
        Some(sp) if sp.active_width().is_some() => {
            let schedule = sp.schedule().expect("the match guard saw a width");
            let p = engine.prefill_cancellable(prompt, &|| sink.cancelled())?;
            let (g, stats) =
                engine.decode_speculative(p, max_tokens, sampling, sp.drafter.as_mut(), schedule.clone(), sink)?;
            let diag = SpeculativeDiagnostics::new(tag.id, tag.warmup, tag.repeat, sp.kind.as_str(), &schedule, &stats);
            Ok((g, Some(Event::SpeculativeDiagnostics(diag))))
        }
        other => {
            let declined = other.and_then(|sp| match (sp.declined_reason(), sp.width) {
                (Some(reason), Some(width)) => Some(declined(sp, &tag, width, reason)),
                _ => None,
            });
            let p = engine.prefill_cancellable(prompt, &|| sink.cancelled())?;
            let g = engine.decode_with(p, max_tokens, sampling, sink)?;
            Ok((g, declined))
        }
    }
}

/// The `declined` event of a request that decoded classically on an engine
/// set up for speculation at `width`.
fn declined(sp: &Speculation, tag: &Tag<'_>, width: crate::policy::Width, reason: String) -> Event {
    Event::Declined(Declined {
        schema_version: SCHEMA_VERSION,
        prompt_id: tag.id.to_string(),
        warmup: tag.warmup,
        repeat: tag.repeat,
        drafter: sp.kind.to_string(),
        width,
        reason,
        probe: sp.probe.clone(),
    })
}
