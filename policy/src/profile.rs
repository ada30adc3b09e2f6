//! Acceptance profiles (issue 54) and their replay: what a drafter would
//! have accepted at every position of a prompt set's greedy output, and any
//! draft-length schedule's speed against classic decoding on a host's
//! verify-cost curve, without timing anything.
//!
//! Greedy speculative output equals classic output at every width, thread
//! count and kernel family (the exactness contract), so the tokens a prompt
//! set emits are the same on every host and every build that keeps
//! exactness; so is the drafter's proposal at each point of that output (a
//! function of the context alone for the weight-free drafters, of the
//! context and the draft model's greedy steps for a model drafter). A
//! profile holds, per prompt, at each point `p` of its output (`p` tokens
//! emitted, the first by the prefill): `avail[p]`, the length of the
//! drafter's proposal of at most `lookahead` tokens, and `agree[p]`, how
//! many of its first tokens equal the tokens classic decoding emitted next.
//! A draft of `n` tokens there is the proposal's first `min(n, avail)`
//! (every drafter here drafts a prefix of its longer proposal:
//! `runtime/src/profile.rs` tests it), and a round drafting it accepts
//! `min(n, agree)`. What varies with the host and the build is the cost of
//! a verify pass of `n + 1` rows against one row: the curve a sweep, `tuner
//! calibrate` or `runtime bench --verify-cost` measures.
//!
//! [`replay`] runs one prompt's rounds as the runtime's speculative loop
//! does (`runtime/src/speculative/decode.rs`): each round asks the schedule
//! for a draft length within the request's budget (the adaptive one
//! through the runtime's own [`Controller`], the same code, not a second
//! implementation), drafts, verifies `d + 1` rows (or takes a plain one-row
//! step when nothing is drafted), and tells the controller what was tested
//! and accepted. Its cost is in one-row passes at the round's context; a
//! classic decode of the same tokens costs one per token, so tokens over
//! cost is the speed against classic. Left out, by construction: every cost
//! the curve does not hold (the drafter's own lookup time, sampling, a plain
//! step's after-effects). `tuner predict-error` measures how much that
//! leaves out, record by record.
//!
//! A profile is a JSON-lines file: a [`ProfileHeader`] line, then one
//! [`Trace`] per prompt. [`parse`] bounds everything it reads.

use crate::adaptive::{Controller, CostModel};
use crate::kind::{DrafterKind, DrafterSettings};
use crate::table::{ModelFile, PromptSet};
use serde::{Deserialize, Serialize};

/// The profile format's version.
pub const PROFILE_SCHEMA: u32 = 1;
/// The header's `kind`.
pub const PROFILE_KIND: &str = "acceptance-profile";
/// The largest profile file read (a 12-prompt set of 48 tokens is ~10 KiB;
/// a few thousand prompts of a few hundred tokens fit).
pub const MAX_PROFILE_BYTES: usize = 16 << 20;
/// The most prompts one profile may hold.
pub const MAX_PROFILE_PROMPTS: usize = 10_000;
/// The most positions one prompt's trace may hold.
pub const MAX_TRACE_POSITIONS: usize = 1 << 16;
/// The longest proposal a profile may hold per position.
pub const MAX_LOOKAHEAD: usize = 32;
/// The longest prompt (tokens) a trace may name.
pub const MAX_PROMPT_TOKENS: usize = 1 << 20;

/// Everything a profile depends on; its first line.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileHeader {
    pub kind: String,
    pub schema: u32,
    /// The target model: file name and sha256 (no directories).
    pub model: ModelRef,
    pub drafter: String,
    pub drafter_settings: DrafterSettings,
    /// The draft model's file name and sha256 (`draft-model` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drafter_model: Option<ModelRef>,
    /// A drafted token's own cost in one-row target passes (the drafter's
    /// `step_cost`, 0 for the weight-free drafters): what the controller
    /// is given, and what every replayed round pays per drafted token.
    pub draft_cost: f64,
    pub prompts: PromptRef,
    /// The request's token limit the traces were made with (a sweep's
    /// `--max-tokens`).
    pub max_tokens: usize,
    /// The longest proposal recorded per position: the widest draft a
    /// replay may ask for.
    pub lookahead: usize,
    /// The runtime that made it (its version and commit), for the record.
    pub made_by: String,
}

/// A model named by file name and sha256.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelRef {
    pub file: String,
    pub sha256: String,
}

/// A prompt set named by its name and the sha256 of its bytes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PromptRef {
    pub name: String,
    pub sha256: String,
}

impl From<&ModelFile> for ModelRef {
    fn from(m: &ModelFile) -> Self {
        ModelRef { file: m.file.clone(), sha256: m.sha256.clone() }
    }
}

impl From<&PromptSet> for PromptRef {
    fn from(p: &PromptSet) -> Self {
        PromptRef { name: p.name.clone(), sha256: p.sha256.clone() }
    }
}

/// One prompt's trace.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Trace {
    pub id: String,
    /// The prompt's task type (`edit`, `free`, ...).
    #[serde(rename = "type")]
    pub task: String,
    pub prompt_tokens: usize,
    /// Tokens classic decoding emitted (the first by the prefill).
    pub out: usize,
    /// `avail[p]` for `p` in `0..out` (`avail[0]` is unused, 0).
    pub avail: Vec<u8>,
    /// `agree[p]`, at most `avail[p]`.
    pub agree: Vec<u8>,
}

/// A parsed, checked profile.
#[derive(Clone, Debug, PartialEq)]
pub struct Profile {
    pub header: ProfileHeader,
    pub traces: Vec<Trace>,
}

impl Profile {
    /// The task types, in first-seen order.
    pub fn task_types(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for t in &self.traces {
            if !out.contains(&t.task) {
                out.push(t.task.clone());
            }
        }
        out
    }

    /// The JSON-lines text of the profile (what [`parse`] reads).
    pub fn to_text(&self) -> String {
        let mut s = serde_json::to_string(&self.header).expect("a header serializes");
        s.push('\n');
        for t in &self.traces {
            s.push_str(&serde_json::to_string(t).expect("a trace serializes"));
            s.push('\n');
        }
        s
    }
}

/// Reads a profile's text: the header, then one trace per line, every count
/// and length bounded, every trace consistent (`agree <= avail <=
/// lookahead`, `out <= max_tokens`, one value per position).
pub fn parse(text: &str) -> Result<Profile, String> {
    if text.len() > MAX_PROFILE_BYTES {
        return Err(format!("the profile is {} bytes; at most {MAX_PROFILE_BYTES}", text.len()));
    }
    let mut lines = text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty());
    let Some((_, first)) = lines.next() else {
        return Err("the profile is empty (no header line)".into());
    };
    let header: ProfileHeader =
        serde_json::from_str(first).map_err(|e| format!("line 1: the header does not parse: {e}"))?;
    if header.kind != PROFILE_KIND {
        return Err(format!("line 1: kind {:?} is not {PROFILE_KIND:?}", header.kind));
    }
    if header.schema != PROFILE_SCHEMA {
        return Err(format!(
            "line 1: schema {} is not {PROFILE_SCHEMA} (this build reads {PROFILE_SCHEMA})",
            header.schema
        ));
    }
    let kind: DrafterKind =
        header.drafter.parse().map_err(|_| format!("line 1: drafter {:?} is not a drafter kind", header.drafter))?;
    header.drafter_settings.check(kind).map_err(|e| format!("line 1: drafter_settings: {e}"))?;
    crate::table::check_file_name(&header.model.file).map_err(|e| format!("line 1: model.file: {e}"))?;
    crate::table::check_sha256(&header.model.sha256).map_err(|e| format!("line 1: model.sha256: {e}"))?;
    if let Some(m) = &header.drafter_model {
        crate::table::check_file_name(&m.file).map_err(|e| format!("line 1: drafter_model.file: {e}"))?;
        crate::table::check_sha256(&m.sha256).map_err(|e| format!("line 1: drafter_model.sha256: {e}"))?;
    }
    crate::table::check_prompt_name(&header.prompts.name).map_err(|e| format!("line 1: prompts.name: {e}"))?;
    crate::table::check_sha256(&header.prompts.sha256).map_err(|e| format!("line 1: prompts.sha256: {e}"))?;
    if !(header.draft_cost.is_finite() && (0.0..=100.0).contains(&header.draft_cost)) {
        return Err(format!("line 1: draft_cost {} is not 0..=100 one-row passes", header.draft_cost));
    }
    if !(1..=MAX_LOOKAHEAD).contains(&header.lookahead) {
        return Err(format!("line 1: lookahead {} is not 1..={MAX_LOOKAHEAD}", header.lookahead));
    }
    if !(1..=MAX_TRACE_POSITIONS).contains(&header.max_tokens) {
        return Err(format!("line 1: max_tokens {} is not 1..={MAX_TRACE_POSITIONS}", header.max_tokens));
    }
    let mut traces = Vec::new();
    for (i, line) in lines {
        let n = i + 1;
        if traces.len() == MAX_PROFILE_PROMPTS {
            return Err(format!("line {n}: more than {MAX_PROFILE_PROMPTS} prompts"));
        }
        let t: Trace = serde_json::from_str(line).map_err(|e| format!("line {n}: the trace does not parse: {e}"))?;
        check_trace(&t, &header).map_err(|e| format!("line {n} (prompt {:?}): {e}", t.id))?;
        traces.push(t);
    }
    if traces.is_empty() {
        return Err("the profile has a header and no traces".into());
    }
    Ok(Profile { header, traces })
}

fn check_trace(t: &Trace, h: &ProfileHeader) -> Result<(), String> {
    if t.id.is_empty() || t.id.len() > 200 || t.task.is_empty() || t.task.len() > 64 {
        return Err("an id of 1..=200 bytes and a type of 1..=64 are needed".into());
    }
    if t.prompt_tokens == 0 || t.prompt_tokens > MAX_PROMPT_TOKENS {
        return Err(format!("prompt_tokens {} is not 1..={MAX_PROMPT_TOKENS}", t.prompt_tokens));
    }
    if t.out == 0 || t.out > h.max_tokens {
        return Err(format!("out {} is not 1..={} (the header's max_tokens)", t.out, h.max_tokens));
    }
    if t.avail.len() != t.out || t.agree.len() != t.out {
        return Err(format!(
            "avail has {} values and agree {}; give one per position, {} (out)",
            t.avail.len(),
            t.agree.len(),
            t.out
        ));
    }
    for p in 0..t.out {
        let (a, g) = (t.avail[p] as usize, t.agree[p] as usize);
        if a > h.lookahead || g > a {
            return Err(format!("position {p}: avail {a} and agree {g} are not agree <= avail <= {}", h.lookahead));
        }
        // Agreement cannot run past the output's end.
        if g > t.out - p.max(1) {
            return Err(format!("position {p}: agree {g} runs past the output's {} tokens", t.out));
        }
    }
    Ok(())
}

/// A schedule replayed: up to `width` drafted tokens every round, or the
/// adaptive draft length up to `cap`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Schedule {
    Fixed(usize),
    Adaptive { cap: usize },
}

impl Schedule {
    /// The widest draft the schedule may ask for.
    pub fn cap(self) -> usize {
        match self {
            Schedule::Fixed(w) | Schedule::Adaptive { cap: w } => w,
        }
    }
}

/// One replayed request: decode tokens (after the prefill's first) and
/// their cost in one-row passes, with the rounds and plain steps.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Replayed {
    pub tokens: usize,
    pub cost: f64,
    pub rounds: usize,
    pub plain_steps: usize,
    pub drafted: usize,
    pub accepted: usize,
}

impl std::ops::AddAssign for Replayed {
    fn add_assign(&mut self, o: Replayed) {
        self.tokens += o.tokens;
        self.cost += o.cost;
        self.rounds += o.rounds;
        self.plain_steps += o.plain_steps;
        self.drafted += o.drafted;
        self.accepted += o.accepted;
    }
}

impl Replayed {
    /// Speed against classic decoding: tokens per one-row pass.
    pub fn ratio(&self) -> f64 {
        if self.cost > 0.0 { self.tokens as f64 / self.cost } else { 1.0 }
    }
}

/// Replays one prompt's rounds (module docs). `max_tokens` is the request's
/// limit (the header's), `draft_cost` a drafted token's cost in one-row
/// passes. Panics never: a schedule wider than the trace's lookahead is the
/// caller's error, checked by [`replay_all`].
pub fn replay(t: &Trace, schedule: Schedule, cost: &CostModel, max_tokens: usize, draft_cost: f64) -> Replayed {
    let mut controller = match schedule {
        Schedule::Adaptive { cap } => Some(Controller::new(cost.clone(), cap, draft_cost)),
        Schedule::Fixed(_) => None,
    };
    let cap = schedule.cap();
    let mut r = Replayed { tokens: t.out.saturating_sub(1), ..Default::default() };
    // `p` tokens emitted; the session (the cache) holds the prompt and all
    // but the last emitted token.
    let mut p = 1usize;
    while p < t.out {
        let session = t.prompt_tokens + p - 1;
        let room = cap.min(max_tokens.saturating_sub(p));
        let ask = match &mut controller {
            Some(c) => c.choose(session, room).draft,
            None => room,
        };
        let d = ask.min(room).min(t.avail[p] as usize);
        if d == 0 {
            r.cost += 1.0;
            r.plain_steps += 1;
            p += 1;
            continue;
        }
        // Accepted drafts, no further than the output (a request that ends
        // inside the round tests only what it emitted).
        let k = d.min(t.agree[p] as usize).min(t.out - p);
        let rejected = k < d && p + k < t.out;
        r.cost += cost.relative(session, d + 1) + d as f64 * draft_cost;
        r.rounds += 1;
        r.drafted += d;
        r.accepted += k;
        if let Some(c) = &mut controller {
            c.observe(k + usize::from(rejected), k);
        }
        p += k + 1;
    }
    r
}

/// Replays `schedule` over the traces `pick` selects, summed.
pub fn replay_all(profile: &Profile, schedule: Schedule, cost: &CostModel, pick: &[usize]) -> Result<Replayed, String> {
    if schedule.cap() == 0 || schedule.cap() > profile.header.lookahead {
        return Err(format!(
            "a draft of {} tokens: the profile recorded proposals of at most {} (its lookahead)",
            schedule.cap(),
            profile.header.lookahead
        ));
    }
    let mut sum = Replayed::default();
    for &i in pick {
        let t = &profile.traces[i];
        sum += replay(t, schedule, cost, profile.header.max_tokens, profile.header.draft_cost);
    }
    Ok(sum)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::CostCurve;

    fn header() -> ProfileHeader {
        ProfileHeader {
            kind: PROFILE_KIND.into(),
            schema: PROFILE_SCHEMA,
            model: ModelRef { file: "m.gguf".into(), sha256: "a".repeat(64) },
            drafter: "ngram".into(),
            drafter_settings: DrafterSettings::ngram(3, 4),
            drafter_model: None,
            draft_cost: 0.0,
            prompts: PromptRef { name: "prompts/sweep.jsonl".into(), sha256: "b".repeat(64) },
            max_tokens: 16,
            lookahead: 8,
            made_by: "test".into(),
        }
    }

    fn flat(rel: f64) -> CostModel {
        let relative: Vec<f64> = (0..9).map(|i| 1.0 + rel * i as f64).collect();
        CostModel::new(&[CostCurve { context: 64, relative }]).unwrap()
    }

    /// A trace whose drafter is always right for the rest of the output.
    fn copy_trace(out: usize) -> Trace {
        let avail: Vec<u8> = (0..out).map(|p| if p == 0 { 0 } else { (out - p).min(8) as u8 }).collect();
        Trace { id: "c".into(), task: "edit".into(), prompt_tokens: 30, out, avail: avail.clone(), agree: avail }
    }

    #[test]
    fn a_perfect_drafter_on_free_passes_emits_width_plus_one_per_pass() {
        let t = copy_trace(13);
        // Free extra rows: 12 decode tokens at width 3 take 3 rounds of 4.
        let r = replay(&t, Schedule::Fixed(3), &flat(0.0), 16, 0.0);
        assert_eq!((r.tokens, r.rounds, r.plain_steps), (12, 3, 0));
        assert!((r.ratio() - 4.0).abs() < 1e-12, "{r:?}");
        // The drafter finds nothing: classic, one pass a token.
        let none = Trace { avail: vec![0; 13], agree: vec![0; 13], ..t.clone() };
        let r = replay(&none, Schedule::Fixed(3), &flat(0.1), 16, 0.0);
        assert_eq!((r.plain_steps, r.rounds), (12, 0));
        assert!((r.ratio() - 1.0).abs() < 1e-12);
    }

    #[test]
    fn a_rejection_costs_the_whole_pass_and_the_adaptive_schedule_runs_the_real_controller() {
        // Proposals everywhere, never right: each round emits one token for a 4-row pass.
        let t = Trace {
            id: "w".into(),
            task: "free".into(),
            prompt_tokens: 30,
            out: 11,
            avail: vec![3; 11],
            agree: vec![0; 11],
        };
        let r = replay(&t, Schedule::Fixed(3), &flat(0.1), 16, 0.0);
        assert_eq!(r.rounds, 10);
        assert!((r.cost - 13.0).abs() < 1e-9, "{r:?}");
        // The controller learns the drafts lose, falls back to plain steps and probes.
        let a = replay(&t, Schedule::Adaptive { cap: 3 }, &flat(0.1), 16, 0.0);
        assert!(a.plain_steps > 0 && a.ratio() > r.ratio(), "{a:?} vs {r:?}");
        // A drafted token's own cost is paid per drafted token.
        let c = replay(&copy_trace(13), Schedule::Fixed(3), &flat(0.0), 16, 0.5);
        assert!((c.cost - 3.0 * (1.0 + 1.5)).abs() < 1e-9, "{c:?}");
    }

    #[test]
    fn a_profile_round_trips_and_bad_ones_are_refused_with_the_reason() {
        let p = Profile { header: header(), traces: vec![copy_trace(13)] };
        let text = p.to_text();
        assert_eq!(parse(&text).unwrap(), p);
        let bad = |f: &dyn Fn(&mut Profile)| {
            let mut q = p.clone();
            f(&mut q);
            parse(&q.to_text()).unwrap_err()
        };
        assert!(bad(&|q| q.traces[0].agree[3] = 9).contains("agree <= avail"));
        assert!(bad(&|q| q.traces[0].out = 40).contains("max_tokens"));
        assert!(
            bad(&|q| {
                q.traces[0].avail.pop();
            })
            .contains("one per position")
        );
        assert!(bad(&|q| q.header.lookahead = 99).contains("lookahead"));
        assert!(bad(&|q| q.header.draft_cost = -1.0).contains("draft_cost"));
        assert!(bad(&|q| q.header.schema = 7).contains("schema 7"));
        assert!(bad(&|q| q.header.drafter = "psychic".into()).contains("not a drafter kind"));
        assert!(bad(&|q| q.traces.clear()).contains("no traces"));
        assert!(parse("").unwrap_err().contains("empty"));
        let mut extra = text.clone();
        extra.insert_str(1, "\"surprise\":1,");
        assert!(parse(&extra).unwrap_err().contains("does not parse"));
        // The schedule may not ask past the lookahead.
        let all = [0];
        assert!(replay_all(&p, Schedule::Fixed(9), &flat(0.0), &all).unwrap_err().contains("lookahead"));
        assert!(replay_all(&p, Schedule::Fixed(8), &flat(0.0), &all).is_ok());
    }
}
