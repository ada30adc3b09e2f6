//! What an entry rests on (issue 54): a sweep of this build, a sweep of an
//! earlier build re-checked on this one, or a prediction for this host; and
//! the order the resolution takes them in.

mod common;

use common::*;
use policy::DrafterKind;
use policy::resolve::StepKind;
use policy::table::{Basis, RecordCheck, compile};
use policy::width::Width;

const PROFILE: &str = "profile = { name = \"profiles/m-ngram-3-4-sweep-48.jsonl\", sha256 = \"cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc\" }\n";
const COST: &str = "verify_cost = [{ context = 64, relative = [1.0, 1.1, 1.2] }]\n";

/// `entry`, with extra fields appended to its table.
fn with(entry: String, extra: &str) -> String {
    format!("{}\n{extra}\n", entry.trim_end())
}

fn predicted(host: &str, width: &str, interval: &str) -> String {
    let e = entry_on(host, "llama", PARAMS, "ngram", "cpu:x86_64-avx2", "q4_1", width, FP)
        .replace("ratio_interval = [1.4, 1.6]", &format!("ratio_interval = {interval}"));
    with(e, &format!("basis = \"predicted\"\n{PROFILE}{COST}"))
}

#[test]
fn a_re_checked_entry_is_fresh_for_the_checked_build_and_says_so() {
    let checked = with(
        entry("ngram", "cpu:x86_64-avx2", "q4_1", "5", OTHER_FP),
        &format!("check = {{ verify_fingerprint = \"{FP}\", record = \"records/r1-check\", date = 2026-02-01 }}"),
    );
    let t = table(&[checked]);
    let r = In::new(DrafterKind::Ngram, "q4_1").resolve(&t).unwrap();
    assert_eq!((decided(&r), r.width.map(Width::get)), (StepKind::Table, Some(5)));
    assert!(
        r.width_from.starts_with("measured, re-checked on this build (records/r1-check, 2026-02-01) for ngram"),
        "{}",
        r.width_from
    );
    // The check is for one build: under a third fingerprint the entry is stale again.
    let other = policy::Resolver { table: &t, fingerprint: &|_, _| "1111111111111111".to_string() };
    let r = In::new(DrafterKind::Ngram, "q4_1").resolve_with(&other).unwrap();
    assert_eq!(decided(&r), StepKind::Default, "{}", r.width_from);
    assert!(r.width_from.contains("is stale"), "{}", r.width_from);
}

#[test]
fn a_prediction_decides_only_above_classic_and_never_for_another_host() {
    // This host's prediction, wholly above 1.0: it decides, and says it is one.
    let t = table(&[predicted(HOST, "3", "[1.1, 1.6]")]);
    let r = In::new(DrafterKind::Ngram, "q4_1").resolve(&t).unwrap();
    assert_eq!((decided(&r), r.width.map(Width::get)), (StepKind::Table, Some(3)));
    assert!(r.width_from.starts_with("predicted for ngram"), "{}", r.width_from);
    assert!(
        r.width_from.contains("from the acceptance profile profiles/m-ngram-3-4-sweep-48.jsonl"),
        "{}",
        r.width_from
    );
    let auto = In::new(DrafterKind::Ngram, "q4_1").auto(&t);
    assert_eq!(auto.width.map(Width::get), Some(3), "{}", auto.width_from);
    // Its interval reaches 1.0: not used; the next rule (here the constant) decides, naming it.
    let t = table(&[predicted(HOST, "3", "[0.9, 1.6]")]);
    let r = In::new(DrafterKind::Ngram, "q4_1").resolve(&t).unwrap();
    assert_eq!(decided(&r), StepKind::Default, "{}", r.width_from);
    assert!(r.width_from.contains("the predicted entry"), "{}", r.width_from);
    // ... and another host's fresh measurement above 1.0 comes before the constant.
    let elsewhere = entry_on("amd-zen5", "llama", PARAMS, "ngram", "cpu:x86_64-avx2", "q4_1", "6", FP);
    let t = table(&[predicted(HOST, "3", "[0.9, 1.6]"), elsewhere]);
    let r = In::new(DrafterKind::Ngram, "q4_1").resolve(&t).unwrap();
    assert_eq!((decided(&r), r.width.map(Width::get)), (StepKind::Table, Some(6)), "{}", r.width_from);
    // Another host's prediction never stands in.
    let t = table(&[predicted("amd-zen5", "3", "[1.1, 1.6]")]);
    let r = In::new(DrafterKind::Ngram, "q4_1").resolve(&t).unwrap();
    assert_eq!(decided(&r), StepKind::Default, "{}", r.width_from);
    assert!(r.width_from.contains("a prediction, for its own host only"), "{}", r.width_from);
}

#[test]
fn the_compiler_refuses_malformed_bases_profiles_and_checks() {
    let bad = |e: String| {
        let text = format!("schema_version = 3\n\n{e}");
        compile("t.toml", &text, RecordCheck::Skip).unwrap_err().to_string()
    };
    let base = || entry("ngram", "cpu:x86_64-avx2", "q4_1", "5", FP);
    assert!(bad(with(base(), "basis = \"guessed\"")).contains("is not \"measured\" or \"predicted\""));
    assert!(bad(with(base(), &format!("basis = \"predicted\"\n{COST}"))).contains("names the acceptance profile"));
    assert!(bad(with(base(), &format!("basis = \"predicted\"\n{PROFILE}"))).contains("carries the cost curve"));
    assert!(bad(with(base(), PROFILE)).contains("is for predicted entries"));
    let outside = PROFILE.replace("profiles/m-ngram", "../m-ngram");
    assert!(bad(with(base(), &format!("basis = \"predicted\"\n{outside}{COST}"))).contains("under profiles/"));
    assert!(
        bad(with(base(), "check = { verify_fingerprint = \"xyz\", record = \"records/c\", date = 2026-02-01 }"))
            .contains("check.verify_fingerprint")
    );
    assert!(
        bad(with(
            base(),
            &format!("check = {{ verify_fingerprint = \"{FP}\", record = \"/etc/c\", date = 2026-02-01 }}")
        ))
        .contains("check.record")
    );
    // The good forms compile, with their basis.
    let t = table(&[predicted(HOST, "3", "[1.1, 1.6]")]);
    assert_eq!(t.entries[0].basis, Basis::Predicted);
    assert_eq!(table(&[base()]).entries[0].basis, Basis::Measured);
}
