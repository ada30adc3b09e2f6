//! `runtime bench --drafter KIND`: the speculative width curve.
//!
//! For each task (prompts grouped by their `type` tag) and each repetition,
//! the arms — classic decoding and the drafter at every width asked for —
//! run in an order rotated from repetition to repetition, so that a drift
//! of the host does not line up with width. An arm's sample for one
//! repetition is its decode throughput over all the task's prompts:
//! generated tokens after the first (which the prefill yields) over decode
//! time, summed over the prompts. Acceptance and tokens per verify are
//! totals over the recorded repetitions. Every speculative completion's
//! token ids are compared with classic decoding's for the same prompt.
//! Each arm also reports its one-token passes (classic steps; the plain
//! steps of the speculative loop, drafts empty) in milliseconds and against
//! classic's, and its verify passes: the same rotation makes that the
//! interleaved comparison of a plain step with a classic step.
//!
//! Before measuring, the block-vs-chain probe runs at every width; a width
//! that fails it is reported as declined and not measured (exactness is not
//! forfeited in a benchmark).

use super::Summary;
use crate::engine::{Engine, GenerateError, Halt, TokenSink};
use crate::sampling::SamplingParams;
use crate::speculative::drafter::Drafter;
use crate::speculative::probe::{PROBE_TEXT, block_vs_chain};
use crate::speculative::schedule::Schedule;
use policy::adaptive::CostModel;
use std::ops::ControlFlow;
use std::time::Instant;

pub use crate::events::bench::{CurveArm, CurveSpec, PositionMatched, TaskCurve, WidthCurveReport};

/// A task: prompts (already tokenized) of one type.
#[derive(Clone, Debug)]
pub struct Task {
    pub name: String,
    /// (prompt id, token ids).
    pub prompts: Vec<(String, Vec<u32>)>,
}

#[derive(Default)]
struct Acc {
    samples: Vec<f64>,
    rounds: usize,
    drafted: usize,
    accepted: usize,
    emitted: usize,
    ids_equal: bool,
    declined: Option<String>,
    /// One-token passes and their seconds (classic steps; plain steps).
    single_steps: usize,
    single_s: f64,
    /// Seconds of the verify passes that carried a draft.
    verify_s: f64,
    /// Plain steps as (prompt, tokens emitted before the step, seconds).
    plain_at: Vec<(usize, usize, f64)>,
}

/// When each token was emitted: the gap between tokens `m` and `m + 1` of
/// classic decoding is the step after `m` tokens (its forward pass and the
/// sampling of the next token).
struct Stamps(Vec<Instant>);

impl TokenSink for Stamps {
    fn token(&mut self, _id: u32) -> ControlFlow<Halt> {
        self.0.push(Instant::now());
        ControlFlow::Continue(())
    }
}

/// Plain steps' seconds against the classic steps at the same positions:
/// `(plain seconds, matched classic seconds, steps matched)`, where the
/// classic time at a position is the mean over the recorded classic runs of
/// that prompt. A plain step at a position classic never stepped from (its
/// run ended there) is left out of both sums and counted out of `n`.
fn matched(plain_at: &[(usize, usize, f64)], classic_at: &[Vec<(f64, usize)>]) -> (f64, f64, usize) {
    let (mut p, mut c, mut n) = (0.0, 0.0, 0);
    for &(pi, m, s) in plain_at {
        if let Some(&(sum, k)) = classic_at.get(pi).and_then(|v| v.get(m)).filter(|e| e.1 > 0) {
            p += s;
            c += sum / k as f64;
            n += 1;
        }
    }
    (p, c, n)
}

/// Runs the curve for every task on `engine` with `drafter`.
pub fn run(
    engine: &Engine,
    drafter: &mut dyn Drafter,
    tasks: &[Task],
    spec: &CurveSpec,
) -> Result<Vec<TaskCurve>, GenerateError> {
    let greedy = SamplingParams::default();
    let model = &engine.loaded.model;
    let probe_ids = engine.loaded.tokenizer.encode(PROBE_TEXT).unwrap_or_default();
    // The speculative arms: each fixed width, then the adaptive arm (up to
    // the widest) when the spec carries its cost curves.
    let mut schedules: Vec<Schedule> = spec.widths.iter().map(|&w| Schedule::Fixed(w)).collect();
    if let (Some(cost), Some(&cap)) = (CostModel::new(&spec.adaptive_cost), spec.widths.iter().max()) {
        schedules.push(Schedule::Adaptive { cap, cost });
    }
    let mut declined: Vec<Option<String>> = Vec::with_capacity(schedules.len());
    for w in schedules.iter().map(Schedule::cap) {
        let p = engine.install(|| block_vs_chain(model, engine.family, engine.threads, &probe_ids, w.get()))?;
        declined.push((!p.passed).then(|| {
            format!(
                "block-vs-chain probe failed at width {w}: {} of {} logit bytes differ, first at block row {:?}",
                p.differing_bytes, p.compared_bytes, p.first_differing_row
            )
        }));
    }
    let n_arms = schedules.len() + 1;
    let mut out = Vec::with_capacity(tasks.len());
    // Progress on stderr, one line per pass over a task's arms (a curve
    // takes minutes; the report itself is on stdout).
    let passes = tasks.len() * (spec.warmup + spec.reps);
    let started = std::time::Instant::now();
    let mut done = 0usize;
    for task in tasks {
        let mut accs: Vec<Acc> = (0..n_arms).map(|_| Acc { ids_equal: true, ..Acc::default() }).collect();
        for (k, d) in declined.iter().enumerate() {
            accs[k + 1].declined = d.clone();
        }
        // Classic ids per prompt, from the first classic run (greedy decoding
        // is deterministic: later classic runs are compared with it too).
        let mut classic_ids: Vec<Option<Vec<u32>>> = vec![None; task.prompts.len()];
        // Per prompt, per position m: (seconds summed, runs) of the classic
        // step after m emitted tokens, over the recorded repetitions.
        let mut classic_at: Vec<Vec<(f64, usize)>> = vec![Vec::new(); task.prompts.len()];
        for rep in 0..spec.warmup + spec.reps {
            let recorded = rep >= spec.warmup;
            if done > 0 {
                let left = started.elapsed().as_secs_f64() / done as f64 * (passes - done) as f64;
                eprintln!(
                    "bench: [{done}/{passes}] task {}, {} {}: classic and {} widths (about {:.0} s left)",
                    task.name,
                    if recorded { "repetition" } else { "warm-up" },
                    if recorded { rep - spec.warmup + 1 } else { rep + 1 },
                    spec.widths.len(),
                    left
                );
            } else {
                eprintln!("bench: [0/{passes}] task {}: classic and {} widths", task.name, spec.widths.len());
            }
            done += 1;
            for j in 0..n_arms {
                let arm = (j + rep) % n_arms;
                if accs[arm].declined.is_some() {
                    continue;
                }
                let (mut tokens, mut secs) = (0usize, 0f64);
                for (pi, (_, ids)) in task.prompts.iter().enumerate() {
                    let g = if arm == 0 {
                        let mut stamps = Stamps(Vec::with_capacity(spec.max_tokens));
                        let p = engine.prefill(ids)?;
                        let g = engine.decode_with(p, spec.max_tokens, &greedy, &mut stamps)?;
                        if recorded {
                            accs[0].single_steps += g.decode_steps;
                            accs[0].single_s += g.decode_s;
                            let at = &mut classic_at[pi];
                            for (k, w) in stamps.0.windows(2).enumerate() {
                                let m = k + 1;
                                if at.len() <= m {
                                    at.resize(m + 1, (0.0, 0));
                                }
                                at[m].0 += (w[1] - w[0]).as_secs_f64();
                                at[m].1 += 1;
                            }
                        }
                        g
                    } else {
                        let w = schedules[arm - 1].clone();
                        let (g, st) = engine.generate_speculative(ids, spec.max_tokens, &greedy, drafter, w)?;
                        if recorded {
                            let a = &mut accs[arm];
                            a.rounds += st.rounds;
                            a.drafted += st.drafted;
                            a.accepted += st.accepted;
                            a.emitted += st.emitted_in_rounds;
                            a.single_steps += st.plain_steps;
                            a.single_s += st.plain_s;
                            a.verify_s += st.round_verify_s;
                            a.plain_at.extend(st.plain_at.iter().map(|&(m, s)| (pi, m, s)));
                        }
                        g
                    };
                    // Repetition 0 starts with the classic arm, so every
                    // speculative run has classic ids to be compared with.
                    match &classic_ids[pi] {
                        Some(c) => accs[arm].ids_equal &= *c == g.token_ids,
                        None => classic_ids[pi] = Some(g.token_ids.clone()),
                    }
                    tokens += g.token_ids.len().saturating_sub(1);
                    secs += g.decode_s;
                }
                if recorded && secs > 0.0 {
                    accs[arm].samples.push(tokens as f64 / secs);
                }
            }
        }
        let summaries: Vec<Option<Summary>> =
            accs.iter().map(|a| (!a.samples.is_empty()).then(|| Summary::of(a.samples.clone()))).collect();
        let classic_median = summaries[0].as_ref().map(|s| s.median);
        let step_ms = |a: &Acc| (a.single_steps > 0).then(|| a.single_s * 1e3 / a.single_steps as f64);
        let classic_step_ms = step_ms(&accs[0]);
        let arms = accs
            .into_iter()
            .zip(summaries)
            .enumerate()
            .map(|(k, (a, s))| CurveArm {
                // The classic arm logs no plain steps: nothing to match.
                single_token_step_vs_classic_same_position: (k > 0)
                    .then(|| matched(&a.plain_at, &classic_at))
                    .filter(|&(_, c, n)| n > 0 && c > 0.0)
                    .map(|(p, c, n)| PositionMatched { ratio: p / c, steps: n }),
                single_token_steps: a.single_steps,
                single_token_step_ms: step_ms(&a),
                single_token_step_vs_classic: match (step_ms(&a), classic_step_ms) {
                    (Some(m), Some(c)) if c > 0.0 => Some(m / c),
                    _ => None,
                },
                verify_pass_ms: (a.rounds > 0).then(|| a.verify_s * 1e3 / a.rounds as f64),
                width: (k > 0).then(|| schedules[k - 1].cap()),
                adaptive: k > 0 && schedules[k - 1].is_adaptive(),
                ratio_vs_classic: match (&s, classic_median) {
                    (Some(s), Some(c)) if c > 0.0 => Some(s.median / c),
                    _ => None,
                },
                decode_tok_per_s: s,
                rounds: a.rounds,
                drafted: a.drafted,
                accepted: a.accepted,
                acceptance_rate: (a.drafted > 0).then(|| a.accepted as f64 / a.drafted as f64),
                emitted_per_verify: (a.rounds > 0).then(|| a.emitted as f64 / a.rounds as f64),
                ids_equal_classic: a.ids_equal && a.declined.is_none(),
                declined: a.declined,
            })
            .collect();
        out.push(TaskCurve {
            task: task.name.clone(),
            prompt_ids: task.prompts.iter().map(|(id, _)| id.clone()).collect(),
            arms,
        });
    }
    Ok(out)
}

/// The `--json` report of a curve `run` measured on `engine`.
pub fn report(engine: &Engine, spec: CurveSpec, tasks: Vec<TaskCurve>) -> WidthCurveReport {
    WidthCurveReport {
        schema_version: crate::events::bench::BENCH_SCHEMA_VERSION,
        event: crate::events::bench::BenchEventKind::BenchWidthCurve,
        model: engine.loaded.info.path.clone(),
        kernel_family: engine.family.name().to_string(),
        threads: engine.threads,
        multirow: kernels::dispatch::multirow_enabled(),
        spec,
        tasks,
    }
}

/// The curve as markdown tables (one per task).
pub fn render(curves: &[TaskCurve], spec: &CurveSpec) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    for c in curves {
        let classic = c.arms.first().and_then(|a| a.decode_tok_per_s.as_ref());
        let _ = writeln!(
            o,
            "\n### task {} ({} prompts), drafter {} (classic median {} tok/s, n={})\n",
            c.task,
            c.prompt_ids.len(),
            spec.drafter,
            classic.map_or("-".into(), |s| format!("{:.1}", s.median)),
            classic.map_or(0, |s| s.n)
        );
        let _ = writeln!(
            o,
            "| W | median tok/s | min..max | ratio vs classic | acceptance | tokens/verify | ids == classic | 1-token pass ms (vs classic) | verify pass ms |"
        );
        let _ = writeln!(o, "|---|---|---|---|---|---|---|---|---|");
        for a in &c.arms {
            let w = match a.width {
                None => "classic".into(),
                Some(w) if a.adaptive => format!("adaptive ≤{w}"),
                Some(w) => w.to_string(),
            };
            if let Some(r) = &a.declined {
                let _ = writeln!(o, "| {w} | declined: {r} | | | | | | | |");
                continue;
            }
            let (med, range) = a.decode_tok_per_s.as_ref().map_or(("-".into(), "-".into()), |s| {
                (format!("{:.1}", s.median), format!("{:.1}..{:.1}", s.min, s.max))
            });
            let _ = writeln!(
                o,
                "| {w} | {med} | {range} | {} | {} | {} | {} | {} | {} |",
                a.ratio_vs_classic.map_or("-".into(), |r| format!("{r:.2}x")),
                a.acceptance_rate.map_or("-".into(), |r| format!("{r:.2}")),
                a.emitted_per_verify.map_or("-".into(), |r| format!("{r:.2}")),
                if a.width.is_none() {
                    "-"
                } else if a.ids_equal_classic {
                    "yes"
                } else {
                    "NO"
                },
                match (a.single_token_step_ms, a.single_token_step_vs_classic) {
                    (Some(m), Some(r)) if a.width.is_some() => format!(
                        "{m:.2} ({r:.3}x; same position {}, n={})",
                        a.single_token_step_vs_classic_same_position
                            .map_or("-".into(), |p| format!("{:.3}x over {}", p.ratio, p.steps)),
                        a.single_token_steps
                    ),
                    (Some(m), _) => format!("{m:.2} (n={})", a.single_token_steps),
                    _ => "-".into(),
                },
                a.verify_pass_ms.map_or("-".into(), |m| format!("{m:.2}"))
            );
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use super::matched;

    #[test]
    fn a_plain_step_meets_the_classic_mean_at_its_own_prompt_and_position() {
        // Prompt 0: classic stepped from positions 1 and 2 (two runs each);
        // prompt 1: from position 1 only (one run).
        let classic = vec![vec![(0.0, 0), (8.0, 2), (6.0, 2)], vec![(0.0, 0), (5.0, 1)]];
        let plain = [(0, 2, 3.5), (1, 1, 6.0), (0, 1, 4.0)];
        assert_eq!(matched(&plain, &classic), (13.5, 3.0 + 5.0 + 4.0, 3));
        // Where classic never stepped (past its run, an empty position, an
        // unknown prompt), the step is left out of both sums.
        let unmatched = [(1, 2, 9.0), (0, 0, 9.0), (7, 1, 9.0)];
        assert_eq!(matched(&unmatched, &classic), (0.0, 0.0, 0));
    }
}
