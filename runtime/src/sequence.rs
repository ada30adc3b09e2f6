//! One sequence's decoding as a series of passes: [`Sequence::plan`] says
//! which rows its next forward pass runs, the caller runs them (alone, or
//! beside other sequences' rows in one [`Model::forward_batch`]), and
//! [`Sequence::absorb`] takes their logits and emits what they decide.
//!
//! Classic decoding ([`Engine::decode_with_eos`]), speculative decoding
//! ([`Engine::decode_speculative`]) and the server's continuous batching
//! (`serve::batch`) all drive this one state machine, so a sequence emits the
//! same tokens whichever runs it: its rows' logits do not depend on the
//! other rows of a pass (`Model::forward_batch`), and everything else it
//! decides from (the sampler's state, the drafter's, the adaptive draft
//! length's) is its own.
//!
//! A speculative round: the next token `t` comes from the pending logits
//! exactly as in classic decoding (same sampler, same stop rule); the
//! drafter proposes up to the round's width after it; one pass runs
//! `[t, d0 .. dn-1]` and yields, for every row, the logits classic decoding
//! would have computed at that position, bit for bit. Greedy acceptance
//! keeps the longest prefix of the draft that equals the argmax of the
//! preceding row, so every emitted token is the one classic decoding emits;
//! the KV cache is cut back to the accepted prefix. With sampling, a draft
//! token is accepted with probability `min(1, p/q)` and a rejection
//! resamples from `max(0, p − q)` (Leviathan et al. 2023; Chen et al. 2023),
//! which keeps the target distribution.
//!
//! Penalties (repetition, presence, frequency) change each row's logits
//! from the tokens before its position ([`History`]). The history grows as
//! tokens are emitted, and a verify pass's rows are examined in order, each
//! draft emitted (counted) before the next row is penalized; so row `j` is
//! penalized for the prompt, the emitted tokens and drafts `0..j`, exactly
//! what classic decoding's step at that position sees. Greedy acceptance
//! compares the penalized argmax, and sampled acceptance tests against the
//! penalized distribution `p`, so both guarantees above hold with them.

use crate::engine::{Engine, FinishReason, GenerateError, Generation, Halt, NoSink, Prefilled, TokenSink, at_limit};
use crate::model::Session;
use crate::model::forward::{LogitRows, Model};
use crate::penalty::History;
use crate::policy::adaptive::Share;
use crate::sampling::{Rng, SamplingParams, distribution, sample};
use crate::speculative::decode::{SpecStats, verify_sampled};
use crate::speculative::drafter::{Drafter, Proposal};
use crate::speculative::schedule::{Rounds, Schedule};
use std::ops::ControlFlow;
use std::time::Instant;

/// What the next token comes from.
enum Pending {
    Logits(Vec<f32>),
    /// A token already drawn (a rejection's residual sample).
    Token(u32),
}

/// A drafter the sequence borrows (one request of `generate`) or owns (one
/// of the server's batched sequences).
pub enum DrafterSlot<'d> {
    Borrowed(&'d mut dyn Drafter),
    Owned(Box<dyn Drafter>),
}

impl DrafterSlot<'_> {
    fn get(&mut self) -> &mut dyn Drafter {
        match self {
            DrafterSlot::Borrowed(d) => &mut **d,
            DrafterSlot::Owned(d) => d.as_mut(),
        }
    }
}

/// The speculative part of a sequence's state.
struct Spec<'d> {
    drafter: DrafterSlot<'d>,
    schedule: Schedule,
    rounds: Rounds,
    stats: SpecStats,
    /// The prompt and every emitted token (what the drafter reads).
    context: Vec<u32>,
}

/// Where a sequence is.
enum Phase {
    /// The prompt from `done` on is still to run, `chunk` tokens per pass.
    Prefill {
        done: usize,
        chunk: usize,
    },
    /// Ready to choose its next token.
    Decode(Pending),
    /// A classic step's row was handed out; its logits are awaited.
    Step,
    /// A verify pass (`base`: the cache length before it) was handed out.
    Verify {
        proposal: Proposal,
        base: usize,
    },
    Finished(FinishReason),
}

/// The rows of a sequence's next pass.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    pub tokens: Vec<u32>,
    pub which: LogitRows,
}

/// One sequence being decoded, a pass at a time.
pub struct Sequence<'d> {
    prompt: Vec<u32>,
    session: Session,
    phase: Phase,
    max_tokens: usize,
    sampling: SamplingParams,
    ignore_eos: bool,
    rng: Rng,
    out: Vec<u32>,
    /// Forward passes after the prefill.
    steps: usize,
    started: Instant,
    prefill_s: f64,
    decode_start: Option<Instant>,
    spec: Option<Spec<'d>>,
    /// The tokens the penalties count; `None` when the request asks for
    /// no penalty.
    history: Option<History>,
}

impl<'d> Sequence<'d> {
    /// A sequence whose prompt runs in passes of `chunk` tokens (at least 1)
    /// before it decodes.
    pub fn new(
        model: &Model,
        prompt: &[u32],
        chunk: usize,
        max_tokens: usize,
        sampling: SamplingParams,
        ignore_eos: bool,
    ) -> Result<Self, GenerateError> {
        if prompt.is_empty() {
            return Err(GenerateError::EmptyPrompt);
        }
        let phase = Phase::Prefill { done: 0, chunk: chunk.max(1) };
        let session = Session::new(&model.config);
        Ok(Self::with(prompt.to_vec(), session, phase, max_tokens, sampling, ignore_eos))
    }

    /// A sequence whose prompt has run ([`Engine::prefill`]).
    pub fn prefilled(p: Prefilled, max_tokens: usize, sampling: SamplingParams, ignore_eos: bool) -> Self {
        let Prefilled { prompt, session, logits, prefill_s } = p;
        let phase = Phase::Decode(Pending::Logits(logits));
        let mut s = Self::with(prompt, session, phase, max_tokens, sampling, ignore_eos);
        s.prefill_s = prefill_s;
        s.decode_start = Some(Instant::now());
        s
    }

    /// The fields both constructors share: nothing emitted, no pass run
    /// after the prefill, classic until [`Sequence::speculate`].
    fn with(
        prompt: Vec<u32>,
        session: Session,
        phase: Phase,
        max_tokens: usize,
        sampling: SamplingParams,
        ignore_eos: bool,
    ) -> Self {
        Sequence {
            history: penalty_history(&sampling, &prompt),
            prompt,
            session,
            phase,
            max_tokens,
            sampling,
            ignore_eos,
            rng: Rng::new(sampling.seed),
            out: Vec::new(),
            steps: 0,
            started: Instant::now(),
            prefill_s: 0.0,
            decode_start: None,
            spec: None,
        }
    }

    /// Decodes speculatively with `drafter`, drafting per round what
    /// `schedule` says. Speculative decoding always stops at an
    /// end-of-generation token (`ignore_eos` requests decode classically:
    /// `request::decode_opts`).
    pub fn speculate(mut self, model: &Model, drafter: DrafterSlot<'d>, schedule: Schedule) -> Self {
        let mut drafter = drafter;
        let cap = schedule.cap().get();
        let rounds = schedule.start(drafter.get().step_cost(model));
        let stats =
            SpecStats { accepted_per_position: vec![0; cap], draft_lengths: vec![0; cap + 1], ..Default::default() };
        self.spec = Some(Spec { drafter, schedule, rounds, stats, context: self.prompt.clone() });
        self
    }

    /// Drafts by the policy's buckets when several sequences share a pass
    /// ([`crate::speculative::schedule::Rounds::ask_shared`]); a classic
    /// sequence, or an empty ladder, is left as it is.
    pub fn under_load(mut self, ladder: &[::policy::Bucket]) -> Self {
        if let Some(s) = &mut self.spec
            && !ladder.is_empty()
        {
            s.rounds.set_ladder(ladder);
            let cap = s.rounds.cap();
            s.stats.accepted_per_position.resize(cap, 0);
            s.stats.draft_lengths.resize(cap + 1, 0);
        }
        self
    }

    /// The cache the next pass appends to.
    pub fn session_mut(&mut self) -> &mut Session {
        &mut self.session
    }

    /// Tokens emitted so far.
    pub fn emitted(&self) -> &[u32] {
        &self.out
    }

    /// Whether the prompt has not finished running.
    pub fn prefilling(&self) -> bool {
        matches!(self.phase, Phase::Prefill { .. })
    }

    /// Positions in the cache.
    pub fn cached(&self) -> usize {
        self.session.len()
    }

    pub fn prompt_len(&self) -> usize {
        self.prompt.len()
    }

    /// Why it finished, once it has.
    pub fn finished(&self) -> Option<FinishReason> {
        match self.phase {
            Phase::Finished(f) => Some(f),
            _ => None,
        }
    }

    /// The drafter it speculates with, if any.
    pub fn drafter_kind(&mut self) -> Option<crate::policy::DrafterKind> {
        self.spec.as_mut().map(|s| s.drafter.get().kind())
    }

    /// The schedule it speculates with, if any.
    pub fn schedule(&self) -> Option<&Schedule> {
        self.spec.as_ref().map(|s| &s.schedule)
    }

    fn finish(&mut self, f: FinishReason) -> Result<Option<Plan>, GenerateError> {
        self.phase = Phase::Finished(f);
        Ok(None)
    }

    /// Emits `t` to `sink`: `Err` when the request is over (a stop string,
    /// or cancelled).
    fn emit(&mut self, t: u32, sink: &mut dyn TokenSink) -> Result<(), Result<FinishReason, GenerateError>> {
        self.out.push(t);
        if let Some(s) = &mut self.spec {
            s.context.push(t);
        }
        if let Some(h) = &mut self.history {
            h.push(t);
        }
        match sink.token(t) {
            ControlFlow::Continue(()) => Ok(()),
            ControlFlow::Break(Halt::Stop) => Err(Ok(FinishReason::Stop)),
            ControlFlow::Break(Halt::Cancel) => Err(Err(GenerateError::Cancelled)),
        }
    }

    fn full(&self, context_length: usize) -> bool {
        at_limit(self.prompt.len(), self.out.len(), self.max_tokens, context_length)
    }

    /// The rows of the next pass, having chosen (and emitted to `sink`) the
    /// token they start with; `None` once the sequence has finished (then
    /// [`Sequence::finished`] says why). A prefill asks `sink` before each
    /// chunk whether the request is abandoned.
    pub fn plan(&mut self, engine: &Engine, sink: &mut dyn TokenSink) -> Result<Option<Plan>, GenerateError> {
        self.plan_shared(engine, sink, Share::ALONE)
    }

    /// [`Sequence::plan`] for a pass shared with other sequences' rows
    /// (`share`): a greedy sequence's adaptive draft length prices its rows
    /// at their marginal cost in that pass ([`Rounds::ask_shared`]); its
    /// tokens are the same whatever it drafts. A sampled one drafts as
    /// alone, so that a seeded request draws the same tokens in any batch
    /// (its random draws follow its draft lengths).
    pub fn plan_shared(
        &mut self,
        engine: &Engine,
        sink: &mut dyn TokenSink,
        share: Share,
    ) -> Result<Option<Plan>, GenerateError> {
        let (tok, family) = (&engine.loaded.tokenizer, engine.family);
        let ctx_limit = engine.loaded.model.config.context_length;
        match std::mem::replace(&mut self.phase, Phase::Step) {
            Phase::Finished(f) => self.finish(f),
            Phase::Step | Phase::Verify { .. } => {
                panic!("Sequence::plan called while a pass's logits were awaited (absorb them first)")
            }
            Phase::Prefill { done, chunk } => {
                if sink.cancelled() {
                    return Err(GenerateError::Cancelled);
                }
                let end = (done + chunk).min(self.prompt.len());
                self.phase = Phase::Prefill { done, chunk };
                Ok(Some(Plan { tokens: self.prompt[done..end].to_vec(), which: LogitRows::Last }))
            }
            Phase::Decode(pending) => {
                if self.out.len() >= self.max_tokens {
                    return self.finish(FinishReason::Length);
                }
                let ts = Instant::now();
                let t = match pending {
                    Pending::Logits(mut l) => {
                        self.penalize(&mut l);
                        sample(&l, &self.sampling, &mut self.rng)
                    }
                    Pending::Token(t) => t,
                };
                let speculating = self.spec.is_some();
                if let Some(s) = &mut self.spec {
                    s.stats.sample_s += ts.elapsed().as_secs_f64();
                }
                if (speculating || !self.ignore_eos) && tok.is_end_of_generation(t) {
                    return self.finish(FinishReason::Stop);
                }
                if let Err(end) = self.emit(t, sink) {
                    return self.finish(end?);
                }
                if self.full(ctx_limit) {
                    return self.finish(FinishReason::Length);
                }
                let Some(s) = &mut self.spec else {
                    self.phase = Phase::Step;
                    return Ok(Some(Plan { tokens: vec![t], which: LogitRows::Last }));
                };
                // This round's draft: the schedule's, no further than the
                // budget and the context allow.
                let cap = s.rounds.cap();
                let room = cap.min(self.max_tokens - self.out.len()).min(ctx_limit - self.session.len() - 1);
                let share = if self.sampling.is_greedy() { share } else { Share::ALONE };
                let ask = s.rounds.ask_shared(self.session.len(), room, share);
                let round_width = ask.draft.min(room);
                if room > 0 {
                    s.stats.draft_lengths[round_width] += 1;
                }
                s.stats.probes += usize::from(ask.probe);
                let td = Instant::now();
                let mut proposal = if round_width > 0 {
                    s.drafter.get().propose(family, &s.context, round_width, &self.sampling, &mut self.rng)?
                } else {
                    Proposal::default()
                };
                proposal.tokens.truncate(round_width);
                s.stats.draft_s += td.elapsed().as_secs_f64();
                // The verify pass's rows: the last emitted token, then the drafts.
                let mut tokens = Vec::with_capacity(proposal.tokens.len() + 1);
                tokens.push(t);
                tokens.extend_from_slice(&proposal.tokens);
                self.phase = Phase::Verify { proposal, base: self.session.len() };
                Ok(Some(Plan { tokens, which: LogitRows::All }))
            }
        }
    }

    /// Takes the logits of the pass [`Sequence::plan`] asked for (it ran in
    /// `pass_s` seconds), emitting to `sink` what they decide.
    pub fn absorb(
        &mut self,
        engine: &Engine,
        logits: Vec<f32>,
        pass_s: f64,
        sink: &mut dyn TokenSink,
    ) -> Result<(), GenerateError> {
        match std::mem::replace(&mut self.phase, Phase::Step) {
            Phase::Prefill { done, chunk } => {
                let done = (done + chunk).min(self.prompt.len());
                if done < self.prompt.len() {
                    self.phase = Phase::Prefill { done, chunk };
                } else {
                    self.prefill_s = self.started.elapsed().as_secs_f64();
                    self.decode_start = Some(Instant::now());
                    self.phase = Phase::Decode(Pending::Logits(logits));
                }
                Ok(())
            }
            Phase::Step => {
                self.steps += 1;
                self.phase = Phase::Decode(Pending::Logits(logits));
                Ok(())
            }
            Phase::Verify { proposal, base } => self.accept(engine, logits, pass_s, proposal, base, sink),
            Phase::Decode(_) | Phase::Finished(_) => panic!("Sequence::absorb called with no pass planned"),
        }
    }

    /// A verify pass's verdicts: the accepted drafts emitted, the cache cut
    /// back to them, the next token's source pending.
    fn accept(
        &mut self,
        engine: &Engine,
        mut rows: Vec<f32>,
        pass_s: f64,
        proposal: Proposal,
        base: usize,
        sink: &mut dyn TokenSink,
    ) -> Result<(), GenerateError> {
        let (model, tok) = (&engine.loaded.model, &engine.loaded.tokenizer);
        let ctx_limit = model.config.context_length;
        self.steps += 1;
        let draft = &proposal.tokens;
        let s = self.spec.as_mut().expect("a verify pass belongs to a speculating sequence");
        s.stats.verify_s += pass_s;
        if draft.is_empty() {
            s.stats.plain_s += pass_s;
            s.stats.plain_steps += 1;
            s.stats.plain_at.push((self.out.len(), pass_s));
            self.phase = Phase::Decode(Pending::Logits(rows));
            return Ok(());
        }
        s.stats.round_verify_s += pass_s;
        let ta = Instant::now();
        s.stats.rounds += 1;
        s.stats.drafted += draft.len();
        let vocab = model.config.vocab;
        let at = |j: usize| j * vocab..(j + 1) * vocab;
        let mut k = 0;
        let mut next: Option<Pending> = None;
        let mut stop: Option<FinishReason> = None;
        // The sink ended the request after an emitted token (unlike an
        // accepted end-of-generation token, which is not emitted).
        let mut halted = false;
        for (j, &d) in draft.iter().enumerate() {
            // Row j's penalties count the history as it stands now: the
            // prompt, the emitted tokens, and drafts 0..j, each emitted
            // below before the next row is reached. Each row is penalized
            // once, here; the row after the last accepted draft is left raw
            // for `plan`.
            self.penalize(&mut rows[at(j)]);
            let row = &rows[at(j)];
            // The token classic decoding would emit at this position.
            let chosen = if self.sampling.is_greedy() {
                let c = sample(row, &self.sampling, &mut self.rng);
                if c != d {
                    next = Some(Pending::Token(c));
                    break;
                }
                c
            } else {
                let p = distribution(row, &self.sampling);
                match verify_sampled(&p, &proposal, j, &mut self.rng) {
                    Ok(d) => d,
                    Err(r) => {
                        next = Some(Pending::Token(r));
                        break;
                    }
                }
            };
            k += 1;
            let s = self.spec.as_mut().expect("speculating");
            s.stats.accepted += 1;
            s.stats.accepted_per_position[j] += 1;
            if tok.is_end_of_generation(chosen) {
                stop = Some(FinishReason::Stop);
                break;
            }
            match self.emit(chosen, sink) {
                Ok(()) => {}
                Err(Ok(f)) => {
                    halted = true;
                    stop = Some(f);
                    break;
                }
                Err(Err(e)) => return Err(e),
            }
            if self.full(ctx_limit) {
                stop = Some(FinishReason::Length);
                break;
            }
        }
        let s = self.spec.as_mut().expect("speculating");
        s.stats.emitted_in_rounds += 1 + k;
        // A rejection tested one draft more than it accepted; a request
        // that ended inside the round tested only `k`.
        s.rounds.observe(k + usize::from(next.is_some()), k);
        self.session.truncate(base + 1 + k);
        let pending = next.unwrap_or_else(|| Pending::Logits(rows[at(k)].to_vec()));
        s.stats.accept_s += ta.elapsed().as_secs_f64();
        match stop {
            Some(f) => {
                // An accepted end-of-generation token is not emitted.
                if f == FinishReason::Stop && !halted {
                    s.stats.emitted_in_rounds -= 1;
                }
                self.phase = Phase::Finished(f);
            }
            None => self.phase = Phase::Decode(pending),
        }
        Ok(())
    }

    /// Applies the request's penalties for the history so far to `row`.
    fn penalize(&self, row: &mut [f32]) {
        if let Some(h) = &self.history {
            h.apply(row, &self.sampling);
        }
    }

    /// The finished generation (and the speculative counters, when it
    /// speculated). Call once [`Sequence::plan`] has returned `None`.
    pub fn into_generation(self) -> (Generation, Option<SpecStats>) {
        let finish = self.finished().unwrap_or(FinishReason::Length);
        let start = self.decode_start.unwrap_or_else(Instant::now);
        let g = Generation::finished(self.prompt.len(), self.out, finish, self.prefill_s, start, self.steps);
        (g, self.spec.map(|s| s.stats))
    }
}

/// The penalty history a request needs: `None` when it asks for no penalty.
fn penalty_history(sampling: &SamplingParams, prompt: &[u32]) -> Option<History> {
    sampling.penalized().then(|| History::new(sampling.penalty_scope, prompt))
}

impl Engine {
    /// [`Engine::decode_with`]; with `ignore_eos`, end-of-generation tokens
    /// are emitted like any other and only the budget (or the context) ends
    /// the generation (serving benchmarks fix output lengths this way).
    pub fn decode_with_eos(
        &self,
        p: Prefilled,
        max_tokens: usize,
        sampling: &SamplingParams,
        sink: &mut dyn TokenSink,
        ignore_eos: bool,
    ) -> Result<Generation, GenerateError> {
        let mut seq = Sequence::prefilled(p, max_tokens, *sampling, ignore_eos);
        self.run_alone(&mut seq, sink)?;
        Ok(seq.into_generation().0)
    }

    /// Runs `seq` to its end alone: one forward pass per plan, on this
    /// engine's pool.
    pub fn run_alone(&self, seq: &mut Sequence<'_>, sink: &mut dyn TokenSink) -> Result<(), GenerateError> {
        let model = &self.loaded.model;
        self.install(|| {
            while let Some(plan) = seq.plan(self, sink)? {
                let t = Instant::now();
                let logits = model.forward(self.family, seq.session_mut(), &plan.tokens, plan.which)?;
                seq.absorb(self, logits, t.elapsed().as_secs_f64(), sink)?;
            }
            Ok(())
        })
    }
}

impl Engine {
    /// Speculative decoding of `prompt` with `drafter`, drafting per round
    /// what `schedule` says (a [`crate::policy::Width`] is a fixed one).
    /// Greedy output equals [`Engine::generate`]'s token for token.
    pub fn generate_speculative(
        &self,
        prompt: &[u32],
        max_tokens: usize,
        sampling: &SamplingParams,
        drafter: &mut dyn Drafter,
        schedule: impl Into<Schedule>,
    ) -> Result<(Generation, SpecStats), GenerateError> {
        let p = self.prefill(prompt)?;
        self.decode_speculative(p, max_tokens, sampling, drafter, schedule, &mut NoSink)
    }

    /// Speculative decoding after a prefill, reporting each emitted token to
    /// `sink` ([`crate::engine::NoSink`] for none) as soon as it is accepted
    /// (so a sink sees a round's tokens one by one, in order, before the
    /// next round is drafted). The rounds are [`Sequence`]'s, run alone.
    pub fn decode_speculative(
        &self,
        p: Prefilled,
        max_tokens: usize,
        sampling: &SamplingParams,
        drafter: &mut dyn Drafter,
        schedule: impl Into<Schedule>,
        sink: &mut dyn TokenSink,
    ) -> Result<(Generation, SpecStats), GenerateError> {
        let mut seq = Sequence::prefilled(p, max_tokens, *sampling, false).speculate(
            &self.loaded.model,
            DrafterSlot::Borrowed(drafter),
            schedule.into(),
        );
        self.run_alone(&mut seq, sink)?;
        let (g, stats) = seq.into_generation();
        Ok((g, stats.unwrap_or_default()))
    }
}
