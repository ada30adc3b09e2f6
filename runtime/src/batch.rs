//! Continuous batching: the sequences decoding at once share every forward
//! pass. Each step, every running [`Sequence`] plans its next rows (a
//! one-token step, a verify block, or a chunk of its prompt), the rows of
//! all of them run as one [`Model::forward_batch`] (each weight read once
//! for all rows; attention per sequence over its own cache), and each
//! sequence absorbs its own rows' logits.
//!
//! A sequence emits what it emits alone, whatever runs beside it: its rows'
//! logits do not depend on the other rows of a pass (`forward_batch`), and
//! its sampler, drafter and draft lengths are its own. The server joins a
//! new request at the next step and drops a finished one (`serve::worker`).
//!
//! Prompts run in chunks: at most `prefill_rows` prompt tokens join a pass
//! (the oldest prefilling sequence first, one chunk each), so a long prompt
//! delays the others' next token by one chunk's pass, not by the whole
//! prompt.

use crate::engine::{Engine, GenerateError, TokenSink};
use crate::model::forward::Segment;
use crate::policy::adaptive::Share;
use crate::sequence::{Plan, Sequence};
use std::time::Instant;

/// One sequence of a batch, with the sink that sees its tokens.
pub struct Running<'d, S> {
    pub seq: Sequence<'d>,
    pub sink: S,
    /// Passes this sequence had rows in, and the sequences those passes
    /// carried in all (the mean batch it ran in is their ratio).
    pub passes: usize,
    pub batched: usize,
    /// The most sequences a pass it was in carried.
    pub widest: usize,
}

impl<'d, S> Running<'d, S> {
    pub fn new(seq: Sequence<'d>, sink: S) -> Self {
        Running { seq, sink, passes: 0, batched: 0, widest: 0 }
    }
}

/// What one step did.
#[derive(Debug, Default)]
pub struct Step {
    /// Rows of the pass (0: no sequence had rows, nothing ran).
    pub rows: usize,
    /// Sequences with rows in the pass.
    pub sequences: usize,
    /// Per running sequence, in order: `None` while it runs on, `Some(Ok)`
    /// once it has finished ([`Sequence::finished`] says why), `Some(Err)`
    /// when it failed or was cancelled.
    pub ended: Vec<Option<Result<(), GenerateError>>>,
}

/// One pass over every running sequence (see the module's comment).
pub fn step<S: TokenSink>(engine: &Engine, running: &mut [Running<'_, S>], prefill_rows: usize) -> Step {
    let mut ended: Vec<Option<Result<(), GenerateError>>> = running.iter().map(|_| None).collect();
    let mut plans: Vec<Option<Plan>> = Vec::with_capacity(running.len());
    let mut prefill_left = prefill_rows;
    // The rows planned so far; each sequence not planned yet counts one row.
    let decoding = running.iter().filter(|r| !r.seq.prefilling()).count();
    let (mut planned_rows, mut planned) = (0usize, 0usize);
    for (i, r) in running.iter_mut().enumerate() {
        let prefilling = r.seq.prefilling();
        if prefilling && prefill_left == 0 {
            plans.push(None);
            continue;
        }
        let later = decoding.saturating_sub(planned + usize::from(!prefilling));
        let share = Share { rows: planned_rows + later, sequences: planned + later };
        plans.push(match r.seq.plan_shared(engine, &mut r.sink, share) {
            Ok(Some(p)) => {
                if prefilling {
                    prefill_left = prefill_left.saturating_sub(p.tokens.len());
                }
                planned_rows += p.tokens.len();
                planned += usize::from(!prefilling);
                Some(p)
            }
            Ok(None) => {
                ended[i] = Some(Ok(()));
                None
            }
            Err(e) => {
                ended[i] = Some(Err(e));
                None
            }
        });
    }
    let sequences = plans.iter().filter(|p| p.is_some()).count();
    let rows = plans.iter().flatten().map(|p| p.tokens.len()).sum();
    if sequences == 0 {
        return Step { rows: 0, sequences, ended };
    }
    let model = &engine.loaded.model;
    let t = Instant::now();
    let logits = engine.install(|| {
        let mut segs: Vec<Segment> = running
            .iter_mut()
            .zip(&plans)
            .filter_map(|(r, p)| {
                p.as_ref().map(|p| Segment { session: r.seq.session_mut(), tokens: &p.tokens, which: p.which })
            })
            .collect();
        model.forward_batch(engine.family, &mut segs)
    });
    let pass_s = t.elapsed().as_secs_f64();
    let mut logits = match logits {
        Ok(l) => l.into_iter(),
        Err(_) => {
            // One segment was refused, and the pass wrote nothing: run each
            // alone, so only the refused one fails.
            let alone: Vec<_> = running
                .iter_mut()
                .zip(&plans)
                .filter_map(|(r, p)| {
                    let p = p.as_ref()?;
                    Some(engine.install(|| model.forward(engine.family, r.seq.session_mut(), &p.tokens, p.which)))
                })
                .collect();
            let mut out = Vec::new();
            let mut k = 0;
            for (i, p) in plans.iter().enumerate() {
                if p.is_some() {
                    match &alone[k] {
                        Ok(l) => out.push(l.clone()),
                        Err(e) => {
                            ended[i] = Some(Err(GenerateError::Forward(e.clone())));
                            out.push(Vec::new());
                        }
                    }
                    k += 1;
                }
            }
            out.into_iter()
        }
    };
    for (i, (r, p)) in running.iter_mut().zip(&plans).enumerate() {
        if p.is_none() {
            continue;
        }
        let l = logits.next().unwrap_or_default();
        if ended[i].is_some() {
            continue;
        }
        r.passes += 1;
        r.batched += sequences;
        r.widest = r.widest.max(sequences);
        if let Err(e) = r.seq.absorb(engine, l, pass_s, &mut r.sink) {
            ended[i] = Some(Err(e));
        } else if r.seq.finished().is_some() {
            ended[i] = Some(Ok(()));
        }
    }
    Step { rows, sequences, ended }
}
