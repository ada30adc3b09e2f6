//! The predictor, measured (issue 54): every committed sweep record's
//! arms predicted from its own verify-cost curves and the committed
//! acceptance profile of its model, drafter, settings, prompts and token
//! limit ([`crate::analysis::predict`]), beside what the sweep measured.
//!
//! Per record: the predicted choice, whether it lies in the record's tie
//! set (its best width and the widths tied with it), the measured ratio
//! lost by taking it instead of the record's own choice, and each arm's
//! log error `ln(measured / predicted)`. The model-error term a prediction
//! carries is the root mean square of those errors over every measured arm
//! of the other records (leave one out, so a record's interval does not
//! use its own error); whether each measured ratio lies in its arm's
//! interval so widened is the coverage the table states. A record that
//! cannot be compared says why (no cost curve, no profile, no decision).
use std::path::Path;

use policy::table::CostCurve;
use serde::Serialize;

use crate::analysis::predict::{self, Prediction};
use crate::analysis::summary::Summary;
use crate::data::plan::SpeculativeArm;

/// Record folders read, at most (a typo'd root must not read a disk).
pub const MAX_RECORD_FOLDERS: usize = 4096;

/// One measured arm beside its prediction.
#[derive(Clone, Debug, Serialize)]
pub struct ArmRow {
    pub arm: SpeculativeArm,
    pub measured: f64,
    pub measured_interval: Option<(f64, f64)>,
    pub predicted: f64,
    /// ln(measured / predicted).
    pub error_log: f64,
}

/// A record compared with its prediction.
#[derive(Clone, Debug, Serialize)]
pub struct Compared {
    pub profile: String,
    pub rounds: usize,
    pub measured_choice: Option<SpeculativeArm>,
    pub measured_tie_set: Vec<SpeculativeArm>,
    pub prediction: Prediction,
    /// The predicted choice is the record's choice or in its tie set (both
    /// `off` counts too).
    pub in_tie_set: bool,
    /// 1 - measured(predicted choice) / measured(record's choice): the share
    /// of the record's speed lost by taking the prediction (`off` is 1.0x).
    pub loss: Option<f64>,
    pub arms: Vec<ArmRow>,
    /// Filled by [`table`]: the leave-one-out model error and how many of
    /// this record's measured arms lie in their widened intervals.
    pub model_error_log: f64,
    pub covered: usize,
}

/// One record's row, or why it has none.
#[derive(Clone, Debug, Serialize)]
pub struct RecordRow {
    pub record: String,
    pub key: String,
    pub result: Result<Compared, String>,
}

/// The per-process curves of a summary: `(round, curves)` for each round
/// whose every point was measured.
pub fn process_curves(s: &Summary) -> Vec<(usize, Vec<CostCurve>)> {
    let mut rounds: Vec<usize> =
        s.verify_cost.iter().flat_map(|c| c.points.iter().flat_map(|p| p.per_round.iter().map(|(r, _)| *r))).collect();
    rounds.sort_unstable();
    rounds.dedup();
    let mut out = Vec::new();
    for r in rounds {
        let mut curves = Vec::new();
        for c in &s.verify_cost {
            let rel: Option<Vec<f64>> =
                c.points.iter().map(|p| p.per_round.iter().find(|(k, _)| *k == r).map(|(_, x)| *x)).collect();
            if let Some(mut rel) = rel.filter(|v| v.len() >= 2) {
                rel[0] = 1.0;
                curves.push(CostCurve { context: c.context, relative: rel });
            }
        }
        if !curves.is_empty() {
            out.push((r, curves));
        }
    }
    out
}

fn measured(s: &Summary, arm: Option<SpeculativeArm>) -> Option<f64> {
    match arm {
        None => Some(1.0),
        Some(a) => s.widths.iter().find(|w| w.width == a)?.ratio.as_ref().map(|r| r.ratio),
    }
}

/// Compares one record folder with its prediction (no model-error term yet).
pub fn compare(root: &Path, dir: &Path) -> Result<Compared, String> {
    let raw = crate::data::raw::read_raw(&dir.join("raw.jsonl")).map_err(|e| e.to_string())?;
    let s = crate::analysis::summarize::summarize_with(&raw, false).map_err(|e| format!("{e:#}"))?;
    if !s.complete {
        return Err("the sweep did not complete".into());
    }
    if s.served && s.concurrency > 1 {
        // The predictor prices one sequence's verify passes on an idle host.
        return Err(format!("served at concurrency {}: the prediction is of one client alone", s.concurrency));
    }
    let processes = process_curves(&s);
    if processes.len() < 2 {
        return Err(format!("{} round(s) with a verify-cost curve; a prediction needs two", processes.len()));
    }
    let Some((_, model_sha)) = &s.model_file else { return Err("no sha256 of the target".into()) };
    let Some(settings) = s.drafter_settings.clone() else { return Err("no drafter settings recorded".into()) };
    let want = crate::data::profile::Wanted {
        model_sha256: model_sha.clone(),
        drafter: s.drafter,
        settings,
        prompts_sha256: raw.header.settings.prompts_sha256.clone(),
        max_tokens: raw.header.settings.design.max_tokens,
    };
    let (profile_name, profile) = crate::data::profile::find(root, &want).map_err(|e| format!("{e:#}"))?;
    let arms: Vec<SpeculativeArm> = s.widths.iter().map(|w| w.width).collect();
    let prediction = predict::predict(&profile, &processes, &arms, (0.0, 0))?;
    let measured_choice = s.decision.width;
    let mut tie_set = s.decision.tied.clone();
    tie_set.extend(s.decision.best_width);
    tie_set.extend(measured_choice);
    tie_set.sort_by_key(|a| a.code());
    tie_set.dedup();
    let in_tie_set = match prediction.choice {
        None => measured_choice.is_none(),
        Some(a) => tie_set.contains(&a),
    };
    let loss = match (measured(&s, prediction.choice), measured(&s, measured_choice)) {
        (Some(p), Some(m)) if m > 0.0 => Some(1.0 - p / m),
        _ => None,
    };
    let rows = s
        .widths
        .iter()
        .filter_map(|w| {
            let r = w.ratio.as_ref()?;
            let p = prediction.arm(w.width)?;
            Some(ArmRow {
                arm: w.width,
                measured: r.ratio,
                measured_interval: r.interval,
                predicted: p.ratio,
                error_log: (r.ratio / p.ratio).ln(),
            })
        })
        .collect();
    Ok(Compared {
        profile: profile_name,
        rounds: processes.len(),
        measured_choice,
        measured_tie_set: tie_set,
        prediction,
        in_tie_set,
        loss,
        arms: rows,
        model_error_log: 0.0,
        covered: 0,
    })
}

/// Root mean square of the arms' log errors, and how many.
pub fn rms(errors: &[f64]) -> (f64, usize) {
    if errors.is_empty() {
        return (0.0, 0);
    }
    ((errors.iter().map(|e| e * e).sum::<f64>() / errors.len() as f64).sqrt(), errors.len())
}

/// Every record folder under `root/records` (with a raw.jsonl), compared;
/// each comparable one with its leave-one-out model error and coverage.
pub fn table(root: &Path) -> Result<Vec<RecordRow>, String> {
    let dir = root.join("records");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .filter_map(|e| e.ok())
        .filter(|e| e.path().join("raw.jsonl").is_file())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    if names.len() > MAX_RECORD_FOLDERS {
        return Err(format!("{} holds more than {MAX_RECORD_FOLDERS} record folders", dir.display()));
    }
    let mut rows: Vec<RecordRow> = names
        .iter()
        .map(|n| {
            let result = compare(root, &dir.join(n));
            let key = crate::data::raw::read_raw(&dir.join(n).join("raw.jsonl"))
                .ok()
                .and_then(|raw| crate::analysis::summarize::summarize_with(&raw, false).ok())
                .and_then(|s| s.key.ok())
                .map_or_else(|| "(no key)".to_string(), |k| k.to_string());
            RecordRow { record: format!("records/{n}"), key, result }
        })
        .collect();
    let errors: Vec<(usize, f64)> = rows
        .iter()
        .enumerate()
        .filter_map(|(i, r)| r.result.as_ref().ok().map(|c| (i, c)))
        .flat_map(|(i, c)| c.arms.iter().map(move |a| (i, a.error_log)))
        .collect();
    for (i, row) in rows.iter_mut().enumerate() {
        if let Ok(c) = &mut row.result {
            let others: Vec<f64> = errors.iter().filter(|(k, _)| *k != i).map(|(_, e)| *e).collect();
            let (m, _) = rms(&others);
            c.model_error_log = m;
            c.covered = c
                .arms
                .iter()
                .filter(|a| {
                    let p = c.prediction.arm(a.arm).expect("every row's arm was predicted");
                    let half = (p.half_cost.powi(2) + p.half_profile.powi(2) + (predict::Z95 * m).powi(2)).sqrt();
                    a.error_log.abs() <= half
                })
                .count();
        }
    }
    Ok(rows)
}

/// The summary line: records compared, predicted choice in the tie set,
/// the median and worst loss, the model error, the coverage.
pub fn summary_line(rows: &[RecordRow]) -> String {
    let ok: Vec<&Compared> = rows.iter().filter_map(|r| r.result.as_ref().ok()).collect();
    let in_tie = ok.iter().filter(|c| c.in_tie_set).count();
    let mut losses: Vec<f64> = ok.iter().filter_map(|c| c.loss).collect();
    losses.sort_by(f64::total_cmp);
    let median = losses.get(losses.len() / 2).copied().unwrap_or(0.0);
    let worst = losses.last().copied().unwrap_or(0.0);
    let errors: Vec<f64> = ok.iter().flat_map(|c| c.arms.iter().map(|a| a.error_log)).collect();
    let (m, n) = rms(&errors);
    let bias = if n == 0 { 0.0 } else { errors.iter().sum::<f64>() / n as f64 };
    let arms: usize = ok.iter().map(|c| c.arms.len()).sum();
    let covered: usize = ok.iter().map(|c| c.covered).sum();
    format!(
        "{} of {} records compared; the predicted choice is in the measured tie set in {in_tie} of {}; \
         measured speed lost by taking it: median {:.1}%, worst {:.1}%; log error over {n} measured arms: \
         rms {m:.3} (mean {bias:+.3}: measured {} than predicted); {covered} of {arms} measured ratios lie in \
         their predicted intervals (leave-one-out model error)",
        ok.len(),
        rows.len(),
        ok.len(),
        median * 100.0,
        worst * 100.0,
        if bias < 0.0 { "slower" } else { "faster" },
    )
}

fn arm_label(a: Option<SpeculativeArm>) -> String {
    match a {
        None => "off".into(),
        Some(SpeculativeArm::Adaptive) => "adaptive".into(),
        Some(a) => a.to_string(),
    }
}

/// The table as markdown (docs/records.md holds it).
pub fn markdown(rows: &[RecordRow]) -> String {
    let mut out = String::from(
        "| record | measured choice (tie set) | predicted choice | in tie set | speed lost | predicted / measured, chosen arm | arms in interval | rms log error (others) |\n|---|---|---|---|---|---|---|---|\n",
    );
    let mut skipped = Vec::new();
    for r in rows {
        let name = r.record.strip_prefix("records/").unwrap_or(&r.record);
        match &r.result {
            Ok(c) => {
                let tie: Vec<String> = c.measured_tie_set.iter().map(|a| arm_label(Some(*a))).collect();
                let chosen = c.prediction.chosen_arm.and_then(|a| {
                    let row = c.arms.iter().find(|x| x.arm == a)?;
                    Some(format!("{}: {:.3} / {:.3}", arm_label(Some(a)), row.predicted, row.measured))
                });
                out.push_str(&format!(
                    "| {name} | {} ({}) | {} | {} | {} | {} | {} of {} | {:.3} |\n",
                    arm_label(c.measured_choice),
                    tie.join(", "),
                    arm_label(c.prediction.choice),
                    if c.in_tie_set { "yes" } else { "**no**" },
                    c.loss.map_or("-".into(), |l| format!("{:.1}%", l * 100.0)),
                    chosen.unwrap_or_else(|| "-".into()),
                    c.covered,
                    c.arms.len(),
                    c.model_error_log,
                ));
            }
            Err(why) => skipped.push(format!("- {name}: {why}")),
        }
    }
    if !skipped.is_empty() {
        out.push_str("\nNot compared, and why:\n\n");
        out.push_str(&skipped.join("\n"));
        out.push('\n');
    }
    out
}
