//! Raw-data rules: the raw data of the complete arms must be what the plan
//! says and agree with itself ([`data_problems`]); each problem names its
//! line and remedy, and any one makes `tuner propose` refuse
//! ([`super::Refusal::DataProblems`]).
use std::collections::{BTreeMap, BTreeSet};

pub use crate::analysis::summary::DataProblem;
use crate::analysis::summary::OkArms;
use crate::data::raw::{RawFile, RawLine};

/// Every way the raw data of the complete arms can disagree with the plan
/// or with itself, each with its line and remedy.
pub fn data_problems(raw: &RawFile, ok_arms: &OkArms<'_>) -> Vec<DataProblem> {
    let h = &raw.header;
    let st = &h.settings.design;
    let mut out = Vec::new();
    let rerun = "re-run the sweep (or `tuner sweep --resume` after removing the arm's lines); raw data is evidence \
                 and is never edited by hand";
    let expected_plan = st.plan();
    if h.plan != expected_plan {
        out.push(DataProblem {
            line: Some(1),
            arm: None,
            what: format!(
                "the header's plan ({} arms) is not the plan its settings give ({} arms: {} widths, {} rounds, {} \
                 bracket arms a side)",
                h.plan.len(),
                expected_plan.len(),
                st.widths.len(),
                st.rounds,
                st.bracket_arms
            ),
            remedy: rerun.into(),
        });
    }
    let planned: BTreeSet<usize> = h.plan.iter().map(|a| a.index).collect();
    let prompts: BTreeSet<&str> = h.prompts.iter().map(|p| p.id.as_str()).collect();
    let mut seen: BTreeMap<(usize, usize, &str, usize), usize> = BTreeMap::new();
    let mut counted: BTreeMap<usize, usize> = BTreeMap::new();
    for (l, line) in raw.lines.iter().zip(&raw.line_numbers) {
        match l {
            RawLine::ArmStart(s) if !planned.contains(&s.arm) => out.push(DataProblem {
                line: Some(*line),
                arm: Some(s.arm),
                what: format!("arm {} is not in the plan ({} arms)", s.arm, h.plan.len()),
                remedy: rerun.into(),
            }),
            RawLine::Request(r) if ok_arms.get(&r.arm).is_some_and(|(a, _)| *a == r.attempt) => {
                *counted.entry(r.arm).or_default() += 1;
                if let Some(first) = seen.insert((r.arm, r.attempt, r.prompt_id.as_str(), r.burst), *line) {
                    out.push(DataProblem {
                        line: Some(*line),
                        arm: Some(r.arm),
                        what: format!(
                            "duplicated request: arm {} prompt {} burst {} also on line {first}",
                            r.arm, r.prompt_id, r.burst
                        ),
                        remedy: rerun.into(),
                    });
                }
                if !prompts.contains(r.prompt_id.as_str()) {
                    out.push(DataProblem {
                        line: Some(*line),
                        arm: Some(r.arm),
                        what: format!("prompt {:?} is not in the sweep's prompt set", r.prompt_id),
                        remedy: rerun.into(),
                    });
                }
                if r.burst >= st.bursts_of(r.width) {
                    out.push(DataProblem {
                        line: Some(*line),
                        arm: Some(r.arm),
                        what: format!("burst {} is beyond the plan's {} bursts", r.burst, st.bursts_of(r.width)),
                        remedy: rerun.into(),
                    });
                }
                let bytes: Vec<u8> = r.outcome.token_ids.iter().flat_map(|t| t.to_le_bytes()).collect();
                if runtime::events::sha256_hex(&bytes) != r.outcome.token_ids_sha256 {
                    out.push(DataProblem {
                        line: Some(*line),
                        arm: Some(r.arm),
                        what: format!(
                            "token_ids_sha256 does not match the row's token_ids (prompt {}, burst {})",
                            r.prompt_id, r.burst
                        ),
                        remedy: format!("the row was altered or written by another build; {rerun}"),
                    });
                }
                // Every rate must be what the row's own counts and times give.
                if let Some(why) = crate::analysis::summary::rate_inconsistency(r) {
                    out.push(DataProblem {
                        line: Some(*line),
                        arm: Some(r.arm),
                        what: format!("request (prompt {}, burst {}): {why}", r.prompt_id, r.burst),
                        remedy: format!("the row was altered or its clock is broken; {rerun}"),
                    });
                }
                // A classic request without a rate weakens the baseline of every width.
                if r.width.is_none() && crate::analysis::summary::rate(r).is_none() {
                    out.push(DataProblem {
                        line: Some(*line),
                        arm: Some(r.arm),
                        what: format!(
                            "classic request (prompt {}, burst {}) has no valid rate (none, non-finite, below \
                             {:.0e}, above {:.0e} tok/s, or not its own counts and times)",
                            r.prompt_id,
                            r.burst,
                            crate::analysis::summary::MIN_PLAUSIBLE_TOK_PER_S,
                            crate::analysis::summary::MAX_PLAUSIBLE_TOK_PER_S
                        ),
                        remedy: "a missing rate: use prompts that decode at least two tokens (raise --max-tokens), \
                                 then re-run the sweep; an implausible one: the row was altered or the clock is \
                                 broken, re-run the sweep"
                            .into(),
                    });
                }
                if r.outcome.usage.completion_tokens != r.outcome.token_ids.len() {
                    out.push(DataProblem {
                        line: Some(*line),
                        arm: Some(r.arm),
                        what: format!(
                            "usage.completion_tokens {} is not the {} token ids of the row",
                            r.outcome.usage.completion_tokens,
                            r.outcome.token_ids.len()
                        ),
                        remedy: rerun.into(),
                    });
                }
            }
            _ => {}
        }
    }
    for (arm, (_, end)) in ok_arms {
        let Some(p) = h.plan.iter().find(|a| a.index == *arm) else { continue };
        let n = counted.get(arm).copied().unwrap_or(0);
        let want = h.prompts.len() * st.bursts_of(p.width);
        if n == 0 {
            out.push(DataProblem {
                line: None,
                arm: Some(*arm),
                what: format!("arm {arm} ended ok but has no request lines"),
                remedy: rerun.into(),
            });
        } else if n != want {
            out.push(DataProblem {
                line: None,
                arm: Some(*arm),
                what: format!("arm {arm} has {n} request lines; the plan gives {want} (prompts x bursts)"),
                remedy: rerun.into(),
            });
        }
        if end.requests != n {
            out.push(DataProblem {
                line: None,
                arm: Some(*arm),
                what: format!("arm {arm}'s arm_end counts {} requests, raw.jsonl holds {n}", end.requests),
                remedy: rerun.into(),
            });
        }
    }
    out
}
