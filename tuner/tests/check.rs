//! `tuner check`'s judgement (issue 54) on a committed sweep and the entry
//! it gave: the entry holds against its own record; a verify-cost curve
//! that moved, a speed outside the entry's interval and a neighbour
//! credibly faster are each refused; and the table edit adds one line.
use std::path::Path;

use policy::table::{RecordCheck, compile};
use tuner::analysis::check::{CURVE_TOLERANCE, arms_for, judge};

const RECORD: &str = "records/2026-12-07-cpu-x86_64-avx512vnni-amd-zen4-ngram-2";

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap()
}

/// The entry that sweep gave, as it stood in the table (2026-12-07, before a
/// re-sweep on a later build replaced it): the test judges the record
/// against its own entry, whatever the live table holds now.
const ENTRY: &str = r#"[[entry]]
drafter = "ngram"
device_class = "cpu:x86_64-avx512vnni"
host_class = "amd-zen4"
target_quant = "q4_1"
target_quant_format = "gguf"
threads = 2
model = { architecture = "llama", parameters = 134515008, file = "SmolLM2-135M-Instruct.Q4_1.gguf", sha256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53" }
prompts = { name = "prompts/sweep.jsonl", sha256 = "c8e867dabef149addfc929ffbfd5bd6ffec17e7bc09d1164bc092ae0587cd931" }
drafter_settings = { ngram_min = 3, ngram_max = 4 }
weight_formats = ["q4_1", "q8_0"]
width = 2
record = "records/2026-12-07-cpu-x86_64-avx512vnni-amd-zen4-ngram-2"
pooled = ["records/2026-12-07-cpu-x86_64-avx512vnni-amd-zen4-ngram-2"]
date = 2026-12-07
ratio = 1.182
ratio_interval = [1.033, 1.353]
emitted_per_verify = 2.314
host = "AMD EPYC (AuthenticAMD family 25 model 17 stepping 1, microcode 0x1000065), 2 threads available, Linux (Debian GNU/Linux 12), Linux 6.18.44-fc-v1300"
verify_fingerprint = "48c04c5bb7912fac"
verify_cost = [{ context = 64, relative = [1.0, 1.069, 1.219, 1.318, 1.494, 1.672, 1.932, 1.98, 2.266] }, { context = 2048, relative = [1.0, 1.149, 1.351, 1.447, 1.592, 1.742, 1.905, 2.043, 2.364] }]
check = { verify_fingerprint = "22cc44d6b1acc292", record = "records/2026-12-07-cpu-x86_64-avx512vnni-amd-zen4-ngram-check-2", date = 2026-12-07 }
note = "tuner propose: width 2 is the narrowest of the widths tied with the best (width 3; tied: 2, 3, 4, 5, 6, 7, 8) whose interval lies wholly above 1.0: 1.182 [1.033, 1.352]; the adaptive arm is not chosen: its interval 1.202 [0.887, 1.629] does not lie wholly above 1.0; 4 rounds (the unit of the interval), each 9 classic arm(s) a side x 1 burst(s) and one arm per width x 1 burst(s) over 12 prompts, widths [1, 2, 3, 4, 5, 6, 7, 8, 0]; pooled over 1 record(s): width 2: the pooled rule's choice"
"#;

fn table_text() -> String {
    format!("schema_version = 3\n\n{ENTRY}\n")
}

fn entry_and_summary() -> (policy::Entry, tuner::analysis::summary::Summary) {
    let t = compile(policy::TABLE_FILE, &table_text(), RecordCheck::Skip).unwrap();
    let e = t.entries.iter().find(|e| e.record == RECORD).expect("the Zen 4 SmolLM2 entry").clone();
    let raw = tuner::data::raw::read_raw(&root().join(RECORD).join("raw.jsonl")).unwrap();
    let s = tuner::analysis::summarize::summarize_with(&raw, false).unwrap();
    (e, s)
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
