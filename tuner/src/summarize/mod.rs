//! `tuner summarize`: from raw.jsonl to the numbers a record states
//! ([`crate::summary::Summary`]), applying the rules ([`crate::rules`]) on
//! the way. The types of a summary, the decision rule and its application
//! ([`crate::summary::decide`]) are in [`crate::summary`], below the rules
//! that read them.
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use anyhow::{Result, bail};

use crate::estimate::{self, ArmLevels};
use crate::raw::{ArmEnd, Bracket, RawFile, RawLine, RequestRow};
use crate::rules;
use crate::stats::{Stats, median, stats};
use crate::summary::*;

/// The requests of the latest attempt of each arm whose attempt ended ok.
fn complete_requests(raw: &RawFile) -> (Vec<&RequestRow>, OkArms<'_>, Vec<ArmEnd>) {
    let mut latest: BTreeMap<usize, usize> = BTreeMap::new();
    let mut ends: BTreeMap<(usize, usize), &ArmEnd> = BTreeMap::new();
    for l in &raw.lines {
        match l {
            RawLine::ArmStart(s) => {
                latest.insert(s.arm, s.attempt);
            }
            RawLine::ArmEnd(e) => {
                ends.insert((e.arm, e.attempt), e);
            }
            _ => {}
        }
    }
    let mut ok: OkArms<'_> = BTreeMap::new();
    let mut failed = Vec::new();
    for (&arm, &attempt) in &latest {
        match ends.get(&(arm, attempt)) {
            Some(e) if e.ok => {
                ok.insert(arm, (attempt, *e));
            }
            Some(e) => failed.push((*e).clone()),
            None => failed.push(ArmEnd {
                error: Some("the arm never ended (the sweep was interrupted)".into()),
                ..ArmEnd::pending(arm, attempt, String::new(), String::new())
            }),
        }
    }
    let reqs = raw
        .lines
        .iter()
        .filter_map(|l| match l {
            RawLine::Request(r) if ok.get(&r.arm).is_some_and(|(a, _)| *a == r.attempt) => Some(&**r),
            _ => None,
        })
        .collect();
    (reqs, ok, failed)
}

fn first_difference(a: &[u32], b: &[u32]) -> Option<usize> {
    match a.iter().zip(b).position(|(x, y)| x != y) {
        Some(i) => Some(i),
        None if a.len() != b.len() => Some(a.len().min(b.len())),
        None => None,
    }
}

/// Summarizes a sweep directory's raw.jsonl.
pub fn summarize_dir(dir: &Path) -> Result<(RawFile, Summary)> {
    let raw = crate::raw::read_raw(&dir.join("raw.jsonl"))?;
    let s = summarize(&raw)?;
    Ok((raw, s))
}

pub fn summarize(raw: &RawFile) -> Result<Summary> {
    summarize_with(raw, true)
}

/// [`summarize`], with or without the bootstrap of the decision's stability
/// (the calibration's thousands of synthetic sweeps go without: it is the
/// slow part, and they measure the rest).
pub fn summarize_with(raw: &RawFile, with_stability: bool) -> Result<Summary> {
    let h = &raw.header;
    let st = &h.settings.design;
    // `--rounds auto` may have stopped before the plan's last round: the
    // arms of later rounds are not part of the sweep.
    let settled_line = raw.lines.iter().rev().find_map(|l| match l {
        RawLine::Settled(x) => Some(x.clone()),
        _ => None,
    });
    let n_rounds = settled_line.as_ref().map_or(st.rounds, |x| x.rounds.min(st.rounds));
    let plan_len = h.plan.iter().filter(|a| a.round < n_rounds).count();
    let (mut reqs, ok_arms, arms_failed) = complete_requests(raw);
    reqs.retain(|r| r.round < n_rounds);
    let plan_by_index: BTreeMap<usize, &crate::raw::PlannedArm> = h.plan.iter().map(|a| (a.index, a)).collect();
    for r in &reqs {
        match plan_by_index.get(&r.arm) {
            Some(p) if p.width == r.width && p.round == r.round && p.bracket == r.bracket => {}
            _ => bail!("raw.jsonl: a request of arm {} does not match the plan in the header", r.arm),
        }
    }
    let data_problems = rules::data_problems(raw, &ok_arms);

    // The record's key and validity, from the startup events of complete arms.
    let mut device = BTreeSet::new();
    let mut quant = BTreeSet::new();
    let mut fingerprint = BTreeSet::new();
    let mut verify_fp = BTreeSet::new();
    let mut quant_format = BTreeSet::new();
    let mut threads = BTreeSet::new();
    let mut settings = BTreeSet::new();
    let mut formats = BTreeSet::new();
    let mut hosts = BTreeSet::new();
    let mut models = BTreeSet::new();
    let mut inexact_arms = Vec::new();
    let mut not_classic: Vec<String> = Vec::new();
    let speculative_arm: BTreeSet<usize> = h.plan.iter().filter(|a| a.width.is_some()).map(|a| a.index).collect();
    for l in &raw.lines {
        if let RawLine::Startup(s) = l
            && ok_arms.get(&s.arm).is_some_and(|(a, _)| *a == s.attempt)
        {
            device.insert(s.startup.device_class.clone());
            quant.insert(s.startup.target.quant.class.clone());
            fingerprint.insert(s.startup.kernel_fingerprint.clone());
            verify_fp.insert(s.startup.verify_fingerprint.clone());
            quant_format.insert(s.startup.target.quant.format.clone().unwrap_or_default());
            threads.insert(s.startup.threads.to_string());
            formats.insert(s.startup.target.weight_formats.join(","));
            hosts.insert(s.startup.host_class.clone().unwrap_or_default());
            models.insert(format!("{} {}", s.startup.target.architecture, s.startup.target.parameters));
            if speculative_arm.contains(&s.arm) {
                let d = s.startup.drafter_settings.as_ref().map(|d| serde_json::to_string(d).unwrap_or_default());
                settings.insert(d.unwrap_or_default());
            } else if let Some(how) = rules::classic_arm_speculated(&s.startup) {
                not_classic.push(format!("{} ({how})", s.arm));
            }
            if rules::ran_inexact(&s.startup) {
                inexact_arms.push(s.arm);
            }
        }
    }
    let one = |set: &BTreeSet<String>, what: &str, problems: &mut Vec<String>| -> Option<String> {
        match set.len() {
            1 => set.iter().next().cloned(),
            0 => {
                problems.push(format!("no complete arm reported its {what}"));
                None
            }
            _ => {
                problems.push(format!("arms disagree on the {what}: {set:?}"));
                None
            }
        }
    };
    let mut key_problems = Vec::new();
    let device_class = one(&device, "device class", &mut key_problems);
    let target_quant = one(&quant, "target quantization class", &mut key_problems);
    let kernel_fingerprint = one(&fingerprint, "kernel fingerprint", &mut key_problems);
    if !not_classic.is_empty() {
        key_problems.push(format!(
            "classic arm(s) did not decode classically: {}; their rates are no baseline",
            not_classic.join("; ")
        ));
    }
    // Fields the runtime reports since the schema-2 policy table: empty in
    // older records, which then have no key a schema-2 entry can hold.
    let newer = |v: Option<String>, what: &str, problems: &mut Vec<String>| -> Option<String> {
        match v {
            Some(x) if x.is_empty() => {
                problems.push(format!(
                    "the arms report no {what} (recorded by a runtime older than the schema-2 policy table); \
                     re-measure with this build"
                ));
                None
            }
            other => other,
        }
    };
    let verify_fingerprint = newer(
        one(&verify_fp, "verify-path fingerprint", &mut key_problems),
        "verify-path fingerprint",
        &mut key_problems,
    );
    let weight_formats = newer(one(&formats, "weight formats", &mut key_problems), "weight formats", &mut key_problems)
        .map(|f| f.split(',').map(str::to_string).collect::<Vec<_>>());
    let target_quant_format = one(&quant_format, "quantization format", &mut key_problems).filter(|f| !f.is_empty());
    let threads = one(&threads, "thread count", &mut key_problems).and_then(|t| t.parse::<usize>().ok());
    let drafter_settings =
        newer(one(&settings, "drafter settings", &mut key_problems), "drafter settings", &mut key_problems)
            .and_then(|d| serde_json::from_str::<runtime::policy::DrafterSettings>(&d).ok());
    let (host_class, host_class_from) = match one(&hosts, "host class", &mut key_problems) {
        Some(c) if !c.is_empty() => (Some(c), Some("the arms' startup events".to_string())),
        Some(_) => match h.identity.cpu.signature.value.as_deref().and_then(runtime::policy::HostClass::from_signature)
        {
            Some(c) => {
                (Some(c.to_string()), Some("the identity's CPU signature (the arms predate events schema 2)".into()))
            }
            None => {
                key_problems.push(
                    "the record names no CPU: its arms report no host class (events before schema 2) and its \
                     identity has no CPU signature; re-measure with this build"
                        .into(),
                );
                (None, None)
            }
        },
        None => (None, None),
    };
    let model = match one(&models, "target model (architecture and parameter count)", &mut key_problems) {
        Some(m) => match m.rsplit_once(' ').map(|(a, p)| (a.to_string(), p.parse::<u64>().unwrap_or(0))) {
            Some((architecture, parameters)) if parameters > 0 => {
                Some(runtime::policy::ModelClass { architecture, parameters })
            }
            _ => {
                key_problems.push(
                    "the arms report no parameter count (events before schema 2); re-measure with this build".into(),
                );
                None
            }
        },
        None => None,
    };
    let model_file = h.identity.models.first().and_then(|m| {
        let name = std::path::Path::new(&m.path).file_name()?.to_str()?.to_string();
        Some((name, m.sha256.value.clone()?))
    });
    if model_file.is_none() {
        key_problems.push("the identity has no sha256 of the target model".into());
    }
    if let (Some(want), Some(got)) = (&h.settings.drafter_settings, &drafter_settings)
        && want != got
    {
        key_problems.push(format!(
            "the speculative arms ran with drafter settings {} but the sweep passed {}",
            got.describe(),
            want.describe()
        ));
    }

    let served = h.settings.served.is_some();
    let ttft = |rs: &mut dyn Iterator<Item = &&RequestRow>| -> Option<Stats> {
        let xs: Vec<f64> = rs.filter_map(|r| r.served.as_ref().map(|s| s.ttft_ms)).filter(|x| x.is_finite()).collect();
        stats(&xs)
    };
    let requests_without_rate = reqs.iter().filter(|r| rate(r).is_none()).count();

    // Each complete arm's log rates per prompt: the estimators' input.
    let prompt_ids: Vec<String> = h.prompts.iter().map(|p| p.id.clone()).collect();
    let mut position: BTreeMap<usize, usize> = BTreeMap::new();
    {
        let mut seen: BTreeMap<usize, usize> = BTreeMap::new();
        for a in &h.plan {
            let n = seen.entry(a.round).or_default();
            position.insert(a.index, *n);
            *n += 1;
        }
    }
    let mut levels: BTreeMap<usize, ArmLevels> = BTreeMap::new();
    for a in h.plan.iter().filter(|a| a.round < n_rounds && ok_arms.contains_key(&a.index)) {
        levels.insert(
            a.index,
            ArmLevels {
                arm: a.index,
                round: a.round,
                width: a.width,
                bracket: a.bracket,
                position: position[&a.index],
                logs: BTreeMap::new(),
            },
        );
    }
    for r in &reqs {
        if let (Some(l), Some(x)) = (levels.get_mut(&r.arm), rate(r)) {
            l.logs.entry(r.prompt_id.clone()).or_default().push(x.ln());
        }
    }
    let levels: Vec<ArmLevels> = levels.into_values().collect();
    let est = estimate::estimate(&levels, &st.widths, &prompt_ids);
    let mut type_ratios = Vec::new();
    {
        let mut kinds: Vec<&str> = h.prompts.iter().map(|p| p.kind.as_str()).collect();
        kinds.sort_unstable();
        kinds.dedup();
        for k in kinds {
            let ids: Vec<String> = h.prompts.iter().filter(|p| p.kind == k).map(|p| p.id.clone()).collect();
            for (w, r) in estimate::estimate(&levels, &st.widths, &ids).ratio {
                type_ratios.push(TypeRatio { prompt_type: k.to_string(), width: w, ratio: r.ratio });
            }
        }
    }

    let mut rounds = Vec::new();
    for round in 0..n_rounds {
        let side = |b: Bracket| -> Vec<f64> {
            reqs.iter().filter(|r| r.round == round && r.bracket == Some(b)).filter_map(|r| rate(r)).collect()
        };
        let (open_all, close_all) = (side(Bracket::Open), side(Bracket::Close));
        if open_all.is_empty()
            && close_all.is_empty()
            && !h.plan.iter().any(|a| a.round == round && ok_arms.contains_key(&a.index))
        {
            continue;
        }
        let test = est.drift.iter().find(|d| d.round == round).cloned();
        let v = rules::round_verdict(test.as_ref());
        rounds.push(RoundBrackets {
            round,
            open: stats(&open_all),
            close: stats(&close_all),
            drifted: v.drifted,
            judgeable: v.judgeable,
            incomplete: v.incomplete,
            test,
        });
    }
    let complete_rounds = rounds.iter().filter(|r| !r.incomplete).count();
    let sweep_drift = est.sweep_drift.clone();
    let drift = rounds.iter().any(|r| r.drifted) || sweep_drift.as_ref().is_some_and(|d| d.drifted);
    let bracket_arms_to_detect = match (&sweep_drift, est.bracket_arm_variance_log) {
        (Some(d), Some(v)) => Some(estimate::bracket_arms_for(v, d.rounds, d.critical_t, estimate::DRIFT_TO_DETECT)),
        _ => None,
    };
    let drift_unjudged = rounds.iter().any(|r| !r.incomplete && !r.judgeable);
    let classic_all: Vec<f64> = reqs.iter().filter(|r| r.width.is_none()).filter_map(|r| rate(r)).collect();

    // Greedy identity: every output against the first classic output of its prompt.
    let mut reference: BTreeMap<&str, &RequestRow> = BTreeMap::new();
    for r in reqs.iter().filter(|r| r.width.is_none()) {
        reference.entry(r.prompt_id.as_str()).or_insert(r);
    }
    let diff_of = |r: &RequestRow| -> Option<Difference> {
        let c = reference.get(r.prompt_id.as_str())?;
        let pos = first_difference(&c.outcome.token_ids, &r.outcome.token_ids);
        let text_identical = c.outcome.text_sha256 == r.outcome.text_sha256;
        (pos.is_some() || !text_identical).then(|| Difference {
            arm: r.arm,
            width: r.width,
            bracket: r.bracket,
            prompt_id: r.prompt_id.clone(),
            burst: r.burst,
            first_differing_token: pos.unwrap_or(0),
            text_identical,
        })
    };
    let bracket_differences: Vec<Difference> =
        reqs.iter().filter(|r| r.width.is_none()).filter_map(|r| diff_of(r)).collect();

    let mut widths = Vec::new();
    for &w in &st.widths {
        let mine: Vec<&&RequestRow> = reqs.iter().filter(|r| r.width == Some(w)).collect();
        let arms: Vec<usize> =
            h.plan.iter().filter(|a| a.width == Some(w) && ok_arms.contains_key(&a.index)).map(|a| a.index).collect();
        let rates: Vec<f64> = mine.iter().filter_map(|r| rate(r)).collect();
        let diags: Vec<&runtime::events::SpeculativeDiagnostics> =
            mine.iter().filter_map(|r| r.speculation.diagnostics()).collect();
        let drafted: usize = diags.iter().map(|d| d.drafted).sum();
        let accepted: usize = diags.iter().map(|d| d.accepted).sum();
        let epv: Vec<f64> = diags.iter().filter_map(|d| d.emitted_per_verify).collect();
        let vpr: Vec<f64> = diags.iter().filter_map(|d| d.verify_ms_per_round).collect();
        let declined = mine.iter().filter(|r| r.speculation.declined_reason().is_some()).count();
        let without_diagnostics = mine.iter().filter(|r| r.speculation.diagnostics().is_none()).count();
        let zero_round_requests = diags.iter().filter(|d| d.rounds == 0).count();
        let invalid_rate_requests = mine.len() - rates.len();
        let not_a_measurement = rules::not_a_measurement(
            &rules::WidthRequests {
                requests: mine.len(),
                declined,
                first_decline: mine.iter().find_map(|r| r.speculation.declined_reason()),
                without_diagnostics,
                zero_round_requests,
                invalid_rate_requests,
            },
            served,
        );
        widths.push(WidthSummary {
            width: w,
            arms,
            tok_per_s: stats(&rates),
            ttft_ms: ttft(&mut mine.iter().copied()),
            ratio: est.ratio.get(&w).cloned(),
            ratio_vs_open: est.ratio_vs_open.get(&w).cloned(),
            ratio_vs_close: est.ratio_vs_close.get(&w).cloned(),
            tie: None,
            acceptance: (drafted > 0).then(|| accepted as f64 / drafted as f64),
            emitted_per_verify: (!epv.is_empty()).then(|| median(&epv)),
            verify_ms_per_round: (!vpr.is_empty()).then(|| median(&vpr)),
            requests: mine.len(),
            declined,
            without_diagnostics,
            zero_round_requests,
            invalid_rate_requests,
            not_a_measurement,
            differences: mine.iter().filter_map(|r| diff_of(r)).collect(),
        });
    }
    // Ties against the best width that is a measurement.
    let best = widths
        .iter()
        .filter(|w| w.not_a_measurement.is_none())
        .filter_map(|w| w.ratio.as_ref().map(|r| (w.width, r.ratio)))
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(w, _)| w);
    if let Some(b) = best {
        let measured = |x: usize| widths.iter().any(|w| w.width == x && w.not_a_measurement.is_none());
        for t in estimate::ties(&est, b, measured) {
            if let Some(w) = widths.iter_mut().find(|w| w.width == t.width) {
                w.tie = Some(t);
            }
        }
    }

    let mut by_type = Vec::new();
    let mut types: Vec<&str> = h.prompts.iter().map(|p| p.kind.as_str()).collect();
    types.sort_unstable();
    types.dedup();
    let arm_kinds: Vec<Option<usize>> =
        std::iter::once(None).chain(h.settings.design.widths.iter().map(|w| Some(*w))).collect();
    for t in &types {
        for k in &arm_kinds {
            let xs: Vec<f64> =
                reqs.iter().filter(|r| r.prompt_type == *t && r.width == *k).filter_map(|r| rate(r)).collect();
            if let Some(s) = stats(&xs) {
                by_type.push(TypeRow {
                    prompt_type: t.to_string(),
                    width: *k,
                    n: s.n,
                    median: s.median,
                    min: s.min,
                    max: s.max,
                });
            }
        }
    }

    let mut accepted_unknown = Vec::new();
    for l in &raw.lines {
        if let RawLine::ArmStart(s) = l
            && ok_arms.get(&s.arm).is_some_and(|(a, _)| *a == s.attempt)
            && !s.gate.report.verdict.accepted_unknown.is_empty()
        {
            accepted_unknown.push(AcceptedUnknown {
                arm: s.arm,
                sources: s.gate.report.verdict.accepted_unknown.iter().map(|a| a.source).collect(),
            });
        }
    }
    let halt = raw.lines.iter().rev().find_map(|l| match l {
        RawLine::Halt(h) => Some(h.clone()),
        _ => None,
    });
    let mut contention_reruns = Vec::new();
    for l in &raw.lines {
        if let RawLine::ArmEnd(e) = l
            && let Some(c) = &e.contention
            && c.contended()
        {
            contention_reruns.push(ContentionRerun {
                arm: e.arm,
                attempt: e.attempt,
                samples: c.samples,
                contended_samples: c.contended_samples,
                reasons: c.reasons.clone(),
            });
        }
    }
    let during_arm_samples = ok_arms.values().filter_map(|(_, e)| e.contention.as_ref()).map(|c| c.samples).sum();
    let unwatched_arms: Vec<usize> = ok_arms
        .iter()
        .filter(|(_, (_, e))| {
            e.contention.as_ref().is_none_or(|c| c.samples < crate::gate::during::MIN_IN_ARM_READINGS)
        })
        .map(|(a, _)| *a)
        .collect();
    let arms_without_during_check = unwatched_arms.len();
    let complete = raw.lines.iter().any(|l| matches!(l, RawLine::Done(_)))
        && h.plan.iter().filter(|a| a.round < n_rounds).all(|a| ok_arms.contains_key(&a.index));
    let identical = bracket_differences.is_empty() && widths.iter().all(|w| w.differences.is_empty());
    let decision = decide(&widths);
    let stability =
        if with_stability { crate::stability::stability(&widths, decision.width, h.started_at_unix_ms) } else { None };
    Ok(Summary {
        date: h.date.clone(),
        drafter: h.settings.drafter,
        served,
        device_class,
        target_quant,
        target_quant_format,
        threads,
        drafter_settings,
        weight_formats,
        kernel_fingerprint,
        verify_fingerprint,
        host_class,
        host_class_from,
        model,
        model_file,
        key_problem: (!key_problems.is_empty()).then(|| key_problems.join("; ")),
        complete,
        halt: if complete { None } else { halt },
        arms_planned: plan_len,
        duration_s: raw.lines.iter().rev().find_map(|l| match l {
            RawLine::Done(d) => Some(d.at_unix_ms.saturating_sub(h.started_at_unix_ms) as f64 / 1e3),
            _ => None,
        }),
        auto_rounds: settled_line,
        arms_complete: ok_arms.len(),
        arms_failed,
        expected_requests_per_arm: h.prompts.len() * st.bursts_of(Some(1)),
        expected_requests_per_bracket_arm: h.prompts.len() * st.bursts_of(None),
        decision_rule: if served { DECISION_RULE_SERVED } else { DECISION_RULE }.to_string(),
        classic: stats(&classic_all),
        classic_ttft_ms: ttft(&mut reqs.iter().filter(|r| r.width.is_none())),
        rounds,
        complete_rounds,
        drift,
        sweep_drift,
        bracket_arms_to_detect,
        drift_unjudged,
        drift_tolerance: estimate::DRIFT_TOLERANCE,
        drift_false_alarm: estimate::DRIFT_FALSE_ALARM,
        request_noise: est.request_noise,
        process_spread: est.process_spread,
        process_spread_df: est.process_variance_df,
        data_problems,
        contention_reruns,
        during_arm_samples,
        arms_without_during_check,
        unwatched_arms,
        widths,
        by_type,
        type_ratios,
        bracket_differences,
        identical,
        inexact_arms,
        accepted_unknown,
        decision,
        stability,
        requests_without_rate,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::estimate::{RatioEstimate, TieTest};

    fn ws(width: usize, ratio: f64, lo: f64, hi: f64, tied: bool) -> WidthSummary {
        WidthSummary {
            width,
            arms: vec![],
            tok_per_s: None,
            ttft_ms: None,
            ratio: Some(RatioEstimate {
                ratio,
                interval: Some((lo, hi)),
                rounds: 4,
                per_round: vec![],
                sd_log: Some(0.01),
                drift_widening_log: 0.0,
            }),
            ratio_vs_open: None,
            ratio_vs_close: None,
            tie: Some(TieTest { width, vs_best: 1.0, low: 0.9, high: if tied { 1.01 } else { 0.99 }, tied }),
            acceptance: None,
            emitted_per_verify: None,
            verify_ms_per_round: None,
            requests: 10,
            declined: 0,
            without_diagnostics: 0,
            zero_round_requests: 0,
            invalid_rate_requests: 0,
            not_a_measurement: None,
            differences: vec![],
        }
    }

    #[test]
    fn implausible_rates_are_no_measurement_and_a_data_problem() {
        // Every rate 1e308 tok/s: a ratio of 1.0 to the last bit, whose
        // interval rounding once put "wholly above 1.0".
        let t = crate::simulate::Template::new();
        let mut raw = crate::simulate::sweep(&t, &crate::simulate::SimConfig::default_plan(0.03, 0.11, 7));
        for l in raw.lines.iter_mut() {
            if let crate::raw::RawLine::Request(r) = l {
                r.outcome.decode_tok_per_s = Some(1e308);
            }
        }
        let s = summarize_with(&raw, false).unwrap();
        assert!(s.widths.iter().all(|w| w.not_a_measurement.as_deref().is_some_and(|m| m.contains("implausible"))));
        assert!(s.data_problems.iter().any(|p| p.what.contains("has no valid rate")), "{:?}", s.data_problems);
        assert_eq!(s.decision.width, None, "{:?}", s.decision);
        // One just under the ceiling is a rate (the ceiling, not finiteness, refused them).
        let mut r = raw.lines.iter().find_map(|l| match l {
            crate::raw::RawLine::Request(r) => Some(r.clone()),
            _ => None,
        });
        let r = r.as_mut().unwrap();
        r.outcome.decode_tok_per_s = Some(MAX_PLAUSIBLE_TOK_PER_S);
        assert_eq!(rate(r), Some(MAX_PLAUSIBLE_TOK_PER_S));
        r.outcome.decode_tok_per_s = Some(MAX_PLAUSIBLE_TOK_PER_S * 1.01);
        assert_eq!(rate(r), None);
    }

    #[test]
    fn an_interval_at_one_by_rounding_is_not_above_or_below_it() {
        let e = |lo: f64, hi: f64| crate::estimate::RatioEstimate {
            ratio: 1.0,
            interval: Some((lo, hi)),
            rounds: 4,
            per_round: vec![],
            sd_log: Some(0.0),
            drift_widening_log: 0.0,
        };
        let up = 1.0000000000000002;
        assert!(!e(up, up).above_one());
        assert!(!e(1.0 - 1e-16, 1.0 - 1e-16).below_one());
        assert!(e(1.001, 1.2).above_one() && e(0.8, 0.999).below_one());
    }

    #[test]
    fn the_rule_takes_the_narrowest_tied_width_whose_interval_is_above_one() {
        // Width 3 is best; 1 is tied but its interval reaches 1.0; 2 is tied and above.
        let d = decide(&[ws(1, 1.10, 0.98, 1.2, true), ws(2, 1.20, 1.12, 1.30, true), ws(3, 1.25, 1.1, 1.4, true)]);
        assert_eq!(d.width, Some(2));
        assert_eq!(d.best_width, Some(3));
        assert_eq!(d.tied, vec![1, 2, 3]);
        assert_eq!(d.ratio, Some(1.20));
        // A width credibly below the best is not taken, however narrow.
        let d = decide(&[ws(1, 1.10, 1.05, 1.15, false), ws(2, 1.20, 1.12, 1.30, true)]);
        assert_eq!(d.width, Some(2));
        assert_eq!(d.tied, vec![2]);
    }

    #[test]
    fn no_qualified_width_is_off_with_the_best_ratio() {
        let d = decide(&[ws(1, 0.9, 0.85, 0.95, false), ws(2, 1.02, 0.97, 1.08, true)]);
        assert_eq!(d.width, None);
        assert_eq!(d.best_width, Some(2));
        assert!(d.why.contains("no width"), "{}", d.why);
        assert_eq!(decide(&[]).width, None);
    }

    #[test]
    fn a_width_that_is_not_a_measurement_is_never_the_best_or_chosen() {
        let mut bad = ws(1, 1.5, 1.4, 1.6, true);
        bad.not_a_measurement = Some("declined".into());
        let d = decide(&[bad, ws(2, 1.2, 1.1, 1.3, true)]);
        assert_eq!((d.width, d.best_width), (Some(2), Some(2)));
    }

    #[test]
    fn first_difference_names_the_token_or_the_shorter_length() {
        assert_eq!(first_difference(&[1, 2, 3], &[1, 2, 3]), None);
        assert_eq!(first_difference(&[1, 2, 3], &[1, 9, 3]), Some(1));
        assert_eq!(first_difference(&[1, 2], &[1, 2, 3]), Some(2));
    }
}
