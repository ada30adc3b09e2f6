//! `tuner check`'s judgement (issue 54) on a committed sweep and the entry
//! it gave: the entry holds against its own record; a verify-cost curve
//! that moved, a speed outside the entry's interval and a neighbour
//! credibly faster are each refused; and the table edit adds one line.
//! An `off` entry (the Zen 4 SmolLM2 bucket at four sequences) holds
//! against its own served sweep and is refused by a check that chose a
//! width.
use std::path::Path;

use policy::table::{RecordCheck, compile};
use tuner::analysis::check::{CURVE_TOLERANCE, arms_for, arms_of, judge};

const RECORD: &str = "records/2026-12-07-cpu-x86_64-avx512vnni-amd-zen4-ngram-2";

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap()
}

/// The entry that sweep gave, as it stood in the table (2026-12-07, before a
/// re-sweep on a later build replaced it): the test judges the record
/// against its own entry, whatever the live table holds now.
const ENTRY: &str = include_str!("fixtures/zen4-smollm2-ngram-2-entry.toml");

fn table_text() -> String {
    format!("schema_version = 3\n\n{ENTRY}\n")
}

/// The one entry of `entry` (a table's `[[entry]]` text) and the summary
/// of the committed sweep `record`.
fn entry_of(entry: &str, record: &str) -> (policy::Entry, tuner::analysis::summary::Summary) {
    let t = compile(policy::TABLE_FILE, &format!("schema_version = 3\n\n{entry}\n"), RecordCheck::Skip).unwrap();
    let e = t.entries.iter().find(|e| e.record == record).expect("the fixture's entry").clone();
    let raw = tuner::data::raw::read_raw(&root().join(record).join("raw.jsonl")).unwrap();
    let s = tuner::analysis::summarize::summarize_with(&raw, false).unwrap();
    (e, s)
}

fn entry_and_summary() -> (policy::Entry, tuner::analysis::summary::Summary) {
    entry_of(ENTRY, RECORD)
}

#[test]
fn an_entry_holds_against_the_sweep_it_came_from() {
    let (e, s) = entry_and_summary();
    let v = judge(&e, &s);
    assert!(v.holds(), "{:?}", v.failures);
    assert!(v.curve_points >= 16 && v.curve_mean_log.unwrap() < 0.01, "{v:?}");
}

#[test]
fn a_verify_pass_that_got_dearer_is_refused() {
    // The entry's curve as a build whose verify pass runs row by row would
    // show it against this one: every multi-row pass half as dear again.
    let (mut e, s) = entry_and_summary();
    for c in &mut e.verify_cost {
        for (i, x) in c.relative.iter_mut().enumerate().skip(1) {
            *x /= 1.0 + 0.5 * i as f64 / 8.0 + (CURVE_TOLERANCE * 1.5);
        }
    }
    let v = judge(&e, &s);
    assert!(v.failures.iter().any(|f| f.contains("the verify pass's cost moved")), "{:?}", v.failures);
}

#[test]
fn a_speed_outside_the_entry_and_a_faster_neighbour_are_refused() {
    let (mut e, s) = entry_and_summary();
    e.ratio_interval = [1.6, 1.9];
    e.ratio = 1.7;
    let v = judge(&e, &s);
    assert!(v.failures.iter().any(|f| f.contains("outside the entry's")), "{:?}", v.failures);
    // Width 1 is not in this sweep's tie set: the rule found wider widths credibly faster.
    let (mut e, s) = entry_and_summary();
    e.drafting = Some(policy::Drafting::Fixed(policy::Width::new(1).unwrap()));
    let v = judge(&e, &s);
    assert!(v.failures.iter().any(|f| f.contains("credibly faster")), "{:?}", v.failures);
}

#[test]
fn the_arms_are_the_entry_s_and_its_neighbours() {
    let w = |n| policy::Drafting::Fixed(policy::Width::new(n).unwrap());
    let codes = |d| arms_for(d).iter().map(|a| a.code()).collect::<Vec<_>>();
    assert_eq!(codes(w(2)), [1, 2, 3]);
    assert_eq!(codes(w(1)), [1, 2]);
    assert_eq!(codes(policy::Drafting::Adaptive { max: policy::Width::new(8).unwrap() }), [7, 8, 0]);
}

#[test]
fn the_check_line_is_one_line_added_and_then_replaced() {
    let (e, _) = entry_and_summary();
    // The committed table without its check lines: the entry starts unchecked
    // whatever `tuner check` last wrote there.
    let old: String = table_text().lines().filter(|l| !l.starts_with("check = ")).map(|l| format!("{l}\n")).collect();
    let line = tuner::output::check::check_line("0123456789abcdef", "records/x-check", "2026-12-07");
    let new = tuner::output::check::set_check(&old, &e.key, &line).unwrap();
    assert_eq!(new.lines().count(), old.lines().count() + 1);
    let d = tuner::output::propose::diff(&old, &new, "t");
    assert_eq!(d.lines().filter(|l| l.starts_with('+') && !l.starts_with("+++")).count(), 1, "{d}");
    let t = compile("t", &new, RecordCheck::Skip).unwrap();
    let c = t.exact(&e.key).unwrap().check.clone().unwrap();
    assert_eq!((c.verify_fingerprint.as_str(), c.record.as_str()), ("0123456789abcdef", "records/x-check"));
    // A second check replaces the line.
    let line2 = tuner::output::check::check_line("fedcba9876543210", "records/y-check", "2026-12-08");
    let newer = tuner::output::check::set_check(&new, &e.key, &line2).unwrap();
    assert_eq!(newer.lines().count(), new.lines().count());
    assert!(!newer.contains("records/x-check") && newer.contains("records/y-check"));
}

/// The bucket at four sequences that sweep gave (off), as it stood in the
/// table on 2026-12-07.
const OFF_ENTRY: &str = include_str!("fixtures/zen4-smollm2-ngram-c4-entry.toml");
const OFF_RECORD: &str = "records/2026-12-07-cpu-x86_64-avx512vnni-amd-zen4-ngram-c4";

fn off_entry_and_summary() -> (policy::Entry, tuner::analysis::summary::Summary) {
    let (e, s) = entry_of(OFF_ENTRY, OFF_RECORD);
    assert!(e.drafting.is_none() && e.key.concurrency == 4);
    (e, s)
}

#[test]
fn an_off_entry_holds_against_its_own_sweep_and_is_checked_at_widths_1_and_2() {
    let (e, s) = off_entry_and_summary();
    assert_eq!(arms_of(None).iter().map(|a| a.code()).collect::<Vec<_>>(), [1, 2]);
    let v = judge(&e, &s);
    assert!(v.holds(), "{:?}", v.failures);
    assert!(v.curve_points >= 8 && v.curve_mean_log.unwrap() < 0.01, "{v:?}");
    // The verify pass's cost moving refuses an off entry as any other.
    let (mut e, s) = off_entry_and_summary();
    for c in &mut e.verify_cost {
        for x in c.relative.iter_mut().skip(1) {
            *x /= 1.0 + 2.0 * CURVE_TOLERANCE;
        }
    }
    let v = judge(&e, &s);
    assert!(v.failures.iter().any(|f| f.contains("the verify pass's cost moved")), "{:?}", v.failures);
}

#[test]
fn an_off_entry_whose_check_chose_a_width_is_refused() {
    // The idle sweep chose width 2: as the check of an off entry, it refutes the off.
    let (mut e, s) = entry_and_summary();
    e.drafting = None;
    let v = judge(&e, &s);
    assert!(
        v.failures.iter().any(|f| f.starts_with("the entry is off, but the check chose width 2")),
        "{:?}",
        v.failures
    );
}

/// The Zen 4 Gemma 3 270M entry at int16 activations (adaptive up to 8),
/// as its sweep of 2026-12-07 gave it.
const ADAPTIVE_ENTRY: &str = include_str!("fixtures/zen4-gemma-int16-adaptive-entry.toml");
const ADAPTIVE_RECORD: &str = "records/2026-12-07-cpu-x86_64-avx512vnni-amd-zen4-ngram-7";

#[test]
fn an_adaptive_entry_holds_against_its_own_sweep_where_a_fixed_width_is_best() {
    let (e, s) = entry_of(ADAPTIVE_ENTRY, ADAPTIVE_RECORD);
    assert!(matches!(e.drafting, Some(policy::Drafting::Adaptive { .. })));
    // The sweep's best arm is a fixed width, and the adaptive arm is tied with it.
    assert!(s.decision.best_width.is_some_and(|b| b.width().is_some()), "{:?}", s.decision.best_width);
    assert!(!s.decision.tied.iter().any(|a| a.width().is_none()), "the decision's tie list is fixed widths");
    let v = judge(&e, &s);
    assert!(v.holds(), "{:?}", v.failures);
    // A check whose own decision went to a fixed width still holds the
    // adaptive entry by the arm's paired tie test against the best.
    let mut fixed = s.clone();
    fixed.decision.width = fixed.decision.best_width;
    let v = judge(&e, &fixed);
    assert!(v.holds(), "{:?}", v.failures);
    // And refuses it where that test says the adaptive arm is credibly slower.
    let adaptive = fixed.widths.iter_mut().find(|x| x.width.width().is_none()).unwrap();
    adaptive.tie.as_mut().unwrap().tied = false;
    let v = judge(&e, &fixed);
    assert!(
        v.failures.iter().any(|f| f.starts_with("the adaptive arm is not the check's best nor tied with it: width 8")),
        "{:?}",
        v.failures
    );
}

#[test]
fn a_check_that_is_not_a_measurement_is_refused_whatever_its_speed() {
    // The entry's own sweep, with an arm declined, then with drift: the
    // speed tests pass, the check still says nothing.
    let (e, mut s) = entry_and_summary();
    assert!(judge(&e, &s).holds());
    s.widths[0].not_a_measurement = Some("every request declined".into());
    let v = judge(&e, &s);
    assert!(v.failures.iter().any(|f| f.contains("is not a measurement: every request declined")), "{:?}", v.failures);
    let (e, mut s) = entry_and_summary();
    let width = Some(s.widths[0].width);
    s.widths[0].differences.push(tuner::analysis::summary::Difference {
        arm: 3,
        width,
        bracket: None,
        prompt_id: "p1".into(),
        burst: 0,
        first_differing_token: 5,
        text_identical: false,
    });
    let v = judge(&e, &s);
    assert!(
        v.failures.iter().any(|f| f.contains("differs from classic decoding (1 completion(s))")),
        "{:?}",
        v.failures
    );
    let (e, mut s) = entry_and_summary();
    s.data_problems.push(tuner::analysis::summary::DataProblem {
        line: Some(7),
        arm: Some(3),
        what: "a duplicated request".into(),
        remedy: "none".into(),
    });
    let v = judge(&e, &s);
    assert!(v.failures.iter().any(|f| f.contains("raw data has 1 problem(s)")), "{:?}", v.failures);
    let (e, mut s) = entry_and_summary();
    s.drift = true;
    s.drift_survival = None;
    let v = judge(&e, &s);
    assert!(v.failures.iter().any(|f| f.contains("drifted and its decision does not survive it")), "{:?}", v.failures);
}
