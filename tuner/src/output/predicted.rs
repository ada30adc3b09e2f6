//! A calibration record for reviewers (`record.md`), its ledger line, and
//! `tuner propose` of it: a **predicted** entry (`basis = "predicted"`,
//! the profile it was replayed from, the cost curve it was predicted on,
//! the interval of the chosen arm), refused where a measurement stands.
use std::path::{Path, PathBuf};

use policy::table::{self, Basis, RecordCheck};
use policy::{Drafting, TABLE_FILE, Width};

use crate::analysis::calibration::Calibration;
use crate::analysis::rules::{Allow, Refusal};
use crate::data::plan::SpeculativeArm;
use crate::output::propose::{ProposeError, read_table, settings_inline, toml_str, width_text};

fn arm_name(a: SpeculativeArm, cap: usize) -> String {
    match a {
        SpeculativeArm::Adaptive => format!("adaptive (up to {cap})"),
        SpeculativeArm::Fixed(w) => format!("width {w}"),
    }
}

/// The record a reviewer reads: what was measured, what was replayed, every
/// arm's prediction with its three parts, the choice.
pub fn record_markdown(c: &Calibration) -> String {
    let p = &c.prediction;
    let mut s = format!(
        "# Calibration: {} on {} ({}), {}\n\n\
         A prediction, not a measurement of speed: the verify pass's cost was measured on this host \
         ({} process(es) per context, contexts {:?}; `costs.jsonl`, `logs/`), and the acceptance profile \
         `{}` (sha256 {}) was replayed on it through the runtime's adaptive controller \
         (`policy/src/profile.rs`). Wall time {:.1} s.\n\n",
        c.drafter,
        c.device_class,
        c.host_class,
        c.date,
        c.processes.len(),
        c.contexts,
        c.profile.name,
        &c.profile.sha256[..12.min(c.profile.sha256.len())],
        c.wall_s,
    );
    s.push_str(&format!(
        "- Host: {}\n- Target: {} (sha256 {}), {} {} at {} thread(s)\n- Drafter: {} ({})\n- Prompts: {} \
         (sha256 {}), {} tokens a request\n- Runtime: {} (commit {}, {})\n- Verify-path fingerprint: {}\n\n",
        c.host,
        c.model.name,
        &c.model.sha256[..12.min(c.model.sha256.len())],
        c.target_quant,
        c.model_class,
        c.threads.map_or("-".into(), |t| t.to_string()),
        c.drafter,
        c.drafter_settings.describe(),
        c.prompts.name,
        &c.prompts.sha256[..12.min(c.prompts.sha256.len())],
        c.max_tokens,
        c.runtime.version,
        &c.runtime.git_commit[..12.min(c.runtime.git_commit.len())],
        c.runtime.git_dirty,
        c.verify_fingerprint,
    ));
    s.push_str(&format!("## Decision\n\n{}\n\n", p.why));
    s.push_str(
        "## Every arm\n\nPredicted speed against classic decoding (the geometric mean over the processes' \
         curves), its 95 % interval, and the half-widths of its three parts on the log scale: the curve's (t \
         over processes), the profile's (prompts redrawn within their task types) and the model's (the \
         predictor's measured error over the committed sweeps).\n\n\
         | arm | predicted | interval | curve | profile | model | tokens per verify |\n|---|---|---|---|---|---|---|\n",
    );
    for a in &p.arms {
        s.push_str(&format!(
            "| {} | {:.3} | [{:.3}, {:.3}] | {:.3} | {:.3} | {:.3} | {} |\n",
            arm_name(a.arm, p.cap),
            a.ratio,
            a.interval.0,
            a.interval.1,
            a.half_cost,
            a.half_profile,
            a.half_model,
            a.emitted_per_verify.map_or("-".into(), |e| format!("{e:.2}")),
        ));
    }
    s.push_str(&format!(
        "\nThe model part: root mean square log error {:.3} over {} measured arms of the committed sweeps \
         (`tuner predict-error`).\n\n## Verify cost, per process\n\n",
        p.model_error_log, p.model_error_arms
    ));
    for pr in &c.processes {
        for cv in &pr.curves {
            let rel: Vec<String> = cv.relative.iter().map(|x| format!("{x:.3}")).collect();
            s.push_str(&format!("- process {}, context {}: {}\n", pr.index + 1, cv.context, rel.join(", ")));
        }
    }
    if !c.missing.is_empty() {
        s.push_str("\nLeft out:\n\n");
        for m in &c.missing {
            s.push_str(&format!("- {m}\n"));
        }
    }
    s
}

/// The ledger line of a calibration.
pub fn ledger_line(c: &Calibration, folder: &str, calibration_sha256: String) -> crate::output::ledger::LedgerLine {
    let chosen = c.prediction.chosen_arm.and_then(|a| c.prediction.arm(a));
    crate::output::ledger::LedgerLine {
        schema_version: crate::output::ledger::LEDGER_SCHEMA_VERSION,
        folder: folder.to_string(),
        date: Some(c.date.clone()),
        key: c.key().ok().map(|k| k.to_string()),
        verify_fingerprint: Some(c.verify_fingerprint.clone()),
        decision: match c.prediction.choice {
            Some(a) => format!("predicted {}", arm_name(a, c.prediction.cap)),
            None => "predicted off".into(),
        },
        ratio: chosen.map(|a| a.ratio),
        ratio_interval: chosen.map(|a| [a.interval.0, a.interval.1]),
        raw_sha256: Some(calibration_sha256),
        outcome: "calibrate complete".into(),
        at_unix_ms: c.started_at_unix_ms,
        backfilled: false,
    }
}

/// The predicted entry's fields, in the schema's order.
pub fn entry_fields(c: &Calibration, record: &str) -> Result<crate::output::propose::Fields, Refusal> {
    let key = c.key().map_err(Refusal::Key)?;
    let p = &c.prediction;
    let Some(arm) = p.chosen_arm.and_then(|a| p.arm(a)) else {
        return Err(Refusal::NoDecision(p.why.clone()));
    };
    let cap = Width::new(p.cap).map_err(|e| Refusal::Key(format!("cap {}: {e}", p.cap)))?;
    let drafting: Option<Drafting> = p.choice.map(|a| a.drafting(cap));
    let r3 = |x: f64| (x * 1000.0).round() / 1000.0;
    let (ratio, lo, hi) =
        (r3(arm.ratio), (arm.interval.0 * 1000.0).floor() / 1000.0, (arm.interval.1 * 1000.0).ceil() / 1000.0);
    let mut f = crate::output::propose::key_fields(&key, c.target_quant_format.as_deref());
    f.extend([
        (
            "model",
            format!(
                "{{ architecture = {}, parameters = {}, file = {}, sha256 = {} }}",
                toml_str(&key.model.architecture),
                key.model.parameters,
                toml_str(&c.model.name),
                toml_str(&c.model.sha256)
            ),
        ),
        ("prompts", format!("{{ name = {}, sha256 = {} }}", toml_str(&c.prompts.name), toml_str(&c.prompts.sha256))),
        ("drafter_settings", settings_inline(&c.drafter_settings)),
        (
            "weight_formats",
            format!("[{}]", c.weight_formats.iter().map(|x| toml_str(x)).collect::<Vec<_>>().join(", ")),
        ),
        ("width", width_text(drafting)),
    ]);
    if drafting.is_some_and(Drafting::is_adaptive) {
        f.push(("adaptive", "true".into()));
    }
    f.extend([
        ("basis", toml_str(Basis::Predicted.as_str())),
        ("profile", format!("{{ name = {}, sha256 = {} }}", toml_str(&c.profile.name), toml_str(&c.profile.sha256))),
        ("record", toml_str(record)),
        ("date", c.date.clone()),
        ("ratio", ratio.to_string()),
        ("ratio_interval", format!("[{lo}, {hi}]")),
    ]);
    if drafting.is_some()
        && let Some(e) = arm.emitted_per_verify
    {
        let most = drafting.map_or(1, |d| d.max().verify_rows()) as f64;
        f.push(("emitted_per_verify", format!("{:?}", ((e * 1000.0).round() / 1000.0).clamp(1.0, most))));
    }
    f.push(("host", toml_str(&c.host)));
    f.push(("verify_fingerprint", toml_str(&c.verify_fingerprint)));
    let curves: Vec<Vec<policy::table::CostCurve>> = c.processes.iter().map(|p| p.curves.clone()).collect();
    let mean = crate::analysis::predict::mean_curves(&curves);
    let written: Vec<String> = mean
        .iter()
        .map(|cv| {
            let rel: Vec<String> = cv.relative.iter().map(|x| format!("{:?}", (x * 1000.0).round() / 1000.0)).collect();
            format!("{{ context = {}, relative = [{}] }}", cv.context, rel.join(", "))
        })
        .collect();
    f.push(("verify_cost", format!("[{}]", written.join(", "))));
    let note = format!(
        "tuner calibrate (a prediction, no speed measured): {}; the profile {} replayed on {} cost process(es) a \
         context measured on this host; interval parts: curve, profile, and the predictor's measured error \
         (rms log {:.3} over {} measured arms of the committed sweeps)",
        p.why,
        c.profile.name,
        c.processes.len(),
        p.model_error_log,
        p.model_error_arms
    );
    f.push(("note", toml_str(&note)));
    Ok(f)
}

/// What proposing a calibration did.
#[derive(Debug)]
pub struct PredictedProposal {
    pub table: PathBuf,
    pub diff: String,
    pub written: bool,
    pub overridden: Vec<String>,
    /// The entry replaced, and what it rested on (a stale measurement, an
    /// earlier prediction), said so the reviewer sees it.
    pub replaced: Option<String>,
    pub why: String,
}

/// `tuner propose` of a calibration record: the predicted entry, or the
/// refusal. A fresh (or re-checked) measured entry of the key stands; a
/// stale one or an earlier prediction is replaced, and named.
pub fn propose(
    dir: &Path,
    table_path: Option<&Path>,
    dry_run: bool,
    allow: Allow,
) -> Result<PredictedProposal, ProposeError> {
    let c = crate::analysis::calibration::read(dir).map_err(ProposeError::Record)?;
    let mut overridden = Vec::new();
    if c.runtime.git_dirty != "clean" {
        let r = Refusal::DirtyBuild { arms: "the cost processes".into(), commits: c.runtime.git_commit.clone() };
        if !allow.dirty {
            return Err(r.into());
        }
        overridden.push(format!("--allow-dirty: {r}"));
    }
    if let Some(o) = crate::analysis::rules::plan::check_gate(&c.gate, allow.loose_gate)? {
        overridden.push(o);
    }
    let key = c.key().map_err(Refusal::Key)?;
    let current = runtime::policy::verify_fingerprint(&key.device, Some(&c.weight_formats));
    if c.verify_fingerprint != current {
        let r = Refusal::StaleFingerprint { record: c.verify_fingerprint.clone(), current: current.clone() };
        if !allow.stale_fingerprint {
            return Err(r.into());
        }
        overridden.push(format!("--allow-stale-fingerprint: {r}"));
    }
    let (table_abs, root, record) = crate::output::propose::table_and_record(dir, table_path)?;
    let root = root.as_path();
    // One writer at a time, from reading the table to the rename (`table_lock`).
    let lock = match dry_run {
        true => None,
        false => Some(
            crate::output::table_lock::TableLock::acquire(&table_abs, crate::output::table_lock::LOCK_WAIT)
                .map_err(|source| Refusal::Io { path: crate::output::table_lock::lock_path(&table_abs), source })?,
        ),
    };
    let old = read_table(&table_abs)?;
    let tbl = table::compile(TABLE_FILE, &old, RecordCheck::Skip).map_err(|e| Refusal::Table(e.to_string()))?;
    let replaced = match tbl.exact(&key) {
        Some(e) if e.basis == Basis::Measured && e.fresh_for(&current) => {
            return Err(Refusal::MeasurementStands {
                key: key.to_string(),
                basis: e.basis_words(&current),
                record: e.record.clone(),
            }
            .into());
        }
        Some(e) => Some(format!(
            "replaces the {} entry of {} ({}){}",
            e.basis.as_str(),
            e.date,
            e.record,
            if e.fresh_for(&current) { "" } else { ", stale on this build" }
        )),
        None => None,
    };
    let mut fields = entry_fields(&c, &record)?;
    // The entry says what the reviewer allowed, each override in its note.
    if let Some((_, note)) = fields.iter_mut().find(|(k, _)| *k == "note") {
        for o in &overridden {
            let flag = o.split(':').next().unwrap_or(o);
            let body = note.trim_end_matches('"');
            *note = format!("{body}; allowed by {flag}\"");
        }
    }
    let d = crate::output::propose::write_entry(&old, &key, &fields, root, &table_abs, lock.as_ref())?;
    Ok(PredictedProposal {
        table: table_abs,
        diff: d,
        written: !dry_run,
        overridden,
        replaced,
        why: c.prediction.why.clone(),
    })
}
