//! A calibration record's contents (`tuner calibrate`, issue 54): what
//! `records/<date>-<device>-<host>-<drafter>[-<model>]-calibrate/calibration.json`
//! holds. The verify-cost processes measured on this host (their lines in
//! `costs.jsonl`, their logs under `logs/`), the profile they were replayed
//! on, every arm's prediction and the choice; `tuner propose` turns it into
//! a predicted entry. No absolute path of the measuring machine: models by
//! file name and sha256, the profile by its path under `profiles/`.
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::analysis::predict::Prediction;

/// The file in a calibration record folder.
pub const CALIBRATION_FILE: &str = "calibration.json";
/// The cost processes' lines.
pub const COSTS_FILE: &str = "costs.jsonl";
/// The format's version.
pub const CALIBRATION_SCHEMA: u32 = 1;
/// The largest calibration.json read.
pub const MAX_CALIBRATION_BYTES: u64 = 4 << 20;

/// A file named by its name (or path under the repository) and sha256.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Named {
    pub name: String,
    pub sha256: String,
}

/// The runtime build that measured.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Build {
    pub version: String,
    pub git_commit: String,
    /// `clean`, `dirty` or `unknown`.
    pub git_dirty: String,
}

/// One cost process's curves (every context it measured), or why none.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Process {
    pub index: usize,
    pub curves: Vec<policy::table::CostCurve>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Calibration {
    pub kind: String,
    pub schema: u32,
    pub date: String,
    pub started_at_unix_ms: u64,
    /// Seconds from start to the prediction (the processes and the replay).
    pub wall_s: f64,
    pub tuner_version: String,
    pub runtime: Build,
    /// The CPU (or GPU), threads, OS, as an entry's `host` says it.
    pub host: String,
    /// The CPU signature the host class came from.
    pub host_class_from: String,
    /// The key's parts, as the measuring runtime's `policy explain` gave them.
    pub drafter: policy::DrafterKind,
    pub device_class: String,
    pub host_class: String,
    pub target_quant: String,
    pub model_class: policy::ModelClass,
    pub threads: Option<usize>,
    /// The K-quant activation precision (`int8`, `int16`) where it changes
    /// anything; absent before the field (16 bits then) and elsewhere.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub precision: Option<String>,
    pub target_quant_format: Option<String>,
    pub weight_formats: Vec<String>,
    /// The measuring build's verify-path fingerprint for the key.
    pub verify_fingerprint: String,
    pub model: Named,
    pub drafter_settings: policy::DrafterSettings,
    pub drafter_model: Option<Named>,
    pub profile: Named,
    pub prompts: Named,
    pub max_tokens: usize,
    pub contexts: Vec<usize>,
    /// The cost processes that measured every context, in order.
    pub processes: Vec<Process>,
    /// The processes left out, each with why (never silently).
    pub missing: Vec<String>,
    pub gate: crate::host::gate::GateConfig,
    pub prediction: Prediction,
}

impl Calibration {
    /// The policy key the calibration predicts for.
    pub fn key(&self) -> Result<policy::PolicyKey, String> {
        Ok(policy::PolicyKey {
            drafter: self.drafter,
            device: policy::DeviceClass::parse(&self.device_class)?,
            host: policy::HostClass::parse(&self.host_class)?,
            quant: self.target_quant.clone(),
            model: self.model_class.clone(),
            threads: self.threads,
            concurrency: 1,
            precision: policy::key::key_precision(&self.weight_formats, self.precision.as_deref())?,
        })
    }
}

/// Reads a calibration record's file (size-capped, a regular file).
pub fn read(dir: &Path) -> Result<Calibration, String> {
    let path = dir.join(CALIBRATION_FILE);
    let bytes = crate::data::bounded::read_capped(&path, MAX_CALIBRATION_BYTES)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let c: Calibration = serde_json::from_slice(&bytes).map_err(|e| format!("{}: {e}", path.display()))?;
    if c.kind != "calibrate" || c.schema != CALIBRATION_SCHEMA {
        return Err(format!(
            "{}: kind {:?} schema {} is not a calibration of schema {CALIBRATION_SCHEMA}",
            path.display(),
            c.kind,
            c.schema
        ));
    }
    Ok(c)
}

/// Whether `dir` is a calibration record.
pub fn is_calibration(dir: &Path) -> bool {
    dir.join(CALIBRATION_FILE).is_file()
}
