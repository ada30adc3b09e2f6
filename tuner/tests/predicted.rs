//! `tuner propose` of a calibration (issue 54): a predicted entry is
//! written where no measurement of the key stands, replaces a stale one
//! (and says so), is refused over a fresh one, and is refused for a dirty
//! build. The calibration is a real one (`tests/fixtures/calibrate`, a
//! `tuner calibrate` of the default model on a Zen 4 host).
use std::path::{Path, PathBuf};

use policy::table::{Basis, RecordCheck, compile};
use tuner::analysis::rules::{Allow, Refusal};
use tuner::output::propose::ProposeError;

const RECORD: &str = "records/2026-12-07-cpu-x86_64-avx512vnni-amd-zen4-ngram-2";
const PROFILE: &str = "profiles/SmolLM2-135M-Instruct.Q4_1-ngram-3-4-sweep-48.jsonl";

/// The Zen 4 SmolLM2 entry of `RECORD`, as the table held it on 2026-12-07.
const OLD_ENTRY: &str = include_str!("fixtures/zen4-smollm2-ngram-2-entry.toml");

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap()
}

/// A scratch repository: the table with only the Zen 4 SmolLM2 entry (its
/// fingerprint replaced by `fp`, or the entry left out), its record folder,
/// the profile, and the calibration under records/ (clean or dirty).
fn scratch(fp: Option<&str>, clean: bool) -> (tempfile::TempDir, PathBuf) {
    scratch_with(fp, clean, |_| {})
}

/// [`scratch`], the calibration edited by `edit` before it is written.
fn scratch_with(fp: Option<&str>, clean: bool, edit: impl Fn(&mut serde_json::Value)) -> (tempfile::TempDir, PathBuf) {
    let d = tempfile::tempdir().unwrap();
    let root = d.path();
    std::fs::create_dir_all(root.join("policy")).unwrap();
    std::fs::create_dir_all(root.join(RECORD)).unwrap();
    std::fs::create_dir_all(root.join("profiles")).unwrap();
    std::fs::copy(repo().join(PROFILE), root.join(PROFILE)).unwrap();
    // The entry as it stood when its calibration was made (a re-sweep on a
    // later build replaced it in the live table).
    let text = format!("schema_version = 3\n\n{OLD_ENTRY}\n");
    let t = compile(policy::TABLE_FILE, &text, RecordCheck::Skip).unwrap();
    let e = t.entries.iter().find(|e| e.record == RECORD).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let start = e.line.unwrap() - 1;
    let end = (start + 1..lines.len()).find(|&i| lines[i].starts_with("[[entry]]")).unwrap_or(lines.len());
    let mut table = String::from("schema_version = 3\n\n");
    if let Some(fp) = fp {
        let block = lines[start..end].join("\n");
        table.push_str(&block.replace(&e.verify_fingerprint, fp));
        table.push('\n');
    }
    std::fs::write(root.join(policy::TABLE_FILE), table).unwrap();
    // The calibration, under this build's fingerprint.
    let cal_dir = root.join("records/2026-12-07-cpu-x86_64-avx512vnni-amd-zen4-ngram-calibrate");
    std::fs::create_dir_all(&cal_dir).unwrap();
    let mut c: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(repo().join("tuner/tests/fixtures/calibrate/calibration.json")).unwrap(),
    )
    .unwrap();
    edit(&mut c);
    let device = policy::DeviceClass::parse(c["device_class"].as_str().unwrap()).unwrap();
    let formats: Vec<String> = serde_json::from_value(c["weight_formats"].clone()).unwrap();
    c["verify_fingerprint"] = runtime::policy::verify_fingerprint(&device, Some(&formats)).into();
    c["runtime"]["git_dirty"] = if clean { "clean" } else { "dirty" }.into();
    // The fixture ran under a loosened gate (a shared host); the default one here.
    c["gate"]["cpu_threshold_pct"] = 20.0.into();
    c["gate"]["host_cpu_threshold_pct"] = 50.0.into();
    std::fs::write(cal_dir.join("calibration.json"), serde_json::to_string(&c).unwrap()).unwrap();
    (d, cal_dir)
}

fn this_fp() -> String {
    let c: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(repo().join("tuner/tests/fixtures/calibrate/calibration.json")).unwrap(),
    )
    .unwrap();
    let device = policy::DeviceClass::parse(c["device_class"].as_str().unwrap()).unwrap();
    let formats: Vec<String> = serde_json::from_value(c["weight_formats"].clone()).unwrap();
    runtime::policy::verify_fingerprint(&device, Some(&formats))
}

fn propose(dir: &Path, dry: bool) -> Result<tuner::output::predicted::PredictedProposal, ProposeError> {
    tuner::output::predicted::propose(dir, None, dry, Allow::default())
}

#[test]
fn a_prediction_is_written_where_no_measurement_stands() {
    let (d, cal) = scratch(None, true);
    let p = propose(&cal, false).unwrap();
    assert!(p.written && p.replaced.is_none());
    let text = std::fs::read_to_string(d.path().join(policy::TABLE_FILE)).unwrap();
    let t = compile(policy::TABLE_FILE, &text, RecordCheck::Under(d.path())).unwrap();
    let e = &t.entries[0];
    assert_eq!(e.basis, Basis::Predicted);
    assert_eq!(e.profile.as_ref().unwrap().name, PROFILE);
    assert!(!e.verify_cost.is_empty() && e.ratio_interval[0] <= e.ratio && e.ratio <= e.ratio_interval[1]);
    assert!(text.contains("basis = \"predicted\"") && text.contains("tuner calibrate (a prediction"), "{text}");
}

#[test]
fn a_fresh_measurement_stands_and_a_stale_one_is_replaced_and_named() {
    let (_d, cal) = scratch(Some(&this_fp()), true);
    match propose(&cal, true) {
        Err(ProposeError::Refused(Refusal::MeasurementStands { .. })) => {}
        other => panic!("expected the measurement to stand: {other:?}"),
    }
    let (_d, cal) = scratch(Some("0000000000000000"), true);
    let p = propose(&cal, true).unwrap();
    let r = p.replaced.unwrap();
    assert!(r.contains("replaces the measured entry") && r.contains("stale on this build"), "{r}");
}

#[test]
fn a_dirty_build_is_refused_unless_allowed() {
    let (_d, cal) = scratch(None, false);
    match propose(&cal, true) {
        Err(ProposeError::Refused(Refusal::DirtyBuild { .. })) => {}
        other => panic!("expected a dirty-build refusal: {other:?}"),
    }
    let allowed =
        tuner::output::predicted::propose(&cal, None, true, Allow { dirty: true, ..Allow::default() }).unwrap();
    assert!(allowed.overridden.iter().any(|o| o.starts_with("--allow-dirty")));
}

#[test]
fn a_calibration_under_a_looser_gate_is_refused_unless_allowed() {
    let (_d, cal) = scratch(None, true);
    let path = cal.join("calibration.json");
    let mut c: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    c["gate"]["host_cpu_threshold_pct"] = 400.0.into();
    std::fs::write(&path, serde_json::to_string(&c).unwrap()).unwrap();
    match propose(&cal, true) {
        Err(ProposeError::Refused(Refusal::LooserGate(_))) => {}
        other => panic!("expected a looser-gate refusal: {other:?}"),
    }
    let allowed =
        tuner::output::predicted::propose(&cal, None, true, Allow { loose_gate: true, ..Allow::default() }).unwrap();
    assert!(allowed.overridden.iter().any(|o| o.starts_with("--allow-loose-gate")));
}

#[test]
fn a_k_quant_prediction_is_keyed_at_the_precision_it_was_calibrated_at() {
    // A K-quant target calibrated at the runtime's default, int8: an entry
    // without a precision would read as 16-bit (the table's rule for entries
    // older than the 8-bit path), an int8 prediction under an int16 key.
    for p in ["int8", "int16"] {
        let (d, cal) = scratch_with(None, true, |c| {
            c["weight_formats"] = serde_json::json!(["q4_k", "q6_k"]);
            c["precision"] = p.into();
        });
        propose(&cal, false).unwrap();
        let text = std::fs::read_to_string(d.path().join(policy::TABLE_FILE)).unwrap();
        let t = compile(policy::TABLE_FILE, &text, RecordCheck::Under(d.path())).unwrap();
        assert_eq!(t.entries[0].key.precision.map(|x| x.as_str()), Some(p), "{text}");
    }
}
