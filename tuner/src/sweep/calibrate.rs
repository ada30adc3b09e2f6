//! `tuner calibrate` (issue 54): a default for a host nobody swept, in
//! about a minute. The verify-cost curve is measured here (fresh `runtime
//! bench --verify-cost` processes, one per context a process round, each
//! gated and watched like a sweep's; the process is the unit of the
//! curve's interval), the committed acceptance profile of the model,
//! drafter and prompt set is replayed on it through the runtime's own
//! controller ([`crate::analysis::predict`]), and the record
//! (`calibration.json`, `costs.jsonl`, `record.md`, `logs/`) says every
//! arm's predicted ratio with its interval and the choice. The model-error
//! part of the interval is the predictor's measured error over the
//! committed sweeps ([`crate::analysis::predict_error`]).
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use policy::{DrafterKind, DrafterSettings};

use crate::analysis::calibration::{
    Build, CALIBRATION_FILE, CALIBRATION_SCHEMA, COSTS_FILE, Calibration, Named, Process,
};
use crate::data::plan::SpeculativeArm;
use crate::data::verify_cost::{COST_ATTEMPTS, COST_REPS, CostRun};
use crate::host::gate::{Decision, Gate, GateConfig};

/// Cost processes per context by default: four, the fewest whose t interval
/// is not dominated by its quantile (3.18 at three, 2.78 at four).
pub const DEFAULT_PROCESSES: usize = 4;
/// The most cost processes per context one calibration runs.
pub const MAX_PROCESSES: usize = 32;

/// What `tuner calibrate` is asked to do.
#[derive(Clone, Debug)]
pub struct CalibrateOptions {
    pub target: PathBuf,
    pub drafter: DrafterKind,
    pub settings: DrafterSettings,
    pub drafter_model: Option<PathBuf>,
    /// The prompt set's sha256 and its name (the profile is found by them).
    pub prompts: Named,
    pub max_tokens: usize,
    /// A profile file given explicitly; else the committed one that matches.
    pub profile: Option<PathBuf>,
    /// The repository root: profiles/ and records/ under it.
    pub root: PathBuf,
    pub widths: Vec<SpeculativeArm>,
    pub processes: usize,
    pub contexts: Vec<usize>,
    pub threads: usize,
    pub runtime: PathBuf,
    pub out: PathBuf,
    pub gate: GateConfig,
    pub gate_wait: Duration,
    pub gate_interval: Duration,
}

/// The calibration's record folder by default:
/// `records/<date>-<device>-<host>-<drafter>[-<model stem>]-calibrate[-N]`.
pub fn default_out_dir(drafter: DrafterKind, target: &Path) -> PathBuf {
    out_dir_with(drafter, target, "calibrate")
}

/// `records/<date>-<device>-<host>-<drafter>[-<model stem>]-<what>[-N]`.
pub fn out_dir_with(drafter: DrafterKind, target: &Path, what: &str) -> PathBuf {
    let base = crate::sweep::driver::default_out_dir(drafter, 1);
    let stem = base.display().to_string();
    // The default model's records carry no model name; others do.
    let model = target.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let model = if model.starts_with("SmolLM2-135M-Instruct") {
        String::new()
    } else {
        format!("-{}", model.trim_end_matches(".gguf").to_lowercase())
    };
    let stem = stem.trim_end_matches(|c: char| c.is_ascii_digit()).trim_end_matches('-').to_string();
    let base = format!("{stem}{model}-{what}");
    let mut p = PathBuf::from(&base);
    let mut n = 2;
    while p.exists() {
        p = PathBuf::from(format!("{base}-{n}"));
        n += 1;
    }
    p
}

/// The key parts `runtime policy explain --json` reports for a run.
#[derive(serde::Deserialize)]
pub struct Explained {
    pub target_quant: ExplainedQuant,
    pub weight_formats: Option<Vec<String>>,
    pub threads: Option<usize>,
    /// `int8` / `int16` where the precision changes anything.
    #[serde(default)]
    pub precision: Option<String>,
    pub model: Option<policy::ModelClass>,
    pub verify_fingerprint: Option<String>,
    pub device_class: String,
    pub host_class: String,
    #[serde(default)]
    pub host_from: Option<String>,
}

#[derive(serde::Deserialize)]
pub struct ExplainedQuant {
    pub class: Option<String>,
    pub format: Option<String>,
}

impl Explained {
    /// The policy key of the run explained.
    pub fn key(&self, drafter: DrafterKind) -> Result<policy::PolicyKey> {
        let (Some(quant), Some(model)) = (&self.target_quant.class, &self.model) else {
            bail!("the runtime could not classify the target: no key");
        };
        Ok(policy::PolicyKey {
            drafter,
            device: policy::DeviceClass::parse(&self.device_class).map_err(anyhow::Error::msg)?,
            host: policy::HostClass::parse(&self.host_class).map_err(anyhow::Error::msg)?,
            quant: quant.clone(),
            model: model.clone(),
            threads: self.threads,
            concurrency: 1,
            precision: policy::key::key_precision(
                self.weight_formats.as_deref().unwrap_or_default(),
                self.precision.as_deref(),
            )
            .map_err(anyhow::Error::msg)?,
        })
    }
}

/// `runtime policy explain --json` of a run: its key's parts and
/// fingerprint; `precision` is the run's `--precision` (`None`: the
/// runtime's default).
pub fn explain(
    runtime: &Path,
    target: &Path,
    drafter: DrafterKind,
    threads: usize,
    precision: Option<&str>,
) -> Result<Explained> {
    let mut c = std::process::Command::new(runtime);
    c.args(["policy", "explain", "--json", "--drafter", drafter.as_str(), "--threads", &threads.to_string()]);
    if let Some(p) = precision {
        c.args(["--precision", p]);
    }
    let out =
        c.arg("-m").arg(target).output().with_context(|| format!("running {} policy explain", runtime.display()))?;
    if !out.status.success() {
        bail!("`runtime policy explain` failed: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("");
    serde_json::from_str(line).context("`runtime policy explain --json` did not give the key's parts")
}

/// The cost process's command line.
fn cost_args(o: &CalibrateOptions, context: usize, rows: usize) -> Vec<String> {
    vec![
        o.runtime.display().to_string(),
        "bench".into(),
        "--json".into(),
        "--verify-cost".into(),
        "--model".into(),
        o.target.display().to_string(),
        "--threads".into(),
        o.threads.to_string(),
        "--prompt-tokens".into(),
        context.to_string(),
        "--max-rows".into(),
        rows.to_string(),
        "--reps".into(),
        COST_REPS.to_string(),
        "--warmup".into(),
        "1".into(),
    ]
}

/// Runs the calibration and writes its record; the calibration on success.
pub fn run(o: &CalibrateOptions, progress: &mut dyn FnMut(&str)) -> Result<Calibration> {
    let t0 = Instant::now();
    let started_at_unix_ms =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
    if o.processes < 2 || o.processes > MAX_PROCESSES {
        bail!("--processes {}: give 2..={MAX_PROCESSES} (an interval needs two)", o.processes);
    }
    crate::data::verify_cost::check_contexts(&o.contexts).map_err(anyhow::Error::msg)?;
    if o.contexts.is_empty() {
        bail!("--cost-contexts: a calibration measures at least one context");
    }
    // The profile first: without it there is nothing to predict.
    let model_sha = crate::host::identity::sha256_file(&o.target).map_err(|e| anyhow::anyhow!("{e}"))?;
    let want = crate::data::profile::Wanted {
        model_sha256: model_sha.clone(),
        drafter: o.drafter,
        settings: o.settings.clone(),
        prompts_sha256: o.prompts.sha256.clone(),
        max_tokens: o.max_tokens,
    };
    let (profile_name, profile) = match &o.profile {
        Some(p) => {
            let prof = crate::data::profile::read(p)?;
            if crate::data::profile::Wanted::of(&prof.header).as_ref() != Some(&want) {
                bail!("{}: the profile is not for {}", p.display(), want.describe());
            }
            let name = crate::data::path_names::name_of(p, &o.root, false);
            (name, prof)
        }
        None => crate::data::profile::find(&o.root, &want)?,
    };
    let profile_sha = crate::data::profile::sha256_of(&o.root.join(&profile_name))?;
    let cap = o.widths.iter().filter_map(|w| w.width()).map(|w| w.get()).max().unwrap_or(1);
    if cap > profile.header.lookahead {
        bail!("--widths: up to {cap}, but the profile recorded proposals of at most {}", profile.header.lookahead);
    }
    let explained = explain(&o.runtime, &o.target, o.drafter, o.threads, None)?;
    let Some(quant) = explained.target_quant.class.clone() else {
        bail!("the runtime could not classify the target's quantization: no key to predict for");
    };
    let (Some(model_class), Some(fingerprint), Some(formats)) =
        (explained.model.clone(), explained.verify_fingerprint.clone(), explained.weight_formats.clone())
    else {
        bail!("`runtime policy explain` gave no model class, fingerprint or weight formats");
    };
    let id = crate::host::identity::collect(&crate::host::identity::IdentityOptions {
        runtime: Some(o.runtime.clone()),
        models: Vec::new(),
    });
    let build = match &id.runtime.build.value {
        Some(b) => Build {
            version: b.version.clone(),
            git_commit: b.git_commit.clone(),
            git_dirty: match b.git_dirty {
                runtime::build_info::GitDirty::Clean => "clean",
                runtime::build_info::GitDirty::Dirty => "dirty",
                runtime::build_info::GitDirty::Unknown => "unknown",
            }
            .into(),
        },
        None => bail!("the runtime's build could not be read: {:?}", id.runtime.build.unavailable_reason),
    };
    std::fs::create_dir_all(o.out.join("logs")).with_context(|| format!("creating {}", o.out.display()))?;
    let mut costs = std::fs::File::create(o.out.join(COSTS_FILE))?;
    let env = crate::sweep::arm::arm_env();
    let names = std::sync::Arc::new(crate::data::path_names::PathNames::from_pairs(vec![
        (o.target.display().to_string(), crate::data::path_names::name_of(&o.target, &o.root, true)),
        (o.runtime.display().to_string(), crate::data::path_names::name_of(&o.runtime, &o.root, false)),
    ]));
    let rows = cap + 1;
    let mut gate = Gate::new(o.gate.clone());
    let mut by_process: BTreeMap<usize, Vec<policy::table::CostCurve>> = BTreeMap::new();
    let mut missing = Vec::new();
    for k in 0..o.processes {
        for &context in &o.contexts {
            let what = format!("cost process {} of {}, context {context}", k + 1, o.processes);
            let mut done = None;
            for attempt in 0..COST_ATTEMPTS {
                progress(&format!("{what}: gate"));
                let g = gate.wait(o.gate_wait, o.gate_interval, |r, waited| {
                    eprintln!(
                        "tuner calibrate: gate before {what}: waiting ({:.0} s): {}",
                        waited.as_secs_f64(),
                        crate::host::gate::summary_line(r)
                    )
                });
                let gate_line = crate::host::gate::summary_line(&g.report);
                let mut line = if g.decision != Decision::Pass {
                    CostRun::not_run(
                        k,
                        context,
                        attempt,
                        gate_line.clone(),
                        format!("not run: the gate said {gate_line}"),
                    )
                } else {
                    progress(&format!("{what}: running"));
                    let monitor = crate::host::gate::during::Monitor::start(&o.gate);
                    let argv = cost_args(o, context, rows);
                    let mut l = crate::sweep::arm::cost::run(&o.out, (k, context, attempt), &argv, &env, &names, rows)?;
                    let during = monitor.finish();
                    if l.ok
                        && let Some(why) = crate::analysis::rules::arm::contention(&during)
                    {
                        l.ok = false;
                        l.error = Some(why);
                    }
                    l.gate = gate_line;
                    l.contention = Some(during);
                    l
                };
                line.argv = line.argv.iter().map(|a| names.name(a)).collect();
                writeln!(costs, "{}", serde_json::to_string(&line)?)?;
                let contended = line.contention.as_ref().is_some_and(|c| c.contended());
                if line.ok {
                    done = Some(line.relative.clone());
                    break;
                }
                if !contended {
                    missing.push(format!("{what}: {}", line.error.clone().unwrap_or_else(|| "failed".into())));
                    break;
                }
                if attempt + 1 == COST_ATTEMPTS {
                    missing.push(format!("{what}: contention on every attempt"));
                }
            }
            if let Some(rel) = done {
                by_process.entry(k).or_default().push(policy::table::CostCurve { context, relative: rel });
            }
        }
    }
    let processes: Vec<Process> = by_process
        .into_iter()
        .filter_map(
            |(index, curves)| {
                if curves.len() == o.contexts.len() { Some(Process { index, curves }) } else { None }
            },
        )
        .collect();
    let table = crate::analysis::predict_error::table(&o.root).map_err(anyhow::Error::msg)?;
    let errors: Vec<f64> =
        table.iter().filter_map(|r| r.result.as_ref().ok()).flat_map(|c| c.arms.iter().map(|a| a.error_log)).collect();
    let model_error = crate::analysis::predict_error::rms(&errors);
    let pairs: Vec<(usize, Vec<policy::table::CostCurve>)> =
        processes.iter().map(|p| (p.index, p.curves.clone())).collect();
    let prediction = crate::analysis::predict::predict(&profile, &pairs, &o.widths, model_error)
        .map_err(|e| anyhow::anyhow!("no prediction: {e} (the lines in {COSTS_FILE} say why)"))?;
    let host_class_from = explained.host_from.clone().unwrap_or_default();
    let c = Calibration {
        kind: "calibrate".into(),
        schema: CALIBRATION_SCHEMA,
        date: crate::sweep::driver::utc_date(started_at_unix_ms),
        started_at_unix_ms,
        wall_s: (t0.elapsed().as_secs_f64() * 10.0).round() / 10.0,
        tuner_version: env!("CARGO_PKG_VERSION").into(),
        runtime: build,
        host: crate::host::identity::short_host(&id),
        host_class_from,
        drafter: o.drafter,
        device_class: explained.device_class,
        host_class: explained.host_class,
        target_quant: quant,
        model_class,
        threads: explained.threads,
        precision: explained.precision.clone(),
        target_quant_format: explained.target_quant.format,
        weight_formats: formats,
        verify_fingerprint: fingerprint,
        model: Named { name: crate::data::path_names::name_of(&o.target, &o.root, true), sha256: model_sha },
        drafter_settings: o.settings.clone(),
        drafter_model: match &o.drafter_model {
            Some(p) => Some(Named {
                name: crate::data::path_names::name_of(p, &o.root, true),
                sha256: crate::host::identity::sha256_file(p).map_err(|e| anyhow::anyhow!("{e}"))?,
            }),
            None => None,
        },
        profile: Named { name: profile_name, sha256: profile_sha },
        prompts: o.prompts.clone(),
        max_tokens: o.max_tokens,
        contexts: o.contexts.clone(),
        processes,
        missing,
        gate: o.gate.clone(),
        prediction,
    };
    std::fs::write(o.out.join(CALIBRATION_FILE), serde_json::to_string_pretty(&c)? + "\n")?;
    Ok(c)
}
